"""Stack files: the typed model of a fleet, loading, and validation with file:line errors.

Validation runs in phases and one run reports every problem it finds, each as
``file:line: key: problem`` with a hint:

1. shape: YAML syntax, unknown keys (with "did you mean"), types, ranges, required keys;
2. cross-pool: pool names and rack hosts unique;
3. catalog: GPU and instance-type names, real regions, the instance type offered in the
   region; then the checks the caller adds (``pool_checks``, ``stack_checks``): what each
   provider can do for a pool, whether the software fits, which lives above this module
   (``stacks.load`` runs them all).

Phases 2 and 3 run on the parts that passed the first (each pool, each top-level key), even when
others did not; a check that reads a part that failed is skipped, as its findings would follow
from the problem already reported.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from gpufleet import netnames
from gpufleet.catalog.images import SLURM_IMAGE
from gpufleet.config import SiteCosts
from gpufleet.errors import InputError, SpecError, SpecErrors, did_you_mean
from gpufleet.limits import MAX_EPOCHS, MAX_POOL_NODES, MAX_POOLS, MAX_TOKENS
from gpufleet.providers import CLOUDS, PROVIDERS
from gpufleet.userfiles import SMALL_BYTES, FileRefused, read_text
from gpufleet.validation import validate_located
from gpufleet.yamlsrc import Located, dotted, load_file, load_text

Provider = Literal[PROVIDERS]  # type: ignore[valid-type]  # the tuple's names, one by one
Interconnect = Literal["efa", "infiniband-hdr", "infiniband-ndr", "gpudirect-tcpx", "roce",
                       "10gbe", "25gbe", "100gbe"]
Precision = Literal["fp32", "tf32", "fp16", "bf16", "fp8", "mixed"]

# Cluster and pool names become parts of every cloud's resource names: GCP's (RFC 1035 labels) are
# the strictest, so a name starts with a letter and does not end in "-"
_NAME = re.compile(r"^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$")
_TTL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([mhdw])\s*$")
_TTL_UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 604800}


class HintedValueError(ValueError):
    """A ValueError from a validator that carries a hint for the user."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


# Bounds on what one stack may ask: far above real fleets, so that a typo (nodes: 100000) or a
# generated file gone wrong is refused with its line instead of planned for minutes.
MAX_TTL = dt.timedelta(days=366)  # a lease, not a lifetime: renew it with another `up`


def parse_ttl(value: str) -> dt.timedelta:
    m = _TTL.match(str(value))
    if not m:
        raise HintedValueError(f"{value!r} is not a duration", "write a number and a unit: 90m, 8h, 2d, 1w")
    seconds = float(m.group(1)) * _TTL_UNITS[m.group(2)]
    if seconds <= 0:
        raise HintedValueError(f"{value!r} must be longer than zero", "for example 8h")
    if seconds > MAX_TTL.total_seconds():
        raise HintedValueError(f"{value!r} is longer than {MAX_TTL.days} days", "a ttl is a lease: e.g. 30d, and "
                               "`gpufleet up` again to extend it")
    return dt.timedelta(seconds=seconds)


def _valid_name(v: str, kind: str) -> str:
    if not _NAME.match(v):
        raise HintedValueError(f"{v!r} is not a valid {kind} name",
                               "use lowercase letters, digits and '-', starting with a letter and not ending in "
                               "'-' (max 40)")
    return v


def check_cluster_name(v: str) -> str:
    """A cluster name given on the command line (``--cluster``): the rule of stack names, as it names
    the cluster's resources and goes into their ``gpufleet:cluster`` tag. InputError (exit 2)."""
    try:
        return _valid_name(v, "cluster")
    except HintedValueError as e:
        raise InputError(f"--cluster {e}", e.hint) from None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def _mount_point(v: str) -> str:
    if not re.match(r"^/[A-Za-z0-9._/-]*$", v) or "/../" in f"{v}/" or "//" in v:
        raise HintedValueError(f"{v!r} is not an absolute mount point", "e.g. /data or /fsx (letters, digits, "
                               "'.', '_', '-' and '/')")
    return v


class Storage(_Strict):
    type: Literal["lustre", "nfs", "local-nvme"]
    mount: Annotated[str, AfterValidator(_mount_point)] = "/data"
    capacity_tib: float | None = Field(default=None, gt=0, le=100_000)
    throughput_mbps_per_tib: int | None = Field(default=None, gt=0, le=100_000, strict=True)
    # Lustre: MGS NIDs and fsname for on-prem; NFS: server and export
    mgs_nids: list[str] | None = None
    fsname: str | None = None
    server: str | None = None
    export: str | None = None

    @model_validator(mode="after")
    def _check(self):
        if self.type == "local-nvme" and (self.capacity_tib or self.throughput_mbps_per_tib):
            raise HintedValueError("local-nvme takes only `mount`: its size comes from the instance type")
        return self

    def read_mbps(self) -> float | None:
        """Aggregate read throughput this storage offers, when the file says."""
        if self.type == "lustre" and self.capacity_tib and self.throughput_mbps_per_tib:
            return self.capacity_tib * self.throughput_mbps_per_tib
        return None


def _address(v: str) -> str:
    """An IP address or a DNS host name (RFC 1123), nothing a shell or SSH would read otherwise (the
    same check as for what nodes and the registry say: ``netnames``)."""
    v = v.strip()
    if netnames.is_address(v):
        return str(ipaddress.ip_address(v))
    if not netnames.is_host_name(v):  # 999.1.1.1 is no address and no name
        raise HintedValueError(f"{v!r} is not an IP address or a host name", "e.g. 10.0.0.11 or gpu01.dc1.example.com")
    return v


def _ssh_path(v: str) -> str:
    """A local path ssh and salt-ssh take as one word: salt-ssh (Salt 3008, client/ssh/shell.py) pastes
    ``-o IdentityFile=PATH`` and ``-o UserKnownHostsFile=PATH`` into a line it splits as a shell would
    (shlex), and ssh expands % tokens and ${VAR} in them, so whitespace, quotes, \\, % and $ cannot pass."""
    if not v or re.search(r"[\s'\"\\%$]", v) or any(ord(c) < 32 or ord(c) == 127 for c in v):
        raise HintedValueError(f"{v!r} is not a path ssh and salt-ssh can take as written (no spaces, quotes, "
                               "\\, % or $)", "move or link the file to a plain path, e.g. ~/.ssh/rack_ed25519")
    return v


class Host(_Strict):
    address: Annotated[str, AfterValidator(_address)]
    port: int = Field(default=22, ge=1, le=65535, strict=True)
    user: str = "root"
    key: Annotated[str, AfterValidator(_ssh_path)] | None = None

    @field_validator("user")
    @classmethod
    def _user(cls, v: str) -> str:
        return _linux_user(v)


def _linux_user(v: str) -> str:
    if not re.match(r"^[a-z_][a-z0-9_-]{0,31}$", v):
        raise HintedValueError(f"{v!r} is not a valid Linux user name", "e.g. ubuntu, root or azureuser")
    return v


def _cidr(v: str) -> str:
    """A network block written as its network address and prefix (10.0.0.0/8, not 10.0.0.0/0)."""
    try:
        net = ipaddress.ip_network(v.strip(), strict=False)
    except ValueError:
        raise HintedValueError(f"{v!r} is not a CIDR block", "write an address and prefix, e.g. 203.0.113.0/24") from None
    if str(net.network_address) != str(ipaddress.ip_interface(v.strip()).ip):
        addr = ipaddress.ip_interface(v.strip()).ip
        natural = next((p for p in (8, 16, 24, 32) if p >= net.prefixlen and
                        int(addr) & ((1 << (32 - p)) - 1) == 0), None) if addr.version == 4 else None
        raise HintedValueError(f"{v} has bits set past its /{net.prefixlen} prefix: it would mean {net}",
                               f"did you mean {addr}/{natural}?" if natural else f"write the block as {net}")
    return str(net)


def _ipv4_cidr(v: str) -> str:
    v = _cidr(v)
    if ipaddress.ip_network(v).version != 4:
        raise HintedValueError(f"{v} is an IPv6 block: the networks gpufleet creates are IPv4 only, so no IPv6 "
                               "client could reach a node through it", "give the IPv4 blocks you connect from")
    return v


def internet_wide(cidrs: list[str]) -> list[str]:
    """The public address space the blocks open, where it is Internet-wide: any public block of more
    than 2^24 addresses after merging neighbours (0.0.0.0/0, or two /1s, is the whole Internet)."""
    public = [n for n in map(ipaddress.ip_network, cidrs) if not n.is_private]
    return [str(n) for n in ipaddress.collapse_addresses(public) if n.prefixlen < 8]


Metadata = Literal["root", "all-users"]


class Access(_Strict):
    """Who may reach the nodes from outside the cluster, and how."""

    # empty: no SSH from outside the cluster's own network
    ssh_cidrs: list[Annotated[str, AfterValidator(_ipv4_cidr)]] = []
    ssh_from_internet: bool = False  # the explicit consent an Internet-wide block needs
    public_key: str | None = None  # a path to an OpenSSH public key, or the key itself
    user: str = "ubuntu"
    # how `gpufleet ssh` / `ssh-config` reach the cloud nodes, and what the stack creates for it:
    # cloud: the cloud's private route (AWS Session Manager, GCP IAP TCP forwarding, Azure Bastion);
    # bastion: through the first node of `bastion_pool` (ProxyJump); direct: to the nodes' own
    # addresses (a VPN, or ssh_cidrs with public_ip). Rack hosts are always reached directly.
    via: Literal["cloud", "bastion", "direct"] = "cloud"
    bastion_pool: str | None = None  # the pool whose first node is the jump host (via: bastion)
    # who on a cloud node may ask the cloud's metadata service (IMDS, GCP's metadata server, Azure's IMDS
    # and WireServer) for the node's identity: root (and what root starts), or all-users (job users too,
    # for jobs that need the node's role; that role reads the pool's configuration, the munge key among
    # it, so they can become root on the cluster). A pool's own `metadata` wins.
    metadata: Metadata = "root"

    @model_validator(mode="after")
    def _internet(self):
        wide = internet_wide(self.ssh_cidrs)
        if wide and not self.ssh_from_internet:
            raise HintedValueError(f"ssh_cidrs open SSH to the whole Internet ({', '.join(wide)})",
                                   "give the blocks you connect from (e.g. your office's /24); if you really mean "
                                   "it, say so with ssh_from_internet: true (`plan` will flag it)")
        if self.via == "bastion" and not self.bastion_pool:
            raise HintedValueError("via: bastion needs bastion_pool: the pool whose first node is the jump host",
                                   "add bastion_pool: NAME (a small pool with public_ip: true), or use via: cloud")
        if self.bastion_pool and self.via != "bastion":
            raise HintedValueError(f"bastion_pool: {self.bastion_pool} is used only with via: bastion",
                                   "add via: bastion, or drop bastion_pool")
        if self.via == "bastion" and not self.ssh_cidrs:
            raise HintedValueError("via: bastion needs ssh_cidrs: the blocks that may reach the bastion",
                                   "e.g. ssh_cidrs: [203.0.113.0/24] (your office's block)")
        return self

    @field_validator("user")
    @classmethod
    def _user(cls, v: str) -> str:
        return _linux_user(v)


class Network(_Strict):
    """Address space for the networks gpufleet creates (ignored for pools that name existing ones)."""

    cidr: str = "10.64.0.0/16"

    @field_validator("cidr")
    @classmethod
    def _c(cls, v: str) -> str:
        v = _cidr(v)
        net = ipaddress.ip_network(v)
        if not net.is_private or net.prefixlen > 20:
            raise HintedValueError(f"{v} must be a private block of /20 or larger",
                                   "each region gets a /20 from it for its subnets, e.g. 10.64.0.0/16")
        return v


MAX_GB = 100_000_000  # 100 PB: more than a cluster moves, a bound against typos


class Data(_Strict):
    """What the stack moves, for the data-transfer estimate of `plan` (GB, in each cloud region the
    stack runs in). Left out: no traffic is estimated, and the plan says so."""

    dataset_gb: float = Field(default=0, ge=0, le=MAX_GB)  # read once into each region
    # where the dataset comes from: the same region (free), another region of the same cloud (billed
    # between regions), or the Internet (free in, but through the NAT gateway, which bills per GB)
    dataset_from: Literal["same-region", "other-region", "internet"] = "same-region"
    checkpoint_gb: float = Field(default=0, ge=0, le=MAX_GB)  # one checkpoint's size
    checkpoints: int = Field(default=0, ge=0, le=1_000_000, strict=True)  # how many over the TTL
    checkpoint_copies: int = Field(default=0, ge=0, le=10, strict=True)  # other regions each one is copied to
    egress_gb: float = Field(default=0, ge=0, le=MAX_GB)  # results and logs downloaded out of the cloud


class Salt(_Strict):
    """Which Salt formulas a pool's nodes get (default: all that apply) and pillar overrides."""

    states: list[str] | None = None  # formula names, checked by the caller's stack checks
    pillar: dict[str, Any] = {}


class Software(_Strict):
    """What the Salt states install on every GPU node of the stack."""

    driver: str = "570"  # NVIDIA driver branch
    open_kernel_modules: bool | None = None  # None: open modules from Turing on (NVIDIA's recommendation)
    cuda: str = "12.8"
    nccl: str = "2.26.2"
    container_runtime: Literal["docker", "containerd", "none"] = "docker"
    frameworks: dict[Literal["pytorch", "tensorflow", "jax"], str] = {"pytorch": "2.7.1"}
    monitoring: bool = True

    @field_validator("driver")
    @classmethod
    def _driver(cls, v: str) -> str:
        v = str(v)
        if not re.match(r"^\d{3}$", v):
            raise HintedValueError(f"{v!r} is not a driver branch", "give the branch number, e.g. 570")
        return v

    @field_validator("cuda", "nccl", mode="before")
    @classmethod
    def _version(cls, v) -> str:
        v = str(v)
        if not re.match(r"^\d+\.\d+(\.\d+)?$", v):
            raise HintedValueError(f"{v!r} is not a version", "e.g. cuda: '12.8', nccl: '2.26.2'")
        return v

    @field_validator("frameworks", mode="before")
    @classmethod
    def _fw(cls, v):
        return {k: str(x) for k, x in (v or {}).items()} if isinstance(v, dict) else v


# The shortest HealthCheckInterval: slurmd gives its HealthCheckProgram 60 s (max_wait in
# run_script_health_check, src/slurmd/slurmd/slurmd.c, Slurm 22.05.8), and gpufleet's program keeps its run
# inside 45 (salt/slurm/files/gpufleet-slurm-health, BUDGET_S); upstream's own HealthCheckTimeout (26.05,
# commit 74979c20b5) must likewise be less than HealthCheckInterval
HEALTH_CHECK_MIN_S = 60


class Slurm(_Strict):
    """Slurm on the stack's nodes: slurmctld on the pool with ``role: controller`` (one node), slurmd
    with the GPUs as GRES on every other pool's nodes, one partition per pool (the first the default)."""

    # cgroup tracking and confinement of jobs (false where the OS's Slurm has no cgroup v2: Ubuntu 22.04's
    # 21.08, which plan and configure refuse with cgroups on)
    cgroups: bool = True
    health_check_interval: int = Field(default=300, ge=0, le=86_400)  # seconds between node checks; 0: none
    # job accounting (sacct, sreport): slurmdbd and MariaDB beside slurmctld on the controller
    accounting: bool = False

    @field_validator("health_check_interval")
    @classmethod
    def _interval(cls, v: int) -> int:
        if 0 < v < HEALTH_CHECK_MIN_S:
            raise HintedValueError(
                f"health_check_interval {v} is shorter than one check may take: slurmctld asks for the next "
                f"without waiting for the last, whose run may take {HEALTH_CHECK_MIN_S} s (slurmd's limit)",
                f"0 (no checks) or {HEALTH_CHECK_MIN_S} or more, e.g. 300 (the default)")
        return v


# The shortest health.interval: each watch runs the node's passive checks (nvidia-smi and the fabric's
# counters take seconds on an 8-GPU node); a shorter one would have the next start before the last ends
HEALTH_WATCH_MIN_S = 15


class Health(_Strict):
    """How a pool's nodes are watched and repaired (README, "Health"): the gate a node passes before it
    takes work, how often the node agent runs the passive checks, and what a fault leads to."""

    # the checks a new node passes before it takes work: the quick node checks, or DCGM's diagnostic at
    # level 1 to 3 after them (level 3 takes about half an hour on 8 GPUs: `dcgmi diag` documentation)
    gate: Literal["quick", "dcgm1", "dcgm2", "dcgm3"] = "quick"
    interval: int = Field(default=60, ge=HEALTH_WATCH_MIN_S, le=86_400, strict=True)  # seconds between watches
    # replace: a new node through the pool's own request, once the faulty one is drained and its jobs
    # ended; isolate: drained and named, left in place; none: the fault is reported only
    on_fault: Literal["replace", "isolate", "none"] = "isolate"
    max_replacements: int = Field(default=2, ge=0, le=1_000, strict=True)  # per pool per hour
    replace_reserved: bool = False  # nodes on reservations or Capacity Blocks are isolated unless true
    # seconds between a node's active checks (DCGM's diagnostic at level 2 and the single-node NCCL all-reduce),
    # run only while the node is idle (README, "Health"); 0: never
    active_every: int = Field(default=86_400, ge=0, le=30 * 86_400, strict=True)
    # an elastic pool (nodes: {min, max}) with Slurm: `heal` adds a node when jobs of its partition have waited
    # for resources this long, and removes a node idle this long (down to min)
    scale_up_after: int = Field(default=300, ge=HEALTH_WATCH_MIN_S, le=86_400, strict=True)  # seconds
    scale_down_after: int = Field(default=1800, ge=HEALTH_WATCH_MIN_S, le=7 * 86_400, strict=True)  # seconds

    @model_validator(mode="after")
    def _active_after_the_watch(self):
        if 0 < self.active_every < self.interval:
            raise HintedValueError(f"health.active_every {self.active_every} is shorter than health.interval "
                                   f"{self.interval}: the active checks run from the watch",
                                   f"0 (never) or {self.interval} or more, e.g. 86400 (a day, the default)")
        return self


class Size(_Strict):
    """An elastic pool's bounds (``nodes: {min, max}``): `up` brings up ``min`` nodes, `gpufleet scale` (and
    `heal` with Slurm) keeps the pool anywhere between the two."""

    min: int = Field(ge=0, le=MAX_POOL_NODES, strict=True)
    max: int = Field(ge=1, le=MAX_POOL_NODES, strict=True)


def _nodes(v):
    """``nodes:`` as written: an integer (a fixed pool), or ``{min, max}`` (an elastic one), checked here so
    that a problem is named at the key's own line (a union's errors would name each branch)."""
    if isinstance(v, dict):
        extra = sorted(set(v) - {"min", "max"}, key=str)
        if extra or set(v) != {"min", "max"}:
            raise HintedValueError(f"nodes takes min and max ({'unknown: ' + ', '.join(map(str, extra)) if extra else 'both'})",
                                   "e.g. nodes: {min: 1, max: 8}, or an integer for a fixed pool")
        for k in ("min", "max"):
            if not isinstance(v[k], int) or isinstance(v[k], bool):
                raise HintedValueError(f"nodes.{k} {v[k]!r} is not a valid integer", "e.g. nodes: {min: 1, max: 8}")
        if not 0 <= v["min"] <= v["max"] or not 1 <= v["max"] <= MAX_POOL_NODES:
            raise HintedValueError(f"nodes {{min: {v['min']}, max: {v['max']}}} is out of range: 0 <= min <= max, "
                                   f"1 <= max <= {MAX_POOL_NODES}", "e.g. nodes: {min: 1, max: 8}")
        if v["min"] == 0:
            # a pool's later nodes come from its own request, which gpufleet finds through a node it made (AWS: the
            # instance's aws:ec2:fleet-id tag; Azure: the scale set, whose outputs name a first VM): not built for a
            # pool of none yet
            raise HintedValueError("nodes.min 0 (a pool that starts empty) is not supported yet: a pool's added "
                                   "nodes come from its own request, found through a node of it",
                                   f"nodes: {{min: 1, max: {v['max']}}}")
        return Size(min=v["min"], max=v["max"])
    if v is None or isinstance(v, Size):
        return v
    if not isinstance(v, int) or isinstance(v, bool):  # `true` is not 1
        raise HintedValueError(f"{v!r}: input should be a valid integer", "e.g. nodes: 2, or nodes: {min: 1, max: 8}")
    if not 1 <= v <= MAX_POOL_NODES:
        raise HintedValueError(f"nodes {v}: input should be greater than or equal to 1 and less than or equal to "
                               f"{MAX_POOL_NODES}", "e.g. nodes: 2, or nodes: {min: 1, max: 8} for an elastic pool")
    return v

# a Slack incoming webhook (api.slack.com/messaging/webhooks, read 2026-11-28: hooks.slack.com/services/..., and
# GovSlack's hooks.slack-gov.com): it takes a message (`text`, blocks or attachments), which Alertmanager's own Slack
# notifier sends (gpufleet.monitoring.scrape.render_alertmanager), not Alertmanager's webhook JSON
SLACK_INCOMING_WEBHOOK = re.compile(r"^https://hooks\.slack(-gov)?\.com/services/[^\s'\"]+$")
SLACK_HOSTS = ("hooks.slack.com", "hooks.slack-gov.com")
# Discord's "Execute Slack-Compatible Webhook" (discord.com/developers/docs/resources/webhook, POST
# /webhooks/{webhook.id}/{webhook.token}/slack under https://discord.com/api, optionally versioned /api/v10, read
# 2026-11-28): it takes Slack's message, so it gets the Slack receiver like Slack's own incoming webhook (rev53d #3c)
DISCORD_SLACK_WEBHOOK = re.compile(
    r"^https://((canary|ptb)\.)?discord(app)?\.com/api/(v[0-9]+/)?webhooks/[0-9]+/[A-Za-z0-9_-]+/slack(\?[^\s'\"]*)?$")
# chat services whose webhooks reject Alertmanager's webhook JSON and for which the monitor's Alertmanager has no
# receiver: domain (itself and its subdomains) -> (service, what its webhook takes). Teams' incoming webhooks and
# Workflows take a card (learn.microsoft.com/microsoftteams/platform/webhooks-and-connectors/how-to/
# add-incoming-webhook, read 2026-11-28); msteams_configs came with Alertmanager 0.26, after Debian 12's 0.25 and
# Ubuntu 22.04's 0.23 (their amtool refuses it). Discord's execute-webhook takes content, embeds or files
# (discord.com/developers/docs/resources/webhook); discord_configs came with 0.25, after Ubuntu 22.04's 0.23.
# Not Azure Logic Apps (*.logic.azure.com): a "When a HTTP request is received" trigger takes any JSON, the usual
# relay from Alertmanager on Azure (learn.microsoft.com/azure/connectors/connectors-native-reqres; rev53d #3a).
CHAT_WEBHOOKS = {
    "webhook.office.com": ("Microsoft Teams", "a card"),
    "outlook.office.com": ("Microsoft Teams", "a card"),
    "api.powerplatform.com": ("Microsoft Teams (a Workflows webhook)", "a card"),
    "discord.com": ("Discord", "content or embeds (its Slack-compatible URL, .../slack, is taken)"),
    "discordapp.com": ("Discord", "content or embeds (its Slack-compatible URL, .../slack, is taken)"),
}


def webhook_where(url: str) -> str:
    """``url`` as a message may name it: its scheme and host only. A webhook URL's path and query are its
    credential (a Teams IncomingWebhook's secret, a Discord token, a Logic App's sig=), and an error is printed and
    kept in CI logs (REVIEW.md: no secret printed; rev53d #4)."""
    parts = urlsplit(url)
    return f"{parts.scheme or 'no scheme'}://{parts.hostname or 'no host'}/..."


def chat_webhook_refusal(url: str) -> HintedValueError | None:
    """Why ``url`` cannot be Alertmanager's receiver (a chat service that rejects its webhook JSON), or None."""
    host = (urlsplit(url).hostname or "").lower()
    if host in SLACK_HOSTS and not SLACK_INCOMING_WEBHOOK.match(url):
        return HintedValueError(f"alert_webhook ({webhook_where(url)}) is not a Slack incoming webhook (Alertmanager's "
                                "Slack notifier posts a message, which a Workflow Builder webhook does not take)",
                                "an incoming webhook URL, https://hooks.slack.com/services/...")
    if DISCORD_SLACK_WEBHOOK.match(url):
        return None
    for domain, (service, takes) in CHAT_WEBHOOKS.items():
        if host == domain or host.endswith("." + domain):  # on a dot: mydiscord.com is not Discord's (rev53d #3b)
            return HintedValueError(
                f"alert_webhook ({webhook_where(url)}) is a {service} webhook, which takes {takes} and rejects "
                "Alertmanager's webhook JSON; the monitor's Alertmanager (0.25 on Debian 12, 0.23 on Ubuntu 22.04) has "
                "no receiver for it, so no alert would arrive",
                "point it at a relay that turns Alertmanager's webhook into the service's message (e.g. "
                "prometheus-msteams for Teams), or use a Slack incoming webhook (https://hooks.slack.com/services/...)")
    return None


# a Prometheus duration as its flags take it (--storage.tsdb.retention.time): a number and one unit
# (prometheus.io/docs/prometheus/2.42/storage/, "Operational aspects", read 2026-11-27)
PROM_DURATION = re.compile(r"^[1-9][0-9]{0,5}[hdwy]$")


class Monitoring(_Strict):
    """Prometheus and Alertmanager on the cluster (README, "Monitoring"): they scrape every node's
    node_exporter and DCGM exporter and gpufleet's own metrics, and evaluate the shipped alert rules."""

    prometheus: bool = False
    # where they run: "controller" (Slurm's controller), or a pool's name (its first node)
    host: str = "controller"
    retention: str = "15d"  # how long series are kept; a number and h, d, w or y
    disk_gb: int = Field(default=20, ge=1, le=65_536, strict=True)  # the most the series may take on disk
    scrape_interval: int = Field(default=30, ge=5, le=600, strict=True)  # seconds
    # Grafana beside them (monitoring.grafana: Grafana's own apt repository), listening on the monitor's loopback, with
    # gpufleet's dashboards and the monitor's Prometheus provisioned; `gpufleet dashboard CLUSTER` opens it
    grafana: bool = False
    # a node at or above this price whose GPUs stay idle for an hour raises an alert
    idle_alert_usd_per_hour: float = Field(default=10.0, ge=0)
    # where Alertmanager sends alerts: a URL taking its webhook JSON, or a Slack incoming webhook (sent Slack's message);
    # None: shown only
    alert_webhook: str | None = None

    @field_validator("retention")
    @classmethod
    def _retention(cls, v: str) -> str:
        if not PROM_DURATION.match(v):
            raise HintedValueError(f"retention {v!r} is not a duration Prometheus takes", "e.g. 15d, 12h, 8w or 1y")
        return v

    @field_validator("alert_webhook")
    @classmethod
    def _webhook(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^https?://[^\s'\"]+$", v):
            raise HintedValueError("alert_webhook is not an http(s) URL without spaces or quotes (its value is not "
                                   "shown: a webhook URL is a secret)", "e.g. https://hooks.example.com/gpu")
        if v is not None and (refused := chat_webhook_refusal(v)):
            raise refused
        return v

    @property
    def alert_to_slack(self) -> bool:
        """Whether ``alert_webhook`` takes Slack's message (a Slack incoming webhook, Discord's Slack-compatible
        one), sent by Alertmanager's Slack notifier in place of the webhook JSON."""
        return bool(self.alert_webhook and (SLACK_INCOMING_WEBHOOK.match(self.alert_webhook)
                                            or DISCORD_SLACK_WEBHOOK.match(self.alert_webhook)))


class Failover(_Strict):
    """Where else a cloud pool may land when its own place is refused (no capacity, a short quota):
    each alternative is one whole place for the whole pool, tried in order (``clouds.candidates``)."""

    zones: Literal["any"] | list[str] | None = None  # the region's other zones: every one offering it, or these
    regions: list[str] = []  # other regions of the pool's cloud
    providers: list[Provider] = []  # other clouds, in their regions offering the same GPUs
    instance_types: Literal["same-gpu"] | list[str] | None = None  # default: the pool's own type only
    max_price_per_node_hour: float | None = Field(default=None, gt=0, le=10_000)  # USD, on-demand or spot
    spot_fallback: Literal["on-demand"] | None = None  # a spot pool may land on on-demand nodes

    @field_validator("zones", "regions", "instance_types")
    @classmethod
    def _not_empty(cls, v):
        if isinstance(v, list) and (not v or len(set(v)) != len(v)):
            raise HintedValueError("list each name once, and at least one", "or leave the key out")
        return v


class CapacityBlock(_Strict):
    """An AWS Capacity Block for ML the team bought: paid up front for its whole window
    (DescribeCapacityReservations gives its StartDate and EndDate; the purchase, its UpfrontFee)."""

    starts_at: dt.datetime
    ends_at: dt.datetime
    upfront_usd: float = Field(gt=0, le=100_000_000)

    @model_validator(mode="after")
    def _window(self):
        for when in (self.starts_at, self.ends_at):
            if when.tzinfo is None:
                raise HintedValueError("give the block's times in UTC", "e.g. 2026-12-01T11:30:00Z")
        if self.ends_at <= self.starts_at:
            raise HintedValueError("ends_at must come after starts_at", "copy both from `gpufleet capacity find`")
        return self

    @property
    def hours(self) -> float:
        return (self.ends_at - self.starts_at).total_seconds() / 3600


class Reservation(_Strict):
    """Capacity the team holds, tried before the open market (``clouds.candidates``): an AWS
    On-Demand Capacity Reservation or Capacity Block (``cr-...``), a GCP specific reservation
    (its name, or ``projects/P/reservations/N`` when shared from another project), an Azure
    capacity reservation group (its resource id). Each cloud's rules check the id's form."""

    id: str
    provider: Provider | None = None  # default: the pool's
    region: str | None = None  # default: the pool's (on the pool's cloud)
    zone: str | None = None  # where the capacity is (AWS and GCP reservations are zonal)
    instance_type: str | None = None  # default: the pool's
    capacity_block: CapacityBlock | None = None  # AWS: a Capacity Block, paid up front


class FlexStart(_Strict):
    """GCP's Dynamic Workload Scheduler in flex-start mode: the pool's VMs are provisioned all at
    once when capacity frees up, and run at most ``run_hours`` (10 minutes to 7 days; "About
    Flex-start VMs" and resize requests' ``requestedRunDuration``, read 2026-11)."""

    run_hours: float = Field(gt=0, le=168)  # then the VMs are deleted
    wait_minutes: int = Field(default=120, ge=1, le=10080)  # how long `up` waits for them before trying elsewhere

    @field_validator("run_hours")
    @classmethod
    def _at_least_ten_minutes(cls, v: float) -> float:
        if v * 60 < 10:
            raise HintedValueError("a flex-start run is at least 10 minutes", "e.g. run_hours: 24")
        return v


class Pool(_Strict):
    name: str
    provider: Provider
    region: str | None = None
    zone: str | None = None
    site: str | None = None
    instance_type: str | None = None
    gpu: str | None = None
    gpus_per_node: int | None = Field(default=None, gt=0, le=64, strict=True)
    # an integer (fixed; `true` is not 1), or {min, max} (elastic: ``size``), which ``_shape`` turns into min
    nodes: Annotated[int | Size | None, BeforeValidator(_nodes)] = None
    spot: bool = False
    interconnect: Interconnect | None = None
    storage: list[Storage] = []
    image: str | None = None
    root_disk_gb: int = Field(default=200, ge=30, le=16384, strict=True)
    public_ip: bool = False  # workers stay private unless the pool says so
    vpc: str | None = None  # existing network (AWS vpc-..., GCP network name, Azure VNet id)
    subnet: str | None = None  # existing subnet (AWS subnet-..., GCP subnetwork, Azure subnet id)
    reservations: list[Reservation] = []  # capacity the team holds: tried first, in this order
    flex_start: FlexStart | None = None  # GCP: provisioned all at once by DWS, for a limited run
    # AWS: how many network hops the instance metadata service answers across (its
    # HttpPutResponseHopLimit, 1 to 64). Unset: 1, the node itself: a container on a bridge network
    # (one hop more) gets no IMDSv2 token, so not the node role's credentials. 2 lets containers in.
    imds_hop_limit: int | None = Field(default=None, ge=1, le=64, strict=True)
    metadata: Metadata | None = None  # who reaches the metadata service on its nodes (default: access.metadata)
    salt: Salt = Salt()
    hosts: list[Host] = []
    subnet_manager: Literal["switch", "host"] | None = None  # InfiniBand racks: who runs the SM
    # the site's known_hosts file (default: gpufleet's per-site file)
    known_hosts: Annotated[str, AfterValidator(_ssh_path)] | None = None
    site_costs: SiteCosts | None = None
    failover: Failover | None = None  # where else to try when the pool's place is refused
    role: Literal["compute", "controller"] = "compute"  # controller: the stack's Slurm controller (slurm:)
    health: Health = Health()  # the boot gate, the watch and what a fault leads to
    _size: Size | None = PrivateAttr(default=None)  # an elastic pool's bounds (``nodes`` is then its min)
    # an elastic pool's nodes as the registry has them (`scale` changed them outside Pulumi's state), set by an
    # update's `up` for the clouds whose program must say the pool's size as it is (``running``)
    _running: int | None = PrivateAttr(default=None)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _valid_name(v, "pool")

    @property
    def on_rack(self) -> bool:
        """Machines that exist (a site's racks), not nodes created through a cloud's API."""
        return self.provider not in CLOUDS

    @property
    def size(self) -> Size | None:
        """An elastic pool's bounds (None: a fixed pool of ``nodes``)."""
        return self._size

    @property
    def bounds(self) -> tuple[int, int]:
        """The fewest and the most nodes the pool may have (a fixed pool's: ``nodes`` both)."""
        return (self._size.min, self._size.max) if self._size is not None else (self.nodes or 0, self.nodes or 0)

    @property
    def running(self) -> int:
        """How many nodes the pool has now: what the registry recorded of an elastic pool (within its bounds), else
        ``nodes``. An Azure scale set's update is a whole PUT (azure-native updates with PUT unless a resource is
        listed for PATCH: pulumi/pulumi-azure-native#3961, #4) whose ``sku.capacity`` must be this, or the scale set
        is set back to min by VMs its scale-in policy picks; ``ignore_changes`` would send the capacity Pulumi's
        state holds (pulumi.com/docs/iac/concepts/options/ignorechanges: providers that take whole objects "will
        receive the stale values from the state and may reset the live configuration", read 2026-11)."""
        if self._size is None or self._running is None:
            return self.nodes or 0
        return min(max(self._running, self._size.min), self._size.max)

    def recorded_as(self, nodes: int) -> None:
        """The registry's count of the pool's nodes (``running``)."""
        self._running = nodes

    @model_validator(mode="after")
    def _shape(self):
        if isinstance(self.nodes, Size):
            self._elastic(self.nodes)
        if self.on_rack:
            if not self.site:
                raise HintedValueError("a baremetal pool needs `site`", "name the rack, e.g. site: dc1")
            if not self.hosts:
                raise HintedValueError("a baremetal pool needs `hosts`", "list each host's address (and port, user, key)")
            if self.region or self.instance_type or self.spot:
                raise HintedValueError("a baremetal pool takes no region, instance_type or spot",
                                       "describe the machines with gpu and gpus_per_node")
            if (self.vpc or self.subnet or self.reservations or self.public_ip or self.failover or self.flex_start
                    or self.imds_hop_limit or self.metadata):
                raise HintedValueError("a baremetal pool takes no vpc, subnet, reservations, public_ip, failover, "
                                       "flex_start, imds_hop_limit or metadata",
                                       "those describe cloud pools; a rack's hosts are listed under hosts")
            if any(st.type == "nfs" and not st.server for st in self.storage):
                raise HintedValueError("an nfs storage entry on a rack needs `server`", "e.g. server: nfs01.example.com")
            if self.subnet_manager and self.interconnect not in ("infiniband-hdr", "infiniband-ndr"):
                raise HintedValueError("subnet_manager applies to InfiniBand racks only",
                                       "drop it, or set interconnect: infiniband-hdr/ndr")
            if self.health.on_fault == "replace":
                raise HintedValueError("a rack's hosts cannot be replaced", "health: {on_fault: isolate}: a faulty "
                                       "host is drained and named in `gpufleet status`")
            if not (self.gpu and self.gpus_per_node) and self.role != "controller":
                raise HintedValueError("a baremetal pool needs `gpu` and `gpus_per_node`", "e.g. gpu: H100, gpus_per_node: 8")
            if self.nodes is None:
                self.nodes = len(self.hosts)
            elif self.nodes != len(self.hosts):
                raise HintedValueError(f"nodes is {self.nodes} but {len(self.hosts)} hosts are listed",
                                       "drop `nodes` for a rack: it is the number of hosts")
        else:
            if not self.region:
                raise HintedValueError(f"a {self.provider} pool needs `region`", "e.g. region: us-east-1")
            if self.site or self.hosts or self.site_costs or self.subnet_manager or self.known_hosts:
                raise HintedValueError(f"a {self.provider} pool takes no site, hosts, site_costs, subnet_manager or "
                                       "known_hosts",
                                       "those describe bare-metal racks (provider: baremetal)")
            if self.instance_type and (self.gpu or self.gpus_per_node):
                raise HintedValueError("give either instance_type or gpu + gpus_per_node, not both",
                                       "the instance type already fixes the GPU and count")
            if not self.instance_type and not self.gpu:
                raise HintedValueError("a cloud pool needs `instance_type` or `gpu` (+ gpus_per_node)",
                                       "e.g. instance_type: p4d.24xlarge, or gpu: A100-40GB with gpus_per_node: 8")
            if self.nodes is None:
                self.nodes = 1
            f = self.failover
            if f and f.spot_fallback and not self.spot:
                raise HintedValueError("failover.spot_fallback applies to spot pools", "drop it, or set spot: true")
            if f and self.subnet and (f.zones or f.regions or f.providers):
                raise HintedValueError("a pool in an existing subnet cannot move to another zone, region or cloud",
                                       "drop vpc/subnet (gpufleet then creates a subnet wherever the pool lands), "
                                       "or failover's zones/regions/providers")
            if f and any(p not in CLOUDS for p in f.providers):
                raise HintedValueError("failover.providers names clouds", f"one or more of {', '.join(CLOUDS)}")
            if f and self.provider in f.providers:
                raise HintedValueError(f"failover.providers lists the pool's own cloud ({self.provider})",
                                       "its other places are failover.zones and failover.regions")
            for r in self.reservations:
                self._own_reservation(r)
            if self.flex_start and self.spot:
                raise HintedValueError("flex_start and spot are two provisioning models", "drop one of them")
            if self.flex_start and self.reservations:
                raise HintedValueError("flex-start VMs consume no reservation", "drop flex_start or reservations")
        return self

    def _elastic(self, size: Size) -> None:
        """``nodes: {min, max}``: the pool is planned, priced and brought up at ``min``."""
        if self.on_rack:
            raise HintedValueError("a rack's size is its hosts: nodes: {min, max} is for cloud pools",
                                   "list the hosts and drop `nodes`")
        if self.role == "controller":
            raise HintedValueError("the Slurm controller is one node: it is not elastic", "nodes: 1")
        self._size, self.nodes = size, size.min

    def _own_reservation(self, r: Reservation) -> None:
        """A reservation's defaults are the pool's (``stacks`` checks one on another cloud)."""
        r.provider = r.provider or self.provider
        if r.provider == self.provider:
            r.region = r.region or self.region
            r.instance_type = r.instance_type or self.instance_type

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data):
        if isinstance(data, dict) and "capacity_reservation" in data:
            raise HintedValueError("capacity_reservation is now a list, `reservations`",
                                   f"write reservations: [{{id: {data['capacity_reservation']}, zone: ...}}]")
        return data


class WorkloadRef(_Strict):
    name: str
    epochs: float | None = Field(default=None, gt=0, le=MAX_EPOCHS)
    tokens: float | None = Field(default=None, gt=0, le=MAX_TOKENS)
    precision: Precision | None = None
    batch_per_gpu: int | None = Field(default=None, gt=0, le=1_000_000, strict=True)


class Stack(_Strict):
    name: str
    owner: str
    ttl: str = "24h"
    workload: WorkloadRef | None = None
    access: Access = Access()
    network: Network = Network()
    software: Software = Software()
    data: Data | None = None  # what it moves (the traffic estimate); None: not said
    slurm: Slurm | None = None  # the scheduler on its pools; None: none
    monitoring: Monitoring | None = None  # Prometheus on the cluster; None: exporters only
    pools: Annotated[list[Pool], Field(min_length=1, max_length=MAX_POOLS)]

    # set by load(): where the stack came from
    source: str = Field(default="", exclude=True)

    def monitor_pool(self) -> Pool | None:
        """The pool whose first node runs Prometheus (``monitoring: {prometheus: true, host: ...}``): Slurm's
        controller's, or the one named; None without one."""
        m = self.monitoring
        if m is None or not m.prometheus:
            return None
        if m.host == "controller":
            return next((p for p in self.pools if p.role == "controller"), None)
        return next((p for p in self.pools if p.name == m.host), None)

    def metadata_of(self, pool) -> str:
        """Who reaches the metadata service on ``pool``'s nodes: its own ``metadata``, else the stack's."""
        return pool.metadata or self.access.metadata

    @model_validator(mode="before")
    @classmethod
    def _extensions(cls, data):
        """Top-level ``x-*`` keys are the file's own (anchors for ``<<: *pool`` merges, notes): ignored."""
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if not (isinstance(k, str) and k.startswith("x-"))}
        return data

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _valid_name(v, "stack")

    @field_validator("owner")
    @classmethod
    def _owner(cls, v: str) -> str:
        if not v.strip():
            raise HintedValueError("owner must not be empty", "put the responsible person's e-mail or team")
        return v

    @field_validator("ttl")
    @classmethod
    def _ttl(cls, v: str) -> str:
        parse_ttl(v)
        return v

    @property
    def ttl_delta(self) -> dt.timedelta:
        return parse_ttl(self.ttl)

    def total_nodes(self) -> int:
        return sum(p.nodes or 0 for p in self.pools)

    @model_validator(mode="after")
    def _scheduler(self):
        controllers = [p for p in self.pools if p.role == "controller"]
        if self.slurm is None:
            if controllers:
                raise HintedValueError("role: controller is Slurm's",
                                       "add a slurm: block (slurm: {} takes the defaults), or drop it")
            return self
        if len(controllers) != 1 or controllers[0].nodes != 1:
            raise HintedValueError("slurm: needs one pool with role: controller, of one node",
                                   "e.g. a pool `ctl` with role: controller and one host (racks) or nodes: 1")
        if len(self.pools) < 2:
            raise HintedValueError("slurm: needs a pool of compute nodes besides the controller", "add one")
        # slurmctld and every slurmd talk to each other directly: one cloud region's network, or one site
        places = {(p.provider, p.site if p.on_rack else p.region) for p in self.pools}
        if len(places) > 1:
            raise HintedValueError("slurm: its pools must share one network, but they are in "
                                   + ", ".join("/".join(str(x) for x in pl) for pl in sorted(places, key=str)),
                                   "put the controller and the compute pools in one region of one cloud, or one site")
        far = [p.name for p in self.pools if p.failover and (p.failover.regions or p.failover.providers)]
        if far:
            raise HintedValueError(f"slurm: pool {far[0]} may fail over to another region or cloud, whose nodes "
                                   "could not reach the controller", "keep its failover to zones (and instance_types)")
        if self.slurm.cgroups:  # the default image's Slurm has no cgroup v2 (catalog.images.SLURM_IMAGE)
            for p in self.pools:
                if not p.on_rack and p.image is None:
                    p.image = SLURM_IMAGE
        return self


# --- catalog checks -----------------------------------------------------------------

@dataclass(frozen=True)
class Problem:
    """A problem a check found: the key path (inside the pool for a pool check), what, a hint."""

    keys: tuple
    message: str
    hint: str | None = None


# (stack, pool, its catalog instance type or None for a rack, catalog)
PoolCheck = Callable[["Stack", "Pool", Any, Any], Iterable[Problem]]
StackCheck = Callable[["Stack", Any], Iterable[Problem]]  # (stack, catalog)


def unique_pools(stack: Stack, cat) -> Iterable[Problem]:
    """No two pools share a name (it names their cloud resources)."""
    seen: set[str] = set()
    for i, p in enumerate(stack.pools):
        if p.name in seen:
            yield Problem(("pools", i, "name"), f"two pools are named {p.name!r}", "pool names must be unique in a stack")
        seen.add(p.name)


def unique_hosts(stack: Stack, cat) -> Iterable[Problem]:
    """No machine is listed twice, in one rack pool or two."""
    where: dict[tuple[str, int], str] = {}
    for j, p in enumerate(stack.pools):
        for i, h in enumerate(p.hosts):
            key = (h.address.lower().rstrip("."), h.port)
            if key in where:
                yield Problem(("pools", j, "hosts", i), f"host {h.address}:{h.port} is listed twice ({where[key]} and "
                              f"{p.name}[{i}])", "one machine is one host of one pool")
            where.setdefault(key, f"{p.name}[{i}]")


def monitor_host(stack: Stack, cat) -> Iterable[Problem]:
    """The monitor's host is Slurm's controller, which the stack has, or one of its pools."""
    m = stack.monitoring
    if m is None or not m.prometheus:
        return
    if m.host == "controller":
        if stack.slurm is None:
            yield Problem(("monitoring", "host"), "host controller is Slurm's controller, and the stack has no slurm:",
                          "name one of its pools, e.g. host: " + (stack.pools[0].name if stack.pools else "gpu"))
    elif m.host not in {p.name for p in stack.pools}:
        yield Problem(("monitoring", "host"), f"{m.host!r} is not one of the stack's pools",
                      "one of: controller, " + ", ".join(p.name for p in stack.pools))
    else:
        # a cloud pool's nodes all apply the one document of their pool (a rack's first host alone gets the server):
        # several nodes would each run a Prometheus scraping and alerting alone, and which one is "first" changes as
        # heal replaces nodes; so the monitor's cloud pool is one node (Slurm's controller is one already)
        pool = stack.monitor_pool()
        if not pool.on_rack and pool.bounds[1] > 1:
            yield Problem(("monitoring", "host"), f"pool {pool.name} may have more than one node "
                          f"(up to {pool.bounds[1]}), and each would run a Prometheus of its own",
                          "give the monitor a pool of its own with nodes: 1 (a small instance type), or host: controller")


# the most of a cloud monitor's root disk Prometheus's series may take (monitoring.disk_gb, its
# --storage.tsdb.retention.size): the rest is the OS's, the GPU node's software (driver, CUDA, frameworks, the DCGM
# exporter's image) and the room the TSDB needs past its limit while compaction writes a block before the oldest goes
MONITOR_DISK_SHARE = 0.5


def monitor_disk(stack: Stack, cat) -> Iterable[Problem]:
    """A cloud monitor's series fit its root disk (``Pool.root_disk_gb``): Prometheus deletes by size only past
    ``disk_gb``, so a larger limit fills the root file system, and the OS with it. A rack host's disk is not known."""
    m, pool = stack.monitoring, stack.monitor_pool()
    if pool is None or pool.on_rack:
        return
    most = int(pool.root_disk_gb * MONITOR_DISK_SHARE)
    if m.disk_gb > most:
        yield Problem(("monitoring", "disk_gb"), f"disk_gb {m.disk_gb} does not fit the monitor's root disk: pool "
                      f"{pool.name} boots {pool.root_disk_gb} GB, and Prometheus may take at most "
                      f"{MONITOR_DISK_SHARE:.0%} of it", f"disk_gb: {most} or less, or a larger root_disk_gb on pool "
                      f"{pool.name} (at least {-(-m.disk_gb // MONITOR_DISK_SHARE):.0f})")


class _Unchecked(Exception):
    """A check read a part of the stack that failed the schema."""


class _Failed:
    """Stands for a part of the stack that failed the schema. A check that reads it is skipped: what
    it would find there follows from, or hides behind, the schema problem already reported."""

    def __getattr__(self, name):
        raise _Unchecked(name)


def _findings(check, *args) -> list[Problem]:
    try:
        return list(check(*args))
    except _Unchecked:
        return []


def cross_checks(stack: Stack, located: Located, cat, *, pool_checks: Iterable[PoolCheck] = (),
                 stack_checks: Iterable[StackCheck] = (), pool_index: list[int] | None = None) -> list[SpecError]:
    """What the schema cannot see: pools against each other, names against the catalog, then the
    caller's checks; every problem found. A pool check runs on each pool whose names the catalog
    knows. ``pool_index``: for a stack holding only the pools that passed the schema, the index of
    each in the file."""
    errs: list[SpecError] = []
    pool_checks = tuple(pool_checks)
    index = pool_index if pool_index is not None else range(len(stack.pools))

    def err(keys: tuple, problem: str, hint: str | None = None):
        if keys[:1] == ("pools",) and len(keys) > 1:
            keys = ("pools", index[keys[1]]) + keys[2:]
        errs.append(SpecError(located.path, located.line(keys), dotted(keys), problem, hint))

    for i, pool in enumerate(stack.pools):
        base = ("pools", i)
        if pool.gpu is not None and not cat.has_gpu(pool.gpu):
            s = did_you_mean(pool.gpu, [g.name for g in cat.gpus.values()] + [a for g in cat.gpus.values() for a in g.aliases])
            err(base + ("gpu",), f"unknown GPU {pool.gpu!r}",
                f"did you mean {s!r}?" if s else "see `gpufleet catalog gpus`")
            continue
        it = None if pool.on_rack else _instance_problems(pool, cat, lambda k, m, h=None, base=base: err(base + k, m, h))
        if pool.on_rack or it is not None:
            for prob in (x for check in pool_checks for x in _findings(check, stack, pool, it, cat)):
                err(base + prob.keys, prob.message, prob.hint)
    try:
        _check_access(stack, located, err)
    except _Unchecked:
        pass
    checks = (unique_pools, unique_hosts, monitor_host, monitor_disk, *stack_checks)
    for prob in (x for check in checks for x in _findings(check, stack, cat)):
        err(prob.keys, prob.message, prob.hint)
    return errs


def _valid_parts(data: dict) -> tuple[Stack, list[int]]:
    """For a stack that fails the schema: a stack of its parts that pass it (each pool on its own,
    each top-level key), the others _Failed, and the index in the file of each pool it holds."""
    from pydantic import TypeAdapter, ValidationError

    failed: set[tuple] = set()
    try:
        Stack.model_validate(data)
    except ValidationError as e:  # where the problems are: pools[i], or a top-level key
        failed = {tuple(x["loc"][:2]) if x["loc"][:1] == ("pools",) and len(x["loc"]) > 1 else x["loc"][:1]
                  for x in e.errors()}
    fields: dict[str, Any] = {}
    index: list[int] = []
    for name, info in Stack.model_fields.items():
        if (name,) in failed:  # missing too
            fields[name] = [] if name == "pools" else _Failed()
        elif name == "pools":
            index = [i for i in range(len(data["pools"])) if ("pools", i) not in failed]
            fields[name] = [Pool.model_validate(data["pools"][i]) for i in index]
        elif name in data:
            fields[name] = TypeAdapter(info.annotation).validate_python(data[name])
    return Stack.model_construct(**fields), index


def _instance_problems(pool: Pool, cat, err):
    """Region, zone and instance type of a cloud pool against the catalog; the instance type it
    runs on (None when it cannot be told)."""
    region_ok = True
    if pool.region not in cat.regions.get(pool.provider, {}):
        s = did_you_mean(pool.region, cat.regions.get(pool.provider, {}))
        err(("region",), f"{pool.region!r} is not a {pool.provider} region",
            f"did you mean {s!r}?" if s else f"known regions: {', '.join(sorted(cat.regions.get(pool.provider, {})))}")
        region_ok = False
    zones = cat.region_zones(pool.provider, pool.region) if region_ok else ()
    if pool.zone and zones and pool.zone not in zones:
        s = did_you_mean(pool.zone, zones)
        err(("zone",), f"{pool.zone!r} is not a zone of {pool.region}",
            (f"did you mean {s!r}? " if s else "") + f"zones of {pool.region}: {', '.join(zones)}")
    if pool.instance_type:
        try:
            it = cat.instance(pool.provider, pool.instance_type)
        except Exception as e:  # NotFound carries the suggestion
            err(("instance_type",), f"unknown {pool.provider} instance type {pool.instance_type!r}",
                getattr(e, "hint", None))
            return None
    else:
        gpu = cat.gpu(pool.gpu)
        matches = _matching_instances(pool, cat)
        if not matches:
            counts = sorted({x.gpu_count for (p, _), x in cat.instances.items() if p == pool.provider and x.gpu == gpu.name})
            if counts:
                err(("gpus_per_node",), f"{pool.provider} has no {gpu.name} machine with {pool.gpus_per_node} GPUs",
                    f"available counts: {', '.join(map(str, counts))}")
            else:
                offered = sorted({x.gpu for (p, _), x in cat.instances.items() if p == pool.provider})
                err(("gpu",), f"{pool.provider} offers no {gpu.name} in the catalog",
                    f"{pool.provider} GPUs: {', '.join(offered)}")
            return None
        it = _smallest(matches)
    if region_ok:
        regions = cat.instance_regions(pool.provider, it.name)
        if pool.region not in regions:
            err(("region",), f"{it.name} is not offered (or not priced) in {pool.region}",
                f"priced in: {', '.join(regions)}" if regions else "no region prices it in the catalog")
        offered = cat.offered_zones(pool.provider, it.name, pool.region)
        if pool.zone and offered and pool.zone not in offered:
            err(("zone",), f"{it.name} is not offered in {pool.zone}",
                f"{pool.provider} offers it in {', '.join(offered)} (its API at the last `gpufleet catalog "
                "refresh`; refresh again if that has changed)")
    return it


def _check_access(stack: Stack, located: Located, err) -> None:
    """The public key must be readable (path relative to the stack file) and look like one."""
    key = stack.access.public_key
    if key is None:
        return
    if not re.match(r"^(ssh-(rsa|ed25519)|ecdsa-sha2-nistp\d+|sk-ssh-ed25519@openssh.com) ", key.strip()):
        p = Path(key).expanduser()
        if not p.is_absolute() and located.path:
            p = Path(located.path).parent / p
        try:
            text = read_text(p, "an OpenSSH public key (.pub)", SMALL_BYTES).strip()
        except FileRefused as e:
            err(("access", "public_key"), e.message, e.hint)
            return
        except (OSError, UnicodeDecodeError) as e:
            err(("access", "public_key"), f"cannot read {p}: {getattr(e, 'strerror', None) or e}",
                "give the path of an OpenSSH public key (.pub)")
            return
        if not re.match(r"^(ssh-|ecdsa-|sk-)", text):
            err(("access", "public_key"), f"{p} is not an OpenSSH public key", "use the .pub file, never the private key")
            return
        stack.access.public_key = text


def _matching_instances(pool: Pool, cat) -> list:
    """Instance types of the pool's provider with its GPU (and GPU count, when given)."""
    gpu = cat.gpu(pool.gpu)
    return [x for (p, _), x in cat.instances.items() if p == pool.provider and x.gpu == gpu.name
            and (pool.gpus_per_node is None or x.gpu_count == pool.gpus_per_node)]


def _smallest(instances: list):
    return min(instances, key=lambda x: (x.gpu_count, x.vcpus))


def resolve_instance(pool: Pool, cat):
    """The catalog instance type a (validated) cloud pool runs on: the smallest that matches."""
    if pool.instance_type:
        return cat.instance(pool.provider, pool.instance_type)
    return _smallest(_matching_instances(pool, cat))


def load(path: str | Path, cat, *, text: str | None = None, pool_checks: Iterable[PoolCheck] = (),
         stack_checks: Iterable[StackCheck] = ()) -> Stack:
    """Load a stack file and validate it against the catalog and the given checks. Raises
    SpecError/SpecErrors (exit code 2). ``stacks.load`` adds every provider's checks."""
    located = load_text(text, str(path)) if text is not None else load_file(path)
    try:
        stack, index, errs = validate_located(Stack, located), None, []
    except SpecErrors as e:  # the parts that pass are checked on, so that one run reports every problem it can
        (stack, index), errs = _valid_parts(located.data), list(e.errors)
    stack.source = str(path)
    errs += cross_checks(stack, located, cat, pool_checks=pool_checks, stack_checks=stack_checks, pool_index=index)
    if errs:
        raise SpecErrors(sorted(errs, key=lambda e: e.line or 0))
    return stack

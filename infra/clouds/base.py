"""The interface every provider implements, and the records it exchanges with cross-cloud code.

``Provider`` is what validation needs of anything a pool can run on (clouds and racks):
which interconnects it offers and what it cannot do for a pool. ``Cloud`` adds what the
cross-cloud operations need: credentials, the Pulumi program and its plan-time answers, the
cloud's API by tag (inventory, deletion, quotas) and its prices. A cloud object is cheap:
whatever imports an SDK or Pulumi is reached through its methods, each of which loads its
module through the cloud's ``sdk`` module (an ``SdkMissing`` error names the extra to install).

A cloud's refusals are classified by its table of ``RefusalRule`` rows (``errors.rules``, each
cloud's ``refusals`` module): a ``Refusal`` says what a failure rules out for the next attempt (a
zone, a region, the provider, or everything), for capacity failover.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from gpufleet.clouds import bill_lines
from gpufleet.spec import Problem  # what a provider cannot do for a pool, keys relative to the pool

# What a refusal rules out for the next attempt, from the narrowest to the whole run
SCOPES = ("zone", "region", "provider", "stop")
REFUSAL_KINDS = ("capacity", "quota", "credentials", "permission", "argument", "price", "unknown")  # what a refusal is
# the scope of a failure recognised only by an SDK's own words (no cloud error code to look up)
DEFAULT_SCOPE = {"capacity": "zone", "quota": "region", "credentials": "provider", "permission": "stop",
                 "argument": "stop", "price": "zone", "unknown": "stop"}
MESSAGE_CHARS = 300
_ANSI = re.compile(r"\x1b\[[0-9;]*m|<\{%[a-z]*%\}>")  # terminal colours and Pulumi's colour markup


def strip_color(s: str) -> str:
    return _ANSI.sub("", s)


@dataclass(frozen=True)
class Refusal:
    """Why a cloud refused to create something, and what that rules out for the next attempt:
    another ``zone`` of the region, another ``region``, another ``provider``, or nothing (``stop``:
    every other candidate would fail the same way, or the failure is not understood)."""

    scope: str  # zone | region | provider | stop
    kind: str  # capacity | quota | credentials | permission | argument | price | unknown
    code: str  # the cloud's own error code ("" when the text carries none)
    message: str  # the line of the error text that carries it, colour stripped, at most 300 characters
    source: str  # the provider's documentation page that defines the code ("" when there is none)

    def to_dict(self) -> dict:
        return {"scope": self.scope, "kind": self.kind, "code": self.code, "message": self.message,
                "source": self.source}


RETRIED_LATER = ("capacity", "quota", "price")  # refusals that time may lift (`heal` asks again after a backoff)


@dataclass(frozen=True)
class RefusalRule:
    """One row of a cloud's refusal table: the documented code, how it reads in Pulumi's output
    (matched line by line; a named group ``code`` names the code when one row covers a family of
    codes), what it rules out, and the documentation page that defines it."""

    code: str
    pattern: re.Pattern
    scope: str
    kind: str
    source: str

    def __post_init__(self):
        if self.scope not in SCOPES or self.kind not in REFUSAL_KINDS:
            raise ValueError(f"refusal rule {self.code}: scope {self.scope!r} / kind {self.kind!r} unknown")

    @classmethod
    def of(cls, code: str, pattern: str, scope: str, kind: str, source: str) -> RefusalRule:
        """A row from its pattern's text (the tables are written as text)."""
        return cls(code, re.compile(pattern), scope, kind, source)

    def refusal(self, line: str) -> Refusal | None:
        """The refusal this rule reads in one line of error text, or None."""
        m = self.pattern.search(line)
        if m is None:
            return None
        code = (m.groupdict().get("code") if "code" in self.pattern.groupindex else None) or self.code
        return Refusal(self.scope, self.kind, code, line[:MESSAGE_CHARS], self.source)


def error_lines(text: str) -> list[str]:
    return [ln for ln in (strip_color(raw).strip() for raw in text.splitlines()) if ln]


def first_refusal(rules, text: str) -> tuple[RefusalRule, Refusal] | None:
    """The first rule of ``rules`` (table order is precedence) that matches a line of ``text``, with
    the refusal it reads there."""
    lines = error_lines(text)
    for rule in rules:
        for line in lines:
            r = rule.refusal(line)
            if r is not None:
                return rule, r
    return None


def refusal_in(rules, text: str) -> Refusal | None:
    """What the first matching rule of ``rules`` says of ``text``; None when no rule matches."""
    found = first_refusal(rules, text)
    return found[1] if found else None


def worded_refusal(kind: str, pattern: re.Pattern, text: str) -> Refusal:
    """A failure recognised by an SDK's or CLI's own words, which carry no cloud error code."""
    line = next((ln for ln in error_lines(text) if pattern.search(ln)), "")
    return Refusal(DEFAULT_SCOPE[kind], kind, "", line[:MESSAGE_CHARS], "")


def unknown_refusal(line: str) -> Refusal:
    """A failure no table knows: it must not burn through every candidate."""
    return Refusal("stop", "unknown", "", strip_color(line).strip()[:MESSAGE_CHARS], "")


def _union(words: str | None, rules, kind: str) -> re.Pattern:
    """One pattern for a kind of failure: an SDK's own words (case-insensitive) or any row of that kind."""
    parts = [f"(?i:{words})"] if words else []
    for r in rules:
        if r.kind == kind:
            src = re.sub(r"\(\?P<\w+>", "(?:", r.pattern.pattern)  # one pattern may hold one group of a name
            parts.append(f"(?i:{src})" if r.pattern.flags & re.IGNORECASE else f"(?:{src})")
    return re.compile("|".join(parts) or "(?!)")


@dataclass(frozen=True)
class ErrorPatterns:
    """How a cloud's failures read in Pulumi's output. ``rules`` is its refusal table (the cloud's
    documented error codes, in precedence order); ``credentials``, ``quota`` and ``capacity`` match
    any text of that kind: a row of the table, or an SDK's own words, which carry no code."""

    credentials: re.Pattern
    quota: re.Pattern
    capacity: re.Pattern
    rules: tuple[RefusalRule, ...] = ()

    @classmethod
    def of(cls, rules: tuple[RefusalRule, ...], *, credentials: str | None = None, quota: str | None = None,
           capacity: str | None = None) -> "ErrorPatterns":
        """The patterns of a refusal table plus the SDK's own words for each kind."""
        return cls(credentials=_union(credentials, rules, "credentials"), quota=_union(quota, rules, "quota"),
                   capacity=_union(capacity, rules, "capacity"), rules=tuple(rules))


@dataclass(frozen=True)
class Need:
    """What one cloud pool asks of its cloud's quotas."""

    pool: str
    provider: str
    region: str
    instance: object  # catalog.InstanceType
    nodes: int  # new nodes (an update counts only those it adds)
    spot: bool
    image: str | None = None  # the pool's image (a marketplace image may have terms to accept first)
    flex_start: bool = False  # GCP flex-start VMs (counted against the preemptible quota, as spot VMs are)
    reservation: str | None = None  # the held reservation its nodes launch into (its cloud says what that charges)


@dataclass(frozen=True)
class Capacity:
    """Capacity a cloud states it holds for the team (``held``: usable as a pool's ``reservations``
    entry) or offers to sell (a Capacity Block offering, bought with ``buy``)."""

    provider: str
    kind: str  # the cloud's name for it: "capacity reservation", "capacity block", "reservation" ...
    id: str  # what `reservations:` names (held), or the offering's id
    region: str
    zone: str | None
    instance_type: str
    instances: int  # free for new VMs now (held), or sold (offering)
    held: bool
    starts_at: str | None = None  # ISO 8601 UTC, where it has a window
    ends_at: str | None = None
    upfront_usd: float | None = None  # what an offering costs, paid up front
    buy: str = ""  # the cloud's own command that buys an offering (gpufleet buys nothing)
    note: str = ""  # what the cloud does beyond ``instances`` (Azure: VMs past the reserved quantity)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


# how a rate's quantity is counted (catalog/data/rates.csv ``unit``): per hour of a thing, per GB (or GiB,
# TiB) kept for a month of 730 hours, per disk kept a month, or per GB moved (once, not by the hour)
RATE_UNITS = ("hour", "gb-month", "gib-month", "tib-hour", "disk-month", "iops-month", "mbps-month", "gb")


@dataclass(frozen=True)
class Usage:
    """What one planned resource will be billed for besides its instances, before prices: ``quantity``
    of the catalog's rate ``item`` (counted in ``unit``) in ``region``. Each cloud's ``spend`` module
    reads these off the program's resources; ``engine.spend`` prices them."""

    pool: str  # the pool it serves; "-" for what the cluster shares (a region's network)
    line: str  # the bill's line, one of bill_lines.PREDICTED: volumes, file-system, nat, ipv4, bastion, transfer
    item: str  # the rate's item, e.g. "ebs:gp3"
    unit: str  # one of RATE_UNITS, as the rate counts it
    region: str
    quantity: float
    what: str  # in words: "200 GB gp3 root volume x 2 nodes"

    def __post_init__(self):
        if self.unit not in RATE_UNITS:
            raise ValueError(f"usage {self.item}: unit {self.unit!r} is not one of {RATE_UNITS}")
        if self.line not in bill_lines.PREDICTED:
            raise ValueError(f"usage {self.item}: line {self.line!r} is not one of {bill_lines.PREDICTED}")


@dataclass(frozen=True)
class Planned:
    """A resource of the plan as a cloud's ``spend`` module reads it: its Pulumi type and inputs, the
    pool it belongs to ("-": the cluster's shared parts) and its region, and the nodes of that pool."""

    type: str
    inputs: dict
    pool: str
    region: str
    nodes: int  # the pool's nodes (0 for a shared part)


@dataclass(frozen=True)
class Billed:
    """What a cloud billed one cluster for one line of the bill, from ``since`` through ``through``, in
    one currency. A bill in another currency than the US dollar is counted in dollars only at the rate
    the bill itself gives (the GCP export's ``currency_conversion_rate``, Azure's ``CostUSD``), never at
    one gpufleet would pick."""

    provider: str
    cluster: str
    line: str  # one of bill_lines.BILLED
    usd: float | None  # in US dollars (None: another currency, and the bill gives no rate for it)
    through: str  # the last day (YYYY-MM-DD) the cloud's figures cover
    estimated: bool = False  # the cloud says the figure may still change
    currency: str = "USD"  # the currency the bill is in
    amount: float | None = None  # in ``currency``, when that is not USD

    def __post_init__(self):
        if self.line not in bill_lines.BILLED:
            raise ValueError(f"{self.provider} bill line {self.line!r} is not one of {bill_lines.BILLED}")


def merged(rows: list[Billed]) -> list[Billed]:
    """Rows of one cluster, line and currency added up (its days, its SKUs): through the last day,
    estimated if any is; a sum with a figure that could not be converted cannot be either."""
    out: dict[tuple, Billed] = {}
    for b in rows:
        key = (b.provider, b.cluster, b.line, b.currency)
        cur = out.get(key)
        if cur is None:
            out[key] = b
            continue
        out[key] = Billed(b.provider, b.cluster, b.line,
                          None if cur.usd is None or b.usd is None else cur.usd + b.usd, max(cur.through, b.through),
                          cur.estimated or b.estimated, b.currency,
                          None if b.currency == "USD" else (cur.amount or 0.0) + (b.amount or 0.0))
    return list(out.values())


@dataclass
class BillRead:
    """One cloud's bill for gpufleet's clusters: its rows, and what it cannot say yet (data that lags,
    a tag the billing does not group by)."""

    rows: list[Billed] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class FoundImage:
    """A golden image a cloud holds, found by its ``gpufleet:image`` tag (label on GCP)."""

    provider: str
    region: str
    name: str  # gpufleet's name (the tag's value)
    id: str  # what the cloud calls it (ami-..., an image path, a gallery version id)
    tags: dict
    created_at: str | None = None
    snapshots: tuple[str, ...] = ()  # what goes with it (AWS: the EBS snapshots behind an AMI)
    size_gb: float | None = None

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass
class QuotaLine:
    """One quota as the cloud states it, against what the stack needs of it."""

    provider: str
    region: str
    quota: str  # the cloud's name for it
    code: str  # the cloud's id for it (AWS quota code, GCP metric, Azure usage name)
    unit: str  # vCPUs | GPUs
    needed: float
    limit: float | None  # None: could not be read
    used: float | None
    pools: list[str]
    note: str = ""
    charged: bool = True  # False: what is needed draws on no quota (nodes in a held reservation), said in ``note``

    @property
    def available(self) -> float | None:
        return None if self.limit is None else max(0.0, self.limit - (self.used or 0.0))

    @property
    def ok(self) -> bool | None:
        if not self.charged:
            return True
        return None if self.available is None else self.needed <= self.available

    def to_dict(self) -> dict:
        return {"provider": self.provider, "region": self.region, "quota": self.quota, "code": self.code,
                "unit": self.unit, "needed": self.needed, "limit": self.limit, "used": self.used,
                "available": self.available, "ok": self.ok, "pools": self.pools, "note": self.note or None,
                "charged": self.charged}


@dataclass(frozen=True)
class Tool:
    """A program on the operator's machine that a way of reaching nodes needs, and how to install it."""

    command: str  # looked up on PATH
    install: str  # how to install it, in words with the command or page


class SshText(str):
    """Text already in OpenSSH's config form, written as it is: one of its tokens, or a command line
    ``command_line`` made."""


# OpenSSH's tokens in a ProxyCommand: the host name (HostName) and the port (ssh_config(5), TOKENS)
HOST, PORT = SshText("%h"), SshText("%p")


def command_line(*words) -> SshText:
    """A ProxyCommand of ``words``, each shell-quoted (OpenSSH hands the line to the user's shell,
    ``exec`` prefixed) with every ``%`` doubled (OpenSSH expands ``%`` tokens in it; ``%%`` is a
    ``%``), but for the ``SshText`` given (HOST, PORT, an inner command line). A word may be a tuple
    of parts (``("portNumber=", PORT)``)."""
    def part(p) -> str:
        return p if isinstance(p, SshText) else str(p).replace("%", "%%")

    return SshText(" ".join(shlex.quote("".join(part(p) for p in (w if isinstance(w, tuple) else (w,))))
                            for w in words))


@dataclass(frozen=True)
class SshRoute:
    """How OpenSSH reaches one node: its ``options`` as OpenSSH config keywords (``HostName``,
    ``ProxyCommand`` with OpenSSH's ``%h``/``%p`` tokens, ``Port``, ``User`` ...), the route in words,
    the programs it needs besides ``ssh``, and the documentation page of its form."""

    route: str  # "AWS Systems Manager Session Manager", "direct" ...
    options: dict[str, str]
    tools: tuple[Tool, ...] = ()
    source: str = ""

    def to_dict(self) -> dict:
        return {"route": self.route, "options": dict(self.options), "tools": [t.command for t in self.tools],
                "source": self.source}


@runtime_checkable
class Provider(Protocol):
    """Anything a pool can run on: a cloud, or the team's own racks."""

    name: str
    # what a pool may ask for as `interconnect` -> the catalog fabric its instance type needs for it
    # (None: any machine of this provider can have it)
    interconnects: Mapping[str, str | None]
    lustre_flavor: str  # how the lustre_client formula reaches this provider's Lustre (salt/lustre_client)
    time_servers: tuple[str, ...]  # NTP servers the nodes use (the cloud's own time source; none: the image's)
    ib_port_per_gpu: bool  # an InfiniBand node has one port per GPU (else one port per node)

    def check_pool(self, stack, pool, instance) -> list[Problem]:
        """What this provider cannot do for the pool, with the reason, before anything is created."""

    def ssh_route(self, node, *, cluster: str, stack) -> SshRoute:
        """How OpenSSH reaches a registry node (``state.registry.Node``) of ``cluster`` its own way: a
        cloud's private route (no port 22 open to the world), a rack host directly. ``stack``: the
        cluster's stack, or None when its file is gone."""

    def scrape_discovery(self, cluster: str, pools: list, port: int) -> tuple[dict, list]:
        """How Prometheus on the monitor host finds ``pools``' nodes of ``cluster`` on ``port``: a scrape
        config's target part (``static_configs``, ``ec2_sd_configs`` ...) and the relabelling that gives
        each target the labels ``pool`` and ``node`` (``gpufleet.monitoring``), acting on its own meta
        labels only (one job holds every provider's targets)."""

    def monitor_discovery(self, cluster: str, monitor, pools: list) -> dict:
        """What root on a node of the ``monitor`` pool of this cloud needs to list ``pools``' running nodes with its own
        identity (clouds/node_targets.py, the cloud's lister); a rack's hosts are written out (``scrape_discovery``)."""

    def host_key_alias(self, node, *, cluster: str) -> str | None:
        """The name OpenSSH files the node's host key under (``HostKeyAlias``) on every route: an id its
        provider never gives another machine (an address or a name comes back with the next cluster),
        checked against its format; None where there is none (a rack host: its site's file, by address)."""


@runtime_checkable
class CloudApi(Protocol):
    """A cloud's own API, by the gpufleet tags: who we are, what is there, delete, quotas."""

    provider: str

    def identity(self) -> dict:
        """``{"account", "principal", "source"}``; CredentialsError when there are none or they are refused."""

    def regions(self, wanted: list[str] | None = None) -> list[str]:
        """The regions to look at: every one, or ``wanted`` after checking each exists."""

    def inventory(self, regions: list[str], cluster: str | None = None,
                  on_region: Callable[[str], None] | None = None) -> tuple[list, dict[str, str]]:
        """Every resource tagged ``gpufleet:cluster`` (= ``cluster``) in ``regions``, and the places
        that could not be read (``{"aws/us-west-2": "AuthFailure: ..."}``)."""

    def delete(self, region: str, kind: str, resources: list) -> dict[str, tuple[str, str]]:
        """Ask for their deletion: ``{id: (deleted | gone | retry | failed, message)}``."""

    def still_there(self, region: str, kind: str, resources: list) -> dict[str, str]:
        """Of resources whose deletion was accepted, those not gone yet: ``{id: state}``."""

    def quotas(self, region: str, needs: list[Need]) -> list[QuotaLine]:
        """The quotas the needs touch in one region, with limit and use."""

    def images(self, regions: list[str]) -> list[FoundImage]:
        """The golden images in ``regions`` (a cloud whose images are global lists them once, as
        region ``global``), by their ``gpufleet:image`` tag."""

    def delete_image(self, image: FoundImage) -> None:
        """Delete a golden image and what goes with it (its snapshots)."""

    def capacity(self, region: str, instance_type: str, nodes: int, hours: int, start: str | None) -> list[Capacity]:
        """The reserved capacity the account holds for ``instance_type`` in ``region``, and what the
        cloud offers to sell there for ``nodes`` VMs over ``hours`` from ``start`` (ISO date, or now)
        where it has a read call for that."""


@runtime_checkable
class ObjectStore(Protocol):
    """A stack's bucket: what `up` and `configure` publish for the nodes and read back from them
    (``nodes.cloud.channel``); keys are ``/``-separated paths."""

    def put(self, key: str, body: bytes) -> None: ...

    def get(self, key: str) -> bytes: ...

    def exists(self, key: str) -> bool: ...

    def list(self, prefix: str) -> tuple[list[tuple[str, str]], int]:
        """(key, etag) of every object under ``prefix``, and the number of list requests made."""

    def remove(self, key: str) -> None:
        """The object ``key`` deleted (one that is not there: nothing to do)."""

    def delete_all(self) -> int:
        """Empty the bucket (every version); the number of objects deleted."""


class Cloud(Provider, Protocol):
    """A cloud gpufleet creates pools on, through Pulumi, and finds again by tag."""

    extra: str  # the pip extra that installs its SDKs: pip install 'gpufleet[<extra>]'
    pulumi_package: str  # the type prefix of its Pulumi resources ("aws", "gcp", "azure-native")
    credential_hint: str  # how to give gpufleet credentials for it
    errors: ErrorPatterns
    # hourly list prices of what can be left behind, for `status` and `reap`:
    # {"disk": {disk type: $ per GB-month}, "fixed": {kind: $ per hour}}
    leftover_prices: Mapping[str, Mapping[str, float]]

    # the Pulumi types (a dynamic resource's gpufleet_kind) holding a pool's nodes: replacing one replaces
    # every running node of the pool, which `up` shows and asks before doing (fleet.up)
    node_kinds: tuple[str, ...]
    # inventory kinds of a pool whose replacement waits for them to be gone before the new nodes are asked
    # for, where the cloud's own deletion returns while they still hold their capacity (fleet.up)
    released_first: tuple[str, ...]
    # `heal` can replace one of a pool's nodes through the pool's own request (its API's ``replace_node``);
    # where it cannot yet, a faulty node is isolated (left drained and named) instead
    replaces_nodes: bool
    # a replacement may be asked on another market than its pool's (a spot pool's spot_fallback: on-demand);
    # where the pool's request fixes its nodes' market (Azure's Uniform scale set), it asks the pool's only
    market_per_node: bool
    # the pool's bucket lets a node write only its own status (AWS: the key is its ``aws:userid``); where
    # any node of a pool may write every status of it (GCP, Azure), a status alone never terminates a node
    own_status_only: bool
    # how `up` applies a pool's size: True where it sends the pool's whole capacity (an Azure scale set's sku.capacity
    # in a whole PUT), so a capacity below the VMs it has lets the cloud delete VMs of its own choosing; False where the
    # pool's request carries its min (an instant EC2 Fleet, a GCP bulkInsert), so a new min makes the pool anew (fleet.bounds)
    up_sets_capacity: bool

    image_template: str  # its Packer template under images/ (a golden image of a pool)
    images_global: bool  # an image built anywhere boots in every region (else only where it was built)
    # the cluster's network spans every region of the cloud (a node reaches another region's nodes at their private
    # addresses); else each region's network is its own, and gpufleet joins none of them (the monitor reaches its own)
    network_global: bool

    def image_vars(self, pool, *, name: str, tags: dict[str, str], builder_tags: dict[str, str], bundle: str,
                   settings: dict, zones: tuple[str, ...], build: str) -> dict:
        """The variables of ``image_template`` for a golden image of ``pool`` (``tags``: the image's;
        ``builder_tags``: the builder's, with a ``gpufleet:cluster`` that `reap` finds it by;
        ``zones``: its region's, as the catalog lists them; ``build``: this build's UTC second,
        YYYYMMDDhhmmss, which makes the name the cloud gives it its own)."""

    def image_destination(self, variables: dict) -> None:
        """Make what a build of these variables publishes into, where the template's plugin needs it
        first (Azure's Compute Gallery and image definition); nothing on the others."""

    def image_artifacts(self, ids: list[str], variables: dict) -> list[tuple[str, str]]:
        """(region, what the cloud calls the image) of each artifact id a Packer build printed."""

    def image_purchase_plan(self, variables: dict) -> dict | None:
        """The purchase plan (name, publisher, product) every VM of a build of these variables must
        name, its base image's (Azure: a Marketplace image sold with one); None where there is none."""

    def check_reservation(self, reservation, instance, pool) -> list[Problem]:
        """What is wrong with a reservation a pool names on this cloud (``spec.Reservation`` of
        ``instance``, a ``catalog.InstanceType``, None where the catalog has no such type, for
        ``pool``, a ``spec.Pool``; keys inside it): the id's form, its zone, what this cloud sells and
        reserves, what that type or the pool's other needs cannot take from one."""

    def tag_problems(self, tags: dict[str, str]) -> list[tuple[str, str]]:
        """(tag key, what is wrong) for each ``gpufleet:*`` tag this cloud would refuse as gpufleet
        writes it (as a label on GCP), by the cloud's own documented limits (``<cloud>/tag_rules``)."""

    def credentials(self) -> str:
        """Where credentials would come from (no network call); CredentialsError naming how to set them up."""

    def pool_fabric(self, pool, instance) -> str | None:
        """The catalog fabric the pool's nodes use for GPU traffic between nodes (``efa``, ``tcpx``
        ...), or None for plain networking."""

    def region_subnets(self, region: str) -> list[tuple[str, int]]:
        """Subnets a region needs besides its pools': ``(purpose, addresses)``."""

    def pool_subnets(self, pool) -> list[tuple[str, int]]:
        """Subnets a pool needs besides its own: ``(purpose, addresses)``."""

    def program_settings(self, *, plan: bool) -> dict[str, Any]:
        """What the program needs besides the stack (a GCP project, an Azure subscription);
        placeholders under `plan`."""

    def program(self):
        """The module whose ``build_region(ctx, index, region, pools, shared)`` creates a region's
        components inside the Pulumi program and returns each pool's exports."""

    def mocks(self):
        """The module that answers for this cloud under `plan`: ``ID_PREFIX``, ``COLUMNS``,
        ``resource(typ, name, inputs, rid, state, ctx)``, ``call(token, args, region, cat)`` and
        ``summary(typ, inputs)``."""

    def api(self) -> CloudApi:
        """The cloud's own API (loads its SDK)."""

    def objects(self, ref: dict) -> ObjectStore:
        """The stack's bucket (``ref``: a pool export's ``bucket``) through the cloud's SDK."""

    def prices(self):
        """The module with ``FLAGSHIPS`` and ``fetch(cat, progress) -> catalog.fetched.Fetched``."""

    def public_prices(self):
        """Such a module that needs no credentials (a public price list), or None where the cloud has none."""
        return None

    def rates(self):
        """The module with ``fetch(progress) -> list[catalog.rates.Rate]``: what the cloud bills besides
        instances, from its own price API; None where gpufleet has no fetcher for them."""
        return None

    team_scheme: str  # the URL scheme of its object store as a team store (`gpufleet team init s3://...`)

    def team_store(self, url: str):
        """A ``state.shared.SharedStore`` on the cloud's object store named by ``url`` (loads its SDK)."""

    def team_pulumi_backend(self, url: str) -> tuple[str, dict[str, str]]:
        """Pulumi's self-managed backend under ``url``'s ``pulumi/`` and the environment its CLI needs."""

    def quota_hint(self, line: QuotaLine) -> str:
        """Where to ask for more of a quota that is short."""

    def billed(self, since, until, clusters: list[str] | None, settings: dict) -> BillRead:
        """What the cloud billed for gpufleet's clusters (its ``gpufleet:cluster`` tag) from ``since`` to
        ``until`` (dates, the end excluded), per line (loads its SDK); ``settings``: the user config's
        ``billing:`` block."""

    def spend(self, resources: list[Planned]) -> list[Usage]:
        """What the plan's resources will be billed for besides the instances (volumes, file systems,
        NAT, public addresses), read off their inputs; no SDK."""

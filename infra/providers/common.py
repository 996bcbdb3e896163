"""What every provider shares and that needs no Pulumi: tags, names, address plans, images.

Imported by `plan`, `up` and the lifecycle commands; the Pulumi components in
``gpufleet.providers.{aws,gcp,azure}`` build on it.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
from dataclasses import dataclass, field

TAG_PREFIX = "gpufleet:"
TAG_KEYS = ("cluster", "stack", "pool", "owner", "expires-at")


@dataclass(frozen=True)
class Cluster:
    """The identity every resource of one brought-up stack carries."""

    name: str  # the cluster (= Pulumi stack) name; one stack file can be up as several clusters
    stack: str  # the stack file's `name`
    owner: str
    expires_at: dt.datetime  # aware, UTC

    def tags(self, pool: str | None = None) -> dict[str, str]:
        """AWS/Azure tags: ``gpufleet:cluster`` ... ``gpufleet:expires-at`` (ISO 8601 UTC)."""
        return {
            "gpufleet:cluster": self.name,
            "gpufleet:stack": self.stack,
            "gpufleet:pool": pool or "-",
            "gpufleet:owner": self.owner,
            "gpufleet:expires-at": format_expiry(self.expires_at),
        }

    def labels(self, pool: str | None = None) -> dict[str, str]:
        """GCP labels: keys without colons, values lowercase ``[a-z0-9_-]``, at most 63 characters."""
        out = {k.replace(":", "-"): label_value(v) for k, v in self.tags(pool).items()}
        # 2026-11-22T18:00:00Z -> 2026-11-22t18-00-00z, which parse_expiry reads back
        out["gpufleet-expires-at"] = format_expiry(self.expires_at).lower().replace(":", "-")
        return out


def describe(tags: dict[str, str]) -> str:
    """The description that marks a label-less GCP resource (network, firewall ...) as gpufleet's;
    ``lifecycle.gcp.tags_of`` reads the tags back from it."""
    import json

    return "gpufleet " + json.dumps(tags, sort_keys=True)


def format_expiry(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


_LABEL_EXPIRY = re.compile(r"^(\d{4})-(\d{2})-(\d{2})t(\d{2})-(\d{2})-(\d{2})z$")


def parse_expiry(value: str) -> dt.datetime:
    """An ``expires-at`` tag (ISO 8601) or its GCP label form (``2026-11-22t18-00-00z``)."""
    m = _LABEL_EXPIRY.match(value.strip())
    if m:
        y, mo, d, h, mi, s = (int(x) for x in m.groups())
        return dt.datetime(y, mo, d, h, mi, s, tzinfo=dt.timezone.utc)
    try:
        t = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        from gpufleet.errors import InputError

        raise InputError(f"expires-at {value!r} is not an ISO 8601 time",
                         "write it like 2026-11-22T18:00:00Z") from None
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


def label_value(v: str) -> str:
    """A GCP label value: lowercase letters, digits, ``_`` and ``-``; max 63 characters."""
    v = v.lower().replace("@", "_at_")
    return re.sub(r"[^a-z0-9_-]", "_", v)[:63]


def expiry_from(now: dt.datetime, ttl: dt.timedelta) -> dt.datetime:
    return (now + ttl).astimezone(dt.timezone.utc).replace(microsecond=0)


# --- address plan --------------------------------------------------------------------------

@dataclass
class Subnet:
    cidr: str
    purpose: str  # "public" (NAT, public nodes) or a pool name


@dataclass
class AddressPlan:
    """Subnets carved from the stack's network block: one public per cloud region, one per pool.

    Carving runs over the whole stack in file order, so every subnet is unique across
    regions and providers (GCP networks are global; unique ranges keep peering possible).
    """

    cidr: str
    subnets: dict[tuple[str, str, str], Subnet] = field(default_factory=dict)  # (provider, region, purpose)

    def get(self, provider: str, region: str, purpose: str) -> str:
        return self.subnets[(provider, region, purpose)].cidr


def plan_addresses(cidr: str, needs: list[tuple[str, str, str, int]]) -> AddressPlan:
    """``needs``: (provider, region, purpose, addresses) in order; returns non-overlapping subnets.

    Each subnet is the smallest power-of-two block holding twice the addresses (room to
    replace nodes and for file-system interfaces) plus the five every cloud reserves, and
    at least a /24; a small one (``addresses`` <= 16, e.g. the NAT subnet) gets a /28.
    Raises InputError when the block is too small.
    """
    from gpufleet.errors import InputError

    net = ipaddress.ip_network(cidr)
    plan = AddressPlan(cidr)
    # allocate biggest first so alignment wastes nothing, then report in the given order
    order = sorted(range(len(needs)), key=lambda i: -needs[i][3])
    cursor = int(net.network_address)
    end = int(net.broadcast_address) + 1
    taken: dict[int, str] = {}
    for i in order:
        n = needs[i][3]
        want = n + 5 if n <= 11 and needs[i][2] == "public" else max(256, 2 * n + 5)
        prefix = min(28, 32 - max(4, (want - 1).bit_length()))
        size = 1 << (32 - prefix)
        start = (cursor + size - 1) // size * size
        if start + size > end:
            raise InputError(f"network.cidr {cidr} is too small for the subnets this stack needs",
                             f"{needs[i][2]} in {needs[i][1]} needs {want} addresses; use a larger block, e.g. /16")
        taken[i] = str(ipaddress.ip_network((start, prefix)))
        cursor = start + size
    for i, (provider, region, purpose, _) in enumerate(needs):
        plan.subnets[(provider, region, purpose)] = Subnet(taken[i], purpose)
    return plan


def host_address(cidr: str, index: int) -> str:
    """The ``index``-th usable address of a subnet after the cloud-reserved first four."""
    net = ipaddress.ip_network(cidr)
    return str(net.network_address + 4 + index)


@dataclass
class StorageArgs:
    """A pool's storage entry as the components take it (what the stack file's Storage says)."""

    type: str
    mount: str
    capacity_tib: float | None = None
    throughput_mbps_per_tib: int | None = None
    server: str | None = None

    @classmethod
    def of(cls, st) -> "StorageArgs":
        return cls(st.type, st.mount, st.capacity_tib, st.throughput_mbps_per_tib, st.server)


def first_zone(zones, problem: str) -> str:
    """The first zone by name, or a CapacityError saying ``problem`` when there is none."""
    if not zones:
        from gpufleet.errors import CapacityError

        raise CapacityError(problem, "choose another region, or set pool.zone")
    return sorted(zones)[0]


# --- names -----------------------------------------------------------------------------------

def resource_name(*parts: str, limit: int = 63) -> str:
    """A Pulumi logical name from parts: lowercase, ``-`` joined, at most ``limit`` characters."""
    name = "-".join(p for p in parts if p).lower()
    name = re.sub(r"[^a-z0-9-]", "-", name)
    if len(name) > limit:
        import hashlib

        digest = hashlib.sha1(name.encode()).hexdigest()[:6]
        name = name[: limit - 7] + "-" + digest
    return name


# Accelerator type names for GPUs attached to GCP N1 machines.
# https://cloud.google.com/compute/docs/gpus
GCP_ACCELERATORS = {"T4": "nvidia-tesla-t4", "V100": "nvidia-tesla-v100", "P100": "nvidia-tesla-p100",
                    "P4": "nvidia-tesla-p4", "K80": "nvidia-tesla-k80"}


# --- images ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ImageRef:
    """How each cloud finds an OS image by name, as its own image lookup expects it."""

    aws_owner: str
    aws_name: str
    gcp_project: str
    gcp_family: str
    azure: tuple[str, str, str, str]  # publisher, offer, sku, version
    osfinger: str  # the OS as Salt names it (grains osfinger): what the NVIDIA states check it against


# Canonical's and Microsoft's published image names (AWS: owner 099720109477 is Canonical;
# GCP: the ubuntu-os-cloud families; Azure: the Ubuntu and Microsoft HPC marketplace images).
IMAGES: dict[str, ImageRef] = {
    "ubuntu-22.04": ImageRef("099720109477", "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-*",
                             "ubuntu-os-cloud", "ubuntu-2204-lts",
                             ("Canonical", "0001-com-ubuntu-server-jammy", "22_04-lts-gen2", "latest"), "Ubuntu-22.04"),
    "ubuntu-24.04": ImageRef("099720109477", "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-*",
                             "ubuntu-os-cloud", "ubuntu-2404-lts-amd64",
                             ("Canonical", "ubuntu-24_04-lts", "server", "latest"), "Ubuntu-24.04"),
    "ubuntu-hpc-22.04": ImageRef("099720109477", "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-*",
                                 "ubuntu-os-cloud", "ubuntu-2204-lts",
                                 ("microsoft-dsvm", "ubuntu-hpc", "2204", "latest"), "Ubuntu-22.04"),
    "rocky-9": ImageRef("792107900819", "Rocky-9-EC2-Base-9.*x86_64*",
                        "rocky-linux-cloud", "rocky-linux-9",
                        ("resf", "rockylinux-x86_64", "9-base", "latest"), "Rocky-9"),
}
DEFAULT_IMAGE = "ubuntu-22.04"


def image(name: str | None) -> ImageRef:
    from gpufleet.errors import NotFound

    key = name or DEFAULT_IMAGE
    if key not in IMAGES:
        raise NotFound("image", key, IMAGES)
    return IMAGES[key]

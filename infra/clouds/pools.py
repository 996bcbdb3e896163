"""What the Pulumi components of every cloud take from a pool, and how they name things."""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field

from gpufleet.catalog.images import IMAGES
from gpufleet.errors import CapacityError
from gpufleet.spec import Problem
from gpufleet.state.images import PREFIX as BUILT


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
        raise CapacityError(problem, "choose another region, or set pool.zone")
    return sorted(zones)[0]


def resource_name(*parts: str, limit: int = 63) -> str:
    """A Pulumi logical name from parts: lowercase, ``-`` joined, at most ``limit`` characters."""
    name = "-".join(p for p in parts if p).lower()
    name = re.sub(r"[^a-z0-9-]", "-", name)
    if len(name) > limit:
        digest = hashlib.sha1(name.encode()).hexdigest()[:6]
        name = name[: limit - 7] + "-" + digest
    return name


def pair_digest(*parts: str, size: int = 6) -> str:
    """A digest of ``parts`` as given: stack and pool names hold "-", so ``prod-eu`` + ``gpu`` and
    ``prod`` + ``eu-gpu`` joined by "-" read alike; with this digest their names differ."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:size]


def pair_name(*parts: str, limit: int) -> str:
    """A resource name of ``parts`` that no other parts give (``pair_digest`` ends it)."""
    return resource_name(*parts, pair_digest(*parts), limit=limit)


# --- what every cloud checks the same way, each with its own tables -------------------------

AUTONAME_SUFFIX = 8  # Pulumi's auto-name: the logical name, "-" and 7 random characters


@dataclass(frozen=True)
class NameRule:
    """How a cloud names one resource type: the input that holds the name (a dotted path into the
    inputs; None when Pulumi auto-names it from the logical name), its longest length and its
    characters (a regular expression), and where that comes from."""

    key: str | None
    limit: int
    pattern: str
    source: str


@dataclass(frozen=True)
class Sizes:
    """The sizes a managed file system is sold in: ``first`` sizes, then from ``start`` to
    ``maximum`` in steps of ``step`` (all in the API's unit, ``unit``). ``per_tib``: how many of
    that unit the provider counts in a TiB (AWS FSx calls 1,200 GiB "1.2 TiB")."""

    unit: str
    per_tib: float
    start: int
    step: int
    maximum: int
    source: str
    first: tuple[int, ...] = ()

    def requested(self, tib: float) -> float:
        return tib * self.per_tib

    def fit(self, tib: float) -> int | None:
        """The smallest size it is sold in that holds ``tib``; None when none does (over the maximum)."""
        want = self.requested(tib)
        for size in self.first:
            if size >= want:
                return size
        size = max(self.start, int(math.ceil((want - self.start) / self.step)) * self.step + self.start)
        return size if size <= self.maximum else None


@dataclass(frozen=True)
class StorageRules:
    """What a cloud's managed storage offers a pool."""

    lustre_service: str  # the managed Lustre gpufleet creates
    lustre_tiers: tuple[int, ...]  # MB/s per TiB it offers
    creates_nfs: bool  # whether an `nfs` entry without `server` gets a server (GCP Filestore)
    lustre_sizes: dict[int, Sizes] = field(default_factory=dict)  # per tier
    default_tier: int = 250
    default_lustre_tib: float = 0.0  # when a lustre entry gives no capacity: the tier's smallest
    nfs_sizes: Sizes | None = None  # the NFS server gpufleet creates (GCP Filestore zonal)
    default_nfs_tib: float = 1.0

    def lustre(self, st) -> tuple[Sizes, int | None]:
        """The sizes of the entry's tier, and the size it gets (None: too large for the tier)."""
        sizes = self.lustre_sizes[st.throughput_mbps_per_tib or self.default_tier]
        return sizes, sizes.fit(st.capacity_tib or self.default_lustre_tib)

    def nfs(self, st) -> int | None:
        return self.nfs_sizes.fit(st.capacity_tib or self.default_nfs_tib) if self.nfs_sizes else None


def storage_problems(pool, instance, rules: StorageRules) -> list:
    """A cloud pool's storage entries against what its cloud offers."""
    out = []
    for i, st in enumerate(pool.storage):
        if st.type == "lustre":
            tp = st.throughput_mbps_per_tib
            if tp is not None and tp not in rules.lustre_tiers:
                out.append(Problem(("storage", i, "throughput_mbps_per_tib"),
                                   f"{rules.lustre_service} offers no {tp} MB/s/TiB tier",
                                   f"choose one of {', '.join(map(str, rules.lustre_tiers))}"))
            elif rules.lustre_sizes:
                sizes, size = rules.lustre(st)
                if size is None:
                    out.append(Problem(("storage", i, "capacity_tib"),
                                       f"{rules.lustre_service} at {tp or rules.default_tier} MB/s/TiB holds at most "
                                       f"{sizes.maximum:,} {sizes.unit}",
                                       f"ask for less, or split it over several file systems (source: {sizes.source})"))
            if st.mgs_nids or st.fsname:
                out.append(Problem(("storage", i), "mgs_nids/fsname describe an existing Lustre; on a cloud pool "
                                   f"gpufleet creates {rules.lustre_service}", "drop them, or mount it with Salt pillar"))
        elif st.type == "nfs" and not st.server and not rules.creates_nfs:
            out.append(Problem(("storage", i, "server"), f"an nfs entry on {pool.provider} needs `server`",
                               "only GCP pools create an NFS server for you (Filestore)"))
        elif st.type == "nfs" and not st.server and rules.nfs_sizes and rules.nfs(st) is None:
            out.append(Problem(("storage", i, "capacity_tib"), f"the NFS server gpufleet creates holds at most "
                               f"{rules.nfs_sizes.maximum:,} {rules.nfs_sizes.unit}",
                               f"ask for less (source: {rules.nfs_sizes.source})"))
        elif st.type == "local-nvme" and not instance.local_nvme_gb:
            out.append(Problem(("storage", i, "type"), f"{instance.name} has no local NVMe",
                               "use an instance type with instance storage, or drop this entry"))
    return out


def existing_network_problems(pool) -> list[Problem]:
    """A pool placed in an existing network names both its network and its subnet (the clouds whose
    subnets belong to a named VPC/network: AWS, GCP)."""
    if bool(pool.vpc) != bool(pool.subnet):
        return [Problem(("subnet" if pool.vpc else "vpc",), "give both `vpc` and `subnet` to use an existing network, "
                        "or neither", "gpufleet creates the network when neither is given")]
    return []


def reservation_problems(r, pattern: str, what: str, example: str, *, zone_example: str | None,
                         capacity_blocks: bool = False) -> list[Problem]:
    """A reservation's id in its cloud's form (``pattern``), its zone where the cloud's capacity is
    zonal (``zone_example`` given), and a Capacity Block only where the cloud sells them; keys are
    inside the reservation."""
    out = []
    if not re.match(pattern, r.id, re.IGNORECASE):
        out.append(Problem(("id",), f"{r.id!r} is not {what}", f"it looks like {example}"))
    if zone_example and not r.zone:
        out.append(Problem(("zone",), f"{what} holds capacity in one zone: name it", f"e.g. zone: {zone_example}"))
    if r.capacity_block is not None and not capacity_blocks:
        out.append(Problem(("capacity_block",), "capacity_block describes an AWS Capacity Block for ML",
                           f"{what} is billed at the on-demand rate while it exists: drop capacity_block"))
    return out


def flex_start_elsewhere(pool, cloud_name: str) -> list[Problem]:
    """``flex_start`` is GCP's Dynamic Workload Scheduler; on other clouds it is a mistake."""
    if pool.flex_start:
        return [Problem(("flex_start",), f"flex_start is GCP's Dynamic Workload Scheduler; {cloud_name} has none",
                        "drop flex_start, or name reservations the team holds")]
    return []


def imds_hop_limit_elsewhere(pool, cloud_name: str) -> list[Problem]:
    """``imds_hop_limit`` is EC2's; another cloud's metadata server has no such limit to set."""
    if pool.imds_hop_limit is not None:
        return [Problem(("imds_hop_limit",), f"imds_hop_limit is AWS's instance metadata setting; {cloud_name} has "
                        "none", "drop imds_hop_limit")]
    return []


def image_problems(pool, own: str, is_own) -> list:
    """A pool's ``image``: one of gpufleet's names, or the cloud's own reference (``is_own``,
    described as ``own``)."""
    if pool.image is None or pool.image in IMAGES or is_own(pool.image) or pool.image.startswith(BUILT):
        return []  # a built golden image (gpufleet:<name>) is looked up in the manifest when planned
    return [Problem(("image",), f"unknown image {pool.image!r}",
                    f"use one of {', '.join(IMAGES)}, {BUILT}<name> (`gpufleet image build`), or {own}")]


def is_multi_node(pool) -> bool:
    return (pool.nodes or 1) > 1

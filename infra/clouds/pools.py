"""What the Pulumi components of every cloud take from a pool, and how they name things."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from gpufleet.catalog.images import IMAGES
from gpufleet.errors import CapacityError
from gpufleet.spec import Problem


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


# --- what every cloud checks the same way, each with its own tables -------------------------

@dataclass(frozen=True)
class StorageRules:
    """What a cloud's managed storage offers a pool."""

    lustre_service: str  # the managed Lustre gpufleet creates
    lustre_tiers: tuple[int, ...]  # MB/s per TiB it offers
    creates_nfs: bool  # whether an `nfs` entry without `server` gets a server (GCP Filestore)


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
            if st.mgs_nids or st.fsname:
                out.append(Problem(("storage", i), "mgs_nids/fsname describe an existing Lustre; on a cloud pool "
                                   f"gpufleet creates {rules.lustre_service}", "drop them, or mount it with Salt pillar"))
        elif st.type == "nfs" and not st.server and not rules.creates_nfs:
            out.append(Problem(("storage", i, "server"), f"an nfs entry on {pool.provider} needs `server`",
                               "only GCP pools create an NFS server for you (Filestore)"))
        elif st.type == "local-nvme" and not instance.local_nvme_gb:
            out.append(Problem(("storage", i, "type"), f"{instance.name} has no local NVMe",
                               "use an instance type with instance storage, or drop this entry"))
    return out


def image_problems(pool, own: str, is_own) -> list:
    """A pool's ``image``: one of gpufleet's names, or the cloud's own reference (``is_own``,
    described as ``own``)."""
    if pool.image is None or pool.image in IMAGES or is_own(pool.image):
        return []
    return [Problem(("image",), f"unknown image {pool.image!r}", f"use one of {', '.join(IMAGES)}, or {own}")]


def is_multi_node(pool) -> bool:
    return (pool.nodes or 1) > 1

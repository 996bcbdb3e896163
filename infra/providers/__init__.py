"""One module per cloud behind one shape, and what each cloud can and cannot do.

The Pulumi components live in ``gpufleet.providers.{aws,gcp,azure}`` and import Pulumi at
module level, so import them only through :func:`components`. This module and
``common`` import no cloud SDK: the checks below run in ``validate`` and before ``plan``
and ``up`` create anything.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

CLOUDS = ("aws", "gcp", "azure")

# What the SDK/provider package is called, for "install the extra" messages.
EXTRAS = {"aws": "pulumi-aws", "gcp": "pulumi-gcp", "azure": "pulumi-azure-native"}

# Lustre throughput tiers (MB/s per TiB) each managed service offers.
# AWS FSx for Lustre PERSISTENT_2: https://docs.aws.amazon.com/fsx/latest/LustreGuide/performance.html
# GCP Managed Lustre: https://cloud.google.com/managed-lustre/docs/create-instance
# Azure Managed Lustre: https://learn.microsoft.com/azure/azure-managed-lustre/amlfs-prerequisites
LUSTRE_TIERS = {"aws": (125, 250, 500, 1000), "gcp": (125, 250, 500, 1000), "azure": (40, 125, 250, 500)}
LUSTRE_SERVICE = {"aws": "FSx for Lustre (PERSISTENT_2)", "gcp": "Managed Lustre", "azure": "Azure Managed Lustre"}
AZURE_MAX_IB_NODES = 100  # one placement group of a scale set


@dataclass(frozen=True)
class Problem:
    keys: tuple  # key path inside the pool, e.g. ("storage", 0, "throughput_mbps_per_tib")
    message: str
    hint: str | None = None


def uses_efa(pool, it) -> bool:
    """EFA when asked for, or by default for multi-node pools of EFA-capable instance types."""
    return pool.interconnect == "efa" or (pool.interconnect is None and it.fabric == "efa" and (pool.nodes or 1) > 1)


def uses_tcpx(pool, it) -> bool:
    return pool.interconnect == "gpudirect-tcpx" or (pool.interconnect is None and it.fabric == "tcpx" and (pool.nodes or 1) > 1)


def image_ok(provider: str, image: str | None) -> bool:
    """A gpufleet image name, or the provider's own image reference."""
    from gpufleet.providers.common import IMAGES

    if image is None or image in IMAGES:
        return True
    return {"aws": image.startswith("ami-"), "gcp": image.startswith("projects/"),
            "azure": image.count(":") == 3}.get(provider, False)


def check_pool(stack, pool, it) -> list[Problem]:
    """What this cloud cannot do for this pool, with the reason, before anything is created."""
    from gpufleet.providers.common import IMAGES

    out: list[Problem] = []
    p = pool.provider
    if not image_ok(p, pool.image):
        native = {"aws": "an AMI id (ami-...)", "gcp": "an image path (projects/.../global/images/...)",
                  "azure": "a URN publisher:offer:sku:version"}[p]
        out.append(Problem(("image",), f"unknown image {pool.image!r}", f"use one of {', '.join(IMAGES)}, or {native}"))
    for i, st in enumerate(pool.storage):
        if st.type == "lustre":
            tiers = LUSTRE_TIERS[p]
            tp = st.throughput_mbps_per_tib
            if tp is not None and tp not in tiers:
                out.append(Problem(("storage", i, "throughput_mbps_per_tib"),
                                   f"{LUSTRE_SERVICE[p]} offers no {tp} MB/s/TiB tier",
                                   f"choose one of {', '.join(map(str, tiers))}"))
            if st.mgs_nids or st.fsname:
                out.append(Problem(("storage", i), "mgs_nids/fsname describe an existing Lustre; on a cloud pool "
                                   f"gpufleet creates {LUSTRE_SERVICE[p]}", "drop them, or mount it with Salt pillar"))
        elif st.type == "nfs" and not st.server and p != "gcp":
            out.append(Problem(("storage", i, "server"), f"an nfs entry on {p} needs `server`",
                               "only GCP pools create an NFS server for you (Filestore)"))
        elif st.type == "local-nvme" and not it.local_nvme_gb:
            out.append(Problem(("storage", i, "type"), f"{it.name} has no local NVMe",
                               "use an instance type with instance storage, or drop this entry"))
    if p == "aws" and pool.public_ip and uses_efa(pool, it):
        out.append(Problem(("public_ip",), "an instance with EFA interfaces gets no automatic public IP",
                           "reach EFA pools through a bastion or VPN (access.ssh_cidrs on a private route)"))
    if p == "gcp" and it.gpu_attach == "separate":
        from gpufleet.providers.common import GCP_ACCELERATORS

        if it.gpu not in GCP_ACCELERATORS:
            out.append(Problem(("instance_type",), f"no GCP accelerator type is known for {it.gpu}"))
    if p == "azure":
        if not stack.access.public_key:
            out.append(Problem(("provider",), "Azure scale sets need an SSH public key (password login is disabled)",
                               "set access.public_key: ~/.ssh/id_ed25519.pub in the stack"))
        if it.fabric.startswith("infiniband") and (pool.nodes or 1) > AZURE_MAX_IB_NODES:
            out.append(Problem(("nodes",), f"InfiniBand connects at most {AZURE_MAX_IB_NODES} VMs of one scale set",
                               "split the pool into several pools of at most 100 nodes"))
    return out


def components(provider: str):
    """The Pulumi component module of a cloud; a clear error when its package is missing."""
    try:
        return importlib.import_module(f"gpufleet.providers.{provider}")
    except ModuleNotFoundError as e:
        from gpufleet.errors import GpufleetError

        raise GpufleetError(f"{provider} pools need {EXTRAS[provider]} ({e.name} is not installed)",
                            f"pip install 'gpufleet[{provider}]'", exit_code=2) from None

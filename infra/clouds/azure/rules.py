"""What Azure can do for a pool, checked before anything is created (no SDK)."""

from __future__ import annotations

from gpufleet.catalog.images import DEFAULT_IMAGE
from gpufleet.clouds.pools import StorageRules, image_problems, storage_problems
from gpufleet.spec import Problem

INTERCONNECTS = {"infiniband-hdr": "infiniband-hdr", "infiniband-ndr": "infiniband-ndr",
                 "10gbe": None, "25gbe": None, "100gbe": None}

# Azure Managed Lustre tiers: https://learn.microsoft.com/azure/azure-managed-lustre/amlfs-prerequisites
STORAGE = StorageRules("Azure Managed Lustre", (40, 125, 250, 500), creates_nfs=False)
MAX_IB_NODES = 100  # InfiniBand connects the VMs of one placement group of a scale set

# gpufleet's image names as marketplace URNs (publisher, offer, sku, version): Canonical's Ubuntu,
# Microsoft's Ubuntu HPC image (drivers, InfiniBand and MPI preinstalled), the RESF's Rocky Linux
IMAGES = {
    "ubuntu-22.04": ("Canonical", "0001-com-ubuntu-server-jammy", "22_04-lts-gen2", "latest"),
    "ubuntu-24.04": ("Canonical", "ubuntu-24_04-lts", "server", "latest"),
    "ubuntu-hpc-22.04": ("microsoft-dsvm", "ubuntu-hpc", "2204", "latest"),
    "rocky-9": ("resf", "rockylinux-x86_64", "9-base", "latest"),
}


def is_urn(image: str) -> bool:
    return image.count(":") == 3


def image_urn(image: str | None) -> tuple[str, str, str, str]:
    """The marketplace image a pool boots: its own URN, or that of a gpufleet image name."""
    if image and is_urn(image):
        return tuple(image.split(":"))
    return IMAGES[image or DEFAULT_IMAGE]


def pool_fabric(pool, instance) -> str | None:
    """InfiniBand comes with the ND/NC SKUs that have it: every VM of the scale set is on it."""
    return instance.fabric if instance.fabric.startswith("infiniband") else None


def check_pool(stack, pool, instance) -> list[Problem]:
    out = image_problems(pool, "a URN publisher:offer:sku:version", is_urn) + storage_problems(pool, instance, STORAGE)
    if not stack.access.public_key:
        out.append(Problem(("provider",), "Azure scale sets need an SSH public key (password login is disabled)",
                           "set access.public_key: ~/.ssh/id_ed25519.pub in the stack"))
    if pool_fabric(pool, instance) and (pool.nodes or 1) > MAX_IB_NODES:
        out.append(Problem(("nodes",), f"InfiniBand connects at most {MAX_IB_NODES} VMs of one scale set",
                           "split the pool into several pools of at most 100 nodes"))
    return out


def region_subnets(region: str) -> list[tuple[str, int]]:
    return []


def pool_subnets(pool) -> list[tuple[str, int]]:
    """Azure Managed Lustre wants a /24 of its own."""
    return [(f"{pool.name}-lustre", 120)] if any(s.type == "lustre" for s in pool.storage) else []

"""What GCP can do for a pool, checked before anything is created (no SDK)."""

from __future__ import annotations

from gpufleet.catalog.images import DEFAULT_IMAGE
from gpufleet.clouds.pools import StorageRules, image_problems, is_multi_node, storage_problems
from gpufleet.spec import Problem

INTERCONNECTS = {"gpudirect-tcpx": "tcpx", "10gbe": None, "25gbe": None, "100gbe": None}

# Managed Lustre throughput tiers: https://cloud.google.com/managed-lustre/docs/create-instance
STORAGE = StorageRules("Managed Lustre", (125, 250, 500, 1000), creates_nfs=True)

# Accelerator type names for GPUs attached to N1 machines. https://cloud.google.com/compute/docs/gpus
ACCELERATORS = {"T4": "nvidia-tesla-t4", "V100": "nvidia-tesla-v100", "P100": "nvidia-tesla-p100",
                "P4": "nvidia-tesla-p4", "K80": "nvidia-tesla-k80"}

# gpufleet's image names as image project and family (the ubuntu-os-cloud and rocky-linux-cloud families)
IMAGES = {
    "ubuntu-22.04": ("ubuntu-os-cloud", "ubuntu-2204-lts"),
    "ubuntu-24.04": ("ubuntu-os-cloud", "ubuntu-2404-lts-amd64"),
    "ubuntu-hpc-22.04": ("ubuntu-os-cloud", "ubuntu-2204-lts"),
    "rocky-9": ("rocky-linux-cloud", "rocky-linux-9"),
}


def is_image_path(image: str) -> bool:
    return image.startswith("projects/")


def image_path(image: str | None) -> str:
    """The image a pool boots: its own ``projects/...`` path, or the family of a gpufleet image name."""
    if image and is_image_path(image):
        return image
    project, family = IMAGES[image or DEFAULT_IMAGE]
    return f"projects/{project}/global/images/family/{family}"


def pool_fabric(pool, instance) -> str | None:
    """GPUDirect-TCPX when asked for, or by default for multi-node pools of machines that have it."""
    if pool.interconnect == "gpudirect-tcpx" or (pool.interconnect is None and instance.fabric == "tcpx"
                                                 and is_multi_node(pool)):
        return "tcpx"
    return None


def check_pool(stack, pool, instance) -> list[Problem]:
    out = image_problems(pool, "an image path (projects/.../global/images/...)", is_image_path)
    out += storage_problems(pool, instance, STORAGE)
    if instance.gpu_attach == "separate" and instance.gpu not in ACCELERATORS:
        out.append(Problem(("instance_type",), f"no GCP accelerator type is known for {instance.gpu}"))
    return out


def region_subnets(region: str) -> list[tuple[str, int]]:
    return []


def pool_subnets(pool) -> list[tuple[str, int]]:
    return []

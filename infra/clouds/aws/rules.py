"""What AWS can do for a pool, checked before anything is created (no SDK)."""

from __future__ import annotations

from gpufleet.clouds.pools import StorageRules, image_problems, is_multi_node, storage_problems
from gpufleet.spec import Problem

# interconnect a pool may ask for -> the catalog fabric its instance type needs (None: any)
INTERCONNECTS = {"efa": "efa", "10gbe": None, "25gbe": None, "100gbe": None}

# FSx for Lustre PERSISTENT_2 throughput tiers:
# https://docs.aws.amazon.com/fsx/latest/LustreGuide/performance.html
STORAGE = StorageRules("FSx for Lustre (PERSISTENT_2)", (125, 250, 500, 1000), creates_nfs=False)

# gpufleet's image names as AMI owner and name pattern (owner 099720109477 is Canonical; 792107900819
# the Rocky Enterprise Software Foundation)
IMAGES = {
    "ubuntu-22.04": ("099720109477", "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-*"),
    "ubuntu-24.04": ("099720109477", "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-*"),
    "ubuntu-hpc-22.04": ("099720109477", "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-*"),
    "rocky-9": ("792107900819", "Rocky-9-EC2-Base-9.*x86_64*"),
}


def is_ami(image: str) -> bool:
    return image.startswith("ami-")


def pool_fabric(pool, instance) -> str | None:
    """EFA when asked for, or by default for multi-node pools of EFA-capable instance types."""
    if pool.interconnect == "efa" or (pool.interconnect is None and instance.fabric == "efa" and is_multi_node(pool)):
        return "efa"
    return None


def check_pool(stack, pool, instance) -> list[Problem]:
    out = image_problems(pool, "an AMI id (ami-...)", is_ami) + storage_problems(pool, instance, STORAGE)
    if pool.public_ip and pool_fabric(pool, instance) == "efa":
        out.append(Problem(("public_ip",), "an instance with EFA interfaces gets no automatic public IP",
                           "reach EFA pools through a bastion or VPN (access.ssh_cidrs on a private route)"))
    return out


def region_subnets(region: str) -> list[tuple[str, int]]:
    """A public subnet per region for the NAT gateway (and nodes with public IPs)."""
    return [("public", 8)]


def pool_subnets(pool) -> list[tuple[str, int]]:
    return []

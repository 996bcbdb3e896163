"""What AWS can do for a pool, checked before anything is created (no SDK)."""

from __future__ import annotations

from gpufleet.clouds.pools import (
    NameRule,
    Sizes,
    StorageRules,
    existing_network_problems,
    flex_start_elsewhere,
    image_problems,
    is_multi_node,
    reservation_problems,
    storage_problems,
)
from gpufleet.spec import Problem

# interconnect a pool may ask for -> the catalog fabric its instance type needs (None: any)
INTERCONNECTS = {"efa": "efa", "10gbe": None, "25gbe": None, "100gbe": None}

# FSx for Lustre PERSISTENT_2 on SSD: throughput 125/250/500/1000 MB/s/TiB
# (https://docs.aws.amazon.com/fsx/latest/LustreGuide/managing-throughput-capacity.html); StorageCapacity
# "1200 GiB, 2400 GiB, and increments of 2400 GiB" (FSx CreateFileSystem API reference, 2025). AWS
# counts 1,200 GiB as "1.2 TiB", so capacity_tib: 4.8 is 4,800 GiB, not 4,916 rounded to 7,200.
# No maximum is documented for the API; the service quota (default 100,800 GiB per account,
# raised on request) is what stops a larger one.
FSX_SIZES = Sizes("GiB", 1000, 2400, 2400, 10_000_000, "FSx CreateFileSystem StorageCapacity (2025)", first=(1200,))
STORAGE = StorageRules("FSx for Lustre (PERSISTENT_2)", (125, 250, 500, 1000), creates_nfs=False,
                       lustre_sizes={t: FSX_SIZES for t in (125, 250, 500, 1000)}, default_lustre_tib=1.2)

# Name rules of the AWS resources gpufleet names or lets Pulumi auto-name (logical name + 8); types
# not listed take no name (VPC, subnets, instances: a Name tag only). IAM: docs.aws.amazon.com/IAM/
# latest/UserGuide/reference_iam-quotas.html; EC2: the CreateLaunchTemplate, CreatePlacementGroup,
# ImportKeyPair and CreateSecurityGroup API references (2026).
_IAM = "IAM quotas, name requirements (docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html, 2026)"
NAME_RULES = {
    "aws:iam/role:Role": NameRule("name", 64, r"^[\w+=,.@-]+$", _IAM),
    "aws:iam/instanceProfile:InstanceProfile": NameRule(None, 128, r"^[\w+=,.@-]+$", _IAM),
    "aws:ec2/launchTemplate:LaunchTemplate": NameRule(None, 128, r"^[a-zA-Z0-9().\-/_]+$", "EC2 CreateLaunchTemplate (2026)"),
    "aws:ec2/placementGroup:PlacementGroup": NameRule(None, 255, r"^.+$", "EC2 CreatePlacementGroup (2026)"),
    "aws:ec2/keyPair:KeyPair": NameRule("keyName", 255, r"^[ -~]+$", "EC2 ImportKeyPair (2026)"),
    "aws:ec2/securityGroup:SecurityGroup": NameRule(None, 255, r"^[ -~]+$", "EC2 CreateSecurityGroup (2026)"),
}
NAME_DEFAULT = None  # everything else has no name

# gpufleet's image names as AMI owner and name pattern (owner 099720109477 is Canonical; 792107900819
# the Rocky Enterprise Software Foundation)
IMAGES = {
    "ubuntu-22.04": ("099720109477", "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-*"),
    "ubuntu-24.04": ("099720109477", "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-*"),
    "ubuntu-hpc-22.04": ("099720109477", "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-*"),
    "rocky-9": ("792107900819", "Rocky-9-EC2-Base-9.*x86_64*"),
}
# The user each of those AMIs lets in with the launch key pair (cloud-init's default user: Canonical's
# `ubuntu`; the RESF's EC2 images `rocky`, as its AWS Marketplace listing says and peers' amazon-ebs
# templates for Rocky-9-EC2-Base use, read 2026-11). An image builder logs in as it.
LOGIN_USERS = {"ubuntu-22.04": "ubuntu", "ubuntu-24.04": "ubuntu", "ubuntu-hpc-22.04": "ubuntu", "rocky-9": "rocky"}


def is_ami(image: str) -> bool:
    return image.startswith("ami-")


def pool_fabric(pool, instance) -> str | None:
    """EFA when asked for, or by default for multi-node pools of EFA-capable instance types."""
    if pool.interconnect == "efa" or (pool.interconnect is None and instance.fabric == "efa" and is_multi_node(pool)):
        return "efa"
    return None


def check_pool(stack, pool, instance) -> list[Problem]:
    out = image_problems(pool, "an AMI id (ami-...)", is_ami) + storage_problems(pool, instance, STORAGE)
    out += existing_network_problems(pool) + flex_start_elsewhere(pool, "AWS")
    if pool.public_ip and pool_fabric(pool, instance) == "efa":
        out.append(Problem(("public_ip",), "an instance with EFA interfaces gets no automatic public IP",
                           "reach EFA pools through a bastion or VPN (access.ssh_cidrs on a private route)"))
    return out


def check_reservation(r, instance, pool) -> list[Problem]:
    """An On-Demand Capacity Reservation or a Capacity Block (EC2 CreateCapacityReservation /
    PurchaseCapacityBlock: ``cr-`` + 17 hex digits, older ones 8), in one Availability Zone."""
    return reservation_problems(r, r"^cr-[0-9a-f]{8,17}$", "a capacity reservation id", "cr-0123456789abcdef0",
                                zone_example="us-east-1a", capacity_blocks=True)


def region_subnets(region: str) -> list[tuple[str, int]]:
    """A public subnet per region for the NAT gateway (and nodes with public IPs)."""
    return [("public", 8)]


def pool_subnets(pool) -> list[tuple[str, int]]:
    return []


# One SKU any sound price list has (on-demand, in its home region): a refresh without it is refused.
FLAGSHIPS = [("p5.48xlarge", "us-east-1")]

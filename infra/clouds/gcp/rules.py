"""What GCP can do for a pool, checked before anything is created (no SDK)."""

from __future__ import annotations

from gpufleet.catalog import consumption
from gpufleet.catalog.images import DEFAULT_IMAGE
from gpufleet.clouds.pools import (
    NameRule,
    Sizes,
    StorageRules,
    existing_network_problems,
    image_problems,
    imds_hop_limit_elsewhere,
    is_multi_node,
    reservation_problems,
    resource_name,
    storage_problems,
)
from gpufleet.spec import Problem

INTERCONNECTS = {"gpudirect-tcpx": "tcpx", "10gbe": None, "25gbe": None, "100gbe": None}

# Managed Lustre capacity per performance tier (MB/s per TiB), in GiB: the smallest size, then
# steps of it up to the step threshold (the larger steps above it are not offered here).
# https://cloud.google.com/managed-lustre/docs/performance-tiers and .../increase-capacity (2026)
# Google states these sizes in thousands of GiB (its "9 TiB" tier minimum is 9,000 GiB), so a
# stack's capacity_tib is read that way: 18 at 500 MB/s/TiB is the tier's smallest, 18,000 GiB.
_LUSTRE = "Managed Lustre performance tiers (cloud.google.com/managed-lustre/docs/performance-tiers, 2026)"
# Filestore zonal (what an `nfs` entry without a server gets): 1-9.75 TiB in 256 GiB steps, and
# 10-100 TiB in 2.5 TiB steps (cloud.google.com/filestore/docs/service-tiers-zonal, 2026). The
# lower range's largest step ends at 9,984 GiB; above it the higher range starts at 10,240.
FILESTORE_ZONAL = Sizes("GiB", 1024, 10_240, 2_560, 102_400, "Filestore zonal tier (cloud.google.com/filestore/docs/"
                        "service-tiers-zonal, 2026)", first=tuple(range(1024, 9985, 256)))
STORAGE = StorageRules("Managed Lustre", (125, 250, 500, 1000), creates_nfs=True, lustre_sizes={
    1000: Sizes("GiB", 1000, 9_000, 9_000, 1_530_000, _LUSTRE),
    500: Sizes("GiB", 1000, 18_000, 18_000, 3_060_000, _LUSTRE),
    250: Sizes("GiB", 1000, 36_000, 36_000, 6_120_000, _LUSTRE),
    125: Sizes("GiB", 1000, 72_000, 72_000, 12_240_000, _LUSTRE)}, nfs_sizes=FILESTORE_ZONAL)

# The VPC's MTU: the largest GCP allows, which Managed Lustre's docs recommend for its clients and
# the A3 blueprints give the primary network (cloud.google.com/managed-lustre/docs/vpc,
# cloud.google.com/vpc/docs/mtu, 2026). GPUDirect-TCPX's GPU NIC networks keep 8244.
MTU = 8896
TCPX_MTU = 8244
# Private services access: the range reserved for Managed Lustre, and the port its clients
# connect to from that range (LNet over TCP; 6988 only for GKE's legacy port).
# https://cloud.google.com/managed-lustre/docs/vpc (2026)
PSA_PREFIX = 20
LUSTRE_PORTS = ["988"]

# Compact placement (a COLLOCATED group placement policy): the machine series that support it,
# and how many VMs gpufleet puts under one policy. cloud.google.com/compute/docs/instances/use-compact-placement-
# policies and .../ai-infrastructure placement docs (2026): A2, A3 (High, Mega, Ultra, Edge), A4,
# A4X, G2, G4, C2, C2D, N2, N2D; not N1 (nor E2, T2D, M1-M3). Google's limit is 1,500 instances a policy
# when no maxDistance is set, as gpufleet sets none (150 only at maxDistance 2; the older define-instance-
# placement page said 150 a policy): docs.cloud.google.com/compute/docs/instances/placement-policies-overview,
# its table of max distance values, read 2026-11. 150 a policy keeps the pools' layout as `up` made them and
# leaves room for the VM a replacement makes in its old VM's policy before deleting the old one (gcp.replace).
COMPACT_SERIES = ("a2", "a3", "a4", "a4x", "g2", "g4", "c2", "c2d", "n2", "n2d")
MAX_COMPACT_VMS = 150


def compact_placement(machine_type: str) -> bool:
    """Whether GCP accepts a compact placement policy for VMs of ``machine_type`` (``a3-highgpu-8g``)."""
    return machine_type.split("-", 1)[0] in COMPACT_SERIES


# GCP resource names: RFC 1035 labels, at most 63 characters, a lowercase letter first, no "-" last.
# https://cloud.google.com/compute/docs/naming-resources (2026)
NAME_LIMIT = 63
NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"


NAMES = "cloud.google.com/compute/docs/naming-resources (2026)"
# Every GCP resource gpufleet creates takes an explicit name (``gcp_name``); Managed Lustre calls it
# instanceId. A type not listed is held to NAME_DEFAULT.
NAME_DEFAULT = NameRule("name", NAME_LIMIT, NAME_PATTERN, NAMES)
NAME_RULES = {
    "gcp:lustre/instance:Instance": NameRule("instanceId", NAME_LIMIT, NAME_PATTERN,
                                             "cloud.google.com/managed-lustre/docs/create-instance (2026)"),
    "gcp:servicenetworking/connection:Connection": None,  # no name of its own: one per network and service
    "gcp:storage/bucketIAMMember:BucketIAMMember": None,  # a binding, not a named resource
    "gcp:serviceaccount/account:Account": NameRule("accountId", 30, r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$",
                                                   "cloud.google.com/iam/docs/service-accounts-create (2026)"),
    # an instance template is immutable: a changed one is a new template beside the old, named from a prefix
    "gcp:compute/instanceTemplate:InstanceTemplate": NameRule(
        "namePrefix", 37, r"^[a-z][-a-z0-9]*$",
        "registry.terraform.io/providers/hashicorp/google/latest/docs/resources/compute_instance_template (2026)"),
    "gcp:compute/resizeRequest:ResizeRequest": NameRule("name", NAME_LIMIT, NAME_PATTERN, NAMES),
    "gcp:storage/bucket:Bucket": NameRule("name", 63, r"^[a-z0-9][-a-z0-9_.]{1,61}[a-z0-9]$",
                                          "cloud.google.com/storage/docs/buckets#naming (2026)"),
}


def check_reservation(r, instance, pool) -> list[Problem]:
    """A specific reservation: its name, or ``projects/P/reservations/N`` when another project
    shares it (ReservationAffinity ``values``, compute/docs/reference/rest/v1/instances), in one zone."""
    name = r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?"
    return reservation_problems(r, rf"^({name}|projects/[a-z][-a-z0-9]{{4,28}}[a-z0-9]/reservations/{name})$",
                                "a reservation name", "h100-reservation or projects/other-project/reservations/h100",
                                zone_example="us-central1-a")


def gcp_name(*parts: str) -> str:
    """A GCP resource name from parts, shortened with a digest to fit 63 characters."""
    return resource_name(*parts, limit=NAME_LIMIT)


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
    out += storage_problems(pool, instance, STORAGE) + existing_network_problems(pool)
    out += imds_hop_limit_elsewhere(pool, "GCP")
    if instance.gpu_attach == "separate" and instance.gpu not in ACCELERATORS:
        out.append(Problem(("instance_type",), f"no GCP accelerator type is known for {instance.gpu}"))
    if pool.flex_start and not flex_start_takes(instance.name):
        out.append(Problem(("flex_start",), f"flex-start provisions accelerator-optimized machines, not {instance.name}",
                           f"use a machine of the {', '.join(s.upper() for s in FLEX_START_SERIES)} series (A4X and "
                           "G4 excepted), or drop flex_start"))
    return out + consumption_problems(pool, instance)


def consumption_problems(pool, instance) -> list[Problem]:
    """A pool that would buy its machines in a way Google does not sell them (catalog.consumption): an
    A4 or A3 Ultra pool on demand."""
    model = consumption.model_of(pool.spot, pool.flex_start is not None, bool(pool.reservations))
    sold = consumption.of("gcp", instance.name)
    if sold is None or model in sold.models:
        return []
    ways = {"spot": "spot: true", "flex-start": "flex_start: {run_hours: 24}",
            "reservation-bound": "reservations: [the future reservation it runs in]"}
    return [Problem(("instance_type",), f"Google sells {instance.name} only {sold.words()}, not "
                    f"{consumption.WORDS[model]} ({sold.source[:80]}..., {sold.as_of})",
                    "give the pool one of " + ", ".join(ways[m] for m in sold.models if m in ways))]


# Boot disks: A4 and A3 Ultra machines attach Hyperdisk only, and of the Hyperdisk types only Hyperdisk
# Balanced (and its High Availability form) boots ("the only supported Hyperdisk types" for boot disks,
# compute/docs/disks/hd-types/hyperdisk-balanced; the machine series' disk support table,
# compute/docs/disks#disk-types; Vertex AI's DiskSpec: "for A3U machines, the default value is
# hyperdisk-balanced", updated 2025-06-27; read 2026-11). Other GPU machines boot from pd-balanced.
HYPERDISK_ONLY = ("a4-highgpu-", "a3-ultragpu-")


def boot_disk_type(machine_type: str) -> str:
    return "hyperdisk-balanced" if machine_type.startswith(HYPERDISK_ONLY) else "pd-balanced"


def reservation_bound(machine_type: str) -> bool:
    """Whether a VM in a reservation is RESERVATION_BOUND: the machines Google sells reservation-bound and
    not on demand (A4, A3 Ultra), whose reservations are future reservations (compute/docs/instances/
    about-reservation-bound-vms on cloud.google.com: "A4X Max, A4X, A4, or A3 Ultra", read 2026-11), rather
    than STANDARD VMs consuming a reservation.

    A3 Mega, A3 High (8 GPUs) and A3 Edge stay STANDARD, though whether their calendar-mode reservations
    want RESERVATION_BOUND is not known here: copies of the same page list them too (Google's sovereign-
    cloud partner's documentation.s3ns.fr: "A4X Max, A4X, A4, A3 Ultra, A3 Mega, A3 High with 8 GPUs, A3
    Edge, and H4D"; an earlier docs.cloud.google.com version: "A4, A3 Ultra, A3 Mega, or A3 High (8 GPUs)"
    in calendar mode), google.com's does not, and a reservation names no mode that says which (the
    Compute API's Reservation has no reservationMode: google-cloud-compute 1.57 gives it to
    FutureReservation only). Google sells those machines on demand, and on-demand reservations of them
    take STANDARD VMs; a calendar-mode reservation that refuses them stops `up` with Compute Engine's
    own error."""
    return (consumption.sold("gcp", machine_type, "reservation-bound")
            and not consumption.sold("gcp", machine_type, "ondemand"))


def scheduling(spot: bool, bound: bool = False) -> dict:
    """GPU VMs cannot live-migrate: TERMINATE on host maintenance; spot VMs are deleted on preemption;
    a reservation-bound VM (``bound``) lives as long as its reservation and is deleted when it ends
    (the REST API's Scheduling: provisioningModel SPOT, STANDARD or RESERVATION_BOUND, as
    google-cloud-compute 1.57's Scheduling.ProvisioningModel names them)."""
    if spot:
        return {"onHostMaintenance": "TERMINATE", "automaticRestart": False, "preemptible": True,
                "provisioningModel": "SPOT", "instanceTerminationAction": "DELETE"}
    if bound:
        return {"onHostMaintenance": "TERMINATE", "automaticRestart": True, "provisioningModel": "RESERVATION_BOUND",
                "instanceTerminationAction": "DELETE"}
    return {"onHostMaintenance": "TERMINATE", "automaticRestart": True, "provisioningModel": "STANDARD"}


# "Flex-start VMs support all accelerator-optimized machine types (except A4X and G4)" (About
# Flex-start VMs, compute/docs/instances/about-flex-start-vms, read 2026-11): A4, A3, A2 and G2
FLEX_START_SERIES = ("a4", "a3", "a2", "g2")


def flex_start_takes(machine_type: str) -> bool:
    return machine_type.split("-", 1)[0] in FLEX_START_SERIES


def region_subnets(region: str) -> list[tuple[str, int]]:
    return []


def pool_subnets(pool) -> list[tuple[str, int]]:
    return []

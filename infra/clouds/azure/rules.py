"""What Azure can do for a pool, checked before anything is created (no SDK)."""

from __future__ import annotations

from gpufleet.catalog.images import DEFAULT_IMAGE
from gpufleet.clouds.azure import reservable
from gpufleet.clouds.pools import (
    NameRule,
    Sizes,
    StorageRules,
    flex_start_elsewhere,
    image_problems,
    imds_hop_limit_elsewhere,
    reservation_problems,
    storage_problems,
)
from gpufleet.spec import Problem

INTERCONNECTS = {"infiniband-hdr": "infiniband-hdr", "infiniband-ndr": "infiniband-ndr",
                 "10gbe": None, "25gbe": None, "100gbe": None}

# Azure Managed Lustre SKUs: capacity in TiB from the smallest size in steps of it; 768 TiB at most
# on the 40 MB/s/TiB tier, 128 TiB on the others (larger ones by support request).
# learn.microsoft.com/azure/azure-managed-lustre/create-file-system-portal ("Throughput configurations")
_AMLFS = "Azure Managed Lustre throughput configurations (learn.microsoft.com/azure/azure-managed-lustre)"
SKUS = {40: "AMLFS-Durable-Premium-40", 125: "AMLFS-Durable-Premium-125", 250: "AMLFS-Durable-Premium-250",
        500: "AMLFS-Durable-Premium-500"}
STORAGE = StorageRules("Azure Managed Lustre", (40, 125, 250, 500), creates_nfs=False, lustre_sizes={
    40: Sizes("TiB", 1, 48, 48, 768, _AMLFS), 125: Sizes("TiB", 1, 16, 16, 128, _AMLFS),
    250: Sizes("TiB", 1, 8, 8, 128, _AMLFS), 500: Sizes("TiB", 1, 4, 4, 128, _AMLFS)})
MAX_IB_NODES = 100
# A Linux scale set's host names: computer_name_prefix + 6 characters; kept a 63-character DNS label
HOST_PREFIX_LIMIT = 57

# Name rules per resource type. learn.microsoft.com/azure/azure-resource-manager/management/
# resource-name-rules (2026); computer names: learn.microsoft.com/azure/virtual-machine-scale-sets
# (computerNamePrefix). Types without an explicit name are auto-named (logical name + 8).
_RULES = "learn.microsoft.com/azure/azure-resource-manager/management/resource-name-rules (2026)"
_NAME = r"^[a-zA-Z0-9]([-\w.]*\w)?$"
NAME_DEFAULT = NameRule(None, 80, _NAME, _RULES)
NAME_RULES = {
    "azure-native:resources:ResourceGroup": NameRule("resourceGroupName", 90, r"^[-\w.()]*[-\w()]$", _RULES),
    "azure-native:network:VirtualNetwork": NameRule("virtualNetworkName", 64, _NAME, _RULES),
    "azure-native:network:Subnet": NameRule("subnetName", 80, _NAME, _RULES),
    "azure-native:compute:VirtualMachineScaleSet": NameRule("vmScaleSetName", 64, _NAME, _RULES),
    "azure-native:compute:VirtualMachineScaleSet#host": NameRule(
        "virtualMachineProfile.osProfile.computerNamePrefix", HOST_PREFIX_LIMIT, r"^[a-z0-9][-a-z0-9]*$", _RULES),
    "azure-native:storage:StorageAccount": NameRule("accountName", 24, r"^[a-z0-9]{3,24}$", _RULES),
    "azure-native:storage:BlobContainer": NameRule("containerName", 63, r"^[a-z0-9](-?[a-z0-9])+$", _RULES),
    "azure-native:managedidentity:UserAssignedIdentity": NameRule("resourceName", 128, r"^[a-zA-Z0-9][-\w]*$", _RULES),
    "azure-native:authorization:RoleAssignment": None,  # named by a GUID Azure generates
    "azure-native:storagecache:AmlFilesystem": NameRule("amlFilesystemName", 80, r"^[a-zA-Z0-9]([-\w]*[a-zA-Z0-9])?$",
                                                        "learn.microsoft.com/rest/api/storagecache/aml-filesystems (2026)"),
}  # InfiniBand connects the VMs of one placement group of a scale set

# gpufleet's image names as marketplace URNs (publisher, offer, sku, version): Canonical's Ubuntu,
# Microsoft's Ubuntu HPC image (drivers, InfiniBand and MPI preinstalled), the RESF's Rocky Linux
IMAGES = {
    "ubuntu-22.04": ("Canonical", "0001-com-ubuntu-server-jammy", "22_04-lts-gen2", "latest"),
    "ubuntu-24.04": ("Canonical", "ubuntu-24_04-lts", "server", "latest"),
    "ubuntu-hpc-22.04": ("microsoft-dsvm", "ubuntu-hpc", "2204", "latest"),
    "rocky-9": ("resf", "rockylinux-x86_64", "9-base", "latest"),
}


# Marketplace offers sold with a plan: a VM of one must name it (publisher, product = offer, name =
# sku) and the subscription must have accepted its terms, else ARM refuses the scale set. The RESF's
# Rocky Linux images are (their Azure Marketplace listing; `az vm image show --urn` shows the plan)
PLAN_OFFERS = {("resf", "rockylinux-x86_64")}


def image_plan(urn: tuple[str, str, str, str]) -> dict | None:
    """The purchase plan a scale set of this image must carry, or None for an image without one."""
    publisher, offer, sku, _ = urn
    if (publisher.lower(), offer.lower()) not in PLAN_OFFERS:
        return None
    return {"name": sku, "publisher": publisher, "product": offer}


def terms_command(plan: dict) -> str:
    return f"az vm image terms accept --publisher {plan['publisher']} --offer {plan['product']} --plan {plan['name']}"


def is_urn(image: str) -> bool:
    return image.count(":") == 3


def is_image_id(image: str) -> bool:
    """A Compute Gallery image version (a golden image gpufleet built) or managed image, by resource id."""
    return image.lower().startswith("/subscriptions/") and "/providers/microsoft.compute/" in image.lower()


def image_urn(image: str | None) -> tuple[str, str, str, str]:
    """The marketplace image a pool boots: its own URN, or that of a gpufleet image name."""
    if image and is_urn(image):
        return tuple(image.split(":"))
    return IMAGES[image or DEFAULT_IMAGE]


def marketplace_plan(image: str | None) -> dict | None:
    """The purchase plan of a pool's Marketplace image; none for an image of the subscription's own
    (by id) or a golden image gpufleet built (``gpufleet:<name>``), whose plan is the one its build
    recorded (``state.images.BuiltImage.plan``)."""
    if image and (is_image_id(image) or image.startswith("gpufleet:")):
        return None
    return image_plan(image_urn(image))


def pool_fabric(pool, instance) -> str | None:
    """InfiniBand comes with the ND/NC SKUs that have it: every VM of the scale set is on it."""
    return instance.fabric if instance.fabric.startswith("infiniband") else None


def check_pool(stack, pool, instance) -> list[Problem]:
    out = image_problems(pool, "a URN publisher:offer:sku:version or an image resource id",
                         lambda i: is_urn(i) or is_image_id(i)) + storage_problems(pool, instance, STORAGE)
    out += flex_start_elsewhere(pool, "Azure") + imds_hop_limit_elsewhere(pool, "Azure")
    if not stack.access.public_key:
        out.append(Problem(("provider",), "Azure scale sets need an SSH public key (password login is disabled)",
                           "set access.public_key: ~/.ssh/id_ed25519.pub in the stack"))
    if pool_fabric(pool, instance) and (pool.nodes or 1) > MAX_IB_NODES:
        out.append(Problem(("nodes",), f"InfiniBand connects at most {MAX_IB_NODES} VMs of one scale set",
                           "split the pool into several pools of at most 100 nodes"))
    return out


def region_subnets(region: str) -> list[tuple[str, int]]:
    """The subnet of the region's Bastion (``access.via: cloud``; Azure requires it be named
    AzureBastionSubnet and a /26 or larger). Asked as 0 addresses, the smallest need, so the address
    plan carves it last and no pool's subnet moves; it gets a /24, as every subnet does."""
    return [("AzureBastionSubnet", 0)]


def scale_set_zone(pool, zones) -> str | None:
    """The zone a pool's scale set (and its Managed Lustre) goes to: the pool's own (the stack's, a
    failover attempt's or its reservation's), else for a pool with Azure Managed Lustre (zonal) the
    first of ``zones`` (where the SKU is offered); None: a regional scale set (a pool without Lustre
    and without a zone, or a region without zones)."""
    if pool.zone or not any(s.type == "lustre" for s in pool.storage):
        return pool.zone
    return sorted(zones)[0] if zones else None


def pool_subnets(pool) -> list[tuple[str, int]]:
    """Azure Managed Lustre wants a /24 of its own."""
    return [(f"{pool.name}-lustre", 120)] if any(s.type == "lustre" for s in pool.storage) else []


def check_reservation(r, instance, pool) -> list[Problem]:
    """A capacity reservation group, by its resource id (the scale set's
    ``virtualMachineProfile.capacityReservation.capacityReservationGroup.id``). A group is regional
    and its reservations zonal or not, so no zone is required; the zone named is where the scale set
    goes (a zonal reservation serves VMs of its zone only, a regional one non-zonal VMs only:
    capacityReservations ``zones``, Compute REST 2024-07-01; "All VMs using the capacity reservation
    group must be deployed without specifying a zone", capacity reservation overview, ms.date
    02/17/2026). So a pool with Azure Managed Lustre, which is zonal and puts the scale set in its
    zone (``scale_set_zone``), cannot take a regional reservation.

    Azure reserves only some GPU series (``reservable``): ND (InfiniBand) and NCads H100 v5 sizes
    none at all. A size of a series it reserves that joins its VMs over InfiniBand would need the
    single placement group a reserved scale set cannot have (singlePlacementGroup true is among the
    overview's unsupported constraints, with proximity placement groups), so it is refused too."""
    out = reservation_problems(
        r, r"^/subscriptions/[0-9a-f-]{36}/resourceGroups/[^/]+/providers/Microsoft\.Compute/"
           r"capacityReservationGroups/[^/]+$", "a capacity reservation group id",
        "/subscriptions/<id>/resourceGroups/<group>/providers/Microsoft.Compute/capacityReservationGroups/<name>",
        zone_example=None)
    found = reservable.series(instance.name) if instance is not None and instance.gpu_count else None
    suggest = "drop the reservation from this pool, or reserve a size of a series Azure reserves (NC_A100_v4: " \
              "Standard_NC96ads_A100_v4)"
    if instance is not None and instance.gpu_count and found is None:
        out.append(Problem((), f"{instance.name} is of no GPU series Azure lists as reservable ({reservable.SOURCE})",
                           suggest))
    elif found and not found[1]:
        out.append(Problem((), f"Azure cannot reserve capacity for {instance.name}: the {found[0]} is among the "
                           f"series it does not support ({reservable.SOURCE})", suggest))
    elif instance is not None and pool_fabric(None, instance):
        out.append(Problem((), f"{instance.name} joins its VMs over InfiniBand only inside a single placement group, "
                           "which a capacity reservation refuses (Azure wants singlePlacementGroup false and no "
                           "proximity placement group for reserved VMs)", suggest))
    if not r.zone and any(s.type == "lustre" for s in pool.storage):
        out.append(Problem(("zone",), "Azure Managed Lustre is zonal and puts the pool's scale set in its zone, "
                           "while a reservation without a zone (regional) serves only VMs deployed without one",
                           "name the zone of a zonal reservation in the group (zone: '1'), or drop the Lustre "
                           "file system or the reservation from this pool"))
    return out

"""A golden image of an Azure pool: the Packer template (images/azure.pkr.hcl) and its variables."""

from __future__ import annotations

from gpufleet.clouds.azure.credentials import PLAN_SUBSCRIPTION
from gpufleet.clouds.azure.rules import image_plan, image_urn
from gpufleet.clouds.pools import pair_name

TEMPLATE = "azure.pkr.hcl"
BUILDER = "Standard_D8s_v5"  # no GPU needed to install the packages
GALLERY_GROUP = "gpufleet-images"  # the resource group of the Compute Galleries (made by `image build`)


def gallery_name(location: str) -> str:
    """One Compute Gallery per location: a definition and its versions are where their gallery is,
    and azure-arm publishes a version where it builds (``gallery`` says more). Gallery names allow
    letters, digits, underscores and periods."""
    return f"gpufleet_{location}"


def variables(pool, *, name: str, tags: dict[str, str], builder_tags: dict[str, str], bundle: str, settings: dict,
              zones: tuple[str, ...], build: str) -> dict:
    """The template's variables for ``pool`` (``settings``: the subscription, when known here; its
    builder's tags are its image's: azure-arm has one set for both);
    the gallery image version is the build's UTC second (``gallery_version``)."""
    urn = image_urn(pool.image)
    publisher, offer, sku, _ = urn
    plan = image_plan(urn)
    out = {"location": pool.region, "vm_size": BUILDER, "image_publisher": publisher, "image_offer": offer,
           "image_sku": sku, "plan_info": [{"plan_name": plan["name"], "plan_product": plan["product"],
                                            "plan_publisher": plan["publisher"]}] if plan else [],
           "gallery_resource_group": GALLERY_GROUP, "gallery_name": gallery_name(pool.region),
           "gallery_image_name": pair_name(tags["gpufleet:stack"], tags["gpufleet:pool"], limit=80),
           "image_version": gallery_version(build),
           # azure-arm puts azure_tags on everything it makes, the builder's resources and the gallery version
           # alike (packer-plugin-azure v2.2.0, step_publish_to_shared_image_gallery.go: Tags from ArmTags)
           "root_disk_gb": max(pool.root_disk_gb, 100), "bundle_dir": bundle, "tags": builder_tags}
    if settings.get("subscription") and settings["subscription"] != PLAN_SUBSCRIPTION:
        out["subscription_id"] = settings["subscription"]
    return out


def gallery_version(build: str) -> str:
    """A gallery image version for a build's UTC second (YYYYMMDDhhmmss): year, month-day and
    hour-minute-second, each an int32 as azure-arm 2.2.0 wants (``^[0-9]+\\.[0-9]+\\.[0-9]+$``)."""
    return f"{int(build[:4])}.{int(build[4:8])}.{int(build[8:14])}"


def purchase_plan(variables: dict) -> dict | None:
    """The plan of the Marketplace image the build starts from (``plan_info``, checked against the
    Marketplace by ``gallery.source_image`` before the build), which every VM of its versions must
    name: packer-plugin-azure v2.2.0 builder/azure/arm/config.go, "Images created from the Marketplace
    with `plan_info` **must** specify `plan_info` whenever the image is deployed"."""
    return next(({"name": p["plan_name"], "publisher": p["plan_publisher"], "product": p["plan_product"]}
                 for p in variables.get("plan_info") or []), None)


def artifacts(ids: list[str], variables: dict) -> list[tuple[str, str]]:
    """(region, gallery image version id) of an azure-arm build published to a Compute Gallery
    (its artifact id is the version's resource id when no managed image is made)."""
    return [(variables["location"], artifact) for artifact in ids]

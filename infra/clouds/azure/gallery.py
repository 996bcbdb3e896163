"""The Compute Gallery and gallery image definition an Azure golden image is published into
(images/azure.pkr.hcl), made before Packer runs: azure-arm 2.2.0 reads the definition first, stops
without it and makes neither (packer-plugin-azure v2.2.0, builder/azure/arm/builder.go:
``GalleryImagesClient.Get`` before the build).

A definition and its versions live where their gallery is (terraform-provider-azurerm,
shared_image and shared_image_version: "the location where the Shared Image Gallery exists"), and
azure-arm publishes a version where it builds: one gallery per location (``images.gallery_name``).
The definition says what each version is: Linux, generalised (the build ends with ``waagent
-deprovision+user``), of the Hyper-V generation of the Marketplace image the builder boots (read
from that image: ubuntu-hpc 22.04 is V2, as every ND/NC A100-H100 size it is made for boots only
V2) and with its purchase plan when it is sold with one (a version of a plan image keeps the plan).
"""

from __future__ import annotations

from azure.core.exceptions import AzureError, ResourceNotFoundError
from azure.mgmt.compute.models import (
    Gallery,
    GalleryImage,
    GalleryImageIdentifier,
    ImagePurchasePlan,
    OperatingSystemStateTypes,
    OperatingSystemTypes,
)
from azure.mgmt.resource.resources.models import ResourceGroup

from gpufleet.clouds.azure.api import AzureApi, classify
from gpufleet.errors import GpufleetError, InputError

PUBLISHER = "gpufleet"  # a definition's identifier: publisher gpufleet, offer the stack, SKU the pool


def ensure(variables: dict, api: AzureApi | None = None) -> str:
    """Make the resource group, gallery and image definition ``variables`` publish into where they
    are missing; the definition's id. One already there for another generation or plan is refused."""
    api = api or AzureApi()
    location, group = variables["location"], variables["gallery_resource_group"]
    gallery, name = variables["gallery_name"], variables["gallery_image_name"]
    generation, plan = source_image(api, variables)
    try:
        if not api.rm.resource_groups.check_existence(group):
            api.rm.resource_groups.create_or_update(group, ResourceGroup(location=location))
        try:
            api.compute.galleries.get(group, gallery)
        except ResourceNotFoundError:
            api.compute.galleries.begin_create_or_update(group, gallery, Gallery(
                location=location, description=f"gpufleet golden images built in {location}")).result()
        try:
            found = api.compute.gallery_images.get(group, gallery, name)
        except ResourceNotFoundError:
            tags = variables["tags"]
            found = api.compute.gallery_images.begin_create_or_update(group, gallery, name, GalleryImage(
                location=location, tags={k: tags[k] for k in ("gpufleet:stack", "gpufleet:pool", "gpufleet:owner")},
                os_type=OperatingSystemTypes.LINUX, os_state=OperatingSystemStateTypes.GENERALIZED,
                hyper_v_generation=generation,
                identifier=GalleryImageIdentifier(publisher=PUBLISHER, offer=tags["gpufleet:stack"],
                                                  sku=tags["gpufleet:pool"]),
                purchase_plan=ImagePurchasePlan(**plan) if plan else None)).result()
    except AzureError as e:
        raise GpufleetError(f"azure: could not make the image gallery {group}/{gallery}/{name}: {classify(e)[1][:300]}",
                            "the account needs Microsoft.Compute/galleries/* and resource group write access") from None
    _fits(found, name, (PUBLISHER, variables["tags"]["gpufleet:stack"], variables["tags"]["gpufleet:pool"]),
          generation, plan)
    return found.id


def source_image(api: AzureApi, variables: dict) -> tuple[str, dict | None]:
    """The Hyper-V generation and purchase plan (name, publisher, product) of the newest version of
    the Marketplace image the builder boots (Virtual Machine Images - List and Get)."""
    where = (variables["location"], variables["image_publisher"], variables["image_offer"], variables["image_sku"])
    urn = ":".join(where[1:])
    try:
        versions = api.compute.virtual_machine_images.list(*where)
        if not versions:
            raise ResourceNotFoundError(f"no version of {urn}")
        newest = max(versions, key=lambda v: [int(x) if x.isdigit() else -1 for x in v.name.split(".")])
        image = api.compute.virtual_machine_images.get(*where, newest.name)
    except ResourceNotFoundError:
        raise InputError(f"azure: the Marketplace has no image {urn} in {where[0]}",
                         f"`az vm image list --location {where[0]} --urn {urn} --all` lists its versions") from None
    except AzureError as e:
        raise GpufleetError(f"azure: could not read the Marketplace image {urn}: {classify(e)[1][:300]}") from None
    plan = {"name": image.plan.name, "publisher": image.plan.publisher, "product": image.plan.product} \
        if image.plan else None
    planned = [{"name": p["plan_name"], "publisher": p["plan_publisher"], "product": p["plan_product"]}
               for p in variables.get("plan_info") or []]
    if planned != ([plan] if plan else []):
        raise GpufleetError(f"azure: {urn} is sold {f'with the plan {plan}' if plan else 'without a plan'}, but its "
                            f"image was planned with {planned or 'none'}",
                            "gpufleet's table of plan images (clouds/azure/rules.py PLAN_OFFERS) is out of date")
    return _generation(image), plan


def _generation(resource) -> str:
    """A Marketplace image's or a definition's Hyper-V generation as the API words it (the SDK may
    hand an enum, whose str() is its Python name); one that says none is V1, the API's default."""
    value = resource.hyper_v_generation
    return getattr(value, "value", value) or "V1"


def _fits(found, name: str, identifier: tuple[str, str, str], generation: str, plan: dict | None) -> None:
    """An existing definition takes this build's version only when it is its stack's and pool's (its
    identifier: publisher, offer, SKU), of its generation and of its plan."""
    i = found.identifier
    had_id = (i.publisher, i.offer, i.sku) if i else None
    if had_id != identifier:
        whose = f"stack {had_id[1]}, pool {had_id[2]}" if had_id and had_id[0] == PUBLISHER else f"identifier {had_id}"
        raise GpufleetError(f"azure: the gallery image definition {name} is for {whose}; this build is of stack "
                            f"{identifier[1]}, pool {identifier[2]}: its versions would be the other's",
                            "build with the stack's and pool's own definition (gpufleet image plan names it), or "
                            f"delete {name}'s versions and it (az sig image-definition delete --gallery-image-definition "
                            f"{name} ...) if it is no one's")
    had = found.purchase_plan
    had_plan = {"name": had.name, "publisher": had.publisher, "product": had.product} if had else None
    if _generation(found) != generation or had_plan != plan:
        raise GpufleetError(f"azure: the gallery image definition {name} is for Hyper-V {_generation(found)} "
                            f"and plan {had_plan}; the pool's base image is {generation} and plan {plan}",
                            f"delete its versions and it (az sig image-definition delete --gallery-image-definition "
                            f"{name} ...), then build again")

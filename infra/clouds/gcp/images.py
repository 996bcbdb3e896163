"""A golden image of a GCP pool: the Packer template (images/gcp.pkr.hcl) and its variables."""

from __future__ import annotations

from gpufleet.catalog.images import DEFAULT_IMAGE
from gpufleet.clouds.gcp.rules import IMAGES, NAME_LIMIT, gcp_name
from gpufleet.clouds.gcp.tags import labels
from gpufleet.clouds.pools import pair_name
from gpufleet.errors import InputError

TEMPLATE = "gcp.pkr.hcl"
BUILDER = "n2-standard-8"  # no GPU needed to install the packages


def variables(pool, *, name: str, tags: dict[str, str], builder_tags: dict[str, str], bundle: str, settings: dict,
              zones: tuple[str, ...], build: str) -> dict:
    """The template's variables for ``pool`` (``settings``: the project, when known here)."""
    project, family = IMAGES[pool.image or DEFAULT_IMAGE]
    out = {"zone": builder_zone(pool, zones), "machine_type": BUILDER, "source_image_project_id": project,
           "source_image_family": family, "image_name": gcp_name(name, build),
           "image_family": pair_name("gpufleet", tags["gpufleet:stack"], tags["gpufleet:pool"], limit=NAME_LIMIT),
           "root_disk_gb": max(pool.root_disk_gb, 100), "bundle_dir": bundle, "labels": labels(tags),
           "builder_labels": labels(builder_tags)}
    if settings.get("project"):
        out["project_id"] = settings["project"]
    return out


def builder_zone(pool, zones) -> str:
    """Where the builder runs: the pool's zone, else the first the catalog lists for its region
    (``zones``: those its sources offered GPUs in, a zone that exists). No letter is guessed: us-east1
    has no zone a (its zones are b, c and d)."""
    if pool.zone:
        return pool.zone
    if not zones:
        raise InputError(f"pool {pool.name}: the catalog lists no zone of {pool.region} to build its image in",
                         f"set the pool's zone to one that `gcloud compute zones list --filter=region:{pool.region}` "
                         "lists")
    return sorted(zones)[0]


def destination(variables: dict) -> None:
    """Nothing to make first: googlecompute creates the image (and its family) itself."""


def purchase_plan(variables: dict) -> None:
    """None: GCP sells no base image with a plan a VM must name."""


def artifacts(ids: list[str], variables: dict) -> list[tuple[str, str]]:
    """(region, image path) of a googlecompute build: its artifact id is the image's name; images
    are global, so the pool's region (its zone's) stands for where it was built."""
    region = variables["zone"].rsplit("-", 1)[0]
    return [(region, f"projects/{variables['project_id']}/global/images/{name}") for name in ids]

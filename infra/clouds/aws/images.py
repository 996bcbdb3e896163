"""A golden image of an AWS pool: the Packer template (images/aws.pkr.hcl) and its variables."""

from __future__ import annotations

from gpufleet.catalog.images import DEFAULT_IMAGE
from gpufleet.clouds.aws.rules import IMAGES, LOGIN_USERS

TEMPLATE = "aws.pkr.hcl"
BUILDER = "m6i.2xlarge"  # no GPU needed to install the packages; 8 vCPUs build the DKMS module quickly


def variables(pool, *, name: str, tags: dict[str, str], builder_tags: dict[str, str], bundle: str, settings: dict,
              zones: tuple[str, ...], build: str) -> dict:
    """The template's variables for ``pool``, whose image is gpufleet's ``pool.image`` name."""
    owner, pattern = IMAGES[pool.image or DEFAULT_IMAGE]
    return {"region": pool.region, "instance_type": BUILDER, "source_ami_owner": owner, "source_ami_name": pattern,
            "ssh_username": LOGIN_USERS[pool.image or DEFAULT_IMAGE], "image_name": f"{name}-{build}",
            "root_volume_gb": max(pool.root_disk_gb, 100), "bundle_dir": bundle, "tags": tags,
            "builder_tags": builder_tags}


def destination(variables: dict) -> None:
    """Nothing to make first: amazon-ebs registers the AMI itself."""


def purchase_plan(variables: dict) -> None:
    """None: an AMI from a Marketplace AMI keeps its product code itself, nothing names it at launch."""


def artifacts(ids: list[str], variables: dict) -> list[tuple[str, str]]:
    """(region, AMI id) of an amazon-ebs build's artifact id, ``us-east-1:ami-0123...`` (several
    regions comma-separated: packer-plugin-amazon's Artifact.Id)."""
    out = []
    for artifact in ids:
        for part in artifact.split(","):
            region, _, ami = part.partition(":")
            out.append((region, ami))
    return out

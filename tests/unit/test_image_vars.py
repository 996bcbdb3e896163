"""`gpufleet image plan` for every example stack and every base OS writes variables its Packer plugin
would accept: each check below is a rule of the pinned plugin (or of the cloud it calls), with where
it is written. No Packer can run here (Debian's 1.6.6 cannot load HCL2 plugins), so the rules are
read from the plugins' code at the tags the templates pin:

* amazon 1.3.3: builder/common/ami_config.go (``ami_name`` 3-128 characters of
  ``templateCleanAMIName``'s set); packer-plugin-sdk communicator/config.go (an ``ssh_username`` must
  be given); EC2 tags: keys up to 128, values up to 256 characters (docs.aws.amazon.com, "Tag your
  Amazon EC2 resources", read 2026-11).
* googlecompute 1.2.2: builder/googlecompute/config.go (``validImageName`` for ``image_name`` and
  ``image_family``, ``labelKeyRegex`` / ``labelValueRegex``); the zone must be one of the region's
  (the catalog's regions.csv).
* azure 2.2.0: builder/azure/arm/config.go (``image_version`` ``^[0-9]+\\.[0-9]+\\.[0-9]+$``, at most
  15 ``azure_tags`` of names up to 512 and values up to 256 characters, ``plan_info`` with its name,
  product and publisher together); ARM's int32 version parts and gallery / image definition names
  (learn.microsoft.com, "Naming rules and restrictions for Azure resources", Microsoft.Compute,
  read 2026-11).
"""

import json
import re
from pathlib import Path

import pytest

from gpufleet import stacks
from gpufleet.catalog.images import IMAGES
from gpufleet.fleet import image
from gpufleet.providers import CLOUDS

from conftest import ROOT

EXAMPLES = sorted((ROOT / "stacks" / "examples").glob("*.yaml"))
AMI_NAME = re.compile(r"^[A-Za-z0-9()\[\] ./\-'@_]{3,128}$")
GCP_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
GCP_LABEL_KEY, GCP_LABEL_VALUE = re.compile(r"^[a-z][a-z0-9_-]{0,62}$"), re.compile(r"^[a-z0-9_-]{0,63}$")
AZURE_VERSION = re.compile(r"^([0-9]+)\.([0-9]+)\.([0-9]+)$")
AZURE_GALLERY = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._]{0,78}[A-Za-z0-9])?$")
AZURE_IMAGE_DEFINITION = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,78}[A-Za-z0-9])?$")
LOGIN = {"ubuntu-22.04": "ubuntu", "ubuntu-24.04": "ubuntu", "ubuntu-hpc-22.04": "ubuntu", "rocky-9": "rocky"}
PLANS = {"rocky-9": [{"plan_name": "9-base", "plan_product": "rockylinux-x86_64", "plan_publisher": "resf"}]}


def _aws(v, os_image, cat):
    assert AMI_NAME.match(v["image_name"]), v["image_name"]
    assert v["ssh_username"] == LOGIN[os_image]  # the user the base AMI lets in
    assert re.fullmatch(r"\d{12}", v["source_ami_owner"]) and v["region"] in cat.regions["aws"]
    assert all(len(k) <= 128 and len(t) <= 256 for k, t in v["tags"].items())


def _gcp(v, os_image, cat):
    region = v["zone"].rsplit("-", 1)[0]
    assert v["zone"] in cat.region_zones("gcp", region), v["zone"]
    assert GCP_NAME.match(v["image_name"]) and GCP_NAME.match(v["image_family"]), (v["image_name"], v["image_family"])
    assert all(GCP_LABEL_KEY.match(k) and GCP_LABEL_VALUE.match(x) for k, x in v["labels"].items()), v["labels"]


def _azure(v, os_image, cat):
    parts = AZURE_VERSION.match(v["image_version"])
    assert parts and all(int(p) < 2**31 for p in parts.groups()), v["image_version"]
    assert v["plan_info"] == PLANS.get(os_image, [])
    assert all(x["plan_name"] and x["plan_product"] and x["plan_publisher"] for x in v["plan_info"])
    assert len(v["tags"]) <= 15 and all(len(k) <= 512 and len(t) <= 256 for k, t in v["tags"].items())
    assert AZURE_GALLERY.match(v["gallery_name"]) and AZURE_IMAGE_DEFINITION.match(v["gallery_image_name"])
    assert v["location"] in cat.regions["azure"]


RULES = {"aws": _aws, "gcp": _gcp, "azure": _azure}


@pytest.mark.parametrize("os_image", sorted(IMAGES))
@pytest.mark.parametrize("example", [p for p in EXAMPLES if "rack" not in p.name], ids=lambda p: p.stem)
def test_image_plan_writes_what_each_plugin_accepts(example, os_image, cat, tmp_path):
    stack = stacks.load(example, cat)
    stack = stack.model_copy(update={"pools": [p.model_copy(update={"image": os_image}) if p.provider in CLOUDS
                                               else p for p in stack.pools]})
    made = image.plan(stack, cat, tmp_path)
    assert made
    for m in made:
        variables = json.loads(Path(m.var_file).read_text())
        RULES[m.provider](variables, os_image, cat)

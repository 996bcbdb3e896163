#!/usr/bin/env python3
"""A stand-in for the Packer CLI (no Packer that reads HCL2 plugins can be had here: Debian's is
1.6.6). It answers what `gpufleet image build` runs, in Packer's documented formats:

* ``packer version``: ``Packer v1.11.2``;
* ``packer init TEMPLATE``: nothing, exit 0 (the plugins are "installed");
* ``packer build -machine-readable -var-file=F TEMPLATE``: machine-readable lines
  ``timestamp,target,type,data...`` with commas in data as ``%!(PACKER_COMMA)``
  (developer.hashicorp.com/packer/docs/commands#machine-readable-output): ``ui`` lines, then the
  artifact of the template's builder as each plugin words its id (amazon-ebs ``region:ami-...``,
  googlecompute the image name, azure-arm the gallery version's resource id).

Each image made is remembered in ``FAKE_PACKER_IMAGES`` (a JSON list, when set), and a build whose
image is already there fails as each plugin refuses it before building: amazon-ebs 1.3.3 prevalidates
the AMI name (builder/common/step_pre_validate.go), googlecompute 1.2.2 checks the image name
(step_check_existing_image.go), azure-arm 2.2.0 the gallery image version (builder/azure/arm/builder.go).
An AMI's id is derived from its name, so each build has its own. azure-arm first reads the gallery
image definition it publishes into (``GalleryImagesClient.Get``, builder.go) and stops without it:
so does this one, from the ARM endpoint in ``GPUFLEET_AZURE_ENDPOINT`` (the tests' ARM fake), when set.

With ``AWS_ENDPOINT_URL`` set (the tests' moto server), an amazon-ebs build does in EC2 what
packer-plugin-amazon 1.3.3 does (builder/ebs: step_run_source_instance.go, step_create_ami.go,
step_create_tags.go): it launches the builder tagged with the template's ``run_tags``, makes the AMI
from it (CreateImage), tags the AMI with ``tags`` and its snapshots with ``snapshot_tags``, and
terminates the builder; the name check asks EC2. The tags are read from the template itself
(python-hcl2), each a ``${var.NAME}`` of the variable file. The builder boots any AMI moto holds:
the base image's lookup (``source_ami_filter``) is not what this stands in for.

``FAKE_PACKER_FAIL=1`` makes the build fail as Packer reports it (a ``ui,error`` line, exit 1, the
builder terminated by Packer's cleanup); ``FAKE_PACKER_KILLED=1`` stops it as a killed Packer stops
(exit 137 once the builder runs, nothing cleaned up); ``FAKE_PACKER_LOG`` names a file each call is
appended to.
"""

import hashlib
import json
import os
import re
import ssl
import sys
import time
import urllib.error
import urllib.request


def line(target, kind, *data):
    print(",".join([str(int(time.time())), target, kind, *[d.replace(",", "%!(PACKER_COMMA)") for d in data]]),
          flush=True)


def main(argv):
    if os.environ.get("FAKE_PACKER_LOG"):
        with open(os.environ["FAKE_PACKER_LOG"], "a") as f:
            f.write(json.dumps(argv[1:]) + "\n")
    if argv[1:2] == ["version"]:
        print("Packer v1.11.2")
        return 0
    if argv[1:2] == ["init"]:
        return 0
    var_file = next(a.split("=", 1)[1] for a in argv if a.startswith("-var-file="))
    variables = json.loads(open(var_file).read())
    template = os.path.basename(argv[-1])
    builder = {"aws.pkr.hcl": "amazon-ebs.gpufleet", "gcp.pkr.hcl": "googlecompute.gpufleet",
               "azure.pkr.hcl": "azure-arm.gpufleet"}[template]
    made = os.environ.get("FAKE_PACKER_IMAGES")
    held = json.loads(open(made).read()) if made and os.path.exists(made) else []
    if builder.startswith("azure"):
        name = f"{variables['gallery_name']}/{variables['gallery_image_name']}:{variables['image_version']}"
        refusal = (f"a gallery image version for image name:version {variables['gallery_image_name']}:"
                   f"{variables['image_version']} already exists in gallery {variables['gallery_name']}, use a different "
                   "gallery image version or use the -force option to automatically delete it.")
    else:
        name = variables["image_name"]
        refusal = (f"Error: AMI Name: '{name}' is used by an existing AMI: {_ami(name)}" if builder.startswith("amazon")
                   else f"Image {name} already exists in project {variables.get('project_id')}.")
    ec2 = _ec2(variables) if builder.startswith("amazon") else None
    if name in held or (ec2 and ec2.describe_images(Owners=["self"], Filters=[{"Name": "name", "Values": [name]}])[
            "Images"]):
        line("", "ui", "error", refusal)
        return 1
    missing = builder.startswith("azure") and _no_gallery_image(variables)
    if missing:
        line("", "ui", "error", missing)
        return 1
    line("", "ui", "say", f"==> {builder}: Creating temporary instance to build {name}...")
    tags = _tags(argv[-1], variables) if ec2 else {}
    instance = ec2 and ec2.run_instances(
        ImageId=ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"], MinCount=1, MaxCount=1,
        InstanceType=variables["instance_type"], TagSpecifications=[
            {"ResourceType": "instance", "Tags": _pairs(tags["run_tags"])}])["Instances"][0]["InstanceId"]
    if os.environ.get("FAKE_PACKER_KILLED"):
        return 137
    line("", "ui", "message", f"    {builder}: Uploading {variables['bundle_dir']}/ => /tmp/gpufleet")
    line("", "ui", "message", f"    {builder}: baked 8 formula(s) of state tree abc: 412 changed in 950s")
    if os.environ.get("FAKE_PACKER_FAIL"):
        line("", "ui", "error", f"Build '{builder}' errored after 16 minutes: Script exited with non-zero exit status: 1")
        if ec2:
            ec2.terminate_instances(InstanceIds=[instance])
        return 1
    if ec2:
        ami = ec2.create_image(InstanceId=instance, Name=name)["ImageId"]
        ec2.create_tags(Resources=[ami], Tags=_pairs(tags["tags"]))
        snaps = [m["Ebs"]["SnapshotId"] for m in ec2.describe_images(ImageIds=[ami])["Images"][0]["BlockDeviceMappings"]]
        ec2.create_tags(Resources=snaps, Tags=_pairs(tags["snapshot_tags"]))
        ec2.terminate_instances(InstanceIds=[instance])
        artifact = f"{variables['region']}:{ami}"
    elif builder.startswith("amazon"):
        artifact = f"{variables['region']}:{_ami(name)}"
    elif builder.startswith("google"):
        artifact = variables["image_name"]
    else:
        artifact = (f"/subscriptions/{variables['subscription_id']}/resourceGroups/{variables['gallery_resource_group']}"
                    f"/providers/Microsoft.Compute/galleries/{variables['gallery_name']}/images/"
                    f"{variables['gallery_image_name']}/versions/{variables['image_version']}")
    line(builder, "artifact-count", "1")
    line(builder, "artifact", "0", "builder-id", "packer.builder")
    line(builder, "artifact", "0", "id", artifact)
    line(builder, "artifact", "0", "end")
    line("", "ui", "say", f"Build '{builder}' finished after 17 minutes.")
    if made:
        with open(made, "w") as f:
            json.dump([*held, name], f)
    return 0


def _no_gallery_image(variables: dict) -> str | None:
    """azure-arm's refusal when the gallery image definition is missing (None when it is there)."""
    endpoint = os.environ.get("GPUFLEET_AZURE_ENDPOINT")
    if not endpoint:
        return None
    url = (f"{endpoint}/subscriptions/{variables['subscription_id']}/resourceGroups/{variables['gallery_resource_group']}"
           f"/providers/Microsoft.Compute/galleries/{variables['gallery_name']}/images/{variables['gallery_image_name']}"
           "?api-version=2023-07-03")
    try:
        urllib.request.urlopen(url, context=ssl.create_default_context(cafile=os.environ.get("REQUESTS_CA_BUNDLE")))
        return None
    except urllib.error.HTTPError as e:
        return (f"failed to get image \"{variables['gallery_image_name']}\" from image gallery "
                f"\"{variables['gallery_name']}\" in resource group \"{variables['gallery_resource_group']}\": "
                f"{e.read().decode()}")


def _ec2(variables: dict):
    """EC2 of the build's region at the tests' moto server, or None without one."""
    if not os.environ.get("AWS_ENDPOINT_URL"):
        return None
    import boto3

    return boto3.client("ec2", region_name=variables["region"])


def _tags(template: str, variables: dict) -> dict[str, dict]:
    """The amazon-ebs source's ``run_tags``, ``tags`` and ``snapshot_tags`` as the template sets them."""
    import hcl2

    with open(template) as f:
        ((_, named),) = hcl2.load(f)["source"][0].items()
    ((_, body),) = named.items()
    out = {}
    for key in ("run_tags", "tags", "snapshot_tags"):
        m = re.fullmatch(r'"?\$\{var\.(\w+)\}"?', body[key])
        if not m:
            raise SystemExit(f"the stand-in reads {key} only as ${{var.NAME}}, not {body[key]}")
        out[key] = variables[m[1]]
    return out


def _pairs(tags: dict) -> list[dict]:
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def _ami(name: str) -> str:
    return "ami-" + hashlib.sha256(name.encode()).hexdigest()[:17]


if __name__ == "__main__":
    sys.exit(main(sys.argv))

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

``FAKE_PACKER_FAIL=1`` makes the build fail as Packer reports it (a ``ui,error`` line, exit 1);
``FAKE_PACKER_LOG`` names a file each call is appended to.
"""

import json
import os
import sys
import time


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
    line("", "ui", "say", f"==> {builder}: Creating temporary instance to build {variables['image_name']}...")
    line("", "ui", "message", f"    {builder}: Uploading {variables['bundle_dir']}/ => /tmp/gpufleet")
    line("", "ui", "message", f"    {builder}: baked 8 formula(s) of state tree abc: 412 changed in 950s")
    if os.environ.get("FAKE_PACKER_FAIL"):
        line("", "ui", "error", f"Build '{builder}' errored after 16 minutes: Script exited with non-zero exit status: 1")
        return 1
    if builder.startswith("amazon"):
        artifact = f"{variables['region']}:ami-0123456789abcdef0"
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
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

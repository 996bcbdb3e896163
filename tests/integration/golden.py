"""A golden image on the local test rack, for the end-to-end test and the benchmark.

One rack host plays the image builder: it runs the bake bundle that `gpufleet image plan` writes
(``node_bake.py``, the bootstrap's bake mode: Salt from the site's mirror, the pool's formulas)
with ``--root`` set to a scratch folder, so that the builder's clean-up (SSH host keys, machine
id, cloud-init state) does not cut the rack's own SSH to it; the image record is then put where a
node booted from the image finds it, and that same host boots as the pool's node: it runs the
launch template's user data against moto's S3 and STS. Another host boots the same user data
from stock (no Salt, nothing applied). Then the pool's settings for a baked formula change and
the image's node boots again: its image is stale.
"""

from __future__ import annotations

import base64
import io
import subprocess
import tarfile
import time
from pathlib import Path

from tests.integration.localrack import on_host

STACK = """\
name: e2e-image
owner: ci@example.com
ttl: 2h
software: {driver: "570", cuda: "12.8"}
pools:
  - name: gpu
    provider: aws
    region: us-east-1
    instance_type: g6.xlarge
    nodes: 2
    salt:
      states: [node_base]
      pillar:
        gpufleet: {live: false}   # the rack's hosts share this machine's kernel
"""
BUILDER, STOCK = 1, 4  # host 4 never applied anything in the module's first test (its tree was refused)
FRESH = "rm -rf /opt/gpufleet /var/lib/gpufleet /etc/gpufleet /var/tmp/builder-root /tmp/gpufleet"


def user_data(plan, pool: str) -> str:
    """A pool's launch template user data, as cloud-init receives it."""
    lt = next(r for r in plan.cloud_resources if r.type == "aws:ec2/launchTemplate:LaunchTemplate"
              and r.parent.endswith(f"-{pool}"))
    return base64.b64decode(lt.inputs["userData"]).decode()


def _tar(folder: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(folder, arcname=".")
    return buf.getvalue()


def _timed_boot(i: int, script: str, env: dict) -> tuple[float, subprocess.CompletedProcess]:
    exports = " ".join(f"{k}={v}" for k, v in env.items())
    t0 = time.monotonic()
    r = on_host(i, f"env {exports} bash -s", stdin=script, timeout=900)
    return time.monotonic() - t0, r


def run(moto, tmp: Path) -> dict:
    """Bake, boot from the image, boot from stock, boot from a stale image; each node's status and
    how long each boot took (seconds from the user data's start to the agent's end)."""
    import json

    import boto3

    from gpufleet import catalog, nodes, stacks
    from gpufleet.engine import plan as planner
    from gpufleet.fleet import image
    from gpufleet.nodes.cloud import channel as cloudnodes

    cat = catalog.load(use_config=False)
    path = tmp / "image-stack.yaml"
    path.write_text(STACK)
    stack = stacks.load(path, cat)
    plan = planner.plan(stack, cat, workers=1)
    bucket = plan.outputs["pools"]["gpu"]["bucket"]["name"]
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket=bucket)
    role = boto3.client("iam", region_name="us-east-1").create_role(RoleName="e2e-image-gpu",
                                                                     AssumeRolePolicyDocument="{}")["Role"]

    def instance_env(node_id: str) -> dict:
        c = boto3.client("sts", region_name="us-east-1").assume_role(RoleArn=role["Arn"],
                                                                     RoleSessionName=node_id)["Credentials"]
        return {"AWS_ACCESS_KEY_ID": c["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": c["SecretAccessKey"],
                "AWS_SESSION_TOKEN": c["SessionToken"], "GPUFLEET_NODE_ID": node_id}

    def status(node_id: str) -> dict:
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="status/gpu/").get("Contents", [])]
        (key,) = [k for k in keys if k.endswith(f":{node_id}.json")]
        return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())

    (planned,) = image.plan(stack, cat, tmp / "images")
    for i in (BUILDER, STOCK):
        assert on_host(i, FRESH).returncode == 0
    # the builder: the bundle uploaded as Packer's file provisioner does, then the bake mode
    up = on_host(BUILDER, "mkdir -p /tmp/gpufleet && tar -xzf - -C /tmp/gpufleet", stdin=_tar(Path(planned.bundle)))
    assert up.returncode == 0, up.stderr
    t0 = time.monotonic()
    baked = on_host(BUILDER, "python3 /tmp/gpufleet/node_bake.py /tmp/gpufleet/bake.json --root /var/tmp/builder-root",
                    timeout=900)
    bake_s = time.monotonic() - t0
    assert baked.returncode == 0, baked.stdout[-2000:] + baked.stderr[-2000:]
    assert on_host(BUILDER, "mkdir -p /etc/gpufleet && cp /var/tmp/builder-root/etc/gpufleet/image.json "
                            "/etc/gpufleet/image.json && rm -rf /tmp/gpufleet").returncode == 0

    archive, tree = nodes.state_tree(stack, cat)
    assert tree == planned.tree  # the image holds the tree `up` publishes
    pool = stack.pools[0]
    doc = cloudnodes.pool_document(stack, pool, cluster="e2e-image", cat=cat, tree=tree)
    cloudnodes.publish(cloudnodes.cloud("aws").objects(plan.outputs["pools"]["gpu"]["bucket"]), {"gpu": doc},
                       archive, tree)
    boot_script = user_data(plan, "gpu")
    node_ids = plan.outputs["pools"]["gpu"]["node_ids"]
    from_image_s, r1 = _timed_boot(BUILDER, boot_script, instance_env(node_ids[0]))
    from_stock_s, r2 = _timed_boot(STOCK, boot_script, instance_env(node_ids[1]))
    out = {"bake_s": bake_s, "from_image_s": from_image_s, "from_stock_s": from_stock_s,
           "from_image": status(node_ids[0]), "from_stock": status(node_ids[1]), "boots": (r1, r2)}

    # the pool's settings for a baked formula change: the same image is now stale
    stale_stack = stack.model_copy(deep=True)
    stale_stack.pools[0].salt.pillar["node_base"] = {"hugepages": 64}
    stale = cloudnodes.pool_document(stale_stack, stale_stack.pools[0], cluster="e2e-image", cat=cat, tree=tree)
    cloudnodes.publish(cloudnodes.cloud("aws").objects(plan.outputs["pools"]["gpu"]["bucket"]), {"gpu": stale},
                       archive, tree)
    out["from_stale_s"], r3 = _timed_boot(BUILDER, boot_script, instance_env(node_ids[0]))
    out["from_stale"] = status(node_ids[0])
    out["boots"] += (r3,)
    return out

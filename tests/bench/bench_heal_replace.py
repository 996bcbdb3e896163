"""Drained -> replacement-ready for an AWS pool (issue 51), through the real code path in emulation.

A pool of 2 nodes made as `up` makes it (a launch template and one instant EC2 Fleet, tests/unit/test_heal_aws.py's
pool_fleet) in moto's server (the real wire protocol; EC2's two ways moto lacks played as that test plays them), the
cluster's bucket in moto's S3. Each run: node 0's status says it is faulty and drained (the watch's word); then

1. `heal` (its library function, one pass: read the statuses through the bucket store `up` uses, decide, replace
   through the pool's own fleet request: CreateFleet for one, the old instance terminated, the registry and the log
   written) -- "drained -> replacement launched";
2. the new VM "boots" at once (emulation: no boot here) and its node agent writes its status through the agent's own
   S3 client (SigV4, its instance role's session named by its instance id, the key its policy allows) -- "agent's
   status written";
3. `channel.wait` (what `up` and `configure` poll the nodes with) reads it: configured on the pool's generation --
   "status seen ready".

What a real cloud adds is not measured here: the VM's launch and boot, the node's configuration and its boot gate
(tens of seconds to minutes: a fresh GPU node takes 10-20 minutes, channel.WAIT_S's note; a golden image less), and
up to channel.POLL_S (5 s) before `up` polls again. Figures only, nothing asserted: the machine is shared and noisy.

Run: python tests/bench/bench_heal_replace.py
"""

from __future__ import annotations

import datetime as dt
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "unit")]

import boto3  # noqa: E402
import pytest  # noqa: E402 (after the path: tests/ holds the fakes)
from test_heal import XID, Cluster, say, stack_text  # noqa: E402
from test_heal_aws import REGION, like_ec2, pool_fleet  # noqa: E402

from gpufleet import catalog  # noqa: E402
from gpufleet.clouds import bootstrap, inventory, node_agent  # noqa: E402
from gpufleet.clouds.aws.objects import Store  # noqa: E402
from gpufleet.nodes.cloud import channel  # noqa: E402

from fakes.aws import Server  # noqa: E402

RUNS = 5
BUCKET = "gpufleet-hl-1"
GENERATION = "g1"


def node_writes_status(mp, state: Path, endpoint: str, node_id: str) -> float:
    """The new node's agent writes its status (configured, its gate passed) as on a node: seconds it took."""
    iam, sts = boto3.client("iam", region_name=REGION), boto3.client("sts", region_name=REGION)
    role = iam.get_role(RoleName="hl-nodes")["Role"]["Arn"]
    creds = sts.assume_role(RoleArn=role, RoleSessionName=node_id)["Credentials"]  # EC2 names the session so
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")}
    mp.setattr(node_agent, "STATE_DIR", str(state / node_id))
    cfg = bootstrap.config("aws", cluster="hl", pool="gpu", bucket=BUCKET, region=REGION, endpoint=endpoint)
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    health = {"state": "ok", "faults": [], "checked_at": now, "interval": 60, "gate": {"level": "quick", "passed": True},
              "notice": None, "drained": False}
    try:
        os.environ.update(AWS_ACCESS_KEY_ID=creds["AccessKeyId"], AWS_SECRET_ACCESS_KEY=creds["SecretAccessKey"],
                          AWS_SESSION_TOKEN=creds["SessionToken"])
        t = time.perf_counter()
        node_agent.put_status(node_agent.S3(cfg), "gpu", node_id, {
            "node_id": node_id, "cluster": "hl", "pool": "gpu", "ok": True, "generation": GENERATION, "changed": 0,
            "failed": [], "facts": {"hostname": f"ip-{node_id[-8:]}", "address": "10.0.1.9"}}, health=health)
        return time.perf_counter() - t
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def once(c: Cluster, mp, state: Path, endpoint: str) -> tuple[float, float, float]:
    faulty, other = c.node_ids()
    say(c.bucket, faulty, state="faulty", faults=[XID], drained=True)
    say(c.bucket, other)
    t = time.perf_counter()
    out = c.heal(dt.datetime.now(dt.timezone.utc))
    launched = time.perf_counter() - t
    if [r.done for r in out.repaired] != [True]:
        raise SystemExit(f"not replaced: {out.repaired}")
    new = c.node_ids()[0]
    wrote = node_writes_status(mp, state, endpoint, new)
    t = time.perf_counter()
    (report,) = channel.wait(c.bucket, [channel.NodeTarget("gpu", 0, new, "10.0.1.9")], {"gpu": GENERATION},
                             timeout_s=30, poll_s=0.05)
    seen = time.perf_counter() - t
    if report.state != "configured":
        raise SystemExit(f"the new node {new} is not seen ready: {report.to_dict()}")
    return launched, wrote, seen


def main() -> int:
    mp = pytest.MonkeyPatch()
    srv = Server().start()
    try:
        for k, v in {"AWS_ENDPOINT_URL": srv.url, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                     "AWS_DEFAULT_REGION": REGION, "AWS_EC2_METADATA_DISABLED": "true"}.items():
            mp.setenv(k, v)
        for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION"):
            mp.delenv(k, raising=False)
        like_ec2._get_wrapped_function()(mp)  # EC2's ways moto lacks, as tests/unit/test_heal_aws.py plays them
        cat = catalog.load(use_config=False)
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            mp.setenv("AWS_CONFIG_FILE", str(root / "aws-config"))
            mp.setenv("AWS_SHARED_CREDENTIALS_FILE", str(root / "aws-creds"))
            boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
            boto3.client("iam", region_name=REGION).create_role(RoleName="hl-nodes", AssumeRolePolicyDocument="{}")
            _, ids = pool_fleet(2)
            c = Cluster(root, cat, stack_text("{on_fault: replace, max_replacements: 100}", nodes=2), api=None)
            for n, iid in zip(c.nodes, ids):  # the registry as `up` recorded the fleet's instances
                n.node_id = iid
            c.reg.record(name="hl", stack="hl", stack_file=str(root / "hl.yaml"), owner="ops@example.com",
                         expires_at="2099-01-01T00:00:00Z", backend=None, nodes=c.nodes)
            c.api = inventory.open_clouds(["aws"], required=True, regions={"aws": [REGION]})["aws"]
            c.bucket = Store({"name": BUCKET, "region": REGION})
            (root / "state").mkdir()
            runs = [once(c, mp, root / "state", srv.url) for _ in range(RUNS)]
    finally:
        mp.undo()
        srv.stop()
    print(f"AWS pool of 2 in moto's server, {RUNS} replacements, one after another")
    for i, label in enumerate(("drained -> replacement launched (heal pass)", "new node's status written (agent)",
                               "status seen ready (channel.wait)")):
        got = sorted(r[i] for r in runs)
        print(f"{label}: min {got[0]:.3f} s, median {statistics.median(got):.3f} s, max {got[-1]:.3f} s")
    total = sorted(sum(r) for r in runs)
    print(f"drained -> replacement-ready, gpufleet's own part: median {statistics.median(total):.3f} s "
          f"(a real cloud adds the VM's launch, boot, configuration and gate, and up to {channel.POLL_S:.0f} s of polling)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

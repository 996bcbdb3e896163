"""`gpufleet reap --dry-run` over 2,000 tagged instances in 4 regions of moto (target: 60 s).

moto's HTTP server (with the additions in tests/fakes/aws.py) runs in its own process,
like a remote endpoint; boto3 reaches it through AWS_ENDPOINT_URL. The fleet: 500
instances in each of 4 regions, spread over 40 clusters of 50 (in each region 3 expired,
3 orphaned, 4 recorded in the registry and current), plus 200 untagged instances that
must not be found. Each run is the installed `gpufleet` as a subprocess:

* all regions moto reports (what cron runs by default), and
* only the 4 regions with instances (`--region` x 4), for the ratio.

Run: python tests/bench/bench_reap.py  (prints the times and the numbers found)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
EXE = str(Path(PY).parent / "gpufleet")
REGIONS = ["us-east-1", "us-west-2", "eu-west-1", "ap-northeast-1"]
PER_REGION, CLUSTERS = 500, 40
TARGET_S = 60.0


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="gpufleet-bench-reap-"))
    server = subprocess.Popen([PY, str(ROOT / "tests" / "fakes" / "aws.py"), "0"], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT / "tests")})
    url = server.stdout.readline().strip()
    if not url.startswith("http"):
        print("moto's server did not start")
        return 1
    env = {**os.environ, "AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": str(tmp / "none"),
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp / "none"), "AWS_EC2_METADATA_DISABLED": "true",
           "XDG_DATA_HOME": str(tmp / "data"), "PULUMI_BACKEND_URL": f"file://{tmp / 'state'}",
           "GOOGLE_APPLICATION_CREDENTIALS": str(tmp / "none.json"), "CLOUDSDK_CONFIG": str(tmp / "gcloud"),
           "AZURE_CONFIG_DIR": str(tmp / "azure"), "ARM_SUBSCRIPTION_ID": ""}
    try:
        os.environ.update({k: v for k, v in env.items() if k.startswith(("AWS_", "XDG_"))})
        expected = populate()
        runs = {"all regions": [EXE, "--json", "reap", "--dry-run", "--provider", "aws", "--grace", "0"],
                "4 regions": [EXE, "--json", "reap", "--dry-run", "--provider", "aws", "--grace", "0",
                              *sum((["--region", r] for r in REGIONS), [])]}
        times = {}
        for name, cmd in runs.items():
            t0 = time.perf_counter()
            out = subprocess.run(cmd, env=env, capture_output=True, text=True)
            times[name] = time.perf_counter() - t0
            if out.returncode != 0:
                print(out.stdout[-2000:], out.stderr[-2000:])
                return 1
            data = json.loads(out.stdout)
            found = {x["id"] for x in data["reap"]}
            print(f"{name:12s}: {times[name]:6.1f} s, {data['found']} tagged resources found, {len(found)} to reap "
                  f"({sum(x['reason'] == 'expired' for x in data['reap'])} expired, "
                  f"{sum(x['reason'] == 'orphan' for x in data['reap'])} orphaned), "
                  f"{len(data['checked'])} cloud(s), ${data['usd_per_hour']:,.0f}/h")
            assert found == expected, f"found {len(found)}, expected {len(expected)}"
        print(f"target: all regions <= {TARGET_S:.0f} s: {'met' if times['all regions'] <= TARGET_S else 'NOT met'}; "
              f"all regions / 4 regions = {times['all regions'] / times['4 regions']:.2f}x")
        return 0 if times["all regions"] <= TARGET_S else 1
    finally:
        server.terminate()
        server.wait()


def populate() -> set[str]:
    """2,000 tagged instances (and 200 untagged); returns the ids reap must list."""
    import boto3

    sys.path.insert(0, str(ROOT / "infra"))
    from gpufleet.state.registry import Registry

    reg = Registry()
    expect: set[str] = set()
    t0 = time.perf_counter()
    for ri, region in enumerate(REGIONS):
        ec2 = boto3.client("ec2", region_name=region)
        per_cluster = PER_REGION // (CLUSTERS // len(REGIONS))
        for c in range(CLUSTERS // len(REGIONS)):
            name = f"bench-{ri}-{c}"
            kind = ("expired", "orphan", "current", "current")[c % 4]
            expires = "2026-01-01T00:00:00Z" if kind == "expired" else "2099-01-01T00:00:00Z"
            tags = [{"Key": "gpufleet:cluster", "Value": name}, {"Key": "gpufleet:expires-at", "Value": expires},
                    {"Key": "gpufleet:owner", "Value": "bench@example.com"}]
            got = ec2.run_instances(ImageId="ami-12c6146b", MinCount=per_cluster, MaxCount=per_cluster,
                                    InstanceType=("p4d.24xlarge", "p5.48xlarge", "g5.xlarge")[c % 3],
                                    TagSpecifications=[{"ResourceType": "instance", "Tags": tags}])["Instances"]
            if kind != "orphan":
                reg.record(name=name, stack=name, stack_file="bench.yaml", owner="bench@example.com",
                           expires_at=expires, backend=None, nodes=[], locations=[("aws", region)])
            if kind in ("expired", "orphan"):
                expect |= {i["InstanceId"] for i in got}
        ec2.run_instances(ImageId="ami-12c6146b", MinCount=50, MaxCount=50, InstanceType="g5.xlarge")
    print(f"populated {len(REGIONS) * PER_REGION} tagged + {50 * len(REGIONS)} untagged instances in "
          f"{len(REGIONS)} regions in {time.perf_counter() - t0:.1f} s")
    return expect


if __name__ == "__main__":
    sys.exit(main())

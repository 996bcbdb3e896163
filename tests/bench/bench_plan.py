"""`gpufleet plan` for a 1,000-node stack (10 pools of 100): wall time and peak memory.

Target on the 2-core development machines: under 10 s and under 1 GiB. The stack mixes AWS
(p4d.24xlarge with EFA, in two regions) and GCP (a2-highgpu-8g) pools, the providers whose
programs register one resource per node. The command runs as a subprocess, as a user runs
it; peak memory is the largest sum of resident memory over the process and its plan workers,
sampled every 20 ms from /proc (forked workers share pages, so the sum over-counts: an upper
bound). Each figure is also given as a ratio to `python -c "import pulumi_aws"` measured in
the same run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PY = sys.executable
EXE = str(Path(PY).parent / "gpufleet")
RUNS = 3
TARGET_S = 10.0
TARGET_MIB = 1024.0


def stack_text() -> str:
    pools = []
    for i in range(10):
        if i < 6:
            region = ("us-east-1", "us-west-2")[i % 2]
            pools.append(f"  - {{name: train{i}, provider: aws, region: {region}, instance_type: p4d.24xlarge, "
                         f"nodes: 100, interconnect: efa}}")
        else:
            pools.append(f"  - {{name: gcp{i}, provider: gcp, region: us-central1, zone: us-central1-a, "
                         f"instance_type: a2-highgpu-8g, nodes: 100}}")
    return ("name: bench-1000\nowner: bench@example.com\nttl: 4h\naccess: {ssh_cidrs: [203.0.113.0/24]}\n"
            "pools:\n" + "\n".join(pools) + "\n")


def _tree_rss_kib(pid: int) -> int:
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                total += next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), 0)
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total


def run(cmd: list[str]) -> tuple[float, float, str]:
    with tempfile.TemporaryFile("w+") as sink:  # a file, not a pipe: the JSON is megabytes
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.DEVNULL, text=True)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, _tree_rss_kib(proc.pid))
            time.sleep(0.02)
        wall = time.perf_counter() - t0
        sink.seek(0)
        out = sink.read()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed with {proc.returncode}")
    return wall, peak / 1024, out


def main() -> int:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "bench-1000.yaml"
        path.write_text(stack_text())
        base = min(run([PY, "-c", "import pulumi_aws, pulumi_gcp"])[0] for _ in range(RUNS))
        results = [run([EXE, "--json", "plan", str(path)]) for _ in range(RUNS)]
    wall = sorted(r[0] for r in results)[len(results) // 2]
    peak = max(r[1] for r in results)
    data = json.loads(results[0][2])
    nodes = sum(p["nodes"] for p in data["pools"])
    print(f"stack: {nodes} nodes in {len(data['pools'])} pools -> {len(data['resources'])} resources, "
          f"${data['usd_per_hour']:,.0f}/h")
    print(f"baseline `import pulumi_aws, pulumi_gcp`: {base:.2f} s")
    print(f"gpufleet plan (median of {RUNS}): {wall:.2f} s ({wall / base:.1f}x baseline)  target < {TARGET_S:.0f} s")
    print(f"peak memory (process + workers, upper bound): {peak:.0f} MiB  target < {TARGET_MIB:.0f} MiB")
    ok = wall < TARGET_S and peak < TARGET_MIB
    print("targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

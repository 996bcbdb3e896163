"""`gpufleet verify --level quick` on one 8-GPU node: the checker's own overhead, and the time the
NCCL run would take.

No GPU here: the tools are stand-ins replaying the 8x H100 captures (tests/verify_standin.py;
tests/data/verify/README.md says what those are), so the tools' own time is not a GPU's. What is
measured is the checker's overhead besides the tools it runs (interpreter start, unpacking the
bundle, parsing, judging), per node, against the issue's budget of 2 s; and, from nccl-tests'
own per-iteration times in the table (at the bus bandwidths Azure measured on 8x H100), how
long the timed all-reduce iterations of the quick level take (its budget: 3 minutes for the
whole level; NCCL's start-up and DCGM level 1 come on top, seconds each per NVIDIA's docs).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.verify_standin import standins  # noqa: E402

WARMUP, ITERS = 5, 20  # the quick level's all_reduce_perf -w 5 -n 20


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)

    from gpufleet import catalog
    from gpufleet.nodecheck import parsers
    from gpufleet.spec import Stack
    from gpufleet.verify import bundle, expect

    cat = catalog.load(use_config=False)
    stack = Stack.model_validate({"name": "b", "owner": "a@b.c", "pools": [
        {"name": "p", "provider": "azure", "region": "eastus", "instance_type": "Standard_ND96isr_H100_v5", "nodes": 1}]})
    exp = expect.for_pool(stack, stack.pools[0], cat, node="p-0")
    captures = ROOT / "tests" / "data" / "verify" / "h100x8"
    overheads, walls = [], []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        bin_dir = standins(tmp, captures)
        pyz = tmp / "verify.pyz"
        pyz.write_bytes(bundle.build()[0])
        env = {"PATH": "/usr/bin:/bin", "GPUFLEET_STANDIN_LOAD_S": "0"}
        for _ in range(args.runs):
            start = time.monotonic()
            r = subprocess.run([sys.executable, "-I", str(pyz), "--tools", str(bin_dir)], input=json.dumps(exp),
                               capture_output=True, text=True, env=env, cwd=tmp)
            wall = time.monotonic() - start
            rep = json.loads(r.stdout)
            assert rep["verdict"] == "pass", rep["failures"]
            walls.append(wall)
            overheads.append(wall - rep["tool_seconds"])
    table = parsers.all_reduce((captures / "all_reduce_perf.txt").read_text())
    text = (captures / "all_reduce_perf.txt").read_text().splitlines()
    us = 0.0
    for line in text:
        t = line.split()
        if t and t[0].isdigit():
            us += (float(t[-8]) + float(t[-4])) * (WARMUP + ITERS)  # out-of-place and in-place, each size
    oh = statistics.median(overheads)
    print(f"quick level on one 8-GPU node, stand-in tools, {args.runs} runs, {len(rep['checks'])} checks")
    print(f"  wall per node (median)       {statistics.median(walls):6.2f} s")
    print(f"  checker's own overhead       {oh:6.2f} s   ({oh / 2.0:.2f} of the 2 s budget)")
    print(f"  timed all-reduce iterations  {us / 1e6:6.2f} s   ({len(table['rows'])} sizes up to "
          f"{table['max_bytes'] >> 30} GiB, {WARMUP}+{ITERS} iterations each, from the table's times; "
          f"{us / 1e6 / 180:.3f} of the 3 min budget)")
    return 0 if oh < 2.0 else 1


if __name__ == "__main__":
    sys.exit(main())

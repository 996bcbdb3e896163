"""Fault -> drained on the local test rack (issue 51), with real Slurm and the real node agent and watch.

The stack of tests/integration/test_heal_rack.py comes up on the rack (hosts 2-4 as an AWS stack's nodes, moto's
S3 the bucket, the watch at health.interval 20 s, its timer played by a loop on each host: the rack's hosts run no
systemd). Then, RUNS times on idle host 3: a fatal XID appears in its kernel log (the stand-in journalctl), timed
until `scontrol show node` on the controller says it is drained with GF-XID-FATAL; the fault is taken away, timed
until `sinfo` lists it idle again (the watch resumes it). The drain waits for the watch's next run: expect up to
one interval plus the checks' own time, the issue's bound being two intervals. Figures only, nothing asserted:
the machine is shared and noisy.

Drained -> replacement-ready is a cloud's figure (a new VM boots and configures): a rack host is never replaced,
so it is not measured here (tests/bench/bench_heal_replace.py times it for an AWS pool in emulation,
tests/bench/bench_heal.py `heal --once` over 1,000 nodes).

Run (root, see tests/rack/rack.py): python tests/bench/bench_heal_rack.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import pytest  # noqa: E402 (after the path: tests/ holds the fakes)

from tests.integration.localrack import remove_standins  # noqa: E402
from tests.integration.test_cloud_nodes_e2e import cloud_rack  # noqa: E402
from tests.integration.test_heal_rack import INTERVAL_S, fault, heal_cluster, node_line, sinfo, until  # noqa: E402

RUNS = 5


def once() -> tuple[float, float]:
    """(fault -> drained, fault gone -> idle) on host 3, in seconds."""
    fault(3)
    t = time.monotonic()
    shown = until(lambda: node_line("gpu-0"), lambda s: "GF-XID-FATAL" in s and "DRAIN" in s, timeout=6 * INTERVAL_S,
                  every=0.5)
    drained = time.monotonic() - t
    remove_standins(3)
    t = time.monotonic()
    back = until(sinfo, lambda n: n.get("gpu-0") == "idle", timeout=6 * INTERVAL_S, every=0.5)
    if "GF-XID-FATAL" not in shown or back.get("gpu-0") != "idle":
        raise SystemExit(f"gpu-0 (h3) was not drained and resumed: {shown!r} {back!r}")
    return drained, time.monotonic() - t


def main() -> None:
    mp = pytest.MonkeyPatch()
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory() as tmp, cloud_rack(Path(tmp)) as rack, heal_cluster(rack, mp):
            print(f"rack up, stack up: {time.monotonic() - started:.0f} s")
            until(sinfo, lambda n: n.get("gpu-0") == "idle", timeout=6 * INTERVAL_S)
            runs = [once() for _ in range(RUNS)]
    finally:
        mp.undo()
    for i, label in enumerate(("fatal XID -> drained", "fault gone -> resumed")):
        got = sorted(r[i] for r in runs)
        print(f"{label} (watch interval {INTERVAL_S} s, {RUNS} runs): min {got[0]:.1f} s, median "
              f"{statistics.median(got):.1f} s, max {got[-1]:.1f} s ({got[-1] / INTERVAL_S:.2f} intervals)")


if __name__ == "__main__":
    main()

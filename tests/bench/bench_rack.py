"""Configuring rack hosts in parallel: 4 hosts against 1, on the local test rack.

Target: configuring 4 hosts takes at most 1.5x the time of configuring one. Each timed run
is `gpufleet up` of the local-rack stack (as a user runs it: facts over SSH, Salt's real
states, the GPU states rehearsed, the registry) on freshly reset hosts, so every run
installs the same packages and the same JAX environment from the registries. A warm-up run
goes first so that the registries' caches are equally warm for both. A converged re-apply
(`--reconfigure`, nothing left to change) is timed too. Needs root (see tests/rack/rack.py).
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
EXE = str(Path(sys.executable).parent / "gpufleet")
RACK = [sys.executable, str(ROOT / "tests" / "rack" / "rack.py")]
STACK = (ROOT / "stacks" / "examples" / "local-rack.yaml").read_text()
TARGET = 1.5


def stack_with(hosts: list[int], d: Path) -> str:
    lines = []
    for line in STACK.splitlines():
        if "- {address: 10.77.0." in line and int(line.split("10.77.0.")[1].split(",")[0]) - 10 not in hosts:
            continue
        lines.append(line)
    p = d / f"rack-{len(hosts)}.yaml"
    p.write_text("\n".join(lines) + "\n")
    return str(p)


def up(stack: str, env: dict, *extra: str) -> float:
    start = time.monotonic()
    r = subprocess.run([EXE, "--json", "up", stack, "--yes", "--trust-new-hosts", *extra], capture_output=True,
                       text=True, env=env, timeout=3600)
    took = time.monotonic() - start
    doc = json.loads(r.stdout)
    bad = [h for h in doc.get("hosts", []) if not h["ok"]]
    if r.returncode != 0 or bad:
        raise SystemExit(f"gpufleet up failed ({r.returncode}): {r.stderr[-2000:]}")
    return took


def reset(hosts: list[int]) -> None:
    for i in hosts:
        subprocess.run(RACK + ["reset", str(i)], check=True, capture_output=True)


def main() -> int:
    if os.geteuid() != 0:
        print("bench_rack: needs root (the local rack uses network namespaces)", file=sys.stderr)
        return 2
    subprocess.run(RACK + ["up", "--hosts", "4"], check=True, capture_output=True)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        env = {**os.environ, "XDG_DATA_HOME": str(d / "data")}
        one, four = stack_with([1], d), stack_with([1, 2, 3, 4], d)
        reset([1])
        up(one, env)  # warm-up: registry caches
        reset([1])
        t1 = up(one, env)
        t1_again = up(one, env, "--reconfigure")
        reset([1, 2, 3, 4])
        t4 = up(four, env)
        t4_again = up(four, env, "--reconfigure")
    cpus = len(os.sched_getaffinity(0))
    print(f"machine: {cpus} CPU(s)")
    print(f"configure 1 host (fresh):      {t1:6.1f} s")
    print(f"configure 4 hosts (fresh):     {t4:6.1f} s   ratio {t4 / t1:.2f}x (target <= {TARGET}x)")
    print(f"re-apply 1 host (converged):   {t1_again:6.1f} s")
    print(f"re-apply 4 hosts (converged):  {t4_again:6.1f} s   ratio {t4_again / t1_again:.2f}x")
    return 0 if t4 / t1 <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())

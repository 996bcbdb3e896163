"""Configuring rack hosts in parallel: 4 hosts against 1, on the local test rack.

Target: configuring 4 hosts takes at most 1.5x the time of configuring one. Each timed run
is `gpufleet up` of the local-rack stack (as a user runs it: facts over SSH, Salt's real
states, the GPU states rehearsed, the registry) on freshly reset hosts, so every run
installs the same packages and the same JAX environment from the registries. A warm-up run
goes first so that the registries' caches are equally warm for both. A converged re-apply
(`--reconfigure`, nothing left to change) is timed too. Needs root (see tests/rack/rack.py).

The test hosts share this machine's CPUs, so each run also reports the CPU time the whole
machine spent (from /proc/stat) and how busy its CPUs were: a ratio above the target with
the CPUs saturated is the machine's limit, not hosts waiting on each other.
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


def cpu_busy() -> float:
    """CPU-seconds the machine has spent busy (all CPUs, everything but idle and iowait)."""
    fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def up(stack: str, env: dict, *extra: str) -> tuple[float, float]:
    """Wall seconds and machine CPU-seconds of one `gpufleet up`."""
    start, cpu0 = time.monotonic(), cpu_busy()
    r = subprocess.run([EXE, "--json", "up", stack, "--yes", "--trust-new-hosts", *extra], capture_output=True,
                       text=True, env=env, timeout=3600)
    took, cpu = time.monotonic() - start, cpu_busy() - cpu0
    doc = json.loads(r.stdout)
    bad = [h for h in doc.get("hosts", []) if not h["ok"]]
    if r.returncode != 0 or bad:
        raise SystemExit(f"gpufleet up failed ({r.returncode}): {doc.get('message')} "
                         f"{[(h['host'], h['error']) for h in bad]} {r.stderr[-1000:]}")
    return took, cpu


def reset(hosts: list[int], env: dict) -> None:
    """Fresh root file systems; a reinstalled host has new host keys, so the site forgets the old ones."""
    for i in hosts:
        subprocess.run(RACK + ["reset", str(i)], check=True, capture_output=True)
    (Path(env["XDG_DATA_HOME"]) / "gpufleet" / "known_hosts" / "local").unlink(missing_ok=True)


def main() -> int:
    if os.geteuid() != 0:
        print("bench_rack: needs root (the local rack uses network namespaces)", file=sys.stderr)
        return 2
    subprocess.run(RACK + ["up", "--hosts", "4"], check=True, capture_output=True)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        env = {**os.environ, "XDG_DATA_HOME": str(d / "data")}
        one, four = stack_with([1], d), stack_with([1, 2, 3, 4], d)
        reset([1], env)
        up(one, env, "--cluster", "bench-warm-up")  # the registries' caches
        reset([1], env)
        t1 = up(one, env, "--cluster", "bench-1")
        t1_again = up(one, env, "--cluster", "bench-1", "--reconfigure")
        reset([1, 2, 3, 4], env)
        t4 = up(four, env, "--cluster", "bench-4")
        t4_again = up(four, env, "--cluster", "bench-4", "--reconfigure")
    cpus = os.cpu_count() or 1

    def line(what: str, run: tuple[float, float]) -> str:
        wall, cpu = run
        return f"{what:<30} {wall:6.1f} s   CPU {cpu:6.1f} s   CPUs busy {100 * cpu / (wall * cpus):3.0f}%"

    ratio = t4[0] / t1[0]
    print(f"machine: {cpus} CPU(s); the test hosts share them")
    print(line("configure 1 host (fresh):", t1))
    print(line("configure 4 hosts (fresh):", t4) + f"   ratio {ratio:.2f}x (target <= {TARGET}x)")
    print(line("re-apply 1 host (converged):", t1_again))
    print(line("re-apply 4 hosts (converged):", t4_again) + f"   ratio {t4_again[0] / t1_again[0]:.2f}x")
    # with every CPU busy, 4 hosts cannot finish faster than their CPU time over the CPUs
    floor = t4[1] / cpus / t1[0]
    print(f"lower bound on this machine (4-host CPU time / {cpus} CPUs / 1-host time): {floor:.2f}x")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())

"""Start-up and full-catalog compare speed, as ratios to `python -c "import typer"`.

Targets on the 2-core development machines: `gpufleet --help` < 0.25 s, a compare over
the whole catalog < 0.5 s and a `--deadline` search over the whole catalog (each instance type
at up to nine node counts, each with its LLM layout search) < 1 s. The machines are shared and noisy, so each command runs
several times, the median is reported, and each is also given as a ratio to the
`import typer` baseline measured in the same run.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

RUNS = 9
PY = sys.executable
EXE = str(Path(PY).parent / "gpufleet")

CASES = {
    "baseline: python -c 'import typer'": [PY, "-c", "import typer"],
    "gpufleet --help": [EXE, "--help"],
    "gpufleet compare resnet50 (whole catalog)": [EXE, "--json", "compare", "resnet50"],
    "gpufleet compare resnet50 --spot (whole spot snapshot)": [EXE, "--json", "compare", "resnet50", "--spot"],
    "gpufleet compare llm-7b --nodes 1,2,4,8 (whole catalog x4)": [EXE, "--json", "compare", "llm-7b", "--nodes", "1,2,4,8"],
    "gpufleet catalog regions --gpu H100": [EXE, "--json", "catalog", "regions", "--gpu", "H100"],
    "gpufleet compare llm:70b --deadline 30d (whole catalog)": [EXE, "--json", "compare", "llm:70b", "--tokens", "1e12",
                                                                "--deadline", "30d"],
}
TARGETS = {"gpufleet --help": 0.25, "gpufleet compare resnet50 (whole catalog)": 0.5,
           "gpufleet compare llm:70b --deadline 30d (whole catalog)": 1.0}


def median_wall(cmd: list[str]) -> float:
    times = []
    for _ in range(RUNS):
        t0 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    from gpufleet import catalog

    cat = catalog.load(use_config=False)
    offers = cat.offers()
    print(f"catalog: {len(cat.instances)} instance types, {len(offers)} offers "
          f"({sum(o.market == 'spot' for o in offers)} spot) in {len({(o.provider, o.region) for o in offers})} regions")
    results = {name: median_wall(cmd) for name, cmd in CASES.items()}
    base = results["baseline: python -c 'import typer'"]
    print(f"median of {RUNS} runs each")
    for name, t in results.items():
        target = TARGETS.get(name)
        verdict = "" if target is None else ("  (target < %.2f s: %s)" % (target, "met" if t < target else "MISSED"))
        print(f"{name:<60} {t * 1000:8.1f} ms  {t / base:5.2f}x baseline{verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

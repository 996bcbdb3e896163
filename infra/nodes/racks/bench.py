"""Running the training-step benchmark on rack hosts: the node script (``gpufleet/nodebench/train_steps.py``,
the standard library and the host's own torch) goes over the SSH session's standard input, as the checks do
(``nodes.racks.checks``), under the same known_hosts policy; the plan as an argument; the host's Python runs
it, and its JSON answer comes back on standard output (its progress lines on standard error)."""

from __future__ import annotations

import base64
import json
import shlex

from gpufleet.clouds.baremetal import hosts
from gpufleet.errors import UntrustedValue
from gpufleet.nodebench import source
from gpufleet.nodebench.launch import TORCHRUN, Launch
from gpufleet.nodebench.train_steps import NO_TORCH
from gpufleet.nodes.cloud.bench import checked_answer
from gpufleet.nodes.kind import Benched

TIMEOUT_S = 1800  # compilation and three benchmarks take minutes on a GPU (fleet.bench.TIMEOUT_S on one machine)
# the script and its plan in a folder of their own, gone after the run; under torchrun, first whether the host's
# Python has it (exit 3, as the node script says it has no PyTorch) rather than a traceback from the launcher
SCRIPT = """d=$(mktemp -d /tmp/gpufleet-bench.XXXXXX) || exit 4
cat > "$d/train_steps.py"
echo {plan} | base64 -d > "$d/plan.json"
{probe}{python} {launch} "$d/train_steps.py" "$d/plan.json"
rc=$?; rm -rf "$d"; exit $rc
"""
PROBE = """{python} -c 'import {module}' >/dev/null 2>&1 || {{ rm -rf "$d"; exit {no_torch}; }}
"""


def bench_hosts(targets: list[hosts.HostTarget], plan: dict, *, python: str, trust_new: bool = False,
                workers: int = 32, progress=None, launch: Launch | None = None) -> list[Benched]:
    """One answer per target, in order: the benchmarks ran on every host at once (each on its own GPUs), alone, on
    several of its GPUs or under torchrun (``launch``); a job of several nodes has its rendezvous at the first
    target's address."""
    data = source()
    encoded = shlex.quote(base64.b64encode(json.dumps(plan).encode()).decode())
    probe = PROBE.format(python=shlex.quote(python), module=TORCHRUN, no_torch=NO_TORCH) if launch else ""
    scripts = {}
    for i, t in enumerate(targets):
        args = launch.args(first=targets[0].address, address=t.address, index=i) if launch else []
        scripts[(t.address, t.port)] = SCRIPT.format(plan=encoded, python=shlex.quote(python), probe=probe,
                                                     launch=" ".join(shlex.quote(a) for a in args))
    outcomes = hosts.on_each_host(
        targets, lambda s: s.run(scripts[(s.target.address, s.target.port)], timeout=TIMEOUT_S, stdin=data),
        phase="bench", trust_new=trust_new, workers=workers, progress=progress)
    return [_answer(t, o, python, launch, plan) for t, o in zip(targets, outcomes)]


def _answer(t: hosts.HostTarget, o, python: str, launch: Launch | None, plan: dict) -> Benched:
    out = Benched(t.id, t.pool, t.address)
    if not o.ok:
        out.error, out.hint = o.error.message, o.error.hint
        return out
    r = o.value
    lines = r.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        answer = None
    if r.rc == NO_TORCH:
        out.error = (f"no PyTorch{' with torchrun (' + TORCHRUN + ')' if launch else ''} in {python} on {t.address}: "
                     "bench trains with the PyTorch the node has")
        out.hint = ("install it with the frameworks formula (or by hand), or name the Python that has it with "
                    "--python")
    elif r.rc != 0 or not isinstance(answer, dict) or "results" not in answer:
        tail = (r.stderr or r.stdout).strip()[-300:]
        out.error = f"the benchmark exited {r.rc} on {t.address} with no results: {tail}"
        out.hint = f"is {python} a Python 3 there? --python names the one that has PyTorch"
    else:
        try:  # a host's output is the host's: checked as a cloud node's is before it is judged, shown or recorded
            out.answer = checked_answer(answer, plan, f"{t.address}'s bench answer")
        except UntrustedValue as e:
            out.error = e.message
            out.hint = (f"the host's Python did not answer as the node script does: see what {python} is on "
                        f"{t.address} (--python names another)")
    return out

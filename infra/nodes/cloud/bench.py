"""`gpufleet bench CLUSTER` on cloud nodes, through the stack's bucket as `verify` goes (``channel.verify_pools``).

The operator's gpufleet writes one request per pool where the pool's nodes read and cannot write
(``pools/<pool>/bench.json``: an id, the node script ``gpufleet/nodebench/train_steps.py`` itself, its plan, the
Python and torchrun's arguments); each node's watch (``clouds/node_watch.py``, run as root every health.interval)
runs it once, on an idle node only, and puts its word in its own status (``status/<pool>/<writer>.json``):
"running", then the answer, or why there is none. A status speaks for the node its key names (``channel.vouched``:
on AWS the node's own key alone; on GCP and Azure any node of the same pool could write it), and the answer is
checked against the node script's format (``checked_answer``) before it is judged or recorded.

Not here: ``--nodes N``, one torchrun job over several nodes (its rendezvous needs every node started together
and reachable on a port; the bucket starts each node within a watch interval of the others).
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import time
import uuid

from gpufleet.clouds import cloud
from gpufleet.errors import GpufleetError, UntrustedValue
from gpufleet.nodebench import source
from gpufleet.nodebench.launch import TORCHRUN, Launch
from gpufleet.nodebench.train_steps import NO_TORCH
from gpufleet.nodes.cloud.channel import POLL_S, NodeTarget, changed_statuses, node_key, pool_buckets, vouched
from gpufleet.nodes.kind import Benched
from gpufleet.state.shared import shown

REQUEST = "pools/{pool}/bench.json"  # node_watch.BENCH_REQUEST
RUN_S = 1800  # the node's run of the script at most (node_watch.ACTIVE_S: the Slurm reservation's span)
PICKUP_S = 180  # a node's watch runs every health.interval (60 s by default) and may be busy with its checks
FINAL = ("answered", "failed", "skipped")
# the frameworks formula's environment of a stack's software.frameworks entry (salt/frameworks: root and one venv a name)
FRAMEWORKS_PYTHON = "/opt/gpufleet/envs/pytorch/bin/python"
SAID = 400  # what of a node's own words (an error, a name) is shown, made printable (``shown``)

WHEN = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
VERSION = re.compile(r"[A-Za-z0-9.+_-]{1,64}")
HOST = re.compile(r"[A-Za-z0-9._-]{1,253}")
NUMBERS = ("samples_per_s", "step_s", "peak_mem_gb", "warmup_s", "rank_spread")
COUNTS = ("batch", "steps", "params")


def bench_pools(outputs: dict, nodes: list, plan: dict, python: str, launch: Launch | None, *, timeout_s: float,
                poll_s: float = POLL_S, progress=None, stores: dict | None = None, clock=time.monotonic,
                sleep=time.sleep) -> list[Benched]:
    """Ask each pool's nodes (the registry's rows) to run ``plan`` with their ``python`` (on ``launch.procs``
    of their GPUs), and wait for every node's answer until ``timeout_s``; one Benched per node, in order. ``progress``
    hears each node's word as it changes: answered, running, no answer yet."""
    request = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:8]}"
    body = json.dumps({"request": request, "plan": plan, "python": python, "args": launch.args() if launch else [],
                       "probe": TORCHRUN if launch else None, "script": source().decode(), "timeout_s": RUN_S,
                       # how long it is waited for, timed by the node from its first sight of the request: a
                       # duration, not a time of this machine's clock the node's would be compared with
                       "wait_s": timeout_s}).encode()
    targets = [NodeTarget(n.pool, n.idx, n.node_id, n.private_ip) for n in nodes if n.node_id]
    buckets = pool_buckets(outputs, {t.pool for t in targets})
    opened = {b: (stores or {}).get(b) or cloud(ref["cloud"]).objects(ref) for b, (ref, _) in buckets.items()}
    served = {p for _, names in buckets.values() for p in names}
    asked = [t for t in targets if t.pool in served]
    for b, (_, names) in buckets.items():
        for pool in names:
            opened[b].put(REQUEST.format(pool=pool), body)
    said: dict[tuple[str, str], dict] = {}
    seen: dict[str, dict] = {b: {} for b in opened}
    words: dict[str, str] = {}
    start = clock()
    while asked:
        for b, store in opened.items():
            for key, status in changed_statuses(store, seen[b]):
                got, owner = status.get("bench"), vouched(key, status)
                if owner is not None and isinstance(got, dict) and got.get("request") == request:
                    said[owner] = got
        finished = sum(_state(said.get(_key(t))) in FINAL for t in asked)
        for t in asked:
            word = _state(said.get(_key(t))) or "no answer yet"
            if progress and words.get(t.id) != word:
                progress("bench", finished, len(asked), f"{t.id}: {word}")
            words[t.id] = word
        if finished == len(asked) or clock() - start >= timeout_s:
            break
        sleep(poll_s)
    for b, (_, names) in buckets.items():  # withdrawn once nobody waits: a node that sees it later runs nothing
        for pool in names:
            with contextlib.suppress(GpufleetError):
                opened[b].remove(REQUEST.format(pool=pool))
    return [benched(t, said.get(_key(t)), python, timeout_s, t.pool in served, plan) for t in targets]


def _key(t: NodeTarget) -> tuple[str, str]:
    return t.pool, node_key(t.node_id)


def _state(got: dict | None) -> str | None:
    return None if got is None else shown(got.get("state"), 20)


def benched(t: NodeTarget, got: dict | None, python: str, timeout_s: float, served: bool, plan: dict) -> Benched:
    """One node's word as `bench` shows it: its answer (checked), or why there is none."""
    out = Benched(t.id, t.pool, t.address or t.node_id)
    state = _state(got)
    error = shown((got or {}).get("error") or "no reason given", SAID)
    if not served:
        out.error = f"the stack's outputs name no bucket for pool {t.pool}"
        out.hint = "run `gpufleet up` (or `gpufleet configure`) for the cluster first"
    elif got is None:
        out.error = f"{t.id} gave no answer after {timeout_s:.0f} s"
        out.hint = ("its watch answers every health.interval once the node is configured and its boot gate passed: "
                    "`gpufleet ssh` to it and see `journalctl -u gpufleet-watch`; --wait-timeout waits longer")
    elif state == "running":
        out.error = f"{t.id} was still running the benchmark after {timeout_s:.0f} s"
        out.hint = "--wait-timeout waits longer (a node runs it for 30 minutes at most)"
    elif state == "skipped":
        out.error = f"{t.id} was not benchmarked: {error}"
        out.hint = "a node is benchmarked idle only (no job, no fault): run it again once its work is done"
    elif state == "failed" and got.get("rc") == NO_TORCH:
        out.error = f"no PyTorch in {python} on {t.id}: bench trains with the PyTorch the node has"
        out.hint = (f"name the Python that has it with --python: the frameworks formula's is {FRAMEWORKS_PYTHON} "
                    "where the stack's software.frameworks names pytorch")
    elif state == "failed":
        out.error = f"the benchmark gave no results on {t.id}: {error}"
        out.hint = f"is {python} a Python 3 there? --python names the one that has PyTorch"
    elif state != "answered":
        out.error = f"{t.id}'s word on the benchmark is not of its format (state {state!r}): refused"
    else:
        try:
            out.answer = checked_answer(got.get("answer"), plan, f"the bench answer in {t.id}'s status")
        except UntrustedValue as e:  # nothing of it is judged, shown or recorded
            out.error = e.message
            out.hint = (f"the node's Python did not answer as the node script does: see what {python} is on {t.id} "
                        "(--python names another)")
    return out


def checked_answer(answer, plan: dict, source: str) -> dict:
    """The node script's answer (``train_steps.py``: versions, device, results, when), refused (UntrustedValue) unless
    each field is of its format: the benchmarks the plan named, numbers that are finite and not negative, names and
    versions of the characters they are made of, one row for each benchmark asked for. Only the fields bench reads are
    kept."""
    if not isinstance(answer, dict):
        raise UntrustedValue("answer", answer, "an object", source)
    names = [b["name"] for b in plan["benchmarks"]]
    results = answer.get("results")
    if not isinstance(results, list) or len(results) != len(names):  # one row per benchmark, a failed one's too
        raise UntrustedValue("results", results, f"a list of {len(names)} rows, one per benchmark asked for", source)
    rows = [_row(r, names, source) for r in results]
    if [r["name"] for r in rows] != names:
        raise UntrustedValue("benchmarks", [r["name"] for r in rows], f"the plan's, in its order ({', '.join(names)})",
                             source)
    device = answer.get("device")
    if not isinstance(device, dict):
        raise UntrustedValue("device", device, "an object", source)
    dev = {"kind": _one_of(device.get("kind"), ("cuda", "cpu"), "device kind", source),
           "name": _text(device.get("name"), "device name", source),
           "memory_gb": _number(device.get("memory_gb"), "device memory_gb", source),
           "backend": _one_of(device.get("backend"), (None, "nccl", "gloo"), "device backend", source),
           **{k: _count(device.get(k), f"device {k}", source) for k in ("gpus", "gpus_used", "world_size", "nodes")}}
    versions = answer.get("versions")
    if not isinstance(versions, dict):
        raise UntrustedValue("versions", versions, "an object", source)
    kept = {}
    for k in ("python", "torch", "cuda", "cudnn", "nccl", "driver"):
        v = versions.get(k)
        if v is not None and (isinstance(v, bool) or not VERSION.fullmatch(str(v))):
            raise UntrustedValue(f"version of {k}", v, "a version (letters, digits, . + _ -)", source)
        kept[k] = v
    when = answer.get("when")
    if not isinstance(when, str) or not WHEN.fullmatch(when):
        raise UntrustedValue("when", when, "a UTC time (YYYY-MM-DDTHH:MM:SSZ)", source)
    return {"versions": kept, "device": dev, "results": rows, "when": when}


def _row(r, names: list[str], source: str) -> dict:
    if not isinstance(r, dict) or r.get("name") not in names:
        raise UntrustedValue("benchmark", r.get("name") if isinstance(r, dict) else r,
                             f"one of the plan's ({', '.join(names)})", source)
    row = {"name": r["name"], **{k: _number(r.get(k), k, source) for k in NUMBERS},
           **{k: _count(r.get(k), k, source) for k in COUNTS},
           "compiled": _one_of(r.get("compiled", False), (True, False), "compiled", source),
           "sharding": _one_of(r.get("sharding"), (None, "fsdp2", "ddp"), "sharding", source)}
    for k in ("error", "compile_error"):
        if r.get(k) is not None:
            row[k] = shown(r[k], SAID)
    ranks = r.get("ranks")
    if ranks is not None:
        if not isinstance(ranks, list) or not all(isinstance(x, dict) for x in ranks):
            raise UntrustedValue("ranks", ranks, "a list of objects", source)
        row["ranks"] = [{"rank": _count(x.get("rank"), "rank", source), "node": _count(x.get("node"), "rank's node", source),
                         "host": _host(x.get("host"), source),
                         **{k: _number(x.get(k), f"rank's {k}", source) for k in ("step_s", "samples_per_s",
                                                                                   "peak_mem_gb")}}
                        for x in ranks]
    return {k: v for k, v in row.items() if v is not None}


def _number(v, what: str, source: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise UntrustedValue(what, v, "a finite number of at least 0", source)
    return float(v)


def _count(v, what: str, source: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise UntrustedValue(what, v, "a whole number of at least 0", source)
    return v


def _one_of(v, allowed: tuple, what: str, source: str):
    if not any(v is a or (type(v) is type(a) and v == a) for a in allowed):  # 0 is not False, nor 1 True
        raise UntrustedValue(what, v, "one of " + ", ".join(map(str, allowed)), source)
    return v


def _text(v, what: str, source: str) -> str | None:
    if v is None:
        return None
    if not isinstance(v, str) or len(v) > 120 or shown(v, 120) != v:
        raise UntrustedValue(what, v, "printable text of at most 120 characters", source)
    return v


def _host(v, source: str) -> str | None:
    if v is not None and (not isinstance(v, str) or not HOST.fullmatch(v)):
        raise UntrustedValue("rank's host", v, "a host name", source)
    return v

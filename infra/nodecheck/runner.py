"""``python3 verify.pyz [--level quick|full] [--tools DIR] [--budget S] < expectations.json``: run the checks,
print one JSON report on stdout, exit 0 (passed), 1 (a check failed, or one the node needs could
not run) or 2 (unreadable expectations).

The report: {node, level, ok, verdict, checks: [...], failures: [{check, code, measured,
expected, remedy}], seconds, tool_seconds}. ``verdict``: ``pass``; ``fail``; ``incomplete`` when
nothing failed but a check this node needs (``expect.required``) was not checked.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time

from . import checks
from .tools import Tools

LEVELS = ("quick", "full")


def run(expect: dict, level: str = "quick", tools: Tools | None = None, root: str = "/") -> dict:
    started = time.monotonic()
    node = checks.Node(expect, tools or Tools(), root)
    results: list[dict] = []
    for step in (checks.gpu_inventory, checks.gpu_software, checks.gpu_memory, checks.xid, checks.links,
                 checks.dcgm_health, checks.dcgm, checks.nccl, checks.clocks, checks.copy_bandwidth):
        results += step(node)
    results += checks.storage(node, read_test=level == "full")
    # first: the checks that stood on a hung tool follow it, and Slurm's health check cuts its drain reason
    # (at 200 characters, its own limit: slurmctld keeps a reason whole)
    results = checks.timeouts(node) + results
    out = report(expect, level, results, time.monotonic() - started, node.tools.seconds)
    if node.ib_counters:  # its caller keeps them: the next run judges their growth (checks._ib_counters)
        out["ib_counters"] = node.ib_counters
    return out


def report(expect: dict, level: str, results: list[dict], seconds: float, tool_seconds: float) -> dict:
    failures = [{k: r[k] for k in ("check", "code", "measured", "expected", "remedy", "detail")}
                for r in results if r["status"] == "fail"]
    required = set(expect.get("required") or ())
    unchecked = [r["check"] for r in results if r["status"] == "skip" and r["check"].split(":")[0] in required]
    verdict = "fail" if failures else "incomplete" if unchecked else "pass"
    return {"node": expect.get("node") or socket.gethostname(), "level": level, "ok": verdict == "pass",
            "verdict": verdict, "unchecked": unchecked, "failures": failures, "checks": results,
            "seconds": round(seconds, 2), "tool_seconds": round(tool_seconds, 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpufleet-verify")
    ap.add_argument("--level", choices=LEVELS, default="quick")
    ap.add_argument("--tools", action="append", default=[], help="a folder searched for the tools first")
    ap.add_argument("--expect", help="the expectations JSON file (default: standard input)")
    ap.add_argument("--budget", type=float, help="seconds the tools the checks read from may take together "
                                                 "(slurmd's health check); a tool left without time fails the run")
    args = ap.parse_args(argv)
    try:
        text = open(args.expect).read() if args.expect else sys.stdin.read()
        expect = json.loads(text)
        if not isinstance(expect, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as e:
        print(json.dumps({"ok": False, "verdict": "error", "error": f"unreadable expectations: {e}"}))
        return 2
    if args.level == "full" and expect.get("dcgm_level") == 1:
        expect["dcgm_level"] = expect.get("dcgm_level_full", 2)
    out = run(expect, args.level, Tools(tuple(args.tools), args.budget))
    print(json.dumps(out))
    return 0 if out["ok"] else 1

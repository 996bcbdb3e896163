"""One node's verdict, from the report its checks printed or from why there is none."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

VERDICTS = ("pass", "fail", "incomplete", "unreachable", "error", "timeout")


@dataclass
class NodeVerdict:
    node: str  # pool-idx, as `status` names nodes
    pool: str
    address: str | None
    verdict: str = "error"
    checks: list[dict] = field(default_factory=list)
    failures: list[dict] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    seconds: float | None = None
    tool_seconds: float | None = None
    error: str | None = None
    hint: str | None = None

    @property
    def ok(self) -> bool:
        return self.verdict == "pass"

    @property
    def codes(self) -> list[str]:
        return sorted({f["code"] for f in self.failures if f.get("code")})

    def to_dict(self) -> dict:
        return {"node": self.node, "pool": self.pool, "address": self.address, "ok": self.ok, "verdict": self.verdict,
                "failures": self.failures, "unchecked": self.unchecked, "measurements": self.checks,
                "seconds": self.seconds, "tool_seconds": self.tool_seconds, "error": self.error, "hint": self.hint}

    def summary(self) -> str:
        """One line for the registry and the `up` summary."""
        if self.verdict == "fail":
            return "failed: " + ", ".join(self.codes)
        if self.verdict == "incomplete":
            return "not proven: not checked " + ", ".join(self.unchecked)
        return self.verdict if not self.error else f"{self.verdict}: {self.error}"


def from_output(node: str, pool: str, address: str | None, stdout: str, rc: int, stderr: str = "") -> NodeVerdict:
    """The node's JSON report (its last line of output); anything else is an error, said as such."""
    v = NodeVerdict(node, pool, address)
    lines = [ln for ln in stdout.strip().splitlines() if ln.startswith("{")]
    try:
        doc = json.loads(lines[-1]) if lines else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or "verdict" not in doc:
        v.error = (stderr.strip() or stdout.strip() or f"exit status {rc}").splitlines()[-1][:300]
        v.hint = "the checks could not run: is python3 (3.8 or newer) installed on the node?"
        return v
    apply_report(v, doc)
    return v


def apply_report(v: NodeVerdict, doc: dict) -> None:
    v.verdict = doc.get("verdict") if doc.get("verdict") in VERDICTS else "error"
    v.checks = list(doc.get("checks") or [])
    v.failures = list(doc.get("failures") or [])
    v.unchecked = list(doc.get("unchecked") or [])
    v.seconds, v.tool_seconds = doc.get("seconds"), doc.get("tool_seconds")
    v.error = doc.get("error")


def record(registry, cluster: str, verdicts: list[NodeVerdict]) -> None:
    """A node that failed is marked ``unhealthy`` in the registry (its configuration digest kept, so
    a later `configure` still knows what it has); one that passes again goes back to ``configured``."""
    known = registry.hosts(cluster)
    changed = {}  # all in one write
    for v in verdicts:
        pool, _, idx = v.node.rpartition("-")
        row = known.get((pool, int(idx))) if idx.isdigit() else None
        if v.verdict in ("fail", "incomplete"):
            changed[(pool, int(idx))] = {"address": v.address or (row or {}).get("address") or v.node,
                                         "state": "unhealthy", "digest": (row or {}).get("digest"),
                                         "facts": (row or {}).get("facts"), "detail": v.summary()}
        elif v.ok and row and row["state"] == "unhealthy":
            changed[(pool, int(idx))] = {"address": row["address"], "state": "configured", "digest": row["digest"],
                                         "facts": row["facts"], "detail": "verified"}
    registry.set_hosts(cluster, changed)

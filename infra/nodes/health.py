"""A node's health as `heal` reads it, whichever kind of node it is, and the node agent's report of it.

A cloud node's agent writes its verdict into its status object under ``health`` (issue 51's contract
between the node side and this side): state, faults, when it last looked, at which interval, its
gate, a cloud's notice and whether it drained its Slurm node itself. ``reported`` reads that part
as a node wrote it: whatever is missing, malformed or stale (``checked_at`` older than three of its
intervals) is ``unknown``, never unhealthy, and every string is checked against its format before
it is kept (fault codes, times, one-line evidence: shown only, never passed to a shell).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field

from gpufleet.providers import CLOUDS
from gpufleet.spec import HEALTH_WATCH_MIN_S

# what a node may say; ``unknown`` is the reader's. "maintenance": drained for a notice whose VM comes back by itself
# (a scheduled reboot: node_watch.COMES_BACK), resumed by its watch once the notice is gone; not broken, never replaced
STATES = ("ok", "gating", "faulty", "interrupted", "maintenance")
UNKNOWN = "unknown"
GONE = "gone"  # the reader's too: the cloud itself says the node's VM is terminated or deleted (a reclaimed spot VM)
BROKEN = ("faulty", "interrupted", GONE)  # a node that must leave service
STALE_INTERVALS = 3  # a report older than this many of its intervals says nothing any more
CODE = re.compile(r"^GF-[A-Z0-9-]{1,40}$")  # nodecheck's fault codes (GF-XID-FATAL ...)
CHECK_MAX = 80  # a check's name (nodecheck's: health.xid, gpu.ecc ...): one line, shown only
WHEN = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$")  # ISO 8601, UTC, Z
# the notices a node's watch reads (clouds/node_watch.py, where each is sourced): the spot reclaims (AWS IMDS, GCP
# metadata, Azure Scheduled Events), the maintenance that takes a GPU VM away (AWS scheduled events, GCP's host
# maintenance, Azure's), and AWS's rebalance recommendation, a risk alone (the node says "ok" with it)
SPOT_NOTICES = ("instance-action", "preempted", "Preempt")
RISK_NOTICES = ("rebalance",)
REBOOT_NOTICES = ("instance-reboot", "system-reboot", "system-maintenance", "Reboot", "Redeploy")  # the VM comes back
NOTICES = (*SPOT_NOTICES, *RISK_NOTICES, *REBOOT_NOTICES, "instance-retirement", "instance-stop",
           "TERMINATE_ON_HOST_MAINTENANCE", "Terminate")
EVIDENCE_MAX = 200


@dataclass(slots=True)  # one per node in a pass: no dict each
class NodeHealth:
    """One node, as its kind read it for `heal`."""

    node: str  # pool-idx, as `status` names it
    pool: str
    kind: str  # the NAME of the kind that read it
    state: str  # ok | gating | faulty | interrupted | maintenance | gone | unknown
    address: str | None = None
    node_id: str | None = None
    why: str | None = None  # unknown: why it could not be read
    faults: list[dict] = field(default_factory=list)  # {"code", "check", "evidence"}, each checked
    checked_at: str | None = None
    notice: dict | None = None  # {"kind", "at"}: the cloud said it takes the VM
    drained: bool | None = None  # out of service (Slurm: drained or draining); None: not known
    jobs: str | None = None  # "none" | "running"; None: not known (never replaced then)
    drain_reason: str | None = None  # Slurm's reason for its drain (the controller's view), when it has one
    reserved: bool = False  # on a reservation or Capacity Block (kept unless the pool's replace_reserved)
    replaceable: bool = True  # its kind can make a new node in its place (racks: never)
    # its fault may end in its termination: Slurm's view (the controller's) says it is drained, or only the
    # node itself can write its status; False: any node of its pool could have written it (isolated instead)
    vouched: bool = True
    launched: str | None = None  # heal's memory: a replacement launched this node's successor and did not finish
    on_launch: object = field(default=None, repr=False)  # heal's: called with a new node's id the moment it exists

    @property
    def code(self) -> str | None:
        if self.faults:
            return self.faults[0]["code"]
        if not self.notice or self.notice["kind"] in RISK_NOTICES:
            return None
        return "GF-SPOT-NOTICE" if self.notice["kind"] in SPOT_NOTICES else "GF-MAINTENANCE-NOTICE"

    @property
    def evidence(self) -> str | None:
        if self.faults:
            return self.faults[0].get("evidence") or self.faults[0].get("check")
        if self.notice:
            return f"{self.notice['kind']} notice" + (f" for {self.notice['at']}" if self.notice.get("at") else "")
        return self.why

    def to_dict(self) -> dict:
        return {"node": self.node, "pool": self.pool, "kind": self.kind, "state": self.state, "address": self.address,
                "node_id": self.node_id, "why": self.why, "faults": self.faults, "checked_at": self.checked_at,
                "notice": self.notice, "drained": self.drained, "jobs": self.jobs, "reserved": self.reserved}


class Unreadable(ValueError):
    """Why a status's ``health`` says nothing (it is then ``unknown``)."""


def parse_time(value) -> dt.datetime:
    if not isinstance(value, str) or not WHEN.match(value):
        raise Unreadable(f"{str(value)[:40]!r} is no UTC time (ISO 8601, Z)")
    return dt.datetime.fromisoformat(value[:-1]).replace(tzinfo=dt.timezone.utc)


def one_line(value, limit: int = EVIDENCE_MAX, what: str = "evidence") -> str:
    if not isinstance(value, str) or len(value) > limit or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise Unreadable(f"{what} is not one line of at most {limit} characters")
    return value


def _fault(f) -> dict:
    if not isinstance(f, dict) or not isinstance(f.get("code"), str) or not CODE.match(f["code"]):
        raise Unreadable(f"a fault's code {str((f or {}).get('code') if isinstance(f, dict) else f)[:50]!r} "
                         "is not GF-...")
    return {"code": f["code"], "check": one_line(f.get("check"), CHECK_MAX, f"fault {f['code']}'s check"),
            "evidence": one_line(f.get("evidence", ""))}


def _notice(n) -> dict | None:
    if n is None:
        return None
    if not isinstance(n, dict) or n.get("cloud") not in CLOUDS or n.get("kind") not in NOTICES:
        raise Unreadable("its notice is not one of a cloud's notices")
    if n.get("at") is not None:
        parse_time(n["at"])
    return {"cloud": n["cloud"], "kind": n["kind"], "at": n.get("at")}


def reported(status: dict, now: dt.datetime, interval: int | None = None) -> dict:
    """The ``health`` part of a node's status, checked: {"state", "faults", "checked_at", "notice",
    "drained"}. Unreadable (with why) when it is missing, malformed or stale: the node is then unknown.
    ``interval``: the pool's health.interval (its spec), which judges staleness rather than the interval
    the status claims (whoever forges a status could claim a day)."""
    h = status.get("health")
    if not isinstance(h, dict):
        raise Unreadable("its status has no health report (the watch has not run, or an older agent)")
    if h.get("state") not in STATES:
        raise Unreadable(f"health state {str(h.get('state'))[:30]!r} is none of {', '.join(STATES)}")
    interval_said = h.get("interval")
    if isinstance(interval_said, bool) or not isinstance(interval_said, int) \
            or not HEALTH_WATCH_MIN_S <= interval_said <= 86_400:
        raise Unreadable("its health interval is not a number of seconds")
    interval = interval or interval_said
    checked = parse_time(h.get("checked_at"))
    age = (now - checked).total_seconds()
    if abs(age) > STALE_INTERVALS * interval:  # far in the future is no clock we can trust either
        raise Unreadable(f"its health report is stale: checked at {h['checked_at']}, "
                         f"{STALE_INTERVALS} x {interval} s allowed")
    faults = h.get("faults") or []
    if not isinstance(faults, list) or len(faults) > 64:
        raise Unreadable("its faults are not a list")
    if not isinstance(h.get("drained", False), bool):
        raise Unreadable("its drained flag is not true or false")
    notice = _notice(h.get("notice"))
    state = h["state"]
    if state == "interrupted" and notice and notice["kind"] in REBOOT_NOTICES:
        state = "maintenance"  # a watch from before "maintenance" said so: its VM comes back all the same
    # the state as STATES' own string: a status document's copy is not kept for each node
    return {"state": STATES[STATES.index(state)], "faults": [_fault(f) for f in faults],
            "checked_at": h["checked_at"], "notice": notice, "drained": h.get("drained", False)}


# Slurm's node states (sinfo %T, flags stripped: clouds.scheduler.parse) -> (out of service, jobs on it).
# "drained": the DRAIN flag and no job left; "draining": DRAIN while jobs still run (Slurm's sinfo(1),
# NODE STATE CODES, read 2026-11). Whatever else is not known: a node is never replaced on a guess.
SLURM_STATES = {"drained": (True, "none"), "draining": (True, "running"), "idle": (False, "none"),
                "allocated": (False, "running"), "mixed": (False, "running"), "completing": (False, "running")}


def from_slurm(state: str | None) -> tuple[bool | None, str | None]:
    """(drained, jobs) as Slurm's state of a node says them; (None, None) when it says neither."""
    return SLURM_STATES.get((state or "").lower(), (None, None))


@dataclass
class Repaired:
    """What a kind did for one node that `heal` asked it to drain, isolate or replace."""

    node: str
    action: str  # drain | isolate | replace; an elastic pool's idle node given back (release) or taken back (keep)
    done: bool  # it happened (or already was so); False: not done, ``detail`` says why
    detail: str
    refused: bool = False  # the cloud had no capacity (or quota) for a new node: asked again later
    new: object = None  # replace: the state.registry.Node in its place
    launched: str | None = None  # replace: the id of the node this call launched (done or not), counted once
    fleet: str | None = None  # replace: the request that made it (AWS: its own instant fleet; Azure: the scale set)
    market: str | None = None  # replace: spot or on-demand, what was last asked (a spot pool's spot_fallback)
    forgotten: bool = False  # replace: the node an earlier pass launched is gone; heal's memory drops it

    def to_dict(self) -> dict:
        return {"node": self.node, "action": self.action, "done": self.done, "detail": self.detail,
                "refused": self.refused, "new_node_id": getattr(self.new, "node_id", None), "launched": self.launched,
                "market": self.market}

"""Pulumi's own locks in the team's store, and whether one belongs to a gpufleet lease.

Pulumi's self-managed backend locks a stack for an update with one object per process,
``.pulumi/locks/<org>/<project>/<stack>/<uuid>.json``, holding ``{"pid", "username", "hostname",
"timestamp"}``: the Pulumi CLI's own pid, user and host, and when it locked (Go's ``time.Time`` in JSON,
RFC 3339 with nanoseconds and the host's offset), pulumi/pulumi pkg/backend/diy/lock.go (``lockContent``,
``newLockContent``); a killed CLI leaves it behind, and ``pulumi cancel`` on such a backend deletes every
lock of the stack (``CancelCurrentUpdate``). gpufleet runs that CLI inside a lease, so a lock written on
the lease's host while the lease was held (both times by that host's clock) is the lease's: it goes when
the lease is broken. Any other (an `up` run by hand, another tool) is Pulumi's to keep: a stolen live lock
is far worse than a kept stale one. So is one whose process still runs on this host, whatever the lease: a
holder that lost its lease may still be waiting for its Pulumi run to finish cancelling (Pulumi's own diy
backend checks the same before it calls a lock stale: kill(pid, 0) on the lock's host).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass

from gpufleet.state import leases
from gpufleet.state.shared import SharedStore, shown

PREFIX = "pulumi/.pulumi/locks/"
SLACK_S = 2.0  # the lease's times are whole seconds


@dataclass(frozen=True)
class Lock:
    key: str
    pid: int | None
    username: str
    hostname: str
    timestamp: dt.datetime | None  # None when it does not read as a time

    def words(self) -> str:
        when = self.timestamp.isoformat(timespec="seconds") if self.timestamp else "an unreadable time"
        return (f"{shown(self.key, 200)}: {shown(self.username)}@{shown(self.hostname)} (pid {self.pid}) at {when}"
                + (", its process still running on this host" if self.running() else ""))

    def running(self) -> bool:
        """Its Pulumi process runs now, seen from its own host (``leases.running_here``)."""
        return leases.running_here(self.hostname, self.pid)

    def during(self, host: str, started: str, heartbeat: str) -> bool:
        """Written on ``host`` between a lease's start and its last heartbeat (ISO 8601 times of that host)."""
        if self.timestamp is None or self.hostname != host:
            return False
        slack = dt.timedelta(seconds=SLACK_S)
        return dt.datetime.fromisoformat(started) - slack <= self.timestamp <= dt.datetime.fromisoformat(heartbeat) + slack


def parse(key: str, body: bytes) -> Lock:
    """A lock as Pulumi writes it; what does not read so is kept as unknown (never matched to a lease)."""
    try:
        doc = json.loads(body)
    except ValueError:
        doc = {}
    doc = doc if isinstance(doc, dict) else {}
    try:
        when = dt.datetime.fromisoformat(str(doc.get("timestamp")))
        when = when if when.tzinfo else None  # Go always writes an offset; without one it is not comparable
    except ValueError:
        when = None
    pid = doc.get("pid")
    return Lock(key, pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
                str(doc.get("username", "")), str(doc.get("hostname", "")), when)


def of_stack(store: SharedStore, stack: str) -> list[Lock]:
    """The locks of the gpufleet project's ``stack`` (any organization)."""
    out = []
    for k in store.keys(PREFIX):
        parts = k[len(PREFIX):].split("/")
        if len(parts) == 4 and parts[1] == "gpufleet" and parts[2] == stack:
            got = store.read(k)
            if got is not None:
                out.append(parse(k, got[0]))
    return out

"""The team's event log: one object per command that changed a cluster, never rewritten.

An event is written once, by ``create`` under a key no other event can have
(``events/<UTC time>-<random>.json``): a retry after a timeout finds its own key taken and does not
write it twice. Reading lists the keys (time-ordered by name) and reads each.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid

from gpufleet.state.shared import BadObject, SharedStore, json_object

PREFIX = "events/"


def record(store: SharedStore, event: dict, *, now: dt.datetime | None = None) -> str:
    """Append ``event`` (who, command, cluster, outcome, ...) with its time; its key."""
    now = now or dt.datetime.now(dt.timezone.utc)
    doc = {"at": now.isoformat(timespec="seconds"), **event}
    k = f"{PREFIX}{now.strftime('%Y%m%dT%H%M%S.%fZ')}-{uuid.uuid4().hex[:12]}.json"
    store.create(k, json.dumps(doc, sort_keys=True).encode())
    return k


def read(store: SharedStore, cluster: str | None = None, since: dt.datetime | None = None,
         skipped: dict[str, str] | None = None) -> list[dict]:
    """The events, oldest first; only ``cluster``'s, only since ``since``. An object under ``events/``
    that is not an event (junk, too large, another shape) is left out, its key and why put in ``skipped``:
    one bad object does not hide everyone's log."""
    out = []
    stamp = since.strftime("%Y%m%dT%H%M%S") if since else ""
    for k in store.keys(PREFIX):
        if stamp and k[len(PREFIX):len(PREFIX) + 15] < stamp:
            continue
        try:
            got = store.read(k)
            doc = got and json_object(store.url, k, got[0])
            if doc and not isinstance(doc.get("at"), str):
                raise BadObject(store.url, k, "is not a gpufleet event (no time)")
        except BadObject as e:
            if skipped is not None:
                skipped[k] = e.problem
            continue
        if doc and (cluster is None or doc.get("cluster") == cluster):
            out.append(doc)
    return out

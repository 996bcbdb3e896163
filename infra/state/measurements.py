"""The team's measured rows (``gpufleet bench --record`` in team mode): one object per recording in the team's
store, never rewritten, so that every user's `compare` and `calibrate --mine` use the rows the team measured.

As the event log (``state.events``) does: each recording is written once by ``create`` under a key no other can
have (``measured/<UTC time>-<random>.json``, ``{"schema": 1, "rows": [...]}`` as ``perf.measured`` writes its
file). Whatever is read back is anyone's: each object is checked against that format, row by row
(``Measured.from_dict``), and an object that is not (junk, too large, a row that is not a measurement) is left
out whole and named, so that one bad object neither hides the others nor slips a row into a prediction.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import asdict

from gpufleet.perf.measured import SCHEMA, Measured
from gpufleet.state.shared import BadObject, SharedStore, json_object

PREFIX = "measured/"


def share(store: SharedStore, rows: list[Measured], *, now: dt.datetime | None = None) -> str:
    """``rows`` written as one new object; its key."""
    now = now or dt.datetime.now(dt.timezone.utc)
    key = f"{PREFIX}{now.strftime('%Y%m%dT%H%M%S.%fZ')}-{uuid.uuid4().hex[:12]}.json"
    store.create(key, json.dumps({"schema": SCHEMA, "rows": [asdict(r) for r in rows]}, sort_keys=True).encode())
    return key


def read(store: SharedStore, skipped: dict[str, str] | None = None) -> list[Measured]:
    """Every recording's rows, oldest first; an object that is not one is left out, its key and why in
    ``skipped``."""
    out = []
    for key in store.keys(PREFIX):
        try:
            got = store.read(key)
            if got is None:  # deleted since it was listed
                continue
            doc = json_object(store.url, key, got[0])
            if doc.get("schema") != SCHEMA or not isinstance(doc.get("rows"), list):
                raise BadObject(store.url, key, f"is not gpufleet's measured rows of schema {SCHEMA}")
            try:
                rows = [Measured.from_dict(r) for r in doc["rows"]]
            except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as e:
                raise BadObject(store.url, key, f"holds a row that is not a measurement ({str(e)[:120]})") from None
        except BadObject as e:
            if skipped is not None:
                skipped[key] = e.problem
            continue
        out.extend(rows)
    return out

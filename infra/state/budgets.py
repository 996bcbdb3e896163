"""The team's budgets in its store (``budgets.json``: a list in the shape of the user config's
``budgets:``), changed only by read-modify-write under the store's precondition, as the registry is."""

from __future__ import annotations

import json

from gpufleet.state.shared import BadObject, SharedStore, StoreError, json_object

KEY = "budgets.json"
TRIES = 50


def _budgets(store: SharedStore, got: tuple[bytes, str] | None) -> list[dict]:
    """The list in ``budgets.json`` as read, each entry an object with a name (what ``change`` keeps);
    anything else is BadObject: refused, never overwritten, since the team's budgets may be in it."""
    if got is None:
        return []
    doc = json_object(store.url, KEY, got[0])
    if not isinstance(doc.get("budgets"), list) or not all(
            isinstance(b, dict) and isinstance(b.get("name"), str) for b in doc["budgets"]):
        raise BadObject(store.url, KEY, "is not a gpufleet budgets list ({\"budgets\": [{\"name\": ...}, ...]})")
    return doc["budgets"]


def read(store: SharedStore) -> list[dict]:
    return _budgets(store, store.read(KEY))


def change(store: SharedStore, name: str, budget: dict | None) -> None:
    """Put ``budget`` under ``name`` (None: remove it), whatever others write at the same moment."""
    for _ in range(TRIES):
        got = store.read(KEY)
        rest = [b for b in _budgets(store, got) if b["name"] != name]
        body = json.dumps({"budgets": sorted(rest + ([budget] if budget else []), key=lambda b: b["name"])},
                          sort_keys=True, indent=1).encode()
        if store.create(KEY, body) if got is None else store.replace(KEY, body, got[1]):
            return
    raise StoreError(f"the budgets in {store.url} kept changing under {TRIES} attempts", "try again")

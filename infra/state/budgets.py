"""The team's budgets in its store (``budgets.json``: a list in the shape of the user config's
``budgets:``), changed only by read-modify-write under the store's precondition, as the registry is."""

from __future__ import annotations

import json

from gpufleet.state.shared import SharedStore, StoreError

KEY = "budgets.json"
TRIES = 50


def read(store: SharedStore) -> list[dict]:
    got = store.read(KEY)
    return json.loads(got[0])["budgets"] if got else []


def change(store: SharedStore, name: str, budget: dict | None) -> None:
    """Put ``budget`` under ``name`` (None: remove it), whatever others write at the same moment."""
    for _ in range(TRIES):
        got = store.read(KEY)
        rest = [b for b in (json.loads(got[0])["budgets"] if got else []) if b["name"] != name]
        body = json.dumps({"budgets": sorted(rest + ([budget] if budget else []), key=lambda b: b["name"])},
                          sort_keys=True, indent=1).encode()
        if store.create(KEY, body) if got is None else store.replace(KEY, body, got[1]):
            return
    raise StoreError(f"the budgets in {store.url} kept changing under {TRIES} attempts", "try again")

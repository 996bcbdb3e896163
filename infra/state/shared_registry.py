"""The registry's clusters in the team's store: one object per cluster (``clusters/<name>.json``: its
record, nodes and hosts' configuration status), changed only by read-modify-write under the store's
precondition, so that concurrent writers (twenty `configure` workers recording their hosts) never
lose an update; the local SQLite registry is a cache of it (``state.registry.Registry(shared=...)``)."""

from __future__ import annotations

import json
from collections.abc import Callable

from gpufleet.state.shared import SharedStore, StoreError

PREFIX = "clusters/"
TRIES = 200  # read-modify-write rounds before giving up (each lost round means another writer landed)


def key(name: str) -> str:
    return f"{PREFIX}{name}.json"


def update(store: SharedStore, name: str, change: Callable[[dict | None], dict | None]) -> dict | None:
    """Apply ``change`` (the current document, or None -> the new one, or None to delete) until it lands."""
    for _ in range(TRIES):
        got = store.read(key(name))
        new = change(json.loads(got[0]) if got else None)
        if new is None:
            if got is None or store.delete(key(name), got[1]):
                return None
            continue
        body = json.dumps(new, sort_keys=True).encode()
        if store.create(key(name), body) if got is None else store.replace(key(name), body, got[1]):
            return new
    raise StoreError(f"cluster {name} in {store.url} kept changing under {TRIES} attempts to update it",
                     "try again; if it persists, something writes it in a loop")


def add(store: SharedStore, doc: dict) -> bool:
    """Write a cluster's document only where the store has none of that name; False when it has one."""
    return store.create(key(doc["name"]), json.dumps(doc, sort_keys=True).encode())


def clusters(store: SharedStore) -> list[dict]:
    out = []
    for k in store.keys(PREFIX):
        got = store.read(k)
        if got is not None:
            out.append(json.loads(got[0]))
    return out

"""The registry's clusters in the team's store: one object per cluster (``clusters/<name>.json``: its
record, nodes and hosts' configuration status), changed only by read-modify-write under the store's
precondition, so that concurrent writers (twenty `configure` workers recording their hosts) never
lose an update; the local SQLite registry is a cache of it (``state.registry.Registry(shared=...)``)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from gpufleet.state.shared import BadObject, SharedStore, StoreError, json_object

PREFIX = "clusters/"
TRIES = 200  # read-modify-write rounds before giving up (each lost round means another writer landed)
REQUIRED = ("name", "stack", "stack_file", "owner", "expires_at", "state")  # a record's text fields
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")  # a cluster's name: a file's, a Pulumi stack's, a tag value


def key(name: str) -> str:
    return f"{PREFIX}{name}.json"


def name_of(k: str) -> str:
    """The cluster a key under ``clusters/`` is for."""
    return k[len(PREFIX):].removesuffix(".json")


def _doc(store: SharedStore, k: str, body: bytes) -> dict:
    """A cluster's document as read, held to what gpufleet writes: a JSON object named as its key names
    it (the key is what the store's permissions guard, not the body's claim), with its record's fields."""
    name = name_of(k)
    if not k.endswith(".json") or not _NAME.match(name):
        raise BadObject(store.url, k, "is not a cluster's record (its key names no cluster)")
    doc = json_object(store.url, k, body)
    if doc.get("name") != name:
        raise BadObject(store.url, k, f"names cluster {doc.get('name')!r}, not {name!r} as its key does")
    missing = [f for f in REQUIRED if not isinstance(doc.get(f), str)]
    if missing or not isinstance(doc.get("nodes", []), list) or not isinstance(doc.get("hosts", {}), dict):
        raise BadObject(store.url, k, f"is not a gpufleet cluster record ({', '.join(missing) or 'nodes or hosts'})")
    return doc


def update(store: SharedStore, name: str, change: Callable[[dict | None], dict | None]) -> dict | None:
    """Apply ``change`` (the current document, or None -> the new one, or None to delete) until it lands.
    A current document that is not a cluster's record is BadObject: never written over unseen."""
    for _ in range(TRIES):
        got = store.read(key(name))
        new = change(_doc(store, key(name), got[0]) if got else None)
        if new is None:
            if got is None or store.delete(key(name), got[1]):
                return None
            continue
        body = json.dumps(new, sort_keys=True).encode()
        if store.create(key(name), body) if got is None else store.replace(key(name), body, got[1]):
            return new
    raise StoreError(f"cluster {name} in {store.url} kept changing under {TRIES} attempts to update it",
                     "try again; if it persists, something writes it in a loop")


def remove(store: SharedStore, name: str) -> None:
    """Delete a cluster's object (it was taken down), whatever it holds, at the version read."""
    for _ in range(TRIES):
        got = store.read(key(name))
        if got is None or store.delete(key(name), got[1]):
            return
    raise StoreError(f"cluster {name} in {store.url} kept changing under {TRIES} attempts to remove it",
                     "try again; if it persists, something writes it in a loop")


def add(store: SharedStore, doc: dict) -> bool:
    """Write a cluster's document only where the store has none of that name; False when it has one."""
    return store.create(key(doc["name"]), json.dumps(doc, sort_keys=True).encode())


def clusters(store: SharedStore) -> tuple[list[dict], dict[str, str]]:
    """Every cluster's document, and the keys under ``clusters/`` that are no cluster's record (junk, too
    large, another shape) with why: left out, so that one bad object does not stop the team."""
    out, bad = [], {}
    for k in store.keys(PREFIX):
        try:
            got = store.read(k)
            if got is not None:
                out.append(_doc(store, k, got[0]))
        except BadObject as e:
            bad[k] = e.problem
    return out, bad


"""`gpufleet registry rebuild`: a new registry from what the clouds' tags and the Pulumi state say.

The tags are the truth: every cluster with a tagged resource becomes a registry cluster (stack,
owner and expiry from its tags, its places from where its resources are), its nodes from the
Pulumi state's outputs when a file backend holds them, else from its tagged VMs. Racks carry no
tags: their clusters are kept from the old registry when it can still be read. The old file is
kept beside the new one as a backup; the new one replaces it by a rename.

In team mode the registry is the team's store (``state.shared_registry``): the old registry is what
the store holds, and each cluster's object is written anew there too, each under its precondition;
an object of a cluster the tags no longer know is removed, unless a live lease is held on that
cluster (an `up` whose resources are not tagged yet).
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.clouds import inventory
from gpufleet.clouds.resources import Resource, price
from gpufleet.clouds.tags import CREATED_BY, TAG_PREFIX
from gpufleet.engine import automation
from gpufleet.errors import GpufleetError
from gpufleet.fleet import team
from gpufleet.paths import registry_path
from gpufleet.providers import CLOUDS
from gpufleet.state import leases, shared_registry
from gpufleet.state.registry import ClusterRecord, Node, Registry, RegistryError, nodes_from_outputs


@dataclass
class Rebuilt:
    path: Path
    backup: Path | None
    written: bool
    clusters: list[ClusterRecord] = field(default_factory=list)
    kept_racks: list[str] = field(default_factory=list)  # rack-only clusters carried over from the old file
    old_problem: str | None = None  # why the old file could not be read, when it could not
    clouds: inventory.Clouds = field(default_factory=inventory.Clouds)
    unread: dict[str, str] = field(default_factory=dict)
    store: str | None = None  # the team's store the registry was written to as well
    kept_held: list[str] = field(default_factory=list)  # untagged clusters kept in the store: their lease is held

    def to_dict(self) -> dict:
        return {"path": str(self.path), "backup": str(self.backup) if self.backup else None, "written": self.written,
                "clusters": [c.to_dict() for c in self.clusters], "kept_racks": self.kept_racks,
                "old_problem": self.old_problem, "checked": sorted(self.clouds.open), "unread": self.unread,
                "store": self.store, "kept_held": self.kept_held}


def old_registry(path: Path) -> tuple[Registry | None, str | None]:
    """The current registry when it can be read (in team mode: the local cache filled from the team's
    store), else why not."""
    store = team.current()
    if not path.exists() and store is None:
        return None, None
    try:
        return Registry(path, shared=store), None
    except RegistryError as e:
        return None, e.message


def rebuild(cat, *, path: Path | None = None, providers: list[str] | None = None, regions: list[str] | None = None,
            on_region=None, now: dt.datetime | None = None) -> Rebuilt:
    """Ask every cloud with credentials (``providers``: only these, which must open) for everything
    tagged gpufleet:cluster, read the Pulumi state, and write the registry anew. A registry that can
    still be read is not replaced when a cloud or region could not be read (the new one would lack
    its clusters): the result says what, and nothing is written."""
    path = path or registry_path()
    old, problem = old_registry(path)
    out = Rebuilt(path, None, False, old_problem=problem)
    out.clouds = inventory.open_clouds(providers, required=bool(providers), regions=regions or None)
    found, places = inventory.collect(out.clouds, on_region=on_region)
    out.unread = out.clouds.unread(places)
    if out.unread and old is not None:
        return out
    price(found, cat)
    outputs = automation.state_outputs()
    in_state = automation.state_stacks() or set()
    by_cluster: dict[str, list[Resource]] = {}
    for r in found:
        by_cluster.setdefault(r.cluster, []).append(r)
    stamp = (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    tmp = path.with_name(f".{path.name}.rebuild-{os.getpid()}")
    new = Registry(tmp)
    try:
        for name in sorted(set(by_cluster) | set(outputs)):
            res = by_cluster.get(name, [])
            tags = _first_tags(res)
            pools = (outputs.get(name) or {}).get("pools")
            known = old.get(name) if old is not None else None  # heal's replacements are in no tag nor state
            new.record(name=name, stack=tags.get(TAG_PREFIX + "stack") or name, stack_file="",
                       owner=tags.get(TAG_PREFIX + "owner", ""), expires_at=_expiry(res),
                       backend=automation.backend_url() if name in in_state else None,
                       nodes=nodes_from_outputs({"pools": pools}) if pools else nodes_of(res),
                       locations=sorted({(r.provider, r.region) for r in res if r.region != "global"}),
                       created_by={r.provider: r.tags[CREATED_BY] for r in res if r.tags.get(CREATED_BY)},
                       replacements=known.replacements if known is not None else None,
                       resizes=known.resizes if known is not None else None)
        if old is not None:  # racks have no tags: what the old registry knew of them is all there is
            for rec in old.list():
                if rec.name not in by_cluster and rec.nodes and all(n.provider not in CLOUDS for n in rec.nodes):
                    new.record(name=rec.name, stack=rec.stack, stack_file=rec.stack_file, owner=rec.owner,
                               expires_at=rec.expires_at, backend=rec.backend, nodes=rec.nodes, state=rec.state,
                               created_by=rec.created_by, access=rec.access)
                    out.kept_racks.append(rec.name)
        out.clusters = new.list()
        if old is not None and old.shared is not None:
            out.store, out.kept_held = old.shared.url, _write_store(old.shared, out.clusters)
        new.seal()
        if path.exists():
            out.backup = path.with_name(f"{path.name}.bak-{stamp}")
            os.replace(path, out.backup)
            for extra in ("-wal", "-shm"):  # SQLite's journal beside a WAL database belongs to the old file
                side = path.with_name(path.name + extra)
                if side.exists():
                    os.replace(side, out.backup.with_name(out.backup.name + extra))
        os.replace(tmp, path)
        out.written = True
    finally:
        for f in (tmp, tmp.with_name(tmp.name + "-wal"), tmp.with_name(tmp.name + "-shm")):
            if f.exists():
                f.unlink()
    return out


def _write_store(store, clusters: list[ClusterRecord]) -> list[str]:
    """The rebuilt clusters into the team's store (each host's recorded status kept), and the store's
    other clusters removed, except those under a lease (a live one, or one not yet expired): the names kept so."""
    for rec in clusters:
        doc = rec.to_dict()
        shared_registry.update(store, rec.name, lambda cur, doc=doc: {**doc, "hosts": (cur or {}).get("hosts", {})})
    kept = []
    names = {c.name for c in clusters}
    for doc in shared_registry.clusters(store)[0]:
        if doc["name"] in names:
            continue
        if leases.read(store, doc["name"]) is not None:  # held, or its holder died: only watching tells, so kept
            kept.append(doc["name"])
            continue
        shared_registry.update(store, doc["name"], lambda cur: None)
    return kept


def _first_tags(res: list[Resource]) -> dict[str, str]:
    """The cluster's tags as its resources carry them (a VM's first: its pool is a real one)."""
    for r in sorted(res, key=lambda r: r.rank):
        if r.tags:
            return r.tags
    return {}


def _expiry(res: list[Resource]) -> str:
    values = sorted(r.tags.get(TAG_PREFIX + "expires-at", "") for r in res if r.tags.get(TAG_PREFIX + "expires-at"))
    return values[0] if values else ""


def nodes_of(res: list[Resource]) -> list[Node]:
    """Registry nodes from the cluster's tagged VMs (a scale set counts its VMs)."""
    out: list[Node] = []
    idx: dict[str, int] = {}
    for r in sorted(res, key=lambda r: (r.tags.get(TAG_PREFIX + "pool", "-"), r.id)):
        if r.kind not in ("instance", "scale-set"):
            continue
        pool = r.tags.get(TAG_PREFIX + "pool", "-")
        for _ in range(r.count if r.kind == "scale-set" else 1):
            i = idx.get(pool, 0)
            idx[pool] = i + 1
            out.append(Node(pool=pool, idx=i, provider=r.provider, location=r.region, zone=r.zone,
                            machine=r.machine or "?", node_id=r.id if r.kind == "instance" else None,
                            usd_per_hour=(r.usd_per_hour / r.count) if r.usd_per_hour is not None and r.count else None,
                            launched_at=r.created_at.strftime("%Y-%m-%dT%H:%M:%SZ") if r.created_at else None))
    return out


def refuse_unread(out: Rebuilt) -> None:
    """Nothing written because something could not be read: the caller's error."""
    if not out.written:
        raise GpufleetError(f"the registry {out.path} was not replaced: could not read "
                            f"{', '.join(out.unread)}", "fix that (the warnings say why) and run it again, or move "
                            "the registry aside to rebuild from what can be read")

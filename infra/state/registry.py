"""The local registry of clusters gpufleet brought up (SQLite, in the user's data directory).

It records what `up` created, where, and at which launch prices, so `status` can show cost so
far and `down`/`reap` know what is expected. It is a record, not the truth: the clouds' tags
are (see the lifecycle commands), and `gpufleet registry rebuild` makes a new registry from
them. A cluster leaves the registry only after a successful teardown.

Several gpufleet processes use it at once (an `up`, a `status`, a cron `reap`): the database is
in WAL mode (readers never wait for the writer), every write is one ``BEGIN IMMEDIATE``
transaction that waits its turn (``BUSY_TIMEOUT``) instead of failing with "database is locked",
and the schema carries its version (``PRAGMA user_version``) with a migration per version. A file
that is not a gpufleet registry (damaged, truncated, another program's, a newer gpufleet's) is a
``RegistryError`` naming the file and the way out, never SQLite's own traceback.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
import sqlite3
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from gpufleet.errors import DiskFull, GpufleetError, InputError
from gpufleet.paths import make_dir, named_by, registry_path
from gpufleet.providers import CLOUDS
from gpufleet.state import leases, shared_registry
from gpufleet.state.shared import SharedStore

SCHEMA_VERSION = 10
BUSY_TIMEOUT = 60.0  # seconds a write waits for another process's write to finish

# Migration n brings a registry of version n-1 to version n. Version 1 is the first schema
# (registries written before versions were recorded have user_version 0 and these tables, with or
# without `locations`: migration 1 creates nothing for them, migration 2 adds the column).
SCHEMA_V1 = """
CREATE TABLE IF NOT EXISTS clusters (
    name TEXT PRIMARY KEY,
    stack TEXT NOT NULL,
    stack_file TEXT NOT NULL,
    owner TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    backend TEXT,
    state TEXT NOT NULL,              -- creating | up | failed | draining | leaking
    usd_per_hour REAL                 -- at launch prices; NULL when some pool has no price
);
CREATE TABLE IF NOT EXISTS nodes (
    cluster TEXT NOT NULL REFERENCES clusters(name) ON DELETE CASCADE,
    pool TEXT NOT NULL,
    idx INTEGER NOT NULL,
    provider TEXT NOT NULL,
    location TEXT NOT NULL,           -- region or site
    zone TEXT,
    machine TEXT NOT NULL,
    node_id TEXT,
    private_ip TEXT,
    ssh_endpoint TEXT,
    usd_per_hour REAL,                -- launch price of this node
    launched_at TEXT NOT NULL,
    PRIMARY KEY (cluster, pool, idx)
);
-- what configuration (Salt) last did on each host; written one host at a time
CREATE TABLE IF NOT EXISTS host_status (
    cluster TEXT NOT NULL REFERENCES clusters(name) ON DELETE CASCADE,
    pool TEXT NOT NULL,
    idx INTEGER NOT NULL,
    address TEXT NOT NULL,
    state TEXT NOT NULL,              -- configured | failed | unreachable | host-key | drained
    digest TEXT,                      -- pillar + formulas + state tree it was configured with
    facts TEXT,                       -- JSON, from the last fact gathering
    detail TEXT,                      -- the error, or what changed
    updated_at TEXT NOT NULL,
    PRIMARY KEY (cluster, pool, idx)
);
"""


def _add_locations(db) -> None:
    """JSON [[provider, region], ...] the stack's cloud pools use (so `down` knows where to look
    before any node exists)."""
    if "locations" not in _columns(db, "clusters"):
        db.execute("ALTER TABLE clusters ADD COLUMN locations TEXT")


def _create(db) -> None:
    # statement by statement: executescript() would commit the migration's transaction halfway
    statement = ""
    for line in SCHEMA_V1.splitlines(keepends=True):
        statement += line
        if sqlite3.complete_statement(statement):
            db.execute(statement)
            statement = ""


def _add_attempts(db) -> None:
    """Where `up` tried to place each pool (capacity failover), one row per attempt or skipped place."""
    db.execute("""CREATE TABLE IF NOT EXISTS attempts (
        cluster TEXT NOT NULL REFERENCES clusters(name) ON DELETE CASCADE,
        n INTEGER NOT NULL,               -- in the order tried, across the cluster's `up` runs
        pool TEXT NOT NULL,
        provider TEXT NOT NULL,
        region TEXT NOT NULL,
        zone TEXT,
        instance_type TEXT NOT NULL,
        spot INTEGER NOT NULL,
        started_at TEXT NOT NULL,
        seconds REAL NOT NULL,
        outcome TEXT NOT NULL,            -- created | refused | skipped | failed
        scope TEXT,                       -- what a refusal rules out: zone | region | provider | stop
        code TEXT,                        -- the cloud's error code, or why it was skipped
        message TEXT,
        PRIMARY KEY (cluster, n)
    )""")


def _add_created_by(db) -> None:
    """JSON {provider: principal}: who brought the cluster up, as each cloud knows them (racks: the OS user)."""
    db.execute("ALTER TABLE clusters ADD COLUMN created_by TEXT")


def _add_predicted(db) -> None:
    """JSON: the bill `up` predicted, per line ({"usd_per_hour": {line: $}, "usd_once": {line: $}, "ttl_hours"}),
    which `gpufleet cost` holds against what the clouds billed."""
    db.execute("ALTER TABLE clusters ADD COLUMN predicted TEXT")


def _add_store(db) -> None:
    """The URL of the team store a cluster is shared in; NULL: brought up alone, known only here. Only a
    cluster that came from a store leaves the cache when that store no longer has it."""
    db.execute("ALTER TABLE clusters ADD COLUMN store TEXT")


def _add_access(db) -> None:
    """JSON: what `ssh` and `ssh-config` need of the stack (its access route, user, login pools and
    each rack host's address, key and known_hosts file), so that they work from another folder or a
    teammate's machine, where the stack file named in ``stack_file`` is not."""
    db.execute("ALTER TABLE clusters ADD COLUMN access TEXT")


def _add_vm_uid(db) -> None:
    """The id the cloud gives a VM alone and never another (Azure's vmId; a scale set VM's ARM id and
    address come back with the next cluster of the name): what its SSH host key is filed under."""
    db.execute("ALTER TABLE nodes ADD COLUMN vm_uid TEXT")


def _add_replacements(db) -> None:
    """The nodes `heal` replaced outside Pulumi's state (``Replacement``): Pulumi's node, by its id (and
    unique id), and the node that stands in its place, with its own launch time and request."""
    db.execute("""CREATE TABLE IF NOT EXISTS replacements (
        cluster TEXT NOT NULL REFERENCES clusters(name) ON DELETE CASCADE,
        pool TEXT NOT NULL,
        old_id TEXT NOT NULL,             -- the replaced node's id, as Pulumi's state still has it
        old_uid TEXT,                     -- its unique id where its id is not one (an Azure scale set VM)
        node_id TEXT NOT NULL,            -- the node in its place
        private_ip TEXT,
        ssh_endpoint TEXT,
        zone TEXT,
        vm_uid TEXT,
        launched_at TEXT NOT NULL,        -- the new node's own
        fleet_id TEXT,                    -- the request that made it (AWS: its own instant fleet)
        replaced_at TEXT NOT NULL,
        PRIMARY KEY (cluster, old_id)
    )""")


def _add_resizes(db) -> None:
    """The nodes `gpufleet scale` (or `heal` for an elastic pool) added to a pool or removed from it outside
    Pulumi's state (``Resize``), so that the next `up`, which gets Pulumi's list back, keeps the pool's size."""
    db.execute("""CREATE TABLE IF NOT EXISTS resizes (
        cluster TEXT NOT NULL REFERENCES clusters(name) ON DELETE CASCADE,
        pool TEXT NOT NULL,
        node_id TEXT NOT NULL,            -- the node added, or removed
        idx INTEGER NOT NULL,             -- an added node's place in its pool (its name: pool-idx)
        change TEXT NOT NULL CHECK (change IN ('added', 'removed')),
        private_ip TEXT,
        ssh_endpoint TEXT,
        zone TEXT,
        vm_uid TEXT,
        launched_at TEXT,                 -- an added node's own
        fleet_id TEXT,                    -- the request that made it (AWS: its own instant fleet)
        at TEXT NOT NULL,
        PRIMARY KEY (cluster, pool, node_id)
    )""")


MIGRATIONS = {1: _create, 2: _add_locations, 3: _add_attempts, 4: _add_created_by, 5: _add_predicted, 6: _add_store,
              7: _add_access, 8: _add_vm_uid, 9: _add_replacements, 10: _add_resizes}
# what each table must have once migrated: a file that lacks one is not a gpufleet registry
COLUMNS = {"clusters": {"name", "stack", "stack_file", "owner", "created_at", "updated_at", "expires_at", "backend",
                        "state", "usd_per_hour", "locations", "created_by", "predicted", "store",
                        "access"},
           "nodes": {"cluster", "pool", "idx", "provider", "location", "zone", "machine", "node_id", "private_ip",
                     "ssh_endpoint", "usd_per_hour", "launched_at", "vm_uid"},
           "host_status": {"cluster", "pool", "idx", "address", "state", "digest", "facts", "detail", "updated_at"},
           "attempts": {"cluster", "n", "pool", "provider", "region", "zone", "instance_type", "spot", "started_at",
                        "seconds", "outcome", "scope", "code", "message"},
           "replacements": {"cluster", "pool", "old_id", "old_uid", "node_id", "private_ip", "ssh_endpoint", "zone",
                            "vm_uid", "launched_at", "fleet_id", "replaced_at"},
           "resizes": {"cluster", "pool", "node_id", "idx", "change", "private_ip", "ssh_endpoint", "zone", "vm_uid",
                       "launched_at", "fleet_id", "at"}}
REPLACED_FIELDS = ("node_id", "private_ip", "ssh_endpoint", "zone", "vm_uid", "launched_at")  # what a new node brings

HOST_FIELDS = {"address", "state", "digest", "facts", "detail", "updated_at"}  # a host's status, as set_host writes it


def _columns(db, table: str) -> set[str]:
    return {r[1] for r in db.execute(f"PRAGMA table_info({table})")}


class RegistryError(GpufleetError):
    """The registry file cannot be used: damaged, not a gpufleet registry, or from a newer gpufleet (the
    hint: rebuild it or move it aside); or its disk failed under it (``hint``: what to do instead)."""

    def __init__(self, path: Path, problem: str, hint: str | None = None):
        self.path = path
        super().__init__(f"the registry {path} {problem}", hint or (
            "rebuild it from the clouds' tags and the Pulumi state with `gpufleet registry rebuild` (the file is "
            "kept beside it as a backup), or move it aside (GPUFLEET_REGISTRY names another file)"))


FULL_BELOW = 2**20  # bytes free under which an I/O error of SQLite's is the disk being full (its -shm grows in 32 KiB)


def _said(path: Path, e: sqlite3.Error) -> GpufleetError:
    """SQLite's error about the registry file, said as what it is: the disk full (SQLITE_FULL, or an I/O
    error while nothing is free: SQLite's shared memory file cannot grow, SQLITE_IOERR_SHMSIZE), another
    I/O error in its own words, a file that cannot be opened, one still locked, or a damaged file, the
    only one of these that rebuilding or moving aside would help."""
    name = getattr(e, "sqlite_errorname", "")
    if name == "SQLITE_FULL" or (name.startswith("SQLITE_IOERR") and _free(path.parent) < FULL_BELOW):
        return DiskFull(path.parent, f"the registry {path} could not be written ({e})")
    if isinstance(e, sqlite3.OperationalError) and "locked" in str(e):
        return RegistryError(path, f"stayed locked by another gpufleet for {BUSY_TIMEOUT:.0f} s")
    if name.startswith("SQLITE_IOERR"):
        return RegistryError(path, f"could not be read or written ({e}: {name})",
                             "the disk or file system under it failed (the system log says why); the registry itself "
                             "is not known to be damaged: run it again once the disk is sound")
    if name in ("SQLITE_CANTOPEN", "SQLITE_READONLY", "SQLITE_PERM"):
        return RegistryError(path, f"cannot be opened or created there ({e})",
                             f"set {named_by('GPUFLEET_REGISTRY')} to a place you can write")
    return RegistryError(path, f"is not a gpufleet registry, or is damaged ({e})")


def _free(folder: Path) -> int:
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return FULL_BELOW  # not known: not said to be full


@dataclass(slots=True)  # a record holds one per node: no dict each
class Node:
    pool: str
    idx: int
    provider: str
    location: str
    machine: str
    zone: str | None = None
    node_id: str | None = None
    private_ip: str | None = None
    ssh_endpoint: str | None = None
    usd_per_hour: float | None = None
    launched_at: str | None = None
    vm_uid: str | None = None  # where node_id is no unique VM's (an Azure scale set VM's): the cloud's unique id


@dataclass
class Replacement:
    """A node `heal` replaced outside Pulumi's state: wherever Pulumi's node list still has the old node
    (``old_id``, and ``old_uid`` where ids come back: an Azure scale set VM's), ``node`` stands in its place.
    The registry's nodes are always Pulumi's with these applied (``applied``), so `up`, `status`, `down`,
    `configure`, `verify` and `ssh-config` see the new node, never the terminated one."""

    pool: str
    old_id: str
    old_uid: str | None
    node: Node  # what the new node brings (REPLACED_FIELDS), its own launch time among them
    fleet_id: str | None
    replaced_at: str

    def stands_for(self, n: Node) -> bool:
        """Whether ``n`` (a node as Pulumi lists it) is the node this replaced."""
        return (n.pool == self.pool and n.node_id == self.old_id
                and (self.old_uid is None or n.vm_uid is None or n.vm_uid == self.old_uid))

    def to_dict(self) -> dict:
        return {"pool": self.pool, "old_id": self.old_id, "old_uid": self.old_uid, "fleet_id": self.fleet_id,
                "replaced_at": self.replaced_at, "node": {k: getattr(self.node, k) for k in REPLACED_FIELDS}}

    @classmethod
    def of_dict(cls, d) -> "Replacement":
        """One read from a team store (whoever can write it wrote it): ValueError unless of its shape."""
        node = d.get("node") if isinstance(d, dict) else None
        if not isinstance(node, dict) or set(node) != set(REPLACED_FIELDS):
            raise ValueError(f"a replacement's node is not {{{', '.join(REPLACED_FIELDS)}}}")
        required = [d.get("pool"), d.get("old_id"), d.get("replaced_at"), node["node_id"], node["launched_at"]]
        optional = [d.get("old_uid"), d.get("fleet_id"), *node.values()]
        if not all(isinstance(v, str) for v in required) or not all(v is None or isinstance(v, str) for v in optional):
            raise ValueError("a replacement's fields are not strings")
        return cls(d["pool"], d["old_id"], d.get("old_uid"), Node(d["pool"], 0, "", "", "", **node), d.get("fleet_id"),
                   d["replaced_at"])


def applied(nodes: list[Node], replacements: list[Replacement]) -> tuple[list[Node], list[Replacement]]:
    """``nodes`` (Pulumi's list) with each replaced node's stand-in in its place, through every replacement
    of a replacement (each followed once: a loop in a store's data ends); and the replacements used."""
    out, used = [], []
    for n in nodes:
        todo = list(replacements)
        while (r := next((r for r in todo if r.stands_for(n)), None)) is not None:
            todo.remove(r)
            used.append(r)
            n = replace(n, **{k: getattr(r.node, k) for k in REPLACED_FIELDS})
        out.append(n)
    return out, used


def _live(replacements: list[Replacement], nodes: list[Node], used: list[Replacement]) -> list[Replacement]:
    """The replacements still about ``nodes``: those ``applied`` used on them (Pulumi's list), and those with
    their stand-in, or a stand-in's since, among them (the list as recorded). The others are of nodes Pulumi
    itself replaced since (an `up` that made the pool anew): forgotten, so an id that comes back (an Azure
    scale set's instance ids start again at 0, with new unique ids) is never mapped to them."""
    return [r for r in replacements if r in used or any(
        n.pool == r.pool and any(_is(n, x.node) for x in _chain(r, replacements)) for n in nodes)]


def outlived(replacements: list[Replacement], nodes: list[Node]) -> list[Replacement]:
    """The replacements ``nodes`` (Pulumi's new list) no longer hold: their pool was made anew since."""
    done, used = applied(nodes, replacements)
    live = _live(replacements, done, used)
    return [r for r in replacements if r not in live]


@dataclass
class Resize:
    """A node added to an elastic pool (``change`` "added": ``node`` is it, with its idx in the pool) or removed
    from it ("removed": ``node.node_id`` names it) outside Pulumi's state, by `gpufleet scale` or `heal`."""

    pool: str
    change: str  # added | removed
    node: Node
    fleet_id: str | None
    at: str

    def to_dict(self) -> dict:
        return {"pool": self.pool, "change": self.change, "fleet_id": self.fleet_id, "at": self.at, "idx": self.node.idx,
                "node": {k: getattr(self.node, k) for k in REPLACED_FIELDS}}

    @classmethod
    def of_dict(cls, d) -> "Resize":
        """One read from a team store (whoever can write it wrote it): ValueError unless of its shape."""
        node = d.get("node") if isinstance(d, dict) else None
        if not isinstance(node, dict) or set(node) != set(REPLACED_FIELDS):
            raise ValueError(f"a resize's node is not {{{', '.join(REPLACED_FIELDS)}}}")
        if d.get("change") not in ("added", "removed"):
            raise ValueError("a resize's change is not added or removed")
        required = [d.get("pool"), d.get("at"), node["node_id"]]
        optional = [d.get("fleet_id"), *node.values()]
        if not all(isinstance(v, str) for v in required) or not all(v is None or isinstance(v, str) for v in optional):
            raise ValueError("a resize's fields are not strings")
        idx = d.get("idx")
        if not isinstance(idx, int) or isinstance(idx, bool) or not 0 <= idx < 10**6:
            raise ValueError("a resize's idx is not a node's place in its pool")
        return cls(d["pool"], d["change"], Node(d["pool"], idx, "", "", "", **node), d.get("fleet_id"), d["at"])


def resized(nodes: list[Node], resizes: list[Resize]) -> list[Node]:
    """``nodes`` (Pulumi's list, or the list as recorded) with each added node that is not in it yet after its
    pool's last (the pool's first node lends it what the addition does not say: cloud, region, machine, price),
    and without each removed node. Applied again to its own result it changes nothing (a store's record is
    recorded again as it is)."""
    out = list(nodes)
    gone = {(r.pool, r.node.node_id) for r in resizes if r.change == "removed"}
    for r in (r for r in resizes if r.change == "added"):
        pool = [n for n in out if n.pool == r.pool]
        if not pool or any(_is(n, r.node) for n in pool):
            continue  # a pool the stack no longer has, or a node the list has already
        # a removed node's index is free: an added node may hold it again (its Slurm slot, fleet.scale.free_slots)
        first, taken = pool[0], {n.idx for n in pool if (n.pool, n.node_id) not in gone}
        out.append(replace(first, idx=r.node.idx if r.node.idx not in taken else max(taken) + 1, ssh_endpoint=None,
                           **{k: getattr(r.node, k) for k in REPLACED_FIELDS if k != "ssh_endpoint"}))
    return [n for n in out if (n.pool, n.node_id) not in gone]


def outgrown(resizes: list[Resize], nodes: list[Node], had: list[Node], replacements: list[Replacement]) -> list[Resize]:
    """The resizes of pools Pulumi has made anew since: of their pool, ``nodes`` (Pulumi's new list) holds none of
    the nodes ``had`` (the pool as recorded) nor any a replacement stood in for. Its added nodes are no nodes of the
    pool any more (an Azure scale set made anew numbers its VMs from 0 again, with new unique ids): forgotten, and
    `up` deletes them (``nodes.cloud.retire``)."""
    anew = set()
    for pool in {r.pool for r in resizes}:
        now = [n for n in nodes if n.pool == pool]
        before = [n for n in had if n.pool == pool] + [Node(pool, 0, "", "", "", node_id=r.old_id, vm_uid=r.old_uid)
                                                       for r in replacements if r.pool == pool]
        if now and before and not any(_is(n, b) for n in now for b in before):
            anew.add(pool)
    return [r for r in resizes if r.pool in anew]


def _is(n: Node, new: Node) -> bool:
    return n.node_id == new.node_id and (n.vm_uid is None or new.vm_uid is None or n.vm_uid == new.vm_uid)


def _chain(r: Replacement, replacements: list[Replacement]) -> list[Replacement]:
    """``r`` and each replacement of the node in its place since, in order."""
    out = [r]
    while (r := next((x for x in replacements if x.pool == r.pool and x.old_id == r.node.node_id), None)) is not None \
            and r not in out:
        out.append(r)
    return out


@dataclass
class ClusterRecord:
    name: str
    stack: str
    stack_file: str
    owner: str
    created_at: str
    updated_at: str
    expires_at: str
    backend: str | None
    state: str
    usd_per_hour: float | None
    locations: list = field(default_factory=list)  # [(provider, region)] of the cloud pools
    nodes: list[Node] = field(default_factory=list)
    created_by: dict[str, str] = field(default_factory=dict)  # provider -> who brought it up there
    predicted: dict = field(default_factory=dict)  # the bill `up` predicted, per line (engine.spend.Spend.summary)
    access: dict = field(default_factory=dict)  # what ssh and ssh-config need of the stack (fleet.ssh.access_record)
    # the URL of the team store the record is shared in (None: brought up alone, written only by this machine):
    # what a store holds is written by whoever can write the store, so it names no file of this machine
    store: str | None = None
    replacements: list[Replacement] = field(default_factory=list)  # what `heal` replaced outside Pulumi's state
    resizes: list[Resize] = field(default_factory=list)  # what `scale` added and removed outside Pulumi's state

    @property
    def clouds(self) -> dict[str, list[str]]:
        """provider -> regions of its cloud pools (from the stack and from the recorded nodes)."""
        out: dict[str, list[str]] = {}
        for p, r in [*self.locations, *((n.provider, n.location) for n in self.nodes)]:
            if p in CLOUDS and r not in out.setdefault(p, []):
                out[p].append(r)
        return out

    @property
    def own_stack_file(self) -> str | None:
        """The stack file `up` recorded, when gpufleet may read it without being told to: a record this
        machine wrote alone. A record from the team's store was written by whoever can write the store:
        the path it names may be a file they put there (known_hosts and keys of their choosing), so it is
        only a hint the operator passes on purpose (``stack_hint``)."""
        if self.store is not None:
            return None
        return self.stack_file or None

    def stack_hint(self, passing: str) -> str:
        """Why a stack file a team store's record names is not read: ``passing``, how to pass it."""
        return (f"cluster {self.name}'s record comes from the team store {self.store}, which names the stack file "
                f"{self.stack_file or '(none)'!r}: gpufleet reads a stack file a store names only when you pass it "
                f"({passing}), since whoever can write the store chose that path")

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        # each node as a gpufleet of before vm_uid reads it (a key it does not know would make the record
        # unreadable there), the unique ids beside them
        d["nodes"] = [{f.name: getattr(n, f.name) for f in fields(n) if f.name != "vm_uid"} for n in self.nodes]
        uids = {f"{n.pool}/{n.idx}": n.vm_uid for n in self.nodes if n.vm_uid}
        if uids:
            d["vm_uids"] = uids
        del d["store"]  # where this machine found the record, not part of it
        d["replacements"] = [r.to_dict() for r in self.replacements]
        d["resizes"] = [r.to_dict() for r in self.resizes]
        return d


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


class Registry:
    """The clusters, here; in team mode (``shared``: the team's store) every change is also made to
    the cluster's object in the store, and the local file is a cache refreshed from the store when
    opened (``state.shared_registry``)."""

    def __init__(self, path: str | Path | None = None, shared: SharedStore | None = None):
        self.shared = shared
        self.unreadable: dict[str, str] = {}  # keys of the store's clusters that are no cluster's record, and why
        self.path = Path(path) if path else registry_path()
        make_dir(self.path.parent, named_by("GPUFLEET_REGISTRY"))
        if not self.path.exists():
            self._create()
        elif self.path.stat().st_size == 0:  # never a registry (see _create): one cut short, or emptied
            raise RegistryError(self.path, "is empty (0 bytes), so not a gpufleet registry; it was left as it is")
        with self._db() as db:
            self._migrate(db)
            if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                db.execute("PRAGMA journal_mode = WAL")  # readers never wait for a writer
        if shared is not None:
            self._pull()

    def _pull(self) -> None:
        """The store's clusters into the local cache (their records, nodes and hosts); a cluster that came
        from this store and that it no longer has (taken down from another machine) leaves the cache. A
        cluster brought up alone, never in a store, stays: it is known nowhere else."""
        docs, self.unreadable = shared_registry.clusters(self.shared)
        with self._db() as db:
            cached = {r[0] for r in db.execute("SELECT name FROM clusters WHERE store = ?", (self.shared.url,))}
        # a cluster whose object cannot be read is still in the store: its cached copy stays
        gone = cached - {d["name"] for d in docs} - {shared_registry.name_of(k) for k in self.unreadable}
        with self._db(write=True) as db:
            db.executemany("DELETE FROM clusters WHERE name = ?", [(n,) for n in gone])
        for doc in docs:
            try:
                uids = doc.get("vm_uids") or {}
                if not isinstance(uids, dict):
                    raise ValueError("vm_uids is not an object")
                nodes = [Node(**n) for n in doc.get("nodes") or []]
                replacements = [Replacement.of_dict(r) for r in doc.get("replacements") or []]
                resizes = [Resize.of_dict(r) for r in doc.get("resizes") or []]
                for n in nodes:
                    n.vm_uid = uids.get(f"{n.pool}/{n.idx}")
                locations = [tuple(x) for x in doc.get("locations") or []]
                hosts = [(where.rpartition("/")[0], int(where.rpartition("/")[2]), h)
                         for where, h in (doc.get("hosts") or {}).items()]
                if any(not isinstance(h, dict) or set(h) != HOST_FIELDS for _, _, h in hosts):
                    raise ValueError(f"a host's status is not {sorted(HOST_FIELDS)}")
            except (TypeError, ValueError) as e:  # fields no gpufleet writes: not a record to cache
                self.unreadable[shared_registry.key(doc["name"])] = f"is not a gpufleet cluster record ({e})"
                continue
            self._record_local(name=doc["name"], stack=doc["stack"], stack_file=doc["stack_file"], owner=doc["owner"],
                               expires_at=doc["expires_at"], backend=doc.get("backend"), nodes=nodes,
                               state=doc["state"], locations=locations,
                               created_at=doc.get("created_at"), created_by=doc.get("created_by"),
                               predicted=doc.get("predicted"), store=self.shared.url,
                               access=doc.get("access"), replacements=replacements, resizes=resizes)
            for pool, idx, h in hosts:
                self._set_host_local(doc["name"], pool, idx, **h)

    def _push(self, name: str, change) -> None:
        if self.shared is not None:
            leases.ensure_held()  # a command that lost the cluster's lease may be racing the new holder: no write
            shared_registry.update(self.shared, name, change)

    def alone(self) -> list[str]:
        """The clusters recorded here and in no team store (brought up alone)."""
        with self._db() as db:
            return [r[0] for r in db.execute("SELECT name FROM clusters WHERE store IS NULL ORDER BY name")]

    def refuse_taken(self, store: SharedStore) -> None:
        """Refuse (naming them) the clusters brought up alone whose name the team's ``store`` has: the
        store's is another cluster, and neither may hide the other."""
        taken = [n for n in self.alone() if store.read(shared_registry.key(n)) is not None]
        if taken:
            raise InputError(f"the team store {store.url} already has a cluster named {', '.join(taken)}, as "
                             "this machine has one brought up alone", "take this machine's down (or the team's) "
                             "before joining, or join another store: nothing was written")

    def share(self, store: SharedStore, backends: dict[str, str] | None = None) -> list[str]:
        """Carry every cluster brought up alone into the team's ``store`` (its record, nodes and hosts),
        so that joining a team loses none; ``backends``: the Pulumi backend a cluster's state was moved
        to, recorded in its place. Refused before anything is written when a name is taken
        (``refuse_taken``)."""
        self.refuse_taken(store)
        names = self.alone()
        for name in names:
            backend = (backends or {}).get(name)
            doc = {**self.get(name).to_dict(),
                   "hosts": {f"{pool}/{idx}": h for (pool, idx), h in self.hosts(name).items()}}
            if backend:
                doc["backend"] = backend
            if not shared_registry.add(store, doc):
                raise InputError(f"the team store {store.url} got a cluster named {name} while this machine's "
                                 "was carried into it", "take one of them down, then run it again")
            with self._db(write=True) as db:
                db.execute("UPDATE clusters SET store = ?, backend = coalesce(?, backend) WHERE name = ?",
                           (store.url, backend, name))
        return names

    def _create(self) -> None:
        """Make a new registry aside and link it into place whole. SQLite starts a database as an
        empty file: made in place, another gpufleet starting at that moment would meet it empty
        and take it as damaged. Of two made at once, the first linked is kept."""
        tmp = self.path.with_name(f".{self.path.name}.new-{os.getpid()}")
        try:
            db = sqlite3.connect(tmp, isolation_level=None)
            try:
                self._migrate(db)  # in SQLite's default journal: nothing beside the file to carry over
            finally:
                db.close()
        except sqlite3.Error as e:
            tmp.unlink(missing_ok=True)
            raise _said(self.path, e) from None
        try:
            os.link(tmp, self.path)
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links: a rename is whole too (of two new ones, both empty)
            if not self.path.exists():
                os.replace(tmp, self.path)
        finally:
            tmp.unlink(missing_ok=True)

    def seal(self) -> None:
        """Fold the write-ahead log back into the file, so that the file alone can be moved."""
        with self._db() as db:
            db.execute("PRAGMA journal_mode = DELETE")

    @contextlib.contextmanager
    def _db(self, write: bool = False):
        """A connection (closed after); ``write``: one immediate transaction, committed or rolled back.
        SQLite's errors about the file itself become a RegistryError, or DiskFull (``_said``)."""
        try:
            db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT, isolation_level=None)
        except sqlite3.Error as e:
            raise _said(self.path, e) from None
        try:
            db.execute("PRAGMA foreign_keys = ON")
            if write:
                db.execute("BEGIN IMMEDIATE")  # take the write lock now (waiting for it), not halfway through
            try:
                yield db
            except BaseException:
                if write:
                    db.execute("ROLLBACK")
                raise
            if write:
                db.execute("COMMIT")
        except sqlite3.DatabaseError as e:
            raise _said(self.path, e) from None
        finally:
            db.close()

    def _migrate(self, db) -> None:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise RegistryError(self.path, f"was written by a newer gpufleet (schema {version}, this one reads up to "
                                f"{SCHEMA_VERSION}): upgrade gpufleet")
        if version == 0 and db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
            self._check_columns(db, legacy=True)  # tables, but no version: ours from before versions, or not ours
        if version < SCHEMA_VERSION:
            db.execute("BEGIN IMMEDIATE")
            try:
                version = db.execute("PRAGMA user_version").fetchone()[0]  # another process may have migrated
                for n in range(version + 1, SCHEMA_VERSION + 1):
                    MIGRATIONS[n](db)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        self._check_columns(db)

    def _check_columns(self, db, legacy: bool = False) -> None:
        """Every table with the columns gpufleet writes (``legacy``: as before `locations` existed)."""
        for table, cols in COLUMNS.items():
            if legacy and table in ("attempts", "replacements", "resizes"):
                continue  # a registry from before versions has neither table yet: migrations 3 and 9 add them
            later = {"locations", "created_by", "predicted", "store", "access", "vm_uid"}  # columns migrations add
            missing = cols - _columns(db, table) - (later if legacy else set())
            if missing:
                raise RegistryError(self.path, f"is not a gpufleet registry (table {table} lacks "
                                    f"{', '.join(sorted(missing))}); it was left as it is")

    def record(self, *, name: str, stack: str, stack_file: str, owner: str, expires_at: str, backend: str | None,
               nodes: list[Node], state: str = "up", locations: list | None = None,
               created_by: dict[str, str] | None = None, predicted: dict | None = None,
               access: dict | None = None, replacements: list[Replacement] | None = None,
               resizes: list[Resize] | None = None) -> ClusterRecord:
        """Insert or replace a cluster and its nodes in one transaction (all or nothing); ``created_by``,
        ``predicted``, ``locations``, ``access``, ``replacements`` (`heal`'s, ``Replacement``) and ``resizes``
        (`scale`'s, ``Resize``) left out keep what is recorded."""
        rec = self._record_local(name=name, stack=stack, stack_file=stack_file, owner=owner, expires_at=expires_at,
                                 backend=backend, nodes=nodes, state=state, locations=locations, created_by=created_by,
                                 predicted=predicted, store=self.shared.url if self.shared is not None else None,
                                 access=access, replacements=replacements, resizes=resizes)
        doc = rec.to_dict()
        self._push(name, lambda cur: {**doc, "hosts": (cur or {}).get("hosts", {})})
        return rec

    def _record_local(self, *, name: str, stack: str, stack_file: str, owner: str, expires_at: str,
                      backend: str | None, nodes: list[Node], state: str = "up", locations: list | None = None,
                      created_at: str | None = None, created_by: dict[str, str] | None = None,
                      predicted: dict | None = None, store: str | None = None,
                      access: dict | None = None, replacements: list[Replacement] | None = None,
                      resizes: list[Resize] | None = None) -> ClusterRecord:
        """``nodes`` as Pulumi lists them (or as recorded), recorded with the cluster's resizes and replacements
        applied (``replacements``, ``resizes``: the store's, in place of those recorded here): the nodes `scale`
        added, each replaced node's stand-in in its place, without the nodes `scale` removed. A node keeps its
        launch time while it is the same node (its id), a new one has its own."""
        now = _now()
        with self._db(write=True) as db:
            known = self._replacements(db, name) if replacements is None else replacements
            resizes = self._resizes(db, name) if resizes is None else resizes
            had = [Node(r[0], 0, "", "", "", node_id=r[1], vm_uid=r[2]) for r in db.execute(
                "SELECT pool, node_id, vm_uid FROM nodes WHERE cluster = ?", (name,))]
            resizes = [r for r in resizes if r not in outgrown(resizes, nodes, had, known)]
            # added first (heal may have replaced an added node since), removed last (by the id it had when removed)
            nodes = resized(nodes, [r for r in resizes if r.change == "added"])
            nodes, used = applied(nodes, known)
            replacements = _live(known, nodes, used)
            nodes = resized(nodes, [r for r in resizes if r.change == "removed"])
            prices = [n.usd_per_hour for n in nodes]
            total = None if any(p is None for p in prices) else sum(prices)
            row = db.execute("SELECT created_at FROM clusters WHERE name = ?", (name,)).fetchone()
            created = row[0] if row else created_at or now
            old = {(r[0], r[1], r[2]): r[3] for r in db.execute(
                "SELECT pool, idx, node_id, launched_at FROM nodes WHERE cluster = ?", (name,))}
            db.execute("DELETE FROM nodes WHERE cluster = ?", (name,))
            # an upsert, not REPLACE: replacing the row would cascade to the hosts' status
            db.execute("INSERT INTO clusters VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(name) DO UPDATE SET "
                       "stack=excluded.stack, stack_file=excluded.stack_file, owner=excluded.owner, "
                       "updated_at=excluded.updated_at, expires_at=excluded.expires_at, backend=excluded.backend, "
                       "state=excluded.state, usd_per_hour=excluded.usd_per_hour, "
                       "locations=COALESCE(excluded.locations, clusters.locations), "
                       "created_by=COALESCE(excluded.created_by, clusters.created_by), "
                       "predicted=COALESCE(excluded.predicted, clusters.predicted), "
                       "store=COALESCE(excluded.store, clusters.store), "
                       "access=COALESCE(excluded.access, clusters.access)",
                       (name, stack, str(stack_file), owner, created, now, expires_at, backend, state, total,
                        json.dumps(locations) if locations is not None else None,
                        json.dumps(created_by, sort_keys=True) if created_by is not None else None,
                        json.dumps(predicted, sort_keys=True) if predicted is not None else None, store,
                        json.dumps(access, sort_keys=True) if access is not None else None))
            db.executemany("INSERT INTO nodes VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", [
                (name, n.pool, n.idx, n.provider, n.location, n.zone, n.machine, n.node_id, n.private_ip,
                 n.ssh_endpoint, n.usd_per_hour, old.get((n.pool, n.idx, n.node_id), n.launched_at or now), n.vm_uid)
                for n in nodes])
            db.execute("DELETE FROM replacements WHERE cluster = ?", (name,))
            for r in replacements:
                self._add_replacement(db, name, r)
            db.execute("DELETE FROM resizes WHERE cluster = ?", (name,))
            for x in resizes:
                self._add_resize(db, name, x)
        return self.get(name)

    @staticmethod
    def _add_resize(db, cluster: str, r: Resize) -> None:
        db.execute("INSERT OR REPLACE INTO resizes VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                   (cluster, r.pool, r.node.node_id, r.node.idx, r.change, r.node.private_ip, r.node.ssh_endpoint, r.node.zone,
                    r.node.vm_uid, r.node.launched_at, r.fleet_id, r.at))

    @staticmethod
    def _resizes(db, cluster: str) -> list[Resize]:
        return [Resize(r[0], r[2], Node(r[0], r[10], "", "", "", node_id=r[1], private_ip=r[3], ssh_endpoint=r[4],
                                        zone=r[5], vm_uid=r[6], launched_at=r[7]), r[8], r[9])
                for r in db.execute("SELECT pool, node_id, change, private_ip, ssh_endpoint, zone, vm_uid, launched_at, "
                                    "fleet_id, at, idx FROM resizes WHERE cluster = ? ORDER BY at, idx, node_id",
                                    (cluster,))]

    def resize(self, cluster: str, *, added: list[tuple[Node, str | None]] = (), removed: list[Node] = ()) -> ClusterRecord:
        """Record nodes `scale` added to a pool (each with the request that made it) and removed from it, outside
        Pulumi's state: the node rows change at once, and the resizes are kept so that the next `up`, which gets
        Pulumi's list back, records the pool as it is (``resized``)."""
        now = _now()
        with self._db(write=True) as db:
            rows = [Resize(n.pool, "added", replace(n, launched_at=n.launched_at or now), fleet, now) for n, fleet in added]
            rows += [Resize(n.pool, "removed", Node(n.pool, n.idx, "", "", "", node_id=n.node_id), None, now)
                     for n in removed]
            for r in rows:
                self._add_resize(db, cluster, r)
            for n in removed:
                db.execute("DELETE FROM nodes WHERE cluster = ? AND pool = ? AND node_id = ?", (cluster, n.pool, n.node_id))
            for r in rows[:len(added)]:
                n = r.node
                db.execute("INSERT INTO nodes VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                           (cluster, n.pool, n.idx, n.provider, n.location, n.zone, n.machine, n.node_id, n.private_ip,
                            n.ssh_endpoint, n.usd_per_hour, n.launched_at, n.vm_uid))
            prices = [r[0] for r in db.execute("SELECT usd_per_hour FROM nodes WHERE cluster = ?", (cluster,))]
            db.execute("UPDATE clusters SET usd_per_hour = ? WHERE name = ?",
                       (None if any(p is None for p in prices) else sum(prices), cluster))
        rec = self.get(cluster)
        # the record's document made only for a team store's copy (a record of many nodes is not copied for nothing)
        self._push(cluster, lambda cur: cur and {**rec.to_dict(), "hosts": cur.get("hosts", {})})
        return rec

    @staticmethod
    def _add_replacement(db, cluster: str, r: Replacement) -> None:
        db.execute("INSERT OR REPLACE INTO replacements VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                   (cluster, r.pool, r.old_id, r.old_uid, *(getattr(r.node, k) for k in REPLACED_FIELDS), r.fleet_id,
                    r.replaced_at))

    @staticmethod
    def _replacements(db, cluster: str) -> list[Replacement]:
        return [Replacement(r[0], r[1], r[2], Node(r[0], 0, "", "", "", **dict(zip(REPLACED_FIELDS, r[3:9]))), r[9], r[10])
                for r in db.execute("SELECT pool, old_id, old_uid, node_id, private_ip, ssh_endpoint, zone, vm_uid, "
                                    "launched_at, fleet_id, replaced_at FROM replacements WHERE cluster = ? "
                                    "ORDER BY replaced_at, old_id", (cluster,))]

    def replace_node(self, cluster: str, old: Node, new: Node, fleet_id: str | None = None) -> ClusterRecord:
        """Record that ``new`` stands in ``old``'s place (`heal` replaced it outside Pulumi's state): the node
        row becomes the new node, launched now unless ``new`` says when, and the replacement is kept, so the
        next `up`, which gets Pulumi's list with ``old`` in it, records ``new`` again (``applied``)."""
        now = _now()
        r = Replacement(old.pool, old.node_id, old.vm_uid, replace(new, launched_at=new.launched_at or now), fleet_id,
                        now)
        with self._db(write=True) as db:
            self._add_replacement(db, cluster, r)
            db.execute(f"UPDATE nodes SET {', '.join(f'{k} = ?' for k in REPLACED_FIELDS)} WHERE cluster = ? AND "
                       "pool = ? AND node_id = ?", (*(getattr(r.node, k) for k in REPLACED_FIELDS), cluster, old.pool,
                                                    old.node_id))
        rec = self.get(cluster)
        # the record's document made only for a team store's copy (a record of many nodes is not copied for nothing)
        self._push(cluster, lambda cur: cur and {**rec.to_dict(), "hosts": cur.get("hosts", {})})
        return rec

    def set_state(self, name: str, state: str) -> None:
        now = _now()
        with self._db(write=True) as db:
            db.execute("UPDATE clusters SET state = ?, updated_at = ? WHERE name = ?", (state, now, name))
        self._push(name, lambda cur: cur and {**cur, "state": state, "updated_at": now})

    def get(self, name: str) -> ClusterRecord | None:
        with self._db() as db:
            row = db.execute("SELECT * FROM clusters WHERE name = ?", (name,)).fetchone()
            if row is None:
                return None
            rec = ClusterRecord(*row[:10], locations=[tuple(x) for x in json.loads(row[10] or "[]")],
                                created_by=json.loads(row[11] or "{}"), predicted=json.loads(row[12] or "{}"),
                                access=json.loads(row[14] or "{}"), store=row[13],
                                replacements=self._replacements(db, name), resizes=self._resizes(db, name))
            same: dict = {}  # the pool, provider, region, zone and type a pool's nodes share: one string each, not one a node
            rec.nodes = [Node(pool=same.setdefault(r[1], r[1]), idx=r[2], provider=same.setdefault(r[3], r[3]),
                              location=same.setdefault(r[4], r[4]), zone=same.setdefault(r[5], r[5]),
                              machine=same.setdefault(r[6], r[6]), node_id=r[7], private_ip=r[8], ssh_endpoint=r[9],
                              usd_per_hour=r[10], launched_at=r[11], vm_uid=r[12])
                         for r in db.execute("SELECT * FROM nodes WHERE cluster = ? ORDER BY pool, idx", (name,))]
        return rec

    def list(self) -> list[ClusterRecord]:
        with self._db() as db:
            names = [r[0] for r in db.execute("SELECT name FROM clusters ORDER BY created_at, name")]
        return [self.get(n) for n in names]

    def set_hosts(self, cluster: str, outcomes: dict[tuple[str, int], dict]) -> None:
        """Record hosts' configuration outcomes (``(pool, idx)`` -> address, state, and digest, facts,
        detail where known; the cluster must exist) together: one local transaction, and in team mode one
        write of the cluster's object, however many hosts (Cloud Storage takes about one write a second to
        one object)."""
        if not outcomes:
            return
        now = _now()
        rows = {f"{pool}/{idx}": {"address": h["address"], "state": h["state"], "digest": h.get("digest"),
                                  "facts": h.get("facts"), "detail": h.get("detail"), "updated_at": now}
                for (pool, idx), h in outcomes.items()}
        with self._db(write=True) as db:
            for pool, idx in outcomes:
                self._set_host_row(db, cluster, pool, idx, **rows[f"{pool}/{idx}"])
        self._push(cluster, lambda cur: cur and {**cur, "hosts": {**cur.get("hosts", {}), **rows}})

    def _set_host_local(self, cluster: str, pool: str, idx: int, **row) -> None:
        with self._db(write=True) as db:
            self._set_host_row(db, cluster, pool, idx, **row)

    @staticmethod
    def _set_host_row(db, cluster: str, pool: str, idx: int, *, address: str, state: str, digest: str | None,
                      facts: dict | None, detail: str | None, updated_at: str) -> None:
        db.execute("INSERT OR REPLACE INTO host_status VALUES (?,?,?,?,?,?,?,?,?)",
                   (cluster, pool, idx, address, state, digest, json.dumps(facts) if facts is not None else None,
                    detail, updated_at))

    def hosts(self, cluster: str) -> dict[tuple[str, int], dict]:
        with self._db() as db:
            rows = db.execute("SELECT pool, idx, address, state, digest, facts, detail, updated_at FROM host_status "
                              "WHERE cluster = ?", (cluster,)).fetchall()
        return {(r[0], r[1]): {"address": r[2], "state": r[3], "digest": r[4], "facts": json.loads(r[5]) if r[5] else None,
                               "detail": r[6], "updated_at": r[7]} for r in rows}

    def add_attempt(self, cluster: str, attempt: dict) -> None:
        """Record one placement attempt (``nodes.cloud.failover.Attempt.to_dict()``), numbered after the last."""
        keys = ("pool", "provider", "region", "zone", "instance_type", "spot", "started_at", "seconds", "outcome",
                "scope", "code", "message")
        with self._db(write=True) as db:
            n = db.execute("SELECT COALESCE(MAX(n), 0) + 1 FROM attempts WHERE cluster = ?", (cluster,)).fetchone()[0]
            db.execute("INSERT INTO attempts VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                       (cluster, n, *(attempt.get(k) for k in keys)))

    def attempts(self, cluster: str) -> list[dict]:
        """Every placement attempt recorded for the cluster, in order."""
        with self._db() as db:
            cur = db.execute("SELECT * FROM attempts WHERE cluster = ? ORDER BY n", (cluster,))
            names = [d[0] for d in cur.description]
            return [dict(zip(names, r)) for r in cur.fetchall()]

    def remove(self, name: str) -> bool:
        with self._db(write=True) as db:
            cur = db.execute("DELETE FROM clusters WHERE name = ?", (name,))
        if self.shared is not None:  # its object goes too, even one that is no record any more
            shared_registry.remove(self.shared, name)
        return cur.rowcount > 0


def nodes_from_outputs(outputs: dict) -> list[Node]:
    """Registry rows from the Pulumi program's ``pools`` output (``engine.program.Context.export``)."""
    out: list[Node] = []
    for pool, p in (outputs.get("pools") or {}).items():
        ids = p.get("node_ids") or []
        ips = p.get("private_ips") or []
        uids = p.get("vm_uids") or []
        for i in range(int(p.get("nodes") or len(ids))):
            out.append(Node(pool=pool, idx=i, provider=p["provider"], location=p["region"], zone=p.get("zone"),
                            machine=p["instance_type"], node_id=ids[i] if i < len(ids) else None,
                            private_ip=ips[i] if i < len(ips) else None,
                            ssh_endpoint=p.get("ssh_endpoint") if i == 0 else None,
                            usd_per_hour=p.get("usd_per_node_hour"), vm_uid=uids[i] if i < len(uids) else None))
    return out


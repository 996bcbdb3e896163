"""Leases on a cluster in the team's store: who runs `up`, `down` or `configure` on it now.

A lease is one object per cluster (``leases/<cluster>.json``): the holder (user and host), pid,
command, when it started and its last heartbeat. Taking one is ``create`` (or ``replace`` of an
expired one, at the version read); the holder rewrites its heartbeat every ``HEARTBEAT_S``
seconds under the same precondition, and deletes the lease at the end. A holder that died (a
killed `up`) stops beating: after ``EXPIRES_S`` (three missed heartbeats) the lease is expired
and the next command takes it over. Pulumi's own lock file is not such a lease: a killed `up`
strands it until someone deletes it by hand (pulumi/pulumi#9253).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass

from gpufleet.errors import GpufleetError, InputError
from gpufleet.state.shared import SharedStore

HEARTBEAT_S = 30.0
EXPIRES_S = 3 * HEARTBEAT_S + 5.0  # three missed heartbeats
WAIT_POLL_S = 5.0
EXIT_HELD = 4  # another command holds the cluster (--no-wait, or it was not released in time)


@dataclass(frozen=True)
class Lease:
    cluster: str
    holder: str  # who: the caller's identity (cloud principal, else user@host)
    host: str
    pid: int
    command: str
    started: str  # ISO 8601 UTC
    heartbeat: str
    token: str  # this holding's own id: a replaced lease is no longer ours

    def age_s(self, now: dt.datetime) -> float:
        return (now - dt.datetime.fromisoformat(self.heartbeat)).total_seconds()

    def expired(self, now: dt.datetime, expires_s: float = EXPIRES_S) -> bool:
        return self.age_s(now) > expires_s

    def words(self, now: dt.datetime) -> str:
        return (f"{self.holder} ({self.command} on {self.host}, pid {self.pid}, since {self.started[:19]}Z, "
                f"heartbeat {self.age_s(now):.0f}s ago)")


class LeaseHeld(GpufleetError):
    exit_code = EXIT_HELD


def key(cluster: str) -> str:
    return f"leases/{cluster}.json"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _stamp(t: dt.datetime) -> str:
    return t.isoformat(timespec="seconds")


def read(store: SharedStore, cluster: str) -> tuple[Lease, str] | None:
    got = store.read(key(cluster))
    if got is None:
        return None
    try:
        return Lease(**json.loads(got[0])), got[1]
    except (ValueError, TypeError) as e:
        raise GpufleetError(f"the lease of {cluster} in {store.url} is not a gpufleet lease ({e})",
                            f"gpufleet unlock {cluster} --force replaces it") from None


def _body(lease: Lease) -> bytes:
    return json.dumps(asdict(lease), sort_keys=True).encode()


class Held:
    """A lease this process holds: it beats in a thread until ``release``."""

    def __init__(self, store: SharedStore, lease: Lease, version: str, *, heartbeat_s: float = HEARTBEAT_S):
        self.store, self.lease, self.version = store, lease, version
        self.lost = False  # someone broke it (`unlock --force`): said at the end
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._beat, args=(heartbeat_s,), daemon=True, name="gpufleet-lease")
        self._thread.start()

    def _beat(self, every: float) -> None:
        while not self._stop.wait(every):
            with self._lock:
                fresh = Lease(**{**asdict(self.lease), "heartbeat": _stamp(_now())})
                try:
                    if not self.store.replace(key(fresh.cluster), _body(fresh), self.version):
                        self.lost = True
                        return
                except GpufleetError:
                    continue  # the store did not answer: try again at the next beat, before the lease expires
                got = self.store.read(key(fresh.cluster))
                if got is None or json.loads(got[0]).get("token") != fresh.token:
                    self.lost = True  # broken and taken by another between our write and our read
                    return
                self.lease, self.version = fresh, got[1]

    def release(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        with self._lock:
            if not self.lost:
                self.store.delete(key(self.lease.cluster), self.version)


def acquire(store: SharedStore, cluster: str, command: str, holder: str, *, wait: bool = True,
            timeout_s: float = 3600.0, on_wait: Callable[[Lease], None] | None = None,
            expires_s: float = EXPIRES_S, heartbeat_s: float = HEARTBEAT_S, sleep=time.sleep) -> Held:
    """Take the cluster's lease: at once when it is free or expired; else wait for it (telling
    ``on_wait`` who holds it, once per holder) or, ``wait=False``, fail naming the holder."""
    deadline = time.monotonic() + timeout_s
    told = None
    while True:
        now = _now()
        mine = Lease(cluster, holder, socket.gethostname(), os.getpid(), command, _stamp(now), _stamp(now),
                     uuid.uuid4().hex)
        cur = read(store, cluster)
        if cur is None:
            ok = store.create(key(cluster), _body(mine))
        elif cur[0].expired(now, expires_s):
            ok = store.replace(key(cluster), _body(mine), cur[1])  # the holder died: take it over
        else:
            ok = False
            lease = cur[0]
            if not wait or time.monotonic() >= deadline:
                raise LeaseHeld(f"cluster {cluster} is held by {lease.words(now)}",
                                "wait for it to finish (leave out --no-wait), or, if that process is gone, "
                                f"`gpufleet unlock {cluster}` once its lease has expired")
            if on_wait and told != lease.token:
                on_wait(lease)
                told = lease.token
        if ok:
            got = store.read(key(cluster))
            if got is not None and json.loads(got[0]).get("token") == mine.token:
                return Held(store, mine, got[1], heartbeat_s=heartbeat_s)
            continue  # another writer got there between our write and our read
        if cur is None or cur[0].expired(now, expires_s):
            continue  # we lost a race for a free lease: read again at once
        sleep(min(WAIT_POLL_S, max(0.0, deadline - time.monotonic())))


def unlock(store: SharedStore, cluster: str, *, force: bool = False, expires_s: float = EXPIRES_S) -> Lease | None:
    """Break the cluster's lease: only an expired one, unless ``force``. The lease broken, or None."""
    cur = read(store, cluster)
    if cur is None:
        return None
    lease, version = cur
    now = _now()
    if not lease.expired(now, expires_s) and not force:
        raise InputError(f"the lease of {cluster} is live: held by {lease.words(now)}",
                         "wait for it to finish; --force breaks it anyway (the holder may still be changing the cluster)")
    if not store.delete(key(cluster), version):
        raise GpufleetError(f"the lease of {cluster} changed while it was being broken", "run the command again")
    return lease

"""Leases on a cluster in the team's store: who runs `up`, `down` or `configure` on it now.

A lease is one object per cluster (``leases/<cluster>.json``): the holder (user and host), pid,
command, when it started and its last heartbeat. Taking one is ``create`` (or
``replace`` of an expired one, at the version read); the holder rewrites it every ``HEARTBEAT_S``
seconds under the same precondition, and deletes it at the end. Pulumi's own lock file is not such a
lease: a killed `up` strands it until someone deletes it by hand (pulumi/pulumi#9253).

Expiry never compares two machines' clocks (a laptop's clock minutes off, or one that slept, would let a
second operator take a live lease). A reader declares a lease expired only once it has itself seen the
same version of it (an ETag, a generation, a row version, a digest of the content: every heartbeat makes
a new one, its time stamped to the microsecond) for ``EXPIRES_S`` (three missed heartbeats) on its own
monotonic clock; the heartbeat's time stamp, the holder's wall clock, is shown to people and never
decides. The holder, for its part, counts on a clock that keeps running while its machine sleeps: when
no heartbeat of its own was confirmed for ``EXPIRES_S - HEARTBEAT_S`` (one heartbeat's time before a
reader could take the lease over), it gives the lease up. Its command stops then (``ensure_held``,
``stopping``): no further Pulumi or Salt run starts, the runs in flight are asked to stop (Pulumi cancels
gracefully, which may take minutes), and the command exits ``EXIT_HELD``.

A holder that gave its lease up is still changing the cluster until its runs have ended: it goes on
beating, the lease marked ``stopping``, wherever the store takes its heartbeats again, so that no reader
breaks it meanwhile; and a reader on the holder's own host never breaks a lease whose process still runs
(``running_here``), nor clears a Pulumi lock whose process does (``state.pulumi_locks``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import fcntl
import json
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypeVar

from gpufleet.errors import EXIT_HELD, GpufleetError, InputError
from gpufleet.state.shared import SharedStore, StoreError, shown

T = TypeVar("T")
HEARTBEAT_S = 30.0
EXPIRES_S = 3 * HEARTBEAT_S + 5.0  # three missed heartbeats
WAIT_POLL_S = 5.0
RETRY_SHARE = 0.2  # after a heartbeat the store did not confirm, the next try comes after this share of the interval
CLEANUP_S = 10.0  # the longest a command's end waits on its store (the lease's delete, the event)

# A clock that keeps counting while the machine sleeps, for the holder: Linux's CLOCK_BOOTTIME (man 2
# clock_gettime: "also includes any time that the system is suspended"), macOS's CLOCK_MONOTONIC (Apple's
# clock_gettime(3): it "will continue to increment while the system is asleep"); time.monotonic() counts
# neither on those systems, so a holder that slept would think its lease fresher than it is.
_SLEEP_COUNTING = getattr(time, "CLOCK_BOOTTIME", None) if sys.platform.startswith("linux") else \
    getattr(time, "CLOCK_MONOTONIC", None) if sys.platform == "darwin" else None


def holder_clock() -> float:
    return time.clock_gettime(_SLEEP_COUNTING) if _SLEEP_COUNTING is not None else time.monotonic()


def running_here(host: str, pid) -> bool:
    """Whether process ``pid`` of ``host`` runs now, as far as this machine can tell: only on that host
    (kill(2) with signal 0 checks that it exists, as Pulumi's own lock code does before it calls a lock
    stale). Elsewhere: False (this machine cannot see it)."""
    if host != socket.gethostname() or not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: it exists
        return True
    return True


@dataclass(frozen=True)
class Lease:
    cluster: str
    holder: str  # who: the caller's identity (cloud principal, else user@host)
    host: str
    pid: int
    command: str
    started: str  # ISO 8601 UTC, the holder's clock
    heartbeat: str  # likewise, to the microsecond (a new content, so a new version, at each heartbeat, even where
    # the version is the content's digest); for people to read, never compared with another machine's clock
    token: str  # this holding's own id: a replaced lease is no longer ours
    stopping: str | None = None  # its holder lost it and waits for its runs in flight to end: why

    def looks_stale(self, now: dt.datetime, expires_s: float) -> bool:
        """Whether its last heartbeat, by its holder's clock, is older than the expiry by this machine's:
        only a reason to watch it (clocks differ), never to take it."""
        return (now - dt.datetime.fromisoformat(self.heartbeat)).total_seconds() > expires_s

    def words(self) -> str:
        """Who holds it, for people (every word from the store, so sanitised: ``state.shared.shown``)."""
        return (f"{shown(self.holder)} ({shown(self.command)} on {shown(self.host)}, pid {self.pid}, since "
                f"{shown(self.started[:19])}Z, last heartbeat {shown(self.heartbeat[11:19])}Z by its clock"
                + (f"; stopping: {shown(self.stopping, 200)}" if self.stopping else "") + ")")


class LeaseHeld(GpufleetError):
    exit_code = EXIT_HELD


class LeaseLost(GpufleetError):
    """This command's lease was broken, taken, or could not be renewed: it stopped."""

    exit_code = EXIT_HELD


def key(cluster: str) -> str:
    return f"leases/{cluster}.json"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _stamp(t: dt.datetime, timespec: str = "seconds") -> str:
    return t.isoformat(timespec=timespec)


_FIELDS = {f.name for f in dataclasses.fields(Lease)}


def read_body(body: bytes) -> Lease | None:
    """A lease from its object; None when it is not one (a field of the wrong type, a time that is none)."""
    try:
        doc = json.loads(body)
        lease = Lease(**{k: v for k, v in doc.items() if k in _FIELDS})  # a newer gpufleet's own fields: left out
        texts = [lease.cluster, lease.holder, lease.host, lease.command, lease.started, lease.heartbeat, lease.token]
        if not all(isinstance(t, str) for t in texts) or not isinstance(lease.pid, int) or \
                not isinstance(lease.stopping, (str, type(None))):
            return None
        if dt.datetime.fromisoformat(lease.heartbeat).tzinfo is None:
            return None
        return lease
    except (ValueError, TypeError, AttributeError):
        return None


class NotALease(GpufleetError):
    """The cluster's lease object is not a lease (damaged, or not gpufleet's): `unlock --force` deletes it."""


def read(store: SharedStore, cluster: str) -> tuple[Lease, str] | None:
    got = store.read(key(cluster))
    if got is None:
        return None
    lease = read_body(got[0])
    if lease is None:
        raise NotALease(f"the lease of {cluster} in {store.url} ({key(cluster)}) is not a gpufleet lease",
                        f"look at it; `gpufleet unlock {cluster} --force` deletes it")
    return lease, got[1]


def _body(lease: Lease) -> bytes:
    return json.dumps(asdict(lease), sort_keys=True).encode()


class _Seen:
    """What a reader has seen of a lease: the version it read, since when (its own clock), and whether
    the version moved while it watched (its holder beats)."""

    def __init__(self, clock: Callable[[], float]):
        self.clock, self.version, self.since, self.moved = clock, None, 0.0, False

    def unchanged_s(self, version: str) -> float:
        """Seconds this version has stood, as far as this reader knows (counted from after the read that
        first returned it: it was written no later than that)."""
        t = self.clock()
        if version != self.version:
            self.moved = self.moved or self.version is not None
            self.version, self.since = version, t
        return t - self.since


class Held:
    """A lease this process holds: it beats in a thread until ``release``; a watchdog gives it up when
    no heartbeat was confirmed in time, whatever the store is doing (a call may hang)."""

    def __init__(self, store: SharedStore, lease: Lease, version: str, *, renewed_at: float,
                 heartbeat_s: float = HEARTBEAT_S, expires_s: float = EXPIRES_S, clock=holder_clock):
        self.store, self.lease, self.version = store, lease, version
        self.lost_why: str | None = None
        self._heartbeat_s, self._clock, self._renewed_at = heartbeat_s, clock, renewed_at
        self._give_up_s = max(expires_s - heartbeat_s, expires_s / 2)
        self._trouble = ""  # why the last heartbeat was not confirmed
        self.left: str | None = None  # why the lease was left in the store at release
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._on_lost: list[Callable[[], None]] = []
        with _HOLDINGS_LOCK:
            _HOLDINGS.add(self)
        self._beats = threading.Thread(target=self._beat, daemon=True, name="gpufleet-lease")
        self._beats.start()
        threading.Thread(target=self._watch, daemon=True, name="gpufleet-lease-watchdog").start()

    @property
    def lost(self) -> bool:
        return self.lost_why is not None

    def check(self) -> None:
        if self.lost_why is not None:
            raise LeaseLost(f"cluster {self.lease.cluster}: this command lost its lease ({self.lost_why}) and stopped",
                            f"another command may hold the cluster now (`gpufleet log {self.lease.cluster}`); "
                            "check the team's store, then run the command again")

    def _beat(self) -> None:
        """Beat until released. A lease given up because its beats were not confirmed is still beaten,
        marked ``stopping``: its command is still stopping its runs, and wherever a beat lands again no
        reader breaks the lease meanwhile. One broken or taken is not beaten again."""
        every = self._heartbeat_s
        while not self._stop.wait(every):
            try:
                taken = self._renew()
            except Exception as e:  # noqa: BLE001 - any failure (the store down, an answer not understood) is a missed beat: the watchdog decides
                self._trouble = f"{type(e).__name__}: {getattr(e, 'message', None) or e}"[:300]
                every = self._heartbeat_s * RETRY_SHARE
                continue
            if taken:
                self._lose(taken)
                return
            every = self._heartbeat_s

    def _renew(self) -> str | None:
        """One heartbeat: the lease rewritten at the version held, then read back. None when it landed; why
        the lease is no longer ours when it was broken or taken; raises when the store did not confirm it."""
        fresh = dataclasses.replace(self.lease, heartbeat=_stamp(_now(), "microseconds"), stopping=self.lost_why)
        started = self._clock()  # the new version exists no earlier than this
        try:
            self.store.replace(key(fresh.cluster), _body(fresh), self.version)  # False or an error: the read tells
        except Exception as e:  # noqa: BLE001 - the write may have landed though its answer was lost: read it
            trouble = e
        else:
            trouble = None
        got = self.store.read(key(fresh.cluster))
        cur = read_body(got[0]) if got is not None else None
        if cur is None or cur.token != fresh.token:
            return "it was broken or taken by another while the command ran"
        with self._lock:
            self.lease, self.version = cur, got[1]  # ours whatever its beat: an earlier one may have landed unseen
            if cur.heartbeat == fresh.heartbeat:
                self._renewed_at = started
                return None
        raise trouble or GpufleetError("the heartbeat was not written")

    def _watch(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                left = self._renewed_at + self._give_up_s - self._clock()
            if left <= 0:
                self._lose(f"its store did not confirm a heartbeat for {self._give_up_s:.0f} s"
                           + (f": {self._trouble}" if self._trouble else ""))
                return
            self._stop.wait(min(left, 1.0))  # a short wait: a machine that slept notices at once when it wakes

    def _lose(self, why: str) -> None:
        with self._lock:
            if self.lost_why is not None:
                return
            self.lost_why, stops = why, list(self._on_lost)
        for stop in stops:
            try:
                stop()
            except Exception:  # noqa: BLE001 - stopping is best effort: the command also checks ensure_held
                pass

    def release(self) -> None:
        """Stop beating and delete the lease if it is still ours (a conditional delete at the version read:
        it removes no one else's). Never raises, and waits on no store longer than ``CLEANUP_S`` (one that
        does not answer leaves the lease to expire). A lease found gone or another's before the delete
        counts as lost. While a run this process started is still changing the cluster (``CHILDREN``: it
        did not end when asked), the lease is not deleted: it expires once this process stops beating."""
        self._stop.set()
        with _HOLDINGS_LOCK:
            _HOLDINGS.discard(self)  # its command is over: a loss stops nothing more
        self._beats.join(timeout=CLEANUP_S)  # a heartbeat in flight lands first
        running = [p.pid for p in list(CHILDREN) if p.poll() is None]
        if running:
            self.left = (f"its lease was left in the store to expire: process {', '.join(map(str, running))} it "
                         "started is still changing the cluster")
            return
        try:
            ours = bounded(CLEANUP_S, self._delete)
        except Exception as e:  # noqa: BLE001 - cleanup: the command's own outcome stands; the lease expires by itself
            self._trouble = str(getattr(e, "message", None) or e)[:300]
            return
        if not ours:
            self._lose("it was broken or taken by another while the command ran")

    def _delete(self) -> bool:
        """Delete the lease if it is still ours; False when it was not (broken, or another's). Read first,
        and read again after a delete that says it found nothing at that version: a delete retried after
        its answer was lost (Cloud Storage's 503 then 404, S3's 404 NoSuchKey) finds the lease gone by its
        own hand, which is a release, not a loss; a heartbeat that landed unseen moved the version."""
        k = key(self.lease.cluster)
        got = self.store.read(k)
        for _ in range(3):
            cur = read_body(got[0]) if got is not None else None
            if cur is None or cur.token != self.lease.token:
                return False
            if self.store.delete(k, got[1]):
                return True
            got = self.store.read(k)
            if got is None:
                return True  # ours was there at that version a moment ago: the delete landed
        return False


def bounded(seconds: float, call: Callable[[], T]) -> T:
    """``call()``'s answer, or TimeoutError when it has none after ``seconds`` (it is left to finish in a
    thread of its own): for cleanup that must not wait on a store that stopped answering."""
    box: list = []

    def run() -> None:
        try:
            box.append((True, call()))
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            box.append((False, e))
    worker = threading.Thread(target=run, daemon=True, name="gpufleet-cleanup")
    worker.start()
    worker.join(seconds)
    if not box:
        raise TimeoutError(f"no answer in {seconds:.0f} s")
    ok, value = box[0]
    if not ok:
        raise value
    return value


# the leases this process holds, for the work that must stop when one is lost (`ensure_held`, `stopping`)
_HOLDINGS: set[Held] = set()
_HOLDINGS_LOCK = threading.Lock()
# the processes this one started that change a cluster (the Pulumi CLI, salt-ssh: each a subprocess.Popen),
# added as each starts and removed once it has ended: one that did not end when asked keeps the lease
CHILDREN: set = set()


def ensure_held() -> None:
    """Raise LeaseLost when a lease this process holds was lost: called before work that changes a
    cluster starts (a Pulumi run, a Salt run, a configuration published to the nodes)."""
    with _HOLDINGS_LOCK:
        holdings = list(_HOLDINGS)
    for held in holdings:
        held.check()


def lost() -> bool:
    """Whether a lease this process holds was lost (what ``ensure_held`` raises for)."""
    with _HOLDINGS_LOCK:
        holdings = list(_HOLDINGS)
    return any(held.lost for held in holdings)


@contextlib.contextmanager
def stopping(stop: Callable[[], None] | None):
    """Call ``stop`` (once) if a lease this process holds is lost while the block runs: what cancels work
    in flight (the Pulumi CLI's update). A lease lost already raises LeaseLost at once."""
    ensure_held()
    with _HOLDINGS_LOCK:
        holdings = list(_HOLDINGS)
    if stop is None or not holdings:
        yield
        return
    once = threading.Lock()

    def stop_once() -> None:
        if once.acquire(blocking=False):
            stop()
    for held in holdings:
        with held._lock:
            held._on_lost.append(stop_once)
    try:
        yield
    finally:
        for held in holdings:
            with held._lock:
                held._on_lost.remove(stop_once)


def acquire(store: SharedStore, cluster: str, command: str, holder: str, *, wait: bool = True,
            timeout_s: float = 3600.0, on_wait: Callable[[Lease], None] | None = None,
            expires_s: float | None = None, heartbeat_s: float | None = None, sleep=time.sleep,
            clock=time.monotonic) -> Held:
    """Take the cluster's lease: at once when it is free, or once this reader has seen it unchanged for
    the expiry (its holder stopped beating); meanwhile wait (telling ``on_wait`` who holds it, once per
    holder) or, ``wait=False``, fail naming the holder as soon as it shows it is alive: its heartbeat looks
    recent, or it beat while watched (a lease that only looks stale is watched for the expiry first, and
    ``on_wait`` told)."""
    expires_s = EXPIRES_S if expires_s is None else expires_s
    heartbeat_s = HEARTBEAT_S if heartbeat_s is None else heartbeat_s
    deadline = clock() + timeout_s
    token = uuid.uuid4().hex
    seen = _Seen(clock)
    told = None
    written_at = 0.0
    refused = 0  # creates refused in a row while nothing could be read: a store that is not answering sense
    while True:
        cur = read(store, cluster)
        if cur is not None and cur[0].token == token:  # ours: the write landed (maybe its answer was lost)
            return Held(store, cur[0], cur[1], renewed_at=written_at, heartbeat_s=heartbeat_s, expires_s=expires_s)
        now = _now()
        mine = Lease(cluster, holder, socket.gethostname(), os.getpid(), command, _stamp(now),
                     _stamp(now, "microseconds"), token)
        if cur is None:
            written_at = holder_clock()
            refused = 0 if store.create(key(cluster), _body(mine)) else refused + 1
            if refused >= 5:
                raise StoreError(f"the team store {store.url} refuses to create {key(cluster)} and shows none there",
                                 "check the store (its bucket or container, its permissions) and run it again")
            continue  # read again: ours, or another writer's who got there first
        lease, version = cur
        unchanged = seen.unchanged_s(version)
        alive = running_here(lease.host, lease.pid)  # on this host, a holder whose process runs is live
        if unchanged >= expires_s and not alive:
            written_at = holder_clock()
            store.replace(key(cluster), _body(mine), version)  # its holder stopped beating: take it over
            continue
        if (not wait and (seen.moved or alive or not lease.looks_stale(_now(), expires_s))) or clock() >= deadline:
            raise LeaseHeld(f"cluster {cluster} is held by {lease.words()}",
                            "wait for it to finish (leave out --no-wait), or, if that process is gone, "
                            f"`gpufleet unlock {cluster}` (it breaks a lease that stays unchanged for "
                            f"{expires_s:.0f} s)")
        if on_wait and told != lease.token:
            on_wait(lease)
            told = lease.token
        sleep(max(0.0, min(WAIT_POLL_S, WAIT_POLL_S if alive else expires_s - unchanged, deadline - clock())))


@contextlib.contextmanager
def held_here(folder: Path, cluster: str, command: str, *, wait: bool = False, timeout_s: float = 3600.0,
              on_wait: Callable[[str], None] | None = None, sleep=time.sleep, clock=time.monotonic):
    """Alone (no team store, so no lease), this machine's hold of the cluster for ``command`` (a pass of `heal` or
    `scale`, a whole `up`, `down` or `configure`): an exclusive flock(2) of ``<folder>/<cluster>.lock``, as the node
    agent's run takes its own (clouds/node_agent.py run). Another process holding it: LeaseHeld (exit 4, as a lease
    held), nothing done; with ``wait``, tried again every WAIT_POLL_S until ``timeout_s`` (``on_wait`` told who holds
    it, once per holder), as a lease is waited for. The kernel lets it go when the process ends, killed or not:
    nothing is left to break by hand."""
    path = folder / f"{cluster}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as e:
        raise GpufleetError(f"cannot open {path} to hold cluster {cluster}: {e.strerror}",
                            "set XDG_DATA_HOME to a folder of yours") from None
    try:
        deadline, told = clock() + timeout_s, None
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = shown(os.pread(fd, 300, 0).decode(errors="replace").strip() or "another process")
                if not wait or clock() >= deadline:
                    raise LeaseHeld(f"cluster {cluster} is held on this machine by {holder} ({path})",
                                    "wait for it to finish: one command or pass at a time (cron's `--once` beside a "
                                    "`--watch` skips its turn; `up`, `down` and `configure` wait unless --no-wait)"
                                    ) from None
                if on_wait and told != holder:
                    on_wait(holder)
                    told = holder
                sleep(max(0.0, min(WAIT_POLL_S, deadline - clock())))
            except OSError as e:  # a file system without flock(2) (NFS mounted nolock answers ENOLCK)
                raise GpufleetError(f"cannot lock {path} to hold cluster {cluster}: {e.strerror}",
                                    "set XDG_DATA_HOME to a folder on a local disk") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"`{command}` (pid {os.getpid()}, since {_stamp(_now())})".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def delete_not_a_lease(store: SharedStore, cluster: str) -> bool:
    """Delete the cluster's lease object if it is not a lease (`unlock --force`); whether one was deleted."""
    while True:
        got = store.read(key(cluster))
        if got is None or read_body(got[0]) is not None:
            return False
        if store.delete(key(cluster), got[1]):
            return True


def unlock(store: SharedStore, cluster: str, *, force: bool = False, expires_s: float | None = None,
           on_watch: Callable[[Lease, float], None] | None = None, sleep=time.sleep,
           clock=time.monotonic) -> Lease | None:
    """Break the cluster's lease: one this reader has seen unchanged for the expiry (``on_watch`` is told
    it is watching, and for how long), or, ``force``, any. The lease broken, or None when there was none."""
    expires_s = EXPIRES_S if expires_s is None else expires_s
    seen = _Seen(clock)
    while True:
        cur = read(store, cluster)
        if cur is None:
            return None
        lease, version = cur
        if not force and running_here(lease.host, lease.pid):
            raise InputError(f"the lease of {cluster} is live: held by {lease.words()}, whose process still runs on "
                             "this host", f"wait for it to finish, or stop process {lease.pid}; --force breaks the "
                             "lease anyway (its command may still be changing the cluster)")
        unchanged = seen.unchanged_s(version)
        if seen.moved and not force:
            raise InputError(f"the lease of {cluster} is live: held by {lease.words()}, which renewed it while watched",
                             "wait for it to finish; --force breaks it anyway (the holder may still be changing "
                             "the cluster)")
        if force or unchanged >= expires_s:
            if store.delete(key(cluster), version):
                return lease
            continue  # it changed as it was being broken: look again
        if on_watch and unchanged == 0.0:
            on_watch(lease, expires_s)
        sleep(max(0.0, min(WAIT_POLL_S, expires_s - unchanged)))

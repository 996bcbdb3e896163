"""Team mode without a server: the store a team shares, the leases on its clusters and its event log.

``gpufleet team init URL`` checks the store (reachable, writable, a bucket's versioning) and writes
the team setting; from then on `up`, `down` and `configure` hold the cluster's lease for their
whole run (``session``) and append one event each to the log, and Pulumi keeps its state in the
store. Without a team setting, ``session`` does nothing and gpufleet works alone.

Stores (``clouds.team_store``): a shared directory (``file://``), a PostgreSQL database
(``postgres://``) and a bucket through its cloud (``s3://``, ``gs://``, ``azblob://``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from gpufleet import paths
from gpufleet.clouds.team_store import open_store
from gpufleet.engine import automation
from gpufleet.errors import GpufleetError, InputError
from gpufleet.state import caller, events, leases, pulumi_locks, team_config
from gpufleet.state.registry import Registry
from gpufleet.state.shared import DirectoryStore, SharedStore, shown

PROBE = "team.json"  # what `team init` writes to prove the store writable, and reads back


who = caller.local  # the caller as the event log and leases name them


def current() -> SharedStore | None:
    """The team's store, or None alone. A store without the object `team init` writes is no team's
    (a folder whose file system is not mounted, a wrong bucket or prefix): an error, never an empty team."""
    url = team_config.url()
    if not url:
        return None
    store = open_store(url)
    if store.read(PROBE) is None:
        raise InputError(f"{store.url} is not a gpufleet team store (it has no {PROBE}, which `team init` writes)",
                         "check the URL (GPUFLEET_TEAM or `gpufleet team show`) and, on a shared file system, that it "
                         f"is mounted here; to start a new team there: gpufleet team init {store.url}")
    return store


def registry(path=None) -> Registry:
    """The registry: in team mode, the local cache of the team's clusters, kept in step with the store."""
    return Registry(path, shared=current())


@dataclass
class Init:
    url: str
    versioning: bool | None  # a bucket's object versioning; None where the store has none
    secrets_provider: str  # what encrypts the secrets in the team's Pulumi state
    warnings: list[str]
    carried: list[str]  # the clusters brought up alone, carried into the store
    moved: dict[str, str]  # cluster -> the backend its Pulumi state was moved from (left there as it was)


class NotCarried(GpufleetError):
    """A cluster brought up alone whose Pulumi state could not be moved into the team's backend: `team
    init` carries nothing then (its record in the store, with the state left behind, would make the next
    `up` create every node again)."""


def init(url: str, *, secrets_provider: str = team_config.PASSPHRASE, now: dt.datetime | None = None,
         pulumi_command=None, prompt: Callable[[], str] | None = None) -> Init:
    """Check the store (a write and a read back), carry the clusters brought up alone into it (their
    Pulumi state moved into the team's backend first: ``engine.automation.move_stack``), and make it this
    user's team store, its Pulumi state's secrets encrypted by ``secrets_provider``. A state that cannot
    be moved stops it all (``NotCarried``): nothing is carried and the setting is not written."""
    secrets_provider = team_config.check_secrets_provider(secrets_provider)
    store = open_store(url)
    now = now or dt.datetime.now(dt.timezone.utc)
    body = json.dumps({"by": who(), "at": now.isoformat(timespec="seconds")}).encode()
    cur = store.read(PROBE)
    written = store.create(PROBE, body) if cur is None else store.replace(PROBE, body, cur[1])
    back = store.read(PROBE)
    if not written or back is None or back[0] != body:
        raise GpufleetError(f"the team store {store.url} did not keep what was written to it",
                            "another `team init` may have run at the same moment: run it again")
    versioning = store.versioning(PROBE) if hasattr(store, "versioning") else None
    warnings = [] if versioning is not False else [
        f"{store.url}: the bucket does not keep object versions: a lease or event deleted or overwritten by "
        "mistake cannot be recovered (turn versioning on for the bucket)"]
    reg = Registry()
    reg.refuse_taken(store)
    backend, env = automation.backend_for(store.url)
    moves = _move_states(reg, backend, env, secrets_provider, pulumi_command, prompt)
    try:
        carried = reg.share(store, {m.cluster: backend for m, _ in moves})
    except BaseException:
        left = set(reg.alone())  # not carried: its state goes back to being only where it was
        _undo([(m, src) for m, src in moves if m.cluster in left], backend, env, pulumi_command)
        raise
    team_config.write(store.url, who(), now.isoformat(timespec="seconds"), secrets_provider)
    return Init(store.url, versioning, secrets_provider, warnings, carried, {m.cluster: src for m, src in moves})


def _move_states(reg: Registry, backend: str, env: dict[str, str], provider: str, pulumi_command,
                 prompt) -> list[tuple]:
    """The Pulumi state of each cluster brought up alone, moved into the team's ``backend`` where its record
    names another; [(automation.Moved, the backend it came from)]. The first that fails undoes the others
    and stops, named, with the ways out."""
    records = [reg.get(name) for name in reg.alone()]
    todo = [r for r in records if r.backend is not None and r.backend != backend]
    moves: list[tuple] = []
    for rec in todo:
        try:
            moved = automation.move_stack(rec.name, rec.backend, backend, target_env=env, provider=provider,
                                          pulumi_command=pulumi_command, prompt=prompt)
        except GpufleetError as e:
            _undo(moves, backend, env, pulumi_command)
            raise NotCarried(f"the Pulumi state of cluster {rec.name} ({team_config.redacted(rec.backend)}) could not be "
                             f"moved into the team's backend {backend}: {e.message}",
                             "nothing was carried and this machine is not in the team yet: "
                             + (f"{e.hint}; then " if e.hint else "fix that, then ") + "run `gpufleet team init` "
                             "again; or take the cluster down first (`gpufleet down " + rec.name + "`)",
                             exit_code=e.exit_code) from None
        if moved is not None:
            moves.append((moved, rec.backend))
    return moves


def _undo(moves: list[tuple], backend: str, env: dict[str, str], pulumi_command) -> None:
    """Remove from the team's backend the stacks moved there now (their state is still where it came
    from); best effort: one that cannot be removed is a copy no record names."""
    for moved, _ in moves:
        if moved.created:
            with contextlib.suppress(Exception):
                automation.forget_stack(moved.cluster, backend, env=env, pulumi_command=pulumi_command)


@contextlib.contextmanager
def session(cluster: str, command: str, *, wait: bool = True, on_wait: Callable | None = None,
            on_warning: Callable[[str], None] | None = None) -> Iterator[dict]:
    """Hold ``cluster``'s lease while the block runs and log one event for it (its outcome: ok, or
    the error and its exit code, and what the block adds to the dict it is given, e.g. the launch
    price). A lease lost while the block runs stops its work (``leases.ensure_held``) and is the
    command's outcome (LeaseLost, whatever the stopped work raised); one found broken only as it is
    released fails a command that had succeeded. The release and the event never raise (``on_warning``
    hears what could not be done). No team: this machine's lock of the cluster (``leases.held_here``), the one
    `heal` and `scale` take for a pass, waited for alike (``on_wait`` told its holder's words), so that no `down`
    runs beside a heal pass that launches a replacement (review rev51f finding 6); no event."""
    store = current()
    extra: dict = {}
    if store is None:
        with leases.held_here(paths.make_dir(paths.local_lock_dir()), cluster, command, wait=wait, on_wait=on_wait):
            yield extra
        return
    me = who()  # once: the lease and the event name the same caller
    held = leases.acquire(store, cluster, command, me, wait=wait, on_wait=on_wait)
    started = dt.datetime.now(dt.timezone.utc)
    failure: BaseException | None = None
    try:
        yield extra
    except BaseException as e:
        failure = e
    lost_while_running = held.lost
    held.release()  # after the runs in flight ended: a Ctrl-C waited for Pulumi's cancel (engine.automation)
    if held.left and on_warning:
        on_warning(held.left)
    if held.lost and (failure is None or lost_while_running and not isinstance(failure, leases.LeaseLost)):
        try:
            held.check()
        except leases.LeaseLost as e:
            e.__context__, failure = failure, e
    code = 0 if failure is None else getattr(failure, "exit_code", getattr(failure, "code", 1))
    code = code if isinstance(code, int) else 1
    event = {"who": me, "host": socket.gethostname(), "command": command, "cluster": cluster,
             "outcome": "ok" if code == 0 else f"failed: {getattr(failure, 'message', None) or type(failure).__name__}"[:300],
             "exit_code": code, "seconds": round((dt.datetime.now(dt.timezone.utc) - started).total_seconds(), 1)}
    if held.lost or held.left:
        event["lease"] = held.lost_why or held.left
    try:
        leases.bounded(leases.CLEANUP_S, lambda: events.record(store, {**event, **extra}))
    except Exception as e:  # noqa: BLE001 - cleanup: the command's own outcome stands
        if on_warning:
            on_warning(f"the team's log did not get this command's event: {getattr(e, 'message', None) or e}")
    if failure is not None:
        raise failure


@dataclass
class Unlocked:
    lease: leases.Lease | None
    pulumi_locks: list[str]
    not_a_lease: bool = False  # --force deleted a lease object that was no lease


def unlock(cluster: str, *, force: bool = False, on_watch: Callable | None = None) -> Unlocked:
    """Break ``cluster``'s lease (one seen unchanged for the expiry and whose process does not run on this
    host; a live one only with ``force``, which also deletes a lease object that is no lease) and the Pulumi
    locks it guarded: those written on its host while it was held (``state.pulumi_locks``), unless it was
    stopping (its holder had lost it and was waiting for Pulumi's cancel, which may still be running).
    Pulumi's other locks are kept and named (InputError) unless ``force``; one whose process runs on this
    host is kept even so."""
    store = current()
    if store is None:
        raise InputError("no team store: leases exist only in team mode", "gpufleet team init URL")
    locks = pulumi_locks.of_stack(store, cluster)
    if not force and locks and leases.read(store, cluster) is None:
        raise _kept(cluster, locks, None)  # no lease: nothing of gpufleet's to break, Pulumi's left as found
    junk = force and leases.delete_not_a_lease(store, cluster)
    broken = leases.unlock(store, cluster, force=force, on_watch=on_watch)
    cleared, kept = [], []
    for lock in locks:
        if lock.running():
            kept.append(lock)
        elif force or (broken is not None and not broken.stopping and
                       lock.during(broken.host, broken.started, broken.heartbeat)):
            got = store.read(lock.key)
            if got is not None and store.delete(lock.key, got[1]):
                cleared.append(lock.key)
        else:
            kept.append(lock)
    if broken or cleared or junk:
        events.record(store, {"who": who(), "host": socket.gethostname(), "command": "unlock" + (" --force" if force else ""),
                              "cluster": cluster, "outcome": "ok", "exit_code": 0,
                              "broke": broken.holder if broken else "(not a lease)" if junk else None,
                              "pulumi_locks": len(cleared)})
    if kept:
        raise _kept(cluster, kept, broken)
    return Unlocked(broken, cleared, junk)


def _kept(cluster: str, locks: list, broken: leases.Lease | None) -> InputError:
    done = f"broke the lease of {cluster} held by {shown(broken.holder)}; " if broken else ""
    whose = ("as that lease's command was stopping, waiting for Pulumi to cancel" if broken and broken.stopping else
             "not written by that lease's command" if broken else "and no gpufleet lease holds the cluster")
    if all(lock.running() for lock in locks):
        return InputError(f"{done}Pulumi's lock of {cluster} was kept: its process still runs on this host:\n  "
                          + "\n  ".join(lock.words() for lock in locks),
                          "wait for it to end (a cancelled update finishes the operations in flight first)")
    return InputError(f"{done}Pulumi's lock of {cluster} was kept, {whose}: it may be a live `pulumi up` "
                      f"(if no such process runs, `gpufleet unlock {cluster} --force` clears it):\n  "
                      + "\n  ".join(lock.words() for lock in locks))


def log_store(create: bool = True) -> SharedStore | None:
    """Where events are written: the team's store, or alone this machine's log folder (``paths.local_log_dir``,
    where only `heal` writes: `up` and `down` log in team mode only); ``create`` off: None when that folder
    is not there yet (a reader makes nothing)."""
    store = current()
    if store is not None:
        return store
    folder = paths.local_log_dir().resolve()
    if not create and not folder.is_dir():
        return None
    return DirectoryStore("file://" + str(paths.make_dir(folder)))


def log(cluster: str | None = None, since: dt.datetime | None = None, skipped: dict[str, str] | None = None) -> list[dict]:
    """The events (``state.events.read``; objects that are no event are named in ``skipped``): the team's,
    or alone this machine's (`heal`'s actions)."""
    store = log_store(create=False)
    if store is None:
        raise InputError("no team store: the event log exists only in team mode (alone, `heal` logs what it does "
                         "here once it has run)", "gpufleet team init URL")
    return events.read(store, cluster, since, skipped)


@contextlib.contextmanager
def held(store: SharedStore, cluster: str, team_mode: bool, command: str, dry_run: bool = False):
    """The cluster's hold for one pass of ``command`` (`heal`, `scale`), taken without waiting (two healers, or a
    heal and an `up`, never act at once) and given back after: in team mode its lease; alone this machine's lock of
    it (``leases.held_here``: cron's `heal --once` beside a `heal --watch`). A dry run changes nothing: none taken."""
    if dry_run:
        yield
        return
    if not team_mode:
        with leases.held_here(paths.make_dir(paths.local_lock_dir()), cluster, command):
            yield
        return
    lease = leases.acquire(store, cluster, command, who(), wait=False)
    try:
        yield
    finally:
        lease.release()

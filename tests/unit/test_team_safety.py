"""Team mode keeps what it is given (issues 47 and 48): the clusters brought up alone survive `team init`
and a store that is not there (a store that does not exist is an error, never an empty team); a password
never enters the team's URL; a shared directory whose locks stay on one machine is refused; one bad or
oversized object in the store is named and skipped or refused while the rest works."""

import json
import os
from pathlib import Path

import pytest
import test_team

from gpufleet.state import mounts, shared
from gpufleet.state.mounts import mount_of, parse
from gpufleet.state.registry import Node, Registry
from gpufleet.state.shared import BadObject, DirectoryStore

from conftest import cli

store_url = test_team.store_url  # the fixture of every kind of store a team may name (test_team's)
_open = test_team._open


def _cluster(reg: Registry, name: str, provider: str = "aws", owner: str = "ops@example.com") -> None:
    where = "us-east-1" if provider == "aws" else "lab"
    reg.record(name=name, stack=name, stack_file=f"{name}.yaml", owner=owner, expires_at="2030-01-01T00:00:00Z",
               backend=None, nodes=[Node("gpu", 0, provider, where, "p5.48xlarge", usd_per_hour=98.32)])


def _listed() -> list[str]:
    r = cli("--json", "status", "--local")
    assert r.exit_code == 0, r.output
    return [c["cluster"] for c in json.loads(r.stdout)["clusters"]]


def _a_team_store(tmp_path, name: str = "shared") -> str:
    """A store another member set up (`team init` there), holding one cluster of theirs."""
    folder = tmp_path / name
    folder.mkdir()
    url = f"file://{folder}"
    store = DirectoryStore(url)
    store.create("team.json", b'{"by": "erin@example.com"}')
    _cluster(Registry(tmp_path / "erin.db", shared=store), "erins", owner="erin@example.com")
    return url


def test_team_init_of_an_empty_store_carries_the_clusters_brought_up_alone_into_it(tmp_path):
    _cluster(Registry(), "solo")  # a $98/h cloud cluster, and a rack's, which no tag could rebuild
    _cluster(Registry(), "rack1", provider="lab")
    (tmp_path / "shared").mkdir()
    url = f"file://{tmp_path / 'shared'}"
    r = cli("team", "init", url)
    assert r.exit_code == 0, r.output
    assert "rack1, solo" in r.output, r.output  # said, by name
    assert sorted(_listed()) == ["rack1", "solo"]
    other = Registry(tmp_path / "other-machine.db", shared=DirectoryStore(url))
    assert other.get("solo").usd_per_hour == 98.32 and other.get("rack1").nodes[0].provider == "lab"


def test_a_store_folder_that_does_not_exist_is_an_error_and_the_registry_is_kept(tmp_path, monkeypatch):
    _cluster(Registry(), "solo")
    missing = tmp_path / "not-mounted" / "x"
    monkeypatch.setenv("GPUFLEET_TEAM", f"file://{missing}")
    r = cli("status", "--local")
    assert r.exit_code == 2 and str(missing) in r.output and "Traceback" not in r.output, r.output
    assert "No clusters" not in r.output
    r = cli("team", "init", f"file://{missing}")
    assert r.exit_code == 2 and str(missing) in r.output and not missing.exists(), r.output
    monkeypatch.delenv("GPUFLEET_TEAM")
    assert _listed() == ["solo"]


def test_a_folder_that_is_no_team_store_is_an_error_not_an_empty_team(tmp_path, monkeypatch):
    """A mount point whose file system is not mounted: a folder, empty."""
    _cluster(Registry(), "solo")
    (tmp_path / "mnt").mkdir()
    monkeypatch.setenv("GPUFLEET_TEAM", f"file://{tmp_path / 'mnt'}")
    r = cli("status", "--local")
    assert r.exit_code == 2 and "not a gpufleet team store" in r.output and "team init" in r.output, r.output
    monkeypatch.delenv("GPUFLEET_TEAM")
    assert _listed() == ["solo"]


def test_joining_a_team_by_its_variable_keeps_the_clusters_brought_up_alone(tmp_path, monkeypatch):
    _cluster(Registry(), "solo")
    monkeypatch.setenv("GPUFLEET_TEAM", _a_team_store(tmp_path))
    assert sorted(_listed()) == ["erins", "solo"]  # the team's, and this machine's own, which bills too
    monkeypatch.delenv("GPUFLEET_TEAM")
    assert sorted(_listed()) == ["erins", "solo"]


def test_team_init_refuses_a_local_cluster_whose_name_the_store_has_naming_it(tmp_path):
    url = _a_team_store(tmp_path)
    before = DirectoryStore(url).read("clusters/erins.json")
    _cluster(Registry(), "erins", owner="me@example.com")  # brought up alone, under a name the team uses
    _cluster(Registry(), "solo")
    r = cli("team", "init", url)
    assert r.exit_code == 2 and "erins" in r.output and "Traceback" not in r.output, r.output
    assert DirectoryStore(url).read("clusters/erins.json") == before
    assert DirectoryStore(url).read("clusters/solo.json") is None  # nothing carried when one cannot be
    assert not (tmp_path / "xdg" / "gpufleet" / "team.json").exists()


# --- a password in the team's URL (issue 48, item 4) ----------------------------------------------------


def test_a_password_in_the_team_url_is_refused_and_never_printed_nor_stored(postgres, tmp_path, monkeypatch):
    url = postgres.replace("postgres@", "postgres:s3cret-pw@") + "?table=t_pw"
    r = cli("team", "init", url)
    assert r.exit_code == 2 and "PGPASSWORD" in r.output and ".pgpass" in r.output, r.output
    assert "s3cret-pw" not in r.output and not (tmp_path / "xdg" / "gpufleet" / "team.json").exists()
    monkeypatch.setenv("GPUFLEET_TEAM", url)
    r = cli("status", "--local")
    assert r.exit_code == 2 and "s3cret-pw" not in r.output and "Traceback" not in r.output, r.output


@pytest.mark.parametrize("query", ["password=s3cret-pw&sslmode=disable", "pass%77ord=s3cret-pw",
                                   "sslmode=disable&sslpassword=s3cret-pw"])
def test_a_password_in_the_urls_query_is_refused_and_never_printed_nor_stored(query, postgres, tmp_path, monkeypatch):
    """libpq reads its parameters from the URL's query too (percent-decoded), a password among them: the
    URL then opens the database (the session's real PostgreSQL, its role given that password) and would
    carry it into the team setting, every record's backend and Pulumi's URL. Refused like a password in
    the user-info, and never printed."""
    from psycopg.conninfo import conninfo_to_dict

    url = f"{postgres}?{query}&table=t_pwq"
    assert "s3cret-pw" in conninfo_to_dict(f"{postgres}?{query}").values()  # what libpq takes from it
    r = cli("team", "init", url)
    assert r.exit_code == 2 and "PGPASSWORD" in r.output and "the URL carries" in r.output, r.output
    assert "s3cret-pw" not in r.output and not (tmp_path / "xdg" / "gpufleet" / "team.json").exists()
    monkeypatch.setenv("GPUFLEET_TEAM", url)
    r = cli("status", "--local")
    assert r.exit_code == 2 and "s3cret-pw" not in r.output and "Traceback" not in r.output, r.output


def test_the_team_setting_is_the_users_alone_and_one_with_a_password_is_never_printed(postgres, tmp_path):
    old = os.umask(0o022)
    try:
        r = cli("team", "init", postgres + "?table=t_mode")
    finally:
        os.umask(old)
    assert r.exit_code == 0, r.output
    setting = tmp_path / "xdg" / "gpufleet" / "team.json"
    assert setting.stat().st_mode & 0o777 == 0o600
    # a setting an older gpufleet wrote, with the password in it
    setting.write_text(json.dumps({"url": postgres.replace("postgres@", "postgres:s3cret-pw@")}))
    r = cli("team", "show")
    assert r.exit_code == 2 and "s3cret-pw" not in r.output and "postgres:***@" in r.output, r.output


# --- what `team init` says of a URL it cannot use (issue 47, item 10) ------------------------------------


def test_a_bucket_url_without_a_bucket_is_bad_input_said_plainly():
    r = cli("team", "init", "s3://")
    assert r.exit_code == 2 and "'s3://' names no bucket" in r.output and "s3::" not in r.output, r.output


def test_an_s3_store_without_credentials_says_so_and_not_to_run_it_again(tmp_path):
    """No credentials anywhere boto3 looks (the tests' own isolation: no variables, no files, no instance
    metadata): botocore's NoCredentialsError, before any request."""
    r = cli("team", "init", "s3://team-bucket/p")
    assert r.exit_code == 2 and "no credentials" in r.output and "aws configure" in r.output, r.output
    assert "run it again" not in r.output and "Traceback" not in r.output


# --- a shared directory whose locks stay on one machine (issue 48, item 13) --------------------------------

# /proc/self/mountinfo lines as the kernel writes them for each mount (proc(5)); the options are those
# fs/nfs/super.c (nfs_show_mount_options) and Lustre's ll_show_options print
NFS3_NOLOCK = ("1234 25 0:52 / {point} rw,relatime shared:600 - nfs 10.0.0.5:/export/shared rw,vers=3,rsize=1048576,"
               "wsize=1048576,namlen=255,hard,nolock,proto=tcp,timeo=600,retrans=2,sec=sys,mountaddr=10.0.0.5,"
               "mountvers=3,mountport=20048,mountproto=tcp,local_lock=all,addr=10.0.0.5")
NFS4 = ("1235 25 0:53 / {point} rw,relatime shared:601 - nfs4 10.0.0.5:/shared rw,vers=4.2,rsize=1048576,"
        "wsize=1048576,namlen=255,hard,proto=tcp,timeo=600,retrans=2,sec=sys,clientaddr=10.0.0.7,"
        "local_lock={local_lock},addr=10.0.0.5")
LUSTRE = "88 25 0:60 / {point} rw,relatime shared:50 - lustre 10.0.0.2@o2ib:/scratch rw,{flock}lazystatfs"
GFS2 = "90 25 253:3 / {point} rw,relatime shared:51 - gfs2 /dev/mapper/vg-shared rw,{flock}"


@pytest.mark.parametrize("line,refused", [
    (NFS3_NOLOCK, "local_lock=all, nolock"),
    (NFS4.replace("{local_lock}", "flock"), "local_lock=flock"),
    (NFS4.replace("{local_lock}", "all"), "local_lock=all"),
    (NFS4.replace("{local_lock}", "posix"), None),  # POSIX locks local; flock(2) still goes to the server
    (NFS4.replace("{local_lock}", "none"), None),
    (LUSTRE.replace("{flock}", "flock,"), None),
    (LUSTRE.replace("{flock}", "localflock,"), "localflock"),
    (LUSTRE.replace("{flock}", ""), "noflock"),
    (GFS2.replace("{flock}", "localflocks"), "localflocks"),
    (GFS2.replace("{flock}", "noatime"), None),
])
def test_the_mount_options_that_keep_locks_on_one_machine_are_told_apart(line, refused):
    point = Path("/mnt/shared dir")
    mounts = parse(line.replace("{point}", "/mnt/shared\\040dir"))
    assert mount_of(point / "gpufleet", mounts).point == point
    assert mount_of(point / "gpufleet", mounts).local_locks() == refused


# what the kernel shows for file systems whose flock(2) holds on this machine alone (a FUSE file system
# that does not implement it: linux fs/fuse/file.c; BeeGFS without tuneUseGlobalFileLocks), or of which
# gpufleet knows nothing (SMB); and for local disks and CephFS, whose locks are fine
FUSE_GCSFUSE = "301 25 0:70 / {point} rw,nosuid,nodev,relatime shared:80 - fuse.gcsfuse team-bucket rw,user_id=0,group_id=0"
FUSE_SSHFS = "302 25 0:71 / {point} rw,nosuid,nodev,relatime shared:81 - fuse.sshfs alice@nas:/shared rw,user_id=0,group_id=0"
BEEGFS = "303 25 0:72 / {point} rw,relatime shared:82 - beegfs beegfs_nodev rw,cfgFile=/etc/beegfs/beegfs-client.conf"
CIFS = "304 25 0:73 / {point} rw,relatime shared:83 - cifs //nas/shared rw,vers=3.1.1,cache=strict,username=alice"
CEPH = "305 25 0:74 / {point} rw,relatime shared:84 - ceph 10.0.0.9:6789:/ rw,name=team,acl"
EXT4 = "306 25 8:3 / {point} rw,relatime shared:85 - ext4 /dev/sda3 rw"


@pytest.mark.parametrize("line,refused", [
    (FUSE_GCSFUSE, "a FUSE file system"), (FUSE_SSHFS, "a FUSE file system"), (BEEGFS, "tuneUseGlobalFileLocks"),
    (CIFS, "does not know"), (CEPH, None), (EXT4, None), (NFS4.replace("{local_lock}", "none"), None),
    (NFS3_NOLOCK, "with local_lock=all, nolock"),
])
def test_a_store_may_be_only_where_flock_is_known_to_hold_across_machines(line, refused):
    m = mount_of(Path("/mnt/shared/gpufleet"), parse(line.replace("{point}", "/mnt/shared")))
    assert (refused or "") in (m.refused() or "") and (m.refused() is None) == (refused is None)


def _mountinfo(tmp_path, monkeypatch, line: str, point: Path) -> None:
    """This machine's mounts, and one more at ``point`` as ``line`` describes it."""
    crafted = tmp_path / "mountinfo"
    crafted.write_text(mounts.MOUNTINFO.read_text() + line.replace("{point}", str(point)) + "\n")
    monkeypatch.setattr(mounts, "MOUNTINFO", crafted)


@pytest.mark.parametrize("line,said", [(NFS3_NOLOCK, "nolock"), (FUSE_GCSFUSE, "a FUSE file system"),
                                       (BEEGFS, "tuneUseGlobalFileLocks"), (CIFS, "does not know")],
                         ids=["nfs-nolock", "gcsfuse", "beegfs", "cifs"])
def test_team_init_refuses_a_shared_directory_whose_locks_stay_on_this_machine(line, said, tmp_path, monkeypatch):
    (tmp_path / "shared" / "gpufleet").mkdir(parents=True)
    _mountinfo(tmp_path, monkeypatch, line, tmp_path / "shared")
    r = cli("team", "init", f"file://{tmp_path / 'shared' / 'gpufleet'}")
    assert r.exit_code == 2 and said in r.output and f"mounted at {tmp_path / 'shared'}" in r.output, r.output
    assert "Traceback" not in r.output and not (tmp_path / "xdg" / "gpufleet" / "team.json").exists()
    assert list((tmp_path / "shared" / "gpufleet").iterdir()) == []  # nothing written there


def test_a_file_system_that_cannot_flock_is_said_not_a_traceback(tmp_path, monkeypatch):
    """Lustre mounted with noflock answers flock(2) with ENOSYS (ll_file_noflock)."""
    import errno
    import fcntl

    (tmp_path / "shared").mkdir()
    url = f"file://{tmp_path / 'shared'}"
    monkeypatch.setattr(fcntl, "flock", lambda fd, op: (_ for _ in ()).throw(OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))))
    r = cli("team", "init", url)
    assert r.exit_code == 1 and "cannot be locked (Function not implemented)" in r.output and "-o flock" in r.output
    assert "internal error" not in r.output and "Traceback" not in r.output


@pytest.fixture
def tmpfs(tmp_path):
    """A real file system mounted for the test (a tmpfs; root may mount one), at a path with a space."""
    import subprocess

    point = tmp_path / "a mount"
    point.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "gpufleet-test", str(point)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield point
    finally:
        subprocess.run(["umount", str(point)], check=True)


def test_the_store_folders_own_mount_is_found_in_this_machines_mountinfo(tmpfs, tmp_path):
    (tmpfs / "gpufleet").mkdir()
    m = mount_of(tmpfs / "gpufleet", parse(mounts.MOUNTINFO.read_text()))
    assert (m.point, m.fstype, "size=4096k" in m.options) == (tmpfs, "tmpfs", True)
    assert m.local_locks() is None
    r = cli("team", "init", f"file://{tmpfs / 'gpufleet'}")
    assert r.exit_code == 0, r.output


# --- one bad object in the team's store (issue 47, items 4 and 6) ---------------------------------------


def test_every_store_refuses_an_object_over_the_cap_unread_and_named(store_url, monkeypatch):
    """Every kind of store, as the team meets it (test_team's stores), asked for an object larger than a
    store's object may be: BadObject naming it, its body not read; the small ones still read."""
    store = _open(store_url)
    assert store.create("events/big.json", b'{"at": "2026-01-01"}' + b" " * 5000)
    assert store.create("events/small.json", b'{"at": "2026-01-01"}')
    monkeypatch.setattr(shared, "MAX_OBJECT_BYTES", 4096)
    with pytest.raises(BadObject) as e:
        store.read("events/big.json")
    assert e.value.message.endswith("events/big.json is 5,020 bytes, more than the 4,096 an object of a team's store "
                                    "may be; it was not read")
    assert store.read("events/small.json")[0] == b'{"at": "2026-01-01"}'


def test_a_directory_store_asks_a_file_for_its_size_not_the_cap_and_reads_a_grown_one_whole(tmp_path, monkeypatch):
    """A read of a directory store (a heal pass makes a dozen of its log's) asks the file for its size and a byte:
    asked for the 64 MiB cap, Python's buffered read allocates all of it before it reads (64 MiB for each read of a
    small object, tests/bench/bench_heal.py's real pass). An object that grew since its size was taken is still read
    whole, up to the cap, as before."""
    store = DirectoryStore(f"file://{tmp_path}")
    assert store.create("heal/x.json", b'{"pools": {}}') and store.create("heal/grows.json", b'{"a": 1}')
    asked, real_open = [], open

    class Spy:  # the file read() is asked of, passed through
        def __init__(self, path, mode):
            self.path, self.f = path, real_open(path, mode)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def fileno(self):
            return self.f.fileno()

        def read(self, n=-1):
            asked.append(n)
            if Path(self.path).name == "grows.json" and len(asked) == 1:
                with real_open(self.path, "ab") as more:  # a writer appends after the size was taken
                    more.write(b" " * 10)
            return self.f.read(n)

    monkeypatch.setattr(shared, "open", Spy, raising=False)
    assert store.read("heal/x.json")[0] == b'{"pools": {}}'
    assert asked == [len(b'{"pools": {}}') + 1], asked
    asked.clear()
    assert store.read("heal/grows.json")[0] == b'{"a": 1}' + b" " * 10  # whole, as before


def _team(tmp_path, monkeypatch) -> DirectoryStore:
    (tmp_path / "shared").mkdir()
    store = DirectoryStore(f"file://{tmp_path / 'shared'}")
    store.create("team.json", b"{}")
    monkeypatch.setenv("GPUFLEET_TEAM", store.url)
    return store


def test_a_broken_budgets_object_is_named_and_refused_and_the_rest_works(tmp_path, monkeypatch):
    store = _team(tmp_path, monkeypatch)
    store.create("budgets.json", b"{broken")
    for args in (["budget", "list"], ["budget", "set", "ml", "--usd-per-month", "100"]):
        r = cli(*args)
        assert r.exit_code == 1 and f"{store.url}/budgets.json is not JSON" in r.output, r.output
        assert "internal error" not in r.output and "Traceback" not in r.output
    assert store.read("budgets.json")[0] == b"{broken"  # never written over: the team's budgets may be in it
    r = cli("status", "--local")  # what only shows budgets goes on without the team's, saying so
    assert r.exit_code == 0 and "the team's budgets are left out" in r.output and "budgets.json" in r.output, r.output
    store.replace("budgets.json", b'{"budgets": [{"name": "ml", "usd_per_month": -5}]}', store.read("budgets.json")[1])
    r = cli("budget", "list")
    assert r.exit_code == 1 and "has a budget that is not one ('ml'" in r.output, r.output


def test_a_junk_event_is_left_out_of_the_log_by_name_and_the_others_shown(tmp_path, monkeypatch):
    from gpufleet.state import events

    store = _team(tmp_path, monkeypatch)
    events.record(store, {"who": "alice@example.com", "command": "up", "cluster": "c1", "outcome": "ok"})
    store.create("events/20260101T000000.000000Z-junk.json", b"junk")
    store.create("events/20260101T000001.000000Z-list.json", b"[1, 2]")
    r = cli("--json", "log")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [e["who"] for e in doc["events"]] == ["alice@example.com"]
    assert doc["skipped"] == {"events/20260101T000000.000000Z-junk.json": "is not JSON (Expecting value: line 1 column "
                                                                          "1 (char 0))",
                              "events/20260101T000001.000000Z-list.json": "is not a JSON object (a list)"}
    r = cli("log")
    assert r.exit_code == 0 and "alice@example.com" in r.output and "-junk.json in the team's store is left out" in r.output


def test_a_junk_cluster_record_is_named_and_its_cached_copy_kept(tmp_path, monkeypatch):
    store = _team(tmp_path, monkeypatch)
    _cluster(Registry(shared=store), "good")
    _cluster(Registry(shared=store), "spoilt")
    got = store.read("clusters/spoilt.json")
    store.replace("clusters/spoilt.json", got[0][:40], got[1])  # cut short
    store.create("clusters/liar.json", json.dumps({"name": "good", "stack": "x", "stack_file": "x", "owner": "x",
                                                   "expires_at": "x", "state": "up"}).encode())
    r = cli("--json", "status", "--local")
    assert r.exit_code == 1, r.output  # shown, and said incomplete
    doc = json.loads(r.stdout)
    assert sorted(c["cluster"] for c in doc["clusters"]) == ["good", "spoilt"]  # spoilt: this machine's copy
    assert doc["unread"][f"{store.url}/clusters/spoilt.json"].startswith("is not JSON")
    assert doc["unread"][f"{store.url}/clusters/liar.json"] == "names cluster 'good', not 'liar' as its key does"
    with pytest.raises(BadObject, match="clusters/spoilt.json is not JSON"):  # never written over unseen
        Registry(shared=store).set_state("spoilt", "draining")
    Registry(shared=store).remove("spoilt")  # taken down: its object goes, whatever it holds
    assert store.read("clusters/spoilt.json") is None


# --- the SDK floor for S3's conditional writes (issue 48, item 12) ----------------------------------------


def test_the_boto3_floor_is_the_first_release_with_s3s_conditional_writes():
    """pyproject's floor for boto3 (the aws and test extras) is the release the S3 store names as the
    first whose model has every condition it sends (its source is said there)."""
    import tomllib

    from packaging.requirements import Requirement

    from gpufleet.clouds.aws.objects import CONDITIONAL_WRITES

    from conftest import ROOT

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra in ("aws", "test"):
        (boto3,) = [Requirement(r) for r in extras[extra] if Requirement(r).name == "boto3"]
        assert str(boto3.specifier) == f">={CONDITIONAL_WRITES}", (extra, str(boto3.specifier))


@pytest.mark.slow
def test_the_floor_release_on_pypi_has_every_condition_and_the_one_before_it_lacks_one(tmp_path):
    """The floor held against the real artifacts: botocore's wheels of the floor release and of the release
    before it, downloaded from the package index, and the S3 model each carries read as the store reads
    its own (the conditions CONDITIONS names)."""
    import gzip
    import subprocess
    import sys
    import zipfile

    from gpufleet.clouds.aws.objects import CONDITIONAL_WRITES, CONDITIONS

    major, minor, patch = map(int, CONDITIONAL_WRITES.split("."))
    lacking = {}
    for version in (CONDITIONAL_WRITES, f"{major}.{minor}.{patch - 1}"):
        out = tmp_path / version
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                        "-d", str(out), f"botocore=={version}"], check=True, timeout=600)
        (wheel,) = out.glob("botocore-*.whl")
        with zipfile.ZipFile(wheel) as z:
            (name,) = [n for n in z.namelist() if n.startswith("botocore/data/s3/2006-03-01/service-2.json")]
            raw = z.read(name)
        model = json.loads(gzip.decompress(raw) if name.endswith(".gz") else raw)
        lacking[version] = [f"{op} {member}" for op, members in CONDITIONS.items() for member in members
                            if member not in model["shapes"][model["operations"][op]["input"]["shape"]]["members"]]
    assert lacking[CONDITIONAL_WRITES] == [] and lacking[f"{major}.{minor}.{patch - 1}"], lacking


def _s3_model_without(tmp_path, op: str, member: str):
    """A boto3 session whose S3 model is botocore's own less one parameter (as an older release's), found
    first on the loader's search path."""
    import boto3
    import botocore.session
    from botocore.loaders import Loader

    model = Loader().load_service_model("s3", "service-2")
    del model["shapes"][model["operations"][op]["input"]["shape"]]["members"][member]
    folder = tmp_path / "models" / "s3" / model["metadata"]["apiVersion"]
    folder.mkdir(parents=True)
    (folder / "service-2.json").write_text(json.dumps(model))
    core = botocore.session.Session()
    core.get_component("data_loader").search_paths.insert(0, str(tmp_path / "models"))
    return boto3.session.Session(botocore_session=core, region_name="us-east-1")


@pytest.mark.parametrize("op,member", [("PutObject", "IfMatch"), ("PutObject", "IfNoneMatch"),
                                       ("DeleteObject", "IfMatch")])
def test_an_s3_store_on_a_botocore_without_a_condition_is_refused_naming_the_floor(op, member, tmp_path, aws):
    import boto3
    import botocore

    from gpufleet.clouds.aws.objects import CONDITIONAL_WRITES, Shared
    from gpufleet.errors import GpufleetError

    boto3.client("s3").create_bucket(Bucket="team-store")
    assert Shared("s3://team-store/p").create("a", b"1")  # this botocore has them all
    with pytest.raises(GpufleetError) as e:
        Shared("s3://team-store/p", session=_s3_model_without(tmp_path, op, member))
    assert e.value.exit_code == 2 and f"botocore {botocore.__version__}" in e.value.message
    assert f"{op} {member}" in e.value.message and f"boto3>={CONDITIONAL_WRITES}" in e.value.hint


def test_a_shared_directorys_objects_are_the_teams_to_read_and_no_one_elses(tmp_path):
    """The team shares a directory through its group: each object is readable by the group whatever the
    writer's umask lets through to it, and by no one else (the store holds each cluster's munge key)."""
    (tmp_path / "shared").mkdir()
    store = DirectoryStore(f"file://{tmp_path / 'shared'}")
    old = os.umask(0o022)
    try:
        store.create("slurm/c1/munge.key", b"k" * 32)
    finally:
        os.umask(old)
    assert (tmp_path / "shared" / "slurm" / "c1" / "munge.key").stat().st_mode & 0o777 == 0o640


def _lease(**fields) -> bytes:
    import datetime as dt

    now = dt.datetime.now(dt.timezone.utc)
    return json.dumps({"cluster": "demo", "holder": "mallory@example.com", "host": "ws7", "pid": 4242, "command": "up",
                       "started": now.isoformat(timespec="seconds"), "heartbeat": now.isoformat(timespec="microseconds"),
                       "token": "t0", **fields}).encode()


@pytest.mark.parametrize("junk", [b"not json", b'{"holder": 5}', _lease(heartbeat="yesterday"), _lease(pid="4242")],
                         ids=["not-json", "no-lease", "no-time", "pid-text"])
def test_a_lease_object_that_is_no_lease_is_named_and_unlock_force_deletes_it(junk, tmp_path, monkeypatch):
    """A command meets a lease object that is not a lease: it names it and says `unlock --force` deletes it,
    and that is what `unlock --force` does (it used to answer with the same hint, and leave the object)."""
    from gpufleet.fleet import team

    store = _team(tmp_path, monkeypatch)
    store.create("leases/demo.json", junk)
    for args in (["down", "demo", "--yes", "--no-wait"], ["unlock", "demo"]):
        r = cli(*args)
        assert r.exit_code == 1 and "is not a gpufleet lease" in r.output, r.output
        assert "gpufleet unlock demo --force" in r.output and "Traceback" not in r.output
    r = cli("unlock", "demo", "--force")
    assert r.exit_code == 0 and "which was not a gpufleet lease" in r.output, r.output
    assert store.read("leases/demo.json") is None
    assert [(e["command"], e["broke"]) for e in team.log("demo")] == [("unlock --force", "(not a lease)")]


def test_words_from_the_store_reach_the_terminal_without_escape_sequences(tmp_path, monkeypatch):
    """A lease and an event written by someone who can write the store: their words are shown with every
    control character (terminal escapes, a bidirectional override) and Rich's markup replaced by ?."""
    from gpufleet.state import events

    store = _team(tmp_path, monkeypatch)
    evil = "\x1b]0;owned\x07mallory\x1b[2J[bold]@example.com"
    store.create("leases/demo.json", _lease(holder=evil, host="ws7\x1b[31m", command="up\u202e"))
    events.record(store, {"who": evil, "command": "up\u202e", "cluster": "demo", "outcome": "failed: \x1b[31mred"})
    for args in (["down", "demo", "--yes", "--no-wait"], ["log"]):
        r = cli(*args)
        assert "mallory" in r.output and "\x1b" not in r.output and "\u202e" not in r.output, repr(r.output)
        assert "[bold]" not in r.output
    assert cli("down", "demo", "--yes", "--no-wait").exit_code == 4


@pytest.fixture(params=["azblob"])
def azblob_url(request, tmp_path, monkeypatch):
    """A container in Azurite (test_team's store of that kind)."""
    return test_team._new_store(request, tmp_path, monkeypatch)


def test_a_blob_container_that_does_not_exist_is_said_not_taken_for_a_lost_race(azblob_url):
    """Blob storage answers 404 ContainerNotFound for a container that is not there and 404 BlobNotFound
    for a blob that is not (learn.microsoft.com/rest/api/storageservices/blob-service-error-codes; Azurite
    answers the same): only the second is a race lost. `team init` on a mistyped container used to say
    "run it again", and a lease's acquire would go round create and read without end."""
    from gpufleet.errors import InputError
    from gpufleet.state import leases

    missing = azblob_url.replace("/team-", "/mistyped-")
    r = cli("team", "init", missing)
    assert r.exit_code == 2 and "its container" in r.output and "does not exist" in r.output, r.output
    assert "run it again" not in r.output and "Traceback" not in r.output
    with pytest.raises(InputError, match="does not exist"):
        leases.acquire(_open(missing), "c1", "up", "x@ci", wait=False)
    assert _open(azblob_url).read("leases/c1.json") is None  # a blob that is not there: None, as before

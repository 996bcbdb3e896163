"""The registry survives: damaged, truncated, foreign and newer files give a clear error naming the
file and the way out (and are left as they are); older registries migrate; several processes at
once never see "database is locked" or lose a row."""

import multiprocessing as mp
import sqlite3

import pytest

from gpufleet.state.registry import SCHEMA_VERSION, Node, Registry, RegistryError

from conftest import cli


def _record(reg, name, nodes=2, state="up"):
    return reg.record(name=name, stack="s", stack_file="s.yaml", owner="ops", expires_at="2026-01-01T00:00:00Z",
                      backend=None, nodes=[Node("p", i, "aws", "us-east-1", "p5.48xlarge", usd_per_hour=98.32)
                                           for i in range(nodes)], state=state)


def _damaged(tmp_path):
    good = tmp_path / "good.db"
    reg = Registry(good)
    for i in range(300):
        _record(reg, f"c{i}", nodes=10)
    data = good.read_bytes()
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE clusters (id INTEGER, what TEXT)")
    newer = tmp_path / "newer.db"
    with sqlite3.connect(newer) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 7}")
    files = {"garbage": b"this is not a database " * 200, "truncated": data[: len(data) // 3]}
    for name, content in files.items():
        (tmp_path / f"{name}.db").write_bytes(content)
    return {"garbage": tmp_path / "garbage.db", "truncated": tmp_path / "truncated.db", "foreign": foreign,
            "newer": newer}


@pytest.mark.parametrize("kind", ["garbage", "truncated", "foreign", "newer"])
def test_a_bad_registry_file_is_named_with_the_way_out_and_left_alone(kind, tmp_path, monkeypatch):
    path = _damaged(tmp_path)[kind]
    before = path.read_bytes()
    with pytest.raises(RegistryError) as e:
        Registry(path)
    assert str(path) in e.value.message and "registry rebuild" in e.value.hint
    monkeypatch.setenv("GPUFLEET_REGISTRY", str(path))
    for cmd in (["status", "--local"], ["down", "some-cluster", "--yes"]):
        r = cli(*cmd)
        assert r.exit_code == 1 and str(path) in r.output and "Traceback" not in r.output, (cmd, r.output)
    assert path.read_bytes() == before
    if kind == "newer":
        assert "newer gpufleet" in e.value.message


def test_a_registry_from_before_schema_versions_is_migrated_with_its_rows(tmp_path):
    """The first registries had no version and no `locations` column."""
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.executescript("""
            CREATE TABLE clusters (name TEXT PRIMARY KEY, stack TEXT NOT NULL, stack_file TEXT NOT NULL,
                owner TEXT NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL, expires_at TEXT NOT NULL,
                backend TEXT, state TEXT NOT NULL, usd_per_hour REAL);
            CREATE TABLE nodes (cluster TEXT NOT NULL REFERENCES clusters(name) ON DELETE CASCADE, pool TEXT NOT NULL,
                idx INTEGER NOT NULL, provider TEXT NOT NULL, location TEXT NOT NULL, zone TEXT, machine TEXT NOT NULL,
                node_id TEXT, private_ip TEXT, ssh_endpoint TEXT, usd_per_hour REAL, launched_at TEXT NOT NULL,
                PRIMARY KEY (cluster, pool, idx));
            CREATE TABLE host_status (cluster TEXT NOT NULL REFERENCES clusters(name) ON DELETE CASCADE,
                pool TEXT NOT NULL, idx INTEGER NOT NULL, address TEXT NOT NULL, state TEXT NOT NULL, digest TEXT,
                facts TEXT, detail TEXT, updated_at TEXT NOT NULL, PRIMARY KEY (cluster, pool, idx));
            INSERT INTO clusters VALUES ('old', 's', 's.yaml', 'ops', '2025-01-01T00:00:00Z', '2025-01-01T00:00:00Z',
                                        '2025-01-02T00:00:00Z', NULL, 'up', 21.96);
            INSERT INTO nodes VALUES ('old', 'p', 0, 'aws', 'us-east-1', NULL, 'p4d.24xlarge', 'i-1', '10.0.0.4',
                                      NULL, 21.96, '2025-01-01T00:00:00Z');
        """)
    reg = Registry(path)
    rec = reg.get("old")
    assert rec.nodes[0].node_id == "i-1" and rec.locations == [] and rec.clouds == {"aws": ["us-east-1"]}
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    _record(reg, "new")
    assert [c.name for c in reg.list()] == ["old", "new"]


WORKERS, ROUNDS = 6, 40


def _worker(args):
    path, w = args
    reg = Registry(path)
    for i in range(ROUNDS):
        _record(reg, f"w{w}-c{i}", nodes=3)
        reg.set_hosts("shared", {("rack", w * ROUNDS + i): {"address": f"10.0.{w}.{i}", "state": "configured"}})
        reg.set_state(f"w{w}-c{i}", "draining")
        assert reg.get(f"w{w}-c{i}").state == "draining"
        reg.list()
        if i % 2:
            assert reg.remove(f"w{w}-c{i}")
    return w


@pytest.mark.slow
def test_parallel_processes_never_see_a_locked_database_nor_lose_a_row(tmp_path):
    path = tmp_path / "registry.db"
    _record(Registry(path), "shared", nodes=0)
    with mp.get_context("fork").Pool(WORKERS) as pool:
        assert sorted(pool.map(_worker, [(path, w) for w in range(WORKERS)])) == list(range(WORKERS))
    reg = Registry(path)
    names = {c.name for c in reg.list()}
    assert names == {"shared"} | {f"w{w}-c{i}" for w in range(WORKERS) for i in range(0, ROUNDS, 2)}
    assert all(len(reg.get(n).nodes) == 3 for n in names - {"shared"})
    assert len(reg.hosts("shared")) == WORKERS * ROUNDS


def _pulumis(reg, nodes):
    """What `up` records: Pulumi's node list as its state has it."""
    return reg.record(name="hl", stack="hl", stack_file="", owner="ops", expires_at="2099-01-01T00:00:00Z",
                      backend=None, nodes=nodes)


def test_a_replacement_outlives_pulumis_list_on_every_machine_of_a_team(tmp_path):
    """`heal` replaced a node, then its stand-in, on one machine; another machine of the team (the store's copy)
    records Pulumi's list, which names the first node still: it records the last stand-in, with its own launch
    time; a replacement written into the store in another shape is not a record to use."""
    import json

    from gpufleet.state.shared import DirectoryStore

    (tmp_path / "team").mkdir()
    store = DirectoryStore(f"file://{tmp_path / 'team'}")
    mine = Registry(tmp_path / "mine.db", shared=store)
    pulumi = [Node("gpu", i, "aws", "us-east-1", "g6.12xlarge", node_id=f"i-{i}", launched_at="2026-01-01T00:00:00Z")
              for i in range(2)]
    _pulumis(mine, pulumi)
    b = mine.replace_node("hl", pulumi[0], Node("gpu", 0, "aws", "us-east-1", "g6.12xlarge", node_id="i-b"), "fleet-b")
    mine.replace_node("hl", b.nodes[0], Node("gpu", 0, "aws", "us-east-1", "g6.12xlarge", node_id="i-c",
                                             launched_at="2026-11-27T15:00:00Z"), "fleet-c")
    theirs = Registry(tmp_path / "theirs.db", shared=store)
    rec = _pulumis(theirs, pulumi)
    assert [(n.node_id, n.launched_at) for n in rec.nodes] == [("i-c", "2026-11-27T15:00:00Z"),
                                                              ("i-1", "2026-01-01T00:00:00Z")]
    assert [r.fleet_id for r in rec.replacements] == ["fleet-b", "fleet-c"]
    assert [n.node_id for n in Registry(tmp_path / "mine.db", shared=store).get("hl").nodes] == ["i-c", "i-1"]

    doc = json.loads(store.read("clusters/hl.json")[0])
    doc["replacements"][0]["node"]["node_id"] = ["i-evil"]
    store.replace("clusters/hl.json", json.dumps(doc).encode(), store.read("clusters/hl.json")[1])
    third = Registry(tmp_path / "third.db", shared=store)
    assert third.get("hl") is None and "replacement" in third.unreadable["clusters/hl.json"]


def test_a_new_node_at_a_recorded_place_has_its_own_launch_time(tmp_path):
    """An `up` that makes a pool's nodes anew (other ids at the same places): each is billed from its own launch."""
    reg = Registry(tmp_path / "r.db")
    _pulumis(reg, [Node("gpu", 0, "aws", "us-east-1", "g6.12xlarge", node_id="i-0", launched_at="2026-01-01T00:00:00Z")])
    rec = _pulumis(reg, [Node("gpu", 0, "aws", "us-east-1", "g6.12xlarge", node_id="i-9")])
    assert rec.nodes[0].launched_at > "2026-11"
    rec = _pulumis(reg, [Node("gpu", 0, "aws", "us-east-1", "g6.12xlarge", node_id="i-9",
                              launched_at="2030-01-01T00:00:00Z")])
    assert rec.nodes[0].launched_at < "2030"  # the same node keeps the launch time recorded first


def test_a_resize_outlives_pulumis_list_on_every_machine_of_a_team(tmp_path):
    """`scale` added a node and removed one on one machine; another machine of the team records Pulumi's list,
    which names the removed node and not the added one: it records the pool as `scale` left it, the added node at
    its own place (name); a resize written into the store in another shape is not a record to use."""
    import json

    from gpufleet.state.shared import DirectoryStore

    (tmp_path / "team").mkdir()
    store = DirectoryStore(f"file://{tmp_path / 'team'}")
    mine = Registry(tmp_path / "mine.db", shared=store)
    pulumi = [Node("gpu", i, "aws", "us-east-1", "g6.12xlarge", node_id=f"i-{i}", usd_per_hour=2.0) for i in range(2)]
    _pulumis(mine, pulumi)
    more = [(Node("gpu", i, "aws", "us-east-1", "g6.12xlarge", node_id=f"i-new{i}", private_ip=f"10.0.0.{i}",
                  usd_per_hour=2.0), "fleet-new") for i in (2, 3)]
    mine.resize("hl", added=more)
    rec = mine.resize("hl", removed=[pulumi[0]])
    assert [(n.idx, n.node_id) for n in rec.nodes] == [(1, "i-1"), (2, "i-new2"), (3, "i-new3")]
    assert rec.usd_per_hour == 6.0
    theirs = Registry(tmp_path / "theirs.db", shared=store)
    for reg in (theirs, mine):
        rec = _pulumis(reg, pulumi)  # an `up` from there, then from here
        assert [(n.idx, n.node_id, n.private_ip) for n in rec.nodes] == [
            (1, "i-1", None), (2, "i-new2", "10.0.0.2"), (3, "i-new3", "10.0.0.3")]

    doc = json.loads(store.read("clusters/hl.json")[0])
    doc["resizes"][0]["idx"] = "2; DROP"
    store.replace("clusters/hl.json", json.dumps(doc).encode(), store.read("clusters/hl.json")[1])
    third = Registry(tmp_path / "third.db", shared=store)
    assert third.get("hl") is None and "resize" in third.unreadable["clusters/hl.json"]


def test_an_added_vm_is_forgotten_once_its_scale_set_is_made_anew(tmp_path):
    """An Azure scale set made anew numbers its VMs from 0 again with new unique ids: a VM `scale` added to the old
    one is no node of the pool (nor a ghost among the new ones)."""
    reg = Registry(tmp_path / "r.db")
    vm = "/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachineScaleSets/hl-gpu/virtualMachines/"
    old = [Node("gpu", i, "azure", "eastus", "Standard_ND96isr_H100_v5", node_id=f"{vm}{i}", vm_uid=f"old-{i}")
           for i in range(2)]
    _pulumis(reg, old)
    reg.resize("hl", added=[(Node("gpu", 2, "azure", "eastus", "Standard_ND96isr_H100_v5", node_id=f"{vm}2",
                                  vm_uid="old-2"), "hl-gpu")])
    assert [n.node_id for n in _pulumis(reg, old).nodes] == [f"{vm}0", f"{vm}1", f"{vm}2"]  # an update keeps it
    anew = [Node("gpu", i, "azure", "eastus", "Standard_ND96isr_H100_v5", node_id=f"{vm}{i}", vm_uid=f"new-{i}")
            for i in range(2)]
    rec = _pulumis(reg, anew)
    assert [(n.node_id, n.vm_uid) for n in rec.nodes] == [(f"{vm}0", "new-0"), (f"{vm}1", "new-1")]
    assert rec.resizes == []


def test_a_records_nodes_share_their_pools_words_and_carry_no_dict_each(tmp_path):
    """A record of many nodes (heal reads one each pass: issue 51's 1,000) costs per node its own values only: the
    pool, provider, region, zone and type its pool's nodes have in common are one string each, and a node is no dict."""
    reg = Registry(tmp_path / "r.db")
    reg.record(name="big", stack="big", stack_file=None, owner="o", expires_at="2099-01-01T00:00:00Z", backend=None,
               nodes=[Node(pool="gpu", idx=i, provider="aws", location="us-east-1", machine="g6.12xlarge",
                           zone="us-east-1a", node_id=f"i-{i}", private_ip=f"10.0.0.{i + 1}") for i in range(3)])
    a, b, c = reg.get("big").nodes
    assert [n.node_id for n in (a, b, c)] == ["i-0", "i-1", "i-2"] and b.machine == "g6.12xlarge"
    assert all(x is y for x, y in [(a.pool, c.pool), (a.provider, c.provider), (a.location, c.location),
                                   (a.zone, c.zone), (a.machine, c.machine)])
    assert not hasattr(a, "__dict__")
    assert reg.get("big").to_dict()["nodes"][0] == {  # its document as before: every field but vm_uid, in order
        "pool": "gpu", "idx": 0, "provider": "aws", "location": "us-east-1", "machine": "g6.12xlarge",
        "zone": "us-east-1a", "node_id": "i-0", "private_ip": "10.0.0.1", "ssh_endpoint": None, "usd_per_hour": None,
        "launched_at": a.launched_at}

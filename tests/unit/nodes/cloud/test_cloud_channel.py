"""The cloud node channel (nodes/cloud/channel.py): the wait that reads the statuses back, which node
a status speaks for, and Slurm on cloud pools rendered from what the nodes say."""

import json

import pytest

from gpufleet.clouds import node_agent
from gpufleet.nodes.cloud import channel as cloudnodes


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


class _Store:
    """An in-memory ObjectStore: what the wait reads (lists counted by the wait itself)."""

    def __init__(self):
        self.objects, self.gets = {}, 0

    def put(self, key, body):
        self.objects[key] = body

    def get(self, key):
        self.gets += 1
        return self.objects[key]

    def exists(self, key):
        return key in self.objects

    def list(self, prefix):
        keys = sorted(k for k in self.objects if k.startswith(prefix))
        return [(k, str(hash(self.objects[k]))) for k in keys], max(1, -(-len(keys) // 1000))


def test_the_wait_names_who_never_answered_and_reads_each_status_once():
    store, clock = _Store(), _Clock()
    targets = [cloudnodes.NodeTarget("gpu", i, f"i-{i}", f"10.0.0.{i}") for i in range(3)]
    store.put("status/gpu/AROAROLE:i-0.json", json.dumps({"node_id": "i-0", "pool": "gpu", "ok": True,
                                                          "generation": "g2", "changed": 4}).encode())
    store.put("status/gpu/AROAROLE:i-1.json", json.dumps({"node_id": "i-1", "pool": "gpu", "ok": True,
                                                          "generation": "g1"}).encode())
    stats = cloudnodes.WaitStats()
    reports = cloudnodes.wait(store, targets, {"gpu": "g2"}, timeout_s=60, poll_s=5, clock=clock, sleep=clock.sleep,
                              stats=stats)
    assert [r.state for r in reports] == ["configured", "timeout", "timeout"]  # i-1 is on the old generation
    assert "bootstrap.log" in reports[2].hint and "after 60s" in reports[2].error
    assert stats.polls == 13 and stats.lists == 13 and store.gets == 2  # one list per poll, each status read once


def test_an_unchanged_configuration_reports_no_changes():
    store, clock = _Store(), _Clock()
    store.put("status/gpu/i-0.json", json.dumps({"node_id": "i-0", "pool": "gpu", "ok": True, "generation": "g1",
                                                 "changed": 7}).encode())
    (r,) = cloudnodes.wait(store, [cloudnodes.NodeTarget("gpu", 0, "i-0", None)], {"gpu": "g1"},
                           unchanged=frozenset({"gpu"}), clock=clock, sleep=clock.sleep)
    assert r.state == "current" and r.ok and r.changed == 0


SLURM_STACK = """
name: sl
owner: ops@example.com
access: {public_key: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpufleetTestKeyOnlyNotARealKeyAAAAAAAAAAA t@example.com"}
slurm: {}
pools:
  - {name: ctl, provider: aws, region: us-east-1, instance_type: g4dn.xlarge, image: ubuntu-24.04, role: controller,
     nodes: 1}
  - {name: gpu, provider: aws, region: us-east-1, instance_type: g6.12xlarge, image: ubuntu-24.04, nodes: 2}
"""


class _Nodes:
    """Cloud nodes as their agents answer: each applies its pool's current document once per
    generation and writes a status with its facts; ``applied`` records (node, states, the slurm pillar)."""

    def __init__(self, store, nodes, says: dict[str, dict] | None = None):
        import threading

        self.store, self.nodes, self.applied, self.probes = store, nodes, [], {}
        self.says = says or {}  # node id -> facts it claims instead of its own
        self.done: dict[str, str] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop.wait(0.02):
            for i, n in enumerate(self.nodes):
                key = f"pools/{n.pool}/current.json"
                if not self.store.exists(key):
                    continue
                doc = json.loads(self.store.objects[key])
                if self.done.get(n.node_id) == doc["generation"]:
                    continue
                self.done[n.node_id] = doc["generation"]
                self.applied.append((n.node_id, doc["states"], doc["pillar"].get("slurm")))
                self.probes[n.node_id] = doc.get("probe")
                facts = {"hostname": f"ip-10-0-0-{i + 10}", "address": f"10.0.0.{i + 10}", "cpus": 48,
                         "cpu_topology": [1, 24, 2], "mem_gib": 186.5, "gpu_count": 0 if n.pool == "ctl" else 4,
                         **self.says.get(n.node_id, {})}
                self.store.put(f"status/{n.pool}/{n.node_id}.json", json.dumps(
                    {"node_id": n.node_id, "pool": n.pool, "ok": True, "generation": doc["generation"],
                     "facts": facts}).encode())


def test_slurm_on_cloud_pools_is_rendered_from_what_the_nodes_say_in_a_second_round(tmp_path, monkeypatch):
    """A first round applies all but Slurm and brings each node's facts; the second carries one
    slurm.conf rendered from them (the nodes' own names, addresses, CPUs, memory and GPUs) to every
    pool. Once the statuses say all that, a later configure is one round."""
    from types import SimpleNamespace

    from gpufleet import catalog, stacks
    from gpufleet.configure import slurm

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    cat = catalog.load(use_config=False)
    (tmp_path / "sl.yaml").write_text(SLURM_STACK)
    st = stacks.load(tmp_path / "sl.yaml", cat)
    store = _Store()
    ref = {"name": "b", "cloud": "aws", "region": "us-east-1"}
    outputs = {"pools": {"ctl": {"bucket": ref}, "gpu": {"bucket": ref}}}
    nodes = [SimpleNamespace(pool="ctl", idx=0, node_id="i-c", private_ip="10.0.0.10"),
             *(SimpleNamespace(pool="gpu", idx=i, node_id=f"i-g{i}", private_ip=f"10.0.0.{11 + i}") for i in range(2))]
    agents = _Nodes(store, nodes)
    agents.thread.start()

    keys = []

    def configure():
        def pillars(facts, published):
            keys.append(published)
            return slurm.pool_pillars(st, "sl", cat, facts, expectations={}, bundle=b"PK", key=published or b"k" * 32)
        return cloudnodes.configure_pools(st, cat, "sl", outputs, nodes, stores={"b": store}, timeout_s=300,
                                          poll_s=0.05, scheduler=pillars)

    try:
        reports = configure()
        assert [r.state for r in reports] == ["configured"] * 3
        first, second = agents.applied[:3], agents.applied[3:]
        assert all("slurm" not in states and pil is None for _, states, pil in first)
        assert sorted(n for n, _, _ in second) == ["i-c", "i-g0", "i-g1"]
        assert all(states[-1] == "slurm" and pil for _, states, pil in second)
        pillars = {n: pil for n, _, pil in second}
        conf = pillars["i-g0"]["files"]["slurm.conf"]
        assert len({p["files"]["slurm.conf"] for p in pillars.values()}) == 1
        assert "SlurmctldHost=ip-10-0-0-10(10.0.0.10)" in conf
        # a compute node is its slot (configure.slurm.SLOT_STATE), at the address the cloud recorded for it
        assert ("NodeName=gpu-0 NodeAddr=10.0.0.11 CPUs=48 Sockets=1 CoresPerSocket=24 ThreadsPerCore=2 "
                "RealMemory=181427 Gres=gpu:l4:4") in conf
        assert pillars["i-c"]["role"] == "controller" and pillars["i-g1"]["role"] == "compute"
        assert pillars["i-g1"]["nodes"] == ["gpu-0", "gpu-1", "ip-10-0-0-10"]
        # each compute node's slot is kept under its own id, where its agent reads it; the controller has none
        slots = {k: json.loads(v) for k, v in store.objects.items() if "/slots/" in k}
        assert slots == {"pools/gpu/slots/i-g0.json": {"node_id": "i-g0", "slurm_name": "gpu-0"},
                         "pools/gpu/slots/i-g1.json": {"node_id": "i-g1", "slurm_name": "gpu-1"}}
        # the controller's agent is asked for Slurm's view; the compute nodes' are not
        assert "sinfo" in agents.probes["i-c"] and agents.probes["i-g0"] is None

        del agents.applied[:]
        assert [r.state for r in configure()] == ["current"] * 3  # facts known: one round, nothing new
        assert agents.applied == []
        assert keys == [None, b"k" * 32]  # the second run (a teammate's, say) keeps the key the nodes hold
    finally:
        agents.stop.set()
        agents.thread.join()


@pytest.mark.parametrize("says, listed, left_out", [
    # i-g0 names itself as its neighbour i-g1 does: the name is neither's (first-wins would hand i-g1's jobs to
    # whichever came first), and its address is the cloud's, whatever it says
    ({"i-g0": {"hostname": "ip-10-0-0-12", "address": "10.0.0.10"}}, ["ip-10-0-0-10"], ["i-g0", "i-g1"]),
    # a compute node claiming the controller's name: the controller keeps it
    ({"i-g1": {"hostname": "IP-10-0-0-10"}}, ["gpu-0", "ip-10-0-0-10"], ["i-g1"]),
    # a node's address is the one the cloud gave it, not the one its status says
    ({"i-g0": {"address": "10.6.6.6"}}, ["gpu-0", "gpu-1", "ip-10-0-0-10"], []),
])
def test_a_nodes_facts_cannot_take_another_nodes_name_or_address(tmp_path, monkeypatch, says, listed, left_out):
    """Review F4: a node's status (vouched by its key) still spoke for others through its facts: its
    host name became a NodeName whether or not another node had it (two NodeName=gpu-1 lines; slurmctld
    keeps the first: "reconfiguration for node %s, ignoring!") and its own idea of its address the
    NodeAddr. NodeAddr is now the address the cloud recorded for the node; a host name more than one
    node claims is nobody's (but the controller's): those nodes are left out of slurm.conf, failed, and
    said."""
    from types import SimpleNamespace

    from gpufleet import catalog, stacks
    from gpufleet.configure import slurm

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    cat = catalog.load(use_config=False)
    (tmp_path / "sl.yaml").write_text(SLURM_STACK)
    st = stacks.load(tmp_path / "sl.yaml", cat)
    store = _Store()
    ref = {"name": "b", "cloud": "aws", "region": "us-east-1"}
    outputs = {"pools": {"ctl": {"bucket": ref}, "gpu": {"bucket": ref}}}
    nodes = [SimpleNamespace(pool="ctl", idx=0, node_id="i-c", private_ip="10.0.0.10"),
             *(SimpleNamespace(pool="gpu", idx=i, node_id=f"i-g{i}", private_ip=f"10.0.0.{11 + i}") for i in range(2))]
    agents = _Nodes(store, nodes, says)
    agents.thread.start()
    try:
        reports = cloudnodes.configure_pools(
            st, cat, "sl", outputs, nodes, stores={"b": store}, timeout_s=20, poll_s=0.05,
            scheduler=lambda facts, published: slurm.pool_pillars(st, "sl", cat, facts, expectations={}, bundle=b"PK",
                                                                  key=b"k" * 32))
    finally:
        agents.stop.set()
        agents.thread.join()
    (conf,) = {pil["files"]["slurm.conf"] for _, _, pil in agents.applied if pil}
    named = [dict(kv.split("=", 1) for kv in line.split()) for line in conf.splitlines()
             if line.startswith(("NodeName=", "SlurmctldHost="))]
    got = {d.get("NodeName") or d["SlurmctldHost"].split("(")[0]: d.get("NodeAddr") or d["SlurmctldHost"] for d in named}
    assert sorted(got) == listed, conf
    recorded = {"ip-10-0-0-10" if n.pool == "ctl" else f"gpu-{n.idx}": n.private_ip for n in nodes}
    assert got == {name: recorded[name] if name != "ip-10-0-0-10" else "ip-10-0-0-10(10.0.0.10)" for name in got}
    by_id = {r.target.node_id: r for r in reports}
    assert sorted(i for i, r in by_id.items() if r.state == "failed") == left_out
    for i in left_out:
        assert "left out of slurm.conf" in by_id[i].error, by_id[i].error


def test_slurms_view_is_read_from_the_controllers_status():
    """What the controller's agent put in its status, as `status` shows it (an answer that was an
    error is said as one)."""
    store = _Store()
    out = ("nodes\nip-10-0-0-11 idle\nip-10-0-0-12 drained*\nip-10-0-0-13 allocated\njobs\nRUNNING\nPENDING\n"
           "PENDING\ndrained\nip-10-0-0-12|gpufleet: GF-XID-FATAL health.xid\n")
    assert cloudnodes.scheduler_view(store, "ctl", "ctl-0") is None  # the agent has not said yet
    store.put("status/ctl/i-c.json", json.dumps({"node_id": "i-c", "pool": "ctl", "ok": True,
                                                 "scheduler": {"out": out, "at": "2026-11-26T21:00:00Z"}}).encode())
    view = cloudnodes.scheduler_view(store, "ctl", "ctl-0")
    assert view == {"controller": "ctl-0", "nodes": {"idle": 1, "drained": 1, "allocated": 1},
                    "jobs": {"running": 1, "pending": 2}, "drained": {"ip-10-0-0-12": "gpufleet: GF-XID-FATAL health.xid"},
                    "as_of": "2026-11-26T21:00:00Z"}
    store.put("status/ctl/i-c.json", json.dumps({"node_id": "i-c", "pool": "ctl", "scheduler": {
        "out": "error: slurm_load_partitions: Unable to contact slurm controller", "at": "t"}}).encode())
    assert cloudnodes.scheduler_view(store, "ctl", "ctl-0")["error"].startswith("slurm_load_partitions")


class _Forger(_Nodes):
    """The same nodes, but i-g0 (a compute node) writes, under the one key its identity may write,
    a status claiming to be the controller, at an address of its choosing (and no generation)."""

    def _run(self):
        while not self.stop.wait(0.02):
            for i, n in enumerate(self.nodes):
                key = f"pools/{n.pool}/current.json"
                if not self.store.exists(key):
                    continue
                doc = json.loads(self.store.objects[key])
                if self.done.get(n.node_id) == doc["generation"]:
                    continue
                self.done[n.node_id] = doc["generation"]
                self.applied.append((n.node_id, doc["states"], doc["pillar"].get("slurm")))
                claim = ("i-c", "ctl", "10.6.6.6") if n.node_id == "i-g0" else (n.node_id, n.pool, f"10.0.0.{i + 10}")
                facts = {"hostname": "ip-10-0-0-10" if n.node_id == "i-g0" else f"ip-10-0-0-{i + 10}",
                         "address": claim[2], "cpus": 48, "mem_gib": 186.5, "gpu_count": 0 if n.pool == "ctl" else 4}
                # the controller's generation is not the forger's to read: a status naming none is taken
                generation = None if n.node_id == "i-g0" else doc["generation"]
                self.store.put(f"status/{n.pool}/{n.node_id}.json", json.dumps(
                    {"node_id": claim[0], "pool": claim[1], "ok": True, "generation": generation,
                     "facts": facts}).encode())


def test_a_node_cannot_speak_for_another_the_controller_least_of_all(tmp_path, monkeypatch):
    """Issue 48 item 2: statuses were filed under the node and pool their body named, so a GPU node
    could claim to be the controller and put its own address in every node's SlurmctldHost. A status
    speaks for the node its key names (what the cloud let its writer write); one that disagrees is
    ignored and said."""
    from types import SimpleNamespace

    from gpufleet import catalog, stacks
    from gpufleet.configure import slurm

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    cat = catalog.load(use_config=False)
    (tmp_path / "sl.yaml").write_text(SLURM_STACK)
    st = stacks.load(tmp_path / "sl.yaml", cat)
    store = _Store()
    ref = {"name": "b", "cloud": "aws", "region": "us-east-1"}
    outputs = {"pools": {"ctl": {"bucket": ref}, "gpu": {"bucket": ref}}}
    nodes = [SimpleNamespace(pool="ctl", idx=0, node_id="i-c", private_ip="10.0.0.10"),
             *(SimpleNamespace(pool="gpu", idx=i, node_id=f"i-g{i}", private_ip=f"10.0.0.{11 + i}") for i in range(2))]
    agents = _Forger(store, nodes)
    agents.thread.start()
    try:
        reports = cloudnodes.configure_pools(
            st, cat, "sl", outputs, nodes, stores={"b": store}, timeout_s=3, poll_s=0.05,
            scheduler=lambda facts, published: slurm.pool_pillars(st, "sl", cat, facts, expectations={}, bundle=b"PK",
                                                                  key=b"k" * 32))
    finally:
        agents.stop.set()
        agents.thread.join()
    confs = {pil["files"]["slurm.conf"] for node, states, pil in agents.applied if pil}
    assert [line for conf in confs for line in conf.splitlines() if line.startswith("SlurmctldHost=")] == [
        "SlurmctldHost=ip-10-0-0-10(10.0.0.10)"]
    by_id = {r.target.node_id: r for r in reports}
    assert by_id["i-c"].state == "configured" and by_id["i-c"].facts["address"] == "10.0.0.10"
    assert by_id["i-g0"].state == "timeout" and by_id["i-g0"].facts is None
    assert by_id["i-g0"].warnings == ["status/gpu/i-g0.json claims to be node 'i-c' of pool 'ctl': ignored (a status "
                                      "speaks for the node its key names)"]


@pytest.mark.parametrize("facts, says", [
    ({"hostname": "n1\nSlurmctldHost=evil", "address": "10.0.0.4", "cpus": 8, "mem_gib": 30},
     "host name 'n1\\nSlurmctldHost=evil' is not a short host name (one RFC 1123 label): refused"),
    ({"hostname": "n1", "address": "10.0.0.4 NodeAddr=10.6.6.6", "cpus": 8, "mem_gib": 30},
     "address '10.0.0.4 NodeAddr=10.6.6.6' is not an IP address: refused"),
    ({"hostname": "n1", "address": "fe80::1%eth0", "cpus": 8, "mem_gib": 30}, "is not an IP address"),
    ({"hostname": "n1", "address": "10.0.0.4", "cpus": "8; reboot", "mem_gib": 30}, "cpus '8; reboot' is not a number"),
])
def test_facts_not_of_their_format_are_refused_before_slurm_or_the_registry(facts, says, tmp_path):
    """Issue 48 item 2: what a node says of itself is checked (RFC 1123 host name, IP literal,
    numbers) before it reaches slurm.conf or the registry; the node is failed, saying why."""
    from gpufleet.state.registry import Registry

    store, clock = _Store(), _Clock()
    store.put("status/gpu/AROAROLE:i-0.json", json.dumps({"node_id": "i-0", "pool": "gpu", "ok": True,
                                                          "generation": "g1", "facts": facts}).encode())
    (r,) = cloudnodes.wait(store, [cloudnodes.NodeTarget("gpu", 0, "i-0", "10.0.0.4")], {"gpu": "g1"}, timeout_s=30,
                           clock=clock, sleep=clock.sleep)
    assert r.state == "failed" and r.facts is None and r.error.startswith("status/gpu/AROAROLE:i-0.json: ")
    assert says in r.error
    assert cloudnodes._known_facts([store], [r.target]) == {}
    reg = Registry(tmp_path / "r.db")
    reg.record(name="c", stack="c", stack_file="c.yaml", owner="o", expires_at="2099-01-01T00:00:00Z", backend=None,
               nodes=[])
    cloudnodes.record(reg, "c", [r])
    host = reg.hosts("c")[("gpu", 0)]
    assert host["state"] == "failed" and host["facts"] is None and host["detail"] == r.error


def test_without_its_controller_no_slurm_conf_is_published(tmp_path, monkeypatch):
    from gpufleet import catalog, stacks
    from gpufleet.configure import slurm
    from gpufleet.errors import GpufleetError, InputError

    cat = catalog.load(use_config=False)
    (tmp_path / "sl.yaml").write_text(SLURM_STACK)
    st = stacks.load(tmp_path / "sl.yaml", cat)
    facts = {"hostname": "n", "cpus": 4, "mem_gib": 16, "gpu_count": 4}
    with pytest.raises(GpufleetError) as e:
        slurm.pool_pillars(st, "sl", cat, [("gpu", "10.0.0.11", facts, "gpu-0")], expectations={}, bundle=b"",
                           key=b"k")
    assert "controller's node did not configure" in e.value.message and not isinstance(e.value, InputError)


def test_a_retrying_node_keeps_up_waiting_until_it_succeeds():
    store, clock = _Store(), _Clock()
    target = cloudnodes.NodeTarget("gpu", 0, "i-0", None)
    store.put("status/gpu/i-0.json", json.dumps({"node_id": "i-0", "pool": "gpu", "ok": False, "generation": "g1",
                                                 "attempt": 1, "attempts": 3, "retrying": True,
                                                 "failed": [{"state": "pkg", "comment": "dpkg lock"}]}).encode())

    def sleep(s):
        clock.sleep(s)
        if clock.t >= 60:  # the timer's next run, a minute later, succeeds
            store.put("status/gpu/i-0.json", json.dumps({"node_id": "i-0", "pool": "gpu", "ok": True,
                                                         "generation": "g1", "attempt": 2, "changed": 3}).encode())

    (r,) = cloudnodes.wait(store, [target], {"gpu": "g1"}, timeout_s=600, poll_s=15, clock=clock, sleep=sleep)
    assert r.state == "configured" and r.error is None and clock.t >= 60


# the same scale set VM as ARM's List API names it (resource group upper-cased, azure-cli#7262) and
# as the VM's own metadata service says it (compute/resourceId)
LISTED = ("/subscriptions/0000/resourceGroups/GPUFLEET-AZURE-ND/providers/Microsoft.Compute/"
          "virtualMachineScaleSets/azure-nd-gpu/virtualMachines/0")


SAID = LISTED.replace("GPUFLEET-AZURE-ND", "gpufleet-azure-nd")


WRITTEN = f"status/gpu/{node_agent.safe_key(SAID)}.json"  # the key the VM's agent writes


def test_an_azure_node_is_matched_whatever_the_case_of_its_arm_id():
    """ARM ids are case-insensitive; compared exactly, no Azure node ever matched its status (issue 30, item 3)."""
    store, clock = _Store(), _Clock()
    store.put(WRITTEN, json.dumps({"node_id": SAID, "pool": "gpu", "ok": True, "generation": "g1",
                                                "changed": 2, "verify": {"request": "r", "ok": True}}).encode())
    (r,) = cloudnodes.wait(store, [cloudnodes.NodeTarget("gpu", 0, LISTED, None)], {"gpu": "g1"}, timeout_s=30,
                           clock=clock, sleep=clock.sleep)
    assert r.state == "configured"


def test_an_azure_nodes_verification_is_matched_whatever_the_case_of_its_arm_id(monkeypatch):
    store, clock = _Store(), _Clock()
    monkeypatch.setattr(cloudnodes.time, "strftime", lambda *a: "r")  # the request id the node answers
    store.put(WRITTEN, json.dumps({"node_id": SAID, "pool": "gpu", "ok": True, "generation": "g1",
                                                "verify": {"request": "r-quick", "ok": True}}).encode())

    class Node:
        pool, idx, node_id, private_ip = "gpu", 0, LISTED, "10.0.0.4"

    outputs = {"pools": {"gpu": {"bucket": {"cloud": "azure", "name": "gfx"}}}}
    ((_, report),) = cloudnodes.verify_pools(outputs, [Node()], {"gpu": {}}, level="quick", timeout_s=30,
                                              stores={"gfx": store}, clock=clock, sleep=clock.sleep)
    assert report == {"request": "r-quick", "ok": True}

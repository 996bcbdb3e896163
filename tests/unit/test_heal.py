"""`gpufleet heal`: what it decides for each node (``fleet.heal.decide``), and one pass over a cluster's
cloud nodes whose statuses say their health as issue 51's contract shapes it (the node agent's side writes
them; here they are written as that contract says), through the cloud kind, into the registry and the log.

The cloud's API is a stand-in here (what it was asked, and a refusal when told); the real AWS request is
tested against moto in test_heal_aws.py."""

import datetime as dt
import json

import pytest

from gpufleet import stacks
from gpufleet.clouds import inventory, node_agent
from gpufleet.errors import CapacityError
from gpufleet.fleet import heal as healing
from gpufleet.nodes.health import NodeHealth
from gpufleet.nodes.run import Seams
from gpufleet.spec import Health
from gpufleet.state import events
from gpufleet.state.registry import Node, Registry
from gpufleet.state.shared import DirectoryStore, StoreError

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpufleetTestKeyOnlyNotARealKeyAAAAAAAAAAA t@example.com"
NOW = dt.datetime(2026, 11, 27, 15, 0, tzinfo=dt.timezone.utc)


def stack_text(health: str = "{on_fault: replace, max_replacements: 1}", slurm: bool = False, nodes: int = 3) -> str:
    ctl = ("  - {name: ctl, provider: aws, region: us-east-1, instance_type: g4dn.xlarge, image: ubuntu-24.04, "
           "role: controller, nodes: 1}\n") if slurm else ""
    return (f"name: hl\nowner: ops@example.com\naccess: {{public_key: '{KEY}'}}\n" + ("slurm: {}\n" if slurm else "")
            + "pools:\n" + ctl + "  - {name: gpu, provider: aws, region: us-east-1, instance_type: g6.12xlarge, "
            f"image: ubuntu-24.04, nodes: {nodes}, health: {health}}}\n")


class Bucket:
    """An in-memory ObjectStore: the pool's bucket, where the node agents keep their statuses."""

    def __init__(self):
        self.objects, self.broken = {}, None

    def put(self, key, body):
        self.objects[key] = body

    def get(self, key):
        if self.broken:
            raise self.broken
        return self.objects[key]

    def exists(self, key):
        return key in self.objects

    def remove(self, key):
        self.objects.pop(key, None)

    def list(self, prefix):
        if self.broken:
            raise self.broken
        keys = sorted(k for k in self.objects if k.startswith(prefix))
        return [(k, str(hash(self.objects[k]))) for k in keys], 1


def say(bucket, node_id, pool="gpu", state="ok", *, faults=(), drained=False, age_s=0, interval=60, hostname=None,
        scheduler=None, health=True):
    """A node's status, its ``health`` as the contract between the node and this side shapes it."""
    checked = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=age_s)).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {"node_id": node_id, "pool": pool, "ok": True, "generation": "g1",
            "facts": {"hostname": hostname or f"ip-{node_id}", "address": "10.0.0.9"}}
    if health:
        body["health"] = {"state": state, "faults": list(faults), "checked_at": checked, "interval": interval,
                          "gate": {"level": "quick", "passed": True}, "notice": None, "drained": drained}
    if scheduler is not None:
        body["scheduler"] = {"out": scheduler, "at": checked}
    bucket.put(f"status/{pool}/{node_agent.safe_key(node_id)}.json", json.dumps(body).encode())


XID = {"code": "GF-XID-FATAL", "check": "health.xid", "evidence": "Xid 79 on GPU 00000000:3B:00.0: fell off the bus"}


class Api:
    """The cloud's API as the cloud kind asks it: what it was asked to replace; ``refuse``: no capacity."""

    def __init__(self, refuse: bool = False, gone=()):
        self.asked, self.refuse, self.gone = [], refuse, set(gone)

    def gone_nodes(self, region, *, cluster, pool, node_ids):
        return self.gone & set(node_ids)

    def replace_node(self, region, *, cluster, pool, node_id, release_first=False, launched=None, on_launch=None,
                     market=None):
        self.asked.append(node_id)
        if self.refuse:
            raise CapacityError("aws: EC2 launched no replacement: InsufficientInstanceCapacity: none in us-east-1a")
        on_launch(f"i-new{len(self.asked)}")  # as a cloud does, the moment the new node exists
        return {"id": f"i-new{len(self.asked)}", "private_ip": f"10.0.1.{len(self.asked)}", "zone": "us-east-1a",
                "fleet_id": "fleet-new"}


class Cluster:
    """A cluster `up` recorded (its stack, registry, bucket, log), healed pass by pass."""

    def __init__(self, tmp_path, cat, text: str, api: Api | None = None, ids=lambda pool, i: f"i-{pool}{i}"):
        (tmp_path / "hl.yaml").write_text(text)
        self.stack, self.cat = stacks.load(tmp_path / "hl.yaml", cat), cat
        self.reg = Registry(tmp_path / "registry.db")
        self.nodes = [Node(pool=p.name, idx=i, provider=p.provider, location=p.region, machine=p.instance_type,
                           node_id=ids(p.name, i), private_ip=f"10.0.0.{10 + i}")
                      for p in self.stack.pools for i in range(p.nodes)]
        self.reg.record(name="hl", stack="hl", stack_file=str(tmp_path / "hl.yaml"), owner="ops@example.com",
                        expires_at="2099-01-01T00:00:00Z", backend=None, nodes=self.nodes)
        (tmp_path / "log").mkdir()
        self.log = DirectoryStore(f"file://{tmp_path}/log")
        self.bucket, self.api = Bucket(), api or Api()
        ref = {"name": "b", "cloud": self.stack.pools[0].provider, "region": self.stack.pools[0].region}
        self.outputs = {"pools": {p.name: {"bucket": ref} for p in self.stack.pools}}

    def heal(self, now=NOW, dry_run=False, team=False):
        seams = Seams(cloud_api=inventory.Clouds(open={p.provider: self.api for p in self.stack.pools}),
                      stores={"b": self.bucket})
        return healing.heal(self.stack, self.cat, registry=self.reg, store=None if team else self.log, seams=seams,
                            outputs=self.outputs, now=now, dry_run=dry_run)

    def events(self):
        return [e for e in events.read(self.log, "hl") if e.get("command", "").startswith("heal")]

    def node_ids(self):
        return [n.node_id for n in self.reg.get("hl").nodes]


# --- the decision, pure ---------------------------------------------------------------------------

def node(state="faulty", drained=True, jobs="none", reserved=False, replaceable=True):
    return NodeHealth("gpu-0", "gpu", "cloud nodes", state, faults=[XID] if state == "faulty" else [],
                      drained=drained, jobs=jobs, reserved=reserved, replaceable=replaceable, why="x")


REPLACE = Health(on_fault="replace", max_replacements=2)


def decided(h, rules=REPLACE, replaced=0, retry_at=None, isolated=False):
    return healing.decide(h, rules, replaced_last_hour=replaced, retry_at=retry_at, now=NOW, isolated=isolated).action


@pytest.mark.parametrize("on_fault", ["replace", "isolate", "none"])
def test_an_unknown_node_is_never_drained_isolated_or_replaced(on_fault):
    assert decided(node("unknown", drained=True, jobs="none"), Health(on_fault=on_fault)) == "skip"


def test_a_faulty_node_is_drained_first_then_replaced_only_without_jobs():
    assert decided(node(drained=False)) == "drain"
    assert decided(node(drained=None)) == "drain"  # not known to be out of service: drained first
    assert decided(node(jobs="running")) == "wait"  # never replaced under a running job
    assert decided(node(jobs=None)) == "wait"  # jobs not known: never replaced on a guess
    assert decided(node()) == "replace"
    assert decided(node("interrupted")) == "replace"


def test_the_pools_rules_hold_a_replacement():
    assert decided(node(), replaced=2) == "wait"  # max_replacements per pool per hour
    assert decided(node(), Health(on_fault="replace", max_replacements=0)) == "wait"
    assert decided(node(reserved=True)) == "isolate"  # a reservation's slot is kept
    assert decided(node(reserved=True), Health(on_fault="replace", replace_reserved=True)) == "replace"
    assert decided(node(replaceable=False)) == "isolate"  # a rack host
    assert decided(node(), Health(on_fault="isolate")) == "isolate"
    assert decided(node(), Health(on_fault="isolate"), isolated=True) == "none"  # once
    assert decided(node(), Health(on_fault="none")) == "report"
    assert decided(node(), retry_at=NOW + dt.timedelta(minutes=5)) == "wait"  # a capacity refusal's backoff
    assert decided(node(), retry_at=NOW - dt.timedelta(minutes=5)) == "replace"
    assert decided(node("ok")) == decided(node("gating")) == "none"


def test_the_backoff_doubles_and_is_capped():
    waits = [healing.backoff(n).total_seconds() for n in range(1, 12)]
    assert waits[:3] == [healing.BACKOFF_S, 2 * healing.BACKOFF_S, 4 * healing.BACKOFF_S]
    assert max(waits) == healing.BACKOFF_MAX_S and waits == sorted(waits)


# --- one pass over cloud nodes ----------------------------------------------------------------------

def test_a_faulty_drained_node_is_replaced_through_its_kind_and_the_registry_names_the_new_one(tmp_path, cat):
    c = Cluster(tmp_path, cat, stack_text())
    say(c.bucket, "i-gpu0", state="faulty", faults=[XID])
    say(c.bucket, "i-gpu1")
    out = c.heal()
    assert c.api.asked == ["i-gpu0"]
    assert c.node_ids() == ["i-new1", "i-gpu1", "i-gpu2"]
    (e,) = [e for e in c.events() if e["action"] == "replace"]
    assert (e["node"], e["code"], e["done"]) == ("gpu-0", "GF-XID-FATAL", True) and "fell off the bus" in e["evidence"]
    assert [d.action for d in out.decisions] == ["replace", "none", "skip"]  # gpu-2 has no status: unknown
    assert out.replacements == {"gpu": 1}
    again = c.heal(NOW + dt.timedelta(minutes=1))  # the new node has not reported yet: unknown, left alone
    assert c.api.asked == ["i-gpu0"] and again.decisions[0].action == "skip"


def test_max_replacements_holds_across_passes(tmp_path, cat):
    c = Cluster(tmp_path, cat, stack_text("{on_fault: replace, max_replacements: 1}"))
    for i in range(3):
        say(c.bucket, f"i-gpu{i}", state="faulty", faults=[XID])
    c.heal()
    c.heal(NOW + dt.timedelta(minutes=20))
    assert len(c.api.asked) == 1  # one per hour
    c.heal(NOW + dt.timedelta(minutes=61))
    assert len(c.api.asked) == 2
    held = [e for e in c.events() if e["action"] == "wait"]
    assert held and "max_replacements 1" in held[0]["why"]


@pytest.mark.parametrize("broken", ["store", "no health", "bad code", "stale", "two lines", "future"])
def test_an_unreadable_status_or_a_store_error_never_drains_or_replaces(tmp_path, cat, broken):
    c = Cluster(tmp_path, cat, stack_text("{on_fault: replace, max_replacements: 5}"))
    for i in range(3):
        say(c.bucket, f"i-gpu{i}", state="faulty", faults=[XID])
    bad = {"code": "GF-XID-FATAL; rm -rf /", "check": "health.xid", "evidence": "x"}
    if broken == "store":
        c.bucket.broken = StoreError("s3://b: 503 Slow Down")
    elif broken == "no health":
        say(c.bucket, "i-gpu0", health=False)
    elif broken == "bad code":
        say(c.bucket, "i-gpu0", state="faulty", faults=[bad])
    elif broken == "stale":
        say(c.bucket, "i-gpu0", state="faulty", faults=[XID], age_s=181)  # older than 3 x 60 s
    elif broken == "two lines":
        say(c.bucket, "i-gpu0", state="faulty", faults=[{**XID, "evidence": "a\nb"}])
    else:
        say(c.bucket, "i-gpu0", state="faulty", faults=[XID], age_s=-3600)
    out = c.heal()
    gone = ["i-gpu0", "i-gpu1", "i-gpu2"] if broken == "store" else ["i-gpu0"]
    assert not set(c.api.asked) & set(gone)
    assert all(d.action == "skip" for d in out.decisions if d.node in {f"gpu-{i[-1]}" for i in gone})
    names = {f"gpu-{i[-1]}" for i in gone}
    skips = [e for e in c.events() if e["action"] == "skip" and e["node"] in names]
    assert {e["node"] for e in skips} == names
    if broken == "store":
        assert "503 Slow Down" in skips[0]["why"]
    c.heal(NOW + dt.timedelta(minutes=1))  # a skip is said once, not on every pass
    assert len([e for e in c.events() if e["action"] == "skip" and e["node"] in names]) == len(skips)
    assert not set(c.api.asked) & set(gone)


def test_a_replacement_waits_for_the_jobs_slurm_says_run_on_the_node(tmp_path, cat):
    c = Cluster(tmp_path, cat, stack_text(slurm=True, nodes=1))
    say(c.bucket, "i-gpu0", state="faulty", faults=[XID], drained=True, hostname="gpu-a")
    say(c.bucket, "i-ctl0", pool="ctl", hostname="ctl-a",
        scheduler="nodes\nctl-a idle\ngpu-a draining\njobs\nRUNNING\ndrained\ngpu-a|gpufleet: GF-XID-FATAL\n")
    out = c.heal()
    assert c.api.asked == [] and out.decisions[1].action == "wait" and "jobs are still running" in out.decisions[1].why
    say(c.bucket, "i-ctl0", pool="ctl", hostname="ctl-a", age_s=600,  # the controller's agent went quiet
        scheduler="nodes\nctl-a idle\ngpu-a drained\njobs\ndrained\ngpu-a|gpufleet: GF-XID-FATAL\n")
    c.heal(NOW + dt.timedelta(minutes=1))
    assert c.api.asked == []  # a stale view of Slurm says nothing of the jobs
    say(c.bucket, "i-ctl0", pool="ctl", hostname="ctl-a",
        scheduler="nodes\nctl-a idle\ngpu-a drained\njobs\ndrained\ngpu-a|gpufleet: GF-XID-FATAL\n")
    c.heal(NOW + dt.timedelta(minutes=2))
    assert c.api.asked == ["i-gpu0"]  # the job ended: replaced


def test_a_dry_run_changes_nothing(tmp_path, cat):
    c = Cluster(tmp_path, cat, stack_text())
    say(c.bucket, "i-gpu0", state="faulty", faults=[XID])
    out = c.heal(dry_run=True)
    assert out.decisions[0].action == "replace"  # said, not done
    assert c.api.asked == [] and c.node_ids() == ["i-gpu0", "i-gpu1", "i-gpu2"]
    assert c.log.keys("") == []  # no event, no state


def test_a_capacity_refusal_is_reported_and_asked_again_after_a_backoff_not_in_a_loop(tmp_path, cat):
    c = Cluster(tmp_path, cat, stack_text("{on_fault: replace, max_replacements: 10}"), api=Api(refuse=True))
    for i in range(3):
        say(c.bucket, f"i-gpu{i}", state="faulty", faults=[XID])
    out = c.heal()
    assert c.api.asked == ["i-gpu0"]  # one ask per pool: the others wait for the backoff
    assert not out.trouble and [r.refused for r in out.repaired] == [True]
    (refused,) = [e for e in c.events() if e["refused"]]
    assert "InsufficientInstanceCapacity" in refused["outcome"]
    c.heal(NOW + dt.timedelta(minutes=1))
    assert len(c.api.asked) == 1
    c.heal(NOW + healing.backoff(1) + dt.timedelta(seconds=1))
    assert len(c.api.asked) == 2
    state, _ = healing.read_state(c.log, "hl")
    assert set(state["pools"]) == {"gpu"} and state["pools"]["gpu"]["refusals"] == 2  # O(pools)
    assert c.node_ids() == ["i-gpu0", "i-gpu1", "i-gpu2"]  # nothing lost


def test_a_cloud_whose_replacement_is_not_built_isolates_instead(tmp_path, cat, monkeypatch):
    from gpufleet.clouds import cloud

    monkeypatch.setattr(cloud("aws"), "replaces_nodes", False)  # as a cloud without replacement says
    c = Cluster(tmp_path, cat, stack_text())
    say(c.bucket, "i-gpu0", state="faulty", faults=[XID])
    out = c.heal()
    assert c.api.asked == [] and out.decisions[0].action == "isolate" and "not built" in out.decisions[0].why
    assert not out.trouble


def test_isolate_leaves_the_node_and_says_it_once(tmp_path, cat):
    c = Cluster(tmp_path, cat, stack_text("{on_fault: isolate}"))
    say(c.bucket, "i-gpu0", state="faulty", faults=[XID])
    c.heal()
    c.heal(NOW + dt.timedelta(minutes=1))
    assert c.api.asked == [] and [e["node"] for e in c.events() if e["action"] == "isolate"] == ["gpu-0"]
    state, _ = healing.read_state(c.log, "hl")
    assert state["nodes"]["gpu-0"]["done"] == "isolate" and state["nodes"]["gpu-0"]["last_fault"] == "GF-XID-FATAL"


def test_in_a_team_each_pass_holds_the_clusters_lease_and_a_held_cluster_is_left_alone(tmp_path, cat, monkeypatch):
    """Two healers (or a heal and an `up`) never act on one cluster at once: a pass takes the cluster's lease
    in the team's store and gives it back; one that finds it held does nothing (LeaseHeld: exit 4)."""
    from gpufleet.state import leases

    (tmp_path / "shared").mkdir()
    team_store = DirectoryStore(f"file://{tmp_path / 'shared'}")
    team_store.create("team.json", b"{}")
    monkeypatch.setenv("GPUFLEET_TEAM", team_store.url)
    c = Cluster(tmp_path, cat, stack_text())
    say(c.bucket, "i-gpu0", state="faulty", faults=[XID])
    other = leases.acquire(team_store, "hl", "up", "bob@example.com", wait=False)
    try:
        with pytest.raises(leases.LeaseHeld):
            c.heal(team=True)
        assert c.api.asked == [] and events.read(team_store, "hl") == []
    finally:
        other.release()
    c.heal(team=True)
    assert c.api.asked == ["i-gpu0"] and leases.read(team_store, "hl") is None  # given back
    assert [e["node"] for e in events.read(team_store, "hl") if e["action"] == "replace"] == ["gpu-0"]


class SecondHealer(Api):
    """A cloud whose launch takes a while (EC2 Fleet's instant request, a GCP bulkInsert's operation): while the
    first pass waits on it, a second `heal` starts (cron's `heal --once` beside a `heal --watch`, or two crons)."""

    def __init__(self):
        super().__init__()
        self.cluster, self.inner = None, None

    def replace_node(self, region, *, cluster, pool, node_id, **kw):
        if self.inner is None and self.cluster is not None:
            self.inner = "running"
            try:  # a second healer that finds the cluster held may stop with an error: its own, not the first's
                self.inner = self.cluster.heal()
            except Exception as e:  # noqa: BLE001
                self.inner = e
        return super().replace_node(region, cluster=cluster, pool=pool, node_id=node_id, **kw)


def test_two_heal_passes_alone_never_both_replace_one_node(tmp_path, cat):
    """Review rev51e finding 1. README (Health): "Run it from cron (`--once` ...) or with `--watch`", and the issue:
    "cron-safe and idempotent like `reap` ... (leases make two healers safe)". Alone (no team store) no lease is
    taken: two passes at once each read no launch, each count 0 of max_replacements 1, and each launched a node for
    the same faulty one. Each pass now holds this machine's lock of the cluster (leases.held_here); the second finds
    it held and does nothing, as a held lease in team mode (LeaseHeld, exit 4)."""
    from gpufleet.state import leases

    api = SecondHealer()
    c = Cluster(tmp_path, cat, stack_text("{on_fault: replace, max_replacements: 1}"), api=api)
    api.cluster = c
    say(c.bucket, "i-gpu0", state="faulty", faults=[XID])
    c.heal()
    assert api.asked.count("i-gpu0") == 1, (f"two heal passes at once each replaced gpu-0: asked {api.asked}, "
                                             "with max_replacements 1")
    assert isinstance(api.inner, leases.LeaseHeld) and api.inner.exit_code == 4, api.inner
    assert "held on this machine by `heal` (pid" in api.inner.message
    assert [e["node"] for e in c.events() if e["action"] == "replace"] == ["gpu-0"]  # the second wrote nothing
    assert c.heal(dry_run=True).decisions  # the lock was given back; a dry run takes none


class Overtaken(Api):
    """A cloud whose launch returns after another pass took the cluster and wrote heal's memory (its own launch for
    gpu-1): this pass's lease was given up while its store did not confirm its beats (leases: a holder gives up one
    heartbeat before a reader may take over)."""

    def __init__(self, log):
        super().__init__()
        self.log = log

    def replace_node(self, region, *, cluster, pool, node_id, **kw):
        theirs, version = healing.read_state(self.log, cluster)
        theirs["nodes"]["gpu-1"] = {"launched": "i-launched-by-b"}
        healing.write_state(self.log, cluster, theirs, version)
        return super().replace_node(region, cluster=cluster, pool=pool, node_id=node_id, **kw)


def test_a_launch_heals_memory_cannot_keep_stops_the_pass_naming_it_and_writes_over_nothing(tmp_path, cat):
    """Review rev51e finding 2 (fencing): the launch's own write loses the store's precondition. The newer holder's
    memory stays whole, the cloud goes no further (the old node is not terminated: the stand-in's on_launch raised
    before it returned), and the pass stops with an error that names the launch (exit 4), which the log keeps too."""
    from gpufleet.state import leases

    c = Cluster(tmp_path, cat, stack_text("{on_fault: replace, max_replacements: 2}"))
    c.api = Overtaken(c.log)
    healing.write_state(c.log, "hl", {"pools": {}, "nodes": {}}, None)  # an earlier pass's memory
    say(c.bucket, "i-gpu0", state="faulty", faults=[XID])
    with pytest.raises(leases.LeaseLost) as ei:
        c.heal()
    assert ei.value.exit_code == 4 and "launched and not kept in it: i-new1 (in place of gpu-0)" in ei.value.message
    assert healing.read_state(c.log, "hl")[0]["nodes"] == {"gpu-1": {"launched": "i-launched-by-b"}}
    (said,) = [e for e in c.events() if e["action"] == "replace"]
    assert said["launched"] == "i-new1" and said["done"] is False
    assert [n.node_id for n in c.reg.get("hl").nodes][0] == "i-gpu0"  # not recorded as replaced


def test_a_pass_that_lost_its_lease_writes_no_memory_at_its_end(tmp_path, cat, monkeypatch):
    """Review rev51e finding 2: the end-of-pass write came after no `ensure_held`: a pass whose lease was given up
    mid-pass wrote its memory whole at the end. Here the lease is lost while the replacement runs, after the launch
    was kept: the launch stays in heal's memory, the pass's end writes nothing more and stops (LeaseLost)."""
    from gpufleet.state import leases

    (tmp_path / "shared").mkdir()
    team_store = DirectoryStore(f"file://{tmp_path / 'shared'}")
    team_store.create("team.json", b"{}")
    monkeypatch.setenv("GPUFLEET_TEAM", team_store.url)

    class LosesTheLease(Api):
        def replace_node(self, region, **kw):
            got = super().replace_node(region, **kw)
            for held in list(leases._HOLDINGS):
                held._lose("the tests broke it")
            return got

    c = Cluster(tmp_path, cat, stack_text("{on_fault: replace, max_replacements: 2}"), api=LosesTheLease())
    say(c.bucket, "i-gpu0", state="faulty", faults=[XID])
    with pytest.raises(leases.LeaseLost, match="the tests broke it"):
        c.heal(team=True)
    kept = healing.read_state(team_store, "hl")[0]["nodes"]["gpu-0"]
    assert kept == {"launched": "i-new1"}, f"the pass's end wrote its memory after its lease was lost: {kept}"


def test_a_stale_heal_pass_never_writes_its_memory_over_the_pass_that_took_the_lease_after_it(tmp_path):
    """Review rev51e finding 2 (fencing, REVIEW.md, Time: "a holder that learns it lost its lease and goes on"). Pass
    A launched a node while its store did not confirm its beats; its lease was given up and taken by pass B, which
    wrote heal's memory (its own launch: `launched`). A's launch then returns: _on_launch -> _save -> write_state's
    replace at A's version loses (DirectoryStore/S3 If-Match: False); the False was dropped and _save read the object
    back and ADOPTED B's version as its own, so A's next write (the end of its pass) replaced B's memory whole: B's
    launch was forgotten and the next pass launched again."""
    from gpufleet.state import leases

    (tmp_path / "log").mkdir()
    store = DirectoryStore(f"file://{tmp_path}/log")
    healing.write_state(store, "hl", {"pools": {}, "nodes": {}}, None)
    _, read_by_a = store.read(healing.state_key("hl"))
    b, version = healing.read_state(store, "hl")  # B, the lease's new holder, launches for gpu-0
    b["nodes"]["gpu-0"] = {"launched": "i-launched-by-b"}
    healing.write_state(store, "hl", b, version)
    a, saved = {"pools": {}, "nodes": {"gpu-1": {"launched": "i-launched-by-a"}}}, [read_by_a]
    with pytest.raises(leases.LeaseLost, match="changed under this pass"):
        healing._save(store, "hl", a, saved)  # A's launch returns (its on_launch)
    assert saved == [read_by_a]  # B's version never adopted
    with pytest.raises(leases.LeaseLost):
        healing.write_state(store, "hl", a, saved[0])  # A's pass ends
    with pytest.raises(leases.LeaseLost):
        healing.write_state(store, "hl", a, None)  # nor created over it
    kept = healing.read_state(store, "hl")[0]["nodes"]
    assert kept.get("gpu-0", {}).get("launched") == "i-launched-by-b", (
        f"a stale pass wrote heal's memory over the newer holder's: {kept}")


def test_a_node_back_in_service_after_a_fault_is_one_resume_event_in_the_log(tmp_path, cat):
    """Review rev51e finding 9. Issue 51 step 6: "Every action (drain, replace, isolate, resume, scale) is an event in
    `gpufleet log` with the fault code and the evidence". A node isolated for a fault whose watch later finds it
    healthy (a transient fault, a GPU reset, a maintenance notice gone) is resumed by its watch; heal decided "none"
    for it and wrote nothing: the log's last word on it stayed "isolate" for good. Now one "resume" event, with the
    old code; and the same fault later is isolated (and said) again."""
    c = Cluster(tmp_path, cat, stack_text("{on_fault: isolate}"))
    later = iter(NOW + dt.timedelta(minutes=k) for k in range(10))  # each pass a minute on: the log's order is by time
    say(c.bucket, "i-gpu0", state="faulty", faults=[XID], drained=True)
    c.heal(next(later))
    say(c.bucket, "i-gpu0", drained=True)  # healthy, still drained: not back yet
    c.heal(next(later))
    say(c.bucket, "i-gpu0")  # its watch resumed it: healthy, not drained
    out = c.heal(next(later))
    c.heal(next(later))  # said once
    mine = [(e["action"], e.get("code")) for e in c.events() if e.get("node") == "gpu-0"]
    assert mine == [("isolate", "GF-XID-FATAL"), ("resume", "GF-XID-FATAL")], (
        f"the log's word on gpu-0, back in service: {mine}")
    (back,) = [e for e in c.events() if e["action"] == "resume"]
    assert "its watch found it healthy at" in back["evidence"] and "fell off the bus" in back["why"]
    assert [d.action for d in out.decisions if d.node == "gpu-0"] == ["resume"]
    say(c.bucket, "i-gpu0", state="faulty", faults=[XID], drained=True)  # the same fault again
    c.heal(next(later))
    assert [e["action"] for e in c.events() if e.get("node") == "gpu-0"] == ["isolate", "resume", "isolate"]


def test_a_replaced_node_is_no_resume(tmp_path, cat):
    """The node in a replaced one's place is a new node, not one back from its fault: no "resume" for it."""
    c = Cluster(tmp_path, cat, stack_text("{on_fault: replace, max_replacements: 2}"))
    say(c.bucket, "i-gpu0", state="faulty", faults=[XID], drained=True)
    c.heal()
    say(c.bucket, "i-new1")
    c.heal()
    assert [e["action"] for e in c.events() if e.get("node") == "gpu-0"] == ["replace"]


def test_heals_memory_written_wrong_by_someone_else_is_dropped_not_trusted(tmp_path, cat):
    """Whoever can write the store can write heal's memory: junk in it is left aside, never a crash, and
    never a reason to replace (a refusal's retry time that is not a time is no time: asked again)."""
    c = Cluster(tmp_path, cat, stack_text())
    c.log.create(healing.state_key("hl"), json.dumps({"pools": {"gpu": {"replaced": "lots", "refusals": True,
                                                                        "retry_at": 5, "health": []}, "x": [1]},
                                                      "nodes": {"gpu-0": "isolated", "gpu-1": {"done": 7}}}).encode())
    say(c.bucket, "i-gpu0", state="faulty", faults=[XID])
    out = c.heal()
    assert [d.action for d in out.decisions][:1] == ["replace"] and c.api.asked == ["i-gpu0"]
    state, _ = healing.read_state(c.log, "hl")
    assert state["pools"]["gpu"]["replaced"] == 1 and "x" not in state["pools"]


def test_a_spot_notice_reads_as_interrupted_and_what_is_not_a_notice_as_unknown():
    from gpufleet.nodes import health as hl

    now = dt.datetime(2026, 11, 27, 15, 0, 30, tzinfo=dt.timezone.utc)
    body = {"health": {"state": "interrupted", "faults": [], "checked_at": "2026-11-27T15:00:00Z", "interval": 60,
                       "gate": {"level": "quick", "passed": True}, "drained": True, "notice_error": None,
                       "notice": {"cloud": "aws", "kind": "instance-action", "at": "2026-11-27T15:02:00Z"}}}
    got = hl.reported(body, now)
    assert got["state"] == "interrupted" and got["notice"]["kind"] == "instance-action" and got["drained"] is True
    h = NodeHealth("gpu-0", "gpu", "cloud nodes", "interrupted", notice=got["notice"], drained=True, jobs="none")
    assert h.code == "GF-SPOT-NOTICE" and h.evidence == "instance-action notice for 2026-11-27T15:02:00Z"
    assert decided(h) == "replace"
    for bad in ({"cloud": "oracle", "kind": "instance-action"}, {"cloud": "gcp", "kind": "reboot"},
                {"cloud": "azure", "kind": "Preempt", "at": "soon"}):
        with pytest.raises(hl.Unreadable):
            hl.reported({"health": {**body["health"], "notice": bad}}, now)
    # a check's name is shown only: any one line will do (the node side writes up to 80 characters)
    faulty = {**body["health"], "state": "faulty", "faults": [{**XID, "check": "NVLink link 3 (GPU 2)"}]}
    assert hl.reported({"health": faulty}, now)["faults"][0]["check"] == "NVLink link 3 (GPU 2)"


@pytest.mark.parametrize("state", ["creating", "updating", "failed"])
def test_a_cluster_an_up_is_changing_or_that_failed_is_left_alone(tmp_path, cat, state):
    """Alone there is no lease: the registry's state says an `up` (or `down`) is at work, or left it failed."""
    c = Cluster(tmp_path, cat, stack_text())
    say(c.bucket, "i-gpu0", state="faulty", faults=[XID])
    c.reg.set_state("hl", state)
    out = c.heal()
    assert out.left and state in out.left and c.api.asked == [] and c.log.keys("") == []


# --- review of issue 51: whose word terminates a node (findings 4, 5, 7) ---------------------------

def _slurm_cluster(tmp_path, cat):
    c = Cluster(tmp_path, cat, stack_text(slurm=True, nodes=1))
    return c


def test_a_node_is_replaced_only_when_slurm_itself_says_drained_never_on_its_own_drained_claim(tmp_path, cat):
    """A node's own ``drained: true`` (any node of a GCP/Azure pool can write it) beside an idle Slurm view:
    a job may have started since; only Slurm's DRAINED (no job left, none can start) lets it be replaced."""
    c = _slurm_cluster(tmp_path, cat)
    say(c.bucket, "i-gpu0", state="faulty", faults=[XID], drained=True, hostname="gpu-a")
    say(c.bucket, "i-ctl0", pool="ctl", hostname="ctl-a", scheduler="nodes\nctl-a idle\ngpu-a idle\n")
    out = c.heal()
    assert c.api.asked == [] and out.decisions[1].action == "drain"


def test_slurms_view_counts_only_while_its_own_time_is_fresh(tmp_path, cat):
    """The controller's health report may be fresh while the Slurm view inside it is old (the watch re-uploads
    it): the view's own ``at`` is what is judged, here ten minutes old (nodes.cloud.heal.SLURM_VIEW_MAX_AGE_S)."""
    c = _slurm_cluster(tmp_path, cat)
    say(c.bucket, "i-gpu0", state="faulty", faults=[XID], drained=True, hostname="gpu-a")
    say(c.bucket, "i-ctl0", pool="ctl", hostname="ctl-a", scheduler="nodes\nctl-a idle\ngpu-a drained\n")
    body = json.loads(c.bucket.objects["status/ctl/i-ctl0.json"])
    old = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=10)
    body["scheduler"]["at"] = old.strftime("%Y-%m-%dT%H:%M:%SZ")
    c.bucket.put("status/ctl/i-ctl0.json", json.dumps(body).encode())
    out = c.heal()
    assert c.api.asked == [] and out.decisions[1].action != "replace"


def test_a_forged_long_interval_does_not_keep_a_report_fresh(tmp_path, cat):
    """Staleness is judged by the pool's own health.interval (the spec), not by the interval a status claims."""
    c = Cluster(tmp_path, cat, stack_text())
    say(c.bucket, "i-gpu0", state="faulty", faults=[XID], interval=86_400, age_s=3600)
    out = c.heal()
    assert c.api.asked == [] and out.decisions[0].action == "skip" and "stale" in out.decisions[0].why


@pytest.mark.parametrize("provider", ["azure", "gcp"])
def test_without_slurm_a_status_any_pool_member_can_write_never_terminates_a_node(tmp_path, cat, provider,
                                                                                   monkeypatch):
    """On GCP and Azure every node of a pool may write every status under status/<pool>/ (their bucket
    policies): a status alone may isolate a node, never get it terminated."""
    from gpufleet.clouds import cloud

    monkeypatch.setattr(cloud(provider), "replaces_nodes", True)
    c = Cluster(tmp_path, cat, stack_text().replace("provider: aws, region: us-east-1, instance_type: g6.12xlarge",
                                                    {"azure": "provider: azure, region: eastus, instance_type: "
                                                              "Standard_NC24ads_A100_v4",
                                                     "gcp": "provider: gcp, region: us-central1, instance_type: "
                                                            "a2-highgpu-1g"}[provider]))
    say(c.bucket, "i-gpu0", state="faulty", faults=[XID])
    out = c.heal()
    assert c.api.asked == [] and out.decisions[0].action == "isolate"


def test_slurm_node_names_are_matched_with_their_case(tmp_path, cat):
    """An Azure Uniform scale set VM's computer name is prefix + base-36 instance id in upper case
    ("nsgvmss00002D", learn.microsoft.com virtual-machine-scale-sets-instance-ids); Slurm keeps it as is."""
    c = _slurm_cluster(tmp_path, cat)
    say(c.bucket, "i-gpu0", state="faulty", faults=[XID], drained=True, hostname="gfgpu00000A")
    say(c.bucket, "i-ctl0", pool="ctl", hostname="ctl-a", scheduler="nodes\nctl-a idle\ngfgpu00000A drained\n")
    c.heal()
    assert c.api.asked == ["i-gpu0"]


# --- review of issue 51, finding 3: a replacement that launched a node and then failed ------------------

class Launches(Api):
    """A cloud that launches the new node, says so (``on_launch``), then fails before the old one is terminated
    (EC2's eventual consistency: the new id not yet visible; a termination refused), ``fail`` times."""

    def __init__(self, fail: int):
        super().__init__()
        self.fail, self.launched, self.finished = fail, [], []

    def replace_node(self, region, *, cluster, pool, node_id, release_first=False, launched=None, on_launch=None,
                     market=None):
        from gpufleet.errors import ReplacementUnfinished

        self.asked.append(node_id)
        if launched is None:
            launched = f"i-new{len(self.launched) + 1}"
            self.launched.append(launched)
            if on_launch is not None:
                on_launch(launched)
        if self.fail:
            self.fail -= 1
            raise ReplacementUnfinished(f"aws: InvalidInstanceID.NotFound: {launched}", launched=launched)
        self.finished.append(launched)
        return {"id": launched, "private_ip": "10.0.1.9", "zone": "us-east-1a", "fleet_id": "fleet-new"}


def test_a_replacement_that_launched_then_failed_is_finished_next_pass_never_launched_again(tmp_path, cat):
    c = Cluster(tmp_path, cat, stack_text("{on_fault: replace, max_replacements: 5}"), api=Launches(fail=2))
    say(c.bucket, "i-gpu0", state="faulty", faults=[XID])
    out = c.heal()
    assert c.api.launched == ["i-new1"] and out.trouble
    state, _ = healing.read_state(c.log, "hl")
    assert state["nodes"]["gpu-0"]["launched"] == "i-new1"  # remembered, with the pool's count
    c.heal(NOW + dt.timedelta(minutes=1))
    c.heal(NOW + dt.timedelta(minutes=2))
    assert c.api.launched == ["i-new1"] and c.api.finished == ["i-new1"]  # finished, never launched again
    assert c.node_ids()[0] == "i-new1"
    assert healing.recent_replacements(c.log, "hl", NOW + dt.timedelta(minutes=3)) == {"gpu": 1}  # counted once


def test_a_launched_but_unfinished_replacement_counts_toward_max_replacements(tmp_path, cat):
    c = Cluster(tmp_path, cat, stack_text("{on_fault: replace, max_replacements: 1}"), api=Launches(fail=10))
    say(c.bucket, "i-gpu0", state="faulty", faults=[XID])
    say(c.bucket, "i-gpu1", state="faulty", faults=[XID])
    c.heal()
    c.heal(NOW + dt.timedelta(minutes=1))
    assert c.api.launched == ["i-new1"]  # gpu-1 waits: the pool's one replacement this hour was launched


def test_heals_memory_of_a_launch_is_written_before_the_cloud_is_asked_anything_more(tmp_path, cat):
    """Even a pass that dies right after the launch (the process killed) leaves the launch in heal's memory."""
    c = Cluster(tmp_path, cat, stack_text("{on_fault: replace, max_replacements: 5}"), api=Launches(fail=0))
    seen = []
    real = c.api.replace_node

    def and_look(*a, on_launch=None, **kw):
        def look(new_id):
            on_launch(new_id)
            seen.append(healing.read_state(c.log, "hl")[0]["nodes"].get("gpu-0", {}).get("launched"))
        return real(*a, on_launch=look, **kw)

    c.api.replace_node = and_look
    say(c.bucket, "i-gpu0", state="faulty", faults=[XID])
    c.heal()
    assert seen == ["i-new1"]


# --- review of issue 51, finding 6: a node whose VM the cloud says is gone -------------------------------

def test_a_node_whose_vm_the_cloud_says_is_gone_is_replaced_not_unknown_forever(tmp_path, cat):
    """A reclaimed spot VM writes no more: its report goes stale (unknown), but the cloud's own answer (its API,
    the VM's tags checked) says it is gone, and the pool's rules replace it."""
    c = Cluster(tmp_path, cat, stack_text(), api=Api(gone={"i-gpu0"}))
    say(c.bucket, "i-gpu0", state="interrupted", age_s=3600)  # its last word, long ago
    say(c.bucket, "i-gpu1")
    out = c.heal()
    assert out.decisions[0].action == "replace" and out.nodes[0].state == "gone"
    assert c.api.asked == ["i-gpu0"] and c.node_ids()[0] == "i-new1"
    assert out.decisions[2].action == "skip"  # gpu-2: no status, and the cloud does not say it is gone


def test_a_gone_node_refused_capacity_is_asked_again_after_the_backoff(tmp_path, cat):
    c = Cluster(tmp_path, cat, stack_text("{on_fault: replace, max_replacements: 10}"),
                api=Api(refuse=True, gone={"i-gpu0"}))
    c.heal()
    c.heal(NOW + dt.timedelta(minutes=1))
    assert c.api.asked == ["i-gpu0"]  # within the backoff: waits
    c.heal(NOW + healing.backoff(1) + dt.timedelta(seconds=1))
    assert c.api.asked == ["i-gpu0", "i-gpu0"]


def test_a_cloud_that_cannot_say_leaves_the_node_unknown(tmp_path, cat):
    class Broken(Api):
        def gone_nodes(self, region, *, cluster, pool, node_ids):
            from gpufleet.errors import GpufleetError
            raise GpufleetError("aws: RequestLimitExceeded")

    c = Cluster(tmp_path, cat, stack_text(), api=Broken())
    out = c.heal()
    assert c.api.asked == [] and {d.action for d in out.decisions} == {"skip"}


def test_with_slurm_a_replacement_takes_its_predecessors_slot_and_joins_without_configure(tmp_path, cat):
    """Review of issue 51, finding 2: slurm.conf named each node by its host name; a new VM has a new one, and slurmd
    on a host slurm.conf does not name exits ("Unable to determine this slurmd's NodeName", SchedMD/slurm slurmd.c,
    22.05.8 and 23.11.4), so a replacement joined only after `gpufleet configure`. A compute node is now its pool's
    slot (gpu-0: configure.slurm.SLOT_STATE): heal keeps the slot under the new node's own id in the pool's bucket,
    where its agent reads it (and only its own), and Slurm is read by slot name."""
    from gpufleet.clouds import node_agent

    c = _slurm_cluster(tmp_path, cat)
    say(c.bucket, "i-gpu0", state="faulty", faults=[XID], hostname="ip-10-0-0-9")
    say(c.bucket, "i-ctl0", pool="ctl", hostname="ctl-a", scheduler="nodes\nctl-a idle\ngpu-0 drained\n")
    out = c.heal()
    assert c.api.asked == ["i-gpu0"]
    (d,) = [d for d in out.decisions if d.node == "gpu-0"]
    assert d.action == "replace", d
    # the new node's agent finds its slot under its own id; another node's id finds none
    class AgentsView:  # the bucket as the agent's store answers: NotThere for a missing object
        def get(self, key):
            if key not in c.bucket.objects:
                raise node_agent.NotThere(f"{key}: HTTP 404")
            return c.bucket.objects[key]

    assert node_agent.own_slot(AgentsView(), "gpu", "i-new1") == "gpu-0"
    assert node_agent.own_slot(AgentsView(), "gpu", "i-gpu0") is None
    (e,) = [e for e in c.events() if e["action"] == "replace"]
    assert "joins Slurm as gpu-0" in e["outcome"] and "gpufleet configure" not in e["outcome"], e["outcome"]


def test_a_replaced_nodes_slot_is_deleted_and_only_the_new_ones_kept(tmp_path, cat):
    """Review rev51b, finding 10: a replaced (or removed) node's slot file stayed, one more per replacement (not
    O(pools)), and on Azure, where a scale set made anew numbers its VMs from 0 again, a new VM could read another's
    stale slot."""
    from gpufleet.nodes.cloud import channel

    c = _slurm_cluster(tmp_path, cat)
    channel.assign_slots(c.bucket, [channel.NodeTarget("gpu", i, f"i-gpu{i}", None) for i in range(3)])  # as `up`
    say(c.bucket, "i-gpu0", state="faulty", faults=[XID], hostname="ip-10-0-0-9")
    say(c.bucket, "i-ctl0", pool="ctl", hostname="ctl-a", scheduler="nodes\nctl-a idle\ngpu-0 drained\n")
    c.heal()
    assert sorted(k for k in c.bucket.objects if "/slots/" in k) == [
        "pools/gpu/slots/i-gpu1.json", "pools/gpu/slots/i-gpu2.json", "pools/gpu/slots/i-new1.json"]


def test_on_azure_a_node_a_person_drained_is_not_terminated_on_a_status_a_peer_could_write(tmp_path, cat):
    """Slurm says drained, but for a person's reason, not gpufleet's own (its watch drains with "gpufleet: GF-..."):
    on Azure a status any node of the pool can write is then the only witness of a fault: isolated, not replaced."""
    text = stack_text(slurm=True, nodes=1).replace(
        "provider: aws, region: us-east-1, instance_type: g6.12xlarge",
        "provider: azure, region: eastus, instance_type: Standard_ND96isr_H100_v5").replace(
        "provider: aws, region: us-east-1, instance_type: g4dn.xlarge", "provider: azure, region: eastus, "
        "instance_type: Standard_NC24s_v3")
    c = Cluster(tmp_path, cat, text)
    c.api = Api()
    say(c.bucket, "i-gpu0", state="faulty", faults=[XID], hostname="gpu-a")
    view = "nodes\nctl-a idle\ngpu-a drained\njobs\ndrained\ngpu-a|swapping IB cable, do not resume [alice]\n"
    say(c.bucket, "i-ctl0", pool="ctl", hostname="ctl-a", scheduler=view)
    out = c.heal()
    assert c.api.asked == [] and out.decisions[1].action == "isolate"
    say(c.bucket, "i-ctl0", pool="ctl", hostname="ctl-a", scheduler=view.replace(
        "swapping IB cable, do not resume [alice]", "gpufleet: GF-XID-FATAL health.xid"))
    c.heal(NOW + dt.timedelta(minutes=1))
    assert c.api.asked == ["i-gpu0"]


def test_status_names_a_gone_node_heal_left_out_of_service(tmp_path, cat):
    """A gone node isolated by its pool's rules is named in `status` as a faulty one is."""
    from gpufleet.fleet import status

    c = Cluster(tmp_path, cat, stack_text("{on_fault: isolate}"), api=Api(gone={"i-gpu0"}))
    c.heal()
    row = status.ClusterStatus("hl", "up", "hl", None, None, None, 3, None, 0.0, 0.0)
    row.health = healing.summary(c.log, "hl")
    status._health_notes(row)
    assert any("gpu-0" in n and "GF-VM-GONE" in n for n in row.notes), row.notes


def test_heal_does_not_terminate_a_node_whose_notice_is_a_reboot_it_comes_back_from(tmp_path, cat):
    """(review rev51e, 3) AWS's system-reboot / instance-reboot and Azure's Reboot take the VM away for minutes and
    give the same VM back ("Scheduled Reboot ... Rebooting events include a scheduled start and end time", EC2
    DescribeInstanceStatus; Azure Scheduled Events: Reboot "The Virtual Machine is scheduled for reboot
    (non-persistent memory is lost)", learn.microsoft.com/azure/virtual-machines/linux/scheduled-events, read
    2026-11-28); the watch itself resumes the node once the notice is gone (node_watch KEPT[2]). But the watch says
    "interrupted" for every notice that takes the VM (verdict: takes()), health.BROKEN holds "interrupted", and heal
    (on_fault: replace) terminates the VM and launches another: a new VM, a new gate, a max_replacements slot and a
    capacity ask, for a reboot."""
    c = Cluster(tmp_path, cat, stack_text("{on_fault: replace, max_replacements: 5}"))
    say(c.bucket, "i-gpu0", drained=True)
    body = json.loads(c.bucket.objects["status/gpu/" + node_agent.safe_key("i-gpu0") + ".json"])
    body["health"].update(state="interrupted", notice={"cloud": "aws", "kind": "system-reboot",
                                                       "at": "2026-11-28T03:00:00Z"})
    c.bucket.put("status/gpu/" + node_agent.safe_key("i-gpu0") + ".json", json.dumps(body).encode())
    c.heal()
    assert c.api.asked == [], f"heal replaced {c.api.asked} for a system-reboot notice: the VM comes back by itself"
    assert [e["action"] for e in c.events() if e.get("node") == "gpu-0"] == []  # nothing done: it comes back


def test_statuses_are_read_a_few_at_a_time_and_nothing_of_them_is_kept_beyond_the_node_health(tmp_path, cat,
                                                                                                monkeypatch):
    """Memory flat in nodes (issue 51): a status document, and the report made of it, live only while the node is
    judged; a pass over many nodes never holds more of them at once than the reads it keeps ahead (AHEAD), however
    many nodes (here 30 nodes, 4 ahead: before, a batch of 256 documents was read at once and every node's report was
    kept until the last status was read)."""
    import weakref

    from gpufleet.nodes import health as hl
    from gpufleet.nodes.cloud import channel
    from gpufleet.nodes.cloud import heal as cloud_heal

    monkeypatch.setattr(cloud_heal, "AHEAD", 4)
    c = Cluster(tmp_path, cat, stack_text(nodes=30))
    for i in range(30):
        say(c.bucket, f"i-gpu{i}", state="faulty" if i == 7 else "ok", faults=[XID] if i == 7 else ())
    held = {"documents": [], "reports": []}
    most = dict.fromkeys(held, 0)

    class Document(dict):  # a status as read, which a weak reference can follow
        pass

    def alive(what: str, got):
        held[what].append(weakref.ref(got))
        most[what] = max(most[what], sum(1 for r in held[what] if r() is not None))
        return got

    read, said = channel.read_status, cloud_heal.said
    monkeypatch.setattr(channel, "read_status", lambda store, key: alive("documents", Document(read(store, key))))
    monkeypatch.setattr(cloud_heal, "said", lambda *a, **kw: alive("reports", said(*a, **kw)))
    out = c.heal(dry_run=True)
    assert len(held["documents"]) == len(held["reports"]) == 30  # every status read and judged
    assert [d.action for d in out.decisions].count("none") == 29 and out.nodes[7].state == "faulty"
    # the reads under way and the one judged; of it, its report alone, dropped once its node's health has what it says
    assert most["documents"] <= cloud_heal.AHEAD + 1 and most["reports"] == 1, most
    # what is kept of a node is small: its health has no dict, and its state is the one shared string, not the document's
    assert not hasattr(out.nodes[0], "__dict__") and not hasattr(out.decisions[0], "__dict__")
    assert all(h.state is hl.STATES[0] for h in out.nodes if h.state == "ok")


def test_a_pass_keeps_no_record_of_the_cluster_beside_the_one_its_last_replacement_left(tmp_path, cat, monkeypatch):
    """The registry's record is per node (inherently: the cluster's nodes); a pass that replaces nodes gets a new one
    from each replacement and keeps only that one, with the one the next replacement makes (before: the record as the
    pass began was kept to the end beside them, three records of every node at once)."""
    import weakref

    c = Cluster(tmp_path, cat, stack_text("{on_fault: replace, max_replacements: 3}"))
    for i in range(3):
        say(c.bucket, f"i-gpu{i}", state="faulty", faults=[XID])
    records, most, get = [], [0], Registry.get

    def tracked(self, name):
        got = get(self, name)
        records.append(weakref.ref(got))
        most[0] = max(most[0], sum(1 for r in records if r() is not None))
        return got

    monkeypatch.setattr(Registry, "get", tracked)
    c.heal()
    assert c.api.asked == ["i-gpu0", "i-gpu1", "i-gpu2"] and len(records) >= 4  # the pass's own, one per replacement
    assert most[0] == 2, f"{most[0]} records of the cluster held at once"

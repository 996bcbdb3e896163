"""`heal` sizing an elastic pool (nodes: {min, max}) with Slurm, from the controller's fresh Slurm view: more nodes
once jobs of the pool's partition have waited for nodes longer than health.scale_up_after, bounded by max and by
the nodes Slurm has not seen yet; fewer once nodes have been drained with no job longer than
health.scale_down_after, down to min; refusals backed off, never asked in a loop. The cloud's API is a stand-in
here (what it was asked); the real requests are tested against moto and the ARM fake (test_scale_*)."""

import datetime as dt

import pytest
from test_heal import XID, Api, Cluster, say, stack_text

from gpufleet.clouds import node_watch, scheduler
from gpufleet.errors import CapacityError, GpufleetError
from gpufleet.nodes.cloud import channel
from gpufleet.state import events

T0 = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
RULES = "{scale_up_after: 300, scale_down_after: 1800}"


class Elastic(Api):
    """The stand-in also adds and removes nodes, as add_nodes / remove_nodes do (the contract's shapes)."""

    def __init__(self, refuse=False):
        super().__init__(refuse=refuse)
        self.added, self.removed = [], []

    def add_nodes(self, region, *, cluster, pool, count, market=None, on_launch=None):
        if self.refuse:
            raise CapacityError("aws: EC2 did not launch 1 more node(s): InsufficientInstanceCapacity")
        got = []
        for _ in range(count):
            i = f"i-more{len(self.added)}"
            self.added.append(i)
            on_launch(i)
            got.append({"id": i, "private_ip": f"10.0.2.{len(self.added)}", "zone": "us-east-1a", "vm_uid": None,
                        "fleet_id": "fleet-more"})
        return got

    def remove_nodes(self, region, *, cluster, pool, node_ids):
        self.removed += node_ids


def cluster(tmp_path, cat, refuse=False):
    c = Cluster(tmp_path, cat, stack_text(health=RULES, slurm=True, nodes="{min: 1, max: 3}"), api=Elastic(refuse))
    return c


def view(c, now, gpu="idle", jobs="", extra=(), age_s=0, reasons=()):
    """Every node's status, and the controller's with Slurm's view read ``age_s`` ago (on the real clock, which
    heal judges its freshness by); ``reasons``: drained nodes' reasons (`sinfo -h -N -R -o '%N|%E'`,
    scheduler.PROBE: by NodeName, here the host name of a node configured before slots)."""
    hosts = {"i-gpu0": gpu, **dict(extra)}
    for i in hosts:
        say(c.bucket, i, hostname=f"h-{i}")
    lines = "".join(f"h-{i} {s}\n" for i, s in hosts.items())
    why = "".join(f"h-{i}|{r}\n" for i, r in dict(reasons).items())
    say(c.bucket, "i-ctl0", pool="ctl", hostname="h-ctl",
        scheduler=f"nodes\nh-ctl idle\n{lines}jobs\n{jobs}drained\n{why}", age_s=age_s)


def test_the_probe_says_which_partitions_jobs_wait_for_nodes():
    text = ("nodes\nh1 idle\njobs\nRUNNING gpu 1 None\nPENDING gpu 2 Resources\nPENDING gpu 1 Priority\n"
            "PENDING other 4-6 PartitionNodeLimit\nPENDING gpu 1 Dependency\nPENDING\ndrained\n")
    assert scheduler.waiting(text, set()) == {"gpu": 2, "other": 4}
    assert scheduler.parse("c", text)["jobs"] == {"running": 1, "pending": 5}  # the counts `status` shows, as before
    assert scheduler.waiting("nodes\njobs\nPENDING\nRUNNING\n", set()) == {}  # an older probe's answer says nothing


def test_jobs_waiting_longer_than_scale_up_after_add_nodes_once_up_to_max(tmp_path, cat):
    c = cluster(tmp_path, cat)
    view(c, T0, gpu="allocated", jobs="PENDING gpu 4 Resources\n")
    first = c.heal(T0)  # the wait starts now: nothing yet
    assert c.api.added == [] and not first.scaled
    dry = c.heal(T0 + dt.timedelta(seconds=301), dry_run=True)
    assert c.api.added == [] and any("add 2 node(s)" in w for x in dry.scaled for w in x.would)
    out = c.heal(T0 + dt.timedelta(seconds=301))
    assert c.api.added == ["i-more0", "i-more1"]  # 4 nodes asked, the pool's max is 3
    assert [n.node_id for n in c.reg.get("hl").nodes if n.pool == "gpu"] == ["i-gpu0", "i-more0", "i-more1"]
    # each added node joins Slurm as a slot slurm.conf declares up to max (configure.slurm): no `configure` asked
    assert out.configure is None
    assert sorted(k for k in c.bucket.objects if "/slots/" in k) == ["pools/gpu/slots/i-more0.json",
                                                                     "pools/gpu/slots/i-more1.json"]
    assert [e["action"] for e in events.read(c.log, "hl") if e["command"].startswith("scale")] == ["scale-add"] * 2
    # the new nodes are not in Slurm's view yet: the jobs still wait, but nothing more is asked (and max is reached)
    again = c.heal(T0 + dt.timedelta(seconds=900))
    assert c.api.added == ["i-more0", "i-more1"] and not again.trouble


def test_a_scale_up_waits_for_the_nodes_it_added_to_join_slurm(tmp_path, cat):
    c = Cluster(tmp_path, cat, stack_text(health=RULES, slurm=True, nodes="{min: 1, max: 5}"), api=Elastic())
    view(c, T0, gpu="allocated", jobs="PENDING gpu 1 Resources\n")
    c.heal(T0)
    c.heal(T0 + dt.timedelta(seconds=301))
    assert c.api.added == ["i-more0"]
    view(c, T0, gpu="allocated", jobs="PENDING gpu 1 Resources\n")  # i-more0 not in Slurm's view
    out = c.heal(T0 + dt.timedelta(seconds=700))
    assert c.api.added == ["i-more0"] and any("not in Slurm's view" in k for x in out.scaled for k in x.kept)
    view(c, T0, gpu="allocated", jobs="PENDING gpu 1 Resources\n", extra={"i-more0": "allocated"})
    c.heal(T0 + dt.timedelta(seconds=1100))  # joined, and the jobs waited again longer than the delay
    assert c.api.added == ["i-more0", "i-more1"]


def test_a_refusal_is_backed_off_never_asked_in_a_loop(tmp_path, cat):
    c = cluster(tmp_path, cat, refuse=True)
    calls = []
    real = c.api.add_nodes
    c.api.add_nodes = lambda *a, **k: calls.append(1) or real(*a, **k)
    view(c, T0, gpu="allocated", jobs="PENDING gpu 1 Resources\n")
    c.heal(T0)
    out = c.heal(T0 + dt.timedelta(seconds=301))
    assert len(calls) == 1 and out.scaled[0].refused and not out.trouble
    assert [n.node_id for n in c.reg.get("hl").nodes if n.pool == "gpu"] == ["i-gpu0"]
    c.heal(T0 + dt.timedelta(seconds=400))  # within the backoff (300 s): not asked
    assert len(calls) == 1
    (e,) = [e for e in events.read(c.log, "hl") if e["command"].startswith("scale")]
    assert e["refused"] is True


def test_nodes_drained_without_jobs_longer_than_scale_down_after_are_removed_down_to_min(tmp_path, cat):
    c = Cluster(tmp_path, cat, stack_text(health=RULES, slurm=True, nodes="{min: 1, max: 4}"), api=Elastic())
    c.api.add_nodes("us-east-1", cluster="hl", pool="gpu", count=3, on_launch=lambda i: None)
    from gpufleet.state.registry import Node

    c.reg.resize("hl", added=[(Node("gpu", 1 + k, "aws", "us-east-1", "g6.12xlarge", node_id=f"i-more{k}"), None)
                              for k in range(3)])
    states = {"i-more0": "drained", "i-more1": "drained", "i-more2": "allocated"}
    given_back = {"i-more0": node_watch.RELEASE, "i-more1": node_watch.RELEASE, "i-gpu0": node_watch.RELEASE}
    view(c, T0, gpu="drained", extra=states, reasons=given_back)
    c.heal(T0)  # drained, no job: timed from now
    assert c.api.removed == []
    view(c, T0, gpu="idle", extra=states, reasons=given_back)
    out = c.heal(T0 + dt.timedelta(seconds=1801))
    assert c.api.removed == ["i-more0", "i-more1"]  # never i-more2 (its jobs run); i-gpu0 idle, not drained: named
    assert any(k.startswith("gpu-0: idle") for x in out.scaled for k in x.kept)
    assert [n.node_id for n in c.reg.get("hl").nodes if n.pool == "gpu"] == ["i-gpu0", "i-more2"]


def test_no_fresh_slurm_view_means_nothing_is_sized(tmp_path, cat):
    c = cluster(tmp_path, cat)
    view(c, T0, gpu="allocated", jobs="PENDING gpu 4 Resources\n")
    c.heal(T0)
    view(c, T0, gpu="allocated", jobs="PENDING gpu 4 Resources\n", age_s=600)  # older than heal trusts (180 s)
    out = c.heal(T0 + dt.timedelta(seconds=900))
    assert c.api.added == [] and not out.scaled


@pytest.mark.parametrize("bad", ["{scale_up_after: 5}", "{scale_down_after: true}"])
def test_bad_delays_are_refused(tmp_path, cat, bad):
    from gpufleet.errors import SpecErrors

    with pytest.raises(SpecErrors):
        Cluster(tmp_path, cat, stack_text(health=bad, nodes="{min: 1, max: 3}"))


def test_in_a_team_scale_holds_the_clusters_lease_and_a_held_cluster_is_not_scaled(tmp_path, cat, monkeypatch):
    """`scale` takes the cluster's lease as a heal pass does: one that finds it held changes nothing (exit 4)."""
    from gpufleet.clouds import inventory
    from gpufleet.fleet import scale as scaling
    from gpufleet.nodes.run import Seams
    from gpufleet.state import leases
    from gpufleet.state.shared import DirectoryStore

    (tmp_path / "shared").mkdir()
    team_store = DirectoryStore(f"file://{tmp_path / 'shared'}")
    team_store.create("team.json", b"{}")
    monkeypatch.setenv("GPUFLEET_TEAM", team_store.url)
    c = cluster(tmp_path, cat)

    def scale():
        return scaling.scale(c.stack, cat, pool="gpu", count=2, registry=c.reg,
                             seams=Seams(cloud_api=inventory.Clouds(open={"aws": c.api})), outputs=c.outputs)

    other = leases.acquire(team_store, "hl", "up", "bob@example.com", wait=False)
    try:
        with pytest.raises(leases.LeaseHeld) as ei:
            scale()
        assert ei.value.exit_code == 4 and c.api.added == [] and events.read(team_store, "hl") == []
    finally:
        other.release()
    assert scale().added == ["i-more0"] and leases.read(team_store, "hl") is None  # given back
    assert [e["action"] for e in events.read(team_store, "hl")] == ["scale-add"]


def test_a_scale_up_that_failed_after_the_cloud_launched_never_launches_again_nor_past_max(tmp_path, cat):
    """The cloud made the nodes, then add_nodes (EC2 not describing them yet, eventual consistency) or the registry's
    write failed: heal's memory holds the launched ids from on_launch, counts them against max, backs the pool off,
    and later passes only report them (`gpufleet registry rebuild` records them), never launch again."""
    from gpufleet.errors import GpufleetError

    class LaunchesThenFails(Elastic):
        def add_nodes(self, region, *, cluster, pool, count, market=None, on_launch=None):
            for _ in range(count):
                self.added.append(f"i-more{len(self.added)}")
                on_launch(self.added[-1])
            raise GpufleetError("aws: i-more was launched for pool gpu but EC2 does not describe it yet")

    c = Cluster(tmp_path, cat, stack_text(health=RULES, slurm=True, nodes="{min: 1, max: 2}"), api=LaunchesThenFails())
    outs = []
    for s in (0, 301, 361, 421, 481, 4000):  # `heal --watch` at the pool's interval, then past any backoff
        view(c, T0, gpu="allocated", jobs="PENDING gpu 1 Resources\n")
        outs.append(c.heal(T0 + dt.timedelta(seconds=s)))
    assert c.api.added == ["i-more0"]
    assert any("i-more0" in k and "registry rebuild" in k for x in outs[-1].scaled for k in x.kept)


def test_heal_scales_down_only_nodes_drained_for_gpufleet_never_a_persons_drain(tmp_path, cat):
    """README: "a node a person drained is never resumed"; heal's scale-down removes a drained idle node only when
    Slurm's drain reason is gpufleet's (`gpufleet: ...`, the README's `gpufleet: release` to give a node back); a
    node a person drained to look at it (here: ECC retirements) is kept, and named."""
    c = Cluster(tmp_path, cat, stack_text(health=RULES, slurm=True, nodes="{min: 1, max: 4}"), api=Elastic())
    c.api.add_nodes("us-east-1", cluster="hl", pool="gpu", count=2, on_launch=lambda i: None)
    from gpufleet.state.registry import Node

    c.reg.resize("hl", added=[(Node("gpu", 1 + k, "aws", "us-east-1", "g6.12xlarge", node_id=f"i-more{k}"), None)
                              for k in range(2)])
    states = {"i-more0": "drained", "i-more1": "drained"}
    reasons = {"i-more0": "ECC page retirements under investigation, do not touch [alice@2026-11-27T10:00:00]",
               "i-more1": node_watch.RELEASE}
    view(c, T0, gpu="allocated", extra=states, reasons=reasons)
    c.heal(T0)
    view(c, T0, gpu="allocated", extra=states, reasons=reasons)
    out = c.heal(T0 + dt.timedelta(seconds=1801))
    assert c.api.removed == ["i-more1"]
    assert any(k.startswith("gpu-1: drained by a person") for x in out.scaled for k in x.kept)


def test_a_refusal_after_a_partial_launch_leaves_nothing_unrecorded_and_is_asked_again_after_its_backoff(tmp_path, cat):
    """AWS add_nodes' all-or-nothing: a partial launch is terminated (DeleteFleets) and refused: nothing is left, so
    heal's memory keeps no launched id of it and the pool is asked again once the backoff has passed."""
    class PartlyThenRefuses(Elastic):
        def add_nodes(self, region, *, cluster, pool, count, market=None, on_launch=None):
            self.added.append(f"i-part{len(self.added)}")
            on_launch(self.added[-1])
            raise CapacityError("aws: EC2 launched 1 of 2 node(s): InsufficientInstanceCapacity (terminated)")

    c = Cluster(tmp_path, cat, stack_text(health=RULES, slurm=True, nodes="{min: 1, max: 3}"), api=PartlyThenRefuses())
    for s in (0, 301, 4000):
        view(c, T0, gpu="allocated", jobs="PENDING gpu 2 Resources\n")
        out = c.heal(T0 + dt.timedelta(seconds=s))
    assert c.api.added == ["i-part0", "i-part1"]
    assert not any("not recorded" in k for x in out.scaled for k in x.kept)


def test_a_node_heal_adds_to_an_elastic_pool_gets_its_slurm_slot_in_the_pools_bucket(tmp_path, cat):
    """Review rev51b, finding 2 (the reviewer's test): heal's scale-up wrote no slot for the node it added, so its agent
    started no slurmd and the pool was stuck with a paid node that never worked until a person ran `configure`. It
    gets the lowest free slot (gpu-1) as a replacement gets its predecessor's, where its agent reads it."""
    import json

    c = Cluster(tmp_path, cat, stack_text(health=RULES, slurm=True, nodes="{min: 1, max: 3}"), api=Elastic())
    view(c, T0, gpu="allocated", jobs="PENDING gpu 1 Resources\n")
    c.heal(T0)
    view(c, T0, gpu="allocated", jobs="PENDING gpu 1 Resources\n")
    out = c.heal(T0 + dt.timedelta(seconds=301))
    assert c.api.added == ["i-more0"] and out.configure is None
    slot = json.loads(c.bucket.objects.get("pools/gpu/slots/i-more0.json", b"null"))
    assert slot == {"node_id": "i-more0", "slurm_name": "gpu-1"}, f"no Slurm slot for the added node: {slot}"
    (e,) = [e for e in events.read(c.log, "hl") if e["action"] == "scale-add"]
    assert "joins Slurm as gpu-1" in e["outcome"], e["outcome"]


def test_jobs_slurm_says_wait_for_unavailable_slots_ask_for_nodes():
    """Once slurm.conf declares an elastic pool's slots up to max (drained until a node registers as one), a job that
    asks more nodes than the pool's working ones no longer waits with PartitionNodeLimit but with "ReqNodeNotAvail,
    UnavailableNodes:<slots>" (SchedMD/slurm slurm-22-05-8-1 src/slurmctld/node_scheduler.c _pick_best_nodes:
    runnable on the partition's nodes, not on the available ones -> ESLURM_NODE_NOT_AVAIL, state_desc as written
    there; squeue's %r prints the state_desc, src/squeue/print.c _print_job_reason): such a job waits for nodes. One
    held by a reservation or maintenance does not."""
    text = ("nodes\ngpu-0 allocated\njobs\nPENDING gpu 2 ReqNodeNotAvail, UnavailableNodes:gpu-[1-2]\n"
            "PENDING gpu 1 ReqNodeNotAvail, Reserved for maintenance\nPENDING gpu 3 ReqNodeNotAvail, May be reserved "
            "for other job\ndrained\n")
    assert scheduler.waiting(text, {"gpu-1", "gpu-2"}) == {"gpu": 2}
    # the list names the slots no node holds: not a held node a person drained (`sbatch -w gpu-0`, review rev51d
    # finding 2); a partition's list with both (no -w: all its unavailable nodes) still waits for a slot
    held = "nodes\njobs\nPENDING gpu 1 ReqNodeNotAvail, UnavailableNodes:gpu-0\n"
    assert scheduler.waiting(held, {"gpu-1", "gpu-2"}) == {}
    assert scheduler.waiting(held.replace(":gpu-0", ":gpu-[0,2]"), {"gpu-1", "gpu-2"}) == {"gpu": 1}


def _grown(tmp_path, cat, extra=2, rules=RULES):
    """A pool {min 1, max 4} that grew to 1 + ``extra`` nodes (gpu-1 ... are i-more0 ...)."""
    from gpufleet.state.registry import Node

    c = Cluster(tmp_path, cat, stack_text(health=rules, slurm=True, nodes="{min: 1, max: 4}"), api=Elastic())
    c.api.add_nodes("us-east-1", cluster="hl", pool="gpu", count=extra, on_launch=lambda i: None)
    c.reg.resize("hl", added=[(Node("gpu", 1 + k, "aws", "us-east-1", "g6.12xlarge", node_id=f"i-more{k}"), None)
                              for k in range(extra)])
    channel.assign_slots(c.bucket, [channel.NodeTarget("gpu", n.idx, n.node_id, None) for n in c.reg.get("hl").nodes
                                    if n.pool == "gpu"])  # each node's slot, as `up` and `scale` keep them
    return c


def _given_back(c) -> list[str]:
    """The nodes whose slot says heal gives them back (their agent's watch drains them)."""
    import json

    return sorted(json.loads(v)["slurm_name"] for k, v in c.bucket.objects.items()
                  if k.startswith("pools/gpu/slots/") and json.loads(v).get("release") is True)


def test_heal_gives_an_idle_elastic_pool_back_down_to_min_then_removes_what_slurm_shows_drained(tmp_path, cat):
    """Review rev51b, finding 6 (the reviewer's test, "three idle nodes of a {min: 1} pool were paid for a day"): an
    idle node was only named, nothing drained it (Slurm's power saving is off: slurm.conf sets no SuspendTime,
    INFINITE when unset, src/common/read_config.c, 22.05.8). heal now gives a node idle for scale_down_after back
    through its slot (its agent's watch drains it for GF-SCALE-DOWN), never below min and the newest slots first, and
    removes it on a later pass whose fresh view shows it drained with no job; each step an event."""
    c = _grown(tmp_path, cat)
    idle = {"i-more0": "idle", "i-more1": "idle"}
    view(c, T0, gpu="idle", extra=idle)
    c.heal(T0)  # idle from now
    view(c, T0, gpu="idle", extra=idle)
    c.heal(T0 + dt.timedelta(seconds=1000))
    assert _given_back(c) == [] and c.api.removed == []
    view(c, T0, gpu="idle", extra=idle)
    out = c.heal(T0 + dt.timedelta(seconds=1801))
    assert _given_back(c) == ["gpu-1", "gpu-2"], "no idle node was given back"  # gpu-0 kept: min 1
    assert c.api.removed == [] and any("gpu-0: idle since" in k for x in out.scaled for k in x.kept)
    # their watches drained them; the next pass's fresh view shows them drained with no job: removed
    drained = {"i-more0": "drained", "i-more1": "drained"}
    why = dict.fromkeys(drained, node_watch.SCALE_DOWN)
    view(c, T0, gpu="idle", extra=drained, reasons=why)
    c.heal(T0 + dt.timedelta(seconds=1900))
    assert c.api.removed == ["i-more0", "i-more1"]
    assert [n.node_id for n in c.reg.get("hl").nodes if n.pool == "gpu"] == ["i-gpu0"]
    said = [(e["action"], e["node"], e["done"]) for e in events.read(c.log, "hl") if e["command"].startswith("scale")]
    assert sorted(said) == [("scale-drain", "gpu-1", True), ("scale-drain", "gpu-2", True),
                            ("scale-remove", "gpu-1", True), ("scale-remove", "gpu-2", True)]  # (the log's order: by time)
    view(c, T0, gpu="idle")
    c.heal(T0 + dt.timedelta(seconds=9000))  # at min: the last node is never given back
    assert _given_back(c) == [] and c.api.removed == ["i-more0", "i-more1"]
    assert sorted(k for k in c.bucket.objects if "/slots/" in k) == ["pools/gpu/slots/i-gpu0.json"]


@pytest.mark.parametrize("replace_reserved", [False, True])
def test_heal_does_not_give_back_idle_nodes_of_a_pool_on_reserved_capacity(tmp_path, cat, replace_reserved):
    """Review rev51e finding 8. Issue 51 step 3 and README (Health, "What never happens"): "a node on a reservation or
    Capacity Block is isolated, not released, unless `replace_reserved: true`". heal's scale-down looked at no
    reservation: an elastic pool on an On-Demand Capacity Reservation or a Capacity Block had its idle nodes given
    back and terminated after scale_down_after. That saves nothing (a Capacity Block is paid up front, an ODCR is
    billed whether an instance uses it or not: "Capacity Reservation pricing and billing" in the EC2 User Guide, read
    2026-11-28) and throws away a gated node (a dcgm3 gate is half an hour) that the next burst must launch and gate
    again. With replace_reserved: true the pool is given back as any other."""
    from gpufleet.state.registry import Node

    rules = RULES.replace("}", f", replace_reserved: {str(replace_reserved).lower()}}}")
    text = stack_text(health=rules, slurm=True, nodes="{min: 1, max: 4}").replace(
        "nodes: {min: 1, max: 4}", "nodes: {min: 1, max: 4}, reservations: [{id: cr-0123456789abcdef0, zone: us-east-1a}]")
    c = Cluster(tmp_path, cat, text, api=Elastic())
    c.api.add_nodes("us-east-1", cluster="hl", pool="gpu", count=2, on_launch=lambda i: None)
    c.reg.resize("hl", added=[(Node("gpu", 1 + k, "aws", "us-east-1", "g6.12xlarge", node_id=f"i-more{k}"), None)
                              for k in range(2)])
    channel.assign_slots(c.bucket, [channel.NodeTarget("gpu", n.idx, n.node_id, None) for n in c.reg.get("hl").nodes
                                    if n.pool == "gpu"])
    idle = {"i-more0": "idle", "i-more1": "idle"}
    for later in (0, 1000, 1801, 3700):
        view(c, T0, gpu="idle", extra=idle)
        out = c.heal(T0 + dt.timedelta(seconds=later))
    given = _given_back(c)
    if replace_reserved:
        assert given == ["gpu-1", "gpu-2"]
        return
    assert given == [], f"heal gave back {given} of a pool on reserved capacity (reservations: [cr-...])"
    kept = [k for x in out.scaled for k in x.kept]
    assert any(k.startswith("gpu-1: idle since") and "on reserved capacity (replace_reserved is false)" in k
               for k in kept), kept


def test_every_scale_event_carries_its_code_and_evidence(tmp_path, cat):
    """Review rev51e finding 9: issue 51 step 6 wants every action, scale included, an event "with the fault code and
    the evidence"; scale events said why in their text alone. Now GF-SCALE-UP (nodes added or taken back for jobs) or
    GF-SCALE-DOWN (given back, removed) and what led to it: the jobs waiting, the node idle or drained since when."""
    c = cluster(tmp_path, cat)
    view(c, T0, gpu="allocated", jobs="PENDING gpu 4 Resources\n")
    c.heal(T0)
    c.heal(T0 + dt.timedelta(seconds=301))
    (tmp_path / "down").mkdir()
    c2 = _grown(tmp_path / "down", cat)  # another cluster, grown, whose jobs have ended
    idle = {"i-more0": "idle", "i-more1": "idle"}
    for later in (0, 1801):
        view(c2, T0, gpu="idle", extra=idle)
        c2.heal(T0 + dt.timedelta(seconds=later))
    drained = {"i-more0": "drained", "i-more1": "drained"}
    view(c2, T0, gpu="idle", extra=drained, reasons=dict.fromkeys(drained, node_watch.SCALE_DOWN))
    c2.heal(T0 + dt.timedelta(seconds=1900))
    said = [(e["action"], e.get("code"), e.get("evidence")) for log in (c.log, c2.log)
            for e in events.read(log, "hl") if e["command"].startswith("scale")]
    adds = [x for x in said if x[0] == "scale-add"]
    assert adds and all(code == "GF-SCALE-UP" and "waiting since" in (ev or "") for _, code, ev in adds), said
    downs = [x for x in said if x[0] in ("scale-drain", "scale-remove")]
    assert len(downs) == 4 and all(code == "GF-SCALE-DOWN" for _, code, _ in downs), said
    assert all("idle (no job, not drained) in Slurm's view since" in ev for a, _, ev in downs if a == "scale-drain")
    assert all("with no job in Slurm's view since" in ev for a, _, ev in downs if a == "scale-remove")


def test_a_node_with_a_job_is_never_given_back_and_one_given_back_is_removed_only_once_its_job_ended(tmp_path, cat):
    c = _grown(tmp_path, cat)
    for s in (0, 1801):
        view(c, T0, gpu="allocated", extra={"i-more0": "mixed", "i-more1": "idle"})
        c.heal(T0 + dt.timedelta(seconds=s))
    assert _given_back(c) == ["gpu-2"]  # gpu-0 and gpu-1 run jobs
    # a job started on gpu-2 before its watch drained it: draining, not removed
    view(c, T0, gpu="allocated", extra={"i-more0": "mixed", "i-more1": "draining"},
         reasons={"i-more1": node_watch.SCALE_DOWN})
    c.heal(T0 + dt.timedelta(seconds=1900))
    assert c.api.removed == []
    view(c, T0, gpu="allocated", extra={"i-more0": "mixed", "i-more1": "drained"},
         reasons={"i-more1": node_watch.SCALE_DOWN})
    c.heal(T0 + dt.timedelta(seconds=2500))
    assert c.api.removed == ["i-more1"]


def test_jobs_that_come_take_back_the_nodes_given_back_before_anything_is_launched(tmp_path, cat):
    c = _grown(tmp_path, cat)
    for s in (0, 1801):
        view(c, T0, gpu="idle", extra={"i-more0": "idle", "i-more1": "idle"})
        c.heal(T0 + dt.timedelta(seconds=s))
    assert _given_back(c) == ["gpu-1", "gpu-2"]
    why = {"i-more0": node_watch.SCALE_DOWN, "i-more1": node_watch.SCALE_DOWN}
    view(c, T0, gpu="allocated", extra={"i-more0": "drained", "i-more1": "drained"}, reasons=why,
         jobs="PENDING gpu 2 Resources\n")
    out = c.heal(T0 + dt.timedelta(seconds=1900))
    assert _given_back(c) == [] and c.api.removed == []
    assert c.api.added == ["i-more0", "i-more1"]  # the pool's own two (_grown): nothing launched for these jobs
    assert any("taken back first" in k for x in out.scaled for k in x.kept)
    assert [e["action"] for e in events.read(c.log, "hl") if e["command"].startswith("scale")][-2:] == ["scale-resume"] * 2


@pytest.mark.parametrize("on_fault", ["replace", "isolate"])
@pytest.mark.parametrize("by", ["heal", "a person"])
def test_a_node_given_back_that_reports_a_fault_is_removed_never_replaced(tmp_path, cat, by, on_fault):
    """Noted by reviews rev51c 9 and rev51d 5: a node on its way out (heal gave it back: its slot says release and
    heal's memory keeps it; or a person drained it `gpufleet: release`) that then reports a fault went down heal's
    replace path: drained, no job, faulty -> a new VM launched for a node being given back, and the pool kept its size.
    It is removed as a given-back node is, never replaced. Its fault's drain may have replaced GF-SCALE-DOWN (Slurm
    keeps one reason a node: the watch drains for the fault), so heal's memory says it was given back; a person's
    `gpufleet: release` stays (the watch and the health program keep it). Nor is it isolated (kept drained, paid for)."""
    c = _grown(tmp_path, cat, rules=RULES.replace("}", f", on_fault: {on_fault}}}"))
    if by == "heal":
        for s in (0, 1801):
            view(c, T0, gpu="allocated", extra={"i-more0": "mixed", "i-more1": "idle"})
            c.heal(T0 + dt.timedelta(seconds=s))
        assert _given_back(c) == ["gpu-2"]
        why = "gpufleet: GF-XID-FATAL health.xid"  # its fault's drain replaced GF-SCALE-DOWN
    else:
        why = node_watch.RELEASE
    for s in (1900, 1900 + 1801):
        view(c, T0, gpu="allocated", extra={"i-more0": "mixed", "i-more1": "drained"}, reasons={"i-more1": why})
        say(c.bucket, "i-more1", state="faulty", faults=[XID], drained=True, hostname="h-i-more1")
        out = c.heal(T0 + dt.timedelta(seconds=s))
        assert c.api.asked == [], f"heal replaced gpu-2, given back by {by}: {[d.why for d in out.decisions]}"
    assert c.api.removed == ["i-more1"]
    assert [n.node_id for n in c.reg.get("hl").nodes if n.pool == "gpu"] == ["i-gpu0", "i-more0"]


def test_without_a_fresh_slurm_view_nothing_is_given_back_or_removed(tmp_path, cat):
    c = _grown(tmp_path, cat)
    view(c, T0, gpu="idle", extra={"i-more0": "idle", "i-more1": "idle"})
    c.heal(T0)
    for s in (1801, 4000):  # Slurm's view older than heal trusts (180 s): unknown
        view(c, T0, gpu="idle", extra={"i-more0": "drained", "i-more1": "idle"}, age_s=600,
             reasons={"i-more0": node_watch.SCALE_DOWN})
        c.heal(T0 + dt.timedelta(seconds=s))
    assert _given_back(c) == [] and c.api.removed == []


def test_a_job_asking_more_nodes_than_the_pool_has_registered_makes_the_pool_grow(tmp_path, cat):
    """Review rev51d finding 1: with the unheld slots drained, a job asking more nodes than the pool's registered ones
    waits, as its partition's first job, with the state_desc "Nodes required for job are DOWN, DRAINED or reserved for
    jobs in higher priority partitions" (slurm-22-05-8-1 src/slurmctld/job_scheduler.c:1727-1738; slurm-23-11-4-1
    job_scheduler.c:1751; squeue's %r prints it; seen with the real slurmctld 22.05.8 by the reviewer, 2026-11-27):
    heal took it for no wait for nodes, and a pool at min never grew for one multi-node job."""
    c = cluster(tmp_path, cat)  # {min 1, max 3} at 1 node
    wait = "PENDING gpu 2 Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions\n"
    for s in (0, 400, 4000):
        view(c, T0, gpu="idle", jobs=wait)
        c.heal(T0 + dt.timedelta(seconds=s))
    assert c.api.added != [], "a 2-node job waited an hour on a {min 1, max 3} pool of 1 node: nothing was added"


def test_a_job_that_asks_for_a_drained_node_by_name_neither_grows_the_pool_nor_keeps_it_at_its_size(tmp_path, cat):
    """Review rev51d finding 2 (the reviewer's test): "ReqNodeNotAvail, UnavailableNodes:<list>" names the
    partition's unavailable nodes, and with the job's required nodes (`sbatch -w gpu-0`, req_node_bitmap) only those
    (slurm-22-05-8-1 src/slurmctld/node_scheduler.c:2580-2605). A job held for a node a person drained waits for THAT
    node: a new node never serves it. heal launched one anyway, and since `_shrink` runs only when nothing waits, the
    idle nodes were never given back while that one job pended (days)."""
    c = _grown(tmp_path, cat)  # {min 1, max 4} at 3: gpu-0 drained by a person, gpu-1 and gpu-2 idle; gpu-3 unheld
    job = "PENDING gpu 1 ReqNodeNotAvail, UnavailableNodes:gpu-0\n"
    for s in (0, 400, 2000, 4000, 90000):
        view(c, T0, gpu="drained", extra={"i-more0": "idle", "i-more1": "idle"}, jobs=job,
             reasons={"i-gpu0": "swapping a cable"})
        c.heal(T0 + dt.timedelta(seconds=s))
    assert c.api.added == ["i-more0", "i-more1"], f"heal launched {c.api.added[2:]} for a job that asks for gpu-0 alone"
    assert _given_back(c) != [], "two idle nodes were kept a day for a job no new node can serve"


def _reason_line_key(slot: str, host: str) -> str:
    """The name a drained node's reason line starts with, as scheduler.PROBE's `sinfo -R` format asks it: %N is the
    NodeName (a cloud slot), %n its host name (slurm-22-05-8-1 src/sinfo/print.c _print_node_hostnames; run with
    slurmctld 22.05.8 by review rev51c: `-o '%n|%E'` -> `ip-10-0-0-9|...`, `-o '%N|%E'` -> `gpu-0|...`)."""
    fmt = scheduler.PROBE.rsplit("-o '", 1)[1].split("|", 1)[0]
    return {"%N": slot, "%n": host}[fmt]


def test_a_cloud_slot_drained_for_gpufleet_is_removed_its_reason_read_by_slot_as_the_probe_asks_slurm(tmp_path, cat):
    """Nodes are listed by NodeName (a cloud node's slot, gpu-1): the reasons must be too, or a slot drained
    `gpufleet: release` has no reason (never removed) and a GCP/Azure node's fault is never vouched."""
    from gpufleet.state.registry import Node

    c = Cluster(tmp_path, cat, stack_text(health=RULES, slurm=True, nodes="{min: 1, max: 4}"), api=Elastic())
    c.reg.resize("hl", added=[(Node("gpu", 1, "aws", "us-east-1", "g6.12xlarge", node_id="i-more0"), None)])
    for i in ("i-gpu0", "i-more0"):
        say(c.bucket, i, hostname=f"h-{i}")
    answer = ("nodes\nh-ctl idle\ngpu-0 allocated\ngpu-1 drained\njobs\n"
              f"drained\n{_reason_line_key('gpu-1', 'h-i-more0')}|{node_watch.RELEASE}\n")
    for s in (0, 1801):
        say(c.bucket, "i-ctl0", pool="ctl", hostname="h-ctl", scheduler=answer)
        c.heal(T0 + dt.timedelta(seconds=s))
    assert c.api.removed == ["i-more0"], "the node drained `gpufleet: release` was never removed"


def test_a_spot_pools_scale_up_grows_on_its_spot_fallback_when_spot_is_refused(tmp_path, cat):
    """Issue 51 step 4: "the replacement follows the pool's rules (spot first, then the spot_fallback)"; heal's
    replacement does (nodes/cloud/heal.py:229-251), and rev51b #7's fix asked the same of growth ("take the market from
    the pool's spec (spot first, then its spot_fallback on refusal)"). fleet/scale.py grow asks spot alone
    (``_market``): when spot capacity is short, exactly when the fallback is for, the pool never grows; heal backs off
    and asks spot again, forever, while the jobs wait."""
    class SpotShort(Elastic):
        def add_nodes(self, region, *, count, market=None, on_launch=None, **where):
            self.markets = [*getattr(self, "markets", []), market]
            if market == "spot":
                raise CapacityError("aws: EC2 did not launch 1 more node(s): InsufficientInstanceCapacity")
            return super().add_nodes(region, count=count, on_launch=on_launch, **where)

    text = stack_text(health=RULES, slurm=True, nodes="{min: 1, max: 3}").replace(
        "nodes: {min: 1, max: 3}", "nodes: {min: 1, max: 3}, spot: true, failover: {spot_fallback: on-demand}")
    c = Cluster(tmp_path, cat, text, api=SpotShort())
    for s in (0, 301, 4000, 20000):
        view(c, T0, gpu="allocated", jobs="PENDING gpu 1 Resources\n")
        c.heal(T0 + dt.timedelta(seconds=s))
    assert c.api.added, f"asked {c.api.markets}: the pool never grew on its spot_fallback"
    assert c.api.markets[:2] == ["spot", "on-demand"]  # spot first, its fallback on refusal


class LaunchesThenFails(Elastic):
    """A scale-up whose first launch, i-gone0, fails after the cloud made it (EC2 does not describe it yet), before
    anything records it; later launches go as the pool's cloud's do."""

    def add_nodes(self, region, *, count, market=None, on_launch=None, **where):
        if "i-gone0" in self.added:
            return super().add_nodes(region, count=count, on_launch=on_launch, **where)
        self.added.append("i-gone0")
        on_launch("i-gone0")
        raise GpufleetError("aws: i-gone0 was launched for pool gpu but EC2 does not describe it yet")


def test_a_launched_id_never_recorded_leaves_heals_memory_when_gone_or_after_a_bound_and_the_pool_grows_again(
        tmp_path, cat):
    """fleet/heal.py _elastic: ``unrecorded`` ids leave heal's memory only when the registry has them; while one is
    there heal never scales the pool up, and tells the user to run `gpufleet registry rebuild`. An id whose instance
    is gone (terminated by EC2, a spot reclaim, `reap`, a person) is never recorded by a rebuild: the pool never
    grows again, whatever waits, with no expiry and no look at the cloud."""
    c = Cluster(tmp_path, cat, stack_text(health=RULES, slurm=True, nodes="{min: 1, max: 3}"), api=LaunchesThenFails())
    for s in (0, 301):
        view(c, T0, gpu="allocated", jobs="PENDING gpu 1 Resources\n")
        c.heal(T0 + dt.timedelta(seconds=s))
    assert c.api.added == ["i-gone0"]
    # i-gone0 never came up (terminated); `registry rebuild` finds nothing to record
    for days in (1, 2, 7):
        view(c, T0, gpu="allocated", jobs="PENDING gpu 1 Resources\n")
        c.heal(T0 + dt.timedelta(days=days))
    assert len(c.api.added) > 1, "a week later the pool has still not grown for the jobs that wait"


def test_a_launched_id_the_cloud_says_is_terminated_leaves_heals_memory_at_the_next_pass(tmp_path, cat):
    c = Cluster(tmp_path, cat, stack_text(health=RULES, slurm=True, nodes="{min: 1, max: 3}"), api=LaunchesThenFails())
    for s in (0, 301):
        view(c, T0, gpu="allocated", jobs="PENDING gpu 1 Resources\n")
        c.heal(T0 + dt.timedelta(seconds=s))
    c.api.gone = {"i-gone0"}  # EC2 lists it terminated (aws/replace.py gone_nodes)
    view(c, T0, gpu="allocated", jobs="PENDING gpu 1 Resources\n")
    out = c.heal(T0 + dt.timedelta(seconds=301 + 3600))  # after the refusal's backoff, well within UNRECORDED_MAX
    assert len(c.api.added) == 2, c.api.added
    assert any("gone before it was recorded: i-gone0" in k for x in out.scaled for k in x.kept), out.scaled

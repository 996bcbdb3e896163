"""Hostile review rev51e of issue 51 (spot notices, repair limits and leases, the boot gate, the fault lists): each
test here FAILS on the code reviewed (main b0a8ca4) and says what the real thing does, with its source.

The node-side tests run the real watch (clouds/node_watch.py) in test_node_watch's rig: a metadata server answering in
each cloud's documented format, a stand-in scontrol, moto's S3 for the status. The heal tests run real passes of
`heal` over test_heal's cluster (a stand-in cloud API, the real registry and log store)."""

import datetime as dt
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "nodes" / "cloud"))  # test_node_watch's rig lives there

import pytest  # noqa: E402
import test_node_watch  # noqa: E402
from test_heal import XID, Api, Cluster, say, stack_text  # noqa: E402

from agent_kit import metadata_rules_elsewhere  # noqa: E402,F401 (an autouse fixture)

node = test_node_watch.node  # its fixture, requested by name in `watched`


@pytest.fixture
def watched(request):
    """test_node_watch's configured GPU node (its `node` fixture)."""
    return request.getfixturevalue("node")


# --- (b) two healers -------------------------------------------------------------------------------------------

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
    """README (Health): "Run it from cron (`--once` ...: one pass under the cluster's lease in team mode) or with
    `--watch`", and the issue: "cron-safe and idempotent like `reap` ... (leases make two healers safe)". Alone (no
    team store) team.held takes nothing (fleet/team.py:268-270) and heal's memory is written with the version's
    precondition but its False ignored (fleet/heal.py write_state): two passes at once each read no launch, each
    count 0 of max_replacements 1, and each launch a node for the same faulty one (one of them paid and leaked)."""
    api = SecondHealer()
    c = Cluster(tmp_path, cat, stack_text("{on_fault: replace, max_replacements: 1}"), api=api)
    api.cluster = c
    say(c.bucket, "i-gpu0", state="faulty", faults=[XID])
    c.heal()
    assert api.asked.count("i-gpu0") == 1, (f"two heal passes at once each replaced gpu-0: asked {api.asked}, "
                                             "with max_replacements 1")


# --- (c) the boot gate and the fault lists -------------------------------------------------------------------

def test_a_node_back_in_service_after_a_fault_is_an_event_in_the_log(tmp_path, cat):
    """Issue 51 step 6: "Every action (drain, replace, isolate, resume, scale) is an event in `gpufleet log` with the
    fault code and the evidence". A node isolated for a fault whose watch later finds it healthy (a transient fault,
    a GPU reset, a maintenance notice gone) is resumed by its watch (node_watch.slurm_drain) and heal decides
    "none" for it (fleet/heal.py _news: no event for "none"): the log's last word on it stays "isolate" for good,
    though it takes jobs again; `gpufleet log` never says it came back, nor from which fault."""
    c = Cluster(tmp_path, cat, stack_text("{on_fault: isolate}"))
    say(c.bucket, "i-gpu0", state="faulty", faults=[XID], drained=True)
    c.heal()
    say(c.bucket, "i-gpu0")  # its watch resumed it: healthy, not drained
    c.heal()
    mine = [(e["action"], e.get("code")) for e in c.events() if e.get("node") == "gpu-0"]
    assert len(mine) >= 2 and mine[-1][0] != "isolate", f"the log's word on gpu-0, back in service: {mine}"


def test_heal_does_not_give_back_idle_nodes_of_a_pool_on_reserved_capacity(tmp_path, cat):
    """Issue 51 step 3 and README (Health, "What never happens"): "a node on a reservation or Capacity Block is
    isolated, not released, unless `replace_reserved: true`". heal's scale-down (fleet/heal.py _shrink) looks at no
    reservation: an elastic pool on an On-Demand Capacity Reservation or a Capacity Block has its idle nodes given back
    and terminated after scale_down_after. That saves nothing (a Capacity Block is paid up front, an ODCR is billed
    whether an instance uses it or not: "Capacity Reservation pricing and billing" in the EC2 User Guide, read
    2026-11-28) and throws away a gated node (a dcgm3 gate is half an hour) that the next burst
    must launch and gate again."""
    import test_heal_elastic as elastic

    from gpufleet.nodes.cloud import channel
    from gpufleet.state.registry import Node

    text = stack_text(health=elastic.RULES, slurm=True, nodes="{min: 1, max: 4}").replace(
        "nodes: {min: 1, max: 4}", "nodes: {min: 1, max: 4}, reservations: [{id: cr-0123456789abcdef0, zone: us-east-1a}]")
    c = Cluster(tmp_path, cat, text, api=elastic.Elastic())
    c.api.add_nodes("us-east-1", cluster="hl", pool="gpu", count=2, on_launch=lambda i: None)
    c.reg.resize("hl", added=[(Node("gpu", 1 + k, "aws", "us-east-1", "g6.12xlarge", node_id=f"i-more{k}"), None)
                              for k in range(2)])
    channel.assign_slots(c.bucket, [channel.NodeTarget("gpu", n.idx, n.node_id, None) for n in c.reg.get("hl").nodes
                                    if n.pool == "gpu"])
    idle = {"i-more0": "idle", "i-more1": "idle"}
    t0 = elastic.T0
    for later in (0, 1000, 1801, 3700):
        elastic.view(c, t0, gpu="idle", extra=idle)
        c.heal(t0 + dt.timedelta(seconds=later))
    given = elastic._given_back(c)
    assert given == [], f"heal gave back {given} of a pool on reserved capacity (reservations: [cr-...])"


def test_a_stale_heal_pass_never_writes_its_memory_over_the_pass_that_took_the_lease_after_it(tmp_path):
    """Fencing (REVIEW.md, Time: "a holder that learns it lost its lease and goes on"). Pass A launched a node while
    its store did not confirm its beats; its lease was given up and taken by pass B, which wrote heal's memory (its
    own launch: `launched`). A's launch then returns: _on_launch -> _save -> write_state's replace at A's version
    loses (DirectoryStore/S3 If-Match: False) and the False is dropped (fleet/heal.py write_state); _save then reads
    the object back and ADOPTS B's version as its own (saved[0]), so A's next write -- the end of its pass, which
    calls no ensure_held -- replaces B's memory whole: B's launch is forgotten and the next pass launches again."""
    from gpufleet.fleet import heal as healing
    from gpufleet.state.shared import DirectoryStore

    (tmp_path / "log").mkdir()
    store = DirectoryStore(f"file://{tmp_path}/log")
    healing.write_state(store, "hl", {"pools": {}, "nodes": {}}, None)
    _, read_by_a = store.read(healing.state_key("hl"))
    b, version = healing.read_state(store, "hl")  # B, the lease's new holder, launches for gpu-0
    b["nodes"]["gpu-0"] = {"launched": "i-launched-by-b"}
    healing.write_state(store, "hl", b, version)
    a, saved = {"pools": {}, "nodes": {"gpu-1": {"launched": "i-launched-by-a"}}}, [read_by_a]
    try:
        healing._save(store, "hl", a, saved)  # A's launch returns (its on_launch)
        healing.write_state(store, "hl", a, saved[0])  # A's pass ends
    except Exception:  # noqa: BLE001 - a stale writer that stops is what is wanted
        pass
    kept = healing.read_state(store, "hl")[0]["nodes"]
    assert kept.get("gpu-0", {}).get("launched") == "i-launched-by-b", (
        f"a stale pass wrote heal's memory over the newer holder's: {kept}")

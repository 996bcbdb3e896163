"""Hostile review rev51c (session 4) of merges 492089b (fixes of rev51b 1, 3, 5, 7, 9) and 9c65598 (`gpufleet bench
CLUSTER` on cloud nodes through the bucket). Each test fails on the code as merged; none changes product code. Report:
briefs/reviews/rev51c.md (outside the repository)."""

import datetime as dt
import os
import sys
import time

from test_heal import Cluster, stack_text
from test_heal_elastic import RULES, T0, Elastic
from test_slurm import rendered  # noqa: F401, F811 (the fixture)

from gpufleet.clouds import node_watch

# --- 4. BREAKS: an unrecorded id whose instance is gone blocks the pool's scale-up forever -----------------------------


def test_a_launched_id_that_no_longer_exists_does_not_freeze_the_pools_growth_forever(tmp_path, cat):
    """fleet/heal.py _elastic: ``unrecorded`` ids leave heal's memory only when the registry has them; while one is
    there heal never scales the pool up, and tells the user to run `gpufleet registry rebuild`. An id whose instance
    is gone (terminated by EC2, a spot reclaim, `reap`, a person) is never recorded by a rebuild: the pool never
    grows again, whatever waits, with no expiry and no look at the cloud."""
    from test_heal_elastic import view

    from gpufleet.errors import GpufleetError

    class LaunchesThenFails(Elastic):
        fail = True

        def add_nodes(self, region, *, count, market=None, on_launch=None, **where):
            if not self.fail:
                return super().add_nodes(region, count=count, on_launch=on_launch, **where)
            self.added.append("i-gone0")
            on_launch("i-gone0")
            raise GpufleetError("aws: i-gone0 was launched for pool gpu but EC2 does not describe it yet")

    c = Cluster(tmp_path, cat, stack_text(health=RULES, slurm=True, nodes="{min: 1, max: 3}"), api=LaunchesThenFails())
    for s in (0, 301):
        view(c, T0, gpu="allocated", jobs="PENDING gpu 1 Resources\n")
        c.heal(T0 + dt.timedelta(seconds=s))
    assert c.api.added == ["i-gone0"]
    c.api.fail = False  # i-gone0 never came up (terminated); `registry rebuild` finds nothing to record
    for days in (1, 2, 7):
        view(c, T0, gpu="allocated", jobs="PENDING gpu 1 Resources\n")
        c.heal(T0 + dt.timedelta(days=days))
    assert len(c.api.added) > 1, "a week later the pool has still not grown for the jobs that wait"


# --- 5. MISLEADS: the defunct line is dropped per node, so a mixed cluster Slurm allows has two slurm.conf -------------


def test_a_controller_and_its_nodes_that_slurm_check_allows_write_the_same_slurm_conf(rendered, tmp_path):  # noqa: F811
    """Fix of rev51b #9 drops `SlurmctldParameters=cloud_reg_addrs` on each host by its own OS (salt/slurm/config.sls,
    parameters/osfinger/Ubuntu-24.04.yaml). software.slurm_check allows a controller on Ubuntu 24.04 (Slurm 23.11.4,
    packages.ubuntu.com noble slurm-wlm 23.11.4-1.2ubuntu5) with compute nodes on Debian 12 (22.05.8, two releases
    older). slurmctld 23.11.4 compares each registering slurmd's hash of slurm.conf, computed line by line
    (src/common/parse_config.c _compute_hash_val), with its own and logs for every node
    `error("Node %s appears to have a different slurm.conf than the slurmctld. This could cause issues ...")`
    (src/slurmctld/proc_req.c:2797-2806, slurm-23-11-4-1). The parameter is slurmctld's alone: whether to write it is
    the controller's Slurm's question, answered once at render, the same file everywhere. Real Salt renders both."""
    from test_slurm import OSES, render, salt_call

    from gpufleet.configure import slurm, software

    assert not software.slurm_check([("ctl", "controller", "Ubuntu-24.04"), ("n1", "compute", "Debian-12")],
                                    cgroups=True)
    st, _, _ = rendered
    ctl = slurm.node("ctl0", "10.0.0.5", st.pools[0], cpus=4, mem_gib=16, gpus=0, gpu=None)
    nodes = [slurm.node("t4-1", "10.0.0.6", st.pools[2], cpus=48, mem_gib=192, gpus=4, gpu="T4", cloud=True)]
    (host,) = slurm.pillars(st, "train", ctl, nodes, {"t4": ("compute", {}, 4)}, bundle=b"PK", key=b"k" * 32).values()
    pil = {"gpufleet": {"live": False}, "slurm": {**host, "self": "t4-1"}}
    written = {}
    for os_ in ("Ubuntu-24.04", "Debian-12"):
        states = render(salt_call(), tmp_path / os_, {**OSES[os_], "host": "ip-10-0-0-6"}, pil, ["slurm"])
        managed = states["slurm-config-slurm_conf-file-managed"]["file"]
        written[os_] = next((d["contents"] for d in managed if isinstance(d, dict) and "contents" in d),
                            host["files"]["slurm.conf"])
    assert written["Ubuntu-24.04"] == written["Debian-12"], "the controller's slurm.conf and its nodes' differ"


# --- 6. BREAKS: a spot pool's scale-up never asks its spot_fallback ----------------------------------------------------


def test_a_spot_pools_scale_up_asks_its_spot_fallback_when_spot_is_refused(tmp_path, cat):
    """Issue 51 step 4: "the replacement follows the pool's rules (spot first, then the spot_fallback)"; heal's
    replacement does (nodes/cloud/heal.py:229-251), and rev51b #7's fix asked the same of growth ("take the market from
    the pool's spec (spot first, then its spot_fallback on refusal)"). fleet/scale.py grow asks spot alone
    (``_market``): when spot capacity is short, exactly when the fallback is for, the pool never grows; heal backs off
    and asks spot again, forever, while the jobs wait."""
    from test_heal_elastic import view

    from gpufleet.errors import CapacityError

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


# --- 7. MISLEADS: the node judges the operator's `until` by its own clock, and says nothing when it drops a request -----

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "nodes", "cloud"))
from test_cloud_bench import cluster  # noqa: E402, F401 (the fixture: cluster wb, its node's watch and bucket)
from test_node_watch import node  # noqa: E402, F401


def test_a_node_whose_clock_is_ahead_of_the_operators_says_why_it_did_not_run_the_request(cluster):  # noqa: F811
    """bench_pools writes `until: time.time() + timeout_s` by the operator's clock; node_watch.bench_on_request drops the
    request when its own clock is past it, marking it answered and writing no word into the status (REVIEW.md, Time:
    "two machines' wall clocks compared"). An operator's laptop 45 minutes behind (or a node's clock ahead) waits
    its 33 minutes and is told "gave no answer ... see journalctl" for a node that saw the request at once."""
    import json

    store = node_watch.agent.S3(cluster["cfg"])
    operator_now = time.time() - 45 * 60
    store.put("pools/gpu/bench.json", json.dumps({
        "request": "20261127T120000Z-skew0001", "plan": {"benchmarks": [{"name": "resnet50"}]}, "python": sys.executable,
        "args": [], "probe": None, "script": "print('{}')", "timeout_s": 1800, "until": operator_now + 1980}).encode())
    node_watch.watch(cluster["cfg"])
    status = json.loads((cluster["state"] / "status.json").read_text())  # the copy of what the node put in the bucket
    assert (status.get("bench") or {}).get("request") == "20261127T120000Z-skew0001", (
        "the node dropped the request without a word in its status")

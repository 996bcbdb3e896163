"""`gpufleet heal` as a person or cron runs it, on rack hosts: Slurm's own state of each host (asked over
SSH: the answers are given here, as ``clouds.scheduler.OWN_PROBE`` gets them) turned into isolation, named
in `status`, logged in `gpufleet log`; a host that cannot be asked is never touched."""

import json

import pytest

from gpufleet.clouds import scheduler
from gpufleet.clouds.baremetal import hosts
from gpufleet.state.registry import Node, Registry

from conftest import cli

STACK = """name: rk
owner: ops@example.com
slurm: {}
pools:
  - {name: ctl, provider: baremetal, site: lab, role: controller, hosts: [{address: 10.9.0.1}]}
  - {name: rack, provider: baremetal, site: lab, gpu: L4, gpus_per_node: 1,
     hosts: [{address: 10.9.0.11}, {address: 10.9.0.12}, {address: 10.9.0.13}]}
"""
ANSWERS = {  # what sinfo answers on each host (OWN_PROBE), or why it could not be asked
    "ctl-0": "idle|none\n", "rack-0": "drained*|gpufleet: GF-XID-FATAL health.xid\n", "rack-1": "allocated|none\n",
    "rack-2": "ssh: 10.9.0.13: connection refused"}


@pytest.fixture
def rack(tmp_path, monkeypatch):
    path = tmp_path / "rk.yaml"
    path.write_text(STACK)
    nodes = [Node(pool=p, idx=i, provider="baremetal", location="lab", machine="1x L4", node_id=a, private_ip=a,
                  ssh_endpoint=f"{a}:22") for p, i, a in (("ctl", 0, "10.9.0.1"), ("rack", 0, "10.9.0.11"),
                                                           ("rack", 1, "10.9.0.12"), ("rack", 2, "10.9.0.13"))]
    Registry().record(name="rk", stack="rk", stack_file=str(path), owner="ops@example.com",
                      expires_at="2099-01-01T00:00:00Z", backend=None, nodes=nodes)
    drained = []

    def states(targets, trust_new=False, workers=32):
        said = [ANSWERS[t.id] for t in targets]
        return [scheduler.own_state(a) if "|" in a else a for a in said]

    monkeypatch.setattr(hosts, "slurm_states", states)
    monkeypatch.setattr(hosts, "drain_in_slurm", lambda t, reason, trust_new=False: drained.append((t.id, reason)))
    monkeypatch.setattr(hosts, "scheduler_view", lambda t, trust_new=False: {"controller": t.id, "error": "not asked"})
    return drained


def test_the_own_probe_answer_is_read_as_slurm_gives_it():
    assert scheduler.own_state("drained*|gpufleet: GF-XID-FATAL health.xid\n") == ("drained",
                                                                                   "gpufleet: GF-XID-FATAL health.xid")
    assert scheduler.own_state("idle|none\n") == ("idle", None)
    assert scheduler.own_state("") is None  # not one of Slurm's nodes


def test_a_faulty_rack_host_is_isolated_named_in_status_and_logged(rack):
    got = cli("--json", "heal", "rk")
    assert got.exit_code == 0, got.output
    (doc,) = json.loads(got.output)["clusters"]
    by = {n["node"]: n["decision"]["action"] for n in doc["nodes"]}
    assert by == {"ctl-0": "none", "rack-0": "isolate", "rack-1": "none", "rack-2": "skip"}
    assert rack == []  # Slurm had it drained already: nothing more to do on the host
    status = json.loads(cli("--json", "status", "rk").output)["clusters"][0]
    assert status["health"]["nodes"]["rack-0"] == {"health": "faulty", "last_fault": "GF-XID-FATAL",
                                                   "evidence": "gpufleet: GF-XID-FATAL health.xid", "done": "isolate",
                                                   "at": status["health"]["nodes"]["rack-0"]["at"]}
    assert any("rack-0 isolate [GF-XID-FATAL]" in n for n in status["notes"])
    assert status["health"]["pools"]["rack"]["health"] == {"faulty": 1, "ok": 1, "unknown": 1}  # each node's, counted
    assert status["health"]["pools"]["ctl"]["health"] == {"ok": 1}
    log = json.loads(cli("--json", "log", "rk").output)["events"]
    assert {(e["action"], e["node"]) for e in log} == {("isolate", "rack-0"), ("skip", "rack-2")}
    again = cli("--json", "heal", "rk")  # idempotent: nothing new is done or said
    assert again.exit_code == 0 and len(json.loads(cli("--json", "log", "rk").output)["events"]) == 2
    every = cli("--json", "heal")  # no name: every cluster recorded here with its stack file
    assert every.exit_code == 0 and [c["cluster"] for c in json.loads(every.output)["clusters"]] == ["rk"]
    shown = cli("heal", "rk")  # for people: the nodes that need something, and why
    assert shown.exit_code == 0 and "rack-2" in shown.output and "connection refused" in shown.output


def test_a_rack_host_not_yet_drained_is_drained_in_slurm_with_its_fault_code(rack, monkeypatch):
    monkeypatch.setitem(ANSWERS, "rack-1", "mixed|gpufleet: GF-ECC-DBE gpu.ecc\n")
    got = cli("--json", "heal", "rk")
    assert got.exit_code == 0, got.output
    assert rack == [("rack-1", "gpufleet heal: GF-ECC-DBE")]


def test_a_dry_run_asks_nothing_of_the_hosts_and_writes_nothing(rack, monkeypatch):
    monkeypatch.setitem(ANSWERS, "rack-1", "mixed|gpufleet: GF-ECC-DBE gpu.ecc\n")
    got = cli("--json", "heal", "rk", "--dry-run")
    assert got.exit_code == 0, got.output
    assert rack == [] and cli("--json", "log", "rk").exit_code == 2  # no log: nothing was ever written
    assert json.loads(cli("--json", "status", "rk").output)["clusters"][0]["health"] is None


def test_a_pass_alone_that_finds_the_cluster_held_here_does_nothing_and_exits_4(rack, monkeypatch):
    """Without a team store, one pass at a time on this machine (review rev51e finding 1): a pass that finds another
    holding the cluster's lock does nothing, says so and exits 4, as a pass that finds the lease held in team mode."""
    from gpufleet import paths
    from gpufleet.state import leases

    monkeypatch.setitem(ANSWERS, "rack-1", "mixed|gpufleet: GF-ECC-DBE gpu.ecc\n")
    with leases.held_here(paths.make_dir(paths.local_lock_dir()), "rk", "heal"):  # a `heal --watch` mid-pass
        got = cli("heal", "rk")
        every = cli("heal")  # every cluster: this one skipped, said, the exit still 4
    assert got.exit_code == 4 and "cluster rk is held on this machine by `heal`" in got.output, got.output
    assert every.exit_code == 4 and "rk: this pass did nothing" in every.output, every.output
    assert rack == [] and json.loads(cli("--json", "log", "rk").output)["events"] == []  # nothing drained or logged
    assert cli("--json", "heal", "rk").exit_code == 0 and rack == [("rack-1", "gpufleet heal: GF-ECC-DBE")]


def test_heal_exits_1_when_no_nodes_health_could_be_read(rack, monkeypatch):
    for k in ANSWERS:
        monkeypatch.setitem(ANSWERS, k, "ssh: connection timed out")
    got = cli("--json", "heal", "rk")
    assert got.exit_code == 1 and rack == []
    assert cli("heal", "rk", "--once", "--watch").exit_code == 2


def test_watch_runs_a_pass_every_interval_until_stopped(rack, monkeypatch):
    from types import SimpleNamespace

    from gpufleet.cli import heal

    slept = []

    def sleep(s):
        slept.append(s)
        if len(slept) == 2:
            raise KeyboardInterrupt  # Ctrl-C

    monkeypatch.setattr(heal, "time", SimpleNamespace(sleep=sleep))
    got = cli("heal", "rk", "--watch")
    assert slept == [60, 60] and got.exit_code == 130  # the pools' health.interval; 128 + SIGINT
    assert got.output.count("rk: ") == 2  # a pass before each sleep, each said

"""`gpufleet bench CLUSTER` (issue 52): the node script goes over real SSH (OpenSSH's sshd on 127.0.0.1,
tests/loopback_sshd.py) to each rack host, the host's Python trains the toy shapes with its own PyTorch, and the
answers come back per node with the spread between nodes. No assertion here is about a speed."""

import glob
import importlib
import importlib.util
import json
import sys
from contextlib import ExitStack
from types import SimpleNamespace

import pytest
from test_bench import H200

from gpufleet.fleet import bench
from gpufleet.nodes.kind import Benched
from gpufleet.perf import measured
from gpufleet.state.registry import Node, Registry

import loopback_sshd
from conftest import cli

needs_sshd = pytest.mark.skipif(not loopback_sshd.USABLE, reason="needs the OpenSSH client and server, as root")
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not installed (the test extra brings it)")
# the hosts are loopback sshd servers on this machine, and each test counts the /tmp/gpufleet-bench.* folders its runs
# leave: the module's tests run one at a time (one xdist worker), not beside each other
pytestmark = pytest.mark.xdist_group("bench-over-ssh")

RACK = """name: lab
owner: ops@example.com
access: {{user: root, via: direct}}
pools:
  - name: rack
    provider: baremetal
    site: loop
    gpu: A100-80GB
    gpus_per_node: 1
    known_hosts: known_hosts
    hosts:
{hosts}
"""


@pytest.fixture
def rack(tmp_path, monkeypatch):
    """Two rack hosts (two sshd on 127.0.0.1) of a cluster `lab` the registry records; the stack file's path."""
    monkeypatch.setenv("GPUFLEET_REGISTRY", str(tmp_path / "registry.db"))
    monkeypatch.setenv("GPUFLEET_MEASURED", str(tmp_path / "measured.json"))
    authorized = loopback_sshd.keygen(tmp_path / "id_lab")
    with ExitStack() as servers:
        ports = [servers.enter_context(loopback_sshd.serve(tmp_path / f"sshd{i}", authorized))[0] for i in range(2)]
        stack = tmp_path / "lab.yaml"
        stack.write_text(RACK.format(hosts="\n".join(f"      - {{address: 127.0.0.1, port: {p}, user: root, key: id_lab}}"
                                                     for p in ports)))
        Registry(tmp_path / "registry.db").record(
            name="lab", stack="lab", stack_file=str(stack), owner="o", expires_at="2099-01-01T00:00:00Z", backend=None,
            nodes=[Node(pool="rack", idx=i, provider="baremetal", location="loop", machine="1x A100-80GB",
                        node_id="127.0.0.1", private_ip="127.0.0.1", ssh_endpoint=f"127.0.0.1:{p}")
                   for i, p in enumerate(ports)])
        yield stack


@needs_sshd
@needs_torch
def test_bench_of_a_rack_cluster_runs_on_every_host_over_ssh_with_its_python(rack):
    import torch

    left_before = set(glob.glob("/tmp/gpufleet-bench.*"))
    # the hosts' Python is this one (it has torch); a host's own python3 is the default
    r = cli("--json", "bench", "lab", "--tiny", "--python", sys.executable, "--trust-new-hosts",
            "--workload", "resnet50,llm:1b")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["cluster"] == "lab" and [n["node"] for n in doc["nodes"]] == ["rack-0", "rack-1"]
    for n in doc["nodes"]:
        assert n["error"] is None and n["bench"]["versions"]["torch"] == torch.__version__
        assert n["bench"]["device"]["kind"] == "cpu"
        rows = {b["name"]: b for b in n["bench"]["benchmarks"]}
        assert set(rows) == {"resnet50", "llm:1b"} and all(b["measured"] > 0 and b["step_s"] > 0
                                                           for b in rows.values())
    spread = {s["benchmark"]: s for s in doc["spread"]}
    assert set(spread) == {"resnet50", "llm:1b"}
    for name, s in spread.items():
        got = sorted(b["measured"] for n in doc["nodes"] for b in n["bench"]["benchmarks"] if b["name"] == name)
        assert s["nodes"] == 2 and (s["min"], s["max"]) == (got[0], got[-1])
    # the hosts' keys were recorded in the stack's known_hosts; the node script left nothing behind
    assert len((rack.parent / "known_hosts").read_text().splitlines()) == 2
    assert not set(glob.glob("/tmp/gpufleet-bench.*")) - left_before  # another run's may end meanwhile: not counted
    # the table, by a second run that now knows the hosts' keys
    r = cli("bench", str(rack), "--tiny", "--python", sys.executable, "--workload", "resnet50")
    assert r.exit_code == 0 and "Per-node spread" in r.stdout and "rack-1" in r.stdout, r.output


@needs_sshd
def test_a_host_without_pytorch_says_so_and_bench_fails(rack):
    r = cli("--json", "bench", "lab", "--tiny", "--python", "/usr/bin/python3", "--trust-new-hosts",
            "--workload", "resnet50")
    assert r.exit_code == 1, r.output
    nodes = json.loads(r.stdout)["nodes"]
    assert len(nodes) == 2 and all("no PyTorch in /usr/bin/python3" in n["error"] and "--python" in n["hint"]
                                   for n in nodes)


def test_a_slow_node_is_flagged_against_its_peers_and_every_node_is_recorded(cat, tmp_path, monkeypatch):
    """The per-node spread and --record, with the answers three H200 nodes would give (one 30% slower)."""
    monkeypatch.setenv("GPUFLEET_MEASURED", str(tmp_path / "measured.json"))

    def node(i: int, slower: float) -> bench.NodeBench:
        answer = {**H200, "results": [{**r, "samples_per_s": r["samples_per_s"] * slower} for r in H200["results"]]}
        return bench.NodeBench(f"rack-{i}", "rack", f"192.0.2.{i + 1}", bench.judge(answer, cat, "H200", tiny=False))

    result = bench.ClusterBench("lab", tiny=False, nodes=[node(0, 1.0), node(1, 0.98), node(2, 0.7)])
    result.spread = bench.spread(result.nodes)
    (rn50,) = [s for s in result.spread if s["benchmark"] == "resnet50"]
    assert rn50["slow"] == ["rack-2"] and rn50["nodes"] == 3 and rn50["spread"] == pytest.approx(1 / 0.7 - 1)
    slow = next(r for r in result.nodes[2].report.rows if r.name == "resnet50")
    assert slow.flagged and "29% below the median of its 2 peer(s)" in slow.suggests  # 0.7 against 0.99
    assert not any("below the median" in r.suggests for n in result.nodes[:2] for r in n.report.rows)
    done = bench.record_cluster(result, instance="rack")
    assert done["rows"] == 6
    kept = measured.read()
    assert {(m.cluster, m.host) for m in kept} == {("lab", f"rack-{i}") for i in range(3)}
    # compare then predicts the H200 from the three nodes' measurements
    r = cli("--json", "compare", "resnet50", "--gpu", "H200", "--top", "1")
    assert any(a.startswith("measured: H200") for a in json.loads(r.stdout)["assumptions"]), r.output


@needs_sshd
@needs_torch
def test_bench_across_two_rack_hosts_is_one_torchrun_job_that_every_rank_reports(rack):
    """`--nodes 2`: torchrun on each host over SSH, its c10d rendezvous on the first host's address; one job of
    world size 2 (a gloo process a host on the CPU) whose ranks all report."""
    port = loopback_sshd._free_port()
    r = cli("--json", "bench", "lab", "--tiny", "--nodes", "2", "--gpus", "1", "--port", str(port), "--python",
            sys.executable, "--trust-new-hosts", "--workload", "llm:1b", "--record")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    job = doc["job"]
    assert job["device"]["world_size"] == 2 and job["device"]["nodes"] == 2 and job["device"]["backend"] == "gloo"
    (row,) = job["benchmarks"]
    assert row["name"] == "llm:1b" and row["sharding"] == "fsdp2" and row["measured"] > 0
    assert sorted(x["rank"] for x in row["ranks"]) == [0, 1]
    # both hosts joined and ran their part; none failed
    assert [n["node"] for n in doc["nodes"]] == ["rack-0", "rack-1"] and all(n["error"] is None for n in doc["nodes"])
    # the job's row is recorded once, with its world size and nodes
    (kept,) = measured.read()
    assert (kept.cluster, kept.host, kept.gpus, kept.nodes, kept.tiny) == ("lab", "rack-0", 2, 2, True)


@needs_sshd
def test_a_job_over_hosts_without_torchrun_says_so_and_fails(rack):
    r = cli("--json", "bench", "lab", "--tiny", "--nodes", "2", "--python", "/usr/bin/python3", "--trust-new-hosts",
            "--workload", "resnet50")
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    assert doc["job"] is None and len(doc["nodes"]) == 2
    assert all("no PyTorch with torchrun (torch.distributed.run) in /usr/bin/python3" in n["error"] for n in doc["nodes"])
    r = cli("bench", "lab", "--tiny", "--nodes", "3", "--trust-new-hosts")
    assert r.exit_code == 2 and "--nodes 3: the cluster has 2 rack host(s)" in r.output, r.output


@needs_sshd
@needs_torch
def test_bench_of_a_rack_cluster_records_its_tiny_rows_and_compare_names_the_measured_layer(rack):
    """Issue 52's "bench of a rack cluster runs over SSH on the test hosts (tiny shapes) and records its rows;
    compare then shows the measured layer", end to end through the CLI."""
    r = cli("--json", "bench", "lab", "--tiny", "--record", "--python", sys.executable, "--trust-new-hosts",
            "--workload", "resnet50,llm:1b")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["recorded"]["rows"] == 4
    kept = measured.read()
    assert {(m.cluster, m.host, m.workload) for m in kept} == {("lab", f"rack-{i}", w) for i in range(2)
                                                               for w in ("resnet50", "llm:1b")}
    assert all(m.tiny and m.predicted is None and m.versions["torch"] for m in kept)
    day = kept[0].when[:10]
    r = cli("--json", "compare", "resnet50", "--gpu", "A100-80GB", "--top", "1")
    said = [a for a in json.loads(r.stdout)["assumptions"] if a.startswith("measured:")]
    assert said == [f"measured: 4 rows from cluster lab on {day}, tiny: not used"], said
    # and the table says it too
    r = cli("compare", "resnet50", "--gpu", "A100-80GB", "--top", "1")
    assert "4 rows from cluster lab" in r.stdout and "tiny: not used" in r.stdout, r.stdout


@needs_sshd
@needs_torch
def test_bench_of_a_rack_cluster_on_all_of_each_hosts_gpus_runs_torchrun_on_each(rack):
    """`--gpus 2` without --nodes: each host its own torchrun job (here two gloo processes), judged per node."""
    r = cli("--json", "bench", "lab", "--tiny", "--gpus", "2", "--python", sys.executable, "--trust-new-hosts",
            "--workload", "llm:1b")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["job"] is None and len(doc["nodes"]) == 2
    for n in doc["nodes"]:
        assert n["bench"]["device"]["world_size"] == 2 and n["bench"]["device"]["nodes"] == 1
        (row,) = n["bench"]["benchmarks"]
        assert sorted(x["rank"] for x in row["ranks"]) == [0, 1] and row["sharding"] == "fsdp2"
    assert doc["spread"][0]["nodes"] == 2


# ---- review rev52 (findings 1, 4, 10): a cluster's nodes judged, checked and recorded as what they are --------------

def test_a_node_well_below_its_only_peer_is_flagged():
    """rev52 finding 10: spread() held each node to the median of ALL nodes, the slow one's own rate in it: of two
    nodes 15% apart the slow one was 7.9% below their median, never flagged. Each node is now held to its peers'."""
    def node(name: str, rate: float) -> bench.NodeBench:
        row = bench.Judged(name="resnet50", workload="resnet50", unit="img/s", measured=rate)
        return bench.NodeBench(name, "rack", "10.0.0.1", bench.BenchReport({}, {}, "H100", False, [row]))

    nodes = [node("a", 1000.0), node("b", 850.0)]
    (s,) = bench.spread(nodes)
    assert s["slow"] == ["b"] and s["median"] == 925.0, s
    assert "15% below the median of its 1 peer(s)" in nodes[1].report.rows[0].suggests


MIXED = "stacks/examples/mixed.yaml"  # its cloud pools name an instance type only, as every cloud example does
L4_ANSWER = {"device": {"kind": "cuda", "name": "NVIDIA L4", "gpus": 1, "gpus_used": 1, "world_size": 1, "nodes": 1},
             "versions": {"torch": "2.11.0+cu130", "cuda": "13.0", "driver": "580.159.04"},
             "when": "2026-11-20T10:00:00Z",
             "results": [{"name": "resnet50", "kind": "cnn", "batch": 256, "step_s": 0.5, "samples_per_s": 512.0}]}


def test_a_cloud_pool_of_an_instance_type_is_judged_against_that_types_gpu(cat, tmp_path, monkeypatch):
    """rev52 finding 1: bench_cluster judged each node against `pools[b.pool].gpu`, None for a cloud pool (it names
    its instance_type: every cloud example), so a cloud cluster's answers had no prediction, no MFU, no flag, and
    --record said "nothing to record". The pool's GPU is now its instance type's (configure.pillar.gpu_of)."""
    from gpufleet import nodes as kinds
    from gpufleet import stacks

    reg = Registry(tmp_path / "registry.db")
    reg.record(name="mixed", stack="mixed-fleet", stack_file=MIXED, owner="o", expires_at="2099-01-01T00:00:00Z",
               backend=None, nodes=[Node(pool="gcp-l4", idx=0, provider="gcp", location="us-central1-a",
                                         machine="g2-standard-8", node_id="n-1", private_ip="10.0.0.5")])

    class Cloud:
        def bench(self, run, plan, python, launch=None):
            return [Benched("gcp-l4-0", "gcp-l4", "10.0.0.5", L4_ANSWER)]

    monkeypatch.setattr(kinds, "used", lambda stack: [Cloud()])
    st = stacks.load(MIXED, cat)
    result = bench.bench_cluster(st, cat, ["resnet50"], tiny=False, python="python3", cluster="mixed", registry=reg)
    (row,) = result.nodes[0].report.rows
    assert result.nodes[0].report.gpu == "L4" and row.predicted and row.mfu, row.note


def test_bench_cluster_record_keeps_each_pools_instance_type(cat, tmp_path, monkeypatch):
    """rev52 finding 1 (provenance): record_cluster filed every node's rows under the command line's one --instance
    (None by default): a cloud cluster's rows kept no instance type although its pools name theirs."""
    monkeypatch.setenv("GPUFLEET_MEASURED", str(tmp_path / "measured.json"))
    report = bench.judge(L4_ANSWER, cat, "L4", tiny=False)
    done = bench.ClusterBench("mixed", False, [bench.NodeBench("gcp-l4-0", "gcp-l4", "10.0.0.5", report)])
    monkeypatch.setattr(bench, "bench_cluster", lambda *a, **k: done)
    r = cli("--json", "bench", MIXED, "--record", "--workload", "resnet50", "--instance", "ignored-for-a-cloud-pool")
    assert r.exit_code == 0, r.output[-800:]
    assert [(m.cluster, m.instance) for m in measured.read()] == [("mixed", "g2-standard-8")]


@pytest.mark.parametrize("change, why", [
    ({"samples_per_s": "fast"}, "a measurement that is no number: judge() divides by it (TypeError: internal error)"),
    ({"samples_per_s": float("nan")}, "NaN: never flagged, then --record's ValueError"),
    ({"name": "vgg16"}, "a benchmark the plan did not ask for, judged and recorded as vgg16"),
])
def test_a_rack_hosts_answer_is_checked_as_a_cloud_nodes_is(change, why):
    """rev52 finding 4: a cloud node's answer goes through nodes/cloud/bench.py `checked_answer` before it is judged
    or recorded; a rack host's was taken as whatever its Python printed last (common.md: whatever comes from a node
    is validated against its format). Now the same checker, and the host's answer refused with why."""
    from gpufleet.clouds.baremetal import hosts

    rack_bench = importlib.import_module("gpufleet.nodes.racks.bench")  # the package's `bench` is its function
    plan = bench.plan(["resnet50", "bert-large"], tiny=False)
    answer = json.loads(json.dumps(H200))
    answer["when"] = "2026-11-20T10:00:00Z"
    answer["results"][0].update(change)
    ran = SimpleNamespace(ok=True, value=SimpleNamespace(rc=0, stdout=json.dumps(answer) + "\n", stderr=""))
    target = SimpleNamespace(id="rack-0", pool="rack", address="192.0.2.10", port=22)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(hosts, "on_each_host", lambda targets, work, **kw: [ran])
        (got,) = rack_bench.bench_hosts([target], plan, python="python3")
    assert got.answer is None and "192.0.2.10's bench answer" in got.error and "refused" in got.error, why
    answer["results"][0] = H200["results"][0]  # the same answer as the node script prints it: taken
    ran.value.stdout = json.dumps(answer) + "\n"
    with pytest.MonkeyPatch.context() as m:
        m.setattr(hosts, "on_each_host", lambda targets, work, **kw: [ran])
        (got,) = rack_bench.bench_hosts([target], plan, python="python3")
    assert got.error is None and got.answer["results"][0]["samples_per_s"] == H200["results"][0]["samples_per_s"]

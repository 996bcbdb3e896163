"""`gpufleet bench CLUSTER` on a cloud cluster (issue 52): the request goes into the pool's prefix of the stack's bucket
(moto's S3), the node's real watch (clouds/node_watch.py, the node fixture of test_node_watch: its own instance role's
credentials, stand-in tools and scontrol) runs the node script with this machine's PyTorch on toy shapes and puts its
answer in its own status, and the CLI judges it as it judges a rack host's. No assertion here is about a speed."""

import importlib.util
import json
import os
import shutil
import site
import stat
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from network_peer import beyond_loopback, listeners, own_address, plant, run_processes, tiny_plan
from test_node_watch import node  # noqa: F401 (the fixture: a configured node, its bucket, its Slurm)

from gpufleet.clouds import node_watch
from gpufleet.engine import automation
from gpufleet.nodebench import source
from gpufleet.nodebench.launch import TORCHRUN, Launch
from gpufleet.state.registry import Node, Registry

from conftest import ROOT, cli, table_cells

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not installed (the test extra brings it)")
STACK = """name: wb
owner: ml@example.com
access:
  public_key: example.pub
  ssh_cidrs: [203.0.113.0/24]
pools:
  - name: gpu
    provider: aws
    region: us-east-1
    zone: us-east-1a
    instance_type: g6.xlarge
    nodes: 1
"""
OUTPUTS = {"pools": {"gpu": {"bucket": {"name": "gpufleet-w-1", "cloud": "aws", "region": "us-east-1"}}}}


@pytest.fixture
def cluster(node, tmp_path, monkeypatch):  # noqa: F811 (the fixture imported above)
    """Cluster `wb` as the registry records it (its one node: the watch's, i-0watch1), its stack's outputs naming the
    node's bucket (the Pulumi CLI is not installed here); the node's watch and where `--record` keeps rows."""
    monkeypatch.setenv("GPUFLEET_REGISTRY", str(tmp_path / "registry.db"))
    monkeypatch.setenv("GPUFLEET_MEASURED", str(tmp_path / "measured.json"))
    shutil.copy(ROOT / "stacks" / "examples" / "keys" / "example.pub", tmp_path / "example.pub")
    (tmp_path / "wb.yaml").write_text(STACK)
    Registry(tmp_path / "registry.db").record(
        name="wb", stack="wb", stack_file=str(tmp_path / "wb.yaml"), owner="o", expires_at="2099-01-01T00:00:00Z",
        backend=automation.backend_url(), state="up",
        nodes=[Node(pool="gpu", idx=0, provider="aws", location="us-east-1", machine="g6.xlarge", node_id="i-0watch1",
                    private_ip="10.0.0.5")])
    monkeypatch.setattr(automation, "outputs", lambda *a, **kw: OUTPUTS)
    assert node_watch.watch(node["cfg"]) == 0  # its first watch: the status the answers go into
    return node


@pytest.fixture
def node_py():
    """The node's Python as the watch's benchmark identity (node_watch.BENCH_USER) can run it, and a folder it can
    read for stand-ins: as root the watch drops to that user, who cannot run this checkout's interpreter where it
    lives in root's home; then the system's Python 3 with this environment's packages on its path (a wrapper in a
    world-readable folder, removed after the test)."""
    root = os.geteuid() == 0
    if root and not os.path.exists("/usr/bin/python3"):
        pytest.skip("root without a system Python 3 the benchmark's user can run")
    folder = tempfile.mkdtemp(prefix="gpufleet-node-py.")
    os.chmod(folder, 0o755)
    wrapper = os.path.join(folder, "python")
    with open(wrapper, "w") as f:
        f.write(f"#!/bin/sh\nPYTHONPATH={':'.join(site.getsitepackages())} exec /usr/bin/python3 \"$@\"\n")
    os.chmod(wrapper, stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    yield ({"python": wrapper, "plain": "/usr/bin/python3", "folder": folder} if root else
           {"python": sys.executable, "plain": sys.executable, "folder": folder})
    shutil.rmtree(folder)


class Timer:
    """The node's watch timer: a watch run after another until stopped (a run answers a bench request it finds)."""

    def __init__(self, n):
        self.stop, self.runs = threading.Event(), 0
        self.thread = threading.Thread(target=self._loop, args=(n["cfg"],), daemon=True)

    def _loop(self, cfg):
        while not self.stop.is_set():
            node_watch.watch(cfg)
            self.runs += 1
            self.stop.wait(0.2)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=120)


def _doc(r) -> dict:
    """The CLI's --json document (the watch, in this process, prints its own lines before it)."""
    lines = r.stdout.splitlines()
    return json.loads("\n".join(lines[next(i for i, line in enumerate(lines) if line.startswith("{")):]))


def _bench(*args):
    return cli("bench", "wb", "--tiny", "--workload", "resnet50,llm:1b", "--wait-timeout", "240", *args)


@needs_torch
def test_a_cloud_node_answers_the_bench_request_through_its_bucket_and_the_rows_are_judged_and_recorded(cluster,
                                                                                                         node_py):
    from gpufleet.perf import measured

    store = node_watch.agent.S3(cluster["cfg"])
    with Timer(cluster):
        r = _bench("--python", node_py["python"], "--record")
    assert r.exit_code == 0, r.output
    rows = [c for c in table_cells(r.output) if c[0] == "gpu-0"]
    assert [c[2] for c in rows] == ["resnet50", "llm:1b"] and all(c[1] == "10.0.0.5" for c in rows)
    assert all(float(c[3].replace(",", "")) > 0 and c[4] in ("img/s", "tok/s") for c in rows)
    kept = measured.read()
    assert {(m.workload, m.cluster, m.host, m.tiny) for m in kept} == {("resnet50", "wb", "gpu-0", True),
                                                                       ("llm:1b", "wb", "gpu-0", True)}
    # the request (in the pool's prefix: the node reads it, only the operator writes it) answered once, then
    # withdrawn: the node's next watch runs nothing more for it, a node that comes later neither
    done = json.loads((cluster["state"] / node_watch.BENCH_DONE).read_text())["request"]
    assert done in r.output
    with pytest.raises(node_watch.agent.NotThere):
        store.get("pools/gpu/bench.json")


def test_a_node_that_never_answers_times_out_named_and_the_run_exits_1(cluster):
    r = cli("--json", "bench", "wb", "--tiny", "--wait-timeout", "1")
    assert r.exit_code == 1, r.output
    (n,) = _doc(r)["nodes"]
    assert n["node"] == "gpu-0" and "gpu-0 gave no answer after 1 s" in n["error"] and "gpufleet-watch" in n["hint"]
    # the node's watch, coming round after nobody waits any more, runs nothing of it: the request was withdrawn
    assert node_watch.watch(cluster["cfg"]) == 0
    status = json.loads((cluster["state"] / "status.json").read_text())
    assert "bench" not in status


@pytest.mark.parametrize("said, refused", [
    ({"name": "resnet50", "samples_per_s": "fast"}, "samples_per_s 'fast' is not a finite number"),
    ({"name": "resnet50", "samples_per_s": float("nan")}, "samples_per_s 'nan' is not a finite number"),
    ({"name": "resnet50; touch x", "samples_per_s": 1.0}, "is not one of the plan's (resnet50)"),
    (None, "results '[]' is not a list of 1 rows, one per benchmark asked for"),  # nothing measured is no answer
])
def test_an_answer_not_of_the_node_scripts_format_is_refused_with_what_is_wrong(cluster, node_py, said, refused):
    """What the node's Python printed (a node that is not what it was: here a stand-in for its Python) reaches
    neither the table nor the calibration unless each field is of its format."""
    fake = Path(node_py["folder"]) / "python-fake"
    answer = {"versions": {"torch": "2.9.0"}, "device": {"kind": "cpu", "name": "x86_64"}, "results": [said] if said else [],
              "when": "2026-11-27T12:00:00Z"}
    fake.write_text(f"#!{node_py['plain']}\nprint({json.dumps(json.dumps(answer))})\n")
    fake.chmod(0o755)
    with Timer(cluster):
        r = cli("--json", "bench", "wb", "--tiny", "--workload", "resnet50", "--wait-timeout", "240", "--python",
                str(fake))
    assert r.exit_code == 1, r.output
    (n,) = _doc(r)["nodes"]
    assert "bench" not in n and refused in n["error"] and "the bench answer in gpu-0's status" in n["error"]
    assert "--python" in n["hint"]


def test_a_node_busy_with_a_slurm_job_is_not_benchmarked_and_says_so(cluster):
    (cluster["bin"] / "slurm-node.json").write_text(json.dumps({"state": "ALLOCATED", "reason": ""}))
    with Timer(cluster):
        r = cli("--json", "bench", "wb", "--tiny", "--wait-timeout", "240")
    assert r.exit_code == 1, r.output
    (n,) = _doc(r)["nodes"]
    assert n["error"] == "gpu-0 was not benchmarked: Slurm says ALLOCATED" and "idle" in n["hint"]
    log = (cluster["bin"] / "scontrol.log").read_text()
    assert "reservation" not in log  # nothing held, nothing run


def test_one_job_over_several_cloud_nodes_is_refused_before_anything_is_asked(cluster):
    store = node_watch.agent.S3(cluster["cfg"])
    r = cli("bench", "wb", "--tiny", "--nodes", "2")
    assert r.exit_code == 2 and "cloud nodes are benchmarked each on its own" in r.output, r.output
    with pytest.raises(node_watch.agent.NotThere):
        store.get("pools/gpu/bench.json")


@needs_torch
def test_gpus_runs_the_step_under_the_nodes_own_torchrun(cluster, node_py):
    """--gpus 2 with --tiny: the node's watch runs the script under `python -m torch.distributed.run` (2 gloo
    processes on the CPU), and the row gives the world size and each rank's rate."""
    with Timer(cluster):
        r = cli("--json", "bench", "wb", "--tiny", "--workload", "resnet50", "--gpus", "2", "--wait-timeout", "300",
                "--python", node_py["python"])
    assert r.exit_code == 0, r.output
    (n,) = _doc(r)["nodes"]
    assert n["bench"]["device"]["world_size"] == 2
    (row,) = n["bench"]["benchmarks"]
    assert row["sharding"] == "ddp" and sorted(x["rank"] for x in row["ranks"]) == [0, 1]


def test_a_status_another_writer_puts_under_the_nodes_name_is_not_its_answer(cluster):
    """A status object speaks for the node its key names (on AWS, the one key the node's role may write): another
    writer's object whose body names this node answers nothing for it."""
    store = node_watch.agent.S3(cluster["cfg"])

    def forge():
        while True:
            try:
                request = json.loads(store.get("pools/gpu/bench.json"))["request"]
                break
            except node_watch.agent.NotThere:
                threading.Event().wait(0.05)
        answer = {"versions": {}, "device": {"kind": "cpu"}, "results": [], "when": "2026-11-27T12:00:00Z"}
        store.put("status/gpu/AROAOTHER:i-0other.json", json.dumps({
            "node_id": "i-0watch1", "pool": "gpu", "bench": {"request": request, "state": "answered",
                                                             "answer": answer}}).encode())

    forger = threading.Thread(target=forge, daemon=True)
    forger.start()
    r = cli("--json", "bench", "wb", "--tiny", "--wait-timeout", "8")
    forger.join(timeout=30)
    assert r.exit_code == 1, r.output
    (n,) = _doc(r)["nodes"]
    assert "bench" not in n and "gpu-0 gave no answer after 8 s" in n["error"]


def test_a_node_whose_python_has_no_pytorch_says_so_and_where_the_frameworks_formula_puts_it(cluster, node_py):
    fake = Path(node_py["folder"]) / "python3"  # the node script's own answer where `import torch` fails (exit 3)
    fake.write_text(f"#!{node_py['plain']}\nimport sys\nprint('{{\"error\": \"no-torch\"}}')\nsys.exit(3)\n")
    fake.chmod(0o755)
    with Timer(cluster):
        r = cli("--json", "bench", "wb", "--tiny", "--wait-timeout", "240", "--python", str(fake))
    assert r.exit_code == 1, r.output
    (n,) = _doc(r)["nodes"]
    assert n["error"] == f"no PyTorch in {fake} on gpu-0: bench trains with the PyTorch the node has"
    assert "/opt/gpufleet/envs/pytorch/bin/python" in n["hint"]


# --- who runs the benchmark (hostile review rev51c findings 1 and 2) ---


@needs_torch
def test_a_network_peer_cannot_run_code_in_the_benchmark_and_it_runs_as_no_root(node_py):
    """node_watch.run_bench runs the node script on all (here 2) of the node's GPUs (Launch("2").args() and .plan(),
    as `gpufleet bench CLUSTER --gpus 2` asks), as root dropped to nobody. It ran `python -m torch.distributed.run
    --standalone`: torch 2.13's c10d rendezvous at localhost:0 (torch/distributed/run.py), whose TCPStore listens on
    every interface (`ss -ltnp`: `*:<port>` for pt_elastic) with no authentication, while its agent reads the
    rendezvous state from the store every monitor interval (elastic/agent/server/api.py _invoke_run ->
    num_nodes_waiting -> dynamic_rendezvous.py sync: pickle.loads). A job user on any other node of the cluster (jobs
    run there meanwhile) connected, listed the keys (TCPStore.list_keys) and replaced `torch.rendezvous.<id>`: their
    code ran in the benchmark. Now the script starts its processes itself (train_steps.spawn): a FileStore in a
    private folder, gloo's sockets on loopback. The run's processes (launcher and workers) are watched with `ss -ltnp`
    while they train; the test fails where one listens beyond loopback, where a peer's pickle runs, and where none of
    them was seen listening at all (then nothing was tried). The peer connects through this machine's network
    address, as another host would."""
    address = own_address()
    if address is None:
        pytest.skip("no network address besides loopback")
    os.chmod(node_py["folder"], 0o1777)  # the peer's code runs as the benchmark's user: where it can leave a mark
    marker = os.path.join(node_py["folder"], "peer-code-ran")
    launch = Launch("2", 1, 29500, "rev51c")
    req = {"request": "r1", "python": node_py["python"], "args": launch.args(), "probe": TORCHRUN,
           "script": source().decode(), "plan": launch.plan(tiny_plan(150)), "timeout_s": 400}
    got = {}
    runner = threading.Thread(target=lambda: got.update(node_watch.run_bench(req)), daemon=True)
    runner.start()
    planted, seen, heard = set(), set(), set()
    deadline = time.time() + 300
    while time.time() < deadline and runner.is_alive():
        pids = run_processes("gpufleet-cloud-bench.")
        seen |= pids
        found = listeners(pids)
        heard |= found
        plant(address, {p for _, p in beyond_loopback(found)}, marker, planted)
        time.sleep(0.3)
    runner.join(120)
    assert seen, "the benchmark's processes never ran: nothing was tried"
    assert not os.path.exists(marker), (
        f"a peer on the network ran code in the benchmark ({open(marker).read()}; keys planted: {sorted(planted)})")
    assert not beyond_loopback(heard), f"the benchmark listened beyond loopback: {sorted(beyond_loopback(heard))}"
    assert heard, "none of the benchmark's processes was seen listening (its gloo sockets): nothing was looked at"
    assert got.get("state") == "answered", got
    assert got["answer"]["device"]["world_size"] == 2 and got["answer"]["results"][0]["samples_per_s"] > 0


@needs_torch
def test_the_benchmarks_compile_caches_are_in_its_private_folder_not_the_shared_temp_folder(node_py):
    """The decoder benchmark compiles with torch.compile on a GPU (train_steps.py run_one). Inductor's cache is
    TORCHINDUCTOR_CACHE_DIR or `tempfile.gettempdir()/torchinductor_<user>` (torch 2.13
    torch/_inductor/runtime/cache_dir_utils.py default_cache_dir; os.makedirs(exist_ok=True), no owner check), Triton's
    under it (triton_cache_dir); codecache.write writes a generated module only `if not os.path.exists(path)` and
    then imports it (PyCodeCache.load). The watch's unit (node_agent.WATCH_UNIT_TEXT) has no PrivateTmp and sets no
    TMPDIR: root's cache is torchinductor_root in the node's shared temp folder, which any job user can create before
    the benchmark and fill with modules at the keys the same (public) script computes: root then imports them. The
    child the watch starts must get a cache of its own (in its private folder, or a root-owned one)."""
    script = ("import json\n"
              "from torch._inductor.runtime.cache_dir_utils import cache_dir, triton_cache_dir\n"
              "import os\n"
              "print(json.dumps({'results': [], 'cache': cache_dir(), 'triton': triton_cache_dir(0), "
              "'uid': os.getuid()}))\n")
    req = {"request": "r2", "python": node_py["python"], "args": [], "probe": None, "script": script,
           "plan": {"benchmarks": []}, "timeout_s": 120}
    word = node_watch.run_bench(req)
    assert word["state"] == "answered", word
    import getpass
    import tempfile
    shared = os.path.join(tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}")
    assert not word["answer"]["cache"].startswith(shared), (
        f"root's torch.compile cache is {word['answer']['cache']}, a path in the shared temp folder that a job user "
        "can create first")
    folder = os.path.dirname(os.path.dirname(word["answer"]["cache"]))  # the run's own folder (gone after it)
    assert os.path.basename(folder).startswith("gpufleet-cloud-bench.") and word["answer"]["triton"].startswith(folder)
    assert word["answer"]["uid"] != 0 or os.geteuid() != 0, "the watch (root) ran the benchmark as root"


# --- the bench request's time, by the node's own clock only (hostile review rev51c finding 8) ---


def _ask(cluster, python: str, request: str, wait_s: float, **extra):
    store = node_watch.agent.S3(cluster["cfg"])
    store.put("pools/gpu/bench.json", json.dumps({
        "request": request, "plan": {"benchmarks": [{"name": "resnet50"}]}, "python": python, "args": [],
        "probe": None, "script": "print('{}')", "timeout_s": 1800, "wait_s": wait_s, **extra}).encode())
    node_watch.watch(cluster["cfg"])
    return (json.loads((cluster["state"] / "status.json").read_text()).get("bench") or {})


def test_a_node_whose_clock_is_ahead_of_the_operators_still_runs_the_request_it_sees_in_time(cluster, node_py):
    """The operator's laptop 45 minutes behind the node (or the node's clock ahead): a request stamped with the
    operator's time (an older CLI's `until`) was dropped by the node's clock, silently, and the operator waited 33
    minutes for "gave no answer". The request says how long it is waited for; the node times that itself."""
    said = _ask(cluster, node_py["plain"], "20261127T120000Z-skew0001", 1980, until=time.time() - 45 * 60 + 1980)
    assert said.get("request") == "20261127T120000Z-skew0001", "the node dropped the request without a word"
    assert "expired" not in str(said.get("error"))


def test_a_request_the_node_first_saw_longer_ago_than_it_is_waited_for_is_skipped_and_says_so(cluster, node_py):
    """A request the node could not finish (its answer could not be written) and sees again after the operator
    stopped waiting: not run, and its status says why at once (the CLI's progress shows a skipped node's word)."""
    seen = cluster["state"] / node_watch.BENCH_SEEN
    seen.write_text(json.dumps({"request": "20261127T120000Z-late0001", "at": time.time() - 4000}))
    said = _ask(cluster, node_py["plain"], "20261127T120000Z-late0001", 1980)
    assert said.get("state") == "skipped" and said["error"].startswith("expired: first seen"), said
    assert json.loads((cluster["state"] / node_watch.BENCH_DONE).read_text())["request"] == "20261127T120000Z-late0001"

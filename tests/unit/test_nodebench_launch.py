"""How a node starts the training-step benchmark (nodebench/launch.py, train_steps.spawn), run for real with this
machine's torch: what a host elsewhere on the network can reach while it runs (hostile review rev51c #1).

The peer: tests/network_peer.py."""

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from network_peer import beyond_loopback, free_port, listeners, own_address, plant, run_processes, tiny_plan

from gpufleet.fleet import bench
from gpufleet.nodebench.launch import Launch

from conftest import gpufleet_exe

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not installed (the test extra brings it)")
SETTLE_S = 10  # how long the job runs on once the peer planted its pickles: each would be read within 0.1 s


@needs_torch
def test_a_job_over_several_nodes_runs_no_code_a_network_peer_plants_in_its_store(tmp_path):
    """`bench CLUSTER --nodes 2`: torchrun on each node (here both on this machine, the first's address 127.0.0.1 as
    on the test rack). Its TCPStore has no authentication and listens on every interface (torch 2.13: torchrun's
    static_tcp_rendezvous.py hands it no bound socket, master_listen_fd; `ss` shows `*:<port>`), so a host of the
    cluster's network reaches it whatever we do: the README and `bench --help` say a multi-node bench trusts that
    network while it runs. What such a host must not get is code run in the benchmark: c10d's dynamic rendezvous
    unpickled the state it reads from the store (torch 2.13 elastic/rendezvous/dynamic_rendezvous.py:444, every
    monitor interval); the static rendezvous exchanges JSON (elastic/agent/server/api.py _RoleInstanceInfo), and the
    script gathers its rows as JSON (all_gather_object unpickles). The peer puts a pickle in every key it finds."""
    address = own_address()
    if address is None:
        pytest.skip("no network address besides loopback")
    run = tmp_path / "gpufleet-multinode-run"
    run.mkdir()
    marker = str(tmp_path / "peer-code-ran")
    script = bench.script_path()
    (run / "plan.json").write_text(json.dumps(tiny_plan(60)))
    launch = Launch("1", 2, free_port(), "gpufleet-bench-peer-test")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    nodes = [subprocess.Popen([sys.executable, *launch.args(first="127.0.0.1", address="127.0.0.1", index=i), script,
                               str(run / "plan.json")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env, stdin=subprocess.DEVNULL) for i in range(2)]
    planted, seen = set(), set()
    try:
        deadline = time.time() + 240
        while time.time() < deadline and any(n.poll() is None for n in nodes):
            pids = run_processes(str(run))
            seen |= pids
            plant(address, {p for _, p in beyond_loopback(listeners(pids))}, marker, planted)
            if planted:  # then a hundred of the agent's monitor intervals (torchrun's --monitor-interval: 0.1 s)
                deadline = min(deadline, time.time() + SETTLE_S)
            time.sleep(0.3)
    finally:  # a job whose store the peer changed may wait on it: every process of the run ended (workers too)
        for pid in run_processes(str(run)):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        outs = [n.communicate(timeout=60) for n in nodes]
    assert seen, "the job's processes never ran: nothing was tried"
    assert not os.path.exists(marker), (
        f"a peer on the network ran code in the job ({open(marker).read()}; keys planted: {sorted(planted)})")
    assert planted, f"the store was not reached through {address}: nothing was tried ({outs[0][1][-2000:]})"


def network_interface() -> str | None:
    """The name of an interface of this machine besides loopback (the one its network address is on)."""
    address = own_address()
    shown = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True, timeout=30).stdout
    return next((f.split()[1] for f in shown.splitlines() if address and f" {address}/" in f), None)


@needs_torch
def test_bench_here_on_two_processes_listens_on_loopback_only_whatever_the_environment_names(tmp_path):
    """`bench --here --gpus 2` (the node script starts its two processes): gloo binds the interface GLOO_SOCKET_IFNAME
    names (torch 2.13, run here: 192.0.2.x with eth0), else the address this machine's host name resolves to, a
    network address on most nodes (here it resolves to loopback, which would hide the question). The environment a
    user or a node image sets for their own jobs names the network interface: the benchmark's processes still
    listen on loopback only (train_steps.spawn sets its own), watched with `ss -ltnp` while they train."""
    nic = network_interface()
    if nic is None:
        pytest.skip("no network interface besides loopback")
    env = {**os.environ, "GLOO_SOCKET_IFNAME": nic, "NCCL_SOCKET_IFNAME": nic, "TMPDIR": str(tmp_path)}
    run = subprocess.Popen([gpufleet_exe(), "bench", "--here", "--tiny", "--gpus", "2", "--json", "--workload",
                            "llm:1b"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    heard = set()
    deadline = time.time() + 300
    while run.poll() is None and time.time() < deadline:
        heard |= listeners(run_processes(str(tmp_path)))
        time.sleep(0.2)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 0, err[-3000:]
    assert json.loads(out)["device"]["world_size"] == 2
    assert not beyond_loopback(heard), f"the benchmark listened beyond loopback: {sorted(beyond_loopback(heard))}"
    assert heard, "none of the benchmark's processes was seen listening (its gloo sockets): nothing was looked at"


# a process in the job's group that is not the benchmark's (one that took a rank through the unauthenticated store):
# it sends a pickle where the ranks send their rows
HOSTILE_RANK = """import datetime as dt, pickle, sys
import torch, torch.distributed as d
sys.path.insert(0, {tests!r})
from network_peer import Planted
d.init_process_group("gloo", init_method="file://" + {store!r}, rank=1, world_size=2, timeout=dt.timedelta(seconds=60))
data = torch.frombuffer(bytearray(pickle.dumps(Planted({marker!r}))), dtype=torch.uint8)
sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(2)]
d.all_gather(sizes, torch.tensor([data.numel()], dtype=torch.int64))  # as all_gather_object sends: sizes, then bytes
longest = max(int(n) for n in sizes)
padded = torch.zeros(longest, dtype=torch.uint8)
padded[:data.numel()] = data
d.all_gather([torch.zeros(longest, dtype=torch.uint8) for _ in range(2)], padded)
"""
FIRST_RANK = """import datetime as dt, importlib.util, json
import torch, torch.distributed as d
spec = importlib.util.spec_from_file_location("train_steps", {script!r})
ts = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ts)
d.init_process_group("gloo", init_method="file://" + {store!r}, rank=0, world_size=2, timeout=dt.timedelta(seconds=60))
env = {{"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0"}}
try:
    ts._gather(torch, {{"step_s": 0.1, "samples_per_s": 10.0}}, ts.Dist(env), torch.device("cpu"))
except Exception as e:  # refused: what it got is not a row
    print(type(e).__name__, flush=True)  # before gloo's teardown, which may abort the process once its peer left
"""


@needs_torch
def test_the_ranks_rows_are_read_as_json_so_a_rank_that_is_not_ours_runs_no_code(tmp_path):
    """Each rank's row reaches the first through the process group (train_steps._gather). With all_gather_object the
    first rank unpickled whatever a peer sent ("known to be insecure ... will execute arbitrary code during
    unpickling", its docstring in torch 2.13 distributed_c10d.py); across nodes the group's addresses come from a store
    any host of the network can change. A rank that sends a pickle instead of its row must run no code."""
    store, marker = str(tmp_path / "store"), str(tmp_path / "rank-code-ran")
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo"}
    ranks = [subprocess.Popen([sys.executable, "-c", text], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env)
             for text in (FIRST_RANK.format(script=bench.script_path(), store=store),
                          HOSTILE_RANK.format(tests=tests, store=store, marker=marker))]
    outs = [r.communicate(timeout=120) for r in ranks]
    assert not os.path.exists(marker), f"a rank's pickle ran in the benchmark ({open(marker).read()})"
    # the first rank got it and refused it. Neither exit status is asserted: gloo may abort either process at exit
    # once its peer has left ("terminate called without an active exception", SIGABRT; seen on the first rank in CI,
    # 2026-11-28, after it had printed its refusal)
    assert outs[0][0].strip() in ("UnicodeDecodeError", "ValueError", "JSONDecodeError"), (outs[0], outs[1][1][-2000:])


@needs_torch
def test_the_processes_the_script_starts_end_when_it_is_killed(tmp_path):
    """`bench --here` kills the script at its time (subprocess.run's timeout: SIGKILL to that one process), and a rack
    host's session may end the same way: the processes it started on the GPUs end with it (PR_SET_PDEATHSIG), not
    train on, unseen, holding the GPUs."""
    (tmp_path / "plan.json").write_text(json.dumps(Launch("2").plan(tiny_plan(100000))))
    script = subprocess.Popen([sys.executable, bench.script_path(), str(tmp_path / "plan.json")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "TMPDIR": str(tmp_path)})
    workers: set[int] = set()
    deadline = time.time() + 120
    while len(workers) < 2 and time.time() < deadline:  # the two workers (their plan is in the script's own folder)
        workers = run_processes(str(tmp_path)) - {script.pid}
        time.sleep(0.2)
    assert len(workers) == 2, f"the script did not start its two processes ({workers})"
    script.kill()
    script.wait()
    deadline = time.time() + 60
    while run_processes(str(tmp_path)) and time.time() < deadline:
        time.sleep(0.2)
    left = run_processes(str(tmp_path))
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"the script's processes {sorted(left)} trained on after it was killed"

"""Slurm on the local test rack, end to end (issues 37 and 48): Debian's slurm-wlm and munge installed by
`gpufleet up` through the `slurm` formula on a controller, two L4 nodes and an 8x H100 node (its GPUs
played by the stand-in tools, its device files in its own /dev), with cgroups on (each rack host has a
cgroup tree of its own). `sinfo` lists them idle; every key of the rendered files is one Debian's own
manual pages document; each node is told its sockets, cores and threads as `slurmd -C` counts them;
jobs run in their cgroups; two one-GPU jobs run at once on the H100 node, each seeing its own GPU only;
a host whose node checks fail (an XID 79) is drained by the health check with the fault as its reason
and resumed once they pass; a hung nvidia-smi drains its node with GF-HEALTH-TIMEOUT before slurmd
would kill the check; slurmdbd (with MariaDB on the controller) records the jobs for `sacct`, `status`
shows the scheduler's view, and `down --clean` leaves nothing behind but the accounting database."""

import re
import time

import pytest

from tests.conftest import ROOT
from tests.integration import localrack
from tests.integration.localrack import gpufleet, install_standins, on_host, remove_standins

STACK = str(ROOT / "tests" / "integration" / "slurm-rack.yaml")
CLUSTER = "e2e-slurm"
COMPUTE = ("h2", "h3", "h4")  # the rack's hosts 2-4 (their UTS names): two L4 nodes, then the H100 node
H100_HOST, H100_GPUS = 4, 8
NVIDIA_MAJOR = 195  # the NVIDIA driver's character devices: /dev/nvidia0.. (minor = index), /dev/nvidiactl (255)
SLURMD_KILLS_AFTER_S = 60  # slurmd.c run_script_health_check, max_wait (Slurm 22.05.8)

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("rack")]


@pytest.fixture(scope="module")
def rack(tmp_path_factory):
    yield from localrack.rack_module(tmp_path_factory)


def _nodes() -> dict[str, str]:
    """Each node's state as the controller's `sinfo` says it."""
    out = on_host(1, "sinfo -h -N -o '%N %t'").stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


def _until(what, ok, timeout: float = 90):
    deadline = time.monotonic() + timeout
    while True:
        got = what()
        if ok(got) or time.monotonic() > deadline:
            return got
        time.sleep(2)


def _fields(line: str) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in line.split() if "=" in kv)


def _gpu_node() -> None:
    """Host 4 as an 8x H100 node before anything is installed on it: the stand-in tools answer for its
    GPUs (the fact probe's nvidia-smi query among them) and its /dev has their device files, which
    gres.conf names (slurmd stops at start without them)."""
    install_standins(H100_HOST, {}, "h100x8")
    made = on_host(H100_HOST, "; ".join(f"mknod -m 666 /dev/nvidia{i} c {NVIDIA_MAJOR} {i}" for i in range(H100_GPUS))
                   + f"; mknod -m 666 /dev/nvidiactl c {NVIDIA_MAJOR} 255")
    assert made.returncode == 0, made.stderr


def _documented_keys() -> None:
    """Every key of the files gpufleet rendered is one the installed Slurm's own manual documents
    (Debian's slurm-client ships slurm.conf(5), gres.conf(5) and cgroup.conf(5))."""
    for name in ("slurm.conf", "gres.conf", "cgroup.conf"):
        conf = on_host(1, f"cat /etc/slurm/{name}").stdout
        manual = on_host(1, f"zcat /usr/share/man/man5/{name}.5.gz").stdout
        assert manual, f"no {name}(5) on the controller"
        keys = {kv.split("=", 1)[0] for line in conf.splitlines() if not line.startswith("#") for kv in line.split()}
        undocumented = sorted(k for k in keys if not re.search(rf"\\fB{re.escape(k)}\\fR", manual))
        assert undocumented == [], (name, undocumented)


def _hardware_as_slurmd_counts_it() -> None:
    """Each node's line says what `slurmd -C` finds on it: its CPUs as sockets, cores and threads."""
    for i, name in enumerate(COMPUTE, start=2):
        hw = _fields(on_host(i, "slurmd -C").stdout.splitlines()[0])
        told = _fields(on_host(1, f"scontrol show node {name} -o").stdout)
        assert ([told["CPUTot"], told["Sockets"], told["CoresPerSocket"], told["ThreadsPerCore"]]
                == [hw["CPUs"], hw["SocketsPerBoard"], hw["CoresPerSocket"], hw["ThreadsPerCore"]]), (told, hw)


def _jobs_run_in_their_cgroups() -> None:
    ran = on_host(1, "srun -w h2 cat /proc/self/cgroup", timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr + on_host(2, "tail -20 /var/log/slurm/slurmd.log").stdout
    # cgroup v1 (this machine's): /slurm_<node>/uid_0/job_N/step_0 (Debian builds Slurm for several slurmd
    # per host: the node's name is in the path); cgroup v2: .../job_N/step_0
    tracked = {m.group(1) for m in re.finditer(r"^\d+:(memory|freezer|cpuset|devices|):/\S*job_\d+/step_0", ran.stdout, re.M)}
    assert tracked >= {"memory", "devices"} or tracked == {""}, ran.stdout


GPU_PROBE = """#!/bin/sh
# which of the node's GPUs this job may open: the error each open gives, by device file
for d in /dev/nvidia[0-7]; do
  echo "$d $( (: < "$d") 2>&1 | sed 's|.*: ||')"
done > /tmp/gpus-$SLURM_JOB_ID
sleep 300
"""


def _two_one_gpu_jobs_at_once() -> None:
    """Two one-GPU jobs on the 8-GPU node run at once (without DefMemPerCPU the first took the node's
    memory and the second waited); each may open its own GPU's device file only (the driver is not
    there: "No such device or address"), the other GPUs' are denied it ("Operation not permitted")."""
    assert on_host(1, "cat > /tmp/gpu-probe.sh", stdin=GPU_PROBE).returncode == 0
    jobs = []
    for _ in range(2):
        sub = on_host(1, "sbatch --parsable -p h100 --gres=gpu:1 /tmp/gpu-probe.sh")
        assert sub.returncode == 0, sub.stderr
        jobs.append(sub.stdout.strip().split(";")[0])
    try:
        queue = _until(lambda: on_host(1, "squeue -h -p h100 -o '%i %T %N %r'").stdout,
                       lambda out: out.count("RUNNING") == 2, timeout=60)
        assert sorted(queue.split("\n")[:2]) == sorted(f"{j} RUNNING h4 None" for j in jobs), queue
        seen = {}
        for j in jobs:
            idx = re.search(r"GRES=gpu:h100:1\(IDX:(\d+)\)", on_host(1, f"scontrol show job -d {j}").stdout)
            assert idx, on_host(1, f"scontrol show job -d {j}").stdout
            opened = _until(lambda j=j: on_host(H100_HOST, f"cat /tmp/gpus-{j}").stdout,
                            lambda out: out.count("\n") == H100_GPUS, timeout=30)
            seen[int(idx.group(1))] = dict(line.split(" ", 1) for line in opened.splitlines())
        assert len(seen) == 2, seen  # two GPUs, one each
        for idx, opened in seen.items():
            assert opened.pop(f"/dev/nvidia{idx}") == "No such device or address", (idx, opened)
            assert set(opened.values()) == {"Operation not permitted"}, (idx, opened)
    finally:
        on_host(1, f"scancel {' '.join(jobs)}")
    assert _until(_nodes, lambda n: n.get("h4") == "idle")["h4"] == "idle"


def _a_hung_gpu_drains_its_node() -> None:
    """nvidia-smi hangs (a GPU that fell off the bus): the health check drains the node with
    GF-HEALTH-TIMEOUT, which it can only do if it finishes before slurmd kills it; once nvidia-smi
    answers again the node is resumed."""
    install_standins(H100_HOST, {"nvidia-smi.hang": ""}, "h100x8")
    hung = time.monotonic()
    try:
        shown = _until(lambda: on_host(1, f"scontrol show node h{H100_HOST} -o").stdout,
                       lambda s: "GF-HEALTH-TIMEOUT" in s, timeout=3 * SLURMD_KILLS_AFTER_S)
        log = on_host(H100_HOST, "grep health_check /var/log/slurm/slurmd.log").stdout
        assert "DRAIN" in shown and "Reason=gpufleet: GF-HEALTH-TIMEOUT health.timeout" in shown, (shown, log)
        assert "poll timeout" not in log and "killed" not in log, log  # slurmd never had to kill it
        print(f"a hung nvidia-smi drained h{H100_HOST} {time.monotonic() - hung:.0f} s after it hung")
    finally:
        install_standins(H100_HOST, {}, "h100x8")
    assert _until(_nodes, lambda n: n.get("h4") == "idle")["h4"] == "idle"


def test_slurm_comes_up_runs_jobs_drains_a_failing_node_and_goes(rack):
    _gpu_node()
    rc, doc, err = gpufleet(rack, "up", "--no-verify", STACK, "--cluster", CLUSTER, "--yes", "--trust-new-hosts")
    assert rc == 0, [(h["host"], h.get("error")) for h in (doc or {}).get("hosts", [])] or err[-3000:]
    assert {h["state"] for h in doc["hosts"]} == {"configured"}, doc["hosts"]
    nodes = _until(_nodes, lambda n: n == {h: "idle" for h in COMPUTE})
    assert nodes == {h: "idle" for h in COMPUTE}, (nodes, on_host(1, "tail -20 /var/log/slurm/slurmctld.log").stdout)
    ran = on_host(1, "srun -N2 hostname", timeout=120)  # the default partition: the L4 nodes
    assert ran.returncode == 0 and sorted(ran.stdout.split()) == ["h2", "h3"], ran.stdout + ran.stderr
    assert "GresTypes=gpu" in on_host(3, "cat /etc/slurm/slurm.conf").stdout
    _documented_keys()
    _hardware_as_slurmd_counts_it()
    _jobs_run_in_their_cgroups()
    # accounting: slurmdbd recorded the job (slurmctld sends it on a moment later)
    jobs = _until(lambda: on_host(1, "sacct -n -X -P -o JobName,State,NNodes").stdout,
                  lambda out: "hostname|COMPLETED|2" in out, timeout=60)
    assert "hostname|COMPLETED|2" in jobs, (jobs, on_host(1, "tail -20 /var/log/slurm/slurmdbd.log").stdout)

    rc, doc, err = gpufleet(rack, "status", CLUSTER, "--local")
    assert rc == 0, err[-2000:]
    (cl,) = doc["clusters"]
    assert cl["scheduler"]["nodes"] == {"idle": 3} and cl["scheduler"]["controller"] == "ctl-0", cl.get("scheduler")

    _two_one_gpu_jobs_at_once()

    xid = (ROOT / "tests" / "data" / "verify" / "journal-xid79.txt").read_text()
    install_standins(3, {"journal.txt": xid})  # host 3 (h3) now shows a GPU with a fatal XID
    try:
        shown = _until(lambda: on_host(1, "scontrol show node h3 -o").stdout, lambda s: "Reason=gpufleet:" in s)
        assert "DRAIN" in shown and "Reason=gpufleet: GF-XID-FATAL health.xid" in shown, shown
        assert _nodes()["h2"] == "idle"
    finally:
        remove_standins(3)
    # its checks pass again (no GPU seen at configure time, none expected of it): resumed
    assert _until(_nodes, lambda n: n.get("h3") == "idle")["h3"] == "idle"

    _a_hung_gpu_drains_its_node()

    rc, doc, err = gpufleet(rack, "down", STACK, "--cluster", CLUSTER, "--yes", "--clean")
    assert rc == 0, [(h["host"], h.get("error")) for h in (doc or {}).get("hosts", [])] or err[-2000:]
    for i in range(1, 5):
        left = on_host(i, "ss -ltnH '( sport = :6817 or sport = :6818 or sport = :6819 or sport = :3306 )' | wc -l; "
                          "ls /etc/slurm/slurm.conf /etc/slurm/slurmdbd.conf /etc/munge/munge.key "
                          "/usr/local/sbin/gpufleet-slurm-health 2>/dev/null; dpkg -l slurmd slurmctld slurmdbd "
                          "slurm-client slurm-wlm-basic-plugins munge libmunge2 mariadb-server 2>/dev/null | grep -c '^ii'")
        assert left.stdout.split() == ["0", "0"], (i, left.stdout, left.stderr)
    # the job history is data: MariaDB's purge keeps the accounting database
    assert on_host(1, "test -d /var/lib/mysql/slurm_acct_db").returncode == 0

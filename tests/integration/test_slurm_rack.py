"""Slurm on the local test rack, end to end (issues 37 and 48): Debian's slurm-wlm and munge installed by
`gpufleet up` through the `slurm` formula on a controller, two L4 nodes and an 8x H100 node (its GPUs
played by the stand-in tools, its device files in its own /dev), with cgroups on (each rack host has a
cgroup tree of its own). `sinfo` lists them idle; every key of the rendered files is one Debian's own
manual pages document; each node is told its sockets, cores and threads as `slurmd -C` counts them;
jobs run in their cgroups; two one-GPU jobs run at once on the H100 node, each seeing its own GPU only
and given its GPU's share of the node (an 8-GPU job all of it); a host whose node checks fail (an XID 79)
is drained by the health check with the fault as its reason and resumed once they pass; a hung
nvidia-smi drains its node with GF-HEALTH-TIMEOUT naming it before slurmd would kill the check, and
overlapping checks run one nvidia-smi, not a pile; `heal` isolates the drained host (its pool's
on_fault: isolate) and `status` names it (issue 51); slurmdbd (with MariaDB on the controller) records the
jobs for `sacct`, `status` shows the scheduler's view, and `down --clean` leaves nothing behind but the
accounting database."""

import re
import time

import pytest
import yaml

from tests.conftest import ROOT
from tests.integration import localrack
from tests.integration.localrack import active, gpufleet, install_standins, on_host, remove_standins

STACK_FILE = ROOT / "tests" / "integration" / "slurm-rack.yaml"
INTERVAL_S = yaml.safe_load(STACK_FILE.read_text())["slurm"]["health_check_interval"]
CLUSTER = "e2e-slurm"
COMPUTE = ("h2", "h3", "h4")  # the rack's hosts 2-4 (their UTS names): two L4 nodes, then the H100 node
H100_HOST, H100_GPUS = 4, 8
NVIDIA_MAJOR = 195  # the NVIDIA driver's character devices: /dev/nvidia0.. (minor = index), /dev/nvidiactl (255)
SLURMD_KILLS_AFTER_S = 60  # slurmd.c run_script_health_check, max_wait (Slurm 22.05.8)
# a node's state follows its checks within two of the stack's health check intervals and one check
CHECKS_WITHIN_S = 2 * INTERVAL_S + SLURMD_KILLS_AFTER_S

pytestmark = [pytest.mark.slow, localrack.group(0)]


@pytest.fixture(scope="module")
def rack(request, tmp_path_factory):
    yield from localrack.rack_module(request, tmp_path_factory, STACK_FILE)


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


def _mem_mb(mem: str) -> int:
    """A TRES memory figure (``2750M``, ``21G``) in MiB: Slurm writes it in the largest unit that holds it
    exactly."""
    return round(float(mem[:-1]) * {"M": 1, "G": 1024, "T": 1024 ** 2}[mem[-1]])


def _allocated(job: str) -> tuple[int, str, int]:
    """What slurmctld allocated a job: (its memory in MiB, its CPUs, its GPUs), from its TRES (``TRES=`` in
    22.05, ``AllocTRES=`` from 23.02; without AccountingStorageTRES=gres/gpu they hold no GPUs) and JOB_GRES."""
    shown = on_host(1, f"scontrol show job -d {job}").stdout
    tres = dict(kv.split("=", 1) for kv in re.search(r"\b(?:Alloc)?TRES=(\S+)", shown).group(1).split(","))
    gres = re.search(r"JOB_GRES=gpu:\w+:(\d+)", shown)
    return _mem_mb(tres["mem"]), tres["cpu"], int(gres.group(1)) if gres else 0


def _per_gpu() -> tuple[dict, int]:
    node = _fields(on_host(1, f"scontrol show node h{H100_HOST} -o").stdout)
    return node, int(node["RealMemory"]) // H100_GPUS


def _gpu_jobs_get_their_gpus_share(jobs: list[str]) -> None:
    """A GPU job without --mem or --cpus-per-gpu gets its GPUs' share of the node (DefMemPerGPU and
    DefCpuPerGPU, 1/8 of it per GPU here) -- not DefMemPerCPU's share of its one CPU, which cgroup.conf's
    ConstrainRAMSpace makes its memory limit (on a p5.48xlarge 1% of the node: an 8-GPU job OOM-killed).
    The stand-in node has 2 CPUs for its 8 GPUs: less than one CPU per GPU, so a job gets Slurm's one."""
    node, per_gpu = _per_gpu()
    for j in jobs:
        got = _allocated(j)
        assert got == (per_gpu, str(max(1, int(node["CPUTot"]) // H100_GPUS)), 1), (j, got, node)


def _an_8_gpu_job_gets_the_whole_node() -> None:
    node, per_gpu = _per_gpu()
    whole = on_host(1, "sbatch --parsable -p h100 --gres=gpu:8 --wrap 'sleep 300'")
    assert whole.returncode == 0, whole.stderr
    job = whole.stdout.strip().split(";")[0]
    try:
        assert _until(lambda: on_host(1, f"squeue -h -j {job} -o %T").stdout.strip(), lambda s: s == "RUNNING") \
            == "RUNNING", on_host(1, f"scontrol show job {job}").stdout
        mem, _, gpus = _allocated(job)
        assert (mem, gpus) == (per_gpu * H100_GPUS, H100_GPUS), (mem, gpus, node)  # the node's memory, less rounding
    finally:
        on_host(1, f"scancel {job}")
    assert _until(_nodes, lambda n: n.get("h4") == "idle")["h4"] == "idle"


def _two_one_gpu_jobs_at_once() -> None:
    """Two one-GPU jobs on the 8-GPU node run at once (without DefMemPerCPU the first took the node's
    memory and the second waited); each may open its own GPU's device file only (the driver is not
    there: "No such device or address"), the other GPUs' are denied it ("Operation not permitted");
    each got its GPU's share of the node, and an 8-GPU job gets the whole of it."""
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
        _gpu_jobs_get_their_gpus_share(jobs)
    finally:
        on_host(1, f"scancel {' '.join(jobs)}")
    assert _until(_nodes, lambda n: n.get("h4") == "idle")["h4"] == "idle"
    _an_8_gpu_job_gets_the_whole_node()


def _overlapping_checks_run_one_nvidia_smi() -> None:
    """slurmd starts a health check every interval whether the last ended or not (req.c, 22.05.8), and
    runs over a hung nvidia-smi piled up, each with its own (four at once here before the lock). Two
    checks started at once by hand, as slurmd starts them, beside slurmd's own: one runs, the other
    finds it running and does nothing, and no more than one nvidia-smi is ever alive."""
    started = on_host(H100_HOST, "for i in 1 2; do setsid sh -c \"env -i SLURMD_NODENAME=h4 "
                                 "/usr/local/sbin/gpufleet-slurm-health >/tmp/health-$i.out 2>&1; "
                                 "echo rc=\\$? >>/tmp/health-$i.out\" </dev/null >/dev/null 2>&1 & done")
    assert started.returncode == 0, started.stderr
    most = 0
    for _ in range(20):
        most = max(most, int(on_host(H100_HOST, "pgrep -f -c '[s]bin/nvidia-smi'").stdout.strip() or 0))
        time.sleep(1)
    said = _until(lambda: on_host(H100_HOST, "cat /tmp/health-1.out /tmp/health-2.out").stdout,
                  lambda out: out.count("rc=") == 2, timeout=2 * SLURMD_KILLS_AFTER_S)
    assert most == 1 and "another health check is running on this node" in said, (most, said)


def _a_hung_gpu_drains_its_node() -> None:
    """nvidia-smi hangs (a GPU that fell off the bus): the health check drains the node with
    GF-HEALTH-TIMEOUT naming nvidia-smi, which it can only do if it finishes before slurmd kills it;
    overlapping checks leave one nvidia-smi, not a pile; once nvidia-smi answers again the node is
    resumed."""
    install_standins(H100_HOST, {"nvidia-smi.hang": ""}, "h100x8")
    hung = time.monotonic()
    try:
        _overlapping_checks_run_one_nvidia_smi()
        shown = _until(lambda: on_host(1, f"scontrol show node h{H100_HOST} -o").stdout,
                       lambda s: "GF-HEALTH-TIMEOUT" in s, timeout=CHECKS_WITHIN_S)
        log = on_host(H100_HOST, "grep health_check /var/log/slurm/slurmd.log").stdout
        assert "DRAIN" in shown and "Reason=gpufleet: GF-HEALTH-TIMEOUT health.timeout (nvidia-smi after " in shown, \
            (shown, log)
        assert "poll timeout" not in log and "killed" not in log, log  # slurmd never had to kill it
        print(f"a hung nvidia-smi drained h{H100_HOST} {time.monotonic() - hung:.0f} s after it hung")
    finally:
        install_standins(H100_HOST, {}, "h100x8")
    assert _until(_nodes, lambda n: n.get("h4") == "idle", timeout=CHECKS_WITHIN_S)["h4"] == "idle"


def _heal_isolates_the_faulty_host_and_status_names_it(rack) -> None:
    """Issue 51: host 3, drained by its health check for a fatal XID, is isolated by `gpufleet heal` (its pool's
    on_fault: isolate; a rack host is never replaced) and named with its fault in `gpufleet status`; the healthy
    hosts are left alone."""
    rc, doc, err = gpufleet(rack, "heal", CLUSTER, "--once")  # by name: `up` named it (--cluster), not its stack
    assert rc == 0, (doc, err[-2000:])
    (healed,) = doc["clusters"]
    by = {n["address"]: n for n in healed["nodes"]}
    bad = by[active().address(3)]
    assert bad["state"] == "faulty" and bad["decision"]["action"] == "isolate" and bad["decision"]["code"] == \
        "GF-XID-FATAL", bad
    assert [r["done"] for r in healed["repaired"] if r["node"] == bad["node"]] == [True], healed["repaired"]
    assert {by[active().address(i)]["decision"]["action"] for i in (2, 4)} == {"none"}, healed
    rc, doc, err = gpufleet(rack, "status", CLUSTER, "--local")
    assert rc == 0, err[-2000:]
    (cl,) = doc["clusters"]
    named = cl["health"]["nodes"].get(bad["node"]) or {}
    assert named.get("done") == "isolate" and named.get("last_fault") == "GF-XID-FATAL", cl["health"]
    assert any(f"{bad['node']} isolate [GF-XID-FATAL]" in n for n in cl["notes"]), cl["notes"]


def test_slurm_comes_up_runs_jobs_drains_a_failing_node_and_goes(rack):
    _gpu_node()
    rc, doc, err = gpufleet(rack, "up", "--no-verify", rack["stack"], "--cluster", CLUSTER, "--yes", "--trust-new-hosts")
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
        shown = _until(lambda: on_host(1, "scontrol show node h3 -o").stdout, lambda s: "Reason=gpufleet:" in s,
                       timeout=CHECKS_WITHIN_S)
        assert "DRAIN" in shown and "Reason=gpufleet: GF-XID-FATAL health.xid" in shown, shown
        assert _nodes()["h2"] == "idle"
        _heal_isolates_the_faulty_host_and_status_names_it(rack)
    finally:
        remove_standins(3)
    # its checks pass again (no GPU seen at configure time, none expected of it): resumed
    assert _until(_nodes, lambda n: n.get("h3") == "idle", timeout=CHECKS_WITHIN_S)["h3"] == "idle"

    _a_hung_gpu_drains_its_node()

    rc, doc, err = gpufleet(rack, "down", rack["stack"], "--cluster", CLUSTER, "--yes", "--clean")
    assert rc == 0, [(h["host"], h.get("error")) for h in (doc or {}).get("hosts", [])] or err[-2000:]
    for i in range(1, 5):
        left = on_host(i, "ss -ltnH '( sport = :6817 or sport = :6818 or sport = :6819 or sport = :3306 )' | wc -l; "
                          "ls -d /etc/slurm/slurm.conf /etc/slurm/slurmdbd.conf /etc/munge/munge.key "
                          "/usr/local/sbin/gpufleet-slurm-health /run/gpufleet-health 2>/dev/null; "
                          "dpkg -l slurmd slurmctld slurmdbd "
                          "slurm-client slurm-wlm-basic-plugins munge libmunge2 mariadb-server 2>/dev/null | grep -c '^ii'")
        assert left.stdout.split() == ["0", "0"], (i, left.stdout, left.stderr)
    # the job history is data: MariaDB's purge keeps the accounting database
    assert on_host(1, "test -d /var/lib/mysql/slurm_acct_db").returncode == 0

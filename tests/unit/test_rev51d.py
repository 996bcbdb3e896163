"""Hostile review rev51d (session 4) of merges a9779a0 (elastic51), bc8ca6d (hosts51) and 4276deb (active51): each test
fails on main as merged and names what the real Slurm does (SchedMD/slurm slurm-22-05-8-1 / slurm-23-11-4-1, read
2026-11-27). No product code is changed here."""

import datetime as dt
import subprocess

from test_heal_elastic import T0, _given_back, _grown, view
from test_slurm import DRAINED_SCONTROL, _health_node, _scontrol_calls

from gpufleet.clouds import node_watch

FAILING = ('import json\nprint(json.dumps({"verdict": "fail", "failures": [{"check": "health.ecc", '
           '"code": "GF-ECC-UNCORRECTABLE"}]}))\n')
PASSING = 'import json\nprint(json.dumps({"verdict": "pass", "ok": True, "failures": []}))\n'


def test_a_job_that_asks_for_a_drained_node_by_name_neither_grows_the_pool_nor_keeps_it_at_its_size(tmp_path, cat):
    """Finding 2 (money). clouds/scheduler.py counts every "ReqNodeNotAvail, UnavailableNodes:" job as waiting for
    nodes. Real (slurm-22-05-8-1 src/slurmctld/node_scheduler.c:2580-2605): that desc is ESLURM_NODE_NOT_AVAIL, and
    with a job's required nodes (`sbatch -w gpu-0`, req_node_bitmap) it names exactly the required nodes that are down
    or drained. A job held for a node a person drained (or one being given back) waits for THAT node: a new node
    never serves it. heal launches one anyway, and since `_shrink` runs only when nothing waits, the idle nodes are
    never given back while that one job pends (days)."""
    c = _grown(tmp_path, cat)  # {min 1, max 4} at 3: gpu-0 drained by a person, gpu-1 and gpu-2 idle
    job = "PENDING gpu 1 ReqNodeNotAvail, UnavailableNodes:gpu-0\n"
    for s in (0, 400, 2000, 4000, 90000):
        view(c, T0, gpu="drained", extra={"i-more0": "idle", "i-more1": "idle"}, jobs=job,
             reasons={"i-gpu0": "swapping a cable"})
        c.heal(T0 + dt.timedelta(seconds=s))
    assert c.api.added == ["i-more0", "i-more1"], f"heal launched {c.api.added[2:]} for a job that asks for gpu-0 alone"
    assert _given_back(c) != [], "two idle nodes were kept a day for a job no new node can serve"


def test_a_node_given_back_keeps_its_scale_down_drain_through_a_failing_then_passing_health_check(tmp_path):
    """Finding 4 (two drain reasons): the health program (salt/slurm/files/gpufleet-slurm-health check()) drains a
    failing node with its own reason over any gpufleet reason, GF-SCALE-DOWN included; once the fault passes, that
    reason is not GIVEN_BACK and the node is RESUMED: idle, open to jobs, until the watch's next interval drains it
    again (DRAINING under a job: heal's removal waits for that job; or heal's view from before the resume removes it).
    Slurm keeps one reason a node (scontrol update Reason= replaces it: src/scontrol/update_node.c, 22.05.8)."""
    command, env = _health_node(tmp_path, FAILING)
    (tmp_path / "bin" / "scontrol").write_text(DRAINED_SCONTROL)
    ran = subprocess.run(command, capture_output=True, text=True, timeout=60,
                         env={**env, "DRAINED_FOR": node_watch.SCALE_DOWN})
    drains = [c[3].removeprefix("Reason=") for c in _scontrol_calls(tmp_path) if c[0] == "update"]
    now = drains[-1] if drains else node_watch.SCALE_DOWN  # what slurmctld holds after this run
    (tmp_path / "verify.pyz").write_text(PASSING)  # the fault passed
    (tmp_path / "scontrol.log").unlink(missing_ok=True)
    ran = subprocess.run(command, capture_output=True, text=True, timeout=60, env={**env, "DRAINED_FOR": now})
    updates = [c for c in _scontrol_calls(tmp_path) if c[0] == "update"]
    assert ["update", "NodeName=h2", "State=RESUME"] not in updates, \
        f"a node given back (GF-SCALE-DOWN) was drained as {now!r} by a failing check, then resumed: {ran.stdout}"


# squeue -h -o '%T %P %D %r' (scheduler.PROBE) as Debian 12's slurmctld 22.05.8 printed it, run here on loopback
# (auth/none; slurm.conf: NodeName=gpu-[0-2] State=CLOUD, cloud_reg_addrs, no SuspendTime), 2026-11-27: a slurmd
# registered as gpu-1 (idle), gpu-0 and gpu-2 never registered and drained "gpufleet: GF-GATE not registered yet"
# (salt/slurm/daemon.sls), then `sbatch -N2 --wrap true`; the reason held for minutes, backfill passes included.
REAL_WAIT = "PENDING gpu 2 Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions\n"


def test_a_job_that_asks_more_nodes_than_the_pool_has_registered_makes_the_pool_grow(tmp_path, cat):
    """Finding 1 (breaks issue 51 step 5): with slots declared up to max and the unheld ones drained, a job asking
    more nodes than the pool's registered nodes waits, as the first job of its partition, with WAIT_RESOURCES and the
    state_desc "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions"
    (slurm-22-05-8-1 src/slurmctld/job_scheduler.c:1727-1738, min_nodes > the partition's available nodes; the same
    at slurm-23-11-4-1 job_scheduler.c:1751); squeue's %r prints the state_desc. "ReqNodeNotAvail, UnavailableNodes:"
    (what scheduler.WAITS_FOR_SLOTS matches) is only the submit-time desc of the jobs behind it. scheduler.waiting()
    matches neither "Resources" nor the slots' prefix: a pool at min never grows for one multi-node job."""
    from test_heal_elastic import cluster

    c = cluster(tmp_path, cat)  # {min 1, max 3} at 1 node
    for s in (0, 400, 4000):
        view(c, T0, gpu="idle", jobs=REAL_WAIT)
        c.heal(T0 + dt.timedelta(seconds=s))
    assert c.api.added != [], "a 2-node job waited an hour on a {min 1, max 3} pool of 1 node: nothing was added"


CTLD_HEADER = """ClusterName=rev51d
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={port}
SlurmdPort={dport}
AuthType=auth/none
CredType=cred/none
SlurmUser={user}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/ctld.pid
SlurmctldLogFile={d}/ctld.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
"""


def test_a_slot_no_node_holds_is_never_schedulable_from_the_moment_slurmctld_reads_slurm_conf(tmp_path):
    """Finding 3 (jobs hang): configure/slurm.py _free_slots declares the unheld slots State=CLOUD, and only the
    controller's Salt state (salt/slurm/daemon.sls, after slurmctld runs, on each Salt apply) drains them. Debian 12's
    slurmctld 22.05.8, run here (2026-11-27): a never-registered CLOUD slot is IDLE+CLOUD+POWERED_DOWN ("idle~"), and
    with power saving off (no SuspendTime) it IS scheduled: `sbatch -N1 -w gpu-0` -> "sched: Allocate JobId=9
    NodeList=gpu-0", the job CONFIGURING and the node ALLOCATED+CLOUD+POWERED_DOWN+NOT_RESPONDING for as long as we
    watched (minutes): ResumeTimeout is enforced only for POWERING_UP nodes or by the power-save thread
    (src/slurmctld/node_mgr.c check_reboot_nodes, power_save.c:556, slurm-22-05-8-1), neither here. So any job that
    slurmctld starts between a (re)configure that adds slots (a higher max) and that Salt state, or after a person's
    usual `scontrol update NodeName=gpu-[0-7] State=RESUME`, hangs on a slot no VM holds. slurm.conf itself can keep
    them out (DownNodes=<slots> State=DRAIN|FUTURE Reason=..., slurm.conf(5) 22.05.8), atomically with the slots."""
    import getpass
    import shutil
    import socket
    import time

    from test_slurm import STACK, _conf

    from gpufleet import catalog, stacks
    from gpufleet.configure import slurm

    if not shutil.which("slurmctld"):
        import pytest

        pytest.skip("no slurmctld here (Debian 12: apt install slurmctld)")
    cat = catalog.load(use_config=False)
    (tmp_path / "train.yaml").write_text(STACK.replace("instance_type: g4dn.12xlarge\n    image: ubuntu-24.04\n"
                                                       "    nodes: 1", "instance_type: g4dn.12xlarge\n    image: "
                                                       "ubuntu-24.04\n    nodes: {min: 1, max: 3}"))
    st = stacks.load(tmp_path / "train.yaml", cat)
    cpu = {"cpus": 48, "mem_gib": 192, "gpu_count": 4, "cpu_topology": [2, 12, 2]}
    facts = [("ctl", "10.0.0.5", {"cpus": 4, "mem_gib": 16, "hostname": "ip-10-0-0-5"}, "ctl-0"),
             ("t4", "10.0.1.7", {**cpu, "hostname": "ip-10-0-1-7"}, "t4-0")]
    (pil, *_) = slurm.pool_pillars(st, "train", cat, facts, expectations={}, bundle=b"PK", key=b"k" * 32).values()
    text = pil["files"]["slurm.conf"]
    free = [d["NodeName"] for d in _conf(text) if d.get("NodeName") in ("t4-1", "t4-2")]
    assert free == ["t4-1", "t4-2"]
    # slurm.conf's node, DownNodes, t4 partition and slot parameter lines as written, less what this bare slurmctld
    # cannot load (GRES needs gres.conf; the switch, topology.conf)
    keep = [" ".join(w for w in line.split() if not w.startswith(("Gres=", "Feature="))) for line in text.splitlines()
            if line.startswith(("NodeName=t4-", "DownNodes=", "PartitionName=t4 ", "PrivateData=",
                                "SlurmctldParameters="))]
    ports = []
    for _ in range(2):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        ports.append(s.getsockname()[1])
        s.close()
    (tmp_path / "state").mkdir()
    conf = tmp_path / "slurm.conf"
    conf.write_text(CTLD_HEADER.format(port=ports[0], dport=ports[1], user=getpass.getuser(), d=tmp_path)
                    + "\n".join(keep) + "\n")
    env = {"SLURM_CONF": str(conf), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    ctld = subprocess.Popen(["slurmctld", "-D", "-c", "-f", str(conf)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        shown = ""
        while time.monotonic() < deadline:
            got = subprocess.run(["scontrol", "show", "node", "-o"], env=env, capture_output=True, text=True)
            if got.returncode == 0 and "NodeName=t4-2" in got.stdout:
                shown = got.stdout
                break
            time.sleep(0.5)
        states = {f.split("=", 1)[1]: line.split("State=", 1)[1].split()[0]
                  for line in shown.splitlines() for f in line.split()[:1]}
        assert set(states) >= set(free), (got.stdout, got.stderr, (tmp_path / "ctld.log").read_text()[-2000:])
        open_ = {n: states[n] for n in free if not {"DRAIN", "FUTURE", "DOWN"} & set(states[n].split("+"))}
        assert open_ == {}, f"slots no node holds are schedulable as slurmctld reads slurm.conf: {open_}"
    finally:
        ctld.terminate()
        ctld.wait(timeout=30)

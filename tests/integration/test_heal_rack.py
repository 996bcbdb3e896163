"""Issue 51's loop on the local test rack: the boot gate, the node watch and `gpufleet heal` against real Slurm.

Hosts 2 (the controller), 3 and 4 boot as an AWS stack's instances, as in test_cloud_nodes_e2e (moto's S3 the
bucket, the node agent run every few seconds as its timer would, Debian's Slurm installed through the bucket).
The rack's hosts run no systemd (each host's PID 1 is its sshd), so the watch's timer is played by a loop on each
host that starts ``python3 /opt/gpufleet/node_watch.py`` every ``health.interval`` seconds, as systemd's
OnUnitActiveSec would. A fault is replayed by the stand-in ``journalctl`` (tests/verify_standin.py) printing a
kernel log with a fatal XID:

* host 4 boots with the fault: its gate fails, and `sinfo`, polled across its registration, never shows it idle;
  once the fault is gone its gate passes and the watch resumes it;
* a fatal XID on idle host 3 drains it within two watch intervals, GF-XID-FATAL as the reason;
* host 4 running a job gets the fault: drained, and `heal --once --dry-run` waits while the job runs, then would
  replace it once the job has ended (the replacement itself: tests/unit/test_heal_aws.py against moto's EC2, test_heal_azure.py);
* DCGM's health watches (the stand-in dcgmi replaying a memory failure) drain idle host 3 with GF-DCGM-MEMORY;
* the active checks (DCGM level 2, the stand-in replaying a failing diagnostic) never run while host 3 runs a job
  (real Slurm refuses the reservation that would hold it), and once the job has ended run inside that reservation
  and drain the node, GF-ACTIVE with the fault code; the reservation is gone after them.
* host 1, never in the cluster, boots as host 4's replacement and joins Slurm as its slot, drained until its gate
  passes, with no `configure`.

In Slurm a compute node is its pool's slot (gpufleet.configure.slurm SLOT_STATE): host 3 is gpu-0, host 4 gpu-1.

A rack host isolated by `heal` and named in `status`: test_slurm_rack.py.
"""

import contextlib
import json
import os
import threading
import time

import pytest

from tests.conftest import ROOT
from tests.integration import localrack
from tests.integration import test_cloud_nodes_e2e as e2e
from tests.integration.localrack import active, install_standins, on_host, remove_standins
from tests.integration.test_cloud_nodes_e2e import rack, slurm_nodes, stop_watch  # noqa: F401 (rack: its fixture)

pytestmark = [pytest.mark.slow, localrack.group(1)]

INTERVAL_S = 20  # the pools' health.interval: the schema's shortest is 15; 20 leaves the checks' own time a margin
WAIT_S = 240
XID = (ROOT / "tests" / "data" / "verify" / "journal-xid79.txt").read_text()
STACK = f"""\
name: e2e-heal
owner: ci@example.com
ttl: 2h
slurm: {{cgroups: false, health_check_interval: 60}}
pools:
  - name: ctl
    provider: aws
    region: us-east-1
    instance_type: g6.xlarge
    role: controller
    nodes: 1
    health: {{interval: {INTERVAL_S}}}
    salt: {{states: [slurm], pillar: {{gpufleet: {{live: false}}}}}}
  - name: gpu
    provider: aws
    region: us-east-1
    instance_type: g6.xlarge
    nodes: {{min: 2, max: 3}}
    health: {{interval: {INTERVAL_S}, on_fault: replace}}
    salt: {{states: [node_base, slurm], pillar: {{gpufleet: {{live: false}}}}}}
"""


def fault(i: int) -> None:
    """Host ``i``'s kernel log shows a fatal XID (79: fell off the bus), as the stand-in journalctl prints it;
    no other stand-in tool (the host has no GPU the configuration would set up)."""
    install_standins(i, {"journal.txt": XID}, tools=("journalctl",))


def start_watch(i: int, env: dict) -> None:
    e2e.start_watch(i, env, INTERVAL_S)


def sinfo() -> dict[str, str]:
    out = on_host(2, "sinfo -h -N -o '%N %t'").stdout
    return dict(line.split() for line in out.splitlines() if len(line.split()) == 2)


def until(what, ok, timeout: float, every: float = 1):
    deadline = time.monotonic() + timeout
    while True:
        got = what()
        if ok(got) or time.monotonic() > deadline:
            return got
        time.sleep(every)


def node_line(name: str) -> str:
    return on_host(2, f"scontrol show node {name} -o").stdout


def local_health(i: int) -> dict:
    """The health the watch put into host ``i``'s status (its local copy of it)."""
    try:
        return json.loads(on_host(i, "cat /var/lib/gpufleet/status.json").stdout).get("health") or {}
    except ValueError:
        return {}


class Sinfo(threading.Thread):
    """`sinfo` on the controller every second: each node's states as seen, in order, each with when it was first
    seen (time.monotonic())."""

    def __init__(self):
        super().__init__(daemon=True)
        self.seen: dict[str, list[tuple[float, str]]] = {}
        self.stop = threading.Event()

    def run(self):
        while not self.stop.wait(1):
            at = time.monotonic()
            for node, state in sinfo().items():
                if not self.seen.get(node) or self.seen[node][-1][1] != state:
                    self.seen.setdefault(node, []).append((at, state))

    def until(self, node: str, moment: float) -> list[str]:
        """The node's states seen before ``moment``."""
        return [state for at, state in self.seen.get(node, []) if at < moment]


@pytest.fixture(scope="module")
def cluster(rack):  # noqa: F811 (rack: the imported fixture)
    mp = pytest.MonkeyPatch()
    try:
        with heal_cluster(rack, mp) as c:
            yield c
    finally:
        mp.undo()


@contextlib.contextmanager
def heal_cluster(rack, mp):  # noqa: F811 (rack: test_cloud_nodes_e2e.cloud_rack's)
    """The stack up on hosts 2-4 with the node agent and the watch running on each, host 4 booted with a fatal
    XID: {the Pulumi fake, the stack file, the sinfo poller, `up`'s environment} (also tests/bench/
    bench_heal_rack.py's)."""
    from gpufleet.fleet import up as fleet_up

    from fakes.pulumi_cli import FakePulumiCLI

    fault(4)
    poller = Sinfo()
    poller.start()
    booted = []
    try:
        with slurm_nodes(rack, mp, STACK, "data-heal", every_s=5,  # the agent's timer, shortened
                         before_boot=lambda i, env: (booted.append(i), start_watch(i, env))) as (
                cat, stack, plan, hosts, boot):
            # what `up` ran with (moto's endpoint, the data home its registry is in): each test's own environment
            # (tests/conftest.py) is another, and `heal` runs in the test
            env = {k: v for k, v in os.environ.items()
                   if k.startswith("AWS_") or k in ("XDG_DATA_HOME", "PULUMI_CONFIG_PASSPHRASE")}
            pulumi = FakePulumiCLI(plan)
            started = time.monotonic()
            out = fleet_up.bring_up(stack, cat, fleet_up.UpOptions(check=False,
                                    seams=fleet_up.Seams(pulumi_command=pulumi, wait_s=WAIT_S)), confirm=lambda p: True)
            print(f"e2e-heal up in {time.monotonic() - started:.0f} s")
            logs = {i: on_host(i, "tail -30 /var/log/gpufleet/node.log; ps -eo pid,etimes,args | grep -E "
                                  "'salt-call|slurm-health|scontrol|slurmd' | grep -v grep; "
                                  "tail -5 /var/log/slurm/slurmd.log").stdout for i in hosts}
            assert {r.target.id: r.state for r in out.configured} == {"ctl-0": "configured", "gpu-0": "configured",
                                                                      "gpu-1": "configured"}, logs
            yield {"pulumi": pulumi, "stack_file": rack["tmp"] / "data-heal.yaml", "sinfo": poller, "env": env,
                   "plan": plan, "boot": lambda i, pool, node_id: (booted.append(i), boot(i, pool, node_id))}
    finally:
        poller.stop.set()
        for i in booted:
            stop_watch(i)


def heal_dry_run(cluster, monkeypatch) -> dict:
    """`gpufleet --json heal STACK --once --dry-run` (in this process: Pulumi is the fake that replays the plan);
    node -> its decision."""
    from typer.testing import CliRunner

    from gpufleet.cli.app import app
    from gpufleet.cli.output import STATE
    from gpufleet.engine import automation

    for k, v in cluster["env"].items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(automation, "find_pulumi", lambda: cluster["pulumi"])
    try:
        r = CliRunner().invoke(app, ["--json", "heal", str(cluster["stack_file"]), "--once", "--dry-run"])
    finally:
        STATE.json = False
    assert r.exit_code in (0, 1), r.output
    (cl,) = json.loads(r.stdout)["clusters"]
    return {n["node"]: n["decision"] for n in cl["nodes"]}


def test_a_node_failing_its_gate_never_shows_idle_and_is_resumed_once_it_passes(cluster):
    # host 3 had no fault: its gate passed and its watch resumed it
    assert until(sinfo, lambda n: n.get("gpu-0") == "idle", timeout=6 * INTERVAL_S).get("gpu-0") == "idle", \
        (cluster["sinfo"].seen, on_host(3, "cat /var/lib/gpufleet/gate.json; tail /var/log/gpufleet/watch.log").stdout)
    gate = until(lambda: on_host(4, "cat /var/lib/gpufleet/gate.json").stdout, lambda s: '"passed": false' in s,
                 timeout=3 * INTERVAL_S)
    assert '"passed": false' in gate, (gate, on_host(4, "tail -20 /var/log/gpufleet/watch.log").stdout)
    # the watch records its gate's verdict, then drains the node for it: until then a slot that registered drained
    # may show no reason (Slurm's loss of it, gpufleet.clouds.node_watch slurm_drain), never idle
    shown = until(lambda: node_line("gpu-1"), lambda s: "Reason=gpufleet: GF-GATE" in s, timeout=INTERVAL_S)
    assert "DRAIN" in shown and "Reason=gpufleet: GF-GATE" in shown, shown
    cleared = time.monotonic()
    remove_standins(4)
    resumed = until(sinfo, lambda n: n.get("gpu-1") == "idle", timeout=4 * INTERVAL_S)
    cluster["sinfo"].stop.set()
    seen = cluster["sinfo"].seen
    assert resumed.get("gpu-1") == "idle", (seen, node_line("gpu-1"), on_host(4, "tail /var/log/gpufleet/watch.log").stdout)
    # across its registration and its failing gate, until the fault was gone, the controller never listed it idle
    # (not even idle*, not responding); once resumed it may pass through idle* on its way to idle
    before = cluster["sinfo"].until("gpu-1", cleared)
    # before any node registered as it, the slot is powered down ("idle~", "drain~") until the controller drains it
    # for its gate: a window in which Slurm could still pick the slot, open (README, Health); from the node's
    # registration on, the slot is never idle before its gate passes
    registered = [s for s in before if not s.endswith("~")]
    assert registered and not any(s.startswith("idle") for s in registered), seen
    print(f"h4 states until its gate passed: {before}; then {[s for at, s in seen['gpu-1'] if at >= cleared]}, "
          f"idle {time.monotonic() - cleared:.0f} s after the fault was gone")


def test_a_slot_declared_up_to_max_that_no_node_holds_is_never_idle(cluster):
    """Review rev51b, finding 2: slurm.conf declares an elastic pool's every slot up to max (gpu-2 here, held by no
    node), so that a node `scale` or `heal` adds joins with no `configure`. With the real slurmctld (Debian 12, Slurm
    22.05.8), once `up` has configured the controller, the slot is listed (PrivateData=cloud) and drained for its gate
    (the controller's state, salt/slurm/daemon.sls): never idle, so no job is sent to a node that does not exist."""
    shown = until(sinfo, lambda n: n.get("gpu-2", "").startswith("drain"), timeout=3 * INTERVAL_S)
    line = node_line("gpu-2")
    assert shown.get("gpu-2", "").startswith("drain"), (shown, line)
    assert "POWERED_DOWN" in line and "DRAIN" in line, line
    assert "Reason=gpufleet: GF-GATE not registered yet" in line, line
    print(f"gpu-2 (declared, no node): sinfo {shown.get('gpu-2')}; {line.strip()}")


def test_a_fatal_xid_on_an_idle_node_drains_it_within_two_intervals(cluster):
    assert until(sinfo, lambda n: n.get("gpu-0") == "idle", timeout=3 * INTERVAL_S).get("gpu-0") == "idle"
    fault(3)
    injected = time.monotonic()
    try:
        shown = until(lambda: node_line("gpu-0"), lambda s: "GF-XID-FATAL" in s and "DRAIN" in s,
                      timeout=4 * INTERVAL_S)
        took = time.monotonic() - injected
        assert "DRAIN" in shown and "Reason=gpufleet: GF-XID-FATAL" in shown, \
            (shown, on_host(3, "tail -20 /var/log/gpufleet/watch.log").stdout)
        # the watch saw it and says so in the node's status (Slurm's own health check runs every 60 s: it may
        # drain the node too, with the same reason, but not within this bound on its own)
        health = until(lambda: local_health(3), lambda h: h.get("state") == "faulty", timeout=INTERVAL_S)
        assert health.get("drained") is True and "GF-XID-FATAL" in {f["code"] for f in health["faults"]}, health
        print(f"fatal XID -> h3 drained in {took:.1f} s (watch interval {INTERVAL_S} s)")
        assert took <= 2 * INTERVAL_S, (took, shown)  # the bound: two intervals
    finally:
        remove_standins(3)
    assert until(sinfo, lambda n: n.get("gpu-0") == "idle", timeout=4 * INTERVAL_S).get("gpu-0") == "idle"


def test_a_node_running_a_job_is_drained_but_replaced_only_once_the_job_has_ended(cluster, monkeypatch):
    assert until(sinfo, lambda n: n.get("gpu-1") == "idle", timeout=3 * INTERVAL_S).get("gpu-1") == "idle"
    sub = on_host(2, "sbatch --parsable -w gpu-1 --wrap 'sleep 900'")
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip().split(";")[0]
    try:
        assert until(lambda: on_host(2, f"squeue -h -j {job} -o %T").stdout.strip(), lambda s: s == "RUNNING",
                     timeout=60) == "RUNNING"
        fault(4)
        shown = until(lambda: node_line("gpu-1"), lambda s: "GF-XID-FATAL" in s, timeout=4 * INTERVAL_S)
        assert "DRAIN" in shown and "Reason=gpufleet: GF-XID-FATAL" in shown, shown
        assert on_host(2, f"squeue -h -j {job} -o %T").stdout.strip() == "RUNNING"  # a drain lets the job finish
        # heal reads Slurm's view from the controller's status (its agent writes it on each run)
        waiting = until(lambda: heal_dry_run(cluster, monkeypatch), lambda d: d["gpu-1"]["action"] == "wait", timeout=90, every=5)
        assert waiting["gpu-1"]["action"] == "wait" and "still running" in waiting["gpu-1"]["why"], waiting
        assert waiting["gpu-1"]["code"] == "GF-XID-FATAL" and waiting["gpu-0"]["action"] == "none", waiting
    finally:
        on_host(2, f"scancel {job}")
    ended = until(lambda: heal_dry_run(cluster, monkeypatch), lambda d: d["gpu-1"]["action"] == "replace", timeout=90, every=5)
    assert ended["gpu-1"]["action"] == "replace", ended
    remove_standins(4)


DCGM_HEALTH_FAIL = (ROOT / "tests" / "data" / "verify" / "dcgmi-health" / "dcgmi-health-memory-fail.json").read_text()
DIAG_FAIL = (ROOT / "tests" / "data" / "verify" / "dcgmi-diag-r1-fail.json").read_text()


def test_a_dcgm_health_failure_on_an_idle_node_drains_it_within_two_intervals(cluster):
    assert until(sinfo, lambda n: n.get("gpu-0") == "idle", timeout=3 * INTERVAL_S).get("gpu-0") == "idle"
    # DCGM's host engine with its watches set (an earlier run set them) reporting a double-bit ECC error
    install_standins(3, {"dcgmi-health.json": DCGM_HEALTH_FAIL, ".dcgmi-health-set": ""}, tools=("dcgmi",))
    injected = time.monotonic()
    try:
        shown = until(lambda: node_line("gpu-0"), lambda s: "GF-DCGM-MEMORY" in s, timeout=3 * INTERVAL_S)
        took = time.monotonic() - injected
        assert "DRAIN" in shown and "Reason=gpufleet: GF-DCGM-MEMORY dcgm.health:memory" in shown, \
            (shown, on_host(3, "tail -20 /var/log/gpufleet/watch.log").stdout)
        print(f"DCGM memory failure -> h3 drained in {took:.1f} s (watch interval {INTERVAL_S} s)")
        assert took <= 2 * INTERVAL_S, (took, shown)
    finally:
        remove_standins(3)
    assert until(sinfo, lambda n: n.get("gpu-0") == "idle", timeout=4 * INTERVAL_S).get("gpu-0") == "idle"


def active_record(i: int) -> dict:
    try:
        return json.loads(on_host(i, "cat /var/lib/gpufleet/active.json").stdout)
    except ValueError:
        return {}


def due(i: int, faults=()) -> None:
    """Host ``i``'s active checks due now (their last run a day ago, the pool's health.active_every)."""
    wrote = on_host(i, "cat > /var/lib/gpufleet/active.json", stdin=json.dumps({"at": 0, "faults": list(faults)}))
    assert wrote.returncode == 0, wrote.stderr


def test_the_active_checks_never_run_under_a_job_and_run_in_a_reservation_once_it_ended(cluster):
    from gpufleet.clouds import node_watch

    assert until(sinfo, lambda n: n.get("gpu-0") == "idle", timeout=3 * INTERVAL_S).get("gpu-0") == "idle"
    install_standins(3, {"dcgmi-diag-r2.json": DIAG_FAIL}, tools=("dcgmi",))
    sub = on_host(2, "sbatch --parsable -w gpu-0 --wrap 'sleep 900'")
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip().split(";")[0]
    try:
        assert until(lambda: on_host(2, f"squeue -h -j {job} -o %T").stdout.strip(), lambda s: s == "RUNNING",
                     timeout=60) == "RUNNING"
        # what the watch relies on: real slurmctld refuses, at once, the reservation of a node that runs a job
        asked = time.monotonic()
        refused = on_host(2, "scontrol " + " ".join(node_watch.reservation("gpu-0")))
        assert refused.returncode != 0 and "Requested nodes are busy" in refused.stderr, refused
        assert time.monotonic() - asked < 10
        due(3)
        skipped = until(lambda: active_record(3), lambda r: "skipped" in r, timeout=2 * INTERVAL_S)
        assert "skipped" in skipped and skipped["faults"] == [], \
            (skipped, on_host(3, "tail -20 /var/log/gpufleet/watch.log").stdout)
        assert "DRAIN" not in node_line("gpu-0") and on_host(2, f"squeue -h -j {job} -o %T").stdout.strip() == "RUNNING"
    finally:
        on_host(2, f"scancel {job}")
    ended = time.monotonic()
    try:
        # the job's end, the node's return to IDLE and the next watch: a deadline with room for a loaded machine
        shown = until(lambda: node_line("gpu-0"), lambda s: "GF-ACTIVE" in s, timeout=6 * INTERVAL_S)
        assert "DRAIN" in shown and "Reason=gpufleet: GF-ACTIVE GF-DCGM-FAIL active.dcgm.diag" in shown, \
            (shown, active_record(3), on_host(3, "tail -20 /var/log/gpufleet/watch.log").stdout)
        print(f"job ended -> active checks ran and drained h3 in {time.monotonic() - ended:.1f} s")
        assert "No reservations" in on_host(2, "scontrol show reservation").stdout  # deleted after the run
    finally:
        remove_standins(3)
        due(3, active_record(3).get("faults") or ())  # run again now: the diagnostic passes (not checked, no GPU)
    resumed = until(sinfo, lambda n: n.get("gpu-0") == "idle", timeout=3 * INTERVAL_S)
    assert resumed.get("gpu-0") == "idle", (node_line("gpu-0"), active_record(3))


def test_a_replacement_joins_slurm_as_its_slot_drained_until_its_gate_passes_with_no_configure(cluster, monkeypatch):
    """Review of issue 51, finding 2: slurm.conf named each node by its host name, and a replacement (a new VM with a
    new host name) could not start slurmd ("Unable to determine this slurmd's NodeName") until someone ran `gpufleet
    configure`. Host 4 (slot gpu-1) gets a fatal XID and is drained, then its VM is gone; host 1, never in the cluster
    when slurm.conf was written (host name h1, its own address), boots through the real agent as the new instance
    with a fault of its own. heal keeps the slot gpu-1 under the new instance's id (channel.assign_slots, what
    nodes/cloud/heal.py calls once the cloud made it; the call itself against moto's EC2: tests/unit/test_heal.py):
    it registers as gpu-1 from its own address, drained for its gate, never idle, then idle once the fault is gone.
    slurm.conf is the one `up` wrote: no configure ran."""
    from gpufleet.clouds import cloud
    from gpufleet.nodes.cloud import channel

    conf = on_host(2, "sha256sum /etc/slurm/slurm.conf").stdout
    assert "h1" not in on_host(2, "cat /etc/slurm/slurm.conf").stdout
    fault(4)
    shown = until(lambda: node_line("gpu-1"), lambda s: "GF-XID-FATAL" in s and "DRAIN" in s, timeout=4 * INTERVAL_S)
    assert "Reason=gpufleet: GF-XID-FATAL" in shown, shown
    stop_watch(4)  # the faulty VM is terminated: its watch and its slurmd are gone with it
    assert on_host(4, "/etc/init.d/slurmd stop").returncode == 0
    for k, v in cluster["env"].items():  # the operator's credentials, as heal has them
        monkeypatch.setenv(k, v)
    new_id = "i-0replacement1"
    channel.assign_slots(cloud("aws").objects(cluster["plan"].outputs["pools"]["gpu"]["bucket"]),
                         [channel.NodeTarget("gpu", 1, new_id, active().address(1))])
    poller = Sinfo()
    poller.start()
    fault(1)
    cluster["boot"](1, "gpu", new_id)
    try:
        took = until(lambda: node_line("gpu-1"), lambda s: f"NodeAddr={active().address(1)}" in s, timeout=600,
                     every=3)
        assert f"NodeAddr={active().address(1)}" in took, (took, on_host(1, "tail -30 /var/log/gpufleet/node.log").stdout)
        gate = until(lambda: on_host(1, "cat /var/lib/gpufleet/gate.json").stdout, lambda s: '"passed": false' in s,
                     timeout=3 * INTERVAL_S)
        assert '"passed": false' in gate, (gate, on_host(1, "tail -20 /var/log/gpufleet/watch.log").stdout)
        shown = until(lambda: node_line("gpu-1"), lambda s: "Reason=gpufleet: GF-GATE" in s, timeout=INTERVAL_S)
        assert "DRAIN" in shown and "Reason=gpufleet: GF-GATE" in shown and "NodeHostName=h1" in shown, shown
        cleared = time.monotonic()
        remove_standins(1)
        resumed = until(sinfo, lambda n: n.get("gpu-1") == "idle", timeout=4 * INTERVAL_S)
        poller.stop.set()
        assert resumed.get("gpu-1") == "idle", (poller.seen, node_line("gpu-1"),
                                                on_host(1, "tail /var/log/gpufleet/watch.log").stdout)
        before = poller.until("gpu-1", cleared)
        assert before and not any(s.startswith("idle") for s in before), poller.seen
        ran = on_host(2, "srun -w gpu-1 hostname", timeout=120)
        assert ran.returncode == 0 and ran.stdout.split() == ["h1"], ran.stdout + ran.stderr
        assert on_host(2, "sha256sum /etc/slurm/slurm.conf").stdout == conf  # no configure ran
        print(f"gpu-1 (h1) states until its gate passed: {before}; idle {time.monotonic() - cleared:.0f} s after")
    finally:
        poller.stop.set()
        remove_standins(1)
        remove_standins(4)

"""Hostile review rev51e of issue 51 (spot notices, repair limits and leases, the boot gate, the fault lists): each
test here FAILS on the code reviewed (main b0a8ca4) and says what the real thing does, with its source.

The node-side tests run the real watch (clouds/node_watch.py) in test_node_watch's rig: a metadata server answering in
each cloud's documented format, a stand-in scontrol, moto's S3 for the status. The heal tests run real passes of
`heal` over test_heal's cluster (a stand-in cloud API, the real registry and log store)."""

import datetime as dt
import json
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "nodes" / "cloud"))  # test_node_watch's rig lives there

import pytest  # noqa: E402
import test_node_watch  # noqa: E402
from test_heal import Cluster, say, stack_text  # noqa: E402
from test_node_watch import AWS_SCHEDULED, GCP_MAINTENANCE, GCP_PREEMPTED, _health, _updates, _watch  # noqa: E402

from gpufleet.clouds import node_agent, node_watch  # noqa: E402
from gpufleet.nodecheck import checks, faults  # noqa: E402
from gpufleet.nodecheck.tools import Tools  # noqa: E402

from agent_kit import metadata_rules_elsewhere  # noqa: E402,F401 (an autouse fixture)

node = test_node_watch.node  # its fixture, requested by name in `watched`


@pytest.fixture
def watched(request):
    """test_node_watch's configured GPU node (its `node` fixture)."""
    return request.getfixturevalue("node")


# --- (a) spot and maintenance notices ---------------------------------------------------------------------------

def test_an_aws_scheduled_reboot_a_week_away_does_not_drain_the_node_for_that_week(watched):
    """AWS schedules instance events days ahead: NotBefore is "the earliest scheduled start time", an event with a
    NotBeforeDeadline can be moved up to that deadline, and a reschedule must start "at least 60 minutes from the
    current time" (docs.aws.amazon.com/AWSEC2/latest/APIReference/API_InstanceStatusEvent.html;
    .../UserGuide/reschedule-event.html, read 2026-11-28); a system-reboot is even cleared by a user's own reboot
    (API_InstanceMaintenanceOptions rebootMigration). The watch drains the node the moment the event is listed and
    calls it "interrupted" (node_watch.py aws_notice, :140-147; verdict, :445-449): a GPU node sits drained and idle for
    the whole week (on_fault isolate, the default, or a reserved node), or heal terminates it at once (replace)."""
    n = watched
    when = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=7)
    # the shape of IMDS events/maintenance/scheduled ("Scheduled events for your instances", Instance metadata)
    n["meta"].routes[AWS_SCHEDULED] = (200, json.dumps([{
        "NotBefore": when.strftime("%d %b %Y %H:%M:%S GMT"), "Code": "system-reboot", "Description": "scheduled reboot",
        "EventId": "instance-event-0d59937288b749b32", "State": "active",
        "NotAfter": (when + dt.timedelta(minutes=17)).strftime("%d %b %Y %H:%M:%S GMT")}]).encode())
    _watch(n)
    h = _health(n)
    drains = [u for u in _updates(n) if "State=DRAIN" in u]
    assert not drains and h["state"] != "interrupted", (
        f"a reboot AWS scheduled for {when:%Y-%m-%d} drained the node today ({drains}) and made it {h['state']!r}: "
        "idle for a week, or replaced by heal for a reboot")


def test_a_spot_notice_drains_the_node_while_a_slow_status_write_is_under_way(watched, monkeypatch):
    """GCP gives a preempted VM 30 s (instance/preempted, cloud.google.com/compute/docs/instances/preemptible); the
    watch reads the notice every NOTICE_POLL_S on its own thread, but acts on it under Run.lock, which the checks'
    say() holds across the status write: put_status retries 429/5xx/no answer after 1+2+4+8+16 s, each try up to 30 s
    (node_agent.RETRY_DELAYS, http timeout), so a throttled or slow bucket (Cloud Storage's one write a second per
    object) holds the spot drain for minutes, past the VM's end. Here the status write is held until the drain is
    seen (10 s at most): the drain must not wait for it."""
    n = watched
    monkeypatch.setattr(node_watch, "NOTICE_POLL_S", 0.05)
    n["meta"].routes.update({GCP_PREEMPTED: (200, b"FALSE"), GCP_MAINTENANCE: (200, b"NONE")})
    drained_while_held = []
    real = node_agent.put_status
    slurm = n["bin"] / "slurm-node.json"

    def slow(*a, **k):
        if not drained_while_held:  # the first write (the checks' verdict): the notice comes while it is slow
            n["meta"].routes[GCP_PREEMPTED] = (200, b"TRUE")
            seen = threading.Event()
            for _ in range(200):
                if slurm.exists() and "DRAIN" in json.loads(slurm.read_text())["state"]:
                    seen.set()
                    break
                seen.wait(0.05)
            drained_while_held.append(seen.is_set())
        return real(*a, **k)

    monkeypatch.setattr(node_agent, "put_status", slow)
    _watch(n, "gcp")
    assert drained_while_held == [True], ("the preempted VM's drain waited for a status write to the bucket: "
                                          "Run.lock is held across put_status's retries")
    assert _health(n)["state"] == "interrupted"


# --- (c) the boot gate and the fault lists -------------------------------------------------------------------

def test_a_dcgm2_gate_does_not_pass_on_a_node_without_dcgmi(watched):
    """health.gate dcgm2 promises `dcgmi diag -r 2` before work (issue 51 step 1; spec.Health.gate). Where dcgmi is
    not installed (software.monitoring off, or an image without DCGM: salt/monitoring installs it), checks.dcgm
    says "skip" (nodecheck/checks.py:365-366), which is not a failure and, dcgm.diag never being in the
    expectations' `required` (verify/expect.py REQUIRED_GPU), not "incomplete" either: the gate PASSES without the
    diagnostic it names, and the node is resumed into Slurm."""
    n = watched
    (n["bin"] / "dcgmi").unlink()
    (n["state"] / "gate.json").write_text(json.dumps({"level": "dcgm2", "passed": None}))
    (n["bin"] / "slurm-node.json").write_text(json.dumps({"state": "IDLE+DRAIN",
                                                           "reason": "gpufleet: GF-GATE dcgm2 not passed yet"}))
    _watch(n)
    h = _health(n)
    assert h["gate"]["passed"] is not True, (f"the dcgm2 gate passed on a node without dcgmi (health {h['state']}, "
                                             f"Slurm: {_updates(n)[-1][2:] if _updates(n) else 'untouched'})")


XID_154 = ("2026-11-27T15:00:00+0000 node-0 kernel: NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from "
           "0x0 (None) to 0x1 (GPU Reset Required)\n")


def test_the_drivers_own_xid_154_gpu_reset_required_fails_the_node(tmp_path):
    """XID 154 is the driver's verdict on what a GPU needs: NVIDIA's XID catalog has a column "Xid 154 linkage"
    (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, read 2026-11-28) and NVML's recovery actions are
    None / GPU Reset / Node Reboot / Drain P2P / Drain and Reset ("Error Recovery and Response Flags",
    docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html: "Reset ... terminate all GPU
    processes, reset the GPU"); the line is the driver's as printed on 580/595 (forums.developer.nvidia.com
    t/364958). FATAL_XIDS (nodecheck/faults.py:18) lacks 154: a GPU its driver says must be reset only warns
    (GF-XID) and keeps taking jobs."""
    from tests.verify_standin import standins

    root = Path(__file__).resolve().parents[2]
    journal = (root / "tests" / "data" / "verify" / "l4x1" / "journal.txt").read_text() + XID_154
    bin_dir = standins(tmp_path / "tools", root / "tests" / "data" / "verify" / "l4x1", {"journal.txt": journal})
    expect = {"gpus": {"count": 1}, "fatal_xids": list(faults.FATAL_XIDS)}
    (res,) = checks.xid(checks.Node(expect, Tools((str(bin_dir),)), "/"))
    assert res["status"] == "fail", f"XID 154 'GPU Reset Required' only {res['status']}s ({res['measured']})"


def test_an_infiniband_port_that_keeps_going_down_fails_the_links_check(tmp_path):
    """Issue 51 step 2 watches "NVLink and IB link state and error counters" and names "an NVLink or InfiniBand link
    that flaps" among the faults. The IB check reads ibstat's State and Rate alone (nodecheck/checks.py:306-327): a
    port that went down and came back between two watches is "Active" at the moment and passes. The kernel counts it:
    /sys/class/infiniband/<ca>/ports/<n>/counters/link_downed, "Number of times the link failed to recover from an
    error state and went down" (Linux Documentation/ABI/stable/sysfs-class-infiniband; read by node_exporter's
    collector/infiniband_linux.go as node_infiniband_link_downed_total). Here mlx5_2 port 1 went down 12 times since
    boot and every port is Active now: nothing says so."""
    from tests.verify_standin import standins

    root = Path(__file__).resolve().parents[2]
    bin_dir = standins(tmp_path / "tools", root / "tests" / "data" / "verify" / "h100x8")
    sysroot = tmp_path / "root"
    for ca in ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7"):
        counters = sysroot / "sys" / "class" / "infiniband" / ca / "ports" / "1" / "counters"
        counters.mkdir(parents=True)
        (counters / "link_downed").write_text("12\n" if ca == "mlx5_2" else "0\n")
        (counters / "link_error_recovery").write_text("0\n")
        (counters / "symbol_error").write_text("0\n")
    expect = {"gpus": {"count": 8}, "ib": {"ports": 8, "rate_gbps": 400}}
    found = checks.links(checks.Node(expect, Tools((str(bin_dir),)), str(sysroot)))
    ib = {r["check"]: r["status"] for r in found if r["check"].startswith("links.ib")}
    assert any(r["status"] == "fail" for r in found if r["check"].startswith("links.ib")), (
        f"an IB port that went down 12 times since boot passes: {ib}")


def test_heal_does_not_terminate_a_node_whose_notice_is_a_reboot_it_comes_back_from(tmp_path, cat):
    """AWS's system-reboot / instance-reboot and Azure's Reboot take the VM away for minutes and give the same VM back
    ("Scheduled Reboot ... Rebooting events include a scheduled start and end time", EC2 DescribeInstanceStatus; Azure
    Scheduled Events: Reboot "The Virtual Machine is scheduled for reboot (non-persistent memory is lost)",
    learn.microsoft.com/azure/virtual-machines/linux/scheduled-events, read 2026-11-28); the watch itself resumes the
    node once the notice is gone (node_watch KEPT[2]). But the watch says "interrupted" for every notice that takes the
    VM (verdict: takes()), health.BROKEN holds "interrupted", and heal (on_fault: replace) terminates the VM and
    launches another: a new VM, a new gate, a max_replacements slot and a capacity ask, for a reboot."""
    c = Cluster(tmp_path, cat, stack_text("{on_fault: replace, max_replacements: 5}"))
    say(c.bucket, "i-gpu0", drained=True)
    body = json.loads(c.bucket.objects["status/gpu/" + node_agent.safe_key("i-gpu0") + ".json"])
    body["health"].update(state="interrupted", notice={"cloud": "aws", "kind": "system-reboot",
                                                       "at": "2026-11-28T03:00:00Z"})
    c.bucket.put("status/gpu/" + node_agent.safe_key("i-gpu0") + ".json", json.dumps(body).encode())
    c.heal()
    assert c.api.asked == [], f"heal replaced {c.api.asked} for a system-reboot notice: the VM comes back by itself"

"""The watch a cloud node runs between its configurations (Python 3.9+, stdlib only, beside the node agent).

Its timer (the agent installs it, at the pool's ``health.interval``) runs ``python3 node_watch.py [CONFIG]``: the
quick node checks of the verify bundle (XIDs, ECC and row remaps, NVLink, InfiniBand, a GPU fallen off the bus;
none of the load tests) and, on a thread of its own all along the run, the cloud's notices that it takes the VM
away (spot, preemption, the maintenance a GPU VM does not live through) or that it is at risk (AWS's rebalance
recommendation). The verdict goes into the node's status object as ``health`` (the controller's ``heal`` reads it),
written once each run at least (and each half interval while long checks run):

    {"state": "ok" | "faulty" | "interrupted" | "maintenance" | "gating", "faults": [{"code", "check", "evidence"}],
     "checked_at": ISO-8601 Z, "interval": s, "gate": {"level", "passed": true | false | null},
     "notice": null | {"cloud", "kind", "at"}, "drained": bool, "notice_error": null | "why it was not read",
     "drain_error": null | "why a drain was not confirmed"}

Where the node is a Slurm node it is drained at once, the fault codes (or GF-SPOT-NOTICE, GF-MAINTENANCE-NOTICE,
GF-GATE) as the reason; a node a person drained is never resumed. A rebalance recommendation is recorded, nothing
more ("ok"). Until it passes its boot gate (the quick checks, with ``dcgmi diag -r N`` for dcgm1-3) the node is
"gating" and stays drained. Every ``health.active_every`` seconds, on an idle node only, it runs the active checks
(DCGM's diagnostic at level 2, the single-node all-reduce; see ACTIVE). Each verdict is also written for Prometheus
(``gpufleet.prom`` in node_exporter's textfile directory: what the node is and costs, as its pool's document says,
its health and last fault). It ships in the state tree (user data has no room for it: AWS takes 16 KB) and the agent
copies it beside itself; it runs under its own lock, so a configuration's run (Salt, minutes) never holds it up.
"""

import contextlib
import datetime as dt
import email.utils
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

if __package__:  # in gpufleet's package (its tests)
    from . import node_agent as agent
else:  # on the node: beside the agent in /opt/gpufleet
    import node_agent as agent

HEALTH = "health.json"  # under STATE_DIR: the pool's health settings, as the last configuration's run read them
GATE = "gate.json"  # under STATE_DIR: the boot gate's level and verdict; once passed, for the node's life
GATE_DCGM = {"quick": 0, "dcgm1": 1, "dcgm2": 2, "dcgm3": 3}  # the gate's DCGM diagnostic level (spec.Health.gate)
MARK = "gpufleet:"  # a drain reason's prefix: what gpufleet drained (salt/slurm/files/gpufleet-slurm-health's)
# the drain reason README (health) tells a person to give an idle node of an elastic pool back with: heal's scale-down
# removes only nodes drained for a reason starting with MARK, never a person's other drains
RELEASE = f"{MARK} release"
# the drain reason of an idle node of an elastic pool `heal` gives back (its slot says "release": node_agent.RELEASED):
# drained by this watch, removed by heal once Slurm shows it drained with no job, resumed if heal takes the word back
SCALE_DOWN = f"{MARK} GF-SCALE-DOWN"
# the drain reasons of a node on its way out (heal gives it back, or a person did): it runs no active check nor
# benchmark, and heal removes it, never replaces it
GIVEN_BACK = (SCALE_DOWN, RELEASE)
# drains only the watch ends: a spot notice's never (the VM is going), the gate's by a passing gate alone, a
# maintenance notice's once the notice is gone (the VM came back), the active checks' by their passing run
KEPT = (f"{MARK} GF-SPOT-NOTICE", f"{MARK} GF-GATE", f"{MARK} GF-MAINTENANCE-NOTICE", f"{MARK} GF-ACTIVE")
REASON_MAX = 200  # gpufleet-slurm-health's cut: `scontrol show node` stays readable
# the notice is read this often all along a run: GCP and Azure give 30 s, AWS two minutes and asks that its notice
# be checked every 5 s (its "Spot Instance interruption notices" page)
NOTICE_POLL_S = 5
HUNG = "watch-hung.json"  # under STATE_DIR: the tools an earlier watch's checks left stuck
# under STATE_DIR: the InfiniBand port counters the last checks read; the next judge their growth (a link that went
# down between two runs fails: nodecheck.checks._ib_counters)
IB_COUNTERS = "ib-counters.json"
# The active checks (health.active_every; the expectations they add come in health.json's active_expect: DCGM's
# diagnostic at level 2, the single-node all-reduce) load the GPUs, so they run only on an idle node, from the watch
# (it has the node's Slurm view and runs as root on the node). Where Slurm runs, "idle" is Slurm's word, held by a
# reservation of this node made for the run: without flags, slurmctld refuses one whose nodes run a job, at once
# ("Requested nodes are busy", ESLURM_NODES_BUSY: _job_overlap in src/slurmctld/reservation.c, SchedMD/slurm
# 22.05.8, read 2026-11-27), and keeps new jobs off the node while it stands; MAINT is not used: it lets a
# reservation overlap another (_resv_overlap returns early for it), and the node may be reserved for someone.
# Without Slurm, no work is known where nvidia-smi lists no compute process on the node's GPUs.
ACTIVE = "active.json"  # under STATE_DIR: {"at": when the active checks last ran or were due, "faults", "skipped"}
ACTIVE_S = 1800  # their run: DCGM level 2 (600 s at most: nodecheck.checks.dcgm) and the all-reduce (600 s)
ACTIVE_RETRY_S = 3600  # failed ones run again after this (the node drained for them: no job on it)
ACTIVE_MARK = KEPT[3]  # the drain reason's start for their faults (a passing health check leaves it)
RESERVATION = "gpufleet-active-{node}"
# State flags that say what kind of node it is, not what it is doing: a cloud slot (State=CLOUD in slurm.conf,
# gpufleet.configure.slurm SLOT_STATE) is IDLE+CLOUD when idle and IDLE+CLOUD+DRAIN when drained (scontrol show node,
# Slurm 22.05.8 on the test rack, 2026-11-27); any other flag (COMPLETING, NOT_RESPONDING, MAINT, RESERVED, POWER...,
# REBOOT...) keeps the active checks off
KIND_FLAGS = frozenset({"CLOUD"})
KILL_WAIT_S = 1.0  # how long a killed process group is given to go; what is left of it is stuck
INTERPRETERS = ("python", "python3", "sh", "bash", "env")  # a script's name is its first argument
# gpufleet's own metrics (README, "Monitoring"), for node_exporter's textfile collector: it reads every *.prom file of
# the directory its --collector.textfile.directory names, in the text exposition format, without timestamps; a file is
# written whole, a temporary one renamed over it in the same directory (node_exporter's README, "Textfile Collector",
# and collector/textfile.go at v1.5.0, read 2026-11-27). Names as gpufleet.monitoring.names.NODE; node_exporter (user
# prometheus on Debian) must read it. A node without that directory (no monitoring formula) gets no file.
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
TEXTFILE = "gpufleet.prom"
STATES = ("ok", "gating", "faulty", "interrupted", "maintenance")  # gpufleet_node_health's, one-hot
LAST_FAULT = "last-fault.json"  # under STATE_DIR: the last fault the watch saw, kept once the node is ok again
# `gpufleet bench CLUSTER` (nodes/cloud/bench.py): its request in the pool's prefix (the operator's to write, the node's
# to read), answered once (BENCH_DONE, under STATE_DIR: the last request answered) into the node's status as "bench"
BENCH_REQUEST = "pools/{pool}/bench.json"
BENCH_DONE = "bench.json"
# under STATE_DIR: the request this node first saw, and when by its own clock: a request is waited for ``wait_s`` from
# when it was written, timed here from its first sight (the operator's clock is never compared with the node's)
BENCH_SEEN = "bench-seen.json"
NO_TORCH = 3  # train_steps.py's exit where its Python has no torch (gpufleet/nodebench/train_steps.py)


def one_line(text, limit=REASON_MAX):
    """``text`` as one printable line (what a node says is shown, never run)."""
    return " ".join("".join(c if c.isprintable() else " " for c in str(text)).split())[:limit]


def utc_z(moment):
    return moment.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def iso_z(text):
    """``text`` when it is an ISO-8601 UTC time with a Z (what IMDS says), else ValueError."""
    return utc_z(dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc))


# Each cloud's notices, as its documentation gives them (read 2026-11-27). A notice that takes the VM away (TAKES: the
# spot reclaim, and the maintenance a GPU VM cannot live through) drains the node and makes it "interrupted"; a
# rebalance recommendation is a risk, recorded and acted on by nobody (RISK).
# AWS, "Spot Instance interruption notices" (docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-
# notices.html): spot/instance-action, 404 until EC2 will act, then {"action": "terminate"|"stop"|"hibernate",
# "time": "2017-09-18T08:22:00Z"}. "EC2 instance rebalance recommendations" (.../rebalance-recommendations.html):
# events/recommendations/rebalance, 404 until then {"noticeTime": "2020-10-27T08:22:00Z"}: "a signal that notifies you
# when a Spot Instance is at elevated risk of interruption", sent "on a best effort basis"; the instance may run on,
# and AWS's own answer (Capacity Rebalancing) launches into a pool that is not at risk: the node keeps its work and heal
# does not replace it (an instance-action that follows drains it within NOTICE_POLL_S). "Scheduled events for your
# instances" (.../monitoring-instances-status-check_sched.html, "Instance metadata"): events/maintenance/scheduled, a
# JSON list of {"NotBefore": "21 Jan 2019 09:00:43 GMT", "Code": "system-reboot", "Description", "EventId",
# "NotAfter", "State": "active"}; Code is one of instance-reboot | system-reboot | system-maintenance |
# instance-retirement | instance-stop (API_InstanceStatusEvent); completed and canceled events are in .../history.
AWS_EVENT_CODES = ("instance-reboot", "system-reboot", "system-maintenance", "instance-retirement", "instance-stop")
AWS_EVENT_TIME = "%d %b %Y %H:%M:%S GMT"


def aws_notice(memo):
    said = agent.aws_imds("/latest/meta-data/spot/instance-action", missing=True)
    if said is not None:
        doc = json.loads(said)
        if doc.get("action") not in ("terminate", "stop", "hibernate"):
            raise ValueError(f"spot/instance-action says {one_line(said, 80)!r}")
        return {"cloud": "aws", "kind": "instance-action", "at": iso_z(doc.get("time"))}
    said = agent.aws_imds("/latest/meta-data/events/maintenance/scheduled", missing=True)
    events = []
    for ev in json.loads(said) if said is not None else ():
        if ev["State"] != "active":
            continue
        if ev["Code"] not in AWS_EVENT_CODES:
            raise ValueError(f"events/maintenance/scheduled: a Code {one_line(str(ev['Code']), 40)!r}")
        at = dt.datetime.strptime(ev["NotBefore"], AWS_EVENT_TIME).replace(tzinfo=dt.timezone.utc)
        events.append({"cloud": "aws", "kind": ev["Code"], "at": utc_z(at)})
    if events:
        return soonest(events)
    said = agent.aws_imds("/latest/meta-data/events/recommendations/rebalance", missing=True)
    if said is not None:
        iso_z(json.loads(said).get("noticeTime"))
        return {"cloud": "aws", "kind": "rebalance", "at": None}
    return None


# GCP, "Detect if a VM was preempted" (cloud.google.com/compute/docs/instances/create-use-preemptible): the metadata
# server's instance/preempted says TRUE once Compute Engine preempts the VM (about 30 s before it stops), else FALSE.
# "Query metadata server for maintenance event notices" (cloud.google.com/compute/docs/metadata/getting-live-migration-
# notice): instance/maintenance-event says NONE, MIGRATE_ON_HOST_MAINTENANCE (the VM live-migrates and stays) or
# TERMINATE_ON_HOST_MAINTENANCE (the VM is stopped: a VM with a GPU cannot live-migrate, its onHostMaintenance is
# TERMINATE); TensorFlow's failure handling reads it so (tensorflow/python/distribute/failure_handling/gce_util.py).
GCP_MAINTENANCE = {"NONE": False, "MIGRATE_ON_HOST_MAINTENANCE": False, "TERMINATE_ON_HOST_MAINTENANCE": True}


def gcp_metadata(item):
    status, _, body = agent.http("GET", agent.GCP_METADATA + item, {"Metadata-Flavor": "Google"}, timeout=2)
    said = body.decode(errors="replace").strip()
    if status != 200:
        raise agent.AgentError(f"{item}: HTTP {status} {one_line(said, 80)!r}")
    return said


def gcp_notice(memo):
    said = gcp_metadata("/instance/preempted")
    if said not in ("TRUE", "FALSE"):
        raise ValueError(f"instance/preempted: {one_line(said, 80)!r}")
    if said == "TRUE":
        return {"cloud": "gcp", "kind": "preempted", "at": None}
    said = gcp_metadata("/instance/maintenance-event")
    if said not in GCP_MAINTENANCE:
        raise ValueError(f"instance/maintenance-event: {one_line(said, 80)!r}")
    return {"cloud": "gcp", "kind": said, "at": None} if GCP_MAINTENANCE[said] else None


# Azure, "Scheduled Events for Linux VMs" (learn.microsoft.com/azure/virtual-machines/linux/scheduled-events):
# GET /metadata/scheduledevents?api-version=2020-07-01 (Metadata: true): {"DocumentIncarnation": n, "Events":
# [{"EventId", "EventType": "Freeze"|"Reboot"|"Redeploy"|"Preempt"|"Terminate", "ResourceType": "VirtualMachine",
# "Resources": [VM names], "EventStatus": "Scheduled"|"Started", "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT" (empty
# once started), ...}]}. Events reach every VM of an availability set or a scale set's placement group: one names
# this VM only when its name (compute/name) is among its Resources. A Spot eviction is Preempt, at least 30 s ahead;
# Terminate, Reboot and Redeploy take the VM away too (Freeze, a pause of seconds, does not). The first request "can
# take up to two minutes" (Scheduled Events is enabled by it): it gets AZURE_FIRST_CALL_S, later ones a few seconds.
AZURE_EVENTS_VERSION = "2020-07-01"
AZURE_TAKES = ("Preempt", "Terminate", "Reboot", "Redeploy")
AZURE_FIRST_CALL_S = 130
AZURE_CALL_S = 5


def azure_notice(memo):
    if "name" not in memo:  # the VM's name does not change: read once a run
        status, _, body = agent.http("GET", agent.AZURE_IMDS + "/instance/compute/name?api-version=2021-02-01"
                                     "&format=text", {"Metadata": "true"}, timeout=2)
        name = body.decode(errors="replace").strip()
        if status != 200 or not name:
            raise agent.AgentError(f"instance/compute/name: HTTP {status}")
        memo["name"] = name
    status, _, body = agent.http("GET", f"{agent.AZURE_IMDS}/scheduledevents?api-version={AZURE_EVENTS_VERSION}",
                                 {"Metadata": "true"}, timeout=AZURE_CALL_S if memo.get("events") else AZURE_FIRST_CALL_S)
    if status != 200:
        raise agent.AgentError(f"scheduledevents: HTTP {status} {one_line(body.decode(errors='replace'), 80)!r}")
    memo["events"] = True
    events = json.loads(body)["Events"]
    if not isinstance(events, list):
        raise ValueError("scheduledevents: Events is not a list")
    mine = [ev for ev in events if ev["EventType"] in AZURE_TAKES and isinstance(ev["Resources"], list)
            and memo["name"] in ev["Resources"]]
    return soonest([{"cloud": "azure", "kind": ev["EventType"], "at": utc_z(email.utils.parsedate_to_datetime(
        ev["NotBefore"])) if ev.get("NotBefore") else None} for ev in mine])


def soonest(notices):
    """The notice among several of one VM that acts first (None: none): the soonest (no time: now), a VM-gone one
    before a comes-back one at a tie. An instance may hold several events at once, a reboot weeks ahead listed before
    a stop due in minutes (DescribeInstanceStatus's Events list, API_InstanceStatusEvent; Azure's Events list; review
    rev51f finding 3); "at" is ISO 8601 UTC with a Z, which sorts as the time does."""
    return min(notices, key=lambda n: (n["at"] or "", n["kind"] in COMES_BACK), default=None)


NOTICES = {"aws": aws_notice, "gcp": gcp_notice, "azure": azure_notice}
SPOT = ("instance-action", "preempted", "Preempt")  # the spot reclaims: the VM does not come back
RISK = ("rebalance",)  # a risk alone: recorded, the node kept
# The notices whose VM comes back by itself (the same instance, after minutes): AWS's instance-reboot, system-reboot
# ("Rebooting events include a scheduled start and end time", DescribeInstanceStatus) and system-maintenance (network
# or power maintenance, the instance stays: "Scheduled events for your instances"); Azure's Reboot ("The Virtual
# Machine is scheduled for reboot (non-persistent memory is lost)") and Redeploy (moved to another host, the same VM:
# Scheduled Events for Linux VMs, EventType, read 2026-11-28). The node is drained for them and says "maintenance", a
# state heal does not replace (nodes.health: not broken); the watch resumes it once the notice is gone. The others
# (spot reclaims, instance-retirement, instance-stop, Azure Terminate, GCP's TERMINATE_ON_HOST_MAINTENANCE) take the
# VM for good: "interrupted".
COMES_BACK = ("instance-reboot", "system-reboot", "system-maintenance", "Reboot", "Redeploy")
# A notice with a start time acts only this long before it; until then it is recorded as a risk (the node "ok", its
# notice in the status), as a rebalance is. AWS schedules instance events days or weeks ahead (NotBefore, "the earliest
# scheduled start time", API_InstanceStatusEvent), and an event moved earlier must still start "at least 60 minutes
# from the current time" (.../UserGuide/reschedule-event.html, read 2026-11-28): an hour's lead always sees it, and
# draining a node a week ahead would keep it idle for that week. Azure's Reboot and Redeploy come 15 minutes ahead,
# spot notices 30 s to 2 minutes ahead, and a notice without a time (GCP's, a started Azure event) acts at once.
MAINTENANCE_LEAD_S = 3600


def read_notice(cloud, memo=None):
    """(the cloud's notice or None, why it could not be read or None): a notice that cannot be read is no notice."""
    try:
        return NOTICES[cloud]({} if memo is None else memo), None
    except (agent.AgentError, OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        return None, one_line(f"the cloud's notice could not be read: {e}")


def takes(notice):
    """The notice says the cloud takes the VM away, now or within MAINTENANCE_LEAD_S (not a risk alone, nor an event
    further ahead)."""
    if not notice or notice["kind"] in RISK:
        return False
    if not notice.get("at"):
        return True
    at = dt.datetime.strptime(notice["at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
    return (at - dt.datetime.now(dt.timezone.utc)).total_seconds() <= MAINTENANCE_LEAD_S


def fault(code, check, evidence):
    return {"code": code, "check": one_line(check, 80), "evidence": one_line(evidence)}


def started(pid):
    """A process's start time (``/proc/<pid>/stat`` field 22), None when it is gone or a zombie (dead)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
    return None if fields[0] in ("Z", "X") else fields[19]


def tool_name(pid):
    """What a process runs: its program's name, or its script's when the program is an interpreter."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [os.path.basename(a.decode(errors="replace")) for a in f.read().split(b"\0") if a]
    except OSError:
        return f"pid {pid}"
    names = [a for a in argv if not a.startswith("-")]
    return one_line(next((n for n in names if n not in INTERPRETERS), names[0] if names else f"pid {pid}"), 40)


def stuck(group):
    """The processes of a process group still alive a moment after it was killed: stuck in the kernel (a GPU that
    fell off the bus leaves nvidia-smi in the driver, where SIGKILL waits for it), as (pid, start time, name)."""
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
    deadline = time.monotonic() + KILL_WAIT_S
    while True:
        left = []
        for entry in filter(str.isdigit, os.listdir("/proc")):
            try:
                alive = os.getpgid(int(entry)) == group and started(entry)
            except OSError:
                continue
            if alive:
                left.append({"pid": int(entry), "started": alive, "tool": tool_name(entry)})
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def quick_checks(tree, expect, timeout, budget):
    """(the quick checks' report, the tools they left stuck): the verify bundle in a process group of its own,
    killed whole when it ends or overruns."""
    cmd = [sys.executable, os.path.join(tree, agent.VERIFY_BUNDLE), "--level", "quick",
           *(["--budget", f"{budget:g}"] if budget else [])]
    try:
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    except OSError as e:
        return {"verdict": "error", "error": f"the checks did not start: {e}"}, []
    try:
        out, err = p.communicate(json.dumps(expect), timeout=timeout)
    except subprocess.TimeoutExpired:
        out, err = "", f"the checks did not finish in {timeout:.0f} s"
    left = stuck(p.pid)
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    try:
        return json.loads(lines[-1]), left
    except (IndexError, ValueError):
        return {"verdict": "error", "error": (err.strip() or f"exit {p.poll()}")[-300:]}, left


def still_hung(record):
    """The tools an earlier watch left stuck that are still there (the same pid, started at the same time)."""
    hung = agent._read_json(record)
    return [h for h in hung if isinstance(h, dict) and started(int(h.get("pid", 0))) == h.get("started")] \
        if isinstance(hung, list) else []


def watch_faults(tree, expect, timeout, budget):
    """The faults the quick checks find with ``expect``, as the status names them (a node without a GPU is not
    judged on the checks it could not run: one rehearsing the GPU states). While a tool an earlier watch left
    stuck is there, the checks are not run again: each run would leave one more (gpufleet-slurm-health's rule)."""
    record = f"{agent.STATE_DIR}/{HUNG}"
    hung = still_hung(record)
    if hung:
        return [fault("GF-HEALTH-TIMEOUT", "health.timeout", ", ".join(f"{h['tool']} (pid {h['pid']})" for h in hung)
                      + " stuck since an earlier watch: not checked again until it ends")]
    counters = f"{agent.STATE_DIR}/{IB_COUNTERS}"
    last = agent._read_json(counters)
    report, left = quick_checks(tree, {**expect, "ib_counters": last} if isinstance(last, dict) else expect, timeout,
                                budget)
    if isinstance(report.get("ib_counters"), dict):
        agent.write_private(counters, json.dumps(report["ib_counters"]))
    if left:
        agent.write_private(record, json.dumps(left))
    elif os.path.exists(record):
        os.unlink(record)
    if report.get("verdict") == "error":
        return [fault("GF-TOOL-FAILED", "health.checks", report.get("error"))]
    found = [fault(f.get("code") or "GF-FAIL", f.get("check"), ": ".join(str(f[k]) for k in ("measured", "detail")
                                                                         if f.get(k)))
             for f in report.get("failures") or ()]
    # a node with GPUs (on its PCI bus, or counted by the checks themselves) is judged on what it could not check
    counted = any(c.get("check") == "gpu.count" and c.get("status") == "pass" for c in report.get("checks") or ()
                  if isinstance(c, dict))
    if report.get("verdict") == "incomplete" and (counted or agent.has_nvidia_gpu()):
        found += [fault("GF-TOOL-FAILED", c, "not checked") for c in report.get("unchecked") or ()]
    return found


def scontrol(*args):
    """(what scontrol printed or None, why it failed or None); (None, None) where Slurm is not here."""
    try:
        # a reason is kept as the operator typed its bytes (not always UTF-8): decoded with replacement, never fatal
        r = subprocess.run(["scontrol", *args], capture_output=True, encoding="utf-8", errors="replace", timeout=20)
    except FileNotFoundError:
        return None, None
    except (OSError, subprocess.SubprocessError) as e:
        return None, one_line(f"scontrol {args[0]}: {e}", 120)
    if r.returncode != 0:
        return None, one_line(f"scontrol {args[0]}: exit {r.returncode}: {r.stderr or r.stdout}", 120)
    return r.stdout, None


def slurm_name():
    """This node's Slurm name: its slot where it has one (the agent's SLURM_NAME: slurmd runs as it), else its short
    host name (facts(), gpufleet-slurm-health's); None where it is not one."""
    name = (agent._read(f"{agent.STATE_DIR}/{agent.SLURM_NAME}") or socket.gethostname()).strip().split(".")[0]
    return name if name and len(name) <= 63 and all(c.isalnum() or c in "-_" for c in name) else None


def node_state(shown):
    """(State, Reason less its " [user@time]") of a ``scontrol show node -o`` line."""
    head, _, reason = shown.strip().partition(" Reason=")
    state = dict(part.split("=", 1) for part in head.split() if "=" in part).get("State", "")
    return state, reason.rsplit(" [", 1)[0].strip()


def slurm_drain(reason, kept=KEPT[:1]):
    """This node in Slurm drained for ``reason``, or, for None, resumed when gpufleet drained it (for a fault, the
    gate or a maintenance notice that is gone); a node a person drained is left as it is, and so is one drained
    for a reason ``kept`` names. (True when it is drained
    for ``reason``, why a drain was not confirmed or None.) The node's Slurm name is slurm_name(); no Slurm here:
    (False, None)."""
    name = slurm_name()
    if name is None:
        return False, None
    shown, failed = scontrol("show", "node", name, "-o")
    if shown is None or "State=" not in shown:
        return False, (failed or "scontrol show node named no State") if reason and (failed or shown) else None
    state, now = node_state(shown)
    # a person's drain has a reason (scontrol refuses a drain without one: src/scontrol/update_node.c, 22.05.8); one
    # without is Slurm's loss of gpufleet's (a CLOUD node drained while powered down shows none once it registers, seen
    # with 22.05.8 on the test rack), and is taken for gpufleet's
    if "DRAIN" in state and now and not now.startswith(MARK):
        return False, None  # a person's
    if reason:
        if now == reason:
            return True, None
        _, failed = scontrol("update", f"NodeName={name}", "State=DRAIN", f"Reason={reason}")
        return failed is None, failed
    if "DRAIN" in state and not now.startswith(kept):
        scontrol("update", f"NodeName={name}", "State=RESUME")
    return False, None


def label(value):
    """A label value as the exposition format quotes it (backslash, double quote and line feed escaped)."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def exposition(node, health, last):
    """The node's metrics file: what it is and costs (``node``: its pool document's ``health.node``), its health
    state and its last fault (``last``: {"code", "check", "at"} or None). A figure the node was not given (a price
    the plan did not have) is left out, never written as 0."""
    families = []

    def family(name, samples):
        if samples:
            families.append(f"# TYPE {name} gauge\n" + "".join(f"{name}{s}\n" for s in samples))

    node = node if isinstance(node, dict) else {}
    info = {k: node.get(k) for k in ("instance_type", "provider", "gpu_model") if node.get(k)}
    family("gpufleet_node_info", ["{" + ",".join(f'{k}="{label(v)}"' for k, v in info.items()) + "} 1"] if info else [])
    for name, key in (("gpufleet_node_price_usd_per_hour", "usd_per_hour"), ("gpufleet_node_gpus", "gpus")):
        value = node.get(key)
        family(name, [f" {float(value)!r}"] if isinstance(value, (int, float)) and not isinstance(value, bool) else [])
    family("gpufleet_node_health", [f'{{state="{s}"}} {int(s == health["state"])}' for s in STATES])
    if last:
        family("gpufleet_node_last_fault_info", [f'{{code="{label(last["code"])}",check="{label(last["check"])}"}} 1'])
        family("gpufleet_node_last_fault_timestamp_seconds", [f" {float(last['at'])!r}"])
    return "".join(families)


def write_metrics(node, health):
    """The node's metrics file for node_exporter, each time the watch says its verdict (its age tells a watch that
    stopped); the last fault recorded when a new one shows."""
    if not os.path.isdir(TEXTFILE_DIR):
        return
    record = f"{agent.STATE_DIR}/{LAST_FAULT}"
    last = agent._read_json(record)
    if health["faults"] and (not isinstance(last, dict) or last.get("code") != health["faults"][0]["code"]):
        first = health["faults"][0]
        last = {"code": first["code"], "check": first["check"], "at": round(time.time())}
        agent.write_private(record, json.dumps(last))
    path = os.path.join(TEXTFILE_DIR, TEXTFILE)
    fd = os.open(f"{path}.{os.getpid()}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as f:
        os.fchmod(fd, 0o644)  # the watch's umask is 077: node_exporter reads it as another user
        f.write(exposition(node, health, last if isinstance(last, dict) else None))
    os.replace(f"{path}.{os.getpid()}", path)


def verdict(notice, gate, faults):
    """(the node's health state, the reason its Slurm node is drained for, None: none)."""
    if takes(notice):
        code = "GF-SPOT-NOTICE" if notice["kind"] in SPOT else "GF-MAINTENANCE-NOTICE"
        state = "maintenance" if notice["kind"] in COMES_BACK else "interrupted"
        return state, one_line(f"{MARK} {code} {notice['cloud']} {notice['kind']}"
                               + (f" at {notice['at']}" if notice["at"] else ""))
    codes = "; ".join(f"{f['code']} {f['check']}" for f in faults)
    if not gate["passed"]:
        return "gating", one_line(f"{MARK} GF-GATE {gate['level']} " + (codes or "not passed yet"))
    if any(f["check"].startswith("active.") for f in faults):  # only a passing active check ends it
        return "faulty", one_line(f"{ACTIVE_MARK} {codes}")
    return ("faulty", one_line(f"{MARK} {codes}")) if faults else ("ok", None)


def watch(cfg):
    """One run of the watch, under its own lock (a run that finds one under way stops)."""
    umask = os.umask(agent.AGENT_UMASK)
    try:
        agent.private_dir(agent.STATE_DIR)
        with open(f"{agent.STATE_DIR}/watch.lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return 0
            return _watch(cfg)
    finally:
        os.umask(umask)


class Run:
    """One run's word on the node: the checks' (the main thread) and the notice's (its own thread, every
    NOTICE_POLL_S from the run's start to its end, the checks running or not: GCP and Azure give 30 s, a check may
    take most of an interval and a dcgm2/3 gate an hour). A notice that takes the VM drains the node from the notice's
    thread at once, outside any lock: never behind a status write, which retries for minutes against a slow or
    throttled bucket (node_agent.RETRY_DELAYS) and waits on the agent's own write (status.lock). The status is written
    under the run's lock, by the checks' thread or by a writer thread of its own for the notice's word (the last word
    wins); while the checks run, the writer says the last word again each half interval (the reader takes a report
    three intervals old as unknown)."""

    def __init__(self, cfg, interval, gate, node=None):
        self.cfg, self.interval, self.gate, self.node = cfg, interval, gate, node
        last = (agent._read_json(f"{agent.STATE_DIR}/status.json") or {}).get("health") or {}
        self.faults = last.get("faults") if isinstance(last.get("faults"), list) else []  # until the checks say
        self.notice, self.unread, self.rc, self.said_at = None, None, 0, time.monotonic()
        self.acting = False  # the notice known takes the VM now (takes())
        self.checking = True  # the checks run: the writer says the last word again while they last
        self.lock = threading.Lock()  # held while the status is written
        self.mu = threading.Lock()  # held a moment, for the word itself: never across a write or a program
        self.drain_mu = threading.Lock()  # held across one slurm_drain (its scontrol calls), never across a write
        self.pending = False  # the notice's word is not written yet
        self.wake = threading.Event()  # the writer has something to do (or the run ends)
        self.read = threading.Event()  # the notice was read once (or could not be)
        self.done = threading.Event()

    def poll(self):
        memo = {}
        while True:
            notice, unread = read_notice(self.cfg["cloud"], memo)
            with self.mu:
                if unread:  # not read this time: the notice known stands (unread is not gone)
                    notice = self.notice
                acting = takes(notice)
                changed = notice != self.notice or acting != self.acting
                self.notice, self.unread, self.acting = notice, unread, acting
                due = self.checking and time.monotonic() - self.said_at >= self.interval / 2
            if changed and acting:  # the VM is going: drained now, whatever the status's write is doing
                with self.drain_mu:
                    slurm_drain(verdict(notice, self.gate, [])[1])
            if changed or due:
                with self.mu:
                    self.pending = True
                self.wake.set()
            self.read.set()
            if self.done.wait(NOTICE_POLL_S):
                return

    def writer(self):
        """Writes the notice's word when the notice's thread has one (the last one wins), until the run ends."""
        while True:
            self.wake.wait()
            self.wake.clear()
            with self.mu:
                pending, self.pending = self.pending, False
            if pending:
                with self.lock:
                    self.say(fresh_s=0)
            if self.done.is_set():
                return

    def checked(self, faults, gated):
        """The checks' word; ``gated``: they were the boot gate's (it passes when they found nothing)."""
        with self.lock:
            with self.mu:
                self.faults, self.checking = faults, False
            if gated:
                self.gate["passed"] = not faults
                agent.write_private(f"{agent.STATE_DIR}/{GATE}", json.dumps(self.gate))
            self.say(fresh_s=self.interval / 2)

    def say(self, fresh_s):
        with self.mu:
            notice, unread, faults = self.notice, self.unread, self.faults
        self.rc = say(self.cfg, self.interval, self.gate, notice, unread, faults, fresh_s, self.node, self.drain)
        self.said_at = time.monotonic()

    def drain(self, reason, kept):
        """slurm_drain for a word said from a snapshot, on the notice known when the drain is made: the notice's
        thread drains at once, outside the status's lock, so a snapshot taken before its drain would resume the
        node it had just drained for a maintenance notice (review rev51f finding 2). One drain at a time in the run;
        a notice that acts now decides, and the status's word that follows (the writer's) says it."""
        with self.drain_mu:
            with self.mu:
                notice = self.notice
            if takes(notice):
                reason = verdict(notice, self.gate, [])[1]
            return slurm_drain(reason, kept)


def _watch(cfg):
    began = time.monotonic()
    settings = agent._read_json(f"{agent.STATE_DIR}/{HEALTH}") or {}
    interval = settings.get("interval", 60)
    applied = agent._read_json(f"{agent.STATE_DIR}/applied.json") or {}
    gate = agent._read_json(f"{agent.STATE_DIR}/{GATE}") or {"level": settings.get("gate", "quick"), "passed": None}
    run = Run(cfg, interval, gate, settings.get("node"))
    poller = threading.Thread(target=run.poll, daemon=True)
    poller.start()
    writer = threading.Thread(target=run.writer, daemon=True)
    writer.start()
    run.read.wait(NOTICE_POLL_S)  # a notice already there: the VM is going, nothing to check
    faults, gated = [], False
    # configured once (the checks have their tools; a later configuration that failed does not stop the watch)
    if not takes(run.notice) and applied.get("tree") and (applied.get("ok") or gate["passed"]):
        expect, level = dict(settings.get("expect") or {}), GATE_DCGM.get(gate["level"], 0)
        if not gate["passed"] and level:  # the gate's DCGM diagnostic (level 3: half an hour)
            faults = watch_faults(applied["tree"], requiring_dcgm(expect, level), 3600, None)
        else:
            faults = watch_faults(applied["tree"], expect, interval * 0.8, interval * 0.6)
        gated = not gate["passed"]
        if gate["passed"]:
            faults += active_checks(applied["tree"], settings, faults, lambda: takes(run.notice))
    run.checked(faults, gated)
    if not takes(run.notice) and applied.get("tree") and gate["passed"]:
        with run.mu:  # the health is said again each half interval while the benchmark runs
            run.checking = True
        bench_on_request(cfg, one_line(f"its health checks found {len(faults)} fault(s)") if faults else None)
        with run.mu:
            run.checking = False
    # the notice is read until the next watch is due (the timer's, an interval after this one's start): the next run
    # must find this one's lock free
    while not takes(run.notice) and time.monotonic() + 2 * NOTICE_POLL_S < began + interval:
        time.sleep(min(NOTICE_POLL_S, max(0.0, began + interval - 2 * NOTICE_POLL_S - time.monotonic())))
    run.done.set()
    run.wake.set()
    writer.join()  # the notice's word under way (or waiting) is written first
    return run.rc


def requiring_dcgm(expect, level):
    """``expect`` with DCGM's diagnostic at ``level``, which the node must run: a gate or an active check that names it
    never passes without it (no dcgmi is "not checked", GF-TOOL-FAILED, and the node stays drained)."""
    required = [r for r in expect.get("required") or () if r != "dcgm.diag"]
    return {**expect, "dcgm_level": level, "required": [*required, "dcgm.diag"]}


def active_checks(tree, settings, passive, noticed):
    """The faults the active checks found and that stand (until they pass), running them when they are due, the
    node passed its passive checks, and it is idle (``idle``); what kept them from running is in ACTIVE."""
    every, record = settings.get("active_every") or 0, f"{agent.STATE_DIR}/{ACTIVE}"
    if not every:
        return []
    last = agent._read_json(record)
    if not isinstance(last, dict) or not isinstance(last.get("at"), (int, float)):
        # first seen (the node just passed its gate, checked as closely): the first run comes a period from now
        agent.write_private(record, json.dumps({"at": time.time(), "faults": []}))
        return []
    standing = [f for f in last.get("faults") or () if isinstance(f, dict)]
    if passive or noticed() or time.time() < last["at"] + (ACTIVE_RETRY_S if standing else every):
        return standing
    expect = {**(settings.get("expect") or {}), **(settings.get("active_expect") or {})}
    if expect.get("dcgm_required"):  # the pool installs DCGM (configure.slurm.active_expectations)
        expect = requiring_dcgm(expect, expect["dcgm_level"])
    with idle() as busy:
        if busy:
            agent.write_private(record, json.dumps({**last, "skipped": one_line(busy)}))
            return standing
        found = [{**f, "check": one_line(f"active.{f['check']}", 80)} for f in watch_faults(tree, expect, ACTIVE_S, None)]
    agent.write_private(record, json.dumps({"at": time.time(), "faults": found}))
    return found


@contextlib.contextmanager
def idle():
    """``with idle() as busy``: None while the node is held idle for the active checks, else why it is not. Where
    Slurm runs, a reservation of this node, made for the checks' run and deleted after it (it ends by itself
    should the watch die); without Slurm, the node's own word (no compute process on its GPUs)."""
    if given_back():  # its drain may be a fault's since (Slurm keeps one reason): heal's word is on the node
        yield "given back: heal removes it"
        return
    name = slurm_name()
    shown, failed = scontrol("show", "node", name, "-o") if name else (None, None)
    if shown is None and failed is None:  # no Slurm here
        yield no_compute_process()
        return
    if failed or "State=" not in shown:
        yield failed or "scontrol show node named no State"
        return
    state, reason = node_state(shown)
    # IDLE, or drained by gpufleet (its failed active checks run again) with no job on it; never a node given back
    flags = set(state.split("+")[1:]) - KIND_FLAGS
    if state.split("+")[0] != "IDLE" or flags - {"DRAIN"} or "DRAIN" in flags and reason and not reason.startswith(MARK):
        yield f"Slurm says {state}"
        return
    if "DRAIN" in flags and reason.startswith(GIVEN_BACK):
        yield f"given back ({reason}): heal removes it"
        return
    held = RESERVATION.format(node=name)
    scontrol("delete", f"ReservationName={held}")  # an earlier run's, should one be left
    _, failed = scontrol(*reservation(name))
    if failed:
        yield failed
        return
    try:
        yield None
    finally:
        scontrol("delete", f"ReservationName={held}")


def given_back():
    """Whether heal gives this node back: its slot says so, passed on by the agent (node_agent.released)."""
    return os.path.exists(f"{agent.STATE_DIR}/{agent.RELEASED}")


def reservation(name):
    """scontrol's arguments for the reservation that holds node ``name`` for its active checks (no flags: see
    RESERVATION's comment); it ends by itself a few minutes after the checks' longest run."""
    return ("create", "reservation", f"ReservationName={RESERVATION.format(node=name)}", f"Nodes={name}",
            "StartTime=now", f"Duration={ACTIVE_S // 60 + 5}", "Users=root")


def no_compute_process():
    """None when nvidia-smi lists no compute process on the node's GPUs, else why the node is not known idle."""
    try:
        r = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"], capture_output=True,
                           text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        return one_line(f"no work known: nvidia-smi: {e}", 120)
    if r.returncode != 0:
        return one_line(f"no work known: nvidia-smi exit {r.returncode}: {r.stderr or r.stdout}", 120)
    pids = r.stdout.split()
    return f"{len(pids)} compute process(es) on the GPUs" if pids else None


def bench_on_request(cfg, refused=None):
    """The benchmark `gpufleet bench CLUSTER` asked for (BENCH_REQUEST: its id, the node script and its plan, the Python
    and torchrun's arguments, how long it is waited for), once per request while it is waited for (BENCH_SEEN: by
    this node's clock), on an idle node only: under a Slurm reservation of the node (``idle``, as for the active
    checks; a node with a job is skipped and says so), never on a node whose checks found faults (``refused``). Its
    word goes into the node's status: "running", then the answer (or why there is none: "skipped", expired too)."""
    store, nid, pool = agent.STORES[cfg["cloud"]](cfg), agent.node_id(cfg), cfg["pool"]
    try:
        req = json.loads(store.get(BENCH_REQUEST.format(pool=pool)))
    except agent.NotThere:
        return
    except (agent.AgentError, OSError, ValueError) as e:  # the next run asks again
        print(f"the bench request could not be read ({e})", flush=True)
        return
    done = agent._read_json(f"{agent.STATE_DIR}/{BENCH_DONE}") or {}
    if not isinstance(req, dict) or not isinstance(req.get("request"), str) or req["request"] == done.get("request"):
        return
    seen = agent._read_json(f"{agent.STATE_DIR}/{BENCH_SEEN}") or {}
    if seen.get("request") != req["request"] or not isinstance(seen.get("at"), (int, float)):
        seen = {"request": req["request"], "at": time.time()}
        agent.write_private(f"{agent.STATE_DIR}/{BENCH_SEEN}", json.dumps(seen))
    wait_s = req.get("wait_s")
    waited = time.time() - seen["at"]

    def tell(**word):
        status = agent._read_json(f"{agent.STATE_DIR}/status.json") or {"node_id": nid, "cluster": cfg["cluster"],
                                                                          "pool": pool}
        agent.put_status(store, pool, nid, {**status, "bench": {"request": req["request"], **word}})

    try:
        if isinstance(wait_s, (int, float)) and waited > wait_s:  # nobody waits for it any more: said, not run
            word = {"state": "skipped", "error": f"expired: first seen {waited:.0f} s ago, waited for {wait_s:.0f} s"}
        elif refused:
            word = {"state": "skipped", "error": refused}
        else:
            tell(state="running")
            with idle() as busy:
                word = {"state": "skipped", "error": busy} if busy else run_bench(req)
        tell(**word)
    except (agent.AgentError, OSError) as e:  # not recorded as answered: the next run tries again
        print(f"the bench answer could not be written ({e})", flush=True)
        return
    agent.write_private(f"{agent.STATE_DIR}/{BENCH_DONE}", json.dumps({"request": req["request"]}))
    print(f"bench {req['request']}: {word['state']}" + (f" ({word['error']})" if word.get("error") else ""), flush=True)


# Who runs the benchmark when the watch is root: never root. It is the user's framework: torchrun's store (which
# the node script no longer uses on one node) listened on every interface with no authentication (torch 2.13
# TCPStore binds the wildcard address whatever --master-addr says; /proc/net/tcp6 `::` here, 2026-11-27), and a job
# user can plant modules in a torch.compile cache in the shared temp folder (torch/_inductor/runtime/
# cache_dir_utils.py default_cache_dir: gettempdir()/torchinductor_<user>, no owner check). `nobody` has no
# supplementary groups: the NVIDIA driver makes /dev/nvidia* 0666 by default (NVreg_DeviceFileMode, nvidia-modprobe),
# so it reaches the GPUs; a node whose device nodes are not world-usable says so in the benchmark's own error.
BENCH_USER = "nobody"
# where the child keeps what it writes, all inside its private folder (torch 2.13 read 2026-11-27: inductor's
# cache_dir_utils TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR; torch.hub and cpp_extension under XDG_CACHE_HOME;
# tempfile under TMPDIR; CUDA's JIT cache and Triton's ~/.triton under HOME), in a sub-folder whose name no import
# can take for a package (the script's own folder is first on sys.path: a `triton` folder there hides Triton)
BENCH_HOME = {"HOME": "run-home", "TMPDIR": "run-home/tmp", "XDG_CACHE_HOME": "run-home/.cache",
              "TORCHINDUCTOR_CACHE_DIR": "run-home/torchinductor", "TRITON_CACHE_DIR": "run-home/triton-cache"}
BENCH_ENV_KEPT = ("PATH", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES")  # the rest of the watch's environment stays root's


def bench_identity(folder, files):
    """subprocess's arguments that run the benchmark in ``folder`` (0700, its ``files`` in it) as BENCH_USER, with
    its caches and temporary files there: the folder and files become BENCH_USER's. As itself when the watch is
    not root (it is already unprivileged)."""
    env = {k: os.environ[k] for k in BENCH_ENV_KEPT if k in os.environ}
    for name, sub in BENCH_HOME.items():
        env[name] = os.path.join(folder, sub)
        os.makedirs(env[name], mode=0o700, exist_ok=True)
    if os.geteuid() != 0:
        return {"env": env}
    import pwd  # the node's account database (not on every platform the CLI imports this module on)

    user = pwd.getpwnam(BENCH_USER)
    for path in (folder, *files, *(env[name] for name in BENCH_HOME)):
        os.chown(path, user.pw_uid, user.pw_gid)
    return {"env": env, "user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


def run_bench(req):
    """The node script of ``req`` run on its plan with its Python (under torchrun where it names its arguments), in a
    folder of its own gone after the run; its answer, or why there is none. A run past its time is killed whole (its
    process group: torchrun's workers with it)."""
    python, args, probe = req.get("python"), req.get("args") or [], req.get("probe")
    if not isinstance(python, str) or not isinstance(args, list) or not all(isinstance(a, str) for a in args) \
            or not isinstance(req.get("script"), str) or not isinstance(req.get("plan"), dict):
        return {"state": "failed", "error": "the request is not of its format: not run"}
    timeout = min(float(req.get("timeout_s") or ACTIVE_S), ACTIVE_S)  # within the reservation's span
    with tempfile.TemporaryDirectory(prefix="gpufleet-cloud-bench.") as folder:  # 0700: the benchmark's alone; not the
        # rack bench's gpufleet-bench.* (nodes/racks/bench.py), whose test counts those it leaves
        script, plan = os.path.join(folder, "train_steps.py"), os.path.join(folder, "plan.json")
        agent.write_private(script, req["script"])
        agent.write_private(plan, json.dumps(req["plan"]))
        try:
            who = bench_identity(folder, (script, plan))
            if probe and subprocess.run([python, "-c", f"import {probe}"], capture_output=True, timeout=120,
                                        cwd=folder, **who).returncode != 0:
                return {"state": "failed", "rc": NO_TORCH, "error": f"no PyTorch with torchrun ({probe}) in {python}"}
            proc = subprocess.Popen([python, *args, script, plan], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, start_new_session=True, cwd=folder, **who)
        except (OSError, KeyError, subprocess.SubprocessError) as e:  # KeyError: no BENCH_USER on the node
            return {"state": "failed", "error": one_line(f"{python} could not be run: {e}", 300)}
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return {"state": "failed", "error": f"the benchmark did not end within {timeout:.0f} s: killed"}
    lines = out.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        answer = None
    if proc.returncode == NO_TORCH:
        return {"state": "failed", "rc": NO_TORCH, "error": f"no PyTorch in {python}"}
    if proc.returncode != 0 or not isinstance(answer, dict) or "results" not in answer:
        return {"state": "failed", "rc": proc.returncode,
                "error": one_line(f"exit {proc.returncode} with no results: {(err or out).strip()[-300:]}", 400)}
    return {"state": "answered", "rc": 0, "answer": answer}


def say(cfg, interval, gate, notice, unread, faults, fresh_s, node=None, drain=slurm_drain):
    """The verdict acted on (``drain``: the Slurm node drained or resumed), written into the node's metrics file
    (``node``: what the node is and costs) and into the status, unless the status says it already, written less than
    ``fresh_s`` ago; the run's exit status (0: ok)."""
    state, reason = verdict(notice, gate, faults)
    if reason is None and given_back():
        reason = SCALE_DOWN  # healthy, and given back by heal: drained (a job on it ends first) for its removal
    # a maintenance notice's drain ends once the notice was read and is gone, not when it could not be read; a
    # person's `gpufleet: release` is never ended here (heal removes the node)
    drained, failed = drain(reason, (KEPT[:1] if unread is None else KEPT[::2]) + (RELEASE,))
    health = {"state": state, "faults": faults, "checked_at": utc_z(dt.datetime.now(dt.timezone.utc)),
              "interval": interval, "gate": gate, "notice": notice, "drained": drained, "notice_error": unread,
              "drain_error": one_line(f"the drain ({reason}) was not confirmed: {failed}") if failed else None}
    try:
        write_metrics(node, health)
    except OSError as e:  # the status still says the verdict; the file's age makes its alert
        print(f"the watch could not write its metrics ({e})", flush=True)
    said = (agent._read_json(f"{agent.STATE_DIR}/status.json") or {}).get("health")
    if said_lately(said, health, fresh_s):
        return 0 if state == "ok" else 1
    try:
        nid = agent.node_id(cfg)
        # into the status as it is; none yet (the first configuration is under way): the watch's word alone, with
        # no "ok" (`up` waits on)
        agent.put_status(agent.STORES[cfg["cloud"]](cfg), cfg["pool"], nid,
                         {"node_id": nid, "cluster": cfg["cluster"], "pool": cfg["pool"]}, health=health)
    except (agent.AgentError, OSError) as e:
        print(f"the watch could not write its status ({e}): the next run writes it", flush=True)
        return 1
    if state != (said or {}).get("state") or failed:
        print(f"{health['checked_at']} health {state}" + (f": {reason}" if reason else "")
              + (f" ({unread})" if unread else "") + (f" ({health['drain_error']})" if failed else ""), flush=True)
    return 0 if state == "ok" else 1


def said_lately(old, new, fresh_s):
    """The status says ``new`` already, written less than ``fresh_s`` ago (a write per run at least: the reader takes
    a report older than three intervals as unknown, and a run's write may come late, after its checks and the
    store's retries)."""
    try:
        age = time.time() - dt.datetime.strptime(old["checked_at"], "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=dt.timezone.utc).timestamp()
    except (TypeError, KeyError, ValueError):
        return False
    same = {k: v for k, v in old.items() if k != "checked_at"} == {k: v for k, v in new.items() if k != "checked_at"}
    return same and 0 <= age < fresh_s


def main(argv):
    with open(argv[1] if len(argv) > 1 else agent.CONFIG) as f:
        return watch(json.load(f))


if __name__ == "__main__":
    sys.exit(main(sys.argv))

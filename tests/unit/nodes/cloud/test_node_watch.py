"""The node's watch (clouds/node_watch.py): the quick checks on stand-in GPU tools replaying a fault, each
cloud's spot/preemption notice replayed by a metadata server speaking its documented format, Slurm drained
through a stand-in scontrol, the verdict in the status object in moto's S3 (the agent's real SigV4 path)."""

import datetime as dt
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpufleet.clouds import bootstrap, node_agent, node_watch
from gpufleet.configure.slurm import health_expectations

from agent_kit import metadata_rules_elsewhere  # noqa: F401 (an autouse fixture)
from conftest import ROOT

EXPECT = {"gpus": {"count": 1, "model": "L4", "family": "L4", "memory_gb": 24, "pcie_gen": 4}, "driver": "570",
          "fatal_xids": [79], "required": ["gpu.count", "health.xid"]}
# scontrol as slurmctld answers it for this node (state kept in a file), each call logged
SCONTROL = """#!{python}
import json, os, sys
here = os.path.dirname(os.path.realpath(sys.argv[0]))
with open(os.path.join(here, "scontrol.log"), "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
state = os.path.join(here, "slurm-node.json")
node = json.load(open(state)) if os.path.exists(state) else {{"state": "IDLE", "reason": ""}}
if sys.argv[1:3] == ["show", "node"]:
    print(f"NodeName={{sys.argv[3]}} Arch=x86_64 State={{node['state']}} Partitions=gpu"
          + (f" Reason={{node['reason']}} [root@2026-11-27T15:00:00]" if node["reason"] else ""))
elif sys.argv[1] == "update":
    args = dict(a.split("=", 1) for a in sys.argv[2:])
    kept = [f for f in node["state"].split("+")[1:] if f != "DRAIN"]  # a cloud slot stays CLOUD, drained or not
    if args["State"] == "DRAIN":
        node = {{"state": "+".join(["IDLE", *kept, "DRAIN"]), "reason": args["Reason"]}}
    elif args["State"] == "RESUME":
        node = {{"state": "+".join(["IDLE", *kept]), "reason": ""}}
    json.dump(node, open(state, "w"))
elif sys.argv[1:3] == ["create", "reservation"] and (node.get("job") or node["state"].startswith(("ALLOCATED", "MIXED"))):
    # slurmctld's answer to a reservation of a node that runs a job (src/slurmctld/reservation.c, _job_overlap)
    print("Error creating the reservation: Requested nodes are busy", file=sys.stderr)
    sys.exit(1)
"""


class Metadata:
    """A cloud's metadata service replaying ``routes`` (path with query -> (HTTP status, body)), asking what the
    real one asks: an IMDSv2 session token (AWS), Metadata-Flavor: Google (GCP), Metadata: true (Azure)."""

    def __init__(self):
        self.routes: dict[str, tuple[int, bytes] | list[tuple[int, bytes]]] = {}
        meta = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _answer(self, code, body):
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_PUT(self):
                if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                    return self._answer(200, b"session-token")
                self._answer(400, b"")

            def do_GET(self):
                wants = {"/latest/": ("X-aws-ec2-metadata-token", "session-token", 401),
                         "/computeMetadata/": ("Metadata-Flavor", "Google", 403),
                         "/metadata/": ("Metadata", "true", 400)}
                for prefix, (header, value, refused) in wants.items():
                    if self.path.startswith(prefix) and self.headers.get(header) != value:
                        return self._answer(refused, b"")
                said = meta.routes.get(self.path, (404, b"Not Found"))
                if isinstance(said, list):  # answers in turn, the last repeated
                    said = said.pop(0) if len(said) > 1 else said[0]
                if len(said) == 3:  # (status, body, seconds it takes)
                    time.sleep(said[2])
                self._answer(*said[:2])

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


AWS_ACTION = "/latest/meta-data/spot/instance-action"
AWS_REBALANCE = "/latest/meta-data/events/recommendations/rebalance"
AWS_SCHEDULED = "/latest/meta-data/events/maintenance/scheduled"
GCP_PREEMPTED = "/computeMetadata/v1/instance/preempted"
GCP_MAINTENANCE = "/computeMetadata/v1/instance/maintenance-event"
AZURE_NAME = "/metadata/instance/compute/name?api-version=2021-02-01&format=text"
AZURE_EVENTS = "/metadata/scheduledevents?api-version=2020-07-01"


def azure_events(*events) -> bytes:
    """A Scheduled Events document as the Azure docs show it (Linux VMs page, read 2026-11-27)."""
    return json.dumps({"DocumentIncarnation": 2, "Events": [
        {"EventId": "C7061BAC-AFDC-4513-B24B-AA5F13A16123", "EventStatus": "Scheduled", "EventType": kind,
         "ResourceType": "VirtualMachine", "Resources": resources, "NotBefore": not_before,
         "Description": "", "EventSource": "Platform", "DurationInSeconds": -1}
        for kind, resources, not_before in events]}).encode()


@pytest.fixture
def node(aws, tmp_path, monkeypatch):
    """A configured GPU node (stand-in tools replaying an L4, the verify bundle in its tree, its gate passed), its
    cluster's bucket in moto, its cloud's metadata service, and a Slurm controller that knows it."""
    import boto3

    from gpufleet.verify import bundle
    from tests.verify_standin import standins

    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="gpufleet-w-1")
    # the node's instance role, as EC2 gives it (the session named by the instance id): its status key is its own
    role = boto3.client("iam", region_name="us-east-1").create_role(RoleName="w-nodes", AssumeRolePolicyDocument="{}")
    creds = boto3.client("sts", region_name="us-east-1").assume_role(
        RoleArn=role["Role"]["Arn"], RoleSessionName="i-0watch1")["Credentials"]
    state = tmp_path / "node-state"
    state.mkdir()
    monkeypatch.setattr(node_agent, "STATE_DIR", str(state))
    monkeypatch.setattr(node_watch, "TEXTFILE_DIR", str(tmp_path / "node-exporter"))  # not made: no metrics file
    tree = tmp_path / "tree"
    (tree / "_gpufleet").mkdir(parents=True)
    (tree / node_agent.VERIFY_BUNDLE).write_bytes(bundle.build()[0])
    (state / "applied.json").write_text(json.dumps({"generation": "g1", "ok": True, "tree": str(tree)}))
    (state / "health.json").write_text(json.dumps({"gate": "quick", "interval": 60,
                                                   "expect": health_expectations(EXPECT)}))
    (state / "gate.json").write_text(json.dumps({"level": "quick", "passed": True}))
    meta = Metadata()
    monkeypatch.setattr(node_agent, "AWS_IMDS", meta.url)
    monkeypatch.setattr(node_agent, "GCP_METADATA", meta.url + "/computeMetadata/v1")
    monkeypatch.setattr(node_agent, "AZURE_IMDS", meta.url + "/metadata")
    bin_dir = standins(tmp_path / "tools", ROOT / "tests" / "data" / "verify" / "l4x1")
    (bin_dir / "scontrol").write_text(SCONTROL.format(python=sys.executable))
    (bin_dir / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("GPUFLEET_NODE_ID", "i-0watch1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", creds["AccessKeyId"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", creds["SecretAccessKey"])
    monkeypatch.setenv("AWS_SESSION_TOKEN", creds["SessionToken"])
    cfg = bootstrap.config("aws", cluster="w", pool="gpu", bucket="gpufleet-w-1", region="us-east-1", endpoint=aws.url)
    # one watch, no reading of the notice between watches (its test below reads it so)
    monkeypatch.setattr(node_watch, "NOTICE_POLL_S", 60)
    # every cloud's node here writes to moto's S3 (the agent's own S3 client): what is under test is the notice
    for cloud in ("gcp", "azure"):
        monkeypatch.setitem(node_agent.STORES, cloud, node_agent.S3)
    return {"cfg": cfg, "meta": meta, "bin": bin_dir, "captures": tmp_path / "tools" / "captures", "state": state}


def _health(n) -> dict:
    store = node_agent.S3(n["cfg"])
    (key,) = [k for k, _ in _list(n)]
    return json.loads(store.get(key))["health"]


def _list(n):
    import boto3

    found = boto3.client("s3", region_name="us-east-1").list_objects_v2(Bucket="gpufleet-w-1", Prefix="status/gpu/")
    return [(o["Key"], o["Size"]) for o in found.get("Contents", [])]


def _updates(n) -> list[list[str]]:
    log = n["bin"] / "scontrol.log"
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return [c for c in calls if c[0] == "update"]


def _watch(n, cloud="aws") -> int:
    return node_watch.watch({**n["cfg"], "cloud": cloud})


def test_a_fatal_xid_makes_the_node_faulty_and_drains_it_then_a_clean_watch_resumes_it(node):
    n = node
    (n["captures"] / "journal.txt").write_text((ROOT / "tests" / "data" / "verify" / "journal-xid79.txt").read_text())
    assert _watch(n) == 1
    h = _health(n)
    assert h["state"] == "faulty" and h["drained"] is True and h["notice"] is None and h["notice_error"] is None
    assert [f["code"] for f in h["faults"]] == ["GF-XID-FATAL"] and h["faults"][0]["check"] == "health.xid"
    assert h["interval"] == 60 and h["gate"] == {"level": "quick", "passed": True} and h["checked_at"].endswith("Z")
    hostname = node_watch.socket.gethostname().split(".")[0]
    assert _updates(n) == [["update", f"NodeName={hostname}", "State=DRAIN", "Reason=gpufleet: GF-XID-FATAL health.xid"]]
    assert _watch(n) == 1 and len(_updates(n)) == 1  # drained for it already: slurmctld is not told again
    # the GPU is reset (the XID gone from the log): the next watch finds it clean and resumes what it drained
    (n["captures"] / "journal.txt").write_text("")
    assert _watch(n) == 0
    assert _health(n)["state"] == "ok" and _updates(n)[-1][2] == "State=RESUME"


def test_a_node_with_a_slurm_slot_is_drained_by_its_slot_not_its_host_name(node):
    """Issue 51 (review finding 2): a cloud compute node's Slurm name is its slot (slurmd -N gpu-1: a replacement's
    host name is in no slurm.conf), which its agent leaves in SLURM_NAME; the watch drains that node, not one named
    after the host."""
    n = node
    with open(f"{node_watch.agent.STATE_DIR}/{node_watch.agent.SLURM_NAME}", "w") as f:
        f.write("gpu-1")
    (n["captures"] / "journal.txt").write_text((ROOT / "tests" / "data" / "verify" / "journal-xid79.txt").read_text())
    assert _watch(n) == 1
    assert _updates(n) == [["update", "NodeName=gpu-1", "State=DRAIN", "Reason=gpufleet: GF-XID-FATAL health.xid"]]


def test_a_node_a_person_drained_is_never_resumed(node):
    n = node
    (n["bin"] / "slurm-node.json").write_text(json.dumps({"state": "IDLE+DRAIN", "reason": "bad fan, ticket 42"}))
    assert _watch(n) == 0
    assert _health(n)["state"] == "ok" and _updates(n) == []


def test_a_drain_whose_reason_slurm_lost_is_resumed_once_the_node_is_healthy(node):
    """Seen on the test rack (Slurm 22.05.8): a CLOUD slot drained while powered down showed IDLE+CLOUD+DRAIN and no
    Reason once its node registered, and the watch took it for a person's drain: the node stayed drained for good. A
    person's drain has a reason (scontrol refuses one without); one without is gpufleet's, resumed when healthy."""
    n = node
    (n["bin"] / "slurm-node.json").write_text(json.dumps({"state": "IDLE+CLOUD+DRAIN", "reason": ""}))
    assert _watch(n) == 0
    assert _health(n)["state"] == "ok" and [u[2] for u in _updates(n)] == ["State=RESUME"]


def test_without_slurm_a_faulty_node_says_so_in_its_status_alone(node):
    n = node
    (n["bin"] / "scontrol").unlink()
    (n["captures"] / "journal.txt").write_text((ROOT / "tests" / "data" / "verify" / "journal-xid79.txt").read_text())
    assert _watch(n) == 1
    h = _health(n)
    assert h["state"] == "faulty" and h["drained"] is False and h["faults"][0]["code"] == "GF-XID-FATAL"


# AWS's scheduled events in instance metadata as "Scheduled events for your instances" shows them ("Instance
# metadata", read 2026-11-27)
def aws_scheduled(code, state="active") -> bytes:
    return json.dumps([{"NotBefore": "27 Nov 2026 15:30:00 GMT", "Code": code, "Description": "scheduled reboot",
                        "EventId": "instance-event-0d59937288b749b32", "NotAfter": "27 Nov 2026 15:47:00 GMT",
                        "State": state}]).encode()


# each cloud's notice as its documentation shows it (the sources are named in clouds/node_watch.py): the spot reclaims
# and the maintenance a GPU VM does not live through
NOTICES = {
    "aws instance-action": ("aws", {AWS_ACTION: (200, b'{"action": "terminate", "time": "2026-11-27T15:02:00Z"}')},
                            {"cloud": "aws", "kind": "instance-action", "at": "2026-11-27T15:02:00Z"},
                            "gpufleet: GF-SPOT-NOTICE aws instance-action at 2026-11-27T15:02:00Z"),
    "gcp preempted": ("gcp", {GCP_PREEMPTED: (200, b"TRUE")}, {"cloud": "gcp", "kind": "preempted", "at": None},
                      "gpufleet: GF-SPOT-NOTICE gcp preempted"),
    "azure Preempt": ("azure", {AZURE_NAME: (200, b"gpu_3"), AZURE_EVENTS: (200, azure_events(
        ("Freeze", ["gpu_3"], "Fri, 27 Nov 2026 15:10:00 GMT"),
        ("Preempt", ["gpu_1", "gpu_3"], "Fri, 27 Nov 2026 15:00:30 GMT")))},
                      {"cloud": "azure", "kind": "Preempt", "at": "2026-11-27T15:00:30Z"},
                      "gpufleet: GF-SPOT-NOTICE azure Preempt at 2026-11-27T15:00:30Z"),
    "aws instance-retirement": ("aws", {AWS_SCHEDULED: (200, aws_scheduled("instance-retirement"))},
                                {"cloud": "aws", "kind": "instance-retirement", "at": "2026-11-27T15:30:00Z"},
                                "gpufleet: GF-MAINTENANCE-NOTICE aws instance-retirement at 2026-11-27T15:30:00Z"),
    "aws system-reboot": ("aws", {AWS_SCHEDULED: (200, aws_scheduled("system-reboot"))},
                          {"cloud": "aws", "kind": "system-reboot", "at": "2026-11-27T15:30:00Z"},
                          "gpufleet: GF-MAINTENANCE-NOTICE aws system-reboot at 2026-11-27T15:30:00Z"),
    "gcp host maintenance": ("gcp", {GCP_PREEMPTED: (200, b"FALSE"),
                                     GCP_MAINTENANCE: (200, b"TERMINATE_ON_HOST_MAINTENANCE")},
                             {"cloud": "gcp", "kind": "TERMINATE_ON_HOST_MAINTENANCE", "at": None},
                             "gpufleet: GF-MAINTENANCE-NOTICE gcp TERMINATE_ON_HOST_MAINTENANCE"),
    "azure Redeploy": ("azure", {AZURE_NAME: (200, b"gpu_3"), AZURE_EVENTS: (200, azure_events(
        ("Redeploy", ["gpu_3"], "Fri, 27 Nov 2026 15:10:00 GMT")))},
                       {"cloud": "azure", "kind": "Redeploy", "at": "2026-11-27T15:10:00Z"},
                       "gpufleet: GF-MAINTENANCE-NOTICE azure Redeploy at 2026-11-27T15:10:00Z"),
    "azure Terminate": ("azure", {AZURE_NAME: (200, b"gpu_3"), AZURE_EVENTS: (200, azure_events(
        ("Terminate", ["gpu_3"], "Fri, 27 Nov 2026 15:10:00 GMT")))},
                        {"cloud": "azure", "kind": "Terminate", "at": "2026-11-27T15:10:00Z"},
                        "gpufleet: GF-MAINTENANCE-NOTICE azure Terminate at 2026-11-27T15:10:00Z"),
    "azure Reboot": ("azure", {AZURE_NAME: (200, b"gpu_3"), AZURE_EVENTS: (200, azure_events(
        ("Reboot", ["gpu_3"], "")))}, {"cloud": "azure", "kind": "Reboot", "at": None},
                     "gpufleet: GF-MAINTENANCE-NOTICE azure Reboot"),
}


COMES_BACK = ("aws system-reboot", "azure Redeploy", "azure Reboot")  # the same VM returns (node_watch.COMES_BACK)


@pytest.mark.parametrize("case", list(NOTICES))
def test_each_clouds_notice_drains_the_node_and_marks_it_interrupted_within_one_run(node, case):
    """The review of issue 51 (12): GCP's host maintenance (a GPU VM is terminated, it cannot live-migrate), AWS's
    scheduled events and Azure's Terminate/Reboot/Redeploy take GPU VMs away as a spot reclaim does: they drain.
    (review rev51e, 3) Those whose VM comes back by itself (a scheduled reboot, a redeploy) say "maintenance", which
    heal does not replace; the others "interrupted"."""
    n = node
    cloud, routes, notice, reason = NOTICES[case]
    n["meta"].routes.update(routes)
    assert _watch(n, cloud) == 1
    h = _health(n)
    assert h["state"] == ("maintenance" if case in COMES_BACK else "interrupted") and h["notice"] == notice
    assert h["drained"] is True and h["faults"] == []
    (drain,) = _updates(n)
    assert drain[2:] == ["State=DRAIN", f"Reason={reason}"]
    # the checks pass, but a notice is never ended by the watch nor by Slurm's health check
    assert _watch(n, cloud) == 1 and len(_updates(n)) == 1


def test_a_maintenance_notice_that_is_gone_resumes_the_node(node):
    """A VM back from its host's maintenance (rebooted, restarted elsewhere) says no notice any more: its watch ends
    the drain it made for it (a spot notice's it never ends: that VM does not come back)."""
    n = node
    n["meta"].routes.update({GCP_PREEMPTED: (200, b"FALSE"), GCP_MAINTENANCE: (200, b"TERMINATE_ON_HOST_MAINTENANCE")})
    assert _watch(n, "gcp") == 1
    n["meta"].routes[GCP_MAINTENANCE] = (200, b"NONE")
    assert _watch(n, "gcp") == 0
    assert _health(n)["state"] == "ok" and _updates(n)[-1][2] == "State=RESUME"


def test_a_maintenance_notice_that_cannot_be_read_is_not_taken_for_gone(node):
    """A metadata server that fails once is no sign the maintenance was called off: the drain stays."""
    n = node
    n["meta"].routes.update({GCP_PREEMPTED: (200, b"FALSE"), GCP_MAINTENANCE: (200, b"TERMINATE_ON_HOST_MAINTENANCE")})
    assert _watch(n, "gcp") == 1
    n["meta"].routes[GCP_MAINTENANCE] = (503, b"")
    _watch(n, "gcp")
    assert [u[2] for u in _updates(n)] == ["State=DRAIN"] and _health(n)["notice_error"], _updates(n)


def test_a_rebalance_recommendation_is_recorded_and_drains_nothing(node):
    """The review of issue 51 (8): a rebalance recommendation drained the node for good and heal replaced it from
    the same spot pool. AWS calls it a signal of elevated risk, best effort (the instance may run on): it is in the
    status (the notice), the node stays "ok" with its work; an instance-action that follows drains it."""
    n = node
    n["meta"].routes[AWS_REBALANCE] = (200, b'{"noticeTime": "2026-11-27T14:58:00Z"}')
    assert _watch(n) == 0
    h = _health(n)
    assert h["state"] == "ok" and h["notice"] == {"cloud": "aws", "kind": "rebalance", "at": None}
    assert h["drained"] is False and _updates(n) == []
    n["meta"].routes[AWS_ACTION] = (200, b'{"action": "terminate", "time": "2026-11-27T15:02:00Z"}')
    assert _watch(n) == 1 and _health(n)["state"] == "interrupted" and _updates(n)[0][2] == "State=DRAIN"


def test_heal_reads_each_notice_the_watch_writes(node):
    """What the watch says is what the controller's reader takes (nodes/health.py): a notice it does not know
    would make the node unknown. A rebalance is no fault: heal leaves the node."""
    import datetime as dt

    from gpufleet.nodes import health as hl

    n = node
    for case in [*NOTICES, "rebalance"]:
        n["meta"].routes.clear()
        cloud, routes = ("aws", {AWS_REBALANCE: (200, b'{"noticeTime": "2026-11-27T14:58:00Z"}')}) \
            if case == "rebalance" else NOTICES[case][:2]
        n["meta"].routes.update(routes)
        _watch(n, cloud)
        (key,) = [k for k, _ in _list(n)]
        rep = hl.reported(json.loads(node_agent.S3(n["cfg"]).get(key)), dt.datetime.now(dt.timezone.utc))
        assert rep["notice"] == _health(n)["notice"], case
        assert (rep["state"] in hl.BROKEN) == (case != "rebalance" and case not in COMES_BACK), case
        # the code heal's events name: the watch's drain reason's
        code = hl.NodeHealth("gpu-0", "gpu", "cloud", rep["state"], notice=rep["notice"]).code
        assert code == (None if case == "rebalance" else NOTICES[case][3].split()[1]), case


NO_NOTICE = {  # a cloud that has nothing to say: 404 (AWS), FALSE and NONE (GCP), no event for this VM (Azure)
    "aws": {AWS_SCHEDULED: (200, aws_scheduled("system-reboot", state="completed"))},
    "gcp": {GCP_PREEMPTED: (200, b"FALSE"), GCP_MAINTENANCE: (200, b"NONE")},
    "gcp live migration": {GCP_PREEMPTED: (200, b"FALSE"), GCP_MAINTENANCE: (200, b"MIGRATE_ON_HOST_MAINTENANCE")},
    "azure": {AZURE_NAME: (200, b"gpu_3"), AZURE_EVENTS: (200, azure_events(
        ("Preempt", ["gpu_1"], "Fri, 27 Nov 2026 15:00:30 GMT"), ("Freeze", ["gpu_3"], "")))},
}


@pytest.mark.parametrize("case", list(NO_NOTICE))
def test_no_notice_for_this_vm_leaves_the_node_ok(node, case):
    n = node
    n["meta"].routes.update(NO_NOTICE[case])
    assert _watch(n, case.split()[0]) == 0
    h = _health(n)
    assert h["state"] == "ok" and h["notice"] is None and h["notice_error"] is None and _updates(n) == []


UNREADABLE = {
    "aws: not JSON": ("aws", {AWS_ACTION: (200, b"<html>terminate</html>")}),
    "aws: an action it does not know": ("aws", {AWS_ACTION: (200, b'{"action": "rm -rf", "time": "2026-11-27T15:02:00Z"}')}),
    "aws: a time of another format": ("aws", {AWS_ACTION: (200, b'{"action": "stop", "time": "15:02; reboot"}')}),
    "aws: a server error": ("aws", {AWS_ACTION: (500, b"Internal Server Error")}),
    "aws: a rebalance without its time": ("aws", {AWS_REBALANCE: (200, b"{}")}),
    "aws: an event code it does not know": ("aws", {AWS_SCHEDULED: (200, aws_scheduled("reboot; rm -rf /"))}),
    "aws: an event time of another format": ("aws", {AWS_SCHEDULED: (200, aws_scheduled("system-reboot").replace(
        b"27 Nov 2026 15:30:00 GMT", b"2026-11-27T15:30:00Z"))}),
    "gcp: neither TRUE nor FALSE": ("gcp", {GCP_PREEMPTED: (200, b"TRUE\nFALSE")}),
    "gcp: a server error": ("gcp", {GCP_PREEMPTED: (503, b"")}),
    "gcp: a maintenance event it does not know": ("gcp", {GCP_PREEMPTED: (200, b"FALSE"),
                                                         GCP_MAINTENANCE: (200, b"SOON")}),
    "azure: not JSON": ("azure", {AZURE_NAME: (200, b"gpu_3"), AZURE_EVENTS: (200, b"{")}),
    "azure: Events not a list": ("azure", {AZURE_NAME: (200, b"gpu_3"), AZURE_EVENTS: (200, b'{"Events": "Preempt"}')}),
    "azure: a NotBefore of another format": ("azure", {AZURE_NAME: (200, b"gpu_3"), AZURE_EVENTS: (200, azure_events(
        ("Preempt", ["gpu_3"], "soon")))}),
    "azure: a server error": ("azure", {AZURE_NAME: (200, b"gpu_3"), AZURE_EVENTS: (500, b"")}),
    "azure: no VM name": ("azure", {AZURE_NAME: (404, b"")}),
}


@pytest.mark.parametrize("case", list(UNREADABLE))
def test_a_notice_that_cannot_be_read_drains_nothing_and_says_so(node, case):
    n = node
    cloud, routes = UNREADABLE[case]
    n["meta"].routes.update(routes)
    assert _watch(n, cloud) == 0
    h = _health(n)
    assert h["state"] == "ok" and h["notice"] is None and h["drained"] is False and _updates(n) == []
    assert h["notice_error"].startswith("the cloud's notice could not be read: ") and "\n" not in h["notice_error"]


def test_the_configurations_run_keeps_the_watchs_health(node):
    """The apply run and `gpufleet verify`'s write the whole status object: the watch's part stays."""
    n = node
    (n["captures"] / "journal.txt").write_text((ROOT / "tests" / "data" / "verify" / "journal-xid79.txt").read_text())
    _watch(n)
    store = node_agent.S3(n["cfg"])
    node_agent.put_status(store, "gpu", "i-0watch1", {"node_id": "i-0watch1", "pool": "gpu", "ok": True, "generation": "g2"})
    (key,) = [k for k, _ in _list(n)]
    written = json.loads(store.get(key))
    assert written["generation"] == "g2" and written["health"]["faults"][0]["code"] == "GF-XID-FATAL"


def test_a_node_not_configured_yet_is_gating_and_still_reads_its_notice(node):
    n = node
    (n["state"] / "applied.json").unlink()
    (n["state"] / "gate.json").unlink()
    n["meta"].routes.update({GCP_PREEMPTED: (200, b"FALSE"), GCP_MAINTENANCE: (200, b"NONE")})
    assert _watch(n, "gcp") == 1
    h = _health(n)
    assert h["state"] == "gating" and h["gate"] == {"level": "quick", "passed": None} and h["faults"] == []
    assert _updates(n)[0][3] == "Reason=gpufleet: GF-GATE quick not passed yet"
    n["meta"].routes[GCP_PREEMPTED] = (200, b"TRUE")  # reclaimed while it configures itself
    assert _watch(n, "gcp") == 1 and _health(n)["state"] == "interrupted"


# the watch as the node runs it: python3 /opt/gpufleet/node_watch.py beside the agent, nothing of gpufleet
ON_THE_NODE = textwrap.dedent("""\
    import sys
    sys.path.insert(0, sys.argv[1])
    import node_agent
    node_agent.STATE_DIR, node_agent.AWS_IMDS = sys.argv[3], sys.argv[4]
    import node_watch
    node_watch.TEXTFILE_DIR = sys.argv[3] + "/node-exporter"  # none: this machine's node_exporter is left alone
    sys.exit(node_watch.main(["node_watch.py", sys.argv[2]]))
    """)


def test_the_watch_runs_beside_the_agent_on_the_standard_library_alone(node, tmp_path):
    n = node
    home = tmp_path / "opt-gpufleet"
    home.mkdir()
    for name in ("node_agent.py", "node_watch.py"):
        (home / name).write_text((ROOT / "infra" / "clouds" / name).read_text())
    (cfg := tmp_path / "node.json").write_text(json.dumps(n["cfg"]))
    n["meta"].routes[AWS_ACTION] = (200, b'{"action": "stop", "time": "2026-11-27T15:02:00Z"}')
    ran = subprocess.run([sys.executable, "-I", "-c", ON_THE_NODE, str(home), str(cfg), str(n["state"]), n["meta"].url],
                         capture_output=True, text=True, timeout=120, env=os.environ)
    assert ran.returncode == 1 and "health interrupted: gpufleet: GF-SPOT-NOTICE aws instance-action" in ran.stdout, ran
    assert _health(n)["notice"]["kind"] == "instance-action"


def test_the_boot_gate_keeps_the_node_drained_until_dcgm_passes_then_resumes_it(node):
    """health.gate dcgm1: the quick checks and `dcgmi diag -r 1` (the stand-in replays a failing run, then a
    passing one); gating, the node stays drained for GF-GATE with the failed codes; a passing gate resumes it,
    and from then on it is watched with the quick checks alone."""
    n = node
    (n["state"] / "gate.json").write_text(json.dumps({"level": "dcgm1", "passed": None}))
    (n["bin"] / "slurm-node.json").write_text(json.dumps({"state": "IDLE+DRAIN",  # as slurmd's start left it
                                                           "reason": "gpufleet: GF-GATE dcgm1 not passed yet"}))
    good = (n["captures"] / "dcgmi-diag-r1.json").read_text()
    (n["captures"] / "dcgmi-diag-r1.json").write_text(
        (ROOT / "tests" / "data" / "verify" / "dcgmi-diag-r1-fail.json").read_text())
    assert _watch(n) == 1
    h = _health(n)
    assert h["state"] == "gating" and h["gate"] == {"level": "dcgm1", "passed": False} and h["drained"] is True
    assert [f["code"] for f in h["faults"]] == ["GF-DCGM-FAIL"]
    assert _updates(n)[-1][3] == "Reason=gpufleet: GF-GATE dcgm1 GF-DCGM-FAIL dcgm.diag"
    (n["captures"] / "dcgmi-diag-r1.json").write_text(good)  # the GPU reset: the diagnostic passes
    assert _watch(n) == 0
    assert _health(n)["gate"] == {"level": "dcgm1", "passed": True} and _updates(n)[-1][2] == "State=RESUME"
    (n["captures"] / "dcgmi-diag-r1.json").unlink()  # watched without DCGM's diagnostic from now on
    assert _watch(n) == 0 and _health(n)["state"] == "ok"


def test_up_waits_on_a_node_whose_watch_alone_has_spoken(node):
    """The watch writes before the first configuration's status (a notice may come during it): `up`'s wait
    takes that word for no report at all, not for a failed configuration."""
    from gpufleet.nodes.cloud import channel as cloudnodes

    n = node
    (n["state"] / "applied.json").unlink()
    _watch(n)
    (key,) = [k for k, _ in _list(n)]
    assert key.endswith(":i-0watch1.json")  # the node's own key
    target = cloudnodes.NodeTarget("gpu", 0, "i-0watch1", None)
    store = cloudnodes.cloud("aws").objects({"cloud": "aws", "name": "gpufleet-w-1", "region": "us-east-1"})
    (r,) = cloudnodes.wait(store, [target], {"gpu": "g1"}, timeout_s=0.3, poll_s=0.1)
    assert r.state == "timeout" and "no status on generation g1" in r.error and not r.warnings


ABANDONS = """import json, subprocess, sys
with open(sys.argv[0] + ".runs", "a") as f:
    f.write("ran\\n")
subprocess.Popen(["nvidia-smi", "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # it outlived its kill
print(json.dumps({"verdict": "fail", "failures": [{"check": "health.timeout", "code": "GF-HEALTH-TIMEOUT",
                                                   "measured": "nvidia-smi after 3 s"}]}))
"""


def _standin_smis(n) -> list[int]:
    me = str(n["bin"] / "nvidia-smi").encode()
    found = []
    for d in os.listdir("/proc"):
        try:
            if d.isdigit() and me in open(f"/proc/{d}/cmdline", "rb").read().split(b"\0") and \
                    open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
                found.append(int(d))
        except OSError:
            continue
    return found


def test_a_tool_stuck_after_its_kill_is_not_run_again_by_the_next_watch(node, monkeypatch):
    """A GPU that fell off the bus leaves nvidia-smi in D state, which SIGKILL does not end: a watch a minute
    would leave one more each run (issue 48 found it in Slurm's health check). The watch writes down what its
    checks left alive after the kill, runs no check while it is there (the node stays faulty naming it), and
    checks again once it is gone. (D state cannot be made here: the kill is made to miss.)"""
    n = node
    (n["captures"] / "nvidia-smi.hang").write_text("")
    bundle = json.loads((n["state"] / "applied.json").read_text())["tree"] + "/" + node_agent.VERIFY_BUNDLE
    with open(bundle, "w") as f:
        f.write(ABANDONS)
    killpg = os.killpg
    monkeypatch.setattr(node_watch.os, "killpg", lambda group, sig: None)
    try:
        assert _watch(n) == 1
        (smi,) = _standin_smis(n)
        assert _watch(n) == 1 and open(bundle + ".runs").read() == "ran\n"  # not run again
        h = _health(n)
        assert h["faults"] == [{"code": "GF-HEALTH-TIMEOUT", "check": "health.timeout", "evidence":
                                f"nvidia-smi (pid {smi}) stuck since an earlier watch: not checked again until it ends"}]
    finally:
        for pid in _standin_smis(n):
            os.kill(pid, 9)
    monkeypatch.setattr(node_watch.os, "killpg", killpg)
    for _ in range(100):  # until it is gone
        if not _standin_smis(n):
            break
        node_watch.time.sleep(0.05)
    _watch(n)
    assert open(bundle + ".runs").read() == "ran\nran\n" and _standin_smis(n) == []  # checked again, nothing left


def test_a_later_configuration_that_failed_does_not_stop_the_watch(node):
    """A node configured (and gated) once whose next generation failed is still watched: it was "ok" unchecked."""
    n = node
    applied = json.loads((n["state"] / "applied.json").read_text())
    (n["state"] / "applied.json").write_text(json.dumps({**applied, "generation": "g2", "ok": False, "attempt": 1}))
    (n["captures"] / "journal.txt").write_text((ROOT / "tests" / "data" / "verify" / "journal-xid79.txt").read_text())
    assert _watch(n) == 1
    h = _health(n)
    assert h["state"] == "faulty" and h["faults"][0]["code"] == "GF-XID-FATAL"
    assert h["faults"][0]["evidence"].startswith("XID 79: last: XID 79 on ")


def test_between_watches_the_notice_is_read_every_few_seconds(node, monkeypatch):
    """GCP and Azure give 30 s: a watch a minute would drain after the VM is gone. After its checks the watch
    keeps reading the notice until the next watch is due; a notice then drains the node in the same run."""
    n = node
    monkeypatch.setattr(node_watch, "NOTICE_POLL_S", 0.05)
    settings = json.loads((n["state"] / "health.json").read_text())
    (n["state"] / "health.json").write_text(json.dumps({**settings, "interval": 30}))  # the next watch: in 30 s
    n["meta"].routes.update({GCP_PREEMPTED: [(200, b"FALSE"), (200, b"FALSE"), (200, b"TRUE")],
                             GCP_MAINTENANCE: (200, b"NONE")})
    assert _watch(n, "gcp") == 1
    h = _health(n)
    assert h["state"] == "interrupted" and h["notice"] == {"cloud": "gcp", "kind": "preempted", "at": None}
    assert _updates(n)[-1][3] == "Reason=gpufleet: GF-SPOT-NOTICE gcp preempted"


def test_the_watch_never_writes_back_an_older_status_than_the_configurations(node, monkeypatch):
    """The configuration's run may write its status while a watch runs (their locks are their own): the watch puts
    its health into the status as it is when it writes, not as it was when it began."""
    n = node
    store = node_agent.S3(n["cfg"])
    node_agent.put_status(store, "gpu", "i-0watch1", {"node_id": "i-0watch1", "pool": "gpu", "ok": True, "generation": "g1"})
    node_id = node_agent.node_id

    def configured_meanwhile(cfg):  # the configuration's run writes generation g2 while the watch checks
        node_agent.put_status(store, "gpu", "i-0watch1", {"node_id": "i-0watch1", "pool": "gpu", "ok": True,
                                                          "generation": "g2"})
        return node_id(cfg)

    monkeypatch.setattr(node_agent, "node_id", configured_meanwhile)
    assert _watch(n) == 0
    (key,) = [k for k, _ in _list(n)]
    written = json.loads(store.get(key))
    assert written["generation"] == "g2" and written["health"]["state"] == "ok"


# checks that wait (at most 20 s) for what should happen while they run, then say whether it did
WAITS_FOR = """import json, sys, time
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    try:
        if {condition}:
            break
    except (OSError, ValueError, KeyError):
        pass
    time.sleep(0.05)
else:
    print(json.dumps({{"verdict": "fail", "failures": [{{"check": "test.waited", "code": "GF-TEST-WAITED",
                                                      "detail": "it did not happen while the checks ran"}}]}}))
    sys.exit(0)
print(json.dumps({{"verdict": "pass", "failures": []}}))
"""


def _checks_wait_for(n, condition: str) -> None:
    bundle = json.loads((n["state"] / "applied.json").read_text())["tree"] + "/" + node_agent.VERIFY_BUNDLE
    with open(bundle, "w") as f:
        f.write(WAITS_FOR.format(condition=condition))


def test_a_notice_during_the_checks_drains_the_node_before_they_end(node, monkeypatch):
    """The review of issue 51 (15): the notice was read once before the checks (up to 0.8 of an interval, a dcgm
    gate an hour) and again only after them: GCP and Azure give 30 s. It is read all along the run, and drains at
    once: here the checks themselves wait until the node is drained (a stand-in scontrol's record)."""
    n = node
    monkeypatch.setattr(node_watch, "NOTICE_POLL_S", 0.05)
    _checks_wait_for(n, f"'DRAIN' in json.load(open({str(n['bin'] / 'slurm-node.json')!r}))['state']")
    n["meta"].routes.update({GCP_PREEMPTED: [(200, b"FALSE"), (200, b"TRUE")], GCP_MAINTENANCE: (200, b"NONE")})
    assert _watch(n, "gcp") == 1
    h = _health(n)
    assert h["state"] == "interrupted" and h["faults"] == [], h  # the checks saw the drain: no GF-TEST-WAITED
    assert _updates(n)[0][3] == "Reason=gpufleet: GF-SPOT-NOTICE gcp preempted"


def test_a_long_gate_keeps_its_status_fresh_while_it_runs(node, monkeypatch):
    """The review of issue 51 (11): the reader takes a report older than three intervals as unknown; a dcgm gate
    (up to an hour) wrote nothing while it ran. While the checks run, the watch says its last word again each half
    interval: here the checks wait until the status (the node's copy) says "gating"."""
    n = node
    monkeypatch.setattr(node_watch, "NOTICE_POLL_S", 0.05)
    settings = json.loads((n["state"] / "health.json").read_text())
    (n["state"] / "health.json").write_text(json.dumps({**settings, "interval": 1}))
    (n["state"] / "gate.json").write_text(json.dumps({"level": "dcgm2", "passed": None}))
    _checks_wait_for(n, f"json.load(open({str(n['state'] / 'status.json')!r}))['health']['state'] == 'gating'")
    assert _watch(n) == 0
    h = _health(n)
    assert h["state"] == "ok" and h["faults"] == [] and h["gate"] == {"level": "dcgm2", "passed": True}, h


def test_each_run_writes_its_status_even_when_nothing_changed(node, monkeypatch):
    """The review of issue 51 (11): a run skipped its write while the same health was less than two intervals old,
    and with a late write (slow checks, the store's retries) the reader's three intervals ran out: healthy nodes
    flapped to unknown. A run writes once whatever it finds (not twice within half an interval)."""
    n = node
    assert _watch(n) == 0
    copy = json.loads((n["state"] / "status.json").read_text())
    copy["health"]["checked_at"] = node_watch.utc_z(node_watch.dt.datetime.now(node_watch.dt.timezone.utc)
                                                    - node_watch.dt.timedelta(seconds=40))  # interval 60
    (n["state"] / "status.json").write_text(json.dumps(copy))
    written = []
    put_status = node_agent.put_status
    monkeypatch.setattr(node_agent, "put_status", lambda *a, **k: (written.append(k["health"]), put_status(*a, **k)))
    assert _watch(n) == 0
    assert [h["state"] for h in written] == ["ok"]


FAILING_SCONTROL = """#!/bin/sh
echo "slurm_load_node error: Unable to contact slurm controller (connect failure)" >&2
exit 1
"""


def test_a_drain_that_did_not_take_is_said_in_the_status(node):
    """The review of issue 51 (10): a node not gated yet whose drain failed (no controller answering) took jobs, and
    nothing said so. The status says the drain was not confirmed, and why."""
    n = node
    (n["state"] / "gate.json").write_text(json.dumps({"level": "quick", "passed": None}))
    (n["state"] / "applied.json").unlink()
    (n["bin"] / "scontrol").write_text(FAILING_SCONTROL)
    assert _watch(n) == 1
    h = _health(n)
    assert h["state"] == "gating" and h["drained"] is False
    assert h["drain_error"].startswith("the drain (gpufleet: GF-GATE quick not passed yet) was not confirmed: "
                                       "scontrol show: exit 1: slurm_load_node error: Unable to contact"), h


def test_azures_first_scheduled_events_call_may_take_its_time(node):
    """The review of issue 51 (16): Azure's first Scheduled Events request "can take up to two minutes" (it enables
    them); a 5 s timeout missed the notice. The first call gets its time, the checks do not wait on it."""
    n = node
    n["meta"].routes.update({AZURE_NAME: (200, b"gpu_3"), AZURE_EVENTS: (200, azure_events(
        ("Preempt", ["gpu_3"], "Fri, 27 Nov 2026 15:00:30 GMT")), 6)})
    assert _watch(n, "azure") == 1
    h = _health(n)
    assert h["state"] == "interrupted" and h["notice"]["kind"] == "Preempt" and h["notice_error"] is None, h


def test_the_watch_unit_waits_for_the_network_it_is_ordered_after():
    """systemd.unit(5): After= orders, it pulls nothing in; network-online.target is reached only when something
    wants it."""
    import configparser

    unit = configparser.ConfigParser()
    unit.read_string(node_agent.WATCH_UNIT_TEXT)
    assert "network-online.target" in unit["Unit"]["After"].split()
    assert "network-online.target" in unit["Unit"].get("Wants", "").split()


def test_the_controllers_slurm_view_is_stamped_on_each_run_even_when_slurm_says_the_same(node):
    """`heal` trusts Slurm's view only while its ``at`` is fresh (nodes.cloud.heal.SLURM_VIEW_MAX_AGE_S): the
    controller's agent re-stamps it on each run, not only when the answer changed (review of issue 51, #4)."""
    n = node
    state = n["state"]
    applied = json.loads((state / "applied.json").read_text())
    (state / "applied.json").write_text(json.dumps({**applied, "probe": "printf 'nodes\\nn1 idle\\n'"}))
    (state / "status.json").write_text(json.dumps({"node_id": "i-0watch1", "pool": "gpu", "ok": True,
                                                   "scheduler": {"out": "nodes\nn1 idle\n",
                                                                 "at": "2026-01-01T00:00:00Z"}}))
    node_agent.report_scheduler(n["cfg"])
    store = node_agent.S3(n["cfg"])
    (key,) = [k for k, _ in _list(n)]
    view = json.loads(store.get(key))["scheduler"]
    assert view["out"] == "nodes\nn1 idle\n" and view["at"] > "2026-01-01T00:00:00Z"


def test_the_controllers_agent_keeps_every_slurm_nodes_name_in_its_hosts_file_on_each_run(node, tmp_path, monkeypatch):
    """Review rev51b finding 4: the controller is in no job, so the Slurm prolog never writes its /etc/hosts, and
    `ssh gpu-0` failed there. On each run its agent runs the slurm formula's program with --all: every node slurmctld
    knows at its NodeAddr now (a powered-down slot, where no node registered yet, left out), the block made anew; a
    compute node (no probe) does not."""
    from gpufleet.configure import slurm

    assert node_agent.SLURM_NAMES == slurm.PROLOG_PROGRAM  # where the formula installs it
    n = node
    hosts, tools = tmp_path / "hosts", tmp_path / "names-bin"
    tools.mkdir()
    hosts.write_text("127.0.0.1 localhost\n# BEGIN gpufleet: Slurm node names (the Slurm prolog keeps these lines; "
                     "edits here are lost)\n10.0.0.9 gpu-0\n10.0.0.8 gpu-7\n# END gpufleet: Slurm node names\n")
    (tools / "scontrol").write_text(
        "#!/bin/sh\n[ \"$*\" = 'show node -o' ] || exit 1\n"
        "echo 'NodeName=gpu-0 NodeAddr=10.0.0.21 NodeHostName=ip-10-0-0-21 State=IDLE+CLOUD'\n"
        "echo 'NodeName=gpu-1 NodeAddr=10.0.0.22 NodeHostName=ip-10-0-0-22 State=ALLOCATED+CLOUD'\n"
        "echo 'NodeName=gpu-2 NodeAddr=10.0.0.5 NodeHostName=gpu-2 State=IDLE+CLOUD+DRAIN+POWERED_DOWN'\n")
    program = tools / "gpufleet-slurm-prolog"  # the real program on a hosts file of the test's
    program.write_text(f"#!/bin/sh\nPATH={tools}:$PATH exec {sys.executable} "
                       f"{ROOT / 'salt' / 'slurm' / 'files' / 'gpufleet-slurm-prolog'} --hosts {hosts} \"$@\"\n")
    for f in (program, tools / "scontrol"):
        f.chmod(0o755)
    monkeypatch.setattr(node_agent, "SLURM_NAMES", str(program))
    state = n["state"]
    (state / "status.json").write_text(json.dumps({"node_id": "i-0watch1", "pool": "gpu", "ok": True}))
    before = hosts.read_text()
    node_agent.report_scheduler(n["cfg"])  # a compute node: no probe in what it applied
    assert hosts.read_text() == before
    applied = json.loads((state / "applied.json").read_text())
    (state / "applied.json").write_text(json.dumps({**applied, "probe": "printf 'nodes\\n'"}))
    node_agent.report_scheduler(n["cfg"])
    assert hosts.read_text().splitlines()[1:] == [
        "# BEGIN gpufleet: Slurm node names (the Slurm prolog keeps these lines; edits here are lost)",
        "10.0.0.21 gpu-0", "10.0.0.22 gpu-1", "# END gpufleet: Slurm node names"]


def metrics_file(path) -> dict:
    """The node's metrics file as node_exporter's parser reads it (prometheus_client's, the same text format):
    {(name, labels): value}, each family's name and type checked against the catalogue first."""
    from prometheus_client.parser import text_string_to_metric_families

    from gpufleet.monitoring import names

    got = {}
    for fam in text_string_to_metric_families(path.read_text()):
        want = names.catalogue()[fam.name]
        assert want in names.NODE and fam.type == {"info": "gauge"}.get(want.type, want.type)
        for s in fam.samples:
            assert set(s.labels) <= set(want.labels) and s.timestamp is None
            got[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return got


def test_each_watch_writes_what_the_node_is_costs_and_says_for_node_exporter(node, tmp_path):
    """From the pool's document (its price from the plan) through the agent's health settings to the textfile: the
    node's price, GPUs and health one-hot, its last fault kept once it is ok again, readable by node_exporter's user."""
    from gpufleet import catalog, stacks
    from gpufleet.nodes.cloud import channel

    n, out = node, tmp_path / "node-exporter"
    out.mkdir()
    stack = stacks.load(ROOT / "stacks" / "examples" / "aws-training.yaml")
    doc = channel.pool_document(stack, stack.pools[0], cluster="w", cat=catalog.load(use_config=False), tree="0" * 64,
                                usd_per_node_hour=32.7726)
    settings = json.loads((n["state"] / "health.json").read_text())
    (n["state"] / "health.json").write_text(json.dumps({**settings, "node": doc["health"]["node"]}))
    (n["captures"] / "journal.txt").write_text((ROOT / "tests" / "data" / "verify" / "journal-xid79.txt").read_text())
    assert _watch(n) == 1
    said = metrics_file(out / "gpufleet.prom")
    assert said[("gpufleet_node_info", (("gpu_model", "A100-40GB"), ("instance_type", "p4d.24xlarge"),
                                        ("provider", "aws")))] == 1
    assert said[("gpufleet_node_price_usd_per_hour", ())] == 32.7726 and said[("gpufleet_node_gpus", ())] == 8
    assert {dict(k[1])["state"]: v for k, v in said.items() if k[0] == "gpufleet_node_health"} == \
        {"ok": 0, "gating": 0, "faulty": 1, "interrupted": 0, "maintenance": 0}
    (fault,) = [k for k in said if k[0] == "gpufleet_node_last_fault_info"]
    assert dict(fault[1]) == {"code": "GF-XID-FATAL", "check": "health.xid"}
    when = said[("gpufleet_node_last_fault_timestamp_seconds", ())]
    assert abs(when - time.time()) < 600
    assert (out / "gpufleet.prom").stat().st_mode & 0o777 == 0o644 and os.listdir(out) == ["gpufleet.prom"]
    (n["captures"] / "journal.txt").write_text("")  # the GPU reset: ok again, the fault remembered
    assert _watch(n) == 0
    said = metrics_file(out / "gpufleet.prom")
    assert said[("gpufleet_node_health", (("state", "ok"),))] == 1
    assert said[("gpufleet_node_last_fault_timestamp_seconds", ())] == when


def test_a_node_without_node_exporters_directory_gets_no_metrics_file(node, tmp_path):
    assert _watch(node) == 0 and not (tmp_path / "node-exporter").exists()


def test_a_dcgm_health_failure_drains_the_node_with_dcgms_system_as_the_code(node):
    """DCGM's health watches (issue 51): the watch's checks read `dcgmi health -c -j` (the stand-in replays DCGM's
    layout, tests/data/verify/dcgmi-health/): a memory failure drains the node, GF-DCGM-MEMORY with DCGM's message as
    the evidence; the first run on a host engine without watches sets them and judges nothing."""
    n = node
    fail = ROOT / "tests" / "data" / "verify" / "dcgmi-health" / "dcgmi-health-memory-fail.json"
    (n["captures"] / "dcgmi-health.json").write_text(fail.read_text())
    assert _watch(n) == 0 and _health(n)["state"] == "ok"  # the watches were not set: set now
    assert (n["captures"] / "dcgmi-health.log").read_text() == "-s a\n"
    assert _watch(n) == 1
    h = _health(n)
    assert h["state"] == "faulty" and h["drained"] is True
    assert [(f["code"], f["check"]) for f in h["faults"]] == [("GF-DCGM-MEMORY", "dcgm.health:memory")]
    assert h["faults"][0]["evidence"] == "GPU 0: Detected 2 volatile double-bit ECC error(s) in GPU 0."
    assert _updates(n)[-1][3] == "Reason=gpufleet: GF-DCGM-MEMORY dcgm.health:memory"


DIAG_FAIL = (ROOT / "tests" / "data" / "verify" / "dcgmi-diag-r1-fail.json").read_text()


def _active(n, every=3600, due=True):
    """The pool's active checks every ``every`` s, last run a period ago (``due``) or just now."""
    settings = json.loads((n["state"] / "health.json").read_text())
    (n["state"] / "health.json").write_text(json.dumps({**settings, "active_every": every,
                                                        "active_expect": {"dcgm_level": 2, "dcgm_required": True}}))
    (n["state"] / "active.json").write_text(json.dumps({"at": time.time() - (every + 1 if due else 0), "faults": []}))


def _calls(n) -> list[list[str]]:
    log = n["bin"] / "scontrol.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_the_active_checks_run_on_an_idle_node_inside_a_reservation_and_drain_it_when_they_fail(node):
    """Issue 51: DCGM level 2 on an idle node, on its schedule, through a Slurm reservation of the node made for the
    run and deleted after it; a failure drains the node (GF-ACTIVE, the fault code); a passing health check does not
    end that drain, only a passing active run does (tried again an hour later)."""
    n = node
    _active(n)
    (n["captures"] / "dcgmi-diag-r2.json").write_text(DIAG_FAIL)
    assert _watch(n) == 1
    hostname = node_watch.socket.gethostname().split(".")[0]
    held = f"ReservationName=gpufleet-active-{hostname}"
    calls = [c for c in _calls(n) if c[0] != "show"]
    assert calls[1] == ["create", "reservation", held, f"Nodes={hostname}", "StartTime=now", "Duration=35", "Users=root"]
    assert calls[2] == ["delete", held]  # deleted once the checks ran, before the drain
    assert calls[3] == ["update", f"NodeName={hostname}", "State=DRAIN",
                        "Reason=gpufleet: GF-ACTIVE GF-DCGM-FAIL active.dcgm.diag"]
    h = _health(n)
    assert h["state"] == "faulty" and [(f["code"], f["check"]) for f in h["faults"]] == [("GF-DCGM-FAIL", "active.dcgm.diag")]
    # the next watches: the passive checks pass, the active failure stands (not due again for an hour)
    (n["captures"] / "dcgmi-diag-r2.json").write_text((n["captures"] / "dcgmi-diag-r1.json").read_text())
    assert _watch(n) == 1 and _health(n)["state"] == "faulty" and len(_updates(n)) == 1
    # an hour later it runs again on the node it drained (no job on it), passes, and the node is resumed
    record = json.loads((n["state"] / "active.json").read_text())
    (n["state"] / "active.json").write_text(json.dumps({**record, "at": record["at"] - node_watch.ACTIVE_RETRY_S}))
    assert _watch(n) == 0 and _health(n)["state"] == "ok" and _updates(n)[-1][2] == "State=RESUME"


def test_the_active_checks_dcgm_level_2_is_never_passed_without_dcgmi(node):
    """(review rev51e, 5) The active checks name DCGM's diagnostic at level 2 (where the pool installs DCGM:
    configure.slurm.active_expectations); a node without dcgmi does not pass them: "not checked", and drained."""
    n = node
    _active(n)
    (n["bin"] / "dcgmi").unlink()
    assert _watch(n) == 1
    h = _health(n)
    assert h["state"] == "faulty" and ("GF-TOOL-FAILED", "active.dcgm.diag") in [(f["code"], f["check"]) for f in h["faults"]]
    assert _updates(n)[-1][3].startswith("Reason=gpufleet: GF-ACTIVE GF-TOOL-FAILED active.dcgm.diag")


def test_the_active_checks_require_dcgm_only_where_the_pool_installs_it(node):
    """A pool that installs DCGM (its expectations have a level) requires the active checks' diagnostic; one that does
    not runs it where dcgmi is (a user's own DCGM) and passes without it: nothing promised it."""
    from gpufleet.configure.slurm import active_expectations

    assert active_expectations({"dcgm_level": 1, "nccl": {"bytes": "8G"}}) == \
        {"dcgm_level": 2, "dcgm_required": True, "nccl": {"bytes": "8G"}}
    assert active_expectations({"nccl": {"bytes": "8G"}}) == {"dcgm_level": 2, "nccl": {"bytes": "8G"}}
    n = node
    _active(n)
    settings = json.loads((n["state"] / "health.json").read_text())
    (n["state"] / "health.json").write_text(json.dumps({**settings, "active_expect": {"dcgm_level": 2}}))
    (n["bin"] / "dcgmi").unlink()
    assert _watch(n) == 0 and _health(n)["state"] == "ok"


def test_the_active_checks_run_on_an_idle_cloud_slot_and_drain_it_by_its_slot(node):
    """Issue 51, found on the test rack: a cloud compute node is its pool's slot (State=CLOUD in slurm.conf,
    gpufleet.configure.slurm SLOT_STATE), which Slurm 22.05.8 shows idle as State=IDLE+CLOUD and drained as
    IDLE+CLOUD+DRAIN (scontrol show node, seen on the rack 2026-11-27). The watch took CLOUD for a state that keeps
    the checks off ("Slurm says IDLE+CLOUD"): they never ran once the node's job had ended. CLOUD says what kind of
    node it is, not what it is doing: the checks run in the slot's reservation, drain it, and a passing run resumes it."""
    n = node
    with open(f"{node_watch.agent.STATE_DIR}/{node_watch.agent.SLURM_NAME}", "w") as f:
        f.write("gpu-0")
    (n["bin"] / "slurm-node.json").write_text(json.dumps({"state": "IDLE+CLOUD", "reason": ""}))
    _active(n)
    (n["captures"] / "dcgmi-diag-r2.json").write_text(DIAG_FAIL)
    assert _watch(n) == 1, json.loads((n["state"] / "active.json").read_text())
    calls = [c for c in _calls(n) if c[0] != "show"]
    assert calls[1][:4] == ["create", "reservation", "ReservationName=gpufleet-active-gpu-0", "Nodes=gpu-0"]
    assert calls[2] == ["delete", "ReservationName=gpufleet-active-gpu-0"]
    assert calls[3] == ["update", "NodeName=gpu-0", "State=DRAIN", "Reason=gpufleet: GF-ACTIVE GF-DCGM-FAIL active.dcgm.diag"]
    assert json.loads((n["bin"] / "slurm-node.json").read_text())["state"] == "IDLE+CLOUD+DRAIN"
    # run again on the slot it drained (IDLE+CLOUD+DRAIN, no job), it passes and the slot is resumed
    (n["captures"] / "dcgmi-diag-r2.json").write_text((n["captures"] / "dcgmi-diag-r1.json").read_text())
    record = json.loads((n["state"] / "active.json").read_text())
    (n["state"] / "active.json").write_text(json.dumps({**record, "at": record["at"] - node_watch.ACTIVE_RETRY_S}))
    assert _watch(n) == 0 and _health(n)["state"] == "ok" and _updates(n)[-1] == ["update", "NodeName=gpu-0", "State=RESUME"]
    assert json.loads((n["bin"] / "slurm-node.json").read_text())["state"] == "IDLE+CLOUD"


@pytest.mark.parametrize("slurm, why", [
    ({"state": "ALLOCATED", "reason": ""}, "Slurm says ALLOCATED"),
    ({"state": "ALLOCATED+CLOUD", "reason": ""}, "Slurm says ALLOCATED+CLOUD"),  # a cloud slot running a job
    # idle when asked, a job started before the reservation: Slurm refuses it (its nodes are busy)
    ({"state": "IDLE", "reason": "", "job": True}, "Requested nodes are busy"),
])
def test_the_active_checks_never_run_under_a_job(node, slurm, why):
    """A node running a job: nothing runs, nothing is drained, and why is kept; not due, or off (0): not even
    asked."""
    n = node
    _active(n)
    (n["captures"] / "dcgmi-diag-r2.json").write_text(DIAG_FAIL)
    (n["bin"] / "slurm-node.json").write_text(json.dumps(slurm))
    assert _watch(n) == 0 and _health(n)["state"] == "ok" and _updates(n) == []
    assert why in json.loads((n["state"] / "active.json").read_text())["skipped"]
    for every, due in ((3600, False), (0, True)):
        (n["bin"] / "scontrol.log").unlink()
        (n["bin"] / "slurm-node.json").write_text(json.dumps({"state": "IDLE", "reason": ""}))
        _active(n, every, due)
        assert _watch(n) == 0 and not [c for c in _calls(n) if c[0] == "create"]


@pytest.mark.parametrize("drained, released", [
    (node_watch.SCALE_DOWN, False),  # heal gave it back, its watch drained it
    (node_watch.RELEASE, False),  # a person gave it back (README, health)
    ("gpufleet: GF-ACTIVE GF-DCGM-FAIL active.dcgm.diag", True),  # given back, drained for a fault since
])
def test_a_node_given_back_runs_no_active_check(node, drained, released):
    """Noted by reviews rev51c 9 and rev51d 5: idle() took IDLE+DRAIN with any `gpufleet:` reason for idle (its failed
    active checks run again), so the checks (DCGM level 2 and the all-reduce, 30 minutes of the GPUs) started, inside
    a reservation of the node, on a node heal was about to remove: its removal waited, or the checks were cut by it.
    A node given back (drained for it, or its slot says release: node_agent.RELEASED) is never held for them."""
    n = node
    _active(n, every=3600)
    record = json.loads((n["state"] / "active.json").read_text())
    (n["state"] / "active.json").write_text(json.dumps({**record, "at": record["at"] - node_watch.ACTIVE_RETRY_S}))
    (n["captures"] / "dcgmi-diag-r2.json").write_text(DIAG_FAIL)
    (n["bin"] / "slurm-node.json").write_text(json.dumps({"state": "IDLE+DRAIN", "reason": drained}))
    node_agent.released(released)
    _watch(n)
    assert not [c for c in _calls(n) if c[0] == "create"], "the active checks were held on a node given back"
    assert "given back" in json.loads((n["state"] / "active.json").read_text())["skipped"]


@pytest.mark.parametrize("apps, ran", [("", True), ("4242\n", False)])
def test_without_slurm_the_active_checks_run_only_where_no_gpu_process_is_known(node, monkeypatch, apps, ran):
    n = node
    monkeypatch.setattr(node_watch, "scontrol", lambda *args: (None, None))  # no scontrol here (FileNotFoundError)
    _active(n)
    (n["captures"] / "dcgmi-diag-r2.json").write_text(DIAG_FAIL)
    (n["captures"] / "compute-apps.csv").write_text(apps)
    assert _watch(n) == (1 if ran else 0)
    record = json.loads((n["state"] / "active.json").read_text())
    if ran:
        assert _health(n)["state"] == "faulty" and [f["code"] for f in record["faults"]] == ["GF-DCGM-FAIL"]
    else:
        assert _health(n)["state"] == "ok" and record["skipped"] == "1 compute process(es) on the GPUs"


def test_a_drain_reason_that_is_not_utf8_is_read_not_fatal(tmp_path, monkeypatch):
    """slurmctld keeps a reason as the operator's bytes (a Latin-1 terminal's "réparation"): scontrol's answer is
    read with what cannot be decoded replaced, not a UnicodeDecodeError that ends the watch before its verdict."""
    (tmp_path / "scontrol").write_text("#!/bin/sh\nprintf 'NodeName=n1 State=IDLE+DRAIN Reason=r\\351paration\\n'\n")
    (tmp_path / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    out, why = node_watch.scontrol("show", "node", "n1", "-o")
    assert why is None and "Reason=r\ufffdparation" in out


def test_a_node_heal_gives_back_is_drained_for_scale_down_and_resumed_when_heal_takes_it_back(node, aws):
    """Review rev51b, finding 6: nothing drained an idle node of an elastic pool, so it never shrank by itself. heal
    gives an idle node back through its slot in the pool's bucket (channel.release_slot, as gpufleet writes it; here
    moto's S3, read with the agent's own SigV4 client); the agent's run reads the slot (node_agent.slot_said) and
    leaves the word for the watch, which drains the node for GF-SCALE-DOWN (heal removes it once Slurm shows it
    drained with no job) and resumes it once heal takes the word back (jobs came)."""
    from gpufleet.clouds.aws.objects import Store
    from gpufleet.nodes.cloud import channel

    n = node
    mine = channel.NodeTarget("gpu", 1, "i-0watch1", "10.0.0.9")
    bucket = Store({"name": "gpufleet-w-1", "region": "us-east-1"})

    def agent_run():  # what the agent's run does with the slot (node_agent._run)
        said = node_agent.slot_said(node_agent.S3(n["cfg"]), "gpu", "i-0watch1")
        node_agent.released(said.get("release") is True)
        (n["state"] / node_agent.SLURM_NAME).write_text(said["slurm_name"])

    channel.release_slot(bucket, mine, True)
    agent_run()
    assert _watch(n) == 0 and _health(n)["state"] == "ok"
    assert _updates(n) == [["update", "NodeName=gpu-1", "State=DRAIN", "Reason=gpufleet: GF-SCALE-DOWN"]]
    assert _watch(n) == 0 and len(_updates(n)) == 1  # drained for it already
    channel.release_slot(bucket, mine, False)
    agent_run()
    assert _watch(n) == 0 and _updates(n)[-1] == ["update", "NodeName=gpu-1", "State=RESUME"]


def test_a_node_a_person_gave_back_stays_drained_for_heal(node):
    """README (health): a person gives an idle node of an elastic pool back with `Reason='gpufleet: release'`, which
    heal removes; a healthy node's watch resumed every `gpufleet:` drain but a spot notice's, so the node went back to
    work within one interval and heal never removed it."""
    n = node
    (n["bin"] / "slurm-node.json").write_text(json.dumps({"state": "IDLE+DRAIN", "reason": node_watch.RELEASE}))
    assert _watch(n) == 0
    assert _health(n)["state"] == "ok" and _updates(n) == []


IB_CHECKS = """import json, os, sys
expect = json.load(sys.stdin)
here = os.path.dirname(os.path.abspath(sys.argv[0]))
with open(os.path.join(here, "given.jsonl"), "a") as f:
    f.write(json.dumps(expect.get("ib_counters")) + "\\n")
downed = int(open(os.path.join(here, "link_downed")).read())
print(json.dumps({"verdict": "pass", "ok": True, "failures": [], "unchecked": [], "checks": [],
                  "ib_counters": {"mlx5_0:1": {"link_downed": downed}}}))
"""


def test_the_watch_keeps_the_ib_counters_its_checks_read_for_the_next_run(node):
    """(review rev51e, 7) A flap is a link_downed that grew between two runs (nodecheck.checks._ib_counters): the watch
    keeps the counters its checks read (its state, IB_COUNTERS) and gives them to the next run's checks; the first run
    has none (judged since the driver loaded). The checks here are a stand-in that says what it was given."""
    n = node
    tree = json.loads((n["state"] / "applied.json").read_text())["tree"]
    bundle_path = os.path.join(tree, node_agent.VERIFY_BUNDLE)
    with open(bundle_path, "w") as f:
        f.write(IB_CHECKS)
    here = os.path.dirname(bundle_path)
    with open(os.path.join(here, "link_downed"), "w") as f:
        f.write("3")
    _watch(n)
    with open(os.path.join(here, "link_downed"), "w") as f:
        f.write("4")
    _watch(n)
    with open(os.path.join(here, "given.jsonl")) as f:
        given = [json.loads(line) for line in f]
    assert given == [None, {"mlx5_0:1": {"link_downed": 3}}]
    kept = json.loads((n["state"] / node_watch.IB_COUNTERS).read_text())
    assert kept == {"mlx5_0:1": {"link_downed": 4}} and oct((n["state"] / node_watch.IB_COUNTERS).stat().st_mode)[-3:] == "600"


def test_a_dcgm2_gate_does_not_pass_on_a_node_without_dcgmi(node):
    """(review rev51e, 5) health.gate dcgm2 promises `dcgmi diag -r 2` before work (issue 51 step 1; spec.Health.gate).
    Where dcgmi is not installed (software.monitoring off, or an image without DCGM: salt/monitoring installs it), checks.dcgm
    says "skip" (nodecheck/checks.py:365-366), which is not a failure and, dcgm.diag never being in the
    expectations' `required` (verify/expect.py REQUIRED_GPU), not "incomplete" either: the gate PASSES without the
    diagnostic it names, and the node is resumed into Slurm."""
    n = node
    (n["bin"] / "dcgmi").unlink()
    (n["state"] / "gate.json").write_text(json.dumps({"level": "dcgm2", "passed": None}))
    (n["bin"] / "slurm-node.json").write_text(json.dumps({"state": "IDLE+DRAIN",
                                                           "reason": "gpufleet: GF-GATE dcgm2 not passed yet"}))
    _watch(n)
    h = _health(n)
    assert h["gate"]["passed"] is not True, (f"the dcgm2 gate passed on a node without dcgmi (health {h['state']}, "
                                             f"Slurm: {_updates(n)[-1][2:] if _updates(n) else 'untouched'})")
    assert h["state"] == "gating" and ("GF-TOOL-FAILED", "dcgm.diag") in [(f["code"], f["check"]) for f in h["faults"]]
    assert [u[2] for u in _updates(n)] == ["State=DRAIN"]  # still drained for its gate, now saying why


def test_an_aws_scheduled_reboot_a_week_away_does_not_drain_the_node_for_that_week(node):
    """(review rev51e, 3) AWS schedules instance events days ahead: NotBefore is "the earliest scheduled start time",
    an event with a NotBeforeDeadline can be moved up to that deadline, and a reschedule must start "at least 60
    minutes from the current time" (docs.aws.amazon.com/AWSEC2/latest/APIReference/API_InstanceStatusEvent.html;
    .../UserGuide/reschedule-event.html, read 2026-11-28); a system-reboot is even cleared by a user's own reboot
    (API_InstanceMaintenanceOptions rebootMigration). The watch drains the node the moment the event is listed and
    calls it "interrupted" (node_watch.py aws_notice, :140-147; verdict, :445-449): a GPU node sits drained and idle
    for the whole week (on_fault isolate, the default, or a reserved node), or heal terminates it at once (replace)."""
    n = node
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
    assert h["state"] == "ok" and h["notice"]["kind"] == "system-reboot"  # recorded, as a risk
    # within the lead time (an hour before NotBefore) it drains, and the node says "maintenance": its VM comes back
    soon = dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=30)
    n["meta"].routes[AWS_SCHEDULED] = (200, json.dumps([{
        "NotBefore": soon.strftime("%d %b %Y %H:%M:%S GMT"), "Code": "system-reboot", "Description": "scheduled reboot",
        "EventId": "instance-event-0d59937288b749b32", "State": "active",
        "NotAfter": (soon + dt.timedelta(minutes=17)).strftime("%d %b %Y %H:%M:%S GMT")}]).encode())
    assert _watch(n) == 1
    assert _health(n)["state"] == "maintenance" and _updates(n)[-1][2] == "State=DRAIN"
    # back from its reboot: the event is in the history, none is scheduled; the watch resumes the node
    n["meta"].routes[AWS_SCHEDULED] = (200, b"[]")
    assert _watch(n) == 0 and _health(n)["state"] == "ok" and _updates(n)[-1][2] == "State=RESUME"


def test_a_retirement_within_the_lead_time_is_interrupted_and_the_notice_lists_agree():
    """instance-retirement takes the VM for good: within MAINTENANCE_LEAD_S it is "interrupted" (heal replaces it);
    the watch (stdlib only, on the node) and the controller's reader keep the same list of VMs that come back."""
    from gpufleet.nodes import health as hl

    soon = node_watch.utc_z(dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=20))
    later = node_watch.utc_z(dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=10))
    gate = {"level": "quick", "passed": True}
    assert node_watch.verdict({"cloud": "aws", "kind": "instance-retirement", "at": soon}, gate, [])[0] == "interrupted"
    assert node_watch.verdict({"cloud": "aws", "kind": "instance-retirement", "at": later}, gate, []) == ("ok", None)
    assert node_watch.COMES_BACK == hl.REBOOT_NOTICES and set(node_watch.COMES_BACK) <= set(hl.NOTICES)


def test_a_spot_notice_drains_the_node_while_a_slow_status_write_is_under_way(node, monkeypatch):
    """(review rev51e, 4) GCP gives a preempted VM 30 s (instance/preempted,
    cloud.google.com/compute/docs/instances/preemptible); the watch reads the notice every NOTICE_POLL_S on its own
    thread, but acts on it under Run.lock, which the checks' say() holds across the status write: put_status retries
    429/5xx/no answer after 1+2+4+8+16 s, each try up to 30 s (node_agent.RETRY_DELAYS, http timeout), so a
    throttled or slow bucket (Cloud Storage's one write a second per object) holds the spot drain for minutes, past
    the VM's end. Here the status write is held until the drain is seen (10 s at most): the drain must not wait for
    it."""
    n = node
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


def test_a_maintenance_drain_the_notice_thread_made_is_never_undone_by_the_checks_older_word(tmp_path, monkeypatch):
    """rev51f 2: the notice's thread drains a node the cloud takes "at once, outside any lock" (node_watch.Run.poll), while
    the checks' thread says its own word (Run.checked -> Run.say -> say -> slurm_drain) from a snapshot of the notice it
    took BEFORE that drain (Run.say copies notice/unread/faults under ``mu`` and releases it). For a maintenance notice
    the checks' word is "ok, no notice": slurm_drain(None, KEPT[:1] + (RELEASE,)) keeps only GF-SPOT-NOTICE drains, so
    it finds the node drained for GF-MAINTENANCE-NOTICE and sends State=RESUME. slurmctld may start a job on it before
    the writer thread drains it again, an hour (MAINTENANCE_LEAD_S) or less before a reboot that kills it: the very
    thing the drain is for. Here the interleaving is forced through scontrol: the notice's drain lands between the
    checks' snapshot and their `scontrol show node`."""
    from gpufleet.clouds import node_agent, node_watch

    monkeypatch.setattr(node_agent, "STATE_DIR", str(tmp_path))
    monkeypatch.setattr(node_watch, "TEXTFILE_DIR", str(tmp_path / "no-node-exporter"))
    monkeypatch.setattr(node_watch, "NOTICE_POLL_S", 0.05)
    monkeypatch.setattr(node_watch, "slurm_name", lambda: "gpu-0")
    monkeypatch.setattr(node_agent, "node_id", lambda cfg: "i-0watch1")
    monkeypatch.setattr(node_agent, "put_status", lambda *a, **k: None)
    monkeypatch.setattr(node_agent, "STORES", {"aws": lambda cfg: None})
    at = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    notice = {"cloud": "aws", "kind": "system-reboot", "at": at}
    go, drained = threading.Event(), threading.Event()
    monkeypatch.setattr(node_watch, "read_notice", lambda cloud, memo=None: (notice if go.is_set() else None, None))
    slurm = {"State": "IDLE", "Reason": ""}
    updates = []
    main = threading.current_thread()

    def scontrol(*args):
        if args[0] == "show":
            if threading.current_thread() is main and not go.is_set():
                go.set()  # the cloud's notice arrives now, after the checks took their snapshot
                drained.wait(10)
            line = f"NodeName=gpu-0 State={slurm['State']}"
            return line + (f" Reason={slurm['Reason']} [slurm@2026-11-28T01:00:00]" if slurm["Reason"] else ""), None
        words = dict(a.split("=", 1) for a in args[1:])
        updates.append(words["State"] + (f" {words['Reason']}" if "Reason" in words else ""))
        slurm.update({"State": "IDLE+DRAIN", "Reason": words.get("Reason", "")} if words["State"] == "DRAIN"
                     else {"State": "IDLE", "Reason": ""})
        if words["State"] == "DRAIN":
            drained.set()
        return "", None

    monkeypatch.setattr(node_watch, "scontrol", scontrol)
    run = node_watch.Run({"cloud": "aws", "cluster": "w", "pool": "gpu"}, 60, {"level": "quick", "passed": True})
    poller = threading.Thread(target=run.poll, daemon=True)
    poller.start()
    try:
        run.checked([], False)
    finally:
        run.done.set()
        poller.join(5)
    assert updates and updates[0].startswith("DRAIN gpufleet: GF-MAINTENANCE-NOTICE"), updates
    assert "RESUME" not in updates, f"the checks' older word resumed the node the notice had drained: {updates}"


def test_an_aws_instance_stop_soon_is_acted_on_behind_an_active_reboot_weeks_away(monkeypatch):
    """rev51f 3: node_watch.aws_notice returns the FIRST active entry of events/maintenance/scheduled and takes() then
    judges that one alone. IMDS gives a JSON list (EC2 User Guide, "Scheduled events for your instances", Instance
    metadata; DescribeInstanceStatus's Events is a list per instance, API_InstanceStatusEvent): an instance can have a
    system-reboot scheduled weeks ahead and an instance-stop (or instance-retirement) due sooner. With the reboot first
    in the list the stop due in 20 minutes is read as "a reboot in 14 days": no drain, no 'interrupted', and the VM
    stops under its jobs. The soonest active event decides (and a VM-gone one over a comes-back one at a tie)."""
    from gpufleet.clouds import node_agent, node_watch

    now = dt.datetime.now(dt.timezone.utc)
    gmt = "%d %b %Y %H:%M:%S GMT"
    events = [{"Code": "system-reboot", "Description": "scheduled reboot", "EventId": "instance-event-0d59937288b749b32",
               "NotBefore": (now + dt.timedelta(days=14)).strftime(gmt),
               "NotAfter": (now + dt.timedelta(days=14, hours=2)).strftime(gmt), "State": "active"},
              {"Code": "instance-stop", "Description": "The instance is running on degraded hardware",
               "EventId": "instance-event-0a1b2c3d4e5f60718", "NotBefore": (now + dt.timedelta(minutes=20)).strftime(gmt),
               "State": "active"}]
    said = {"/latest/meta-data/events/maintenance/scheduled": json.dumps(events)}
    monkeypatch.setattr(node_agent, "aws_imds", lambda path, missing=False: said.get(path))
    notice, unread = node_watch.read_notice("aws")
    assert unread is None, unread
    assert node_watch.takes(notice), f"an instance-stop due in 20 minutes is not acted on: the watch read {notice}"
    assert node_watch.verdict(notice, {"passed": True, "level": "quick"}, [])[0] == "interrupted", notice


def test_an_azure_terminate_under_way_is_acted_on_behind_a_reboot_scheduled_next_week(monkeypatch):
    """rev51f 3, Azure's side: azure_notice took the first of the VM's events (a Preempt first), so a Reboot a week
    ahead listed before a Terminate already started (NotBefore empty once started: Scheduled Events for Linux VMs)
    was read as "a reboot next week": no drain. The soonest event decides, an empty NotBefore being now."""
    week = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=7)).strftime("%a, %d %b %Y %H:%M:%S GMT")
    said = {node_agent.AZURE_IMDS + AZURE_NAME.removeprefix("/metadata"): (200, {}, b"gpu_3"),
            node_agent.AZURE_IMDS + AZURE_EVENTS.removeprefix("/metadata"): (200, {}, azure_events(
                ("Reboot", ["gpu_3"], week), ("Terminate", ["gpu_3"], "")))}
    monkeypatch.setattr(node_agent, "http", lambda method, url, headers=None, body=None, timeout=30: said[url])
    notice, unread = node_watch.read_notice("azure")
    assert unread is None and notice == {"cloud": "azure", "kind": "Terminate", "at": None}, (notice, unread)
    assert node_watch.verdict(notice, {"passed": True, "level": "quick"}, [])[0] == "interrupted"

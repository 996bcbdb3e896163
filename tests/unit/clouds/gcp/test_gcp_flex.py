"""A GCP pool on flex-start VMs (clouds.gcp.flexstart): the plan's template, group and resize
request; the reader through google-cloud-compute against the Compute fake's resize requests and
managed instances (fakes/gcp.py); its refusals as failover reads them; the stack's checks; reap
finding a leaked group and template by their description."""

import datetime as dt
import json

import pytest

from gpufleet import stacks
from gpufleet.clouds.base import refusal_in
from gpufleet.clouds.gcp import flexstart, refusals
from gpufleet.clouds.gcp.tags import describe, labels
from gpufleet.clouds.tags import Cluster
from gpufleet.engine import plan as planner
from gpufleet.errors import SpecErrors

from conftest import cli

ZONE = "us-central1-a"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFjtZCMk8DLg9Gw3q44fZDXDQHKWHrf7Wb55hmdcfA0A x"


def stack_text(pool: str) -> str:
    return f"name: flex\nowner: o\naccess: {{public_key: '{KEY}'}}\npools:\n  - {pool}\n"


A3 = "{name: h, provider: gcp, region: us-central1, zone: us-central1-a, instance_type: a3-highgpu-8g, nodes: 4, " \
     "flex_start: {run_hours: 24, wait_minutes: 90}}"


def _of(p, typ):
    return [r for r in p.cloud_resources if r.type == typ]


def test_a_flex_start_pool_is_a_template_a_group_and_one_resize_request_for_every_vm(cat, write):
    p = planner.plan(stacks.load(write("f.yaml", stack_text(A3)), cat), cat, workers=1)
    (tmpl,) = _of(p, "gcp:compute/instanceTemplate:InstanceTemplate")
    assert tmpl.inputs["scheduling"] == {"provisioningModel": "FLEX_START", "maxRunDuration": {"seconds": 86400},
                                         "instanceTerminationAction": "DELETE", "onHostMaintenance": "TERMINATE",
                                         "automaticRestart": False}
    assert tmpl.inputs["reservationAffinity"] == {"type": "NO_RESERVATION"}
    assert "startup-script" in tmpl.inputs["metadata"]  # the nodes configure themselves as any other pool's
    (group,) = _of(p, "gcp:compute/instanceGroupManager:InstanceGroupManager")
    assert group.inputs["zone"] == ZONE and "targetSize" not in group.inputs  # 0: the request sizes it
    assert group.inputs["instanceLifecyclePolicy"] == {"defaultActionOnFailure": "DO_NOTHING"}
    assert group.inputs["versions"][0]["instanceTemplate"].startswith("projects/")
    (request,) = _of(p, "gcp:compute/resizeRequest:ResizeRequest")
    assert request.inputs["resizeBy"] == 4 and request.inputs["requestedRunDuration"] == {"seconds": "86400"}
    (nodes,) = _of(p, flexstart.KIND)
    assert nodes.inputs["wait_s"] == 90 * 60 and not _of(p, "gcp:gpufleet:BulkInstances")
    assert len(p.outputs["pools"]["h"]["private_ips"]) == 4


def test_a_flex_start_vm_is_one_gcp_makes_and_it_waits_for(gcp):
    from gpufleet.clouds.gcp.api import GcpApi

    gcp.flex_group(ZONE, "flex-h", "flex-h-flex", 2, "SUCCEEDED")
    props = {"zone": ZONE, "group": "flex-h", "request": "flex-h-flex", "nodes": 2, "wait_s": 0, "public": False}
    out = flexstart.read_nodes(props, GcpApi())
    assert len(out["node_ids"]) == 2 and out["private_ips"] == ["10.1.0.2", "10.1.0.3"] and out["public_ips"] is None


def test_a_failed_request_is_refused_with_its_error_and_a_wait_that_runs_out_moves_on(gcp):
    from gpufleet.clouds.gcp.api import GcpApi

    said = "The zone 'projects/p/zones/us-central1-a' does not have enough resources available to fulfill the request."
    gcp.flex_group(ZONE, "g1", "r1", 2, "FAILED", {"errors": [{"code": "ZONE_RESOURCE_POOL_EXHAUSTED", "message": said}]})
    with pytest.raises(Exception) as e:
        flexstart.read_nodes({"zone": ZONE, "group": "g1", "request": "r1", "nodes": 2, "wait_s": 0}, GcpApi())
    r = refusal_in(refusals.RULES, str(e.value))
    assert (r.code, r.scope) == ("ZONE_RESOURCE_POOL_EXHAUSTED", "zone")

    gcp.flex_group(ZONE, "g2", "r2", 2, "ACCEPTED")
    times = [0.0, 10.0, 20.0]  # then 95 minutes on: the wait is over

    def clock():
        return times.pop(0) if times else 95 * 60.0

    slept = []
    with pytest.raises(Exception) as e:
        flexstart.read_nodes({"zone": ZONE, "group": "g2", "request": "r2", "nodes": 2, "wait_s": 90 * 60},
                             GcpApi(), clock=clock, sleep=slept.append)
    assert "still ACCEPTED after 90 min" in str(e.value) and slept == [flexstart.POLL_S]
    r = refusal_in(refusals.RULES, str(e.value))
    assert (r.code, r.scope, r.kind) == ("FLEX_START_NOT_PROVISIONED", "zone", "capacity")


@pytest.mark.parametrize("pool, key, said", [
    (A3.replace("nodes: 4,", "nodes: 4, spot: true,"), "pools[0]", "two provisioning models"),
    (A3.replace("a3-highgpu-8g", "n1-standard-8+1xT4"), "pools[0].flex_start", "accelerator-optimized"),
    (A3.replace("run_hours: 24", "run_hours: 200"), "pools[0].flex_start.run_hours", "less than or equal to 168"),
    ("{name: a, provider: aws, region: us-east-1, instance_type: p5.48xlarge, flex_start: {run_hours: 8}}",
     "pools[0].flex_start", "GCP's Dynamic Workload Scheduler"),
])
def test_a_flex_start_the_cloud_cannot_give_is_said_with_its_key(cat, write, pool, key, said):
    with pytest.raises(SpecErrors) as e:
        stacks.load(write("bad.yaml", stack_text(pool)), cat)
    assert [(x.key, said in x.message) for x in e.value.errors] == [(key, True)], e.value.errors


def test_reap_finds_a_leaked_flex_start_group_and_template_by_their_description(gcp, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("PULUMI_BACKEND_URL", "file://" + str(tmp_path / "state"))
    cl = Cluster("gone", "gone", "o@example.com", dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc))
    desc, lab = describe(cl.tags("h")), labels(cl.tags("h"))
    gcp.add("instanceGroupManagers", f"zones/{ZONE}", "gone-h", description=desc, targetSize=2)
    gcp.add("instanceTemplates", "global", "gone-h-abc", description=desc, properties={"labels": lab})
    r = cli("--json", "reap", "--provider", "gcp", "--grace", "0", "--yes")
    assert not gcp.has("instanceGroupManagers", "gone-h") and not gcp.has("instanceTemplates", "gone-h-abc"), r.output
    deletes = [p for m, p in gcp.calls if m == "DELETE"]
    assert deletes.index(next(d for d in deletes if "instanceGroupManagers" in d)) < \
        deletes.index(next(d for d in deletes if "instanceTemplates" in d))  # the group first: it uses the template


def test_a_flex_start_pool_is_checked_against_the_preemptible_gpu_quota(gcp, cat, write):
    """Flex-start VMs count against the preemptible quota, as Spot VMs do ("Preemptible quota is charged",
    the consumption table of cloud.google.com/cluster-director/docs/choose-consumption-option, and
    compute/docs/instances/provisioning-models: "preemptible quota is consumed", read 2026-11)."""
    path = write("f.yaml", stack_text(A3))
    gcp.region_quotas["us-central1"] = [{"metric": "NVIDIA_H100_GPUS", "limit": 0, "usage": 0},
                                        {"metric": "PREEMPTIBLE_NVIDIA_H100_GPUS", "limit": 32, "usage": 0}]
    r = cli("--json", "check", path)
    assert r.exit_code == 0, r.output
    (line,) = [x for x in json.loads(r.stdout)["quotas"] if x["code"] != "GPUS_ALL_REGIONS"]
    assert (line["code"], line["needed"]) == ("PREEMPTIBLE_NVIDIA_H100_GPUS", 32)
    gcp.region_quotas["us-central1"][1]["usage"] = 8
    r = cli("--json", "check", path)
    data = json.loads(r.stdout)
    assert r.exit_code == 1 and data["quota"] == "PREEMPTIBLE_NVIDIA_H100_GPUS" and data["available"] == 24


A4 = "{name: b, provider: gcp, region: us-central1, zone: us-central1-b, instance_type: a4-highgpu-8g, nodes: 2}"


def test_an_a4_pool_on_demand_is_refused_with_the_models_google_sells_it_in(cat, write):
    with pytest.raises(SpecErrors) as e:
        stacks.load(write("a4.yaml", stack_text(A4)), cat)
    (err,) = e.value.errors
    assert err.key == "pools[0].instance_type" and "only reservation-bound, flex-start or spot" in err.message
    assert "flex_start" in err.hint and "spot: true" in err.hint
    r = cli("up", write("a4.yaml", stack_text(A4)), "--yes")
    assert r.exit_code == 2 and "not on demand" in r.output and "Traceback" not in r.output
    for model in ("spot: true", "flex_start: {run_hours: 24}"):
        stacks.load(write("ok.yaml", stack_text(A4.replace("nodes: 2}", f"nodes: 2, {model}}}"))), cat)


def test_an_a4_pool_boots_from_hyperdisk_and_a_reserved_one_is_reservation_bound(cat, write):
    """A4 and A3 Ultra boot only from Hyperdisk Balanced; VMs in their (future) reservations are
    RESERVATION_BOUND. The request is read back through google-cloud-compute's own types, whose enums
    refuse a name the API does not have."""
    from google.cloud import compute_v1

    flex = planner.plan(stacks.load(write("f.yaml", stack_text(A4.replace("nodes: 2}", "nodes: 2, flex_start: "
                                                                            "{run_hours: 24}}"))), cat), cat, workers=1)
    (tmpl,) = _of(flex, "gcp:compute/instanceTemplate:InstanceTemplate")
    assert [d["diskType"] for d in tmpl.inputs["disks"]] == ["hyperdisk-balanced"]
    (disk,) = [x for x in flex.spend.lines if x.line == "volumes"]
    assert disk.priced and "hyperdisk-balanced" in disk.what  # the bill prices the disk the VMs boot from
    from gpufleet.clouds import candidates
    from gpufleet.engine.program import layout

    reserved = A4.replace("nodes: 2}", "nodes: 2, reservations: [{id: a4-calendar-block, zone: us-central1-b}]}")
    stack = stacks.load(write("r.yaml", stack_text(reserved)), cat)
    first = candidates.for_pool(stack, stack.pools[0], cat).ordered[0]  # what `up` tries first: the reservation
    p = planner.plan(stack, cat, workers=1, lay=layout(stack, cat, {"b": first}))
    (bulk,) = _of(p, "gcp:gpufleet:BulkInstances")
    props = bulk.inputs["properties"]
    assert props["disks"][0]["initializeParams"]["diskType"] == "hyperdisk-balanced"
    parsed = compute_v1.InstanceProperties.from_json(json.dumps({k: props[k] for k in ("scheduling",
                                                                                       "reservationAffinity")}))
    assert parsed.scheduling.provisioning_model == "RESERVATION_BOUND"
    assert parsed.scheduling.instance_termination_action == "DELETE"
    assert parsed.reservation_affinity.consume_reservation_type == "SPECIFIC_RESERVATION"
    assert list(parsed.reservation_affinity.values) == ["a4-calendar-block"]
    places = p.pools[0].failover["candidates"]
    assert [c["reservation"] for c in places] == ["a4-calendar-block"]  # no open market on demand after it
    assert "not ondemand" not in json.dumps(p.pools[0].failover) and any(
        "not on demand" in d["why"] for d in p.pools[0].failover["dropped"])


def test_a_pool_in_its_reservation_is_held_to_no_gpu_quota(gcp, cat, write, tmp_path):
    """Google's consumption table (cloud.google.com/cluster-director/docs/choose-consumption-option and
    ai-hypercomputer/docs/consumption-models, read 2026-11): future reservations in calendar mode, "No
    quota is charged"; AI Hypercomputer future reservations, "Quota is automatically increased before
    capacity is delivered". Before, a reserved A4 pool was held to NVIDIA_B200_GPUS: `check` exit 1 and
    the failover preflight skipped its only place (NoPlaceLeft)."""
    from gpufleet.nodes.cloud import failover
    from gpufleet.nodes.run import Run
    from gpufleet.state.registry import Registry

    gcp.region_quotas["us-central1"] = [{"metric": "NVIDIA_B200_GPUS", "limit": 0, "usage": 0},
                                        {"metric": "PREEMPTIBLE_NVIDIA_B200_GPUS", "limit": 0, "usage": 0}]
    gcp.project_quotas.append({"metric": "GPUS_ALL_REGIONS", "limit": 0, "usage": 0})
    path = write("r.yaml", stack_text(A4.replace("nodes: 2}", "nodes: 2, reservations: [{id: a4-calendar-block, "
                                                             "zone: us-central1-b}]}")))
    r = cli("--json", "check", path)
    assert r.exit_code == 0, r.output
    (line,) = json.loads(r.stdout)["quotas"]
    assert (line["quota"], line["needed"], line["ok"]) == ("reservation a4-calendar-block", 16, True)
    assert "no GPU quota is charged" in line["note"]
    stack = stacks.load(path, cat)
    plans = failover.places(stack, cat)
    assert failover.preflight(Run(stack, cat, "flex", Registry(tmp_path / "r.db")), plans) == []
    assert [c.reservation.id for c in plans["b"].ordered] == ["a4-calendar-block"]


def test_a_bulk_pool_keeps_its_request_in_its_stack_output_and_a_flex_start_pool_none(cat, write):
    """Compute Engine keeps no bulkInsert request: the pool's stack output does (``request``), the BulkInstances'
    own InstanceProperties in its first compact policy, for heal to ask again when no VM of the pool is left."""
    bulk = A3.replace(", flex_start: {run_hours: 24, wait_minutes: 90}", "")
    p = planner.plan(stacks.load(write("b.yaml", stack_text(bulk)), cat), cat, workers=1)
    (nodes,) = _of(p, "gcp:gpufleet:BulkInstances")
    kept = p.outputs["pools"]["h"]["request"]
    assert kept["zone"] == ZONE and kept["properties"] == {**nodes.inputs["properties"],
                                                           "resourcePolicies": [nodes.inputs["policies"][0]["name"]]}
    flex = planner.plan(stacks.load(write("f.yaml", stack_text(A3)), cat), cat, workers=1)
    assert flex.outputs["pools"]["h"]["request"] is None

"""A GCP pool's VMs (clouds.gcp.pool_vms.BulkInstances) through google-cloud-compute's REST transport
against the Compute fake's bulkInsert (fakes/gcp.py): every group or none, a refusal worded so that
the refusal table classifies it, and the VMs read back in the order of their names."""

import pytest

from gpufleet.clouds.base import refusal_in
from gpufleet.clouds.gcp import pool_vms as nodes
from gpufleet.clouds.gcp import refusals
from gpufleet.clouds.gcp.rules import MAX_COMPACT_VMS

ZONE = "us-central1-a"


def _props(n: int, policies: int) -> dict:
    return {"zone": ZONE, "region": "us-central1", "project": None, "public": False,
            "policies": [nodes.placement_policy(f"big-h-compact-{k}", "gpufleet:cluster=big") for k in range(policies)],
            "names": [f"big-h-{i}" for i in range(n)],
            "properties": {"machineType": "a3-highgpu-8g", "labels": {"gpufleet-cluster": "big"},
                           "networkInterfaces": [{"subnetwork": "regions/us-central1/subnetworks/big",
                                                  "nicType": "GVNIC"}]}}


@pytest.fixture
def api(gcp):
    from gpufleet.clouds.gcp.api import GcpApi

    return GcpApi()


def test_every_group_lands_and_the_outputs_follow_the_names(gcp, api):
    props = _props(MAX_COMPACT_VMS + 1, 2)
    out = nodes.create_nodes(props, api)
    assert len(out["node_ids"]) == len(out["private_ips"]) == MAX_COMPACT_VMS + 1 and out["public_ips"] is None
    posts = [p for m, p in gcp.calls if m == "POST" and p.endswith("/bulkInsert")]
    assert len(posts) == 2  # one request per placement policy
    by_name = {i["name"]: i for (c, _, _), i in gcp.items.items() if c == "instances"}
    assert out["node_ids"] == [by_name[n]["id"] for n in props["names"]]
    assert [p for (c, _, p) in gcp.items if c == "resourcePolicies"] == ["big-h-compact-0", "big-h-compact-1"]
    placed = [by_name[n]["resourcePolicies"][0].rsplit("/", 1)[-1] for n in props["names"]]
    assert placed == ["big-h-compact-0"] * MAX_COMPACT_VMS + ["big-h-compact-1"]
    nodes.BulkInstancesProvider().delete("x", props)  # what `pulumi destroy` calls: the VMs, then the policies
    assert not any(c in ("instances", "resourcePolicies") for c, _, _ in gcp.items)


def test_a_refused_later_group_takes_the_earlier_groups_vms_with_it(gcp, api):
    gcp.zone_capacity[ZONE] = MAX_COMPACT_VMS + 10  # the first 150 fit, the second group's 20 do not
    props = _props(MAX_COMPACT_VMS + 20, 2)
    with pytest.raises(Exception) as e:
        nodes.create_nodes(props, api)
    # all or nothing: the first 150 VMs and both policies are gone
    assert not any(c in ("instances", "resourcePolicies") for c, _, _ in gcp.items)
    r = refusal_in(refusals.RULES, str(e.value))
    assert (r.code, r.scope, r.kind) == ("ZONE_RESOURCE_POOL_EXHAUSTED", "zone", "capacity"), str(e.value)


def test_a_pool_missing_vms_is_a_failure_that_names_one(gcp, api):
    props = _props(3, 0)
    nodes.create_nodes(props, api)
    api.delete_instances(ZONE, ["big-h-1"])
    with pytest.raises(Exception, match=r"1 of 3 VMs .* not in us-central1-a \(first: big-h-1\)"):
        nodes.read_nodes(props, api)

"""Review rev51 (session 3): failing evidence for findings on the GCP replacement (not product code)."""

import pytest
from test_heal_gcp import REGION, api, pool, vms  # noqa: F401 - the Compute fake's fixture comes from conftest

pytest.importorskip("pulumi")


def test_a_preempted_one_node_spot_pool_is_replaced(gcp):
    """A spot pool of one VM, preempted (instanceTerminationAction DELETE: the VM is gone): the issue's step 4 wants
    a replacement "once the VM is gone"; the request is read from a VM of the pool, and none is left."""
    _, ids = pool(1, spot=True)
    api().remove_nodes(REGION, cluster="hl", pool="gpu", node_ids=ids)  # as the preemption leaves it
    assert api().gone_nodes(REGION, cluster="hl", pool="gpu", node_ids=ids) == set(ids)
    got = api().replace_node(REGION, cluster="hl", pool="gpu", node_id=ids[0])
    assert got["id"] in vms(gcp)


def test_every_vm_of_a_spot_pool_preempted_at_once_is_replaced(gcp):
    """GCP preempts a zone's spot capacity together: a pool whose VMs all went has no model VM left either."""
    _, ids = pool(2, spot=True)
    api().remove_nodes(REGION, cluster="hl", pool="gpu", node_ids=ids)
    got = api().replace_node(REGION, cluster="hl", pool="gpu", node_id=ids[0])
    assert got["id"] in vms(gcp)


def test_a_reserved_one_node_pool_whose_create_was_refused_is_asked_again(gcp):
    """release_first (a reserved pool): the old VM is deleted first; the bulkInsert refused, the next pass must be
    able to ask again, but the pool has no VM left to read its request from."""
    from gpufleet.errors import CapacityError

    _, ids = pool(1)
    gcp.zone_capacity["us-central1-a"] = 0
    with pytest.raises(CapacityError):
        api().replace_node(REGION, cluster="hl", pool="gpu", node_id=ids[0], release_first=True)
    assert vms(gcp) == {}  # the old VM went first, nothing was made
    gcp.zone_capacity.pop("us-central1-a")
    got = api().replace_node(REGION, cluster="hl", pool="gpu", node_id=ids[0], release_first=True)
    assert got["id"] in vms(gcp)

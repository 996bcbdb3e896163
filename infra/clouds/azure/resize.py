"""A pool's scale set made bigger or smaller outside Pulumi's state (`gpufleet scale`, `heal` for an elastic pool).

More VMs: the scale set's ``sku.capacity`` raised by ``count`` (Virtual Machine Scale Sets - Update: the new VMs
are made from its model, in its zones), all or nothing: a scale-out that failed or made fewer is rolled back by
the ids of the VMs it made and its capacity set back (``replace.roll_back``), never left to the scale-in
policy, which could pick a healthy VM. Fewer VMs: exactly the VMs named, each checked to be the tagged scale
set's, deleted by instance id (Virtual Machine Scale Sets - Delete Instances, which lowers the capacity with
them). learn.microsoft.com/rest/api/compute/virtual-machine-scale-sets/update and /delete-instances, api-version
2024-07-01, read 2026-11. The next `up` asks for the capacity these left: its program sends the pool's recorded size
(``spec.Pool.running``) as ``sku.capacity`` in the scale set's whole PUT (no ``ignore_changes``: a whole PUT would
send Pulumi's stale capacity), and `up` refuses an edit of the bounds under the recorded size, which would let
Azure's scale-in policy pick the VMs to delete (``fleet.bounds``).
"""

from __future__ import annotations

import time

from azure.core.exceptions import HttpResponseError

from gpufleet.clouds.azure import refusals, replace
from gpufleet.clouds.base import RETRIED_LATER, refusal_in
from gpufleet.clouds.tags import TAG_PREFIX
from gpufleet.errors import GpufleetError

SCALE_SETS = "Microsoft.Compute/virtualMachineScaleSets"


def pool_scale_set(api, cluster: str, pool: str, region: str) -> dict:
    """The pool's scale set, found by its tags among the subscription's tagged resources, read whole (its tags
    checked again on the scale set itself)."""
    flt = f"tagName eq '{TAG_PREFIX}cluster' and tagValue eq '{cluster}'"
    for x in api.rm.resources.list(filter=flt):
        if (x.type or "").lower() != SCALE_SETS.lower() or (x.location or "").lower() != region.lower():
            continue
        got = api._get(x.id, replace.API)
        tags = got.get("tags") or {}
        if (tags.get(TAG_PREFIX + "cluster"), tags.get(TAG_PREFIX + "pool")) == (cluster, pool):
            return {**got, "id": got.get("id") or x.id}
    raise GpufleetError(f"azure: no scale set in {region} is tagged for pool {pool} of cluster {cluster}",
                        "run `gpufleet up` for the pool")


def add_nodes(api, *, cluster: str, pool: str, region: str, count: int, market: str | None = None, on_launch=None,
              wait_s: float = replace.WAIT_S, sleep=time.sleep) -> list[dict]:
    """``count`` more VMs in the pool's scale set: one {"id", "private_ip", "zone", "vm_uid", "fleet_id"} each.
    Refused (nothing left: the VMs it made deleted by id, the capacity set back) when it makes fewer."""
    if market is not None:  # a scale set's VMs are all of its model's priority: another market is another scale set
        raise GpufleetError(f"azure: pool {pool}'s scale set makes VMs of its own priority only, not {market}",
                            "scale the pool as it is")
    vmss = pool_scale_set(api, cluster, pool, region)
    scale_set, sku = vmss["id"], vmss["sku"]
    before = replace.instances(api, scale_set)
    want = int(sku["capacity"]) + count
    try:
        replace.send(api, "PATCH", scale_set, {"sku": {**sku, "capacity": want}})
        failed = (replace.settled(api, scale_set, wait_s, sleep).get("properties") or {}).get("provisioningState") \
            == "Failed"
    except HttpResponseError as e:
        failed = str(e)
    made = sorted(replace.instances(api, scale_set) - before, key=int)
    for m in made:
        if on_launch is not None:
            on_launch(f"{scale_set}/virtualMachines/{m}")
    if failed or len(made) < count:
        replace.roll_back(api, scale_set, made, want - count)
        said = failed if isinstance(failed, str) else f"the scale-out made {len(made)} of {count} VM(s)"
        found = refusal_in(refusals.RULES, said)
        message = f"azure: no {count} more VM(s) for pool {pool}" + (" (those made deleted again)" if made else "") + \
            f": {said[:300]}"
        if found is None or found.kind not in RETRIED_LATER:  # not a shortage: asking again would not help
            raise GpufleetError(message, "the scale set is left as it was; it needs a look")
        raise replace.Refused(message, found.code, "the pool is left as it was: ask again later, or another size")
    listed = {n["instance_id"]: n for n in api.scale_set_nodes(scale_set)}
    return [{"id": listed[m]["id"] if m in listed else f"{scale_set}/virtualMachines/{m}",
             "private_ip": (listed.get(m) or {}).get("private_ip"), "zone": (vmss.get("zones") or [None])[0],
             "vm_uid": (listed.get(m) or {}).get("vm_uid"), "fleet_id": vmss.get("name")} for m in made]


def remove_nodes(api, *, cluster: str, pool: str, node_ids: list[str]) -> None:
    """Exactly ``node_ids`` (VM ARM ids) deleted from their scale set, which must be tagged for the pool and hold
    each of them (none is deleted otherwise)."""
    by_set: dict[str, list[str]] = {}
    for n in node_ids:
        scale_set, _, instance = n.rpartition("/virtualMachines/")
        by_set.setdefault(scale_set, []).append(instance)
    for scale_set, instances in by_set.items():
        tags = api._get(scale_set, replace.API).get("tags") or {}
        if (tags.get(TAG_PREFIX + "cluster"), tags.get(TAG_PREFIX + "pool")) != (cluster, pool):
            raise GpufleetError(f"azure: {scale_set} is not the scale set tagged for pool {pool} of cluster {cluster}: "
                                "nothing removed", "check the registry's record (`gpufleet registry rebuild`)")
        missing = sorted(set(instances) - replace.instances(api, scale_set))
        if missing:
            raise GpufleetError(f"azure: the scale set of pool {pool} holds no VM {', '.join(missing)}: nothing removed",
                                "check the registry's record (`gpufleet registry rebuild`)")
    for scale_set, instances in by_set.items():
        replace.delete_instances(api, scale_set, instances)

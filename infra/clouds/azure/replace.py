"""One VM of a pool replaced through the pool's own scale set (`gpufleet heal`).

A pool is one Uniform scale set (``components``): its model is the pool's request. A replacement is the
scale set asked for one VM more (Virtual Machine Scale Sets - Update, ``sku.capacity``: the new VM is
made from the scale set's model, in its zones), then the faulty VM deleted by its instance id (Virtual
Machine Scale Sets - Delete Instances, which lowers the capacity by one again), so the scale set ends as
big as the pool and Pulumi's state still holds (learn.microsoft.com/rest/api/compute/virtual-machine-scale-sets
/update and /delete-instances, api-version 2024-07-01, read 2026-11). On reserved capacity (``release_first``)
the faulty VM goes first and the capacity is asked back, since its reserved slot is what the new one needs.
A refused scale-out is rolled back: any VM it left (a failed one) is deleted by its id, not by the scale
set's scale-in policy, which could pick a healthy one.
"""

from __future__ import annotations

import time

from azure.core.exceptions import HttpResponseError
from azure.core.rest import HttpRequest

from gpufleet.clouds.azure import refusals
from gpufleet.clouds.base import RETRIED_LATER, refusal_in
from gpufleet.clouds.tags import TAG_PREFIX
from gpufleet.errors import CapacityError, GpufleetError, ReplacementUnfinished

API = "2024-07-01"
WAIT_S, POLL_S = 1800.0, 10.0  # a GPU VM's allocation and boot


class Refused(CapacityError):
    """Azure made no replacement: its refusal (allocation, SKU, quota) as ARM worded it."""

    def __init__(self, message: str, code: str | None, hint: str | None = None):
        self.code = code
        super().__init__(message, hint or "the faulty node stays drained; `gpufleet heal` asks again later (backoff)")


def send(api, method: str, url: str, body: dict | None = None) -> None:
    resp = api.rm.send_request(HttpRequest(method, f"{api.endpoint}{url}", params={"api-version": API}, json=body))
    if resp.status_code >= 400:
        raise HttpResponseError(response=resp)


def instances(api, scale_set: str) -> set[str]:
    return {vm["instanceId"] for vm in api._pages(f"{scale_set}/virtualMachines", API)}


def settled(api, scale_set: str, wait_s: float, sleep) -> dict:
    """The scale set once its last operation ended (provisioningState no longer Updating)."""
    deadline = time.monotonic() + wait_s
    while True:
        got = api._get(scale_set, API)
        if (got.get("properties") or {}).get("provisioningState") != "Updating" or time.monotonic() >= deadline:
            return got
        sleep(POLL_S)


def delete_instances(api, scale_set: str, ids: list[str]) -> None:
    send(api, "POST", f"{scale_set}/delete", {"instanceIds": ids})


def roll_back(api, scale_set: str, made: list[str], capacity: int) -> None:
    """A scale-out that failed or did not end undone: the VMs it made deleted by id, then ``sku.capacity`` set back
    to ``capacity`` where it is still above it (one that failed without a VM leaves N+1, and the next pass would ask
    N+2). Only when the scale set holds no more VMs than that, so the scale-in policy has none to pick."""
    if made:
        delete_instances(api, scale_set, made)
    sku = api._get(scale_set, API).get("sku") or {}
    if int(sku.get("capacity", capacity)) > capacity and len(instances(api, scale_set)) <= capacity:
        send(api, "PATCH", scale_set, {"sku": {**sku, "capacity": capacity}})


def gone_nodes(api, *, cluster: str, pool: str, node_ids: list[str]) -> set[str]:
    """Those of ``node_ids`` (VM ARM ids) no longer in their scale set, the scale set tagged for the pool: an
    evicted spot VM is deleted and the capacity lowered with it (eviction policy Delete, "the Spot VM will be
    deleted and the corresponding capacity will be updated to reflect this": Azure SDK for .NET, EvictionPolicy.Delete,
    read 2026-11)."""
    found = set()
    for scale_set in {n.rpartition("/virtualMachines/")[0] for n in node_ids}:
        tags = api._get(scale_set, API).get("tags") or {}
        if (tags.get(TAG_PREFIX + "cluster"), tags.get(TAG_PREFIX + "pool")) != (cluster, pool):
            continue
        there = instances(api, scale_set)
        found |= {n for n in node_ids if n.rpartition("/virtualMachines/")[0] == scale_set
                  and n.rpartition("/virtualMachines/")[2] not in there}
    return found


def _market(vmss: dict) -> str:
    """The market of a scale set's VMs: its model's priority (Spot; Regular or unset: on demand)."""
    profile = (vmss.get("properties") or {}).get("virtualMachineProfile") or {}
    return "spot" if profile.get("priority") == "Spot" else "on-demand"


def replace_node(api, *, cluster: str, pool: str, node_id: str, release_first: bool = False,
                 wait_s: float = WAIT_S, sleep=time.sleep, launched: str | None = None, on_launch=None,
                 market: str | None = None) -> dict:
    """A new VM in the pool's scale set, then ``node_id`` (its ARM id) deleted: {"id", "private_ip", "zone",
    "fleet_id", "vm_uid"}. Refused when the scale-out made none. ``on_launch`` is called with the new VM's ARM id
    the moment it exists; a failure after it is ReplacementUnfinished, and a later call with ``launched`` (that
    id) finishes the replacement (the VM checked to be the scale set's) without scaling out again. ``market``
    other than the scale set's own is refused, nothing asked: a Uniform scale set makes every VM from its model,
    of its priority (mixing Spot and Regular VMs, Spot Priority Mix, is for Flexible orchestration only:
    learn.microsoft.com/azure/virtual-machine-scale-sets/spot-priority-mix, read 2026-11)."""
    scale_set, _, instance = node_id.rpartition("/virtualMachines/")
    vmss = api._get(scale_set, API)
    tags = vmss.get("tags") or {}
    if (tags.get(TAG_PREFIX + "cluster"), tags.get(TAG_PREFIX + "pool")) != (cluster, pool):
        raise GpufleetError(f"azure: {node_id} is not a VM of the scale set tagged for pool {pool} of cluster "
                            f"{cluster}: not replaced", "check the registry's record (`gpufleet registry rebuild`)")
    if market is not None and market != _market(vmss):
        raise GpufleetError(f"azure: scale set {vmss.get('name')} makes {_market(vmss)} VMs only: no {market} "
                            f"replacement for {node_id}", "a Uniform scale set's VMs all take its model's priority")
    # a VM no longer in its scale set is gone (an evicted spot VM: deleted, the capacity lowered with it): only
    # a VM more is asked, nothing deleted
    sku = vmss["sku"]
    if launched is not None:
        return _finish(api, vmss, scale_set, instance, launched, release_first)
    if release_first and instance in instances(api, scale_set):
        delete_instances(api, scale_set, [instance])
        settled(api, scale_set, wait_s, sleep)
    before = instances(api, scale_set)
    want = int(sku["capacity"]) + (0 if release_first else 1)
    try:
        send(api, "PATCH", scale_set, {"sku": {**sku, "capacity": want}})
        failed = (settled(api, scale_set, wait_s, sleep).get("properties") or {}).get("provisioningState") == "Failed"
    except HttpResponseError as e:
        failed = str(e)
    made = sorted(instances(api, scale_set) - before)
    if failed or not made:
        roll_back(api, scale_set, made, want - 1)  # what the refused scale-out left, by id, and its capacity
        said = failed if isinstance(failed, str) else "the scale-out ended Failed"
        found = refusal_in(refusals.RULES, said)
        message = f"azure: no replacement for {node_id} in pool {pool}: {said[:300]}"
        if found is None or found.kind not in RETRIED_LATER:  # not a shortage: asking again would not help
            raise GpufleetError(message, "the faulty node stays drained; the scale set needs a look")
        raise Refused(message, found.code)
    launched = f"{scale_set}/virtualMachines/{made[0]}"
    if on_launch is not None:
        on_launch(launched)
    return _finish(api, vmss, scale_set, instance, launched, release_first)


def _finish(api, vmss: dict, scale_set: str, instance: str, launched: str, release_first: bool) -> dict:
    """The faulty VM deleted (unless gone already) once its successor ``launched`` is the scale set's; any failure
    here is ReplacementUnfinished (the next pass finishes it, nothing scaled out again)."""
    owner, _, new_instance = launched.rpartition("/virtualMachines/")
    try:
        there = instances(api, scale_set)
        if owner.lower() != scale_set.lower() or new_instance not in there:
            raise GpufleetError(f"azure: {launched} is no VM of the pool's scale set {vmss.get('name')}",
                                "heal's memory named it: check `gpufleet status` and the scale set")
        if not release_first and instance in there:
            delete_instances(api, scale_set, [instance])
        new = [n for n in api.scale_set_nodes(scale_set) if n["instance_id"] == new_instance]
        if not new:
            raise GpufleetError(f"azure: {launched} is not listed by its scale set yet")
    except (GpufleetError, HttpResponseError) as e:
        said = e.message if isinstance(e, GpufleetError) else str(e)
        raise ReplacementUnfinished(f"azure: {launched} was made for pool {vmss.get('name')} in place of instance "
                                    f"{instance}, then: {said}"[:400], launched=launched) from None
    return {"id": new[0]["id"], "private_ip": new[0].get("private_ip"), "zone": (vmss.get("zones") or [None])[0],
            "fleet_id": vmss.get("name"), "vm_uid": new[0].get("vm_uid")}

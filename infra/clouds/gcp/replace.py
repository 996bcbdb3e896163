"""A GCP pool's nodes replaced, added or removed through the pool's own request (`gpufleet heal`).

A pool's VMs are made by one all-or-nothing ``instances.bulkInsert`` of the pool's InstanceProperties
(``components.instance_properties``, ``pool_vms``); Compute Engine keeps no such request (a
BulkInsertInstanceResource "is not persisted anywhere", and pulumi-gcp has no template for it). So it is read
back from a VM of the pool, the faulty one or, where that is gone, a peer, and where no VM of the pool is left,
taken from the pool's stack output, where `up` kept it (``pool_vms.kept_request``): the keys ``instance_properties``
sets, in InstanceProperties' own forms (google-cloud-compute 1.57's InstanceProperties: ``machine_type`` "only
accepts a machine type name ... a full or partial URL ... will result in an INTERNAL_ERROR";
``resource_policies`` "names, not URLs"; the boot disk's ``initializeParams`` from its Disk: ``sourceImage``,
``sizeGb``, ``type``, ``labels``), and asked again with bulkInsert in the pool's zone: the same machine, image,
disk, network, compact placement policy, scheduling (market), reservation, labels, network tags, metadata (the
bootstrap) and service account. Sources: cloud.google.com/compute/docs/reference/rest/v1/instances/bulkInsert,
.../instances and .../disks (read 2026-11).

A replacement's VM is named from the id of the VM it replaces (``successor``): a later call finds it by that
name, so whatever failed after the bulkInsert (heal's memory included) never launches a second one. Order: the
new VM first, then the old one deleted, once its own labels name the pool (the registry is a team's store: no
VM is deleted on its word alone); on reserved capacity (``release_first``) the old VM is deleted first, since
its slot is what the new one needs. A flex-start pool's VMs are its managed instance group's, not replaced here.
"""

from __future__ import annotations

import concurrent.futures
import json
import secrets

from google.api_core import exceptions as gx
from google.cloud import compute_v1

from gpufleet.clouds.base import RETRIED_LATER, refusal_in
from gpufleet.clouds.gcp import pool_vms, refusals
from gpufleet.clouds.gcp.rules import gcp_name, scheduling
from gpufleet.clouds.gcp.tags import labels
from gpufleet.clouds.tags import TAG_PREFIX
from gpufleet.errors import CapacityError, GpufleetError, ReplacementUnfinished, SuccessorGone

# what of a VM's Scheduling is the pool's request (``rules.scheduling`` sets these)
SCHEDULING = ("onHostMaintenance", "automaticRestart", "preemptible", "provisioningModel", "instanceTerminationAction")
# google-api-core's PollingFuture.result turns its RetryError into concurrent.futures.TimeoutError when the wait
# runs out (api_core/future/polling.py, google-api-core as installed, read 2026-11)
WAIT_RAN_OUT = concurrent.futures.TimeoutError
DELETE_WAIT_S = 900  # a GPU VM's deletion, when its slot is what the new one needs
MIG_METADATA = "created-by"  # set on a managed instance group's VMs (compute/docs/instance-groups, read 2026-11)


class Refused(CapacityError):
    """Compute Engine made no VM: its refusal (capacity, quota) as it worded it."""

    def __init__(self, message: str, code: str | None):
        self.code = code
        super().__init__(message, "the faulty node stays drained; `gpufleet heal` asks again later (backoff)")


def _last(url: str | None) -> str:
    return (url or "").rstrip("/").rsplit("/", 1)[-1]


def successor(cluster: str, pool: str, node_id: str) -> str:
    """The name of the VM that replaces VM ``node_id`` (its numeric id): one per replaced VM."""
    return gcp_name(cluster, pool, "r" + node_id)


def region_vms(api, region: str) -> list[dict]:
    """Every VM of the project in ``region``'s zones, as the REST API gives it (camelCase JSON): the pool's are
    picked by their labels here, so that a VM of no pool is told from one that is gone."""
    pages = api.client("InstancesClient").aggregated_list(request={"project": api.project, "max_results": 500})
    return [json.loads(compute_v1.Instance.to_json(x)) for scope, scoped in pages
            if _last(scope).startswith(region + "-") for x in scoped.instances]


def _is_pools(vm: dict, cluster: str, pool: str) -> bool:
    want = labels({TAG_PREFIX + "cluster": cluster, TAG_PREFIX + "pool": pool})
    return all((vm.get("labels") or {}).get(k) == v for k, v in want.items())


def _pools_vm(vms: list[dict], cluster: str, pool: str, node_id: str) -> dict | None:
    """The VM ``node_id`` if its own labels name the pool; None when the region holds no VM of that id (gone)."""
    for vm in vms:
        if vm["id"] == node_id:
            if not _is_pools(vm, cluster, pool):
                raise GpufleetError(f"gcp: VM {node_id} ({vm['name']}) is not labelled as a node of pool {pool} of "
                                    f"cluster {cluster}: nothing done", "check the registry's record (`gpufleet "
                                    "registry rebuild` reads it again from the clouds' labels)")
            if any(i.get("key") == MIG_METADATA for i in (vm.get("metadata") or {}).get("items") or []):
                raise GpufleetError(f"gcp: VM {vm['name']} belongs to a managed instance group (a flex-start pool): "
                                    "its group makes and deletes its VMs, not heal")
            return vm
    return None


def _model(vms: list[dict], cluster: str, pool: str, old: dict | None) -> dict | None:
    """The VM the pool's request is read from: the old one, else a running peer; None: no VM of the pool is left."""
    if old is not None:
        return old
    peers = sorted((v for v in vms if _is_pools(v, cluster, pool)), key=lambda v: (v.get("status") != "RUNNING",
                                                                                    v["name"]))
    return peers[0] if peers else None


def pool_request(api, vms: list[dict], cluster: str, pool: str, old: dict | None, market: str | None,
                 kept: dict | None) -> tuple[str, dict]:
    """(the pool's zone, its InstanceProperties): read from a VM of the pool, else from the request `up` kept
    (``kept``: ``pool_vms.kept_request``, from the pool's stack output) when none is left (a one-VM spot pool
    preempted, every spot VM of a zone reclaimed at once, a release_first delete whose create was refused)."""
    model = _model(vms, cluster, pool, old)
    if model is not None:
        return request_from(api, model, market)
    if not isinstance(kept, dict) or not isinstance(kept.get("zone"), str) or not isinstance(kept.get("properties"),
                                                                                          dict):
        raise GpufleetError(f"gcp: pool {pool} of cluster {cluster} has no VM left to read its request from, and its "
                            "stack keeps none", "run `gpufleet up` for the pool: it makes the pool's VMs anew")
    props = dict(kept["properties"])
    if market is not None:
        props["scheduling"] = scheduling(market == "spot")
    return kept["zone"], props


def properties(vm: dict, disk: dict, attached: dict, market: str | None) -> dict:
    """The pool's InstanceProperties (REST JSON) as ``vm`` and its boot ``disk`` (and the VM's AttachedDisk for it)
    show them; ``market`` "spot" / "on-demand" overrides the pool's scheduling (None: the VM's own). The disk
    type by name, as ``components`` asks it (AttachedDiskInitializeParams.disk_type, google-cloud-compute 1.57:
    for an instance template "you specify the disk type without a URL")."""
    init = {"sourceImage": disk.get("sourceImage"), "diskSizeGb": disk.get("sizeGb"),
            "diskType": _last(disk.get("type")) or None, "labels": disk.get("labels")}
    sched = vm.get("scheduling") or {}
    props = {
        "machineType": _last(vm["machineType"]),
        "disks": [{"boot": True, "autoDelete": bool(attached.get("autoDelete")),
                   "initializeParams": {k: v for k, v in init.items() if v}}],
        "networkInterfaces": [_nic(n) for n in vm.get("networkInterfaces") or []],
        "scheduling": {k: sched[k] for k in SCHEDULING if k in sched} if market is None else scheduling(market == "spot"),
        "labels": vm.get("labels") or {},
    }
    items = (vm.get("tags") or {}).get("items")
    if items:
        props["tags"] = {"items": items}
    meta = (vm.get("metadata") or {}).get("items")
    if meta:
        props["metadata"] = {"items": [{"key": i["key"], "value": i.get("value", "")} for i in meta]}
    if vm.get("serviceAccounts"):
        props["serviceAccounts"] = [{"email": s["email"], "scopes": s.get("scopes") or []} for s in vm["serviceAccounts"]]
    if vm.get("shieldedInstanceConfig"):
        props["shieldedInstanceConfig"] = dict(vm["shieldedInstanceConfig"])
    if vm.get("reservationAffinity"):
        props["reservationAffinity"] = dict(vm["reservationAffinity"])
    if vm.get("guestAccelerators"):  # by name, as InstanceProperties takes them (``rules.ACCELERATORS``)
        props["guestAccelerators"] = [{"acceleratorType": _last(a["acceleratorType"]),
                                       "acceleratorCount": a["acceleratorCount"]} for a in vm["guestAccelerators"]]
    if vm.get("resourcePolicies"):
        props["resourcePolicies"] = [_last(p) for p in vm["resourcePolicies"]]
    return props


def _nic(n: dict) -> dict:
    """A network interface as the pool asks it: its subnetwork and NIC type, an external address by type and name
    (never the old VM's addresses)."""
    out = {k: n[k] for k in ("subnetwork", "nicType") if n.get(k)}
    if n.get("accessConfigs"):
        out["accessConfigs"] = [{k: a[k] for k in ("type", "name") if a.get(k)} for a in n["accessConfigs"]]
    return out


def request_from(api, model: dict, market: str | None) -> tuple[str, dict]:
    """(the pool's zone, its InstanceProperties) read from ``model``, one of its VMs."""
    (boot,) = [d for d in model.get("disks") or [] if d.get("boot")]
    zone = _last(model["zone"])
    disk = api.client("DisksClient").get(project=api.project, zone=zone, disk=_last(boot["source"]))
    return zone, properties(model, json.loads(compute_v1.Disk.to_json(disk)), boot, market)


def _insert(api, zone: str, names: list[str], props: dict, pool: str) -> None:
    """One all-or-nothing bulkInsert of ``names``; Refused for a refusal that time may lift, GpufleetError for
    another (``api.bulk_insert`` raises Compute Engine's words, which ``refusals`` reads)."""
    try:
        api.bulk_insert(zone, pool_vms.request(names, props, None))
    except Exception as e:  # noqa: BLE001 - bulk_insert states every refusal as a plain exception
        said = str(e)
        found = refusal_in(refusals.RULES, said)
        message = f"gcp: Compute Engine made no VM for pool {pool} in {zone}: {said}"[:400]
        if found is None or found.kind not in RETRIED_LATER:  # a wrong request: asking again would not help
            raise GpufleetError(message, "the faulty node stays drained; the pool's request needs a look") from None
        raise Refused(message, found.code) from None


def _named(api, zone: str, name: str) -> dict:
    vm = api.client("InstancesClient").get(project=api.project, zone=zone, instance=name)
    return json.loads(compute_v1.Instance.to_json(vm))


def _delete(api, vm: dict) -> None:
    """Delete ``vm`` and wait for its operation: a deletion that fails (deletionProtection, an error in the
    operation) or outlasts DELETE_WAIT_S raises (google-api-core's ExtendedOperation.result)."""
    op = api.client("InstancesClient").delete(project=api.project, zone=_last(vm["zone"]), instance=vm["name"])
    op.result(timeout=DELETE_WAIT_S)


def node(vm: dict) -> dict:
    nics = vm.get("networkInterfaces") or [{}]
    return {"id": vm["id"], "private_ip": nics[0].get("networkIP"), "zone": _last(vm["zone"]),
            "fleet_id": vm["name"], "vm_uid": None}  # fleet_id: what `up` deletes by name once Pulumi remakes the pool


def replace_node(api, region: str, *, cluster: str, pool: str, node_id: str, release_first: bool = False,
                 launched: str | None = None, on_launch=None, market: str | None = None,
                 request: dict | None = None) -> dict:
    """A new VM for the pool from its own request, then ``node_id`` (its numeric id) deleted: {"id",
    "private_ip", "zone", "fleet_id", "vm_uid"}. Refused (nothing made, the old VM left as it was unless
    ``release_first``) when Compute Engine makes none. A VM no longer in the region (a preempted spot VM,
    deleted) is gone: only a VM more is asked. ``on_launch`` is called with the new VM's id the moment it
    exists; a failure after it is ReplacementUnfinished, and a later call (``launched`` or not) finishes it.
    ``request``: the pool's request as `up` kept it, asked when no VM of the pool is left (``pool_request``)."""
    vms = region_vms(api, region)
    old = _pools_vm(vms, cluster, pool, node_id)
    name = successor(cluster, pool, node_id)
    made = next((v for v in vms if v["name"] == name and _is_pools(v, cluster, pool)), None)
    if launched is not None and made is None:
        raise SuccessorGone(f"gcp: {launched}, launched for pool {pool} in place of {node_id}, is no longer in "
                            f"{region} (preempted or deleted): forgotten", "`gpufleet heal` asks for a new node "
                            "again, within the pool's max_replacements")
    if launched is not None and launched not in (made["id"], made["name"]):
        raise GpufleetError(f"gcp: {launched}, which heal's memory names as the new VM of pool {pool} in place of "
                            f"{node_id}, is not the pool's VM {name}", "check `gpufleet status` and the pool's VMs")
    if made is None:
        zone, props = pool_request(api, vms, cluster, pool, old, market, request)
        if release_first and old is not None:
            try:
                _delete(api, old)
            except WAIT_RAN_OUT:
                raise GpufleetError(f"gcp: {old['name']} of pool {pool} was not deleted within {DELETE_WAIT_S} s, "
                                    "so its slot is not free for the new VM: nothing made", "`gpufleet heal` asks "
                                    "again on its next pass") from None
            old = None
        _insert(api, zone, [name], props, pool)
        try:
            made = _named(api, zone, name)
        except gx.GoogleAPICallError as e:
            raise ReplacementUnfinished(f"gcp: {name} was made for pool {pool} in place of {node_id}, then: {e}"[:400],
                                        launched=name) from None
        if on_launch is not None:
            on_launch(made["id"])
    try:  # awaited: an old VM whose deletion fails afterwards would run on, named by no registry row
        if old is not None:
            _delete(api, old)
    except (gx.GoogleAPICallError, WAIT_RAN_OUT) as e:
        raise ReplacementUnfinished(f"gcp: {made['name']} was made for pool {pool} in place of {node_id}, then: "
                                    f"{e}"[:400], launched=made["id"]) from None
    return node(made)


def gone_nodes(api, region: str, *, cluster: str, pool: str, node_ids: list[str]) -> set[str]:
    """Those of ``node_ids`` the region no longer holds: a preempted spot VM is deleted
    (``instanceTerminationAction: DELETE``, ``rules.scheduling``), and a deleted VM is not listed (Compute Engine
    lists what exists; a stopped VM is listed TERMINATED, and is not gone). A deleted VM keeps no labels, so an id
    of no VM reads as gone too: its replacement asks a VM more and deletes nothing, within max_replacements."""
    there = {v["id"] for v in region_vms(api, region)}  # ``cluster``, ``pool``: a VM that is there is no one's gone
    return {i for i in node_ids if i not in there}


def add_nodes(api, region: str, *, cluster: str, pool: str, count: int, market: str | None = None,
              on_launch=None) -> list[dict]:
    """``count`` VMs more for the pool, from its own request, all or none (one bulkInsert); each new VM's id
    said to ``on_launch`` once they exist."""
    vms = region_vms(api, region)
    zone, props = pool_request(api, vms, cluster, pool, None, market, None)
    batch = secrets.token_hex(3)  # one bulkInsert's VMs: new names, never a VM of the pool's own
    names = [gcp_name(cluster, pool, f"a{batch}", str(i)) for i in range(count)]
    _insert(api, zone, names, props, pool)
    made = [_named(api, zone, n) for n in names]
    for vm in made:
        if on_launch is not None:
            on_launch(vm["id"])
    return [node(vm) for vm in made]


def remove_nodes(api, region: str, *, cluster: str, pool: str, node_ids: list[str]) -> None:
    """Delete exactly these VMs of the pool, each once its own labels name the pool (any other: nothing is deleted);
    one already gone is fine."""
    vms = region_vms(api, region)
    found = [vm for vm in (_pools_vm(vms, cluster, pool, i) for i in node_ids) if vm is not None]
    ops = [api.client("InstancesClient").delete(project=api.project, zone=_last(vm["zone"]), instance=vm["name"])
           for vm in found]
    for op in ops:
        try:
            op.result(timeout=DELETE_WAIT_S)
        except WAIT_RAN_OUT:
            raise GpufleetError(f"gcp: a VM of pool {pool} was not deleted within {DELETE_WAIT_S} s",
                                "`gpufleet status` shows whether it went; ask again") from None

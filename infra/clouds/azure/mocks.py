"""Azure's answers under `plan` (Pulumi's mock runtime) and what the plan table shows of each
resource type. No SDK."""

from __future__ import annotations

import hashlib
import uuid

ID_PREFIX: dict[str, str] = {}

COLUMNS = {
    "azure-native:compute:VirtualMachineScaleSet": ["sku"],
    "azure-native:network:Subnet": ["addressPrefix"],
    "azure-native:network:VirtualNetwork": ["addressSpace"],
    "azure-native:storagecache:AmlFilesystem": ["sku", "storageCapacityTiB"],
}


# what a pool's attempt asks ARM for: the inputs `plan --json` shows for each place failover may try
# (engine.plan.attempt_request); an input left out shows as null (no zone: a regional scale set)
REQUEST = {
    "azure-native:compute:VirtualMachineScaleSet": (
        "sku", "zones", "orchestrationMode", "singlePlacementGroup", "platformFaultDomainCount",
        "proximityPlacementGroup", "virtualMachineProfile.capacityReservation", "virtualMachineProfile.priority"),
    "azure-native:compute:ProximityPlacementGroup": ("zones",),
}


def resource(typ: str, name: str, inputs: dict, rid: str, state: dict, ctx) -> None:
    if typ == "azure-native:resources:ResourceGroup":
        state["name"] = inputs.get("resourceGroupName") or name
    elif typ == "azure-native:storage:StorageAccount":
        state["name"] = inputs.get("accountName") or name
    elif typ == "azure-native:managedidentity:UserAssignedIdentity":  # Entra ID's ids for it
        state["principalId"] = str(uuid.UUID(hashlib.sha1(f"principal/{name}".encode()).hexdigest()[:32]))
        state["clientId"] = str(uuid.UUID(hashlib.sha1(f"client/{name}".encode()).hexdigest()[:32]))
    elif typ == "azure-native:compute:VirtualMachineScaleSet" and (inputs.get("identity") or {}).get(
            "userAssignedIdentities"):
        # the API takes the identities as a list of ids and answers with a map of them
        ids = inputs["identity"]["userAssignedIdentities"]
        state["identity"] = {**inputs["identity"], "userAssignedIdentities": {i: {} for i in ids}}
    elif typ == "azure-native:network:Subnet":
        ctx.subnets[rid] = inputs.get("addressPrefix")
    elif typ == "azure-native:gpufleet:ScaleSetNodes":  # clouds.azure.pool_vms: what ARM will list
        # a new Uniform scale set without overprovisioning numbers its VMs 0..N-1, and Azure hands a
        # fresh subnet's addresses out from .4 on (it keeps the first four)
        n = int(inputs["capacity"])
        # and gives each VM a GUID of its own (vmId): made from its ARM id here, so a plan is the same each time
        state.update(node_ids=[f"{inputs['scale_set_id']}/virtualMachines/{i}" for i in range(n)],
                     vm_uids=[str(uuid.uuid5(uuid.NAMESPACE_URL, f"{inputs['scale_set_id']}/virtualMachines/{i}"))
                              for i in range(n)],
                     host_names=[f"predicted-{i}" for i in range(n)],
                     private_ips=[ctx.address(inputs.get("subnet_id"), i) for i in range(n)],
                     public_ips=[f"203.0.113.{i + 10}" for i in range(n)] if inputs.get("public") else None)


# whoever runs `plan`: the same made-up principal every time (the real one is Entra ID's)
DEPLOYER = {"objectId": "00000000-0000-4000-8000-00000000d3b1", "clientId": "00000000-0000-4000-8000-00000000c11e",
            "tenantId": "00000000-0000-4000-8000-0000000007e7"}


def call(token: str, args: dict, region: str, cat) -> dict | None:
    if token == "azure-native:authorization:getClientConfig":
        return DEPLOYER
    return None


def summary(typ: str, inputs: dict) -> list[str]:
    if typ == "azure-native:compute:VirtualMachineScaleSet":
        prof = inputs.get("virtualMachineProfile") or {}
        return [f"priority={prof['priority']}"] if prof.get("priority") else []
    return []

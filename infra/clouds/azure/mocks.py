"""Azure's answers under `plan` (Pulumi's mock runtime) and what the plan table shows of each
resource type. No SDK."""

from __future__ import annotations

ID_PREFIX: dict[str, str] = {}

COLUMNS = {
    "azure-native:compute:VirtualMachineScaleSet": ["sku"],
    "azure-native:network:Subnet": ["addressPrefix"],
    "azure-native:network:VirtualNetwork": ["addressSpace"],
    "azure-native:storagecache:AmlFilesystem": ["sku", "storageCapacityTiB"],
}


def resource(typ: str, name: str, inputs: dict, rid: str, state: dict, ctx) -> None:
    if typ == "azure-native:resources:ResourceGroup":
        state["name"] = inputs.get("resourceGroupName") or name


def call(token: str, args: dict, region: str, cat) -> dict | None:
    return None


def summary(typ: str, inputs: dict) -> list[str]:
    if typ == "azure-native:compute:VirtualMachineScaleSet":
        prof = inputs.get("virtualMachineProfile") or {}
        return [f"priority={prof['priority']}"] if prof.get("priority") else []
    return []

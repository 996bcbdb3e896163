"""GCP's answers under `plan` (Pulumi's mock runtime): the outputs Compute Engine would fill in,
zone lookups from the catalog, and what the plan table shows of each resource type. No SDK."""

from __future__ import annotations

import hashlib

ID_PREFIX: dict[str, str] = {}
PSA_PLACEHOLDER = "192.168.240.0"  # stands for the private services range GCP allocates at `up`

COLUMNS = {
    "gcp:gpufleet:BulkInstances": ["zone"],  # the rest: the summary
    "gcp:compute/resizeRequest:ResizeRequest": ["resizeBy", "requestedRunDuration"],
    "gcp:compute/subnetwork:Subnetwork": ["ipCidrRange", "region"],
    "gcp:compute/firewall:Firewall": ["sourceRanges"],
    "gcp:compute/network:Network": ["mtu"],
}

# what a pool's attempt asks Compute Engine for: the inputs `plan --json` shows for each place failover
# may try (engine.plan.attempt_request): its bulkInsert, or its flex-start group and resize request
REQUEST = {
    "gcp:gpufleet:BulkInstances": ("zone", "properties.machineType", "properties.guestAccelerators",
                                   "properties.scheduling", "properties.reservationAffinity", "policies"),
    "gcp:compute/instanceTemplate:InstanceTemplate": ("machineType", "scheduling", "reservationAffinity"),
    "gcp:compute/instanceGroupManager:InstanceGroupManager": ("zone",),
    "gcp:compute/resizeRequest:ResizeRequest": ("zone", "resizeBy", "requestedRunDuration"),
}


def resource(typ: str, name: str, inputs: dict, rid: str, state: dict, ctx) -> None:
    if typ == "gcp:compute/subnetwork:Subnetwork":
        ctx.subnets[rid] = inputs.get("ipCidrRange")
    elif typ == "gcp:gpufleet:BulkInstances":  # clouds.gcp.pool_vms: what instances.list answers after bulkInsert
        names = inputs["names"]
        state.update(node_ids=[str(int(hashlib.sha1(n.encode()).hexdigest()[:15], 16)) for n in names],
                     private_ips=[ctx.address(inputs.get("subnet_id"), i) for i in range(len(names))],
                     public_ips=[f"203.0.113.{i % 240 + 10}" for i in range(len(names))] if inputs.get("public") else None)
    elif typ == "gcp:gpufleet:FlexNodes":  # clouds.gcp.flexstart: the group's VMs once DWS provisioned them
        n = int(inputs["nodes"])
        state.update(node_ids=[str(int(hashlib.sha1(f"{name}-{i}".encode()).hexdigest()[:15], 16)) for i in range(n)],
                     private_ips=[ctx.address(inputs.get("subnet_id"), i) for i in range(n)],
                     public_ips=[f"203.0.113.{i % 240 + 10}" for i in range(n)] if inputs.get("public") else None)
    elif typ == "gcp:compute/instanceTemplate:InstanceTemplate":  # named from its prefix, as GCP names it
        state["name"] = inputs["namePrefix"] + rid[:26]
        state["selfLinkUnique"] = f"projects/{inputs.get('project') or 'gpufleet-plan'}/global/instanceTemplates/" \
                                  f"{state['name']}?uniqueId={int(rid[:15], 16)}"
    elif typ == "gcp:serviceaccount/account:Account":
        state["email"] = f"{inputs['accountId']}@{inputs.get('project') or 'gpufleet-plan'}.iam.gserviceaccount.com"
        state["uniqueId"] = str(int(rid[:15], 16))  # IAM's: 21 digits, new with each account made
    elif typ == "gcp:compute/globalAddress:GlobalAddress" and not inputs.get("address"):
        # GCP picks a free range of the prefix length in the VPC: any one outside the stack's blocks
        state["address"] = PSA_PLACEHOLDER


def call(token: str, args: dict, region: str, cat) -> dict | None:
    if token == "gcp:compute/getZones:getZones":
        return {"id": region, "names": list(cat.region_zones("gcp", args.get("region") or region))}
    return None


def summary(typ: str, inputs: dict) -> list[str]:
    if typ == "gcp:gpufleet:BulkInstances":
        props = inputs.get("properties") or {}
        return [f"{props.get('machineType')} x{len(inputs.get('names') or [])}", "all-or-nothing=True",
                f"compact-policies={len(inputs.get('policies') or [])}",
                f"provisioning={(props.get('scheduling') or {}).get('provisioningModel')}",
                f"nics={len(props.get('networkInterfaces') or [])}"]
    if typ == "gcp:gpufleet:FlexNodes":
        return [f"x{inputs.get('nodes')}", "all-or-nothing=True", "provisioning=FLEX_START",
                f"waits={int(inputs.get('wait_s') or 0) // 60}min"]
    return []

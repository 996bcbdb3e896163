"""GCP's answers under `plan` (Pulumi's mock runtime): the outputs Compute Engine would fill in,
zone lookups from the catalog, and what the plan table shows of each resource type. No SDK."""

from __future__ import annotations

import hashlib

ID_PREFIX: dict[str, str] = {}
PSA_PLACEHOLDER = "192.168.240.0"  # stands for the private services range GCP allocates at `up`

COLUMNS = {
    "gcp:compute/instance:Instance": ["machineType", "zone"],
    "gcp:compute/subnetwork:Subnetwork": ["ipCidrRange", "region"],
    "gcp:compute/firewall:Firewall": ["sourceRanges"],
    "gcp:compute/network:Network": ["mtu"],
    "gcp:compute/resourcePolicy:ResourcePolicy": ["groupPlacementPolicy"],
}


def resource(typ: str, name: str, inputs: dict, rid: str, state: dict, ctx) -> None:
    if typ == "gcp:compute/subnetwork:Subnetwork":
        ctx.subnets[rid] = inputs.get("ipCidrRange")
    elif typ == "gcp:compute/instance:Instance":
        nics = [dict(n) for n in inputs.get("networkInterfaces") or []]
        for n in nics:
            n["networkIp"] = ctx.host(n.get("subnetwork"), name)
        state["networkInterfaces"] = nics
        state["instanceId"] = str(int(hashlib.sha1(name.encode()).hexdigest()[:15], 16))
    elif typ == "gcp:serviceaccount/account:Account":
        state["email"] = f"{inputs['accountId']}@{inputs.get('project') or 'gpufleet-plan'}.iam.gserviceaccount.com"
    elif typ == "gcp:compute/globalAddress:GlobalAddress" and not inputs.get("address"):
        # GCP picks a free range of the prefix length in the VPC: any one outside the stack's blocks
        state["address"] = PSA_PLACEHOLDER


def call(token: str, args: dict, region: str, cat) -> dict | None:
    if token == "gcp:compute/getZones:getZones":
        return {"id": region, "names": list(cat.region_zones("gcp", args.get("region") or region))}
    return None


def summary(typ: str, inputs: dict) -> list[str]:
    if typ == "gcp:compute/instance:Instance":
        sched = inputs.get("scheduling") or {}
        return [f"provisioning={sched.get('provisioningModel')}", f"nics={len(inputs.get('networkInterfaces') or [])}"]
    return []

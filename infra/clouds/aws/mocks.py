"""AWS's answers under `plan` (Pulumi's mock runtime): ids, the outputs AWS would fill in, lookups
from the catalog, and what the plan table shows of each resource type. No SDK."""

from __future__ import annotations

import hashlib
import json

ID_PREFIX = {"aws:ec2/vpc:Vpc": "vpc-", "aws:ec2/subnet:Subnet": "subnet-",
             "aws:ec2/securityGroup:SecurityGroup": "sg-", "aws:ec2/instance:Instance": "i-",
             "aws:ec2/launchTemplate:LaunchTemplate": "lt-", "aws:ec2/placementGroup:PlacementGroup": "pg-",
             "aws:fsx/lustreFileSystem:LustreFileSystem": "fs-", "aws:ec2/fleet:Fleet": "fleet-"}

# the inputs shown in the plan table per resource type (all inputs are in --json)
COLUMNS = {
    "aws:ec2/vpc:Vpc": ["cidrBlock"],
    "aws:ec2/subnet:Subnet": ["cidrBlock", "availabilityZone"],
    "aws:ec2/securityGroup:SecurityGroup": ["description"],
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": ["ipProtocol", "cidrIpv4", "fromPort", "description"],
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": ["ipProtocol", "cidrIpv4", "description"],
    "aws:ec2/placementGroup:PlacementGroup": ["strategy"],
    "aws:ec2/launchTemplate:LaunchTemplate": ["instanceType", "imageId"],
    "aws:ec2/fleet:Fleet": ["type"],  # the rest comes from the launch template
    "aws:iam/role:Role": [],
    "aws:ec2/routeTableAssociation:RouteTableAssociation": [],
    "aws:fsx/lustreFileSystem:LustreFileSystem": ["deploymentType", "storageCapacity", "perUnitStorageThroughput"],
    "aws:ec2/keyPair:KeyPair": ["keyName"],
    "aws:ec2/natGateway:NatGateway": [],
    "aws:s3/bucket:Bucket": ["bucketPrefix"],
    "aws:iam/rolePolicy:RolePolicy": ["name"],
}


# what a pool's attempt asks EC2 for: the inputs `plan --json` shows for each place failover may try
# (engine.plan.attempt_request)
REQUEST = {
    "aws:ec2/fleet:Fleet": ("type", "launchTemplateConfigs", "targetCapacitySpecification", "onDemandOptions",
                            "spotOptions"),
    "aws:ec2/launchTemplate:LaunchTemplate": ("instanceType", "placement", "capacityReservationSpecification",
                                              "instanceMarketOptions"),
    "aws:ec2/placementGroup:PlacementGroup": ("strategy",),
}


def resource(typ: str, name: str, inputs: dict, rid: str, state: dict, ctx) -> None:
    """Fill in what AWS would return for a new resource (``state``); ``ctx.subnets`` maps subnet
    ids to their blocks, ``ctx.memo`` keeps what later resources need."""
    templates = ctx.memo.setdefault("aws-templates", {})  # launch template id -> subnet id
    if typ == "aws:ec2/subnet:Subnet":
        ctx.subnets[rid] = inputs.get("cidrBlock")
    elif typ == "aws:ec2/launchTemplate:LaunchTemplate":
        nis = inputs.get("networkInterfaces") or [{}]
        templates[rid] = nis[0].get("subnetId")
        # EC2 numbers a template's versions 1, 2, ...: every change of its data is a new latest version
        # (pulumi-aws's latest_version output). The mocks cannot count across runs, so the number
        # follows the data: another template reads as another version, the same one as the same
        data = json.dumps({k: v for k, v in inputs.items() if k != "tags"}, sort_keys=True, default=str)
        state["latestVersion"] = int(hashlib.sha1(data.encode()).hexdigest()[:6], 16) + 1
    elif typ == "aws:gpufleet:FleetNodes":  # clouds.aws.pool_vms: what DescribeFleets and DescribeInstances answer
        # EC2 hands a new subnet's addresses out from .4 on (it keeps the first four), one per instance
        n = int(inputs["nodes"])
        state.update(node_ids=["i-" + hashlib.sha1(f"{name}/{i}".encode()).hexdigest()[:17] for i in range(n)],
                     private_ips=[ctx.address(inputs.get("subnet_id"), i) for i in range(n)],
                     public_ips=[f"203.0.113.{i % 240 + 10}" for i in range(n)] if inputs.get("public") else None)
    elif typ == "aws:gpufleet:PinnedAmi":  # clouds.aws.ami: what DescribeImages answers at the first `up`
        state["image_id"] = "ami-" + hashlib.sha1(f"{inputs['region']}/{inputs['pattern']}".encode()).hexdigest()[:17]
    elif typ == "aws:fsx/lustreFileSystem:LustreFileSystem":
        state["dnsName"] = f"{rid}.fsx.amazonaws.com"
        state["mountName"] = hashlib.sha1(name.encode()).hexdigest()[:8]
    elif typ == "aws:iam/instanceProfile:InstanceProfile":
        state["arn"] = f"arn:aws:iam::000000000000:instance-profile/{name}"
    elif typ == "aws:s3/bucket:Bucket":  # S3 appends a unique suffix to the prefix
        state["bucket"] = (inputs.get("bucketPrefix") or "") + rid[:26]
        state["arn"] = f"arn:aws:s3:::{state['bucket']}"


def call(token: str, args: dict, region: str, cat) -> dict | None:
    """The zones offering an instance type (the catalog's)."""
    if token == "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings":
        it = (args.get("filters") or [{}])[0].get("values", [""])[0]
        offered = cat.offered_zones("aws", it, region)  # known after a catalog refresh
        zones = list(offered) if offered is not None else \
            list(cat.region_zones("aws", region)) if cat.instance_regions("aws", it) else []
        return {"id": region, "locations": zones, "locationTypes": ["availability-zone"] * len(zones),
                "instanceTypes": [it] * len(zones)}
    return None


def summary(typ: str, inputs: dict) -> list[str]:
    """What the plan table adds to the columns of a resource type."""
    if typ == "aws:ec2/launchTemplate:LaunchTemplate":
        nis = inputs.get("networkInterfaces") or []
        efa = sum(1 for n in nis if n.get("interfaceType") in ("efa", "efa-only"))
        md = inputs.get("metadataOptions") or {}
        out = [f"efa={efa}", f"imds={'v2' if md.get('httpTokens') == 'required' else 'v1'}"]
        return out + (["spot"] if inputs.get("instanceMarketOptions") else [])
    if typ == "aws:ec2/fleet:Fleet":
        spec = inputs.get("targetCapacitySpecification") or {}
        whole = (inputs.get("onDemandOptions") or inputs.get("spotOptions") or {}).get("minTargetCapacity")
        return [f"{spec.get('defaultTargetCapacityType')} x{spec.get('totalTargetCapacity')}",
                f"all-or-nothing={whole == spec.get('totalTargetCapacity')}"]
    return []

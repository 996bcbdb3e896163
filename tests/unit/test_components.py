"""Every example stack rendered by its Pulumi program under Pulumi's mock runtime (preview=False).

The properties a reviewer signs off are checked on what the program registers: security
rules, IMDSv2, encryption, EFA interfaces per instance type, placement, tags/labels on every
taggable resource, spot settings and storage.
"""

import base64
import datetime as dt
import importlib
import inspect
import subprocess
import sys

import pytest

from gpufleet import stacks
from gpufleet.engine import plan as planner

from conftest import EXAMPLES, ROOT
from conftest import reserved_plan as placed_at_reservations

pytest.importorskip("pulumi")

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeFakeFakeFakeFakeFakeFakeFakeFakeFakeFake test"
TAG_KEYS = {"gpufleet:cluster", "gpufleet:stack", "gpufleet:pool", "gpufleet:owner", "gpufleet:expires-at"}


def _plan(path, cat, **kw):
    return planner.plan(stacks.load(path, cat), cat, workers=1, **kw)


def _by_type(p, typ):
    return [r for r in p.cloud_resources if r.type == typ]


def _one(p, typ):
    (r,) = _by_type(p, typ)
    return r


def _resource_class(typ: str):
    """The SDK class behind a type token, e.g. aws:ec2/vpc:Vpc -> pulumi_aws.ec2.Vpc."""
    pkg, mod, cls = typ.split(":")
    package = {"aws": "pulumi_aws", "gcp": "pulumi_gcp", "azure-native": "pulumi_azure_native"}[pkg]
    module = importlib.import_module(f"{package}.{mod.split('/')[0]}")
    return getattr(module, cls)


def _tags_of(r) -> tuple[str, dict] | None:
    """("labels" | "tags", what the resource carries) where it takes any: its SDK's parameters say
    which; a GCP pool's VMs (clouds.gcp.pool_vms.BulkInstances) carry labels in their properties, and
    the other dynamic kinds (readers) create nothing."""
    if r.type == "gcp:gpufleet:BulkInstances":
        return "labels", r.inputs["properties"]["labels"]
    if ":gpufleet:" in r.type:
        return None
    params = inspect.signature(_resource_class(r.type)._internal_init).parameters
    field = "labels" if r.type.startswith("gcp:") and "labels" in params else ("tags" if "tags" in params else None)
    return (field, r.inputs.get(field) or {}) if field else None


@pytest.fixture(scope="module")
def plans():
    from gpufleet import catalog

    cat = catalog.load(use_config=False)
    return {p.stem: _plan(p, cat) for p in EXAMPLES}


@pytest.mark.parametrize("name", [p.stem for p in EXAMPLES])
def test_every_taggable_resource_carries_the_gpufleet_tags(plans, name):
    p = plans[name]
    checked = 0
    for r in p.cloud_resources:
        found = _tags_of(r)
        if found is None:
            continue
        field, tags = found
        if field == "labels":
            assert {k.replace(":", "-") for k in TAG_KEYS} <= set(tags), (r.type, r.name, tags)
            assert all(v == v.lower() and ":" not in v for v in tags.values())
        else:
            assert TAG_KEYS <= set(tags), (r.type, r.name, tags)
            assert tags["gpufleet:cluster"] == p.cluster and tags["gpufleet:expires-at"] == p.expires_at
        checked += 1
    cloud = any(pool.provider != "baremetal" for pool in stacks.load(ROOT / "stacks/examples" / f"{name}.yaml").pools)
    assert checked > 0 or not cloud


def test_each_clouds_resources_name_the_caller_that_cloud_knows(cat):
    """`up` tags what it creates with who created it, per cloud (``gpufleet:created-by``; a GCP label
    in label form); a cloud whose caller is not known gets no such tag, and `plan` knows none."""
    from gpufleet.clouds.tags import CREATED_BY, principal_key
    from gpufleet.engine.plan import cluster_for

    stack = stacks.load(ROOT / "stacks/examples/mixed.yaml", cat)
    who = {"aws": "arn:aws:sts::123456789012:assumed-role/Admin/alice@example.com", "gcp": "alice@example.com"}
    p = planner.plan(stack, cat, workers=1, cluster=cluster_for(stack, created_by=who))
    seen = set()
    for r in p.cloud_resources:
        found = _tags_of(r)
        if found is None:
            continue
        field, tags = found
        cloud = {"aws": "aws", "gcp": "gcp", "azure-native": "azure"}[r.type.split(":")[0]]
        key = CREATED_BY.replace(":", "-") if field == "labels" else CREATED_BY
        expect = who.get(cloud)
        assert tags.get(key) == (expect and (principal_key(expect) if field == "labels" else expect)), (r.type, tags)
        seen.add(cloud)
    assert seen == {"aws", "gcp", "azure"}
    assert not any(CREATED_BY in (_tags_of(r) or ("", {}))[1] for r in _plan(ROOT / "stacks/examples/mixed.yaml",
                                                                              cat).cloud_resources)


def test_aws_training_security_imds_encryption_efa_placement_storage(plans):
    p = plans["aws-training"]
    ingress = _by_type(p, "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
    assert {(r.inputs.get("ipProtocol"), r.inputs.get("cidrIpv4"), r.inputs.get("fromPort")) for r in ingress} == {
        ("-1", None, None), ("tcp", "203.0.113.0/24", 22)}
    self_rule = next(r for r in ingress if r.inputs["ipProtocol"] == "-1")
    assert self_rule.inputs["referencedSecurityGroupId"] == self_rule.inputs["securityGroupId"]
    lt = _one(p, "aws:ec2/launchTemplate:LaunchTemplate").inputs
    assert lt["metadataOptions"]["httpTokens"] == "required"
    ebs = lt["blockDeviceMappings"][0]["ebs"]
    assert ebs["encrypted"] == "true" and ebs["volumeType"] == "gp3"
    nics = lt["networkInterfaces"]
    assert [n.get("interfaceType") for n in nics] == [None] + ["efa-only"] * 4  # p4d.24xlarge: 4 network cards
    assert sorted(int(n["networkCardIndex"]) for n in nics if n.get("interfaceType")) == [0, 1, 2, 3]
    assert all(n["associatePublicIpAddress"] == "false" for n in nics if "associatePublicIpAddress" in n)
    assert lt["placement"]["groupName"] and _one(p, "aws:ec2/placementGroup:PlacementGroup").inputs["strategy"] == "cluster"
    assert "instanceMarketOptions" not in lt
    assert {s["resourceType"] for s in lt["tagSpecifications"]} == {"instance", "volume", "network-interface"}
    fsx = _one(p, "aws:fsx/lustreFileSystem:LustreFileSystem").inputs
    # 4.8 TiB is a size FSx sells (1.2, 2.4, then steps of 2.4 TiB): not rounded up to 7.2
    assert fsx["deploymentType"] == "PERSISTENT_2" and fsx["storageCapacity"] == 4800
    assert fsx["securityGroupIds"] == [self_rule.inputs["securityGroupId"]]  # the nodes' group: TCP 988/1018-1023
    user_data = base64.b64decode(lt["userData"]).decode()
    assert "mount /fsx" in user_data and ".fsx.amazonaws.com@tcp:/" in user_data
    # the pool is one all-or-nothing instant fleet from that template, in the template's zone
    assert not _by_type(p, "aws:ec2/instance:Instance")
    fleet = _one(p, "aws:ec2/fleet:Fleet").inputs
    assert fleet["type"] == "instant" and fleet["terminateInstances"] is True
    assert fleet["targetCapacitySpecification"] == {"defaultTargetCapacityType": "on-demand", "totalTargetCapacity": 2}
    assert fleet["onDemandOptions"] == {"minTargetCapacity": 2, "singleAvailabilityZone": True,
                                        "singleInstanceType": True, "allocationStrategy": "lowest-price"}
    (config,) = fleet["launchTemplateConfigs"]
    assert config["launchTemplateSpecification"]["launchTemplateId"]
    # no subnet override: EC2 Fleet would then ignore the template's EFA interfaces
    assert config["overrides"] == [{"instanceType": "p4d.24xlarge",
                                    "availabilityZone": next(
        r for r in _by_type(p, "aws:ec2/subnet:Subnet") if r.name.endswith("trainers-subnet")).inputs["availabilityZone"]}]
    pool = p.outputs["pools"]["trainers"]
    assert pool["private_ips"] == ["10.64.1.4", "10.64.1.5"] and len(set(pool["node_ids"])) == 2
    assert pool["ssh_endpoint"] == "10.64.1.4:22"


def _granted(p, pool_role_suffix: str) -> set[str]:
    """Every action a pool's node role is allowed: its inline policies and the AWS managed policies
    attached to it, read from moto's copy of AWS's managed policy documents."""
    import json

    from moto.iam.aws_managed_policies import aws_managed_policies_data

    managed = json.loads(aws_managed_policies_data)
    docs = [json.loads(r.inputs["policy"]) for r in _by_type(p, "aws:iam/rolePolicy:RolePolicy")
            if r.name.endswith(pool_role_suffix)]
    docs += [managed[r.inputs["policyArn"].rsplit("/", 1)[1]]["Document"]
             for r in _by_type(p, "aws:iam/rolePolicyAttachment:RolePolicyAttachment")]
    out = set()
    for doc in docs:
        for s in doc["Statement"]:
            assert s["Effect"] == "Allow"
            out |= {s["Action"]} if isinstance(s["Action"], str) else set(s["Action"])
    return out


def test_nodes_get_what_session_manager_needs_and_no_ssm_parameter(plans):
    """Issue 48 item 5: AmazonSSMManagedInstanceCore, attached before, also grants
    ssm:GetParameter(s) on every parameter of the account (and documents, associations). The
    nodes' role now allows exactly AWS's own AWSCloud9SSMInstanceProfile (moto's copy of AWS's
    managed policy documents is the reference: botocore does not model these agent-only actions),
    besides its bucket access."""
    import json

    from moto.iam.aws_managed_policies import aws_managed_policies_data

    p = plans["aws-training"]
    granted = _granted(p, "-ssm") | _granted(p, "-bucket")
    reference = json.loads(aws_managed_policies_data)["AWSCloud9SSMInstanceProfile"]["Document"]["Statement"]
    assert granted == set(reference[0]["Action"]) | {"s3:GetObject", "s3:PutObject"}
    assert not {"ssm:GetParameter", "ssm:GetParameters", "ssm:GetDocument"} & granted
    assert not _by_type(p, "aws:iam/rolePolicyAttachment:RolePolicyAttachment")


def test_imds_answers_the_node_alone_unless_the_pool_lets_containers_in(plans, cat, write):
    """Issue 48 item 5: hop limit 2 handed the node role's credentials to any container on the
    node; 1 keeps IMDSv2's token on the node itself, and a pool may raise it (validated)."""
    lt = _one(plans["aws-training"], "aws:ec2/launchTemplate:LaunchTemplate").inputs
    assert lt["metadataOptions"]["httpPutResponseHopLimit"] == 1 and lt["metadataOptions"]["httpTokens"] == "required"
    base = "name: s\nowner: o\npools:\n  - {name: a, provider: aws, region: us-east-1, instance_type: g5.xlarge"
    lt = _one(_plan(write("h.yaml", base + ", imds_hop_limit: 2}\n"), cat), "aws:ec2/launchTemplate:LaunchTemplate")
    assert lt.inputs["metadataOptions"]["httpPutResponseHopLimit"] == 2
    from gpufleet.errors import SpecErrors

    for bad, says in (("0", "greater than or equal to 1"), ("65", "less than or equal to 64"), ("'2'", "integer")):
        with pytest.raises(SpecErrors) as e:
            stacks.load(write("b.yaml", base + f", imds_hop_limit: {bad}}}\n"), cat)
        assert "pools[0].imds_hop_limit" in e.value.message and says in e.value.message, e.value.message
    gcp = "name: s\nowner: o\npools:\n  - {name: a, provider: gcp, region: us-central1, instance_type: g2-standard-8, "
    with pytest.raises(SpecErrors) as e:
        stacks.load(write("g.yaml", gcp + "imds_hop_limit: 2}\n"), cat)
    assert "imds_hop_limit is AWS's instance metadata setting; GCP has none" in e.value.message


def test_no_ssh_from_anywhere_by_default(cat, write):
    p = _plan(write("s.yaml", "name: s\nowner: o\npools:\n  - {name: a, provider: aws, region: us-east-1, "
                              "instance_type: g5.xlarge}\n"), cat)
    ingress = _by_type(p, "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
    assert [r.inputs.get("cidrIpv4") for r in ingress] == [None]  # only the cluster-internal rule
    assert not _by_type(p, "aws:ec2/placementGroup:PlacementGroup")  # one node: no placement group
    assert not _by_type(p, "aws:ec2/keyPair:KeyPair")


@pytest.mark.parametrize("instance,efa", [("p5.48xlarge", 32), ("p4d.24xlarge", 4), ("g6e.48xlarge", 4),
                                          ("g5.48xlarge", 1), ("g5.xlarge", 0)])
def test_efa_interfaces_follow_the_instance_type(cat, write, instance, efa):
    path = write("s.yaml", f"name: s\nowner: o\npools:\n  - {{name: a, provider: aws, region: us-east-1, "
                           f"instance_type: {instance}, nodes: 2}}\n")
    lt = _one(_plan(path, cat), "aws:ec2/launchTemplate:LaunchTemplate").inputs
    nics = lt["networkInterfaces"]
    assert sum(n.get("interfaceType") == "efa-only" for n in nics) == efa
    assert nics[0]["deviceIndex"] == 0 and nics[0]["networkCardIndex"] == 0 and not nics[0].get("interfaceType")


def test_aws_spot(cat, write):
    base = "name: s\nowner: o\npools:\n  - {name: a, provider: aws, region: us-east-1, instance_type: p5.48xlarge, nodes: 2"
    spot = _plan(write("a.yaml", base + ", spot: true}\n"), cat)
    lt = _one(spot, "aws:ec2/launchTemplate:LaunchTemplate").inputs
    assert "instanceMarketOptions" not in lt  # the fleet buys spot: its target capacity type
    assert "spot-instances-request" in {s["resourceType"] for s in lt["tagSpecifications"]}
    fleet = _one(spot, "aws:ec2/fleet:Fleet").inputs
    assert fleet["targetCapacitySpecification"]["defaultTargetCapacityType"] == "spot"
    assert fleet["spotOptions"]["minTargetCapacity"] == 2 and "onDemandOptions" not in fleet


def test_a_spot_pools_launch_template_can_launch_its_on_demand_fallback(cat, write):
    """heal's spot_fallback asks CreateFleet for on-demand through the spot pool's own launch template
    (aws.replace.request_for_one). A template tag specification for a resource the launch does not make fails the
    launch (botocore 1.44.8's EC2 model, LaunchTemplateTagSpecificationRequest.ResourceType); EC2 says "You cannot
    specify tags for Spot instances requests if there are no Spot instances requests being created by the request"
    (github-aws-runners/terraform-aws-github-runner#4561, aws/karpenter-provider-aws#5850)."""
    path = write("s.yaml", "name: s\nowner: o\npools:\n  - {name: a, provider: aws, region: us-east-1, "
                           "instance_type: p5.48xlarge, nodes: 2, spot: true, failover: {spot_fallback: on-demand}}\n")
    lt = _one(_plan(path, cat), "aws:ec2/launchTemplate:LaunchTemplate").inputs
    assert {s["resourceType"] for s in lt["tagSpecifications"]} == {"instance", "volume", "network-interface"}


KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFjtZCMk8DLg9Gw3q44fZDXDQHKWHrf7Wb55hmdcfA0A test"
CRG = "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg/providers/Microsoft.Compute/" \
      "capacityReservationGroups/h100"
BLOCK = "capacity_block: {starts_at: 2026-01-01T00:00:00Z, ends_at: 2099-01-01T00:00:00Z, upfront_usd: 50000}"


def reserved_plan(write, cat, pool: str):
    """The program of a one-pool stack placed at the pool's first reservation."""
    text = f"name: r\nowner: o\naccess: {{public_key: '{KEY}'}}\npools:\n  - {pool}\n"
    return placed_at_reservations(stacks.load(write("r.yaml", text), cat), cat)


def test_an_aws_pool_at_its_capacity_reservation_launches_into_it_or_not_at_all(cat, write):
    p = reserved_plan(write, cat, "{name: a, provider: aws, region: us-east-1, instance_type: p5.48xlarge, nodes: 2, "
                                  "reservations: [{id: cr-0123456789abcdef0, zone: us-east-1b}]}")
    lt = _one(p, "aws:ec2/launchTemplate:LaunchTemplate").inputs
    target = lt["capacityReservationSpecification"]["capacityReservationTarget"]
    assert target == {"capacityReservationId": "cr-0123456789abcdef0"} and "instanceMarketOptions" not in lt
    fleet = _one(p, "aws:ec2/fleet:Fleet").inputs
    assert fleet["launchTemplateConfigs"][0]["overrides"] == [{"availabilityZone": "us-east-1b",
                                                                "instanceType": "p5.48xlarge"}]
    od = fleet["onDemandOptions"]
    assert od["capacityReservationOptions"] == {"usageStrategy": "use-capacity-reservations-first"}
    assert od["minTargetCapacity"] == 2  # a reservation short of the pool launches nothing
    # the open market of the same pool names no reservation
    plain = _plan(write("o.yaml", "name: r\nowner: o\npools:\n  - {name: a, provider: aws, region: us-east-1, "
                                  "instance_type: p5.48xlarge, nodes: 2}\n"), cat)
    assert "capacityReservationSpecification" not in _one(plain, "aws:ec2/launchTemplate:LaunchTemplate").inputs
    assert "capacityReservationOptions" not in _one(plain, "aws:ec2/fleet:Fleet").inputs["onDemandOptions"]


def test_an_aws_capacity_block_is_launched_as_one_and_costs_its_fee_over_its_hours(cat, write):
    p = reserved_plan(write, cat, "{name: a, provider: aws, region: us-east-1, instance_type: p5.48xlarge, nodes: 2, "
                                  f"reservations: [{{id: cr-0123456789abcdef0, zone: us-east-1b, {BLOCK}}}]}}")
    lt = _one(p, "aws:ec2/launchTemplate:LaunchTemplate").inputs
    assert lt["instanceMarketOptions"] == {"marketType": "capacity-block"}
    assert lt["capacityReservationSpecification"]["capacityReservationTarget"]["capacityReservationId"] == \
        "cr-0123456789abcdef0"
    fleet = _one(p, "aws:ec2/fleet:Fleet").inputs
    assert fleet["targetCapacitySpecification"] == {"defaultTargetCapacityType": "capacity-block",
                                                    "totalTargetCapacity": 2}
    assert "onDemandOptions" not in fleet and "spotOptions" not in fleet
    hours = (dt.datetime(2099, 1, 1) - dt.datetime(2026, 1, 1)).total_seconds() / 3600
    (cost,) = p.pools
    assert cost.usd_per_node_hour == pytest.approx(50000 / hours / 2)


def test_a_gcp_pool_at_its_reservation_names_it_in_every_vm(cat, write):
    p = reserved_plan(write, cat, "{name: g, provider: gcp, region: us-central1, instance_type: a3-highgpu-8g, "
                                  "nodes: 2, reservations: [{id: projects/shared/reservations/h100, zone: us-central1-b}]}")
    bulk = _one(p, "gcp:gpufleet:BulkInstances").inputs
    assert bulk["zone"] == "us-central1-b"
    assert bulk["properties"]["reservationAffinity"] == {
        "consumeReservationType": "SPECIFIC_RESERVATION", "key": "compute.googleapis.com/reservation-name",
        "values": ["projects/shared/reservations/h100"]}


def test_an_azure_pool_at_its_reservation_group_puts_its_scale_set_in_it(cat, write):
    """A scale set that takes a capacity reservation group: singlePlacementGroup false and no proximity
    placement group (Microsoft Learn, "Associate a virtual machine scale set with Uniform
    Orchestration to a capacity reservation group" and the capacity reservation overview's
    limitations, read 2026-11), in the zone its reservation holds (a zonal reservation serves VMs of
    its zone only, a regional one non-zonal VMs only: capacityReservations ``zones``, Compute REST)."""
    p = reserved_plan(write, cat, "{name: z, provider: azure, region: eastus, instance_type: Standard_NC96ads_A100_v4, "
                                  f"nodes: 2, reservations: [{{id: '{CRG}', zone: '2'}}]}}")
    vmss = _one(p, "azure-native:compute:VirtualMachineScaleSet").inputs
    assert vmss["virtualMachineProfile"]["capacityReservation"] == {"capacityReservationGroup": {"id": CRG}}
    assert vmss["singlePlacementGroup"] is False and "proximityPlacementGroup" not in vmss
    assert vmss["zones"] == ["2"]
    assert not _by_type(p, "azure-native:compute:ProximityPlacementGroup")
    regional = reserved_plan(write, cat, "{name: z, provider: azure, region: eastus, "
                                         "instance_type: Standard_NC96ads_A100_v4, nodes: 2, "
                                         f"reservations: [{{id: '{CRG}'}}]}}")
    assert "zones" not in _one(regional, "azure-native:compute:VirtualMachineScaleSet").inputs


def test_every_azure_failover_attempt_sends_its_zone_to_the_scale_set(cat, write):
    """Each zone an attempt names reaches the scale set and its placement group; before, a pool
    without Managed Lustre sent every zone's attempt as the same regional request."""
    from gpufleet.clouds import candidates

    from conftest import placed_plan

    stack = stacks.load(write("z.yaml", f"name: z\nowner: o\naccess: {{public_key: '{KEY}'}}\npools:\n"
                                        "  - {name: z, provider: azure, region: eastus, "
                                        "instance_type: Standard_ND96isr_H100_v5, nodes: 2, "
                                        "failover: {zones: any}}\n"), cat)
    places = candidates.for_pool(stack, stack.pools[0], cat).ordered
    assert [c.zone for c in places] == ["1", "2", "3"]
    for c in places:
        p = placed_plan(stack, cat, {"z": c})
        assert _one(p, "azure-native:compute:VirtualMachineScaleSet").inputs["zones"] == [c.zone]
        assert _one(p, "azure-native:compute:ProximityPlacementGroup").inputs["zones"] == [c.zone]
        assert p.outputs["pools"]["z"]["zone"] == c.zone


def test_existing_vpc_and_subnet_are_used_not_created(cat, write):
    p = _plan(write("s.yaml", "name: s\nowner: o\npools:\n  - {name: a, provider: aws, region: us-east-1, "
                              "instance_type: g5.xlarge, vpc: vpc-0abc, subnet: subnet-0def}\n"), cat)
    assert not _by_type(p, "aws:ec2/vpc:Vpc") and not _by_type(p, "aws:ec2/subnet:Subnet")
    assert _one(p, "aws:ec2/securityGroup:SecurityGroup").inputs["vpcId"] == "vpc-0abc"
    lt = _one(p, "aws:ec2/launchTemplate:LaunchTemplate").inputs
    assert lt["networkInterfaces"][0]["subnetId"] == "subnet-0def"


def test_gcp_a3_tcpx_and_n1_accelerators(plans):
    p = plans["gcp-a3"]
    pools = {r.name: r.inputs for r in _by_type(p, "gcp:gpufleet:BulkInstances")}
    a3 = pools["gcp-a3-h100-nodes"]["properties"]
    assert pools["gcp-a3-h100-nodes"]["names"] == ["gcp-a3-h100-0"]
    assert a3["machineType"] == "a3-highgpu-8g" and len(a3["networkInterfaces"]) == 5  # host NIC + 4 GPU NICs
    assert all(n["nicType"] == "GVNIC" for n in a3["networkInterfaces"])
    assert not a3.get("guestAccelerators")  # A3 machine types come with their GPUs
    assert a3["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert pools["gcp-a3-h100-nodes"]["policies"] == []  # one node: nothing to place
    gpu_nets = [r for r in _by_type(p, "gcp:compute/network:Network") if r.inputs.get("mtu") == 8244]
    assert len(gpu_nets) == 4
    t4 = pools["gcp-a3-t4-eval-nodes"]["properties"]
    assert t4["machineType"] == "n1-standard-8"
    assert t4["guestAccelerators"] == [{"acceleratorType": "nvidia-tesla-t4", "acceleratorCount": 1}]
    # two N1 nodes, but compact placement does not take N1: no policy (GCP would refuse the VMs)
    assert pools["gcp-a3-t4-eval-nodes"]["policies"] == [] and "resourcePolicies" not in t4
    (vpc,) = [r for r in _by_type(p, "gcp:compute/network:Network") if r.inputs.get("mtu") == 8896]
    assert vpc.inputs["name"] == "gcp-a3"
    assert "accessConfigs" not in t4["networkInterfaces"][0]  # no public IP
    assert {i["key"]: i["value"] for i in t4["metadata"]["items"]}["ssh-keys"].startswith("ubuntu:ssh-ed25519 ")
    fw = _by_type(p, "gcp:compute/firewall:Firewall")
    assert not any("0.0.0.0/0" in (r.inputs.get("sourceRanges") or []) for r in fw)


def test_a_gcp_pool_is_one_bulk_insert_per_compact_placement_policy(cat, write):
    """151 A3 nodes: two compact policies (GCP's limit is 150 VMs a policy), made by the one
    BulkInstances resource with its two bulkInserts of 150 and 1 VMs, each all or nothing; the
    pool is the same four resources as a 2-node pool's."""
    from gpufleet.clouds.gcp import pool_vms as nodes

    def pool(n):
        return _plan(write(f"big{n}.yaml", "name: big\nowner: o\npools:\n  - name: h\n    provider: gcp\n"
                                          "    region: us-central1\n    zone: us-central1-a\n"
                                          f"    instance_type: a3-highgpu-8g\n    nodes: {n}\n"), cat)

    p = pool(151)
    bulk = _one(p, "gcp:gpufleet:BulkInstances").inputs
    assert [x["name"] for x in bulk["policies"]] == ["big-h-compact-0", "big-h-compact-1"]
    assert all(x["groupPlacementPolicy"] == {"collocation": "COLLOCATED"} for x in bulk["policies"])
    calls = [nodes.request(names, bulk["properties"], policy) for names, policy in
             nodes.groups(bulk["names"], bulk["policies"])]
    assert [(c["count"], c["minCount"]) for c in calls] == [("150", "150"), ("1", "1")]
    assert [c["instanceProperties"]["resourcePolicies"] for c in calls] == [["big-h-compact-0"], ["big-h-compact-1"]]
    assert sum(len(c["perInstanceProperties"]) for c in calls) == 151 == len(set(bulk["names"]))
    # the pool's own resources: the service account, its two bucket grants and the VMs, at any size
    kinds = sorted(r.type for r in p.cloud_resources if r.parent == "big-h")
    assert kinds == sorted(["gcp:serviceaccount/account:Account", "gcp:storage/bucketIAMMember:BucketIAMMember",
                            "gcp:storage/bucketIAMMember:BucketIAMMember", "gcp:gpufleet:BulkInstances"])
    assert kinds == sorted(r.type for r in pool(2).cloud_resources if r.parent == "big-h")


def test_gcp_spot_filestore_and_lustre(cat, write):
    p = _plan(write("s.yaml", "name: s\nowner: o\npools:\n  - name: a\n    provider: gcp\n    region: us-central1\n"
                              "    instance_type: g2-standard-8\n    spot: true\n    storage:\n"
                              "      - {type: nfs, capacity_tib: 2, mount: /home}\n"
                              "      - {type: lustre, capacity_tib: 18, throughput_mbps_per_tib: 500}\n"), cat)
    sched = _one(p, "gcp:gpufleet:BulkInstances").inputs["properties"]["scheduling"]
    assert sched["provisioningModel"] == "SPOT" and sched["instanceTerminationAction"] == "DELETE"
    assert sched["automaticRestart"] is False
    fs = _one(p, "gcp:filestore/instance:Instance").inputs
    assert fs["fileShares"]["capacityGb"] == 2048
    lustre = _one(p, "gcp:lustre/instance:Instance").inputs
    # 18 at 500 MB/s/TiB: the tier's smallest size, 18,000 GiB (not 18,432, which the API refuses)
    assert lustre["capacityGib"] == "18000" and lustre["perUnitStorageThroughput"] == "500"
    assert _one(p, "gcp:servicenetworking/connection:Connection")
    fw = {r.inputs["name"]: r.inputs for r in _by_type(p, "gcp:compute/firewall:Firewall")}
    assert fw["s-lustre"]["allows"] == [{"protocol": "tcp", "ports": ["988"]}]  # LNet from the PSA range
    g2 = _one(p, "gcp:gpufleet:BulkInstances").inputs
    assert g2["policies"] == []  # one node: nothing to place


def test_azure_scale_set_infiniband_spot_lustre(plans, cat, write):
    p = plans["azure-nd"]
    vmss = _one(p, "azure-native:compute:VirtualMachineScaleSet").inputs
    assert vmss["sku"]["name"] == "Standard_ND96isr_H100_v5" and vmss["sku"]["capacity"] == 4
    assert vmss["singlePlacementGroup"] is True and vmss["overprovision"] is False
    assert vmss["proximityPlacementGroup"]["id"]
    prof = vmss["virtualMachineProfile"]
    assert prof["storageProfile"]["imageReference"]["offer"] == "ubuntu-hpc"
    assert prof["osProfile"]["linuxConfiguration"]["disablePasswordAuthentication"] is True
    assert "priority" not in prof
    nsg = _one(p, "azure-native:network:NetworkSecurityGroup").inputs
    allow = [r for r in nsg["securityRules"] if r["access"] == "Allow"]
    assert [(r["sourceAddressPrefix"], r["destinationPortRange"]) for r in allow] == [("203.0.113.0/24", "22")]
    aml = _one(p, "azure-native:storagecache:AmlFilesystem").inputs
    assert aml["sku"]["name"] == "AMLFS-Durable-Premium-500" and aml["storageCapacityTiB"] == 16
    spot_path = write("keys.pub", KEY)
    spot = _plan(write("s.yaml", f"name: s\nowner: o\naccess: {{public_key: {spot_path}}}\npools:\n"
                                 "  - {name: a, provider: azure, region: eastus, instance_type: Standard_NC4as_T4_v3, "
                                 "spot: true}\n"), cat)
    prof = _one(spot, "azure-native:compute:VirtualMachineScaleSet").inputs["virtualMachineProfile"]
    assert prof["priority"] == "Spot" and prof["evictionPolicy"] == "Delete" and prof["billingProfile"]["maxPrice"] == -1


def test_plan_costs_per_pool_and_total(plans):
    p = plans["mixed"]
    costs = {c.pool: c for c in p.pools}
    assert costs["aws-a100"].usd_per_hour == pytest.approx(costs["aws-a100"].usd_per_node_hour)
    assert costs["gcp-l4"].usd_per_hour == pytest.approx(4 * costs["gcp-l4"].usd_per_node_hour)
    assert costs["rack"].usd_per_hour is None and "site_costs" in costs["rack"].note
    assert p.usd_per_hour == pytest.approx(sum(c.usd_per_hour for c in p.pools if c.usd_per_hour))
    assert set(p.outputs["pools"]) == {"aws-a100", "gcp-l4", "azure-t4"}


def test_sharded_plan_registers_the_same_resources(cat, write):
    text = "name: s\nowner: o\npools:\n" + "".join(
        f"  - {{name: p{i}, provider: aws, region: {r}, instance_type: g5.xlarge, nodes: 120}}\n"
        for i, r in enumerate(["us-east-1", "us-east-1", "us-west-2"]))
    path = write("s.yaml", text)
    st = stacks.load(path, cat)
    one = planner.plan(st, cat, workers=1)
    two = planner.plan(st, cat, workers=2)
    assert sorted((r.type, r.name) for r in one.cloud_resources) == sorted((r.type, r.name) for r in two.cloud_resources)
    assert len(_by_type(two, "aws:ec2/fleet:Fleet")) == 3
    assert len(two.outputs["pools"]["p2"]["node_ids"]) == 120
    assert two.outputs["pools"].keys() == one.outputs["pools"].keys()
    assert two.outputs["pools"]["p2"]["private_ips"] == one.outputs["pools"]["p2"]["private_ips"]


def test_plan_of_an_invalid_stack_creates_nothing(cat, write):
    from gpufleet.errors import SpecErrors

    with pytest.raises(SpecErrors):
        stacks.load(write("s.yaml", "name: s\nowner: o\npools:\n  - {name: a, provider: azure, region: eastus, "
                                  "instance_type: Standard_ND96asr_v4, interconnect: efa}\n"), cat)


def test_a_sharded_plan_after_an_in_process_one_finishes(tmp_path):
    """Forking a process that has threads can deadlock the children: after an in-process plan
    (Pulumi's mock runtime leaves its threads behind) a large plan is not forked into shards."""
    script = tmp_path / "two_plans.py"
    script.write_text(
        "from gpufleet import catalog\nfrom gpufleet import stacks\nfrom gpufleet.engine import plan as planner\n"
        "cat = catalog.load(use_config=False)\n"
        "def stack(n, nodes):\n"
        "    pools = ''.join(f'  - {{name: p{i}, provider: aws, region: us-east-1, instance_type: g5.xlarge, '\n"
        "                    f'nodes: {nodes}}}\\n' for i in range(n))\n"
        "    return stacks.load('s.yaml', cat, text='name: s\\nowner: o\\npools:\\n' + pools)\n"
        "if __name__ == '__main__':\n"
        "    planner.plan(stack(1, 2), cat, workers=1)\n"
        "    print(len(planner.plan(stack(10, 200), cat, workers=2).outputs['pools']))\n")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.split() == ["10"], r.stderr[-2000:]

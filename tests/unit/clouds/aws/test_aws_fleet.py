"""An AWS pool is one instant EC2 Fleet: its reader (clouds.aws.pool_vms) against EC2 as moto runs it
and as botocore's own Stubber checks a recorded DescribeFleets answer against the service model,
and the pool's resources in the plan, which do not grow with its nodes."""

import boto3
import pytest
from botocore.stub import Stubber

from gpufleet import stacks
from gpufleet.clouds import cloud
from gpufleet.clouds.aws.api import AwsApi
from gpufleet.clouds.aws.pool_vms import read_nodes
from gpufleet.clouds.base import refusal_in
from gpufleet.engine import plan as planner

REGION, ZONE = "us-east-1", "us-east-1a"


def launch_fleet(capacity: int) -> str:
    """An instant fleet of ``capacity`` instances in a fresh subnet, as the pool's program makes it:
    the subnet in the template's interface, no subnet override."""
    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.64.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.64.1.0/24", AvailabilityZone=ZONE)["Subnet"]["SubnetId"]
    lt = ec2.create_launch_template(LaunchTemplateName="pool", LaunchTemplateData={
        "ImageId": "ami-12c6146b", "InstanceType": "p4d.24xlarge",
        "NetworkInterfaces": [{"DeviceIndex": 0, "SubnetId": subnet}]})["LaunchTemplate"]["LaunchTemplateId"]
    made = ec2.create_fleet(
        Type="instant", LaunchTemplateConfigs=[{
            "LaunchTemplateSpecification": {"LaunchTemplateId": lt, "Version": "1"},
            "Overrides": [{"InstanceType": "p4d.24xlarge", "AvailabilityZone": ZONE}]}],
        TargetCapacitySpecification={"TotalTargetCapacity": capacity, "DefaultTargetCapacityType": "on-demand"},
        OnDemandOptions={"MinTargetCapacity": capacity, "SingleAvailabilityZone": True, "SingleInstanceType": True})
    return made["FleetId"]


def test_the_reader_gives_every_instance_of_the_fleet_with_its_address(aws):
    fleet = launch_fleet(3)
    out = read_nodes({"region": REGION, "fleet_id": fleet, "nodes": 3, "public": False}, wait_s=0, api=AwsApi())
    described = boto3.client("ec2", region_name=REGION).describe_fleets(FleetIds=[fleet])["Fleets"][0]
    assert out["node_ids"] == [i for s in described["Instances"] for i in s["InstanceIds"]]
    assert len(set(out["node_ids"])) == 3 and out["public_ips"] is None
    # each node's address is its instance's (moto launches a fleet into the default subnet, not the template's)
    reservations = boto3.client("ec2", region_name=REGION).describe_instances(InstanceIds=out["node_ids"])["Reservations"]
    ips = {i["InstanceId"]: i["PrivateIpAddress"] for rv in reservations for i in rv["Instances"]}
    assert out["private_ips"] == [ips[i] for i in out["node_ids"]] and all(out["private_ips"])


def test_a_fleet_holding_fewer_instances_than_the_pool_fails(aws):
    fleet = launch_fleet(1)
    with pytest.raises(Exception, match=r"EC2 recorded no error for the fleet .*holds 1 of 2 instances"):
        read_nodes({"region": REGION, "fleet_id": fleet, "nodes": 2, "public": False}, wait_s=0, api=AwsApi())


class StubbedApi(AwsApi):
    """AwsApi whose EC2 client answers from botocore's Stubber (which validates each answer against
    EC2's service model): moto's CreateFleet always fills a fleet, and records no Errors."""

    def __init__(self, answer: dict):
        super().__init__(boto3.Session(aws_access_key_id="x", aws_secret_access_key="x"))
        self.ec2 = self.session.client("ec2", region_name=REGION)
        self.stub = Stubber(self.ec2)
        self.stub.add_response("describe_fleets", answer, {"FleetIds": ["fleet-0a1b2c3d"]})
        self.stub.activate()

    def client(self, service, region):
        return self.ec2


def test_an_empty_fleet_fails_with_ec2s_error_which_reads_as_a_zone_refusal():
    # FleetData of an instant fleet whose MinTargetCapacity could not be met: no instances, one
    # error (API_FleetData.html, API_DescribeFleetError.html; the message is EC2's documented one)
    said = ("We currently do not have sufficient p4d.24xlarge capacity in the Availability Zone you requested "
            "(us-east-1a). Our system will be working on provisioning additional capacity.")
    answer = {"Fleets": [{"FleetId": "fleet-0a1b2c3d", "Type": "instant", "FleetState": "active", "Instances": [],
                          "Errors": [{"ErrorCode": "InsufficientInstanceCapacity", "ErrorMessage": said,
                                      "Lifecycle": "on-demand"}]}]}
    api = StubbedApi(answer)
    with pytest.raises(Exception) as e:
        read_nodes({"region": REGION, "fleet_id": "fleet-0a1b2c3d", "nodes": 2, "public": False}, wait_s=0, api=api)
    api.stub.assert_no_pending_responses()
    assert "holds 0 of 2 instances" in str(e.value)
    # as `up` prints it: Pulumi's Python dynamic providers fail through gRPC
    refusal = refusal_in(cloud("aws").errors.rules, f"error: Exception calling application: {e.value}")
    assert (refusal.scope, refusal.kind, refusal.code) == ("zone", "capacity", "InsufficientInstanceCapacity")


def test_a_pools_resources_do_not_grow_with_its_nodes(cat, write):
    def pool_resources(nodes: int) -> list[str]:
        path = write(f"s{nodes}.yaml", "name: s\nowner: o\npools:\n  - {name: a, provider: aws, region: us-east-1, "
                                       f"instance_type: p4d.24xlarge, nodes: {nodes}}}\n")
        p = planner.plan(stacks.load(path, cat), cat, workers=1)
        return sorted(r.type for r in p.resources if r.parent == "s-a"), p.outputs["pools"]["a"]

    (small, small_out), (big, big_out) = pool_resources(2), pool_resources(1000)
    assert len(small_out["node_ids"]) == 2
    assert small == big and len(big) <= 12, big
    assert len(big_out["node_ids"]) == 1000 and len(set(big_out["private_ips"])) == 1000


def test_an_instant_fleet_is_replaced_never_modified(cat):
    """terraform-provider-aws (which pulumi-aws runs) updates an ``aws_ec2_fleet`` in place for any
    change but its tags: ``resourceFleetUpdate`` calls ModifyFleet (internal/service/ec2/ec2_fleet.go;
    only ``type``, ``valid_from``/``valid_until`` and a few capacity fields are ForceNew), and EC2
    modifies only fleets of type ``maintain`` (API_ModifyFleet.html, read 2026-11). A later `up` that
    changes the launch template (its version, in ``launchTemplateConfigs``) would fail on the pool's
    instant fleet: every input ModifyFleet would carry must replace the fleet instead, the old one
    deleted first (its instances and any reservation they hold are freed before the new launch)."""
    from conftest import EXAMPLES

    p = planner.plan(stacks.load(next(x for x in EXAMPLES if x.stem == "aws-training"), cat), cat, workers=1)
    (fleet,) = [r for r in p.cloud_resources if r.type == "aws:ec2/fleet:Fleet"]
    assert fleet.inputs["type"] == "instant"
    modifiable = set(fleet.inputs) - {"tags", "type"}
    assert "launchTemplateConfigs" in modifiable
    assert modifiable <= set(fleet.options.get("replaceOnChanges", [])), fleet.options
    assert fleet.options.get("deleteBeforeReplace") is True


def test_a_pools_ami_is_pinned_in_the_stacks_state_not_looked_up_at_every_up(cat):
    """Before, the launch template's image was an ``aws.ec2.get_ami(most_recent=True)`` invoke, run at
    every `up`: a newer Ubuntu AMI changed the template by itself. The program now takes it from a
    resource of the stack (``clouds.aws.ami.PinnedAmi``) whose lookup runs once."""
    from gpufleet.clouds.aws.rules import IMAGES

    from conftest import EXAMPLES

    p = planner.plan(stacks.load(next(x for x in EXAMPLES if x.stem == "aws-training"), cat), cat, workers=1)
    (pin,) = [r for r in p.resources if r.type == "aws:gpufleet:PinnedAmi"]
    owner, pattern = IMAGES["ubuntu-22.04"]
    assert {k: pin.inputs[k] for k in ("region", "owner", "pattern")} == {"region": "us-east-1", "owner": owner,
                                                                           "pattern": pattern}


POOL = "  - {name: %s, provider: aws, region: %s, instance_type: p4d.24xlarge, nodes: 1%s}\n"


def test_one_pin_per_cluster_region_and_image_so_a_pool_added_later_boots_the_same_ami(cat, write):
    """The pin was each pool's (``<pool>-ami``): a pool added to a running cluster looked its AMI up anew
    and booted a newer one than its siblings. It is the cluster's, per region and image name, and named
    after no pool: the pool added later finds it in the state, as its siblings left it."""
    head = "name: c\nowner: o\npools:\n"
    one = planner.plan(stacks.load(write("one.yaml", head + POOL % ("a", "us-east-1", "")), cat), cat, workers=1)
    more = planner.plan(stacks.load(write("more.yaml", head + POOL % ("a", "us-east-1", "") + POOL % (
        "b", "us-east-1", "") + POOL % ("c", "us-east-1", ", image: rocky-9") + POOL % ("d", "us-west-2", "")),
        cat), cat, workers=1)

    def pins(p):
        return {r.name: r.inputs for r in p.resources if r.type == "aws:gpufleet:PinnedAmi"}

    assert set(pins(more)) == {"c-us-east-1-ubuntu-22-04-ami", "c-us-east-1-rocky-9-ami", "c-us-west-2-ubuntu-22-04-ami"}
    assert pins(one).items() <= pins(more).items()  # the same resource, the same inputs: kept, not looked up anew
    images = {r.parent: r.inputs["imageId"] for r in more.cloud_resources if r.type == "aws:ec2/launchTemplate:LaunchTemplate"}
    assert images["c-a"] == images["c-b"] != images["c-c"]


def test_the_pinned_ami_is_the_newest_when_first_made_and_stays_when_a_newer_one_appears(aws):
    """Against EC2 as moto's server runs it (DescribeImages with the owner, name, architecture and
    state filters): the first `up` takes the newest AMI; a newer one published later reads as no
    change (Pulumi keeps the recorded AMI), where a fresh lookup would take it; another pattern or
    region is a new lookup (a replacement)."""
    import time

    from gpufleet.clouds.aws.ami import PinnedAmiProvider

    ec2 = boto3.client("ec2", region_name=REGION)
    owner = boto3.client("sts", region_name=REGION).get_caller_identity()["Account"]
    # moto's RegisterImage keeps no architecture; an image made from an instance has its AMI's (x86_64)
    source = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]

    def publish(name: str) -> str:
        return ec2.create_image(InstanceId=source, Name=name)["ImageId"]

    first = publish("pool-os-amd64-server-20261101")
    publish("other-os-amd64-server-20261102")  # another pattern's
    props = {"region": REGION, "owner": owner, "pattern": "pool-os-*-server-*"}
    provider = PinnedAmiProvider()
    made = provider.create(props)
    assert made.outs["image_id"] == made.id == first
    time.sleep(1.1)  # EC2 (and moto) give CreationDate to the second
    newer = publish("pool-os-amd64-server-20261120")
    later = provider.diff(made.id, made.outs, props)
    assert not later.changes and not later.replaces  # the next `up` keeps the AMI of the first
    assert provider.read(made.id, made.outs).outs["image_id"] == first
    assert provider.create(props).outs["image_id"] == newer  # what a lookup at every `up` would have taken
    moved = provider.diff(made.id, made.outs, {**props, "region": "us-west-2"})
    assert moved.changes and moved.replaces == ["region"]
    # `up --refresh-image`: looked up again on purpose, once; the refresh it recorded is no reason the next time
    again = provider.diff(made.id, made.outs, {**props, "refresh": True})
    assert again.changes and again.replaces == ["refresh"]
    refreshed = provider.create({**props, "refresh": True})
    assert refreshed.outs["image_id"] == newer
    assert not provider.diff(refreshed.id, refreshed.outs, {**props, "refresh": False}).changes

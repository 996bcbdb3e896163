"""An AWS pool is one instant EC2 Fleet: its reader (clouds.aws.nodes) against EC2 as moto runs it
and as botocore's own Stubber checks a recorded DescribeFleets answer against the service model,
and the pool's resources in the plan, which do not grow with its nodes."""

import boto3
import pytest
from botocore.stub import Stubber

from gpufleet.clouds import cloud
from gpufleet.clouds.aws.api import AwsApi
from gpufleet.clouds.aws.nodes import read_nodes
from gpufleet.clouds.base import refusal_in
from gpufleet.engine import plan as planner
from gpufleet.fleet import stacks

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

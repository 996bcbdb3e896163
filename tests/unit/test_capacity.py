"""`gpufleet capacity find`: what each cloud holds and sells for a pool, through the clouds' own
SDKs. AWS: botocore's Stubber, which checks every request and recorded answer against EC2's
service model (moto implements neither DescribeCapacityReservations nor
DescribeCapacityBlockOfferings); GCP and Azure: their SDKs over HTTP(S) to the API fakes replaying
the documented formats (fakes/gcp.py, fakes/azure.py)."""

import datetime as dt
import json

import boto3
import pytest
from botocore.stub import ANY, Stubber

from gpufleet import stacks
from gpufleet.clouds.aws.api import AwsApi
from gpufleet.errors import InputError
from gpufleet.fleet import capacity

from conftest import cli

UTC = dt.timezone.utc
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFjtZCMk8DLg9Gw3q44fZDXDQHKWHrf7Wb55hmdcfA0A x"


class StubbedEc2(AwsApi):
    """AwsApi whose EC2 client answers from botocore's Stubber."""

    def __init__(self):
        super().__init__(boto3.Session(aws_access_key_id="x", aws_secret_access_key="x"))
        self.ec2 = self.session.client("ec2", region_name="us-east-1")
        self.stub = Stubber(self.ec2)

    def client(self, service, region):
        return self.ec2


def _held(rid, kind, zone, free, total):
    start = dt.datetime(2026, 11, 1, tzinfo=UTC)
    return {"CapacityReservationId": rid, "InstanceType": "p5.48xlarge", "InstancePlatform": "Linux/UNIX",
            "AvailabilityZone": zone, "Tenancy": "default", "TotalInstanceCount": total,
            "AvailableInstanceCount": free, "State": "active", "StartDate": start,
            "EndDate": start + dt.timedelta(days=14), "EndDateType": "limited", "InstanceMatchCriteria": "targeted",
            "ReservationType": kind}


def test_aws_lists_held_reservations_then_capacity_block_offerings_with_the_buy_command():
    api = StubbedEc2()
    api.stub.add_response("describe_capacity_reservations", {"CapacityReservations": [
        _held("cr-0123456789abcdef0", "default", "us-east-1a", 4, 4),
        _held("cr-0fedcba9876543210", "capacity-block", "us-east-1b", 0, 2)]},
        {"Filters": [{"Name": "instance-type", "Values": ["p5.48xlarge"]},
                     {"Name": "state", "Values": ["active", "scheduled"]}]})
    start = dt.datetime(2026, 12, 1, tzinfo=UTC)
    api.stub.add_response("describe_capacity_block_offerings", {"CapacityBlockOfferings": [{
        "CapacityBlockOfferingId": "cb-0123456789abcdefg", "InstanceType": "p5.48xlarge",
        "AvailabilityZone": "us-east-1c", "InstanceCount": 2, "StartDate": start + dt.timedelta(hours=11, minutes=30),
        "EndDate": start + dt.timedelta(days=2, hours=11, minutes=30), "CapacityBlockDurationHours": 48,
        "UpfrontFee": "6042.24", "CurrencyCode": "USD", "Tenancy": "default"}]},
        {"InstanceType": "p5.48xlarge", "InstanceCount": 2, "CapacityDurationHours": 48,
         "StartDateRange": start, "EndDateRange": ANY})
    with api.stub:
        found = api.capacity("us-east-1", "p5.48xlarge", 2, 48, "2026-12-01")
    held, block, offer = found
    assert (held.id, held.kind, held.zone, held.instances, held.held) == (
        "cr-0123456789abcdef0", "capacity reservation", "us-east-1a", 4, True)
    assert (block.kind, block.instances, block.ends_at) == ("capacity block", 0, "2026-11-15T00:00:00Z")
    assert (offer.held, offer.upfront_usd, offer.starts_at) == (False, 6042.24, "2026-12-01T11:30:00Z")
    assert offer.buy.startswith("aws ec2 purchase-capacity-block --region us-east-1 "
                                "--capacity-block-offering-id cb-0123456789abcdefg")
    api.stub.assert_no_pending_responses()


def test_aws_a_type_not_sold_as_capacity_blocks_still_lists_what_is_held():
    api = StubbedEc2()
    api.stub.add_response("describe_capacity_reservations", {"CapacityReservations": [
        _held("cr-0123456789abcdef0", "default", "us-east-1a", 1, 2)]}, None)
    api.stub.add_client_error("describe_capacity_block_offerings", "InvalidParameterValue",
                              "The instance type g5.xlarge is not supported for Capacity Blocks.")
    with api.stub:
        (only,) = api.capacity("us-east-1", "p5.48xlarge", 2, 24, None)
    assert only.id == "cr-0123456789abcdef0"


def test_aws_denied_is_said_as_such():
    api = StubbedEc2()
    api.stub.add_client_error("describe_capacity_reservations", "UnauthorizedOperation",
                              "You are not authorized to perform this operation.")
    with api.stub, pytest.raises(Exception) as e:
        api.capacity("us-east-1", "p5.48xlarge", 2, 24, None)
    assert "denied permission" in e.value.message and "UnauthorizedOperation" in e.value.message


def test_gcp_lists_ready_reservations_of_the_machine_type_with_what_they_still_take(gcp):
    from gpufleet.clouds.gcp.api import GcpApi

    def reservation(zone, name, machine, count, used, status="READY"):
        gcp.add("reservations", f"zones/{zone}", name, status=status, specificReservationRequired=True,
                specificReservation={"instanceProperties": {"machineType": machine}, "count": str(count),
                                     "inUseCount": str(used)})

    reservation("us-central1-a", "h100-a", "a3-highgpu-8g", 4, 1)
    reservation("us-central1-b", "h100-b", "a3-highgpu-8g", 2, 0, status="CREATING")
    reservation("us-central1-c", "l4", "g2-standard-8", 8, 0)
    reservation("europe-west4-a", "h100-eu", "a3-highgpu-8g", 8, 0)
    (found,) = GcpApi().capacity("us-central1", "a3-highgpu-8g", 2, 24, None)
    assert (found.id, found.zone, found.instances, found.held) == ("h100-a", "us-central1-a", 3, True)


def test_azure_lists_capacity_reservation_groups_with_their_free_vms_of_the_size(azure):
    """What a reservation still takes is its capacity less the VMs allocated in it (its instance
    view's ``utilizationInfo.virtualMachinesAllocated``), not less the VMs associated with it, which
    include deallocated ones that hold none of it (capacity reservation overview, "Capacity Reservation
    lifecycle", Microsoft Learn, read 2026-11). A zonal reservation serves its zone only, so each zone
    is its own row. Azure lets VMs beyond the reserved quantity in, without its SLA: said."""
    from gpufleet.clouds.azure.api import AzureApi

    # sizes of a series Azure reserves (clouds.azure.reservable): NC_A100_v4
    g = azure.capacity_group("rg", "a100", "eastus", [("1", "Standard_NC96ads_A100_v4", 4, 1, 3),
                                                      ("2", "Standard_NC96ads_A100_v4", 2, 0, 0),
                                                      ("1", "Standard_NC24ads_A100_v4", 8, 0, 0)])
    azure.capacity_group("rg", "other", "westus3", [("1", "Standard_NC96ads_A100_v4", 8, 0, 0)])
    found = AzureApi().capacity("eastus", "Standard_NC96ads_A100_v4", 2, 24, None)
    assert [(f.id, f.zone, f.instances) for f in found] == [(g["id"], "1", 3), (g["id"], "2", 2)]
    assert all("beyond the reserved quantity" in f.note and "SLA" in f.note for f in found)


def test_an_overallocated_azure_reservation_has_nothing_free_and_says_it(azure):
    """Azure allocates VMs beyond a reservation's quantity ("Overallocating capacity reservation"): its
    instance view then lists more VMs allocated than its capacity. What it still takes is none, never a
    negative count, and the row says by how many it is overallocated."""
    from gpufleet.clouds.azure.api import AzureApi

    azure.capacity_group("rg", "a100", "eastus", [("1", "Standard_NC96ads_A100_v4", 2, 5, 5),
                                                  ("2", "Standard_NC96ads_A100_v4", 4, 1, 1)])
    found = {f.zone: f for f in AzureApi().capacity("eastus", "Standard_NC96ads_A100_v4", 2, 24, None)}
    assert (found["1"].instances, found["2"].instances) == (0, 3)
    assert "overallocated by 3 VM(s)" in found["1"].note and "overallocated" not in found["2"].note


@pytest.mark.parametrize("hours, ok", [(24, True), (336, True), (504, True), (4368, True), (30, False),
                                       (360, False), (4536, False), (0, False)])
def test_durations_are_those_capacity_blocks_are_sold_for(hours, ok):
    if ok:
        capacity.check_hours(hours)
    else:
        with pytest.raises(InputError):
            capacity.check_hours(hours)


def test_find_asks_each_place_once_and_says_what_it_could_not_ask(cat, write):
    path = write("s.yaml", f"name: s\nowner: o\naccess: {{public_key: '{KEY}'}}\npools:\n"
                           "  - {name: a, provider: aws, region: us-east-1, instance_type: p5.48xlarge, nodes: 2,\n"
                           "     failover: {zones: any, providers: [gcp]}}\n")
    asked = []

    class Api:
        def capacity(self, region, itype, nodes, hours, start):
            asked.append((region, itype, nodes, hours))
            return []

    def open_api(provider, regions):
        return Api() if provider == "aws" else "gcp: no credentials found"

    (f,) = capacity.find(stacks.load(path, cat), cat, hours=48, open_api=open_api)
    assert asked == [("us-east-1", "p5.48xlarge", 2, 48)]  # every zone of the region is one question
    assert f.unread and all(k.startswith("gcp ") for k in f.unread)


def test_cli_find_on_gcp_gives_the_reservations_entry_and_json(gcp, write):
    gcp.add("reservations", "zones/us-central1-a", "h100-a", status="READY", specificReservationRequired=True,
            specificReservation={"instanceProperties": {"machineType": "a3-highgpu-8g"}, "count": "4",
                                 "inUseCount": "0"})
    path = write("g.yaml", "name: g\nowner: o\npools:\n  - {name: h, provider: gcp, region: us-central1, "
                           "instance_type: a3-highgpu-8g, nodes: 2}\n")
    r = cli("--json", "capacity", "find", path)
    assert r.exit_code == 0, r.output
    (pool,) = json.loads(r.stdout)["pools"]
    (c,) = pool["capacity"]
    assert (c["id"], c["fits"], c["held"]) == ("h100-a", True, True)
    r = cli("--wide", "capacity", "find", path)
    assert r.exit_code == 0 and "reservations: [{id: h100-a, zone: us-central1-a}]" in r.stdout
    r = cli("capacity", "find", path, "--pool", "nope")
    assert r.exit_code == 2 and "its cloud pools: h" in r.output

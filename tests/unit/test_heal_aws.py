"""A cloud node replaced through the pool's own EC2 Fleet request, against moto's server (the real wire
protocol): the pool is an instant fleet made as ``components.fleet_request`` makes it; `heal` asks the
same request for one node, in the same zone and from the same launch template, then terminates the old
node and records the new one."""

import datetime as dt

import boto3
import pytest
from botocore.client import BaseClient
from botocore.validate import ParamValidator
from test_heal import XID, Bucket, Cluster, say, stack_text

from gpufleet import stacks
from gpufleet.clouds import inventory
from gpufleet.clouds.aws.api import AwsApi
from gpufleet.engine import plan as planner
from gpufleet.fleet import down as fleet_down
from gpufleet.fleet import heal as healing
from gpufleet.fleet import status
from gpufleet.fleet import up as fleet_up
from gpufleet.nodes.run import Seams
from gpufleet.state.registry import Registry
from gpufleet.state.shared import DirectoryStore

REGION, ZONE = "us-east-1", "us-east-1b"


@pytest.fixture(autouse=True)
def like_ec2(monkeypatch):
    """moto answered as EC2 does in two ways it does not by itself (review of issue 51, finding 1):
    DescribeFleets leaves out instant fleets unless their ids are named (botocore 1.44.8's EC2 model,
    DescribeFleets: "If a fleet is of type instant, you must specify the fleet ID in the request, otherwise the
    fleet does not appear in the response"), and EC2 Fleet tags the instances it launches ``aws:ec2:fleet-id``
    (AWS's own EC2 Fleet workshop, awslabs/ec2-spot-workshops content/launching_ec2_spot_instances/
    ec2_fleet.md: "EC2 Fleet automatically adds a tag to the instances with a key of aws:ec2:fleet-id").
    Returns the DescribeFleets calls' FleetIds (None: none named)."""
    real, instant, fleet_of, asked = BaseClient._make_api_call, set(), {}, []

    def call(self, op, params):
        got = real(self, op, params)
        if op == "CreateFleet" and params.get("Type") == "instant":
            instant.add(got["FleetId"])
            fleet_of.update({i: got["FleetId"] for x in got.get("Instances") or [] for i in x.get("InstanceIds") or []})
        elif op == "DescribeFleets":
            asked.append(params.get("FleetIds"))
            if not params.get("FleetIds"):
                got["Fleets"] = [f for f in got.get("Fleets") or [] if f["FleetId"] not in instant]
        elif op == "DescribeInstances":
            for i in (i for r in got.get("Reservations") or [] for i in r["Instances"] if i["InstanceId"] in fleet_of):
                i["Tags"] = [*i.get("Tags", []), {"Key": "aws:ec2:fleet-id", "Value": fleet_of[i["InstanceId"]]}]
        return got

    monkeypatch.setattr(BaseClient, "_make_api_call", call)
    return asked


def tags(pool="gpu"):
    return [{"Key": "gpufleet:cluster", "Value": "hl"}, {"Key": "gpufleet:pool", "Value": pool},
            {"Key": "gpufleet:stack", "Value": "hl"}, {"Key": "gpufleet:owner", "Value": "ops@example.com"},
            {"Key": "gpufleet:expires-at", "Value": "2099-01-01T00:00:00Z"}]


def pool_fleet(n: int, pool="gpu", template: str | None = None, spot: bool = False) -> tuple[str, list[str]]:
    """The pool as `up` makes it: a launch template and one all-or-nothing instant fleet (the request
    components.fleet_request builds, in EC2's own names), in a subnet of the pool's zone (moto places a
    fleet's instances by the override's SubnetId: it leaves AvailabilityZone aside)."""
    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{len(pool)}.0/24", AvailabilityZone=ZONE)["Subnet"]["SubnetId"]
    lt = ec2.create_launch_template(LaunchTemplateName=template or f"hl-{pool}", LaunchTemplateData={
        "ImageId": "ami-12c6146b", "InstanceType": "g6.12xlarge",  # its nodes tagged by the template, as up's
        "TagSpecifications": [{"ResourceType": "instance", "Tags": tags(pool)}]})["LaunchTemplate"]["LaunchTemplateId"]
    made = ec2.create_fleet(
        Type="instant", LaunchTemplateConfigs=[{
            "LaunchTemplateSpecification": {"LaunchTemplateId": lt, "Version": "$Default"},
            "Overrides": [{"InstanceType": "g6.12xlarge", "AvailabilityZone": ZONE, "SubnetId": subnet}]}],
        TargetCapacitySpecification={"TotalTargetCapacity": n, "DefaultTargetCapacityType": "spot" if spot else "on-demand"},
        **({"SpotOptions": {"AllocationStrategy": "capacity-optimized", "InstanceInterruptionBehavior": "terminate",
                            "MinTargetCapacity": n, "SingleAvailabilityZone": True, "SingleInstanceType": True}} if spot
           else {"OnDemandOptions": {"AllocationStrategy": "lowest-price", "MinTargetCapacity": n,
                                     "SingleAvailabilityZone": True, "SingleInstanceType": True}}),
        TagSpecifications=[{"ResourceType": "fleet", "Tags": tags(pool)}])
    return made["FleetId"], [i for x in made["Instances"] for i in x["InstanceIds"]]


def instance(iid: str) -> dict:
    (got,) = [i for r in boto3.client("ec2", region_name=REGION).describe_instances(InstanceIds=[iid])["Reservations"]
              for i in r["Instances"]]
    return got


def test_a_node_is_replaced_from_the_pools_own_request_and_the_old_one_terminated(aws, like_ec2):
    fleet, ids = pool_fleet(2)
    _, others = pool_fleet(1, pool="other")
    new = AwsApi().replace_node(REGION, cluster="hl", pool="gpu", node_id=ids[0])
    assert like_ec2 and all(like_ec2), "the pool's instant fleet is found by its id, never by listing"
    made = instance(new["id"])
    assert made["State"]["Name"] == "running" and made["InstanceType"] == "g6.12xlarge"
    assert made["Placement"]["AvailabilityZone"] == new["zone"] == ZONE  # the pool's zone
    assert {t["Key"]: t["Value"] for t in made["Tags"]}["gpufleet:pool"] == "gpu"
    assert instance(ids[0])["State"]["Name"] in ("shutting-down", "terminated")
    assert instance(ids[1])["State"]["Name"] == instance(others[0])["State"]["Name"] == "running"


def test_heal_replaces_a_faulty_node_of_an_aws_pool_end_to_end(aws, tmp_path, cat):
    fleet, ids = pool_fleet(2)
    c = Cluster(tmp_path, cat, stack_text(nodes=2), api=None)
    for n, iid in zip(c.nodes, ids):  # the registry as `up` recorded the fleet's instances
        n.node_id = iid
    c.reg.record(name="hl", stack="hl", stack_file=str(tmp_path / "hl.yaml"), owner="ops@example.com",
                 expires_at="2099-01-01T00:00:00Z", backend=None, nodes=c.nodes)
    c.api = inventory.open_clouds(["aws"], required=True, regions={"aws": [REGION]})["aws"]
    say(c.bucket, ids[0], state="faulty", faults=[XID])
    say(c.bucket, ids[1])
    out = c.heal(dt.datetime.now(dt.timezone.utc))
    assert [r.done for r in out.repaired] == [True], out.repaired
    new = c.node_ids()[0]
    assert new not in ids and c.node_ids()[1] == ids[1]
    assert instance(new)["Placement"]["AvailabilityZone"] == ZONE
    assert instance(ids[0])["State"]["Name"] in ("shutting-down", "terminated")
    (e,) = [e for e in c.events() if e["action"] == "replace"]
    assert e["code"] == "GF-XID-FATAL" and new in e["outcome"]


def test_the_request_for_one_node_is_the_pools_own_and_valid_in_botocores_model(aws):
    """A spot pool in a placement group, read back from EC2 and asked again for one node: the same template
    (at its default version), type, zone, subnet, group and spot options, all or nothing for one; checked
    against botocore's own EC2 model (the request EC2 receives)."""
    from botocore.validate import ParamValidator

    from gpufleet.clouds.aws import replace

    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.1.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.1.1.0/24", AvailabilityZone=ZONE)["Subnet"]["SubnetId"]
    ec2.create_placement_group(GroupName="hl-gpu", Strategy="cluster")
    lt = ec2.create_launch_template(LaunchTemplateName="hl-spot", LaunchTemplateData={
        "ImageId": "ami-12c6146b", "InstanceType": "p5.48xlarge"})["LaunchTemplate"]["LaunchTemplateId"]
    made = ec2.create_fleet(
        Type="instant", LaunchTemplateConfigs=[{
            "LaunchTemplateSpecification": {"LaunchTemplateId": lt, "Version": "$Default"},
            "Overrides": [{"InstanceType": "p5.48xlarge", "AvailabilityZone": ZONE, "SubnetId": subnet,
                           "Placement": {"GroupName": "hl-gpu"}}]}],
        TargetCapacitySpecification={"TotalTargetCapacity": 2, "DefaultTargetCapacityType": "spot"},
        SpotOptions={"AllocationStrategy": "capacity-optimized", "InstanceInterruptionBehavior": "terminate",
                     "MinTargetCapacity": 2, "SingleAvailabilityZone": True, "SingleInstanceType": True},
        TagSpecifications=[{"ResourceType": "fleet", "Tags": tags()}])
    (fleet,) = ec2.describe_fleets(FleetIds=[made["FleetId"]])["Fleets"]
    req = replace.request_for_one(fleet)
    model = ec2.meta.service_model
    report = ParamValidator().validate(req, model.operation_model("CreateFleet").input_shape)
    assert not report.has_errors(), report.generate_report()
    (config,) = req["LaunchTemplateConfigs"]
    assert config["LaunchTemplateSpecification"] == {"LaunchTemplateId": lt, "Version": "$Default"}
    assert config["Overrides"] == [{"InstanceType": "p5.48xlarge", "AvailabilityZone": ZONE, "SubnetId": subnet,
                                    "Placement": {"GroupName": "hl-gpu"}}]
    assert req["TargetCapacitySpecification"] == {"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "spot"}
    assert req["SpotOptions"]["MinTargetCapacity"] == 1 and req["SpotOptions"]["AllocationStrategy"] == "capacity-optimized"
    assert "OnDemandOptions" not in req
    assert req["TagSpecifications"] == [{"ResourceType": "fleet", "Tags": fleet["Tags"]}]  # the pool's fleet's


def test_an_instance_the_registry_names_but_the_pool_does_not_tag_is_never_terminated(aws):
    """The registry may be a team's store, which anyone in the team can write: an instance id there that is not
    tagged as the pool's node (another cluster's, or nobody's) is refused, nothing launched or terminated."""
    import pytest

    from gpufleet.errors import GpufleetError

    _, ids = pool_fleet(1)
    stranger = boto3.client("ec2", region_name=REGION).run_instances(
        ImageId="ami-12c6146b", MinCount=1, MaxCount=1, InstanceType="m5.large")["Instances"][0]["InstanceId"]
    with pytest.raises(GpufleetError, match="not tagged as a node of pool gpu"):
        AwsApi().replace_node(REGION, cluster="hl", pool="gpu", node_id=stranger)
    with pytest.raises(GpufleetError, match="not tagged as a node of pool other"):
        AwsApi().replace_node(REGION, cluster="hl", pool="other", node_id=ids[0])
    assert instance(stranger)["State"]["Name"] == instance(ids[0])["State"]["Name"] == "running"
    launched = [i for r in boto3.client("ec2", region_name=REGION).describe_instances()["Reservations"]
                for i in r["Instances"]]
    assert len(launched) == 2  # nothing was asked for (the pool's node and the stranger)


def test_on_reserved_capacity_the_old_node_is_terminated_before_the_new_one_is_asked_for(aws, monkeypatch):
    """A Capacity Block or reservation sized to the pool frees a slot only once its instance is terminated."""
    from gpufleet.clouds.aws import replace

    _, ids = pool_fleet(2)
    seen = []
    real = replace.request_for_one
    monkeypatch.setattr(replace, "request_for_one", lambda *a: (seen.append(instance(ids[0])["State"]["Name"]),
                                                               real(*a))[1])
    new = AwsApi().replace_node(REGION, cluster="hl", pool="gpu", node_id=ids[0], release_first=True)
    assert seen == ["terminated"] and instance(new["id"])["State"]["Name"] == "running"


def test_a_replacement_whose_termination_is_refused_is_finished_later_without_a_second_launch(aws, monkeypatch):
    """Review of issue 51, finding 3: the new node is said (on_launch) before the old one's termination; that
    refused, the replacement is unfinished (its new node named), and the next call finishes it, launching none."""
    from botocore.exceptions import ClientError

    from gpufleet.errors import ReplacementUnfinished

    _, ids = pool_fleet(2)
    real, calls = BaseClient._make_api_call, []

    def refuse_once(self, op, params):
        calls.append(op)
        if op == "TerminateInstances" and calls.count(op) == 1:
            raise ClientError({"Error": {"Code": "RequestLimitExceeded", "Message": "slow down"}}, op)
        return real(self, op, params)

    monkeypatch.setattr(BaseClient, "_make_api_call", refuse_once)
    said = []
    with pytest.raises(ReplacementUnfinished) as e:
        AwsApi().replace_node(REGION, cluster="hl", pool="gpu", node_id=ids[0], on_launch=said.append)
    assert said == [e.value.launched] and instance(ids[0])["State"]["Name"] == "running"
    done = AwsApi().replace_node(REGION, cluster="hl", pool="gpu", node_id=ids[0], launched=said[0])
    assert done["id"] == said[0] and calls.count("CreateFleet") == 1
    assert instance(ids[0])["State"]["Name"] in ("shutting-down", "terminated")


def test_a_terminated_node_of_the_pool_is_said_gone_and_replaced_without_terminating_anything(aws, like_ec2):
    """Review of issue 51, finding 6: a reclaimed spot instance is listed terminated with its tags; that is the
    cloud's own answer (gone), and its replacement comes from the pool's fleet (its aws:ec2:fleet-id tag stays)."""
    _, ids = pool_fleet(2)
    _, others = pool_fleet(1, pool="other")
    ec2 = boto3.client("ec2", region_name=REGION)
    ec2.terminate_instances(InstanceIds=[ids[0], others[0]])
    api = AwsApi()
    assert api.gone_nodes(REGION, cluster="hl", pool="gpu", node_ids=[ids[0], ids[1], others[0]]) == {ids[0]}
    new = api.replace_node(REGION, cluster="hl", pool="gpu", node_id=ids[0])
    assert instance(new["id"])["State"]["Name"] == "running" and instance(ids[1])["State"]["Name"] == "running"


# --- the replacement as the lifecycle commands see it after heal -------------------------------

class Healed:
    """A pool `up` brought up (Pulumi's state, the fake CLI's, holding moto's instances), a week old as far as
    the registry knows, whose first node `heal` replaced."""

    def __init__(self, tmp_path, cat, monkeypatch):
        pytest.importorskip("pulumi")
        from fakes.pulumi_cli import FakePulumiCLI

        for var, value in (("XDG_DATA_HOME", tmp_path / "data"), ("PULUMI_BACKEND_URL", f"file://{tmp_path / 'state'}"),
                           ("PULUMI_CONFIG_PASSPHRASE", "test-passphrase")):
            monkeypatch.setenv(var, str(value))
        monkeypatch.delenv("GPUFLEET_REGISTRY", raising=False)
        (tmp_path / "hl.yaml").write_text(stack_text(nodes=2))
        self.stack, self.cat = stacks.load(tmp_path / "hl.yaml", cat), cat
        _, self.ids = pool_fleet(2)
        self.fake = FakePulumiCLI(planner.plan(self.stack, cat, workers=1))
        self.pool = self.fake.plan.outputs["pools"]["gpu"]  # Pulumi's state of the pool
        self.pool.update(node_ids=self.ids, private_ips=[instance(i)["PrivateIpAddress"] for i in self.ids])
        assert [n.node_id for n in self.up().nodes] == self.ids
        with Registry()._db(write=True) as db:  # launched a week ago, as far as the registry knows
            db.execute("UPDATE nodes SET launched_at = '2026-01-01T00:00:00Z'")
        bucket = Bucket()
        say(bucket, self.ids[0], state="faulty", faults=[XID])
        say(bucket, self.ids[1])
        (tmp_path / "log").mkdir()
        self.api = inventory.open_clouds(["aws"], required=True, regions={"aws": [REGION]})
        out = healing.heal(self.stack, cat, registry=Registry(), store=DirectoryStore(f"file://{tmp_path}/log"),
                           seams=Seams(cloud_api=self.api, stores={"b": bucket}),
                           outputs={"pools": {"gpu": {"bucket": {"name": "b", "cloud": "aws", "region": REGION}}}},
                           now=dt.datetime.now(dt.timezone.utc))
        ((self.new, self.fleet),) = [(r.new.node_id, r.fleet) for r in out.repaired if r.done]

    def up(self):
        return fleet_up.bring_up(self.stack, self.cat, fleet_up.UpOptions(
            configure=False, check=False, seams=fleet_up.Seams(pulumi_command=self.fake)), confirm=lambda p: True).record


def test_up_after_a_replacement_keeps_the_new_node_and_down_leaves_nothing(aws, tmp_path, cat, monkeypatch):
    """heal replaces outside Pulumi's state (a one-node fleet of its own, the old instance terminated); the
    next `up` gets Pulumi's recorded node list back, the terminated node in it. The registry keeps the new
    node (with its own launch time, which `status` costs from), and `down` deletes the new fleet and node by
    their tags: nothing tagged for the cluster is left."""
    h = Healed(tmp_path, cat, monkeypatch)
    ids, new = h.ids, h.new
    rec = h.up()  # Pulumi's state still lists ids[0]
    assert [n.node_id for n in rec.nodes] == [new, ids[1]]
    assert [n.node_id for n in Registry().get("hl").nodes] == [new, ids[1]]
    launched = {n.node_id: n.launched_at for n in Registry().get("hl").nodes}
    assert launched[ids[1]] == "2026-01-01T00:00:00Z" and launched[new] > "2026-11-01"  # the new node's own
    at = time_of(launched[new])  # the moment the new node launched: only the old one's week is billed
    (st,) = status.build([Registry().get("hl")], [], checked=set(), now=at)
    hours = (at - time_of("2026-01-01T00:00:00Z")).total_seconds() / 3600
    assert st.cost_so_far == pytest.approx(Registry().get("hl").nodes[1].usd_per_hour * hours)

    fleet_down.tear_down("hl", confirm=lambda r: True, pulumi_command=h.fake, cloud_api=h.api)
    assert Registry().get("hl") is None
    left, _ = inventory.collect(h.api, cluster="hl")
    assert left == []
    assert {instance(i)["State"]["Name"] for i in [*ids, new]} <= {"shutting-down", "terminated"}


def test_an_up_that_makes_the_pool_anew_deletes_the_node_heal_made(aws, tmp_path, cat, monkeypatch):
    """Pulumi replaces the pool's fleet (new instances; it deletes its own old fleet): heal's node, in a
    fleet of its own, is no node of the pool any more and would run on, billed, outside every list. `up`
    deletes it and its fleet, by their ids among what is tagged for the pool."""
    h = Healed(tmp_path, cat, monkeypatch)
    h.up()
    _, anew = pool_fleet(2, template="hl-gpu-anew")  # what Pulumi's new fleet launched
    h.pool.update(node_ids=anew, private_ips=[instance(i)["PrivateIpAddress"] for i in anew])
    rec = h.up()
    assert [n.node_id for n in rec.nodes] == anew and rec.replacements == []
    assert instance(h.new)["State"]["Name"] in ("shutting-down", "terminated")
    ec2 = boto3.client("ec2", region_name=REGION)
    assert not [f for f in ec2.describe_fleets(FleetIds=[h.fleet])["Fleets"] if not f["FleetState"].startswith("deleted")]
    assert {instance(i)["State"]["Name"] for i in [h.ids[1], *anew]} == {"running"}  # nothing else


def test_a_node_heal_made_that_will_not_go_stops_the_up_and_the_next_up_deletes_it(aws, tmp_path, cat, monkeypatch):
    """A node that refuses to go (termination protection) is named, the cluster is not recorded as up with a
    node running outside every list, and the next `up` deletes it."""
    from gpufleet.errors import LeftoverError

    h = Healed(tmp_path, cat, monkeypatch)
    ec2 = boto3.client("ec2", region_name=REGION)
    ec2.modify_instance_attribute(InstanceId=h.new, DisableApiTermination={"Value": True})
    _, anew = pool_fleet(2, template="hl-gpu-anew")
    h.pool.update(node_ids=anew, private_ips=[instance(i)["PrivateIpAddress"] for i in anew])
    with pytest.raises(LeftoverError) as ei:
        h.up()
    assert h.new in str(ei.value.resources) and "gpufleet up` again" in ei.value.hint
    assert Registry().get("hl").state == "updating" and Registry().get("hl").replacements
    ec2.modify_instance_attribute(InstanceId=h.new, DisableApiTermination={"Value": False})
    rec = h.up()
    assert rec.state == "up" and [n.node_id for n in rec.nodes] == anew and rec.replacements == []
    assert instance(h.new)["State"]["Name"] in ("shutting-down", "terminated")


def time_of(text: str) -> dt.datetime:
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)


def test_status_down_and_reap_see_the_instant_fleets_ec2_leaves_out_unasked(aws, like_ec2):
    """Every pool is an instant fleet, which DescribeFleets lists only by id: the inventory (what `status`,
    `down` and `reap` read) names them by the fleet-id tag of the cluster's instances."""
    fleet, _ = pool_fleet(2)
    api = inventory.open_clouds(["aws"], required=True, regions={"aws": [REGION]})
    found, unread = inventory.collect(api, cluster="hl")
    assert not unread
    assert fleet in {x.id for x in found}


# --- review of issue 51, finding 13: a spot pool's replacement and its spot_fallback -------------------

def no_spot(monkeypatch) -> list[dict]:
    """EC2 with no spot capacity: an instant CreateFleet for spot launches nothing and says why in ``Errors``
    (API_CreateFleet.html, CreateFleetError: ErrorCode, ErrorMessage, Lifecycle; read 2026-11); on-demand is
    answered by moto. Returns every CreateFleet request, as sent."""
    real, asked, refused = BaseClient._make_api_call, [], "fleet-00000000-0000-4000-8000-000000000000"

    def call(self, op, params):
        if op == "DeleteFleets" and params.get("FleetIds") == [refused]:  # the empty fleet, deleted (DeleteFleets)
            return {"SuccessfulFleetDeletions": [{"FleetId": refused, "CurrentFleetState": "deleted_terminating",
                                                  "PreviousFleetState": "active"}], "UnsuccessfulFleetDeletions": []}
        if op == "CreateFleet":
            asked.append(params)
            if params["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == "spot":
                return {"FleetId": refused, "Instances": [], "Errors": [{
                    "Lifecycle": "spot", "ErrorCode": "InsufficientInstanceCapacity",
                    "ErrorMessage": "We currently do not have sufficient g6.12xlarge capacity in the Availability "
                                    "Zone you requested (us-east-1b)."}]}
        return real(self, op, params)

    monkeypatch.setattr(BaseClient, "_make_api_call", call)
    return asked


@pytest.mark.parametrize("fallback", [True, False])
def test_a_spot_pool_asks_spot_first_then_its_spot_fallback(aws, tmp_path, cat, monkeypatch, fallback):
    _, ids = pool_fleet(2, spot=True)
    asked = no_spot(monkeypatch)
    text = stack_text(nodes=2).replace("nodes: 2,", "nodes: 2, spot: true," +
                                       (" failover: {spot_fallback: on-demand}," if fallback else ""))
    c = Cluster(tmp_path, cat, text, ids=lambda pool, i: ids[i])
    c.api = inventory.open_clouds(["aws"], required=True, regions={"aws": [REGION]})["aws"]
    say(c.bucket, ids[0], state="faulty", faults=[XID])
    say(c.bucket, ids[1])
    out = c.heal(dt.datetime.now(dt.timezone.utc))
    markets = [a["TargetCapacitySpecification"]["DefaultTargetCapacityType"] for a in asked]
    (e,) = [e for e in c.events() if e["action"] == "replace"]
    if not fallback:  # refused, reported, retried after a backoff: spot again
        assert markets == ["spot"] and [(r.done, r.refused) for r in out.repaired] == [(False, True)]
        assert instance(ids[0])["State"]["Name"] == "running" and e["market"] == "spot"
        return
    assert markets == ["spot", "on-demand"] and [r.done for r in out.repaired] == [True], out.repaired
    report = ParamValidator().validate(asked[1], boto3.client("ec2", region_name=REGION).meta.service_model
                                       .operation_model("CreateFleet").input_shape)
    assert not report.has_errors(), report.generate_report()
    assert "SpotOptions" not in asked[1] and asked[1]["OnDemandOptions"] == {
        "AllocationStrategy": "lowest-price", "MinTargetCapacity": 1, "SingleAvailabilityZone": True,
        "SingleInstanceType": True}
    assert instance(c.node_ids()[0])["State"]["Name"] == "running"
    assert instance(ids[0])["State"]["Name"] in ("shutting-down", "terminated")
    assert e["market"] == "on-demand" and "spot_fallback" in e["outcome"] and "on on-demand" in e["outcome"]


def test_a_spot_fallback_that_ec2_refuses_outright_is_backed_off_not_asked_every_pass(aws, tmp_path, cat, monkeypatch):
    """Spot refused, then the on-demand fallback refused for a reason that is no capacity (EC2's
    InvalidParameterValue, a "stop" refusal): the pool waits its backoff, like a capacity refusal; the next pass
    asks nothing (the issue: "a capacity refusal is ... retried with backoff, never loops")."""
    _, ids = pool_fleet(2, spot=True)
    asked = no_spot(monkeypatch)
    spot_only, refused = BaseClient._make_api_call, "fleet-00000000-0000-4000-8000-000000000001"

    def call(self, op, params):
        if op == "DeleteFleets" and params.get("FleetIds") == [refused]:
            return {"SuccessfulFleetDeletions": [{"FleetId": refused, "CurrentFleetState": "deleted_terminating",
                                                  "PreviousFleetState": "active"}], "UnsuccessfulFleetDeletions": []}
        if op == "CreateFleet" and params["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == "on-demand":
            asked.append(params)
            return {"FleetId": refused, "Instances": [], "Errors": [{
                "Lifecycle": "on-demand", "ErrorCode": "InvalidParameterValue",
                "ErrorMessage": "You cannot specify tags for Spot instances requests if there are no Spot instances "
                                "requests being created by the request."}]}
        return spot_only(self, op, params)

    monkeypatch.setattr(BaseClient, "_make_api_call", call)
    text = stack_text(nodes=2).replace("nodes: 2,", "nodes: 2, spot: true, failover: {spot_fallback: on-demand},")
    c = Cluster(tmp_path, cat, text, ids=lambda pool, i: ids[i])
    c.api = inventory.open_clouds(["aws"], required=True, regions={"aws": [REGION]})["aws"]
    say(c.bucket, ids[0], state="faulty", faults=[XID])
    say(c.bucket, ids[1])
    now = dt.datetime.now(dt.timezone.utc)
    out = c.heal(now)
    assert [(r.done, r.refused) for r in out.repaired] == [(False, True)], out.repaired
    assert "InvalidParameterValue" in out.repaired[0].detail
    markets = [a["TargetCapacitySpecification"]["DefaultTargetCapacityType"] for a in asked]
    assert markets == ["spot", "on-demand"]
    again = c.heal(now + dt.timedelta(seconds=1))
    assert not again.repaired and len(asked) == 2
    assert instance(ids[0])["State"]["Name"] == "running"

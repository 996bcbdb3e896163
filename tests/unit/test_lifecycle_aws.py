"""status, reap, verified down and check against AWS, over HTTP: boto3 -> moto's server.

Resources are made with boto3 the way an interrupted `up` leaves them (tagged, outside any
state); gpufleet finds them by tag alone. See fakes/aws.py for the two APIs moto lacks.
"""

import json

import boto3
import pytest

from gpufleet.engine import automation
from gpufleet.engine import plan as planner
from gpufleet.errors import LeftoverError, QuotaError
from gpufleet.fleet import down as fleet_down
from gpufleet.fleet import up as fleet_up
from gpufleet.state.registry import Node, Registry

from conftest import ROOT, cli

AWS_STACK = ROOT / "stacks" / "examples" / "aws-training.yaml"
PAST, FUTURE = "2026-01-01T00:00:00Z", "2099-01-01T00:00:00Z"
REGION = "us-west-2"


@pytest.fixture(autouse=True)
def _env(aws, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("PULUMI_BACKEND_URL", "file://" + str(tmp_path / "state"))
    monkeypatch.delenv("GPUFLEET_REGISTRY", raising=False)
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "test-passphrase")


def tagged(kind, cluster, expires=FUTURE, **extra):
    tags = [{"Key": "gpufleet:cluster", "Value": cluster}, {"Key": "gpufleet:stack", "Value": "s"},
            {"Key": "gpufleet:owner", "Value": "ops@example.com"}, {"Key": "gpufleet:expires-at", "Value": expires},
            *({"Key": k, "Value": v} for k, v in extra.items())]
    return [{"ResourceType": kind, "Tags": tags}]


def leak(cluster, region=REGION, expires=FUTURE, instance_type="p4d.24xlarge", protect=False):
    """What an `up` killed half-way leaves: network, instances, a data volume, an ENI, a placement group, an IP."""
    ec2 = boto3.client("ec2", region_name=region)
    vpc = ec2.create_vpc(CidrBlock="10.8.0.0/16", TagSpecifications=tagged("vpc", cluster, expires))["Vpc"]["VpcId"]
    sub = ec2.create_subnet(VpcId=vpc, CidrBlock="10.8.1.0/24", TagSpecifications=tagged("subnet", cluster, expires))
    sub = sub["Subnet"]["SubnetId"]
    sg = ec2.create_security_group(GroupName=f"{cluster}-sg", Description="gpufleet", VpcId=vpc,
                                   TagSpecifications=tagged("security-group", cluster, expires))["GroupId"]
    pg = ec2.create_placement_group(GroupName=f"{cluster}-pg", Strategy="cluster",
                                    TagSpecifications=tagged("placement-group", cluster, expires))
    inst = ec2.run_instances(ImageId="ami-12c6146b", MinCount=2, MaxCount=2, InstanceType=instance_type,
                             SubnetId=sub, SecurityGroupIds=[sg],
                             TagSpecifications=tagged("instance", cluster, expires))["Instances"]
    if protect:  # termination protection on the first instance
        ec2.modify_instance_attribute(InstanceId=inst[0]["InstanceId"], DisableApiTermination={"Value": True})
    vol = ec2.create_volume(Size=500, AvailabilityZone=f"{region}a", VolumeType="gp3",
                            TagSpecifications=tagged("volume", cluster, expires))["VolumeId"]
    eni = ec2.create_network_interface(SubnetId=sub, Groups=[sg],
                                       TagSpecifications=tagged("network-interface", cluster, expires))
    eip = ec2.allocate_address(Domain="vpc", TagSpecifications=tagged("elastic-ip", cluster, expires))
    return {"vpc": vpc, "subnet": sub, "sg": sg, "pg": pg["PlacementGroup"]["GroupId"],
            "instances": [i["InstanceId"] for i in inst], "volume": vol,
            "eni": eni["NetworkInterface"]["NetworkInterfaceId"], "eip": eip["AllocationId"]}


def untagged(region=REGION):
    ec2 = boto3.client("ec2", region_name=region)
    i = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1, InstanceType="g5.xlarge")["Instances"][0]
    v = ec2.create_volume(Size=10, AvailabilityZone=f"{region}a")["VolumeId"]
    sg = ec2.create_security_group(GroupName="someone-elses", Description="not ours")["GroupId"]
    return {"instance": i["InstanceId"], "volume": v, "sg": sg}


def running(region, ids) -> set:
    ec2 = boto3.client("ec2", region_name=region)
    out = set()
    for rv in ec2.describe_instances(InstanceIds=list(ids))["Reservations"]:
        out |= {i["InstanceId"] for i in rv["Instances"] if i["State"]["Name"] != "terminated"}
    return out


def exists(region, kind, rid) -> bool:
    ec2 = boto3.client("ec2", region_name=region)
    call = {"volume": lambda: ec2.describe_volumes(Filters=[{"Name": "volume-id", "Values": [rid]}])["Volumes"],
            "sg": lambda: ec2.describe_security_groups(Filters=[{"Name": "group-id", "Values": [rid]}])["SecurityGroups"],
            "eni": lambda: ec2.describe_network_interfaces(
                Filters=[{"Name": "network-interface-id", "Values": [rid]}])["NetworkInterfaces"],
            "vpc": lambda: ec2.describe_vpcs(Filters=[{"Name": "vpc-id", "Values": [rid]}])["Vpcs"],
            "eip": lambda: [a for a in ec2.describe_addresses()["Addresses"] if a["AllocationId"] == rid],
            "pg": lambda: [g for g in ec2.describe_placement_groups()["PlacementGroups"] if g["GroupId"] == rid]}
    return bool(call[kind]())


def record(name, expires=FUTURE, nodes=()):
    return Registry().record(name=name, stack=name, stack_file="x.yaml", owner="ops@example.com", expires_at=expires,
                             backend=None, nodes=list(nodes), locations=[("aws", REGION)])


# --- reap -------------------------------------------------------------------------------------

def test_reap_finds_an_interrupted_ups_leftovers_and_removes_only_them():
    crashed = leak("crashed")  # no registry entry, no Pulumi state: an orphan
    alive = leak("alive")
    record("alive")
    other = untagged()

    r = cli("--json", "reap", "--region", REGION, "--grace", "0")
    assert r.exit_code == 0, r.output
    dry = json.loads(r.stdout)
    ids = {x["id"] for x in dry["reap"]}
    expected = {crashed["vpc"], crashed["subnet"], crashed["sg"], crashed["pg"], *crashed["instances"],
                crashed["volume"], crashed["eni"], crashed["eip"]}
    assert ids == expected and dry["dry_run"] and not dry["deleted"]
    assert {x["reason"] for x in dry["reap"]} == {"orphan"}
    assert dry["usd_per_hour"] == pytest.approx(2 * 21.96 + 500 * 0.08 / 730 + 0.005, rel=0.01)
    assert running(REGION, crashed["instances"]) == set(crashed["instances"])  # a dry run deletes nothing

    r = cli("--json", "reap", "--region", REGION, "--grace", "0", "--yes")
    assert r.exit_code == 0, r.output
    done = json.loads(r.stdout)
    assert {x["id"] for x in done["deleted"]} == expected and not done["failed"]
    assert running(REGION, crashed["instances"]) == set()
    for kind in ("volume", "sg", "eni", "vpc", "eip", "pg"):
        assert not exists(REGION, kind, crashed[kind]), kind
    # another cluster's resources and untagged ones survive
    assert running(REGION, alive["instances"]) == set(alive["instances"])
    assert all(exists(REGION, k, alive[k]) for k in ("volume", "sg", "eni", "vpc", "eip", "pg"))
    assert running(REGION, [other["instance"]]) == {other["instance"]}
    assert exists(REGION, "volume", other["volume"]) and exists(REGION, "sg", other["sg"])


def test_young_orphans_are_kept_for_the_grace_period_and_expired_ones_go_at_once():
    young = leak("young")
    expired = leak("expired", expires=PAST)
    record("expired", expires=PAST)  # known to the registry, but its lease is over
    r = cli("--json", "reap", "--region", REGION, "--yes")
    data = json.loads(r.stdout)
    assert r.exit_code == 0, r.output
    assert {x["cluster"] for x in data["deleted"]} == {"expired"}
    assert {x["cluster"] for x in data["kept"]} == {"young"} and "grace period" in data["kept"][0]["detail"]
    assert running(REGION, young["instances"]) == set(young["instances"])
    assert running(REGION, expired["instances"]) == set()
    assert Registry().get("expired").state == "reaped"  # `down expired` clears it


def test_a_cluster_in_the_pulumi_state_is_not_an_orphan(tmp_path):
    leak("elsewhere")  # brought up from another machine that shares the state backend
    stacks = tmp_path / "state" / ".pulumi" / "stacks" / "gpufleet"
    stacks.mkdir(parents=True)
    (stacks / "elsewhere.json").write_text("{}")
    r = cli("--json", "reap", "--region", REGION, "--grace", "0")
    assert r.exit_code == 0 and json.loads(r.stdout)["reap"] == []


def test_filters_narrow_what_is_reaped():
    leak("one", expires=PAST)
    leak("two", expires=PAST)
    r = cli("--json", "reap", "--region", REGION, "--older-than", "1h")
    assert json.loads(r.stdout)["reap"] == []  # everything was made just now
    r = cli("--json", "reap", "--region", REGION, "--cluster", "two", "--yes")
    data = json.loads(r.stdout)
    assert r.exit_code == 0 and {x["cluster"] for x in data["deleted"]} == {"two"}
    r = cli("--json", "reap", "--region", REGION)
    assert {x["cluster"] for x in json.loads(r.stdout)["reap"]} == {"one"}


def test_an_unreadable_expiry_is_reported_and_nothing_of_it_is_deleted():
    ec2 = boto3.client("ec2", region_name=REGION)
    bad = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1, InstanceType="g5.xlarge",
                            TagSpecifications=tagged("instance", "mystery", expires="next tuesday"))
    bad = bad["Instances"][0]["InstanceId"]
    r = cli("reap", "--region", REGION, "--grace", "0", "--yes")
    assert r.exit_code == 1
    assert bad in r.output and "'next tuesday' is not an ISO 8601 time" in r.output and "Traceback" not in r.output
    assert running(REGION, [bad]) == {bad}


def test_bad_input_is_exit_2_and_deletes_nothing(monkeypatch):
    crashed = leak("crashed", expires=PAST)
    r = cli("reap", "--region", "us-west-9", "--yes")
    assert r.exit_code == 2 and "no cloud has a region 'us-west-9'" in r.output and "us-west-2" in r.output
    r = cli("reap", "--older-than", "3 fortnights", "--yes")
    assert r.exit_code == 2 and "--older-than" in r.output and "90m, 8h" in r.output
    r = cli("reap", "--provider", "aws-gov", "--yes")
    assert r.exit_code == 2 and "did you mean 'aws'" in r.output
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var)
    r = cli("reap", "--provider", "aws", "--yes")
    assert r.exit_code == 2 and "aws: no credentials found" in r.output and "aws configure" in r.output
    assert "Traceback" not in r.output
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    assert running(REGION, crashed["instances"]) == set(crashed["instances"])


# --- status -----------------------------------------------------------------------------------

def test_status_merges_the_registry_with_what_aws_reports():
    leaked = leak("train")
    record("train", nodes=[Node(pool="p", idx=i, provider="aws", location=REGION, machine="p4d.24xlarge",
                                node_id=x, usd_per_hour=21.96) for i, x in enumerate(leaked["instances"][:1])])
    leak("stray")
    r = cli("--json", "status", "--region", REGION)
    assert r.exit_code == 0, r.output
    rows = {c["cluster"]: c for c in json.loads(r.stdout)["clusters"]}
    assert rows["train"]["state"] == "up" and rows["train"]["nodes_recorded"] == 1
    assert rows["train"]["nodes_found"] == 2 and "the clouds report 2" in " ".join(rows["train"]["notes"])
    assert rows["train"]["usd_per_hour"] == pytest.approx(2 * 21.96 + 500 * 0.08 / 730 + 0.005, rel=0.01)
    assert rows["train"]["cost_so_far_usd"] >= 0
    assert rows["stray"]["state"] == "orphan" and rows["stray"]["nodes_found"] == 2
    r = cli("status", "train")  # by cluster name: only its regions are asked
    assert r.exit_code == 0 and "train" in r.output and "stray" not in r.output
    r = cli("status", "trian")
    assert r.exit_code == 2 and "did you mean 'train'" in r.output


def test_status_mine_and_owner_find_clusters_by_who_brought_them_up(cat, fake, monkeypatch):
    """The creator is the caller's identity where the cluster runs: `up` asks STS (moto answers with its
    own principal) and records it in the registry and the tags; racks record the OS user."""
    me = boto3.client("sts", region_name="us-east-1").get_caller_identity()["Arn"]
    bob = "arn:aws:sts::123456789012:assumed-role/Admin/bob@example.com"
    monkeypatch.setenv("GPUFLEET_WHO", "carol@ws1")
    from gpufleet import stacks

    fleet_up.bring_up(stacks.load(AWS_STACK, cat), cat, fleet_up.UpOptions(configure=False,
                      seams=fleet_up.Seams(pulumi_command=fake)), confirm=lambda p: True)
    assert Registry().get("aws-training").created_by == {"aws": me}
    ec2 = boto3.client("ec2", region_name=REGION)
    ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1, InstanceType="p4d.24xlarge",
                      TagSpecifications=tagged("instance", "bobs", **{"gpufleet:created-by": bob}))
    Registry().record(name="rack1", stack="r", stack_file="r.yaml", owner="lab@example.com", expires_at=FUTURE,
                      backend=None, nodes=[Node(pool="h", idx=0, provider="baremetal", location="lab", machine="dgx")],
                      created_by={"baremetal": "carol@ws1"})

    def shown(*args):
        r = cli("--json", "status", "--region", "us-east-1", "--region", REGION, *args)
        assert r.exit_code == 0, r.output
        return sorted(c["cluster"] for c in json.loads(r.stdout)["clusters"]), json.loads(r.stdout)

    assert shown()[0] == ["aws-training", "bobs", "rack1"]
    names, got = shown("--mine")
    assert names == ["aws-training", "rack1"] and set(got["me"]) == {me, "carol@ws1"}
    assert shown("--owner", "BOB")[0] == ["bobs"]  # any part, any case, of the creator's ARN
    assert shown("--owner", "lab@example.com")[0] == ["rack1"]  # or the stack's owner
    assert shown("--mine", "--owner", "bob")[0] == []
    r = cli("status", "--region", "us-east-1", "--region", REGION, "--owner", "nobody")
    assert r.exit_code == 0 and "No clusters owned or created by 'nobody'" in r.output


# --- verified down ----------------------------------------------------------------------------

@pytest.fixture
def fake(cat):
    pytest.importorskip("pulumi")
    from gpufleet import stacks

    from fakes.pulumi_cli import FakePulumiCLI

    return FakePulumiCLI(planner.plan(stacks.load(AWS_STACK, cat), cat, workers=1))


def test_down_deletes_what_the_state_missed_and_reports_what_refuses_to_die(cat, fake):
    from gpufleet import stacks

    stack = stacks.load(AWS_STACK, cat)
    fleet_up.bring_up(stack, cat, fleet_up.UpOptions(configure=False, seams=fleet_up.Seams(pulumi_command=fake)),
                      confirm=lambda p: True)
    # an earlier, interrupted `up` of the same cluster left these outside the Pulumi state;
    # one instance has termination protection on
    left = leak("aws-training", region="us-east-1", protect=True)
    with pytest.raises(LeftoverError) as ei:
        fleet_down.tear_down("aws-training", confirm=lambda r: True, pulumi_command=fake)
    survivors = {r["id"] for r in ei.value.resources}
    assert left["instances"][0] in survivors and "gpufleet down aws-training" in ei.value.hint
    assert running("us-east-1", left["instances"]) == {left["instances"][0]}
    assert not exists("us-east-1", "volume", left["volume"]) and not exists("us-east-1", "eip", left["eip"])
    rec = Registry().get("aws-training")
    assert rec.state == "leaking" and rec.backend is None  # Pulumi's part is done; the tags are not
    assert "aws-training" not in fake.stacks

    boto3.client("ec2", region_name="us-east-1").modify_instance_attribute(
        InstanceId=left["instances"][0], DisableApiTermination={"Value": False})
    calls = len(fake.calls)
    out = fleet_down.tear_down("aws-training", confirm=lambda r: True, pulumi_command=fake)
    assert len(fake.calls) == calls  # no Pulumi the second time: only the sweep
    assert Registry().get("aws-training") is None and running("us-east-1", left["instances"]) == set()
    assert left["instances"][0] in {o.resource.id for o in out.swept}


def test_cli_down_exit_1_lists_the_survivors(cat, fake, monkeypatch):
    from gpufleet import stacks

    monkeypatch.setattr(automation, "find_pulumi", lambda: fake)
    fleet_up.bring_up(stacks.load(AWS_STACK, cat), cat, fleet_up.UpOptions(configure=False,
                      seams=fleet_up.Seams(pulumi_command=fake)), confirm=lambda p: True)
    left = leak("aws-training", region="us-east-1", protect=True)
    r = cli("down", "aws-training", "--yes")
    assert r.exit_code == 1 and left["instances"][0] in r.output and "termination protection" in r.output
    r = cli("--json", "down", "aws-training", "--yes")
    data = json.loads(r.stdout)
    assert r.exit_code == 1 and data["error"] == "LeftoverError"
    assert left["instances"][0] in {x["id"] for x in data["resources"]}


# --- check and the quota preflight ------------------------------------------------------------

def test_check_shows_who_and_the_quota_against_use(aws, cat):
    aws.extras.quotas[("us-east-1", "L-417A185B")] = 192.0  # P instances, on-demand vCPUs
    boto3.client("ec2", region_name="us-east-1").run_instances(  # 96 vCPUs of P already running
        ImageId="ami-12c6146b", MinCount=1, MaxCount=1, InstanceType="p4d.24xlarge")
    r = cli("--json", "check", str(AWS_STACK))
    assert r.exit_code == 1, r.output  # 2 x 96 needed, 96 available
    data = json.loads(r.stdout)
    assert data["error"] == "QuotaError" and data["needed"] == 192 and data["available"] == 96
    assert data["lines"][0]["code"] == "L-417A185B"
    aws.extras.quotas[("us-east-1", "L-417A185B")] = 384.0
    r = cli("--json", "check", str(AWS_STACK))
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["identity"]["aws"]["account"] == "123456789012" and data["identity"]["aws"]["principal"].startswith("arn:aws")
    (line,) = data["quotas"]
    assert (line["limit"], line["used"], line["needed"], line["ok"]) == (384, 96, 192, True)


def test_up_refuses_a_short_quota_before_creating_anything(aws, cat, fake):
    from gpufleet import stacks

    aws.extras.quotas[("us-east-1", "L-417A185B")] = 96.0
    with pytest.raises(QuotaError) as ei:
        fleet_up.bring_up(stacks.load(AWS_STACK, cat), cat,
                          fleet_up.UpOptions(seams=fleet_up.Seams(pulumi_command=fake)), confirm=lambda p: True)
    assert ei.value.quota == "Running On-Demand P instances" and "L-417A185B" in ei.value.hint
    assert not any(c[0] == "up" for c in fake.calls) and Registry().get("aws-training") is None


def test_check_without_credentials_says_how_to_configure(monkeypatch):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var)
    r = cli("check", str(AWS_STACK))
    assert r.exit_code == 2 and "aws: no credentials found" in r.output and "Traceback" not in r.output


def test_what_depends_on_a_survivor_is_reported_blocked_not_retried():
    left = leak("stuck", expires=PAST, protect=True)
    # someone else's subnet in the cluster's VPC: the VPC cannot go (DependencyViolation)
    boto3.client("ec2", region_name=REGION).create_subnet(VpcId=left["vpc"], CidrBlock="10.8.2.0/24")
    r = cli("--json", "reap", "--region", REGION, "--yes")
    assert r.exit_code == 1, r.output
    failed = {x["id"]: x for x in json.loads(r.stdout)["failed"]}
    assert set(failed) == {left["instances"][0], left["vpc"]}
    assert failed[left["instances"][0]]["status"] == "failed" and "termination protection" in \
        failed[left["instances"][0]]["message"]
    vpc = failed[left["vpc"]]
    assert vpc["status"] == "blocked" and vpc["attempts"] == 1 and "DependencyViolation" in vpc["message"]
    assert f"blocked by instance {left['instances'][0]}" in vpc["message"]


def test_a_dependency_that_clears_is_retried_until_it_goes(monkeypatch):
    left = leak("slow", expires=PAST)
    ec2 = boto3.client("ec2", region_name=REGION)
    other = ec2.create_subnet(VpcId=left["vpc"], CidrBlock="10.8.2.0/24")["Subnet"]["SubnetId"]
    from gpufleet.clouds import inventory

    real_sleep = inventory.time.sleep
    waits = []

    def sleep(s):  # the owner of the other subnet removes it while gpufleet backs off
        waits.append(s)
        ec2.delete_subnet(SubnetId=other) if len(waits) == 1 else None
        real_sleep(min(s, 0.01))

    monkeypatch.setattr(inventory.time, "sleep", sleep)
    r = cli("--json", "reap", "--region", REGION, "--yes")
    assert r.exit_code == 0, r.output
    vpc = next(x for x in json.loads(r.stdout)["deleted"] if x["id"] == left["vpc"])
    assert vpc["attempts"] == 2 and waits[0] == pytest.approx(0.05)  # GPUFLEET_DELETE_BACKOFF in tests


def test_check_without_a_stack_says_who_on_each_cloud(monkeypatch, tmp_path):
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("AZURE_CONFIG_DIR", str(tmp_path / "azure"))
    monkeypatch.delenv("ARM_SUBSCRIPTION_ID", raising=False)
    r = cli("--json", "check")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["identity"]["aws"]["account"] == "123456789012"
    assert set(data["skipped"]) == {"gcp", "azure"} and "no subscription" in data["skipped"]["azure"]


# --- registry rebuild ---------------------------------------------------------------------

def _state_file(tmp_path, cluster, pools):
    """A stack of the file backend as Pulumi writes it: the root stack resource holds the outputs."""
    f = tmp_path / "state" / ".pulumi" / "stacks" / "gpufleet" / f"{cluster}.json"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps({"version": 3, "checkpoint": {"stack": f"organization/gpufleet/{cluster}", "latest": {
        "resources": [{"urn": f"urn:pulumi:{cluster}::gpufleet::pulumi:pulumi:Stack::gpufleet-{cluster}",
                       "type": "pulumi:pulumi:Stack", "outputs": {"cluster": cluster, "pools": pools}}]}}}))


def test_registry_rebuild_from_tags_and_the_pulumi_state_keeps_the_damaged_file(tmp_path):
    lost = leak("lost")  # tagged resources, and a Pulumi state with its outputs
    _state_file(tmp_path, "lost", {"trainers": {"provider": "aws", "region": REGION, "zone": f"{REGION}a",
                                                "instance_type": "p4d.24xlarge", "nodes": 2, "usd_per_node_hour": 21.96,
                                                "node_ids": lost["instances"], "private_ips": ["10.8.1.4", "10.8.1.5"],
                                                "ssh_endpoint": "10.8.1.4:22"}})
    leak("tags-only", instance_type="g5.xlarge")
    path = tmp_path / "data" / "gpufleet" / "registry.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not a registry " * 100)
    r = cli("status", "--local")
    assert r.exit_code == 1 and "gpufleet registry rebuild" in r.output
    r = cli("--json", "registry", "rebuild", "-r", REGION)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["backup"] and (tmp_path / "data" / "gpufleet" / doc["backup"].rsplit("/", 1)[-1]).read_bytes() == \
        b"not a registry " * 100
    reg = Registry(path)
    assert {c.name for c in reg.list()} == {"lost", "tags-only"}
    from_state = reg.get("lost")
    assert [n.private_ip for n in from_state.nodes] == ["10.8.1.4", "10.8.1.5"] and from_state.backend
    from_tags = reg.get("tags-only")
    assert len(from_tags.nodes) == 2 and {n.machine for n in from_tags.nodes} == {"g5.xlarge"}
    assert from_tags.owner == "ops@example.com" and from_tags.expires_at == FUTURE and from_tags.backend is None
    assert cli("status", "--local").exit_code == 0


def test_registry_rebuild_keeps_the_nodes_heal_put_in_place_of_pulumis(tmp_path):
    """Pulumi's state still names a node `heal` replaced (outside that state): a rebuild from a readable
    registry keeps the replacement, so the new node stays and the terminated one does not come back."""
    lost = leak("lost")
    pools = {"trainers": {"provider": "aws", "region": REGION, "zone": f"{REGION}a", "instance_type": "p4d.24xlarge",
                          "nodes": 2, "usd_per_node_hour": 21.96, "node_ids": lost["instances"],
                          "private_ips": ["10.8.1.4", "10.8.1.5"]}}
    _state_file(tmp_path, "lost", pools)
    ec2 = boto3.client("ec2", region_name=REGION)
    new = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1, InstanceType="p4d.24xlarge",
                            TagSpecifications=tagged("instance", "lost"))["Instances"][0]["InstanceId"]
    ec2.terminate_instances(InstanceIds=[lost["instances"][0]])
    from gpufleet.state.registry import nodes_from_outputs

    rec = record("lost", nodes=nodes_from_outputs({"pools": pools}))
    Registry().replace_node("lost", rec.nodes[0], Node("trainers", 0, "aws", REGION, "p4d.24xlarge", node_id=new))
    r = cli("registry", "rebuild", "-r", REGION, "--yes")
    assert r.exit_code == 0, r.output
    assert [n.node_id for n in Registry().get("lost").nodes] == [new, lost["instances"][1]]


def test_registry_rebuild_keeps_racks_and_asks_before_replacing_a_readable_registry(tmp_path):
    leak("cloudy")
    reg = Registry()
    reg.record(name="rack", stack="r", stack_file="r.yaml", owner="ops", expires_at=FUTURE, backend=None,
               nodes=[Node("gpu", 0, "baremetal", "dc1", "8x H100", node_id="10.0.0.1")])
    record("stale")  # a cloud cluster its cloud no longer has
    r = cli("registry", "rebuild", "-r", REGION)  # no terminal, no --yes
    assert r.exit_code == 2 and {c.name for c in Registry().list()} == {"rack", "stale"}
    r = cli("registry", "rebuild", "-r", REGION, "--yes")
    assert r.exit_code == 0, r.output
    assert {c.name for c in Registry().list()} == {"rack", "cloudy"} and "kept (rack)" in r.output


def test_registry_rebuild_in_team_mode_writes_the_teams_store(tmp_path, monkeypatch):
    """The tags stay the truth in team mode: `registry rebuild` writes each cluster's object in the
    team's store (its creator from the tags), keeps rack clusters and a cluster whose lease is live
    (an `up` whose resources are not tagged yet), and removes a cluster its cloud no longer has."""
    from gpufleet.fleet import team
    from gpufleet.state import leases

    (tmp_path / "shared").mkdir()
    url = team.init(f"file://{tmp_path / 'shared'}").url
    ec2 = boto3.client("ec2", region_name=REGION)
    ec2.run_instances(ImageId="ami-12c6146b", MinCount=2, MaxCount=2, InstanceType="p4d.24xlarge",
                      TagSpecifications=tagged("instance", "cloudy", **{"gpufleet:created-by": "arn:aws:iam::1:user/eve"}))
    reg = team.registry()
    reg.record(name="rack", stack="r", stack_file="r.yaml", owner="ops", expires_at=FUTURE, backend=None,
               nodes=[Node("gpu", 0, "baremetal", "dc1", "8x H100", node_id="10.0.0.1")],
               created_by={"baremetal": "eve@ws1"})
    for name in ("stale", "busy"):
        team.registry().record(name=name, stack=name, stack_file="x.yaml", owner="ops", expires_at=FUTURE,
                               backend=None, nodes=[], locations=[("aws", REGION)])
    store = team.open_store(url)
    held = leases.acquire(store, "busy", "up", "frank@ws2", heartbeat_s=3600)
    try:
        r = cli("--json", "registry", "rebuild", "-r", REGION, "--yes")
    finally:
        held.release()
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["store"] == url and doc["kept_held"] == ["busy"]
    assert sorted(store.keys("clusters/")) == ["clusters/busy.json", "clusters/cloudy.json", "clusters/rack.json"]
    theirs = Registry(tmp_path / "another-machine.db", shared=store)
    assert theirs.get("cloudy").created_by == {"aws": "arn:aws:iam::1:user/eve"} and len(theirs.get("cloudy").nodes) == 2
    assert theirs.get("rack").created_by == {"baremetal": "eve@ws1"} and theirs.get("stale") is None


def test_reap_empties_a_versioned_stack_bucket_before_deleting_it():
    s3 = boto3.client("s3", region_name=REGION)
    for name, cluster in (("gpufleet-crashed-0123", "crashed"), ("gpufleet-alive-4567", "alive")):
        s3.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": REGION})
        s3.put_bucket_tagging(Bucket=name, Tagging={"TagSet": tagged("bucket", cluster)[0]["Tags"]})
        s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        for v in range(3):  # versions and a delete marker: a versioned bucket keeps them all
            s3.put_object(Bucket=name, Key="status/gpu/node.json", Body=f'{{"v": {v}}}'.encode())
        s3.delete_object(Bucket=name, Key="status/gpu/node.json")
    s3.create_bucket(Bucket="someone-elses", CreateBucketConfiguration={"LocationConstraint": REGION})
    record("alive")
    r = cli("--json", "reap", "--region", REGION, "--grace", "0", "--yes")
    assert r.exit_code == 0, r.output
    done = json.loads(r.stdout)
    assert [(x["kind"], x["id"]) for x in done["deleted"]] == [("bucket", "gpufleet-crashed-0123")]
    names = {b["Name"] for b in s3.list_buckets()["Buckets"]}
    assert names == {"gpufleet-alive-4567", "someone-elses"}

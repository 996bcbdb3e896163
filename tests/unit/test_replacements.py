"""An `up` of a running cluster never replaces its nodes unasked, and frees what they hold first.

The program is the real one under Pulumi's mock runtime; the Pulumi stand-in (fakes/pulumi_cli.py)
decides each resource's step from the program's own inputs and replaceOnChanges against the state,
as the engine does, for `preview` and `up`; AWS is moto's HTTP server, where the pool's instances
run and must be terminated before the `up` that replaces them starts.
"""

import datetime as dt
import json

import boto3
import pytest

from gpufleet import stacks
from gpufleet.clouds import bootstrap
from gpufleet.engine import automation
from gpufleet.engine import plan as planner
from gpufleet.errors import LeftoverError
from gpufleet.fleet import up as fleet_up
from gpufleet.nodes import cloud as cloud_nodes
from gpufleet.state.registry import Registry

from conftest import ROOT, cli

EXAMPLES = ROOT / "stacks" / "examples"
FLEET, TEMPLATE = "aws:ec2/fleet:Fleet", "aws:ec2/launchTemplate:LaunchTemplate"
NOW = dt.datetime(2026, 11, 2, tzinfo=dt.timezone.utc)


@pytest.fixture(autouse=True)
def _env(aws, tmp_path, monkeypatch):
    monkeypatch.setenv("PULUMI_BACKEND_URL", "file://" + str(tmp_path / "state"))
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "test-passphrase")
    monkeypatch.delenv("GPUFLEET_REGISTRY", raising=False)


@pytest.fixture
def fake(recording_pulumi):
    return recording_pulumi


def edited(tmp_path, old: str, new: str) -> str:
    """The AWS example with ``old`` replaced by ``new``."""
    text = (EXAMPLES / "aws-training.yaml").read_text()
    assert old in text
    (tmp_path / "keys").mkdir(exist_ok=True)
    (tmp_path / "keys" / "example.pub").write_text((EXAMPLES / "keys" / "example.pub").read_text())
    path = tmp_path / "aws-training.yaml"
    path.write_text(text.replace(old, new))
    return str(path)


def up(path, cat, fake, on_attempt=None, **kw):
    return fleet_up.bring_up(stacks.load(path, cat), cat, confirm=kw.pop("confirm", lambda p: True),
                             options=fleet_up.UpOptions(configure=False, check=False,
                                                        seams=fleet_up.Seams(pulumi_command=fake), **kw),
                             on_event=fleet_up.UpEvents(on_attempt=on_attempt))


def ups(fake) -> int:
    return sum(1 for c in fake.calls if c[0] == "up")


def rendered(path, cat) -> dict:
    stack = stacks.load(path, cat)
    p = planner.plan(stack, cat, cluster=planner.cluster_for(stack, now=NOW), workers=1)
    return {r.type: r for r in p.cloud_resources if r.type in (FLEET, TEMPLATE)}


@pytest.mark.parametrize("change", ["root disk", "gpufleet upgrade"])
def test_a_launch_template_change_leaves_the_running_fleet_as_it_is(cat, tmp_path, monkeypatch, change):
    """Every input of the instant fleet is in its replaceOnChanges (EC2 cannot modify one), and the fleet
    named its template's latest version: a new template version (a bigger root disk, or a gpufleet whose
    user data carries another Salt) replaced every node. The fleet now names ``$Default``
    (FleetLaunchTemplateSpecificationRequest: "$Latest, or $Default"), which moves with the template."""
    before = rendered(EXAMPLES / "aws-training.yaml", cat)
    path = EXAMPLES / "aws-training.yaml"
    if change == "root disk":
        path = edited(tmp_path, "    nodes: 2\n", "    nodes: 2\n    root_disk_gb: 400\n")
    else:
        monkeypatch.setattr(bootstrap, "SALT_VERSION", "3008.9")
    after = rendered(path, cat)
    assert before[TEMPLATE].inputs != after[TEMPLATE].inputs
    assert before[FLEET].inputs == after[FLEET].inputs


def test_create_fleet_launches_from_the_templates_default_version(aws):
    """What the fleet now sends, against moto's EC2: CreateFleet with Version ``$Default`` launches from
    the template's default version, the one ``update_default_version`` keeps at the latest."""
    ec2 = boto3.client("ec2", region_name="us-east-1")
    lt = ec2.create_launch_template(LaunchTemplateName="t", LaunchTemplateData={
        "ImageId": "ami-12c6146b", "InstanceType": "p4d.24xlarge"})["LaunchTemplate"]
    ec2.create_launch_template_version(LaunchTemplateId=lt["LaunchTemplateId"], SourceVersion="1",
                                       LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "p5.48xlarge"})
    ec2.modify_launch_template(LaunchTemplateId=lt["LaunchTemplateId"], DefaultVersion="2")
    made = ec2.create_fleet(Type="instant", LaunchTemplateConfigs=[{"LaunchTemplateSpecification": {
        "LaunchTemplateId": lt["LaunchTemplateId"], "Version": "$Default"}}],
        TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "on-demand"})
    (iid,) = [i for s in made["Instances"] for i in s["InstanceIds"]]
    (rv,) = ec2.describe_instances(InstanceIds=[iid])["Reservations"]
    assert rv["Instances"][0]["InstanceType"] == "p5.48xlarge"


def test_a_template_change_is_no_replacement_under_yes(cat, fake, tmp_path):
    up(EXAMPLES / "aws-training.yaml", cat, fake)
    up(edited(tmp_path, "    nodes: 2\n", "    nodes: 2\n    root_disk_gb: 400\n"), cat, fake, replace_nodes=False)
    assert ups(fake) == 2


def test_refresh_image_looks_the_ami_up_again_says_so_and_replaces_no_running_node(cat, fake, tmp_path):
    """`up --refresh-image` re-pins on purpose: the cluster's pin is replaced (a new lookup), the templates
    change, the fleet does not (it names the template's default version), so no running node is."""
    up(EXAMPLES / "aws-training.yaml", cat, fake)
    r = cli("up", str(EXAMPLES / "aws-training.yaml"), "--yes", "--refresh-image", "--no-configure", "--no-check")
    assert r.exit_code == 0, r.output  # under --yes without --replace: no running node is replaced
    assert "--refresh-image: every image name a pool boots" in r.output
    (pin,) = [x for x in fake.plan.resources if x.type == "aws:gpufleet:PinnedAmi"]
    assert pin.inputs["refresh"] is True and ups(fake) == 2


def test_an_up_replacing_running_nodes_is_shown_asked_and_refused_under_yes(cat, fake, tmp_path):
    up(EXAMPLES / "aws-training.yaml", cat, fake)
    bigger = edited(tmp_path, "nodes: 2", "nodes: 3")  # a fleet's target capacity: EC2 replaces it
    with pytest.raises(fleet_up.ReplacesRunningNodes) as ei:
        up(bigger, cat, fake, replace_nodes=False)
    assert ei.value.exit_code == 2 and ups(fake) == 1  # nothing ran
    assert "replaces 2 running node(s) of pool trainers" in ei.value.message
    assert "targetCapacitySpecification" in ei.value.message
    assert ei.value.to_dict()["replaces"][0]["nodes"] == 2

    shown = []
    with pytest.raises(fleet_up.Aborted):  # at a terminal: the question comes with what it replaces
        up(bigger, cat, fake, confirm=lambda p: shown.extend(r.line() for r in p.replacements) and False)
    assert shown and shown[0].startswith("replaces 2 running node(s) of pool trainers") and ups(fake) == 1

    out = up(bigger, cat, fake, replace_nodes=True)
    assert ups(fake) == 2 and len(Registry().get("aws-training").nodes) == 3
    assert out.plan.replacements[0].pool == "trainers"


def test_cli_up_yes_refuses_a_replacement_and_replace_allows_it(cat, fake, tmp_path):
    up(EXAMPLES / "aws-training.yaml", cat, fake)
    bigger = edited(tmp_path, "nodes: 2", "nodes: 3")
    r = cli("up", bigger, "--yes", "--no-configure", "--no-check")
    assert r.exit_code == 2 and "replaces 2 running node(s) of pool trainers" in r.output and "--replace" in r.output
    assert ups(fake) == 1
    r = cli("--json", "up", bigger, "--yes", "--no-configure", "--no-check")
    assert r.exit_code == 2 and json.loads(r.stdout)["replaces"][0]["pool"] == "trainers"
    r = cli("--json", "up", bigger, "--yes", "--replace", "--no-configure", "--no-check")
    assert r.exit_code == 0, r.output
    assert ups(fake) == 2 and json.loads(r.stdout)["replaced"][0]["nodes"] == 2


def test_a_pool_landing_on_another_cloud_replaces_its_running_nodes_too(cat, fake, tmp_path, monkeypatch):
    """Moved to another cloud (the stack edited, or failover's first place there), a pool's resources get
    other types: Pulumi's preview deletes its fleet rather than replacing it. Its running nodes go all
    the same, so it is shown and asked too; a pool the stack no longer has is the user's own doing."""
    from gpufleet.nodes.run import Run, Seams

    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "p")
    up(EXAMPLES / "aws-training.yaml", cat, fake)
    path = tmp_path / "moved.yaml"
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "example.pub").write_text((EXAMPLES / "keys" / "example.pub").read_text())
    path.write_text("name: aws-training\nowner: o@example.com\naccess: {public_key: keys/example.pub}\npools:\n"
                    "  - {name: trainers, provider: gcp, region: us-central1, instance_type: a2-highgpu-8g, nodes: 2}\n")
    moved = stacks.load(path, cat)
    run = Run(moved, cat, "aws-training", Registry(), Seams(pulumi_command=fake), existing=Registry().get("aws-training"))
    lay = planner.plan(moved, cat, workers=1).layout
    (r,) = cloud_nodes.replacements(run, lay, planner.cluster_for(moved, "aws-training"))
    assert (r.pool, r.provider, r.nodes) == ("trainers", "aws", 2) and "is deleted" in r.line()
    gone = stacks.load(write_stack(tmp_path, "  - {name: others, provider: gcp, region: us-central1, "
                                             "instance_type: a2-highgpu-8g, nodes: 1}\n"), cat)
    run.stack = gone
    assert cloud_nodes.replacements(run, planner.plan(gone, cat, workers=1).layout,
                                    planner.cluster_for(gone, "aws-training")) == []


def write_stack(tmp_path, pools: str) -> str:
    path = tmp_path / "other.yaml"
    path.write_text("name: aws-training\nowner: o@example.com\naccess: {public_key: keys/example.pub}\npools:\n"
                    + pools)
    return str(path)


def pool_instances(n: int, pool="trainers", protect=False) -> list[str]:
    """The pool's running instances as its instant fleet launched them (tagged for the cluster and pool)."""
    ec2 = boto3.client("ec2", region_name="us-east-1")
    tags = [{"Key": "gpufleet:cluster", "Value": "aws-training"}, {"Key": "gpufleet:pool", "Value": pool},
            {"Key": "gpufleet:stack", "Value": "aws-training"}, {"Key": "gpufleet:owner", "Value": "ops@example.com"},
            {"Key": "gpufleet:expires-at", "Value": "2099-01-01T00:00:00Z"}]
    made = ec2.run_instances(ImageId="ami-12c6146b", MinCount=n, MaxCount=n, InstanceType="p4d.24xlarge",
                             TagSpecifications=[{"ResourceType": "instance", "Tags": tags}])["Instances"]
    for i in made if protect else []:  # termination protection on
        ec2.modify_instance_attribute(InstanceId=i["InstanceId"], DisableApiTermination={"Value": True})
    return [i["InstanceId"] for i in made]


def states(ids) -> dict:
    out = {}
    for rv in boto3.client("ec2", region_name="us-east-1").describe_instances(InstanceIds=list(ids))["Reservations"]:
        out.update({i["InstanceId"]: i["State"]["Name"] for i in rv["Instances"]})
    return out


def test_the_old_nodes_are_terminated_before_the_up_that_replaces_them(cat, fake, tmp_path):
    """Pulumi deletes the old instant fleet first (deleteBeforeReplace), but DeleteFleets returns while
    its instances shut down (terraform-provider-aws does not wait for an instant fleet) and a Capacity
    Block's or reservation's slot is free only once its instance is terminated: a new fleet of
    MinTargetCapacity = the pool would find no room. They are terminated and waited for first."""
    up(EXAMPLES / "aws-training.yaml", cat, fake)
    old, other = pool_instances(2), pool_instances(1, pool="evaluators")
    seen = {}
    fake.on_up = lambda: seen.update(states(old + other))
    up(edited(tmp_path, "nodes: 2", "nodes: 3"), cat, fake, replace_nodes=True)
    assert {seen[i] for i in old} == {"terminated"}
    assert seen[other[0]] == "running"  # another pool's are not touched


def test_old_nodes_that_will_not_go_stop_the_up_before_anything_is_replaced(cat, fake, tmp_path, monkeypatch):
    monkeypatch.setenv("GPUFLEET_DELETE_ATTEMPTS", "1")
    monkeypatch.setenv("GPUFLEET_DELETE_WAIT", "1")
    up(EXAMPLES / "aws-training.yaml", cat, fake)
    stuck = pool_instances(1, protect=True)
    with pytest.raises(LeftoverError) as ei:
        up(edited(tmp_path, "nodes: 2", "nodes: 3"), cat, fake, replace_nodes=True)
    assert "running nodes of pool trainers are not all gone" in ei.value.message and stuck[0] in ei.value.message
    assert "nothing was replaced" in ei.value.hint and ups(fake) == 1
    assert Registry().get("aws-training").state == "failed"


KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFjtZCMk8DLg9Gw3q44fZDXDQHKWHrf7Wb55hmdcfA0A test"
CRG = "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg/providers/Microsoft.Compute/" \
      "capacityReservationGroups/a100"


def test_an_azure_pool_leaving_its_reservation_has_its_scale_set_replaced_and_said(cat, write):
    """A reserved scale set has singlePlacementGroup false, the open market's true; azure-native sends the
    change as an update, which ARM refuses: "if singlePlacementGroup is false, it may not be modified to
    true" (azure-native 3.29.0, VirtualMachineScaleSetArgs.single_placement_group). The scale set is
    replaced instead, and Pulumi's preview says so, which `up` shows and asks about."""
    from pulumi_azure_native.compute import VirtualMachineScaleSetArgs

    from gpufleet.clouds import candidates

    from conftest import placed_plan
    from fakes.pulumi_cli import FakePulumiCLI

    assert "if singlePlacementGroup is false, it may not be modified to true" in \
        VirtualMachineScaleSetArgs.single_placement_group.__doc__
    stack = stacks.load(write("z.yaml", f"name: z\nowner: o\naccess: {{public_key: '{KEY}'}}\npools:\n"
                                        "  - {name: z, provider: azure, region: eastus, zone: '2', nodes: 2, "
                                        f"instance_type: Standard_NC96ads_A100_v4, reservations: [{{id: '{CRG}', "
                                        "zone: '2'}]}\n"), cat)
    reserved, market = candidates.for_pool(stack, stack.pools[0], cat).ordered[:2]
    assert reserved.reservation is not None and (market.reservation, market.zone) == (None, "2")
    cl = planner.cluster_for(stack, now=NOW)
    fake = FakePulumiCLI(placed_plan(stack, cat, {"z": reserved}, cluster=cl))
    automation.up("z", lambda: None, pulumi_command=fake)
    fake.plan = placed_plan(stack, cat, {"z": market}, cluster=cl)
    steps = automation.preview("z", lambda: None, pulumi_command=fake)
    (vmss,) = [s for s in steps if s.kind == "azure-native:compute:VirtualMachineScaleSet"]
    assert "singlePlacementGroup" in vmss.keys
    assert cloud_nodes.pool_of("z", vmss.name, ["z"]) == "z"

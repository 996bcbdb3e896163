"""The deployer's AWS policy (clouds/aws/permissions.py) is what gpufleet's own calls need, checked
by the cloud's rules rather than by reading the code: the commands run against a moto server that
enforces IAM, as a user allowed exactly that policy, and fail, naming what was denied, when one
action is left out (issue 30, "a plan invariant for each identity")."""

import json

import pytest

from gpufleet.clouds.aws import permissions

from conftest import cli

REGION = "us-west-2"
TAGS = [{"Key": "gpufleet:cluster", "Value": "gone"}, {"Key": "gpufleet:stack", "Value": "s"},
        {"Key": "gpufleet:owner", "Value": "ops@example.com"}, {"Key": "gpufleet:expires-at", "Value": "2026-01-01T00:00:00Z"}]


@pytest.fixture
def as_deployer(iam_moto, monkeypatch, tmp_path):
    """``use(policy)``: the CLI's AWS calls go to the IAM-enforcing server as a user allowed ``policy``."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("PULUMI_BACKEND_URL", "file://" + str(tmp_path / "state"))
    monkeypatch.setenv("AWS_ENDPOINT_URL", iam_moto.url)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")

    def use(name: str, policy: dict):
        key = iam_moto.user(name, policy)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", key["aws_access_key_id"])
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key["aws_secret_access_key"])

    return use


def _leak(iam_moto):
    """An expired cluster's leftovers, made by the admin: an instance, a volume, a security group; and
    an expired golden image (with the snapshot moto makes for it)."""
    ec2 = iam_moto.client("ec2", region=REGION)
    spec = lambda kind: [{"ResourceType": kind, "Tags": TAGS}]  # noqa: E731
    inst = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1, InstanceType="g5.xlarge",
                             TagSpecifications=spec("instance"))["Instances"][0]["InstanceId"]
    vol = ec2.create_volume(Size=50, AvailabilityZone=f"{REGION}a", TagSpecifications=spec("volume"))["VolumeId"]
    sg = ec2.create_security_group(GroupName="gone-sg", Description="x", TagSpecifications=spec("security-group"))
    ami = ec2.register_image(Name="gpufleet-s-p-0123456789", RootDeviceName="/dev/sda1")["ImageId"]
    ec2.create_tags(Resources=[ami], Tags=[{"Key": "gpufleet:image", "Value": "gpufleet-s-p-0123456789"},
                                           {"Key": "gpufleet:expires-at", "Value": "2026-01-01T00:00:00Z"}])
    return {inst, vol, sg["GroupId"]}


def test_the_deployer_policy_is_enough_to_reap(iam_moto, as_deployer):
    leaked = _leak(iam_moto)
    as_deployer("deployer", permissions.policy(permissions.READ, permissions.DELETE))
    r = cli("--json", "reap", "--region", REGION, "--yes")
    assert r.exit_code == 0, r.output
    assert {x["id"] for x in json.loads(r.stdout)["deleted"]} == leaked
    assert [i["deleted"] for i in json.loads(r.stdout)["images_removed"]] == [True]
    r = cli("--json", "status", "--region", REGION)
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("missing", ["ec2:DescribeVolumes", "ec2:DescribeSecurityGroups", "ec2:TerminateInstances",
                                     "ec2:DeleteVolume", "ec2:DescribeImages", "ec2:DeregisterImage",
                                     "ec2:DeleteSnapshot"])
def test_each_action_left_out_is_denied_and_named(iam_moto, as_deployer, missing):
    """The policy is not merely enough: without one of its actions the same command fails, exit 1,
    with the cloud's denial, so a list that grew stale would show here."""
    _leak(iam_moto)
    policy = permissions.policy(permissions.READ, permissions.DELETE)
    policy["Statement"][0]["Action"].remove(missing)
    as_deployer("short", policy)
    r = cli("reap", "--region", REGION, "--yes")
    assert r.exit_code == 1, r.output
    assert "denied permission" in r.output or "UnauthorizedOperation" in r.output or "AccessDenied" in r.output, r.output


def _golden_image(iam_moto) -> tuple[str, str]:
    """An AMI Packer made and tagged, and the snapshot behind it (moto makes its own for the AMI)."""
    ec2 = iam_moto.client("ec2", region=REGION)
    ami = ec2.register_image(Name="gpufleet-s-p-0123456789", RootDeviceName="/dev/sda1")["ImageId"]
    ec2.create_tags(Resources=[ami], Tags=[{"Key": "gpufleet:image", "Value": "gpufleet-s-p-0123456789"}])
    return ami, ec2.describe_images(ImageIds=[ami])["Images"][0]["BlockDeviceMappings"][0]["Ebs"]["SnapshotId"]


@pytest.mark.parametrize("missing", [None, "ec2:DeleteSnapshot"])
def test_image_delete_needs_exactly_its_actions_and_names_a_snapshot_left_behind(iam_moto, as_deployer, missing,
                                                                                tmp_path, monkeypatch):
    monkeypatch.setenv("GPUFLEET_IMAGES", str(tmp_path / "images.json"))
    ami, snap = _golden_image(iam_moto)
    policy = permissions.policy(("sts:GetCallerIdentity", "ec2:DescribeRegions"), permissions.IMAGES)
    if missing:
        policy["Statement"][0]["Action"].remove(missing)
    as_deployer("imager", policy)
    r = cli("image", "delete", "gpufleet-s-p-0123456789", "--all", "--yes", "--region", REGION, "--provider", "aws")
    if missing is None:
        assert r.exit_code == 0, r.output
        return
    assert r.exit_code == 1 and f"snapshots {snap} are left" in r.output, r.output

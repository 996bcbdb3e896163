"""Review rev51b finding 8: an `up` after an edit of an elastic pool's bounds may not delete or re-create the pool's
nodes by itself. Through the CLI (`gpufleet up` in-process, Pulumi the fake that replays the plan) against the
emulators the scale tests use: the ARM fake (Azure: Virtual Machine Scale Sets as their REST reference says) and moto
(AWS EC2 Fleet). Refused: exit 2 naming `gpufleet scale`, nothing changed in the cloud or the registry."""

import boto3
import pytest
from test_heal import stack_text
from test_heal_aws import REGION, instance, like_ec2, pool_fleet  # noqa: F401  (like_ec2: autouse fixture)
from test_heal_azure import scale_set, vms
from test_scale_azure import TEXT as AZURE_TEXT

from gpufleet.clouds import inventory
from gpufleet.errors import EXIT_BAD_INPUT
from gpufleet.fleet import scale as scaling
from gpufleet.nodes.run import Seams

from conftest import cli

pytest.importorskip("pulumi")


def _cluster(tmp_path, cat, monkeypatch, text: str, ids: list[str], **outputs):
    """The stack brought up through `gpufleet up` (the fake Pulumi replays its plan with ``ids`` as the pool's nodes);
    `up` again, through the CLI, with the stack file as it is then: its result."""
    from gpufleet import stacks
    from gpufleet.engine import automation
    from gpufleet.engine import plan as planner

    from fakes.pulumi_cli import FakePulumiCLI

    for var, value in (("XDG_DATA_HOME", tmp_path / "data"), ("PULUMI_BACKEND_URL", f"file://{tmp_path / 'state'}"),
                       ("PULUMI_CONFIG_PASSPHRASE", "test-passphrase")):
        monkeypatch.setenv(var, str(value))
    monkeypatch.delenv("GPUFLEET_REGISTRY", raising=False)
    (tmp_path / "hl.yaml").write_text(text)
    fake = FakePulumiCLI(planner.plan(stacks.load(tmp_path / "hl.yaml", cat), cat, workers=1))
    fake.plan.outputs["pools"]["gpu"].update(node_ids=ids, **outputs)
    monkeypatch.setattr(automation, "find_pulumi", lambda: fake)
    (tmp_path / "log").mkdir()

    def up():
        return cli("up", str(tmp_path / "hl.yaml"), "--yes", "--no-configure")

    got = up()
    assert got.exit_code == 0, got.output
    return up


def _scale(tmp_path, cat, provider: str, region: str, n: int):
    from gpufleet import stacks
    from gpufleet.state.registry import Registry
    from gpufleet.state.shared import DirectoryStore

    api = inventory.open_clouds([provider], required=True, regions={provider: [region]})
    return scaling.scale(stacks.load(tmp_path / "hl.yaml", cat), cat, pool="gpu", count=n, registry=Registry(),
                         seams=Seams(cloud_api=api), store=DirectoryStore(f"file://{tmp_path}/log"))


def _recorded():
    from gpufleet.state.registry import Registry

    return [n.node_id for n in Registry().get("hl").nodes]


def test_an_up_that_would_let_azure_delete_vms_of_its_choosing_is_refused_naming_scale(azure, tmp_path, cat,
                                                                                       monkeypatch):
    """{min 2, max 4} scaled to 4, then max lowered to 3 (or the pool made fixed at 2): the program would send
    capacity 3 (2) in a whole PUT and Azure's scale-in policy would delete VMs of its choosing. Refused; after
    `gpufleet scale hl gpu 3` the same `up` goes through and deletes nothing more."""
    vmss = scale_set(azure)
    ids = [f"{vmss}/virtualMachines/{i}" for i in range(2)]
    up = _cluster(tmp_path, cat, monkeypatch, AZURE_TEXT, ids, private_ips=["10.3.0.10", "10.3.0.11"],
                  vm_uids=[azure.vm_uid(i) for i in ids])
    assert len(_scale(tmp_path, cat, "azure", "eastus", 4).added) == 2
    before = _recorded()
    for bounds, said, lost in (("{min: 2, max: 3}", "at most 3", 1), ("2", "at most 2", 2)):
        (tmp_path / "hl.yaml").write_text(AZURE_TEXT.replace("{min: 2, max: 4}", bounds))
        calls = len(azure.calls)
        got = up()
        assert got.exit_code == EXIT_BAD_INPUT and "Traceback" not in got.output, got.output
        assert said in got.output and f"Azure would delete {lost} of its VMs" in got.output, got.output
        assert "gpufleet scale hl gpu" in got.output, got.output
        assert [m for m, _ in azure.calls[calls:] if m != "GET"] == []  # nothing asked of Azure
        assert vms(azure, vmss) == ["0", "1", "2", "3"] and _recorded() == before
    (tmp_path / "hl.yaml").write_text(AZURE_TEXT.replace("{min: 2, max: 4}", "{min: 2, max: 3}"))
    assert len(_scale(tmp_path, cat, "azure", "eastus", 3).removed) == 1
    got = up()
    assert got.exit_code == 0, got.output
    assert len(vms(azure, vmss)) == 3 and len(_recorded()) == 3


def test_an_up_that_would_make_an_aws_pool_anew_or_leave_it_over_its_max_is_refused(aws, tmp_path, cat, monkeypatch):
    """AWS: the instant fleet's request carries min, so a new min replaces the fleet and terminates the pool's nodes
    (busy ones too); a lower max leaves the pool over it. Both refused, no instance touched."""
    _, ids = pool_fleet(2)
    text = stack_text(nodes="{min: 2, max: 4}")
    up = _cluster(tmp_path, cat, monkeypatch, text, ids, private_ips=[instance(i)["PrivateIpAddress"] for i in ids])
    added = _scale(tmp_path, cat, "aws", REGION, 4).added
    before = _recorded()
    for bounds, said in (("{min: 3, max: 4}", "a min of 3 (it was 2)"), ("{min: 2, max: 3}", "at most 3")):
        (tmp_path / "hl.yaml").write_text(text.replace("{min: 2, max: 4}", bounds))
        got = up()
        assert got.exit_code == EXIT_BAD_INPUT and said in got.output and "gpufleet scale hl gpu" in got.output, \
            got.output
        assert "Traceback" not in got.output and _recorded() == before
    ec2 = boto3.client("ec2", region_name=REGION)
    running = {i["InstanceId"] for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]
               if i["State"]["Name"] == "running"}
    assert running == {*ids, *added}


def test_the_size_ups_request_made_does_not_count_the_nodes_scale_added_nor_their_replacements():
    """The pool's request made 2 (min); `scale` added i-a and i-b, `heal` replaced i-a by i-c and i-c by i-d, and
    one of up's nodes was removed: up's request holds 2 still, whatever the record's list of 3 says."""
    from types import SimpleNamespace as NS

    from gpufleet.fleet import bounds

    node = lambda i: NS(pool="gpu", node_id=i)  # noqa: E731
    record = NS(nodes=[node("i-1"), node("i-b"), node("i-d")],
                resizes=[NS(pool="gpu", change="added", node=node("i-a")), NS(pool="gpu", change="added", node=node("i-b")),
                         NS(pool="gpu", change="removed", node=node("i-0"))],
                replacements=[NS(pool="gpu", old_id="i-a", node=node("i-c")), NS(pool="gpu", old_id="i-c", node=node("i-d"))])
    assert bounds._made_by_up(record, "gpu") == 2

"""`gpufleet scale` on an Azure pool against the ARM fake (tests/fakes/azure.py, answering Virtual Machine Scale
Sets - Update and - Delete Instances as their REST reference documents them): more VMs through the scale set's
capacity, recorded; fewer by instance id, only the chosen VM; a refused scale-out rolled back, nothing recorded;
and the next `up`'s program says the pool's size as `scale` left it, so Pulumi does not set it back."""

import datetime as dt

import pytest
from test_heal import KEY, XID, Bucket, Cluster, say
from test_heal_azure import TAGS, scale_set, vms

from gpufleet.clouds import inventory
from gpufleet.errors import GpufleetError
from gpufleet.fleet import scale as scaling
from gpufleet.nodes.run import Seams
from gpufleet.state import events

TEXT = (f"name: hl\nowner: ops@example.com\naccess: {{public_key: '{KEY}'}}\npools:\n"
        "  - {name: gpu, provider: azure, region: eastus, instance_type: Standard_ND96isr_H100_v5, "
        "nodes: {min: 2, max: 4}}\n")


class Pool:
    def __init__(self, azure, tmp_path, cat):
        self.vmss = scale_set(azure)
        self.azure = azure
        self.c = Cluster(tmp_path, cat, TEXT, ids=lambda pool, i: f"{self.vmss}/virtualMachines/{i}")
        self.bucket = Bucket()

    def scale(self, n):
        api = inventory.open_clouds(["azure"], required=True, regions={"azure": ["eastus"]})
        return scaling.scale(self.c.stack, self.c.cat, pool="gpu", count=n, registry=self.c.reg, store=self.c.log,
                             seams=Seams(cloud_api=api, stores={"b": self.bucket}), outputs=self.c.outputs)

    def ids(self):
        return [n.node_id for n in self.c.reg.get("hl").nodes]

    def capacity(self):
        return self.azure.items[self.vmss.lower()]["sku"]["capacity"]


def test_scale_up_raises_the_scale_sets_capacity_and_records_the_new_vms(azure, tmp_path, cat):
    p = Pool(azure, tmp_path, cat)
    out = p.scale(4)
    assert out.added == [f"{p.vmss}/virtualMachines/2", f"{p.vmss}/virtualMachines/3"] and out.after == 4
    assert vms(azure, p.vmss) == ["0", "1", "2", "3"] and p.capacity() == 4
    rec = p.c.reg.get("hl")
    assert p.ids() == [f"{p.vmss}/virtualMachines/{i}" for i in range(4)]
    assert all(n.vm_uid and n.private_ip for n in rec.nodes[2:])
    assert [e["action"] for e in events.read(p.c.log, "hl")] == ["scale-add", "scale-add"]


def test_a_refused_scale_out_is_rolled_back_reported_and_not_recorded(azure, tmp_path, cat):
    p = Pool(azure, tmp_path, cat)
    azure.faults[("PATCH", r"/virtualMachineScaleSets/hl-gpu$")] = [
        (409, {"error": {"code": "SkuNotAvailable", "message": "The requested size for resource is currently not "
                         "available in location 'eastus'"}}, {})]
    out = p.scale(4)
    assert out.refused and "SkuNotAvailable" in out.refused and out.short
    assert vms(azure, p.vmss) == ["0", "1"] and p.capacity() == 2
    assert p.ids() == [f"{p.vmss}/virtualMachines/{i}" for i in range(2)] and p.c.reg.get("hl").resizes == []


def test_scale_down_deletes_only_the_chosen_vm_by_its_id(azure, tmp_path, cat):
    p = Pool(azure, tmp_path, cat)
    p.scale(4)
    ids = p.ids()
    say(p.bucket, ids[2], state="faulty", faults=[XID])
    for i in (ids[0], ids[1], ids[3]):
        say(p.bucket, i)
    azure.calls.clear()
    out = p.scale(3)
    assert out.removed == [ids[2]]
    assert vms(azure, p.vmss) == ["0", "1", "3"] and p.capacity() == 3
    posts = [(m, path.rsplit("/", 1)[-1]) for m, path in azure.calls if m in ("PATCH", "POST")]
    assert posts == [("POST", "delete")]  # by id: never a capacity lowered for the scale-in policy to pick
    assert p.ids() == [ids[0], ids[1], ids[3]]


def test_a_vm_of_another_pools_scale_set_is_never_removed(azure):
    from gpufleet.clouds.azure.api import AzureApi

    vmss = scale_set(azure, tags={**TAGS, "gpufleet:pool": "other"})
    with pytest.raises(GpufleetError, match="not the scale set tagged for pool gpu"):
        AzureApi().remove_nodes("eastus", cluster="hl", pool="gpu", node_ids=[f"{vmss}/virtualMachines/0"])
    assert vms(azure, vmss) == ["0", "1"]


def test_the_next_ups_program_asks_the_scale_set_for_the_size_scale_left(cat, tmp_path):
    """Pulumi's mock runtime runs the real program: an elastic pool's scale set is asked for its recorded size
    (a whole PUT with min would have Azure delete VMs of its own choosing), a fixed pool's for its nodes."""
    pytest.importorskip("pulumi")
    from gpufleet import stacks
    from gpufleet.engine import plan as planner

    (tmp_path / "hl.yaml").write_text(TEXT)
    stack = stacks.load(tmp_path / "hl.yaml", cat)

    def capacity(st):
        got = planner.plan(st, cat, workers=1)
        (vmss,) = [r for r in got.resources if r.type == "azure-native:compute:VirtualMachineScaleSet"]
        return vmss.inputs["sku"]["capacity"]

    assert capacity(stack) == 2
    stack.pools[0].recorded_as(3)
    assert capacity(stack) == 3
    stack.pools[0].recorded_as(9)  # never beyond its bounds, whatever a store says
    assert capacity(stack) == 4


def test_up_after_scale_keeps_the_added_vms(azure, tmp_path, cat, monkeypatch):
    pytest.importorskip("pulumi")
    from gpufleet import stacks
    from gpufleet.engine import plan as planner
    from gpufleet.fleet import up as fleet_up
    from gpufleet.state.registry import Registry
    from gpufleet.state.shared import DirectoryStore

    from fakes.pulumi_cli import FakePulumiCLI

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("PULUMI_BACKEND_URL", "file://" + str(tmp_path / "state"))
    monkeypatch.delenv("GPUFLEET_REGISTRY", raising=False)
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "test-passphrase")
    vmss = scale_set(azure)
    (tmp_path / "hl.yaml").write_text(TEXT)
    stack = stacks.load(tmp_path / "hl.yaml", cat)
    fake = FakePulumiCLI(planner.plan(stack, cat, workers=1))
    ids = [f"{vmss}/virtualMachines/{i}" for i in range(2)]
    fake.plan.outputs["pools"]["gpu"].update(node_ids=ids, private_ips=["10.3.0.10", "10.3.0.11"],
                                             vm_uids=[azure.vm_uid(i) for i in ids])

    def up():
        return fleet_up.bring_up(stacks.load(tmp_path / "hl.yaml", cat), cat, fleet_up.UpOptions(
            configure=False, check=False, seams=fleet_up.Seams(pulumi_command=fake)), confirm=lambda p: True).record

    up()
    (tmp_path / "log").mkdir()
    api = inventory.open_clouds(["azure"], required=True, regions={"azure": ["eastus"]})
    added = scaling.scale(stack, cat, pool="gpu", count=3, registry=Registry(), seams=Seams(cloud_api=api),
                          store=DirectoryStore(f"file://{tmp_path}/log"), now=dt.datetime.now(dt.timezone.utc)).added
    rec = up()
    assert [n.node_id for n in rec.nodes] == [*ids, *added] and rec.nodes[2].vm_uid == azure.vm_uid(added[0])
    assert vms(azure, vmss) == ["0", "1", "2"]

"""A faulty Azure node replaced through its pool's own scale set, against the ARM fake (tests/fakes/azure.py,
answering Virtual Machine Scale Sets - Update and - Delete Instances as their REST reference documents them):
one VM more from the scale set's model, then the faulty one deleted by its instance id; a refused scale-out
leaves the scale set as it was."""

import datetime as dt

import pytest
from test_heal import KEY, XID, Cluster, say

from gpufleet.clouds import inventory
from gpufleet.clouds.azure.api import AzureApi
from gpufleet.errors import CapacityError, GpufleetError

TAGS = {"gpufleet:cluster": "hl", "gpufleet:pool": "gpu", "gpufleet:stack": "hl", "gpufleet:owner": "ops@example.com",
        "gpufleet:expires-at": "2099-01-01T00:00:00Z"}


def scale_set(azure, n: int = 2, tags=TAGS) -> str:
    azure.group("gpufleet-hl-eastus", "eastus", tags)
    vmss = azure.add("gpufleet-hl-eastus", "Microsoft.Compute/virtualMachineScaleSets", "hl-gpu", "eastus", tags,
                     sku={"name": "Standard_ND96isr_H100_v5", "tier": "Standard", "capacity": n})
    azure.scale_set_vms(vmss["id"], [(str(i), f"hl-gpu{i:06d}", f"10.3.0.{10 + i}", None) for i in range(n)])
    return vmss["id"]


def vms(azure, vmss: str) -> list[str]:
    return [v["instance"] for v in azure.scale_sets[vmss.lower()]]


def test_a_vm_is_replaced_from_the_scale_sets_model_and_the_faulty_one_deleted(azure):
    vmss = scale_set(azure)
    got = AzureApi().replace_node("eastus", cluster="hl", pool="gpu", node_id=f"{vmss}/virtualMachines/0")
    assert got["id"] == f"{vmss}/virtualMachines/2" and got["private_ip"] == "10.3.0.12" and got["vm_uid"]
    assert vms(azure, vmss) == ["1", "2"]  # the pool as big as before, the faulty VM gone
    calls = [(m, p.rsplit("/", 1)[-1]) for m, p in azure.calls if m in ("PATCH", "POST")]
    assert calls == [("PATCH", "hl-gpu"), ("POST", "delete")]  # the new one first, then the old one


def test_a_refused_scale_out_leaves_the_scale_set_as_it_was(azure):
    vmss = scale_set(azure)
    azure.faults[("PATCH", r"/virtualMachineScaleSets/hl-gpu$")] = [
        (409, {"error": {"code": "ZonalAllocationFailed", "message": "Allocation failed. We do not have sufficient "
                         "capacity for the requested VM size in this zone."}}, {})]
    with pytest.raises(CapacityError) as ei:
        AzureApi().replace_node("eastus", cluster="hl", pool="gpu", node_id=f"{vmss}/virtualMachines/0")
    assert ei.value.code == "ZonalAllocationFailed"
    assert vms(azure, vmss) == ["0", "1"]


def test_a_vm_of_a_scale_set_not_tagged_for_the_pool_is_never_deleted(azure):
    vmss = scale_set(azure, tags={**TAGS, "gpufleet:pool": "other"})
    with pytest.raises(GpufleetError, match="not a VM of the scale set tagged for pool gpu"):
        AzureApi().replace_node("eastus", cluster="hl", pool="gpu", node_id=f"{vmss}/virtualMachines/0")
    assert vms(azure, vmss) == ["0", "1"] and not [c for c in azure.calls if c[0] in ("PATCH", "POST")]


def test_heal_replaces_a_faulty_node_of_an_azure_pool_end_to_end(azure, tmp_path, cat):
    vmss = scale_set(azure)
    # with Slurm: on Azure any node of a pool can write its peers' statuses, so a node is replaced only once
    # the controller's Slurm view says it is drained (a status alone isolates it)
    text = (f"name: hl\nowner: ops@example.com\naccess: {{public_key: '{KEY}'}}\nslurm: {{}}\npools:\n"
            "  - {name: ctl, provider: azure, region: eastus, instance_type: Standard_NC24s_v3, role: controller, "
            "nodes: 1}\n"
            "  - {name: gpu, provider: azure, region: eastus, instance_type: Standard_ND96isr_H100_v5, nodes: 2, "
            "health: {on_fault: replace}}\n")
    c = Cluster(tmp_path, cat, text, ids=lambda pool, i: f"{vmss}/virtualMachines/{i}" if pool == "gpu" else "ctl-0")
    c.api = inventory.open_clouds(["azure"], required=True, regions={"azure": ["eastus"]})["azure"]
    say(c.bucket, f"{vmss}/virtualMachines/0", state="faulty", faults=[XID], hostname="hl-gpu000000")
    say(c.bucket, f"{vmss}/virtualMachines/1", hostname="hl-gpu000001")
    say(c.bucket, "ctl-0", pool="ctl", hostname="hl-ctl",
        scheduler="nodes\nhl-ctl idle\nhl-gpu000000 drained\nhl-gpu000001 idle\njobs\ndrained\n"
                  "hl-gpu000000|gpufleet: GF-XID-FATAL health.xid\n")
    out = c.heal(dt.datetime.now(dt.timezone.utc))
    assert [r.done for r in out.repaired] == [True], out.repaired
    assert c.node_ids() == ["ctl-0", f"{vmss}/virtualMachines/2", f"{vmss}/virtualMachines/1"]
    assert vms(azure, vmss) == ["1", "2"]
    assert c.reg.get("hl").nodes[1].vm_uid  # the new VM's own unique id, as `up` records it


def test_on_reserved_capacity_the_faulty_vm_goes_first_and_the_capacity_is_asked_back(azure):
    """A reservation sized to the pool has no slot for a VM more: the faulty one frees its slot first."""
    vmss = scale_set(azure)
    got = AzureApi().replace_node("eastus", cluster="hl", pool="gpu", node_id=f"{vmss}/virtualMachines/0",
                                  release_first=True)
    calls = [(m, p.rsplit("/", 1)[-1]) for m, p in azure.calls if m in ("PATCH", "POST")]
    assert calls == [("POST", "delete"), ("PATCH", "hl-gpu")]
    assert vms(azure, vmss) == ["1", "2"] and got["id"].endswith("/virtualMachines/2")


def capacity(azure, vmss: str) -> int:
    return int(azure.items[vmss.lower()]["sku"]["capacity"])


def test_a_scale_out_that_failed_without_a_vm_is_set_back_to_the_pools_size(azure, monkeypatch):
    """Review of issue 51, finding 14: ARM took sku.capacity N+1, the operation ended Failed and made no VM: the
    capacity is set back to N (else the next pass reads N+1 and asks N+2)."""
    from gpufleet.clouds.azure import replace

    vmss = scale_set(azure)
    real = replace.settled

    def failed_without_a_vm(api, scale_set_id, wait_s, sleep):
        got = real(api, scale_set_id, wait_s, sleep)
        azure.scale_sets[vmss.lower()][:] = [v for v in azure.scale_sets[vmss.lower()] if v["instance"] != "2"]
        return {**got, "properties": {**(got.get("properties") or {}), "provisioningState": "Failed"}}

    monkeypatch.setattr(replace, "settled", failed_without_a_vm)
    with pytest.raises(GpufleetError):
        AzureApi().replace_node("eastus", cluster="hl", pool="gpu", node_id=f"{vmss}/virtualMachines/0")
    assert vms(azure, vmss) == ["0", "1"] and capacity(azure, vmss) == 2


def test_a_replacement_that_made_its_vm_then_failed_is_finished_without_a_second_scale_out(azure):
    """Review of issue 51, finding 3 (Azure): the old VM's deletion refused after the scale-out; the new VM is said
    (on_launch) first, and the next call finishes the replacement: capacity N+1 once, never N+2."""
    from gpufleet.errors import ReplacementUnfinished

    vmss = scale_set(azure)
    azure.faults[("POST", r"/virtualMachineScaleSets/hl-gpu/delete$")] = [
        (409, {"error": {"code": "OperationNotAllowed", "message": "another operation is in progress"}}, {})]
    said = []
    with pytest.raises(ReplacementUnfinished):
        AzureApi().replace_node("eastus", cluster="hl", pool="gpu", node_id=f"{vmss}/virtualMachines/0",
                                on_launch=said.append)
    assert said == [f"{vmss}/virtualMachines/2"] and vms(azure, vmss) == ["0", "1", "2"]
    got = AzureApi().replace_node("eastus", cluster="hl", pool="gpu", node_id=f"{vmss}/virtualMachines/0",
                                  launched=said[0])
    assert got["id"] == said[0] and vms(azure, vmss) == ["1", "2"] and capacity(azure, vmss) == 2
    assert [m for m, p in azure.calls if m == "PATCH"] == ["PATCH"]  # one scale-out in all


def test_an_evicted_vm_is_said_gone_and_one_vm_more_is_asked_nothing_deleted(azure):
    """Review of issue 51, finding 6: an evicted spot VM (eviction policy Delete) is gone from its scale set, the
    capacity lowered with it; the cloud's answer says it is gone, and its replacement is one VM more."""
    vmss = scale_set(azure, n=3)
    azure.scale_sets[vmss.lower()][:] = [v for v in azure.scale_sets[vmss.lower()] if v["instance"] != "0"]
    azure.items[vmss.lower()]["sku"]["capacity"] = 2  # as the eviction leaves it
    api = AzureApi()
    ids = [f"{vmss}/virtualMachines/{i}" for i in range(3)]
    assert api.gone_nodes("eastus", cluster="hl", pool="gpu", node_ids=ids) == {ids[0]}
    assert api.gone_nodes("eastus", cluster="hl", pool="other", node_ids=ids) == set()  # not the pool's scale set
    got = api.replace_node("eastus", cluster="hl", pool="gpu", node_id=ids[0])
    assert got["id"] == f"{vmss}/virtualMachines/3" and vms(azure, vmss) == ["1", "2", "3"]
    assert [m for m, _ in azure.calls if m == "POST"] == []  # nothing deleted


def test_up_after_a_replacement_keeps_the_new_vm_until_pulumi_makes_the_pool_anew(azure, tmp_path, cat, monkeypatch):
    """The replacement VM is in Pulumi's scale set, but Pulumi's node list still names the deleted one: the
    next `up` keeps the new VM (its own unique id and launch time). Once Pulumi makes the scale set anew, its
    VMs' instance ids start at 0 again with new unique ids: the replacement no longer applies to them."""
    pytest.importorskip("pulumi")
    from test_heal import Bucket

    from gpufleet import stacks
    from gpufleet.engine import plan as planner
    from gpufleet.fleet import down as fleet_down
    from gpufleet.fleet import heal as healing
    from gpufleet.fleet import up as fleet_up
    from gpufleet.nodes.run import Seams
    from gpufleet.state.registry import Registry
    from gpufleet.state.shared import DirectoryStore

    from fakes.pulumi_cli import FakePulumiCLI

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("PULUMI_BACKEND_URL", "file://" + str(tmp_path / "state"))
    monkeypatch.delenv("GPUFLEET_REGISTRY", raising=False)
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "test-passphrase")
    vmss = scale_set(azure)
    (tmp_path / "hl.yaml").write_text(
        f"name: hl\nowner: ops@example.com\naccess: {{public_key: '{KEY}'}}\npools:\n"
        "  - {name: gpu, provider: azure, region: eastus, instance_type: Standard_ND96isr_H100_v5, nodes: 2, "
        "health: {on_fault: replace}}\n")
    stack = stacks.load(tmp_path / "hl.yaml", cat)
    fake = FakePulumiCLI(planner.plan(stack, cat, workers=1))
    ids = [f"{vmss}/virtualMachines/{i}" for i in range(2)]
    pool = fake.plan.outputs["pools"]["gpu"]  # Pulumi's state: the scale set's VMs as it read them
    pool.update(node_ids=ids, private_ips=["10.3.0.10", "10.3.0.11"], vm_uids=[azure.vm_uid(i) for i in ids])

    def up():
        return fleet_up.bring_up(stack, cat, fleet_up.UpOptions(configure=False, check=False,
                                                                seams=fleet_up.Seams(pulumi_command=fake)),
                                 confirm=lambda p: True).record

    up()
    bucket = Bucket()
    # VM 0 evicted (gone from its scale set, the capacity lowered with it): the cloud's own word, which on Azure,
    # where a node may write its peers' statuses, is what a replacement without Slurm may rest on
    azure.scale_sets[vmss.lower()][:] = [v for v in azure.scale_sets[vmss.lower()] if v["instance"] != "0"]
    azure.items[vmss.lower()]["sku"]["capacity"] = 1
    say(bucket, ids[1])
    (tmp_path / "log").mkdir()
    api = inventory.open_clouds(["azure"], required=True, regions={"azure": ["eastus"]})
    out = healing.heal(stack, cat, registry=Registry(), store=DirectoryStore(f"file://{tmp_path}/log"),
                       seams=Seams(cloud_api=api, stores={"b": bucket}),
                       outputs={"pools": {"gpu": {"bucket": {"name": "b", "cloud": "azure", "region": "eastus"}}}},
                       now=dt.datetime.now(dt.timezone.utc))
    assert [r.done for r in out.repaired] == [True], out.repaired
    new = f"{vmss}/virtualMachines/2"

    rec = up()  # Pulumi's list still names VM 0
    assert [(n.node_id, n.vm_uid) for n in rec.nodes] == [(new, azure.vm_uid(new)), (ids[1], azure.vm_uid(ids[1]))]
    assert [(n.node_id, n.private_ip) for n in Registry().get("hl").nodes] == [(new, "10.3.0.12"), (ids[1], "10.3.0.11")]

    pool.update(vm_uids=["made-anew-0", "made-anew-1"])  # the scale set made anew: ids 0 and 1 are new VMs
    rec = up()
    assert [(n.node_id, n.vm_uid) for n in rec.nodes] == [(ids[0], "made-anew-0"), (ids[1], "made-anew-1")]
    assert rec.replacements == []

    fleet_down.tear_down("hl", confirm=lambda r: True, pulumi_command=fake, cloud_api=api)
    assert Registry().get("hl") is None and inventory.collect(api, cluster="hl") == ([], {})


def test_a_spot_scale_set_asks_spot_only_and_says_its_spot_fallback_cannot_be_had(azure, tmp_path, cat):
    """Review of issue 51, finding 13, on Azure: a pool is one Uniform scale set, whose VMs all take its model's
    priority (Spot Priority Mix is for Flexible orchestration only: learn.microsoft.com/azure/virtual-machine-
    scale-sets/spot-priority-mix, read 2026-11). A refused spot scale-out is reported and retried; the event
    says the pool's spot_fallback cannot be asked there; no Regular VM is asked of the spot scale set."""
    vmss = scale_set(azure)
    azure.items[vmss.lower()]["properties"] = {"virtualMachineProfile": {"priority": "Spot", "evictionPolicy": "Delete"}}
    with pytest.raises(GpufleetError, match="makes spot VMs only"):
        AzureApi().replace_node("eastus", cluster="hl", pool="gpu", node_id=f"{vmss}/virtualMachines/0",
                                market="on-demand")
    assert not [m for m, _ in azure.calls if m in ("PATCH", "POST")]
    azure.faults[("PATCH", r"/virtualMachineScaleSets/hl-gpu$")] = [
        (409, {"error": {"code": "ZonalAllocationFailed", "message": "Allocation failed. We do not have sufficient "
                         "capacity for the requested VM size in this zone."}}, {})]
    text = (f"name: hl\nowner: ops@example.com\naccess: {{public_key: '{KEY}'}}\npools:\n"
            "  - {name: gpu, provider: azure, region: eastus, instance_type: Standard_ND96isr_H100_v5, nodes: 2, "
            "spot: true, failover: {spot_fallback: on-demand}, health: {on_fault: replace}}\n")
    c = Cluster(tmp_path, cat, text, ids=lambda pool, i: f"{vmss}/virtualMachines/{i}")
    c.api = inventory.open_clouds(["azure"], required=True, regions={"azure": ["eastus"]})["azure"]
    azure.scale_sets[vmss.lower()][:] = [v for v in azure.scale_sets[vmss.lower()] if v["instance"] != "0"]  # evicted
    azure.items[vmss.lower()]["sku"]["capacity"] = 1
    say(c.bucket, f"{vmss}/virtualMachines/1", hostname="hl-gpu000001")
    out = c.heal(dt.datetime.now(dt.timezone.utc))
    assert [(r.done, r.refused) for r in out.repaired] == [(False, True)] and not out.trouble
    (e,) = [e for e in c.events() if e["action"] == "replace"]
    assert e["market"] == "spot" and "spot_fallback (on-demand) cannot be asked on azure" in e["outcome"]
    assert "ZonalAllocationFailed" in out.repaired[0].detail
    assert [m for m, _ in azure.calls if m == "PATCH"] == ["PATCH"]  # one scale-out, of the spot scale set

"""A Uniform scale set's VMs read back from ARM (clouds/azure/pool_vms.py): azure-mgmt-resource over
HTTPS to the ARM fake (fakes/azure.py), which replays the documented list formats and paging."""

import pytest

from gpufleet.clouds.azure import pool_vms as nodes
from gpufleet.clouds.azure.api import AzureApi

pytest.importorskip("pulumi")

GROUP = "gpufleet-c-eastus"


def _scale_set(fake, name="c-nd"):
    return (f"/subscriptions/{fake.subscription}/resourceGroups/{GROUP}/providers/Microsoft.Compute/"
            f"virtualMachineScaleSets/{name}")


def test_ids_host_names_and_addresses_in_instance_order_across_pages(azure):
    vmss = _scale_set(azure)
    vms = [(str(i), f"c-nd{i:06x}", f"10.64.1.{4 + i}", f"203.0.113.{10 + i}") for i in (0, 1, 2, 10, 11)]
    azure.scale_set_vms(vmss, vms)
    azure.page_size = 2  # five VMs: three pages of each list
    try:
        got = AzureApi().scale_set_nodes(vmss)
    finally:
        azure.page_size = 50
    assert [n["instance_id"] for n in got] == ["0", "1", "2", "10", "11"]  # numeric, not "10" < "2"
    assert [n["private_ip"] for n in got] == [v[2] for v in vms]
    assert [n["public_ip"] for n in got] == [v[3] for v in vms]
    assert [n["host_name"] for n in got] == [v[1] for v in vms]
    assert got[3]["id"] == f"{vmss}/virtualMachines/10"


def test_outputs_once_every_vm_has_an_address(azure):
    vmss = _scale_set(azure)
    azure.scale_set_vms(vmss, [("0", "h0", "10.64.1.4", None), ("1", "h1", "10.64.1.5", None)])
    props = {"scale_set_id": vmss, "capacity": 2, "subscription": azure.subscription, "public": False}
    out = nodes.read_nodes(props, wait_s=0)
    vms = [f"{vmss}/virtualMachines/0", f"{vmss}/virtualMachines/1"]
    assert out == {"node_ids": vms, "host_names": ["h0", "h1"], "private_ips": ["10.64.1.4", "10.64.1.5"],
                   "public_ips": None, "vm_uids": [azure.vm_uid(v) for v in vms]}  # ARM's properties.vmId


def test_a_scale_set_short_of_addresses_is_an_error_naming_it(azure):
    vmss = _scale_set(azure)
    azure.scale_set_vms(vmss, [("0", "h0", "10.64.1.4", None), ("1", "h1", None, None)])
    props = {"scale_set_id": vmss, "capacity": 2, "subscription": azure.subscription, "public": False}
    with pytest.raises(Exception, match=r"1 of 2 VMs have a private IP after 0 s"):
        nodes.read_nodes(props, wait_s=0)

"""A Uniform scale set's VMs as Pulumi outputs: their ARM ids, unique ids, host names and addresses.

azure-native's ``VirtualMachineScaleSet`` outputs say nothing about its VMs, and no
azure-native function lists a scale set's NICs. ``ScaleSetNodes`` is a Pulumi dynamic
resource that reads them from ARM after the scale set exists (``AzureApi.scale_set_nodes``)
and again when its capacity changes or on ``refresh``, so a pool's exports hold the VMs'
real ids and private IPs and an SSH endpoint, as they do on AWS and GCP. Deleting it
deletes nothing: it only reads.
"""

from __future__ import annotations

import time

import pulumi

from gpufleet.clouds.azure.sdk import load
from gpufleet.clouds.pool_vms import PoolVms, PoolVmsProvider

KIND = "azure-native:gpufleet:ScaleSetNodes"  # how `plan` routes it to the Azure mocks
WAIT_S = 600  # a scale set's NICs can trail its "Succeeded" by a little; the VMs do not


def read_nodes(props: dict, *, wait_s: float = WAIT_S, api=None) -> dict:
    """The scale set's VMs as outputs, once it has ``capacity`` VMs that all have a private IP."""
    api = api or load("api").AzureApi(subscription=props["subscription"])  # plan needs no azure-mgmt: loaded here
    deadline = time.monotonic() + wait_s
    while True:
        nodes = api.scale_set_nodes(props["scale_set_id"])
        ready = len(nodes) == int(props["capacity"]) and all(n["private_ip"] for n in nodes)
        if ready or time.monotonic() >= deadline:
            break
        time.sleep(10)
    if not ready:
        with_ip = sum(1 for n in nodes if n["private_ip"])
        raise Exception(f"{props['scale_set_id']}: {with_ip} of {props['capacity']} VMs have a private IP "
                        f"after {wait_s:.0f} s; see `az vmss list-instances`")
    return {"node_ids": [n["id"] for n in nodes], "vm_uids": [n["vm_uid"] for n in nodes],
            "host_names": [n["host_name"] for n in nodes],
            "private_ips": [n["private_ip"] for n in nodes],
            "public_ips": [n["public_ip"] for n in nodes] if props.get("public") else None}


class ScaleSetNodesProvider(PoolVmsProvider):
    SOURCE = "scale_set_id"
    WATCHED = ("scale_set_id", "capacity", "public")

    def vms(self, props: dict, *, wait: bool) -> dict:
        return read_nodes(props) if wait else read_nodes(props, wait_s=0)


class ScaleSetNodes(PoolVms):
    """The VMs of one scale set (outputs: ``node_ids``, ``vm_uids``, ``host_names``, ``private_ips``,
    ``public_ips``)."""

    KIND = KIND
    OUTPUTS = ("node_ids", "vm_uids", "host_names", "private_ips", "public_ips")

    vm_uids: pulumi.Output[list]
    host_names: pulumi.Output[list]

    def __init__(self, name: str, *, scale_set_id, capacity: int, subscription: str, subnet_id, public: bool,
                 opts: pulumi.ResourceOptions | None = None):
        # subnet_id: only `plan` reads it, to predict the addresses the VMs get
        super().__init__(ScaleSetNodesProvider(), name, dict(scale_set_id=scale_set_id, capacity=capacity,
                                                             subscription=subscription, subnet_id=subnet_id,
                                                             public=public), opts)

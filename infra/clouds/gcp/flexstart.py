"""A GCP pool on flex-start VMs: Dynamic Workload Scheduler provisions all its VMs at once, or none.

The documented all-or-nothing path for flex-start is a managed instance group's resize request:
"Use resize requests to create virtual machine (VM) instances with GPUs all at once in a MIG"
(compute/docs/instance-groups/about-resize-requests-mig, read 2026-11). pulumi-gcp has every
part: an instance template whose VMs are ``FLEX_START`` (with ``maxRunDuration`` and
``instanceTerminationAction: DELETE``, consuming no reservation), a zonal instance group manager
that starts at size 0 and does nothing on a failed VM, and ``gcp.compute.ResizeRequest`` with
``resizeBy`` = the pool's nodes and ``requestedRunDuration`` (pulumi-gcp's own example,
compute.ResizeRequest / RegionResizeRequest). A pool is those three resources and this reader,
whatever its size.

pulumi-gcp returns once the request is accepted; DWS provisions later, when capacity frees up.
``FlexNodes`` waits for the request (InstanceGroupManagerResizeRequests.get): ``SUCCEEDED`` gives
the group's VMs (listManagedInstances) and their addresses; ``FAILED`` or ``CANCELLED`` fails
the update with the request's error as ``<code>: <message>``; still waiting after the pool's
``wait_minutes`` fails with ``FLEX_START_NOT_PROVISIONED``, which ``refusals`` reads as the zone
out of capacity, so failover moves on and removes the request, the group and the template.
"""

from __future__ import annotations

import time

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, ResourceProvider, UpdateResult

from gpufleet.clouds.gcp.pool_vms import api_for, outputs

KIND = "gcp:gpufleet:FlexNodes"  # how `plan` routes it to the GCP mocks
NOT_PROVISIONED = "FLEX_START_NOT_PROVISIONED"
POLL_S = 30
OUTPUTS = ("node_ids", "private_ips", "public_ips")


def scheduling(run_s: int) -> dict:
    """A flex-start VM's scheduling, as pulumi-gcp's InstanceTemplate takes it."""
    return {"provisioning_model": "FLEX_START", "max_run_duration": {"seconds": run_s},
            "instance_termination_action": "DELETE", "on_host_maintenance": "TERMINATE", "automatic_restart": False}


def read_nodes(props: dict, api=None, *, wait_s: float | None = None, clock=time.monotonic, sleep=time.sleep) -> dict:
    """The pool's VMs once DWS has provisioned them all, in the order of their names."""
    api = api or api_for(props)
    wait_s = props["wait_s"] if wait_s is None else wait_s
    deadline = clock() + wait_s
    while True:
        state, error = api.resize_request(props["zone"], props["group"], props["request"])
        if state == "SUCCEEDED":
            break
        if state in ("FAILED", "CANCELLED"):
            raise Exception(error or f"{NOT_PROVISIONED}: resize request {props['request']} is {state}")
        if clock() >= deadline:
            raise Exception(f"{NOT_PROVISIONED}: resize request {props['request']} for {props['nodes']} VMs in "
                            f"{props['zone']} is still {state} after {wait_s / 60:.0f} min (flex_start.wait_minutes)")
        sleep(min(POLL_S, max(0.0, deadline - clock())))
    names = sorted(api.managed_instance_names(props["zone"], props["group"]))
    if len(names) < props["nodes"]:
        raise Exception(f"{NOT_PROVISIONED}: group {props['group']} holds {len(names)} of {props['nodes']} VMs")
    found = {n["name"]: n for n in api.instances_named(props["zone"], names)}
    return outputs([found[n] for n in names if n in found], public=props.get("public"))


class FlexNodesProvider(ResourceProvider):
    def create(self, props: dict) -> CreateResult:
        return CreateResult(id_=f"{props['zone']}/{props['group']}/{props['request']}",
                            outs={**props, **read_nodes(props)})

    def read(self, id_: str, props: dict) -> ReadResult:
        return ReadResult(id_, {**props, **read_nodes(props, wait_s=0)})

    def diff(self, id_: str, olds: dict, news: dict) -> DiffResult:
        changed = [k for k in ("zone", "group", "request", "nodes", "project") if olds.get(k) != news.get(k)]
        return DiffResult(changes=bool(changed), replaces=changed)

    def update(self, id_: str, olds: dict, news: dict) -> UpdateResult:
        return UpdateResult(outs={**news, **read_nodes(news)})

    def delete(self, id_: str, props: dict) -> None:
        pass  # the VMs go with their group (gcp.compute.InstanceGroupManager)


class FlexNodes(Resource):
    """The VMs a resize request brings into a group (outputs: ``node_ids``, ``private_ips``, ``public_ips``)."""

    node_ids: pulumi.Output[list]
    private_ips: pulumi.Output[list]
    public_ips: pulumi.Output[list | None]

    def __init__(self, name: str, *, project: str | None, zone, group, request, nodes: int, wait_s: int,
                 subnet_id, public: bool, opts: pulumi.ResourceOptions | None = None):
        # subnet_id: only `plan` reads it, to predict the addresses the VMs get
        props = dict(gpufleet_kind=KIND, project=project, zone=zone, group=group, request=request, nodes=nodes,
                     wait_s=wait_s, subnet_id=subnet_id, public=public, **{k: None for k in OUTPUTS})
        super().__init__(FlexNodesProvider(), name, props, opts)

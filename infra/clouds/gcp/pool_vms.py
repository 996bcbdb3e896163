"""A GCP pool's VMs, created all at once or not at all: one ``instances.bulkInsert`` per placement group.

pulumi-gcp has no resource for ``bulkInsert``, and its all-or-nothing alternatives do not take an
ordinary VM: a managed instance group's bulk mode "is only supported with instance templates that
specify either a reservation-bound or flex-start provisioning model" (compute/docs/instance-groups/
bulk-create-instances-in-mig, read 2026-11), and resize requests are the flex-start path. So
``BulkInstances`` is a Pulumi dynamic resource that calls ``bulkInsert`` with ``count`` and
``minCount`` both the group's size and the VMs' names in ``perInstanceProperties``: "If
minCount instances cannot be created, then no instances will be created and instances already
created will be deleted" (BulkInsertInstanceResource ``minCount``,
https://cloud.google.com/compute/docs/reference/rest/v1/instances/bulkInsert). A pool larger than
one compact placement policy holds (``rules.MAX_COMPACT_VMS``) is one call per policy. The
compact placement policies are made here too, each just before its VMs
(``resourcePolicies.insert``), so that a pool is the same few Pulumi resources at 2 or 1,000
nodes; when a later call is refused, the VMs and policies of the earlier ones are deleted before
the error is raised, so the pool exists whole or not at all.

The refusal is raised as ``<code>: <message>`` from the operation's error (Operation ``error.errors[]``),
so ``refusals`` classifies it like any other. Reading lists the VMs by name; deleting deletes them,
then the policies. The VMs carry the pool's labels and the policies its tags in their description
(``tags.describe``), so `down` and `reap` find both whatever Pulumi's state says.
"""

from __future__ import annotations

import pulumi
from pulumi.dynamic import CreateResult, DiffResult

from gpufleet.clouds.gcp.rules import MAX_COMPACT_VMS
from gpufleet.clouds.gcp.sdk import load
from gpufleet.clouds.pool_vms import PoolVms, PoolVmsProvider

KIND = "gcp:gpufleet:BulkInstances"  # how `plan` routes it to the GCP mocks


def groups(names: list[str], policies: list[dict]) -> list[tuple[list[str], dict | None]]:
    """The bulkInsert calls of a pool: its VM names in runs of at most one policy's VMs, each with
    its compact placement policy (none: one call for all)."""
    if not policies:
        return [(names, None)]
    return [(names[k * MAX_COMPACT_VMS:(k + 1) * MAX_COMPACT_VMS], policy) for k, policy in enumerate(policies)]


def placement_policy(name: str, description: str) -> dict:
    """A compact placement policy as the REST API's ResourcePolicy
    (https://cloud.google.com/compute/docs/reference/rest/v1/resourcePolicies/insert)."""
    return {"name": name, "description": description, "groupPlacementPolicy": {"collocation": "COLLOCATED"}}


def request(names: list[str], properties: dict, policy: dict | None) -> dict:
    """The BulkInsertInstanceResource of one group, in the REST API's JSON: all of them or none."""
    props = {**properties, **({"resourcePolicies": [policy["name"]]} if policy else {})}
    return {"count": str(len(names)), "minCount": str(len(names)), "instanceProperties": props,
            "perInstanceProperties": {n: {} for n in names}}


def kept_request(zone, properties: dict, policies: list[dict]) -> dict:
    """The pool's request as `up` asked it, for one VM more (its first compact policy): what a replacement asks
    when no VM of the pool is left to read it from (``gcp.replace``). A BulkInsertInstanceResource "is not
    persisted anywhere" by Compute Engine, so the pool's stack output keeps it (``engine.program`` export)."""
    return {"zone": zone, "properties": {**properties, **({"resourcePolicies": [policies[0]["name"]]} if policies
                                                           else {})}}


def create_nodes(props: dict, api=None) -> dict:
    """Every group's VMs, or none: a refused group's error, after the earlier groups' VMs and
    every policy made for them are deleted."""
    api = api or api_for(props)
    made: list[str] = []
    policies: list[str] = []
    for names, policy in groups(props["names"], props.get("policies") or []):
        try:
            if policy:
                policies.append(policy["name"])
                api.insert_placement_policy(props["region"], policy)
            api.bulk_insert(props["zone"], request(names, props["properties"], policy))
        except Exception:
            _remove(api, props, made, policies)
            raise
        made += names
    return read_nodes(props, api)


def read_nodes(props: dict, api=None) -> dict:
    """The pool's VMs as outputs, in the order of their names."""
    api = api or api_for(props)
    found = {n["name"]: n for n in api.instances_named(props["zone"], props["names"])}
    missing = [n for n in props["names"] if n not in found]
    if missing:
        raise Exception(f"{len(missing)} of {len(props['names'])} VMs of the pool are not in {props['zone']} "
                        f"(first: {missing[0]}); see `gcloud compute instances list`")
    return outputs([found[n] for n in props["names"]], public=props.get("public"))


def outputs(vms: list[dict], *, public: bool) -> dict:
    """A pool's VMs (``GcpApi.instances_named``) as its outputs, in their order."""
    return {"node_ids": [n["id"] for n in vms], "private_ips": [n["private_ip"] for n in vms],
            "public_ips": [n["public_ip"] for n in vms] if public else None}


def _remove(api, props: dict, names: list[str], policies: list[str]) -> None:
    """The VMs first: a policy in use cannot be deleted."""
    if names:
        api.delete_instances(props["zone"], names)
    if policies:
        api.delete_placement_policies(props["region"], policies)


def api_for(props: dict):
    return load("api").GcpApi(project=props.get("project"))  # plan needs no google-cloud-compute: loaded here


class BulkInstancesProvider(PoolVmsProvider):
    """Makes the VMs as well as reading them: create makes them (all or none), a change makes new
    ones, delete deletes them and their policies."""

    def vms(self, props: dict, *, wait: bool) -> dict:
        return read_nodes(props)  # bulkInsert has returned: the VMs are there, or the pool is not

    def create(self, props: dict) -> CreateResult:
        return CreateResult(id_=f"{props['zone']}/{props['names'][0]}#{len(props['names'])}",
                            outs={**props, **create_nodes(props)})

    def diff(self, id_: str, olds: dict, news: dict) -> DiffResult:
        # any change is a new set of VMs (bulkInsert has no update); they keep their names, so the
        # old ones go first (``delete_before_replace``)
        changed = [k for k in ("zone", "region", "names", "properties", "policies", "project")
                   if olds.get(k) != news.get(k)]
        return DiffResult(changes=bool(changed), replaces=changed, delete_before_replace=True)

    def delete(self, id_: str, props: dict) -> None:
        _remove(api_for(props), props, props["names"], [p["name"] for p in props.get("policies") or []])


class BulkInstances(PoolVms):
    """The VMs of one GCP pool (outputs: ``node_ids``, ``private_ips``, ``public_ips``).

    ``properties``: the REST API's InstanceProperties (camelCase JSON), the same for every VM;
    ``policies``: the pool's compact placement policies (``placement_policy``), one per
    ``MAX_COMPACT_VMS`` VMs, made with them.
    """

    KIND = KIND

    def __init__(self, name: str, *, project: str | None, region: str, zone, names: list[str], properties: dict,
                 policies: list[dict], subnet_id, public: bool, opts: pulumi.ResourceOptions | None = None):
        # subnet_id: only `plan` reads it, to predict the addresses the VMs get
        super().__init__(BulkInstancesProvider(), name, dict(project=project, region=region, zone=zone, names=names,
                                                             properties=properties, policies=policies,
                                                             subnet_id=subnet_id, public=public), opts)

"""One node of a pool replaced through the pool's own request (`gpufleet heal`).

A pool is one ``instant`` EC2 Fleet (``components.fleet_request``): one launch template at its default
version, one instance type in one zone, all-or-nothing. Its replacement node is asked for with that
same request, read back from the pool's fleet (DescribeFleets: ``LaunchTemplateConfigs``,
``TargetCapacitySpecification``, ``OnDemandOptions`` / ``SpotOptions``), for one instance: the same
template, type, zone (and placement group, through the template), market and reservation use. The new
instant fleet and its instance carry the pool's tags, so `status`, `down` and `reap` find them as they
find the pool's own (the cloud's tags are the truth). Sources: API_CreateFleet.html,
API_FleetData.html, API_FleetLaunchTemplateConfigRequest.html, API_DeleteFleets.html (read 2026-11).

Order: a new node first, then the old one terminated, so that a refusal leaves the pool as it was;
on reserved capacity (a reservation or Capacity Block sized to the pool) the old node is terminated
first (``release_first``), since its slot is what the new one needs (``nodes.cloud.release``).
"""

from __future__ import annotations

from botocore.exceptions import ClientError

from gpufleet.clouds.aws import refusals
from gpufleet.clouds.base import RETRIED_LATER, refusal_in
from gpufleet.clouds.tags import TAG_PREFIX
from gpufleet.errors import CapacityError, GpufleetError, ReplacementUnfinished

# What DescribeFleets gives of the pool's request that CreateFleet takes back as it is (botocore 1.44.8's EC2
# model: FleetLaunchTemplateOverrides vs ...OverridesRequest; OnDemandOptions and SpotOptions have the same
# members as their requests). Placement comes back as PlacementResponse (its GroupName only).
OVERRIDES = ("InstanceType", "AvailabilityZone", "AvailabilityZoneId", "SubnetId", "MaxPrice", "WeightedCapacity",
             "Priority", "ImageId")
OPTIONS = ("OnDemandOptions", "SpotOptions", "ReservedCapacityOptions")
# A replacement on the other market than its pool's (a spot pool's spot_fallback): the options the pool's own
# request would have had on that market (``components.fleet_request``), for one node, all or nothing
MARKET_OPTIONS = {"on-demand": ("OnDemandOptions", {"AllocationStrategy": "lowest-price"}),
                  "spot": ("SpotOptions", {"AllocationStrategy": "capacity-optimized",
                                           "InstanceInterruptionBehavior": "terminate"})}
WHOLE_ONE = {"MinTargetCapacity": 1, "SingleAvailabilityZone": True, "SingleInstanceType": True}


class Refused(CapacityError):
    """EC2 launched no replacement: its refusal (capacity, quota, price) as EC2 worded it."""

    def __init__(self, message: str, code: str | None, hint: str | None = None):
        self.code = code
        super().__init__(message, hint or "the faulty node stays drained; `gpufleet heal` asks again later (backoff)")


# EC2 Fleet tags each instance it launches with its fleet's id (AWS's EC2 Fleet workshop, awslabs/ec2-spot-workshops
# content/launching_ec2_spot_instances/ec2_fleet.md, read 2026-11); "aws:" tags cannot be set or removed by a user
FLEET_TAG = "aws:ec2:fleet-id"


def pool_fleet(ec2, cluster: str, pool: str, node: dict) -> dict:
    """The pool's instant fleet: the one that launched ``node`` (an instance as DescribeInstances gives it; a node
    replaced before is in a fleet of its own, made from the same request), named by its id. DescribeFleets leaves
    out an instant fleet whose id the request does not name (botocore 1.44.8's EC2 model, DescribeFleets), so
    the pool's fleets are never listed."""
    said = {t["Key"]: t["Value"] for t in node.get("Tags") or []}
    fleet_id = said.get(FLEET_TAG)
    if not fleet_id:
        raise GpufleetError(f"aws: instance {node['InstanceId']} carries no {FLEET_TAG} tag: its pool's EC2 Fleet "
                            "is not known", "the pool's request is what a replacement is made from: run `gpufleet "
                            "up` for the pool")
    fleets = ec2.describe_fleets(FleetIds=[fleet_id]).get("Fleets") or []
    for f in fleets:
        tags = {t["Key"]: t["Value"] for t in f.get("Tags") or []}
        if (tags.get(TAG_PREFIX + "cluster"), tags.get(TAG_PREFIX + "pool")) == (cluster, pool):
            return f
    raise GpufleetError(f"aws: EC2 Fleet {fleet_id} (of instance {node['InstanceId']}) is not tagged for pool {pool} "
                        f"of cluster {cluster}", "the pool's request is what a replacement is made from: run "
                        "`gpufleet up` for the pool")


def request_for_one(fleet: dict, market: str | None = None) -> dict:
    """The pool's CreateFleet request, for one instance. Its instance, volume and interface tags come from the
    launch template, as the pool's own nodes' do (``components``: its tag_specifications); the new fleet carries
    the pool's fleet's tags (the request names them: an instant fleet's tags are given at its creation).
    ``market`` ("spot" / "on-demand"; None: the pool's own) sets DefaultTargetCapacityType and that market's
    options in place of the pool's (FleetData's TargetCapacitySpecification, API_CreateFleet.html, read 2026-11)."""
    configs = []
    for c in fleet["LaunchTemplateConfigs"]:
        spec = c["LaunchTemplateSpecification"]
        configs.append({"LaunchTemplateSpecification": {"LaunchTemplateId": spec["LaunchTemplateId"],
                                                        "Version": "$Default"},  # as components.fleet_request
                        "Overrides": [_override(o) for o in c.get("Overrides") or []]})
    capacity = fleet["TargetCapacitySpecification"]
    req = {"Type": "instant", "LaunchTemplateConfigs": configs,
           "TargetCapacitySpecification": {"TotalTargetCapacity": 1,
                                           "DefaultTargetCapacityType": capacity["DefaultTargetCapacityType"]},
           "TagSpecifications": [{"ResourceType": "fleet", "Tags": [t for t in fleet.get("Tags") or []
                                                                    if not t["Key"].startswith("aws:")]}]}
    for key in OPTIONS:
        if fleet.get(key):
            req[key] = dict(fleet[key])
            if "MinTargetCapacity" in req[key]:
                req[key]["MinTargetCapacity"] = 1  # all or nothing, as the pool's
    if market is not None and market != capacity["DefaultTargetCapacityType"]:
        key, options = MARKET_OPTIONS[market]
        for other, _ in MARKET_OPTIONS.values():
            req.pop(other, None)
        req[key] = {**options, **WHOLE_ONE}
        req["TargetCapacitySpecification"]["DefaultTargetCapacityType"] = market
    return req


def _override(o: dict) -> dict:
    out = {k: o[k] for k in OVERRIDES if k in o}
    if (o.get("Placement") or {}).get("GroupName"):
        out["Placement"] = {"GroupName": o["Placement"]["GroupName"]}
    return out


def _terminate(ec2, node_id: str, wait: bool) -> None:
    ec2.terminate_instances(InstanceIds=[node_id])
    if wait:  # its reserved slot is free only once it is terminated
        ec2.get_waiter("instance_terminated").wait(InstanceIds=[node_id], WaiterConfig={"Delay": 5, "MaxAttempts": 60})


def pools_node(ec2, cluster: str, pool: str, node_id: str) -> dict:
    """The instance ``node_id`` as EC2 describes it, if its own tags name the pool (the registry and heal's memory
    are a team's store: nothing is terminated or taken for a node on their word alone)."""
    (got,) = [i for r in ec2.describe_instances(InstanceIds=[node_id])["Reservations"] for i in r["Instances"]]
    said = {t["Key"]: t["Value"] for t in got.get("Tags") or []}
    if (said.get(TAG_PREFIX + "cluster"), said.get(TAG_PREFIX + "pool")) != (cluster, pool):
        raise GpufleetError(f"aws: instance {node_id} is not tagged as a node of pool {pool} of cluster {cluster}: "
                            "not replaced", "check the registry's record (`gpufleet registry rebuild` reads it again "
                            "from the clouds' tags)")
    return got


def replace_node(ec2, *, cluster: str, pool: str, node_id: str, release_first: bool = False,
                 launched: str | None = None, on_launch=None, market: str | None = None) -> dict:
    """A new node for the pool from its own request, then ``node_id`` terminated: {"id", "private_ip",
    "zone", "fleet_id"}. Refused (nothing launched, the old node left as it was unless
    ``release_first``) when EC2 launches none. ``on_launch`` is called with the new node's id the moment
    it exists, before anything else; a failure after it is ReplacementUnfinished, and a later call with
    ``launched`` (that id) finishes the replacement without launching again. ``market``: ``request_for_one``'s."""
    old = pools_node(ec2, cluster, pool, node_id)
    if launched is None:
        launched = _launch(ec2, cluster, pool, old, release_first, market)
        if on_launch is not None:
            on_launch(launched)
    try:  # EC2 is eventually consistent: a new id may not be found yet (docs.aws.amazon.com/ec2/latest/devguide/
        # eventual-consistency, read 2026-11); the next pass finishes it
        new = pools_node(ec2, cluster, pool, launched)
        if not release_first and old["State"]["Name"] not in ("shutting-down", "terminated"):
            _terminate(ec2, node_id, wait=False)
    except ClientError as e:
        raise ReplacementUnfinished(f"aws: {launched} was launched for pool {pool} in place of {node_id}, then: "
                                    f"{e}"[:400], launched=launched) from None
    said = {t["Key"]: t["Value"] for t in new.get("Tags") or []}
    return {"id": new["InstanceId"], "private_ip": new.get("PrivateIpAddress"),
            "zone": (new.get("Placement") or {}).get("AvailabilityZone"), "fleet_id": said.get(FLEET_TAG)}


def gone_nodes(ec2, *, cluster: str, pool: str, node_ids: list[str]) -> set[str]:
    """Those of ``node_ids`` EC2 lists as shutting down or terminated with the pool's own tags (a reclaimed spot
    instance, or one terminated before its replacement was refused). EC2 keeps a terminated instance listed for a
    while ("about an hour", ec2 user guide, terminating-instances, read 2026-11); one it no longer lists is not
    said gone (its absence could also be eventual consistency): it stays unknown."""
    want = set(node_ids)
    found = set()
    pages = ec2.get_paginator("describe_instances").paginate(Filters=[
        {"Name": f"tag:{TAG_PREFIX}cluster", "Values": [cluster]}, {"Name": f"tag:{TAG_PREFIX}pool", "Values": [pool]},
        {"Name": "instance-state-name", "Values": ["shutting-down", "terminated"]}])
    for page in pages:
        for i in (i for r in page.get("Reservations") or [] for i in r["Instances"]):
            said = {t["Key"]: t["Value"] for t in i.get("Tags") or []}
            if i["InstanceId"] in want and (said.get(TAG_PREFIX + "cluster"), said.get(TAG_PREFIX + "pool")) == \
                    (cluster, pool) and i["State"]["Name"] in ("shutting-down", "terminated"):
                found.add(i["InstanceId"])
    return found


def _launch(ec2, cluster: str, pool: str, old: dict, release_first: bool, market: str | None = None) -> str:
    """One node launched from the pool's own request: its id; Refused (or GpufleetError) when EC2 launched none."""
    node_id = old["InstanceId"]
    fleet = pool_fleet(ec2, cluster, pool, old)
    if release_first:
        _terminate(ec2, node_id, wait=True)
    made = ec2.create_fleet(**request_for_one(fleet, market))
    ids = [i for x in made.get("Instances") or [] for i in x.get("InstanceIds") or []]
    if not ids:
        refused(ec2, made, f"a replacement for {node_id} in pool {pool}", ids)
    return ids[0]


def refused(ec2, made: dict, what: str, ids: list[str], hint: str | None = None) -> None:
    """An instant fleet ``made`` that launched too few (``ids``): deleted with what it launched (it holds nothing
    then, and is not left behind), and EC2's refusal raised: Refused where asking later may help, else
    GpufleetError. A deletion EC2 refused leaves what was launched running: said, and never a Refused (which says
    nothing was left: `heal` keeps the ids it was told of and launches nothing more for the pool until they are
    recorded)."""
    kept = None  # why the fleet and its instances are still there
    try:
        # DeleteFleets reports a fleet it could not delete in UnsuccessfulFleetDeletions rather than as an error
        # (botocore 1.44.8's EC2 model, DeleteFleetsResult; read 2026-11-27)
        gone = ec2.delete_fleets(FleetIds=[made["FleetId"]], TerminateInstances=True)
        failed = (gone.get("UnsuccessfulFleetDeletions") or [{}])[0].get("Error") if \
            gone.get("UnsuccessfulFleetDeletions") else None
        kept = f"{failed.get('Code', 'no code')}: {failed.get('Message', '')}".rstrip(": ") if failed is not None else None
    except ClientError as e:
        kept = f"{e.response.get('Error', {}).get('Code', 'error')}: {e.response.get('Error', {}).get('Message', '')}"
    errors = made.get("Errors") or [{}]
    said = f"{errors[0].get('ErrorCode', 'no error given')}: {errors[0].get('ErrorMessage', '')}".rstrip(": ")
    found = refusal_in(refusals.RULES, said)
    if kept is not None:
        raise GpufleetError(
            f"aws: EC2 did not launch {what}: {said}; the {len(ids)} it launched ({', '.join(ids) or 'none'}) and their "
            f"fleet {made['FleetId']} could not be deleted (DeleteFleets: {kept}): they still run"[:600],
            "they are tagged for the cluster: `gpufleet registry rebuild` records them, `gpufleet reap` or "
            "`gpufleet down` deletes them")
    message = f"aws: EC2 did not launch {what}" + (f" ({len(ids)} launched, terminated again)" if ids else "") + \
        f": {said}"
    if found is None or found.kind not in RETRIED_LATER:  # a wrong request: asking again would not help
        raise GpufleetError(message, "the pool is left as it was; its request needs a look")
    raise Refused(message, found.code, hint)

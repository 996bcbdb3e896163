"""A pool made bigger or smaller outside Pulumi's state (`gpufleet scale`, `heal` for an elastic pool).

More nodes are asked for with the pool's own request, as a replacement is (``replace``): the pool's instant EC2
Fleet, read back by the id its nodes carry (``aws:ec2:fleet-id``), asked again for ``count`` instances, all or
nothing (``MinTargetCapacity``), in a fleet of their own that carries the pool's tags, so `status`, `down` and
`reap` find it. Fewer nodes: exactly the instances named, each checked to carry the pool's tags first, terminated.
Sources: API_CreateFleet.html, API_FleetData.html, API_OnDemandOptionsRequest.html ("MinTargetCapacity ...
Supported only for fleets of type instant. At least one of the following must be specified:
SingleAvailabilityZone | SingleInstanceType"), read 2026-11.
"""

from __future__ import annotations

import time

from botocore.exceptions import ClientError

from gpufleet.clouds.aws import replace
from gpufleet.clouds.tags import TAG_PREFIX
from gpufleet.errors import GpufleetError

ALL_OR_NONE = ("SingleAvailabilityZone", "SingleInstanceType")  # what MinTargetCapacity needs one of
SEEN_TRIES, SEEN_WAIT_S = 6, 5.0  # a new instance may not be described at once (EC2's eventual consistency)


def a_pool_node(ec2, cluster: str, pool: str) -> dict:
    """One running (or starting) instance tagged for the pool that an EC2 Fleet launched: its fleet is the pool's
    request. GpufleetError when the pool has none."""
    pages = ec2.get_paginator("describe_instances").paginate(Filters=[
        {"Name": f"tag:{TAG_PREFIX}cluster", "Values": [cluster]}, {"Name": f"tag:{TAG_PREFIX}pool", "Values": [pool]},
        {"Name": "instance-state-name", "Values": ["pending", "running"]}])
    for page in pages:
        for i in (i for r in page.get("Reservations") or [] for i in r["Instances"]):
            if any(t["Key"] == replace.FLEET_TAG for t in i.get("Tags") or []):
                return i
    raise GpufleetError(f"aws: pool {pool} of cluster {cluster} has no running node launched by an EC2 Fleet, whose "
                        "request more nodes would be asked from", "run `gpufleet up` for the pool")


def request_for(fleet: dict, count: int, market: str | None = None) -> dict:
    """The pool's CreateFleet request for ``count`` instances, all or nothing; ``market`` ("spot", "on-demand")
    in place of the pool's own. The market's options are the replacement's (``replace.request_for_one``): the
    pool's own (its AllocationStrategy: capacity-optimized for a spot pool, components.py) when the market is
    its own, else ``replace.MARKET_OPTIONS``' (never EC2's spot default lowest-price: "not recommended ... the
    highest risk of interruption", botocore 1.44.8's EC2 model, SpotOptionsRequest AllocationStrategy)."""
    req = replace.request_for_one(fleet, market)
    capacity = req["TargetCapacitySpecification"]
    capacity["TotalTargetCapacity"] = count
    if capacity["DefaultTargetCapacityType"] not in replace.MARKET_OPTIONS:
        return req  # a Capacity Block takes no market options (components.py: its fleet names none)
    options = req.setdefault(replace.MARKET_OPTIONS[capacity["DefaultTargetCapacityType"]][0], {})
    options["MinTargetCapacity"] = count
    if not any(k in options for k in ALL_OR_NONE):
        options["SingleInstanceType"] = True
    return req


def add_nodes(ec2, *, cluster: str, pool: str, count: int, market: str | None = None, on_launch=None,
              sleep=time.sleep) -> list[dict]:
    """``count`` more nodes from the pool's own request: one {"id", "private_ip", "zone", "vm_uid", "fleet_id"}
    each. Refused (``replace.Refused``: nothing launched, nothing left) when EC2 launches fewer; ``on_launch`` is
    called with each new id the moment it is known."""
    fleet = replace.pool_fleet(ec2, cluster, pool, a_pool_node(ec2, cluster, pool))
    made = ec2.create_fleet(**request_for(fleet, count, market))
    ids = [i for x in made.get("Instances") or [] for i in x.get("InstanceIds") or []]
    for i in ids:
        if on_launch is not None:
            on_launch(i)
    if len(ids) < count:
        replace.refused(ec2, made, f"{count} more node(s) for pool {pool}", ids,
                        "the pool is left as it was: ask again later (a shortage passes), or another size")
    return [_described(ec2, cluster, pool, i, made["FleetId"], sleep) for i in ids]


def _described(ec2, cluster: str, pool: str, node_id: str, fleet_id: str, sleep) -> dict:
    for attempt in range(SEEN_TRIES):
        try:
            got = replace.pools_node(ec2, cluster, pool, node_id)
            break
        except ClientError as e:  # InvalidInstanceID.NotFound right after a launch "does not mean the instance does
            # not exist" (docs.aws.amazon.com/ec2/latest/devguide/eventual-consistency, read 2026-11)
            if attempt == SEEN_TRIES - 1:
                raise GpufleetError(f"aws: {node_id} was launched for pool {pool} but EC2 does not describe it yet: "
                                    f"{e}"[:400], "it is tagged for the cluster: `gpufleet registry rebuild` records "
                                    "it, `gpufleet down` finds it") from None
            sleep(SEEN_WAIT_S)
    return {"id": node_id, "private_ip": got.get("PrivateIpAddress"),
            "zone": (got.get("Placement") or {}).get("AvailabilityZone"), "vm_uid": None, "fleet_id": fleet_id}


def remove_nodes(ec2, *, cluster: str, pool: str, node_ids: list[str]) -> None:
    """Exactly ``node_ids`` terminated, each first seen by EC2 to carry the pool's tags (none is terminated when
    one does not: the registry is a team's store, not the cloud's word)."""
    for node_id in node_ids:
        replace.pools_node(ec2, cluster, pool, node_id)
    if node_ids:
        ec2.terminate_instances(InstanceIds=list(node_ids))

"""An EC2 Fleet's instances as Pulumi outputs, and a fleet that came back short made a failure.

A pool is one ``instant`` EC2 Fleet (``components.GpuNodePool``). pulumi-aws's ``Fleet`` does not
output its instances' addresses, and it does not fail when CreateFleet launched fewer instances
than asked: terraform-provider-aws's ``resourceFleetCreate``, which pulumi-aws runs, keeps the fleet id
and ignores the response's ``Errors`` (read 2026-11). ``FleetNodes`` is a Pulumi
dynamic resource that reads the fleet after it exists (DescribeFleets, then DescribeInstances for
the addresses) and fails the update when the fleet holds fewer instances than the pool's nodes,
with the error EC2 recorded for the fleet (``FleetData.Errors``, "valid only when Type is set to
instant", https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_FleetData.html), worded as
EC2 words it, so that ``refusals`` classifies it like any other refusal. With
``MinTargetCapacity`` equal to the pool's nodes a short fleet has launched nothing, so a
refusal leaves no instance behind (API_OnDemandOptionsRequest.html, API_SpotOptionsRequest.html).
Deleting it deletes nothing: the fleet's own deletion terminates its instances.
"""

from __future__ import annotations

import time

import pulumi

from gpufleet.clouds.aws.sdk import load
from gpufleet.clouds.pool_vms import PoolVms, PoolVmsProvider

KIND = "aws:gpufleet:FleetNodes"  # how `plan` routes it to the AWS mocks
WAIT_S = 120  # DescribeFleets is eventually consistent for an instant fleet's instances


def shortfall(fleet_id: str, have: int, want: int, errors: list[dict]) -> str:
    """The failure of a fleet holding ``have`` of ``want`` instances: EC2's first error for it, as
    ``<Code>: <message>``, then what the fleet holds."""
    first = next((e for e in errors if e.get("code")), None)
    said = f"{first['code']}: {first.get('message') or ''}".rstrip(": ") if first else \
        "EC2 recorded no error for the fleet"
    return f"{said} (EC2 Fleet {fleet_id} holds {have} of {want} instances; a pool lands whole or not at all)"


def read_nodes(props: dict, *, wait_s: float = WAIT_S, api=None) -> dict:
    """The fleet's instances as outputs, once it holds ``nodes`` of them; else the fleet's error."""
    api = api or load("api").AwsApi()  # plan needs no boto3: loaded here
    deadline = time.monotonic() + wait_s
    while True:
        nodes, errors = api.fleet_nodes(props["region"], props["fleet_id"])
        if len(nodes) >= int(props["nodes"]) or errors or time.monotonic() >= deadline:
            break
        time.sleep(5)
    if len(nodes) < int(props["nodes"]):
        raise Exception(shortfall(props["fleet_id"], len(nodes), int(props["nodes"]), errors))
    return {"node_ids": [n["id"] for n in nodes], "private_ips": [n["private_ip"] for n in nodes],
            "public_ips": [n["public_ip"] for n in nodes] if props.get("public") else None}


class FleetNodesProvider(PoolVmsProvider):
    SOURCE = "fleet_id"
    WATCHED = ("fleet_id", "nodes", "public")

    def vms(self, props: dict, *, wait: bool) -> dict:
        return read_nodes(props) if wait else read_nodes(props, wait_s=0)


class FleetNodes(PoolVms):
    """The instances of one instant EC2 Fleet (outputs: ``node_ids``, ``private_ips``, ``public_ips``)."""

    KIND = KIND

    def __init__(self, name: str, *, fleet_id, region: str, nodes: int, subnet_id, public: bool,
                 opts: pulumi.ResourceOptions | None = None):
        # subnet_id: only `plan` reads it, to predict the addresses the instances get
        super().__init__(FleetNodesProvider(), name, dict(fleet_id=fleet_id, region=region, nodes=nodes,
                                                          subnet_id=subnet_id, public=public), opts)

"""Rack hosts as Pulumi resources, for stacks that also have cloud pools.

A bare-metal host exists before and after the stack: "creating" it verifies its host key and
gathers its facts, "deleting" it drains it. Both go through the same code as `gpufleet up`
and `down` without Pulumi (``hosts.gather`` / ``hosts.mark_drained``); this module
only adapts them to Pulumi's dynamic provider interface, so a mixed stack's state knows its
rack hosts and their facts as outputs.
"""

from __future__ import annotations

from pathlib import Path

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, ResourceProvider

from gpufleet.clouds.baremetal.hosts import HostTarget, gather, mark_drained, rack_targets

# changing one of these means another machine (or another way in): replace, never update in place
IDENTITY = ("address", "port", "user", "key", "site", "known_hosts")


def _target(props: dict) -> HostTarget:
    return HostTarget(props["pool"], int(props["idx"]), props["address"], int(props["port"]), props["user"],
                      props.get("key"), props["site"], Path(props["known_hosts"]))


class RackHostProvider(ResourceProvider):
    """create = verify + gather facts; delete = drain (the machine is never wiped)."""

    def create(self, props: dict) -> CreateResult:
        t = _target(props)
        report = gather([t], trust_new=bool(props.get("trust_new")))[t.id]
        if report.facts is None:
            raise Exception(report.error + (f" ({report.hint})" if report.hint else ""))
        return CreateResult(id_=f"{t.site}/{t.address}:{t.port}", outs={**props, "facts": report.facts.to_dict()})

    def read(self, id_: str, props: dict) -> ReadResult:
        return ReadResult(id_, props)

    def diff(self, id_: str, olds: dict, news: dict) -> DiffResult:
        replaces = [k for k in IDENTITY if olds.get(k) != news.get(k)]
        return DiffResult(changes=bool(replaces), replaces=replaces, delete_before_replace=True)

    def delete(self, id_: str, props: dict) -> None:
        report = mark_drained(props["cluster"], [_target(props)])[0]
        if not report.ok:
            raise Exception(f"{id_} was not drained: {report.error}")


class RackHost(Resource):
    """One host of a rack, known to the Pulumi stack (outputs: its facts)."""

    facts: pulumi.Output[dict]

    def __init__(self, name: str, *, cluster: str, pool: str, idx: int, address: str, port: int, user: str,
                 key: str | None, site: str, known_hosts: str, trust_new: bool = False,
                 opts: pulumi.ResourceOptions | None = None):
        props = dict(cluster=cluster, pool=pool, idx=idx, address=address, port=port, user=user, key=key, site=site,
                     known_hosts=known_hosts, trust_new=trust_new, facts=None)
        super().__init__(RackHostProvider(), name, props, opts)


def rack_hosts(stack, cluster: str, trust_new: bool = False) -> list[RackHost]:
    """Every rack host of the stack as a RackHost resource (call inside a Pulumi program)."""
    return [RackHost(f"{cluster}-{t.id}", cluster=cluster, pool=t.pool, idx=t.idx, address=t.address, port=t.port,
                     user=t.user, key=t.key, site=t.site, known_hosts=str(t.known_hosts), trust_new=trust_new)
            for t in rack_targets(stack)]

"""`gpufleet configure`: apply the stack's Salt states again, after a change to the states or to
the stack's ``software``, on a cluster that is up.

Cloud nodes: the new configuration is published to the stack's bucket and the nodes' timers
pick it up within a minute (they run the agent every minute; one at the current generation
does nothing), then their statuses are awaited as by `up`. This needs no SSH to the nodes and
no cloud API beyond the bucket; the cloud's own run-command would need one call per node and
per cloud, and inbound access for none of them, but it cannot reach a node whose agent is
stuck, which the timer retries by itself. Rack hosts: salt-ssh, as `up` does.
"""

from __future__ import annotations

from gpufleet.clouds.baremetal import hosts as racks
from gpufleet.configure import cloudnodes
from gpufleet.configure import nodes as configuration
from gpufleet.engine import automation
from gpufleet.fleet import verify as verification
from gpufleet.fleet.recorded import recorded
from gpufleet.providers import CLOUDS
from gpufleet.state.registry import Registry


def reconfigure(stack, cat, *, cluster: str | None = None, registry: Registry | None = None, force: bool = False,
                trust_new_hosts: bool = False, wait_s: float = cloudnodes.WAIT_S, progress=None, pulumi_command=None,
                prompt=None, runner_factory=None, stores: dict | None = None, outputs: dict | None = None):
    """(rack host reports, cloud node reports) of applying the stack's states to the cluster again."""
    reg = registry or Registry()
    name = cluster or stack.name
    rec = recorded(reg, name)
    hosts = []
    if any(p.provider == "baremetal" for p in stack.pools):
        hosts = configuration.configure(stack, name, racks.rack_targets(stack), registry=reg, trust_new=trust_new_hosts,
                                        force=force, progress=progress, runner_factory=runner_factory)
    nodes = []
    if any(p.provider in CLOUDS for p in stack.pools):
        if outputs is None:
            outputs = automation.outputs(name, pulumi_command=pulumi_command, prompt=prompt, backend=rec.backend)
        nodes = cloudnodes.configure_pools(stack, cat, name, outputs, rec.nodes, registry=reg, timeout_s=wait_s,
                                           progress=progress, stores=stores, force=force,
                                           **verification.cloud_config(stack, cat))
    return hosts, nodes

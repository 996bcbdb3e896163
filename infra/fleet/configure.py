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

from gpufleet import nodes as kinds
from gpufleet.fleet import budgets, team
from gpufleet.nodes.run import Run, Seams
from gpufleet.state.recorded import recorded
from gpufleet.state.registry import Registry


def reconfigure(stack, cat, *, cluster: str | None = None, registry: Registry | None = None, force: bool = False,
                trust_new_hosts: bool = False, wait_s: float | None = None, progress=None, pulumi_command=None,
                prompt=None, runner_factory=None, stores: dict | None = None, outputs: dict | None = None):
    """What applying the stack's states to the cluster again did to each node (``NodeOutcome``s): the
    machines that exist (rack hosts) first, then the nodes `up` created (cloud nodes)."""
    reg = registry or team.registry()
    name = cluster or stack.name
    rec = recorded(reg, name)
    run = Run(stack, cat, name, reg, Seams(pulumi_command, runner_factory, stores=stores, wait_s=wait_s),
              trust_new_hosts=trust_new_hosts, force=force, progress=progress, prompt=prompt, record=rec,
              backend=rec.backend, nodes=rec.nodes, outputs=outputs)
    run.monitor = budgets.monitor_settings(rec, stack, budgets.configured(), list(rec.created_by.values()))
    reports = {k: k.configure(run) for k in kinds.used(stack)}
    return [r for k in kinds.listing_order(reports) for r in reports[k]]

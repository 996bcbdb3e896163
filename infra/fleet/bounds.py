"""What an `up` of a cluster that is already up may not do to a pool's size by itself: delete nodes the cloud picks or
make a pool anew with nodes in it, after an edit of its bounds.

A pool's size outside Pulumi's state (``gpufleet scale``, ``heal`` for an elastic pool) is the registry's; `up` asks
the cloud for it as the pool's clouds allow (``base.Cloud.up_sets_capacity``):

* Azure sends the scale set's whole capacity (the recorded size within the stack's bounds: spec.Pool.running): a
  capacity below the VMs it has makes Azure's scale-in policy delete VMs of its own choosing (by default balancing
  zones, then the highest instance ids: learn.microsoft.com/azure/virtual-machine-scale-sets/
  virtual-machine-scale-sets-scale-in-policy, read 2026-11), running jobs or not, never the drained ones
  ``gpufleet scale`` would pick;
* AWS's instant fleet and GCP's bulkInsert carry the pool's min: a new min makes the pool anew (aws.components
  replace_on_changes; gcp.pool_vms diff), its running nodes with it, busy ones included; a lower max deletes nothing
  and leaves the pool over it.

So `up` refuses, before anything is planned or changed, where the recorded size is over what the stack now allows
(a lower max, a pool made fixed) or an elastic pool's min changed on a cloud whose request carries it: InputError
(exit 2) naming the way, ``gpufleet scale CLUSTER POOL N`` first. A fixed pool that `scale` never touched keeps the
behaviour it had (on AWS/GCP a new size replaces its nodes, which `up` shows and asks first; fleet.up).
"""

from __future__ import annotations

from gpufleet.clouds import cloud
from gpufleet.errors import InputError
from gpufleet.providers import CLOUDS


def refuse_unsafe_sizes(stack, existing, cluster: str) -> None:
    """InputError for the first pool whose size this `up` would change by deleting or re-creating nodes; None when
    every pool's size is kept (``existing``: the cluster's record, its sizes as `scale` and `heal` left them)."""
    for p in stack.pools:
        if p.provider not in CLOUDS:
            continue
        has = sum(1 for n in existing.nodes if n.pool == p.name)
        resized = [r for r in existing.resizes if r.pool == p.name]
        if not has or (p.size is None and not resized):
            continue  # a new pool, or a fixed pool `scale` never sized: as before
        low, high = p.bounds
        how = "nodes: {min, max}" if p.size is not None else f"nodes: {p.nodes}"
        if has > high:
            cost = (f"Azure would delete {has - high} of its VMs of its own choosing, running jobs or not"
                    if cloud(p.provider).up_sets_capacity else f"the pool would stay at {has}, over its {how}")
            raise InputError(
                f"pool {p.name!r} of cluster {cluster!r} has {has} nodes and the stack now allows at most {high} "
                f"({how}): {cost}; nothing was changed",
                f"bring it down first with `gpufleet scale {cluster} {p.name} {high}` (it removes drained nodes "
                "without jobs)" + ("" if p.size is not None else ", with the pool's nodes: {min, max} as they were")
                + ", then run `up` again")
        if not cloud(p.provider).up_sets_capacity and _made_by_up(existing, p.name) != low:
            made = _made_by_up(existing, p.name)
            raise InputError(
                f"pool {p.name!r} of cluster {cluster!r}: a min of {low} (it was {made}) makes the pool's "
                f"{p.provider} request anew: its {has} nodes would be terminated and launched again, running jobs "
                "included; nothing was changed",
                f"keep min: {made} and size the pool with `gpufleet scale {cluster} {p.name} N` (N within its "
                "bounds); to make it anew on purpose, `gpufleet down` it first")


def _made_by_up(existing, pool: str) -> int:
    """How many nodes the pool's own request (Pulumi's) holds: its recorded nodes less those `scale` or `heal`
    added (and the nodes `heal` put in their place), plus its own that they removed since."""
    added = {r.node.node_id for r in existing.resizes if r.pool == pool and r.change == "added"}
    for r in existing.replacements:  # in the order they were made: a replacement's replacement follows
        if r.pool == pool and r.old_id in added:
            added.add(r.node.node_id)
    kept = sum(1 for n in existing.nodes if n.pool == pool and n.node_id not in added)
    removed = sum(1 for r in existing.resizes if r.pool == pool and r.change == "removed" and r.node.node_id not in added)
    return kept + removed

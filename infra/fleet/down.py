"""`gpufleet down`: destroy a cluster, prove by tag that nothing is left, drain its rack hosts
(each kind of node its own way: ``gpufleet.nodes``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gpufleet import catalog, stacks
from gpufleet import nodes as kinds
from gpufleet.configure import slurm
from gpufleet.errors import PartialFailure
from gpufleet.fleet import team
from gpufleet.fleet.up import Aborted
from gpufleet.nodes.kind import leftover_error
from gpufleet.nodes.run import Run, Seams
from gpufleet.state.recorded import recorded
from gpufleet.state.registry import ClusterRecord, Registry


@dataclass
class TearDown:
    record: ClusterRecord
    progress: object = None  # engine.automation.Progress of Pulumi's destroy
    hosts: list = field(default_factory=list)  # nodes.outcome.NodeOutcome per drained rack host
    swept: list = field(default_factory=list)  # clouds.inventory.Outcome: what the tag sweep deleted
    left: list = field(default_factory=list)  # clouds.resources.Resource still tagged after the sweep
    unread: dict = field(default_factory=dict)  # "aws/us-west-2" -> why it could not be checked
    emptied: int = 0  # objects deleted from the stack's buckets before the destroy


def tear_down(name: str, *, confirm: Callable[[ClusterRecord], bool], registry: Registry | None = None,
              pulumi_command=None, on_progress: Callable | None = None,
              prompt: Callable[[], str] | None = None, stack=None, clean: bool = False, trust_new_hosts: bool = False,
              on_host_progress=None, runner_factory=None, cloud_api=None,
              on_sweep: Callable[[int, int | None, str], None] | None = None) -> TearDown:
    """Destroy a cluster's cloud resources, prove by tag that none is left, drain its rack hosts.

    After Pulumi's destroy, each cloud is asked for anything still tagged for the cluster
    (whatever an interrupted `up` left outside the state, or a destroy that failed); that is
    deleted in dependency order with retries, and asked for again. The cluster leaves the
    registry only when no tagged resource is left and every rack host is drained; otherwise
    it stays (``leaking`` / ``draining``) with what is left, and a rerun picks up from there.
    Machines are never wiped.
    """
    reg = registry or team.registry()
    # the tags are the truth: what another machine's `up` or a lost registry left, reap finds
    rec = recorded(reg, name, otherwise=f"`gpufleet reap --cluster {name}` finds and removes what the clouds still "
                                        "tag for it")
    run = Run(stack, None, name, reg, Seams(pulumi_command, runner_factory, cloud_api), trust_new_hosts=trust_new_hosts,
              progress=on_host_progress, prompt=prompt, on_progress=on_progress, tearing_down=True,
              load_stack=lambda path: stacks.load(path, catalog.load()), record=rec, backend=rec.backend, clean=clean,
              on_sweep=on_sweep)
    involved = kinds.holding(rec)
    for k in involved:  # what destroying and draining need, checked before anything is destroyed
        k.reach(run)
    if not confirm(rec):
        raise Aborted("nothing was destroyed", "run again and answer yes, or pass --yes")
    drained = {k: k.drain(run) for k in involved}
    out = TearDown(rec, next((d.progress for d in drained.values() if d.progress), None),
                   hosts=[r for d in drained.values() for r in d.reports],
                   swept=[o for d in drained.values() for o in d.swept], left=[x for d in drained.values() for x in d.left],
                   unread={w: why for d in drained.values() for w, why in d.unread.items()},
                   emptied=sum(d.emptied for d in drained.values()))
    error = next((d.error for d in drained.values() if d.error is not None), None)
    gone = all(d.gone for d in drained.values())
    if all(d.done for d in drained.values()):
        reg.remove(name)
        slurm.forget_munge_key(name, reg.shared)  # no secret of a cluster outlives it
        return out
    # what stays known: the clouds' part while anything is left, the rack hosts still to drain
    reg.record(name=rec.name, stack=rec.stack, stack_file=rec.stack_file, owner=rec.owner, expires_at=rec.expires_at,
               backend=rec.backend if error else None,
               # the machines that are not created stay until drained; the others while any is left
               nodes=[n for n in rec.nodes if (k := kinds.owner(n)) in drained and (not k.CREATES or not drained[k].gone)],
               state="leaking" if not gone else "draining",
               locations=[] if gone else sorted((p, r) for p, rs in rec.clouds.items() for r in rs))
    if error is not None:
        if out.left:
            error.hint = "; ".join(filter(None, [error.hint, f"{len(out.left)} tagged resource(s) are still there"]))
        raise error
    if not gone:
        raise leftover_error(name, out.left, out.unread, out.swept)
    raise PartialFailure.of(out.hosts, "drained")

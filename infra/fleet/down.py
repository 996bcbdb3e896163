"""`gpufleet down`: destroy a cluster, prove by tag that nothing is left, drain its rack hosts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet import catalog
from gpufleet.clouds import cloud, inventory
from gpufleet.clouds.baremetal import hosts as racks
from gpufleet.configure import nodes as configuration
from gpufleet.configure import pillar
from gpufleet.engine import automation
from gpufleet.errors import DeployError, GpufleetError, InputError, LeftoverError, PartialFailure
from gpufleet.fleet import stacks
from gpufleet.fleet.recorded import recorded
from gpufleet.fleet.up import Aborted, open_apis, ready
from gpufleet.providers import CLOUDS
from gpufleet.state.registry import ClusterRecord, Registry


@dataclass
class TearDown:
    record: ClusterRecord
    progress: automation.Progress | None = None
    hosts: list = field(default_factory=list)  # configure.nodes.HostReport per drained rack host
    swept: list = field(default_factory=list)  # clouds.inventory.Outcome: what the tag sweep deleted
    left: list = field(default_factory=list)  # clouds.resources.Resource still tagged after the sweep
    unread: dict = field(default_factory=dict)  # "aws/us-west-2" -> why it could not be checked
    emptied: int = 0  # objects deleted from the stack's buckets before the destroy


def empty_buckets(name: str, cmd, prompt, backend) -> int:
    """Empty the stack's buckets (every object version) so that Pulumi can delete them; the number
    of objects deleted. A bucket that cannot be read here is left to the sweep after the destroy,
    which finds it by tag and empties it as well."""
    try:
        outputs = automation.outputs(name, pulumi_command=cmd, prompt=prompt, backend=backend)
    except GpufleetError:
        return 0
    refs = {p["bucket"]["name"]: p["bucket"] for p in (outputs.get("pools") or {}).values() if p.get("bucket")}
    deleted = 0
    for ref in refs.values():
        try:
            deleted += cloud(ref["cloud"]).objects(ref).delete_all()
        except GpufleetError:
            continue
    return deleted


def tear_down(name: str, *, confirm: Callable[[ClusterRecord], bool], registry: Registry | None = None,
              pulumi_command=None, on_progress: Callable[[automation.Progress], None] | None = None,
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
    reg = registry or Registry()
    # the tags are the truth: what another machine's `up` or a lost registry left, reap finds
    rec = recorded(reg, name, otherwise=f"`gpufleet reap --cluster {name}` finds and removes what the clouds still "
                                        "tag for it")
    used = rec.clouds  # provider -> regions, from the stack and the recorded nodes
    needs_pulumi = rec.backend is not None  # a Pulumi stack exists (or a failed `up` may have started one)
    cmd = ready(sorted(used), needs_pulumi, pulumi_command)
    stack, targets = _rack_targets_of(rec, stack)
    # refused credentials or an unreachable API stop here, before anything is destroyed
    api = open_apis(sorted(used), used, given=cloud_api) if used else None
    if not confirm(rec):
        raise Aborted("nothing was destroyed", "run again and answer yes, or pass --yes")
    out = TearDown(rec)
    destroy_error = None
    if needs_pulumi:
        out.progress = automation.Progress(total=None, on_change=on_progress)
        out.emptied = empty_buckets(name, cmd, prompt, rec.backend)
        try:
            automation.destroy(name, pulumi_command=cmd, progress=out.progress, prompt=prompt, backend=rec.backend)
        except DeployError as e:
            destroy_error = e  # the sweep below may remove what blocked it
    if api is not None:
        out.swept, out.left, out.unread = sweep(name, api, on_progress=on_sweep)
        if destroy_error is not None and not out.left and not out.unread:
            try:  # what blocked Pulumi may be gone now
                automation.destroy(name, pulumi_command=cmd, progress=out.progress, prompt=prompt,
                                   backend=rec.backend)
                destroy_error = None
            except DeployError as e:
                destroy_error = e
    if targets:
        out.hosts = _drain(reg, name, stack, targets, clean, trust_new_hosts, on_host_progress, runner_factory)
    cloud_done = destroy_error is None and not out.left and not out.unread
    racks_done = all(r.ok for r in out.hosts)
    if cloud_done and racks_done:
        reg.remove(name)
        return out
    # what stays known: the clouds' part while anything is left, the rack hosts still to drain
    reg.record(name=rec.name, stack=rec.stack, stack_file=rec.stack_file, owner=rec.owner, expires_at=rec.expires_at,
               backend=rec.backend if destroy_error else None,
               nodes=[n for n in rec.nodes if n.provider not in CLOUDS or not cloud_done],
               state="leaking" if not cloud_done else "draining",
               locations=[] if cloud_done else sorted((p, r) for p, rs in used.items() for r in rs))
    if destroy_error is not None:
        if out.left:
            destroy_error.hint = "; ".join(filter(None, [destroy_error.hint,
                                                          f"{len(out.left)} tagged resource(s) are still there"]))
        raise destroy_error
    if not cloud_done:
        raise leftover_error(name, out.left, out.unread, out.swept)
    raise PartialFailure.of(out.hosts, "drained")


def sweep(cluster: str, api, *, on_progress=None):
    """Delete whatever is still tagged for ``cluster``, then ask again: (outcomes, left, unread places)."""
    found, unread = inventory.collect(api, cluster=cluster)
    outcomes = []
    if found:
        outcomes = inventory.delete(found, api, on_progress=on_progress)
        found, unread = inventory.collect(api, cluster=cluster)
    return outcomes, found, unread


def leftover_error(cluster: str, left, unread, outcomes=()) -> GpufleetError:
    """What is left, each with why its deletion failed (when it was tried)."""
    why = {o.resource.key: o for o in outcomes}

    parts = []
    if left:
        parts.append(f"{len(left)} resource(s) tagged gpufleet:cluster={cluster} are still there: "
                     + ", ".join(f"{r.where} {r.label()}" for r in left[:8]) + (" ..." if len(left) > 8 else ""))
    if unread:
        parts.append("could not check " + ", ".join(f"{k} ({v})" for k, v in unread.items()))
    return LeftoverError("; ".join(parts), f"the cluster stays in the registry; fix the cause and run "
                         f"`gpufleet down {cluster}` again (it deletes only what is left)",
                         resources=[{**r.to_dict(), "status": why[r.key].status if r.key in why else "not tried",
                                     "message": why[r.key].message if r.key in why else None} for r in left],
                         unread=unread)


def _drain(reg, name, stack, targets, clean, trust_new_hosts, on_host_progress, runner_factory) -> list:
    done = {k for k, v in reg.hosts(name).items() if v["state"] == "drained"}
    todo = [t for t in targets if (t.pool, t.idx) not in done]
    pools = {p.name: p for p in stack.pools}
    clean_states = {t.id: pillar.formulas(stack, pools[t.pool]) for t in todo} if clean else None
    pillars = {t.id: pillar.build(stack, pools[t.pool], cluster=name) for t in todo} if clean else None
    reports = configuration.drain(name, todo, clean_states=clean_states, pillars=pillars, trust_new=trust_new_hosts,
                           progress=on_host_progress, runner_factory=runner_factory)
    for r in reports:
        reg.set_host(name, r.target.pool, r.target.idx, address=r.target.address, state=r.state,
                     detail=r.error or ("drained and cleaned" if clean else "drained"))
    return reports


def _rack_targets_of(rec: ClusterRecord, stack) -> tuple:
    """The stack and its rack hosts to drain (keys, users and known_hosts live in the stack file)."""
    if not any(n.provider == "baremetal" for n in rec.nodes):
        return stack, []
    if stack is None:
        if not rec.stack_file or not Path(rec.stack_file).exists():
            raise InputError(f"cluster {rec.name} has rack hosts but its stack file {rec.stack_file!r} is gone",
                             "pass the stack file: gpufleet down STACK (it says how to reach the hosts)")
        stack = stacks.load(rec.stack_file, catalog.load())
    return stack, racks.rack_targets(stack)

"""`up` and `down` end to end: validate, plan, check, confirm, deploy, record.

Nothing is created before the stack is valid, its program renders under mocks, the
credentials of every provider it uses are present and the Pulumi CLI is installed; then the
caller's ``confirm`` sees the plan and its cost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gpufleet.engine import automation, credentials
from gpufleet.engine.plan import Plan, cluster_for, plan
from gpufleet.engine.program import build, layout
from gpufleet.errors import DeployError, GpufleetError, InputError
from gpufleet.lifecycle.registry import ClusterRecord, Node, Registry, nodes_from_outputs
from gpufleet.providers import CLOUDS
from gpufleet.providers.common import parse_expiry


class Aborted(GpufleetError):
    """The user declined at the confirmation prompt; nothing was changed."""


@dataclass
class UpOutcome:
    plan: Plan
    record: ClusterRecord
    progress: automation.Progress | None
    hosts: list = field(default_factory=list)  # configure.nodes.HostReport, one per configured host
    quotas: list = field(default_factory=list)  # lifecycle.preflight.QuotaLine, checked before anything was created


def bring_up(stack, cat, *, confirm: Callable[[Plan], bool], cluster: str | None = None,
             registry: Registry | None = None, pulumi_command=None,
             on_progress: Callable[[automation.Progress], None] | None = None,
             prompt: Callable[[], str] | None = None, configure: bool = True, trust_new_hosts: bool = False,
             reconfigure: bool = False, on_host_progress=None, runner_factory=None, check: bool = True,
             cloud_api=None) -> UpOutcome:
    """Create the cloud pools (Pulumi), record the cluster, then configure the rack hosts (SSH + Salt).

    Before anything is created: credentials, the Pulumi CLI, the quotas (``check``; a short
    quota is a QuotaError) and the rack hosts. The cluster is recorded as ``creating``
    before Pulumi starts, so `status`, `down` and `reap` know it even if this process dies.
    Configuration problems of single hosts do not undo anything: each host's outcome is in
    ``UpOutcome.hosts`` and in the registry; the caller decides the exit code.
    """
    reg = registry or Registry()
    name = cluster or stack.name
    existing = reg.get(name)
    if existing and existing.stack != stack.name:
        raise InputError(f"cluster {name!r} is already up from stack {existing.stack!r} ({existing.stack_file})",
                         "choose another name with --cluster")
    # an update keeps the cluster's expiry; `down` and a new `up` start a new lease
    cl = cluster_for(stack, name, expires_at=parse_expiry(existing.expires_at) if existing else None)
    the_plan = plan(stack, cat, cluster=cl)
    clouds = sorted({p.provider for p in stack.pools if p.provider in CLOUDS})
    cmd = _ready(clouds, bool(clouds), pulumi_command)
    quota_lines = []
    if clouds and check:
        from gpufleet.lifecycle import preflight

        opened = clouds_for(clouds, {p.provider: [p.region] for p in stack.pools if p.provider in clouds}, given=cloud_api)
        quota_lines, _ = preflight.check(preflight.needs(stack, cat, existing), opened)
        preflight.refuse_if_short(quota_lines)
    gathered = None
    targets = []
    if configure and any(p.provider == "baremetal" for p in stack.pools):
        from gpufleet.configure import nodes as config
        from gpufleet.configure import saltrun

        if runner_factory is None:
            saltrun.find_salt_ssh()  # a missing Salt stops here, before anything is created or recorded
            saltrun.states_dir()
        # the racks exist already: reach them and check their OS against the software before anything
        # is created or recorded (a misfit is bad input, exit 2)
        targets = config.rack_targets(stack)
        gathered = config.gather(targets, trust_new=trust_new_hosts, progress=on_host_progress)
        config.check_hosts(stack, gathered)
    if not confirm(the_plan):
        raise Aborted("nothing was created", "run again and answer yes, or pass --yes")

    nodes: list[Node] = []
    progress = None
    backend = automation.backend_url() if clouds else None
    from gpufleet.providers.common import format_expiry

    record = dict(name=name, stack=stack.name, stack_file=stack.source, owner=stack.owner,
                  expires_at=format_expiry(cl.expires_at), backend=backend,
                  locations=sorted({(p.provider, p.region) for p in stack.pools if p.provider in CLOUDS}))
    if clouds:
        reg.record(**record, nodes=existing.nodes if existing else [], state="updating" if existing else "creating")
        program = build(layout(stack, cat), cl, gcp_project=credentials.gcp_project() if "gcp" in clouds else None,
                        azure_subscription=credentials.azure_subscription() if "azure" in clouds else None,
                        trust_new_hosts=trust_new_hosts)
        progress = automation.Progress(total=len(the_plan.cloud_resources), on_change=on_progress)
        try:
            result = automation.up(name, program, pulumi_command=cmd, progress=progress, prompt=prompt,
                                   providers=clouds, backend=backend)
        except GpufleetError:
            # some resources may exist: keep the cluster known (with the nodes it had) so that
            # `down` and `status` find it
            reg.record(**record, nodes=existing.nodes if existing else [], state="failed")
            raise
        nodes = nodes_from_outputs(result.outputs)
    nodes += rack_nodes(stack, the_plan)
    rec = reg.record(**record, nodes=nodes, state="up")
    hosts = []
    if targets:
        hosts = config.configure(stack, name, targets, registry=reg, trust_new=trust_new_hosts, force=reconfigure,
                                 progress=on_host_progress, runner_factory=runner_factory, gathered=gathered)
    return UpOutcome(the_plan, rec, progress, hosts, quota_lines)


def clouds_for(providers: list[str], regions: dict[str, list[str]], given=None):
    """The clouds' APIs to ask (credentials required), limited to ``regions``; ``given``: already open."""
    if given is not None:
        return given
    from gpufleet.lifecycle import inventory

    return inventory.open_clouds(providers, required=True, regions=regions)


def _ready(clouds: list[str], needs_pulumi: bool, pulumi_command):
    """Credentials for every cloud and a Pulumi CLI, checked before anyone is asked anything."""
    if not needs_pulumi:
        return None
    credentials.require(clouds)
    return pulumi_command or automation.find_pulumi()


def rack_nodes(stack, the_plan: Plan) -> list[Node]:
    """Bare-metal hosts as registry nodes; the machines exist, nothing is created for them."""
    price = {c.pool: c.usd_per_node_hour for c in the_plan.pools}
    out = []
    for p in stack.pools:
        if p.provider != "baremetal":
            continue
        for i, h in enumerate(p.hosts):
            out.append(Node(pool=p.name, idx=i, provider="baremetal", location=p.site, machine=f"{p.gpus_per_node}x {p.gpu}",
                            node_id=h.address, private_ip=h.address, ssh_endpoint=f"{h.address}:{h.port}",
                            usd_per_hour=price.get(p.name)))
    return out


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
    rec = reg.get(name)
    if rec is None:
        from gpufleet.errors import did_you_mean

        known = [c.name for c in reg.list()]
        s = did_you_mean(name, known)
        raise InputError(f"no cluster {name!r} in the registry ({reg.path})",
                         f"did you mean {s!r}?" if s else (f"known clusters: {', '.join(known)}" if known else
                                                            "no cluster is recorded as up"))
    used = rec.clouds  # provider -> regions, from the stack and the recorded nodes
    needs_pulumi = rec.backend is not None  # a Pulumi stack exists (or a failed `up` may have started one)
    cmd = _ready(sorted(used), needs_pulumi, pulumi_command)
    stack, targets = _rack_targets_of(rec, stack)
    # refused credentials or an unreachable API stop here, before anything is destroyed
    api = clouds_for(sorted(used), used, given=cloud_api) if used else None
    if not confirm(rec):
        raise Aborted("nothing was destroyed", "run again and answer yes, or pass --yes")
    out = TearDown(rec)
    destroy_error = None
    if needs_pulumi:
        out.progress = automation.Progress(total=None, on_change=on_progress)
        try:
            automation.destroy(name, pulumi_command=cmd, progress=out.progress, prompt=prompt, providers=sorted(used),
                               backend=rec.backend)
        except DeployError as e:
            destroy_error = e  # the sweep below may remove what blocked it
    if api is not None:
        out.swept, out.left, out.unread = sweep(name, api, on_progress=on_sweep)
        if destroy_error is not None and not out.left and not out.unread:
            try:  # what blocked Pulumi may be gone now
                automation.destroy(name, pulumi_command=cmd, progress=out.progress, prompt=prompt,
                                   providers=sorted(used), backend=rec.backend)
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
    from gpufleet.configure import nodes as config

    raise config.PartialFailure(out.hosts, "drained")


@dataclass
class TearDown:
    record: ClusterRecord
    progress: automation.Progress | None = None
    hosts: list = field(default_factory=list)  # configure.nodes.HostReport per drained rack host
    swept: list = field(default_factory=list)  # lifecycle.inventory.Outcome: what the tag sweep deleted
    left: list = field(default_factory=list)  # lifecycle.resources.Resource still tagged after the sweep
    unread: dict = field(default_factory=dict)  # "aws/us-west-2" -> why it could not be checked


def sweep(cluster: str, api, *, on_progress=None):
    """Delete whatever is still tagged for ``cluster``, then ask again: (outcomes, left, unread places)."""
    from gpufleet.lifecycle import inventory

    found, unread = inventory.collect(api, cluster=cluster)
    outcomes = []
    if found:
        outcomes = inventory.delete(found, api, on_progress=on_progress)
        found, unread = inventory.collect(api, cluster=cluster)
    return outcomes, found, unread


def leftover_error(cluster: str, left, unread, outcomes=()) -> GpufleetError:
    """What is left, each with why its deletion failed (when it was tried)."""
    from gpufleet.errors import LeftoverError

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
    from gpufleet.configure import nodes as config
    from gpufleet.configure import pillar

    done = {k for k, v in reg.hosts(name).items() if v["state"] == "drained"}
    todo = [t for t in targets if (t.pool, t.idx) not in done]
    pools = {p.name: p for p in stack.pools}
    clean_states = {t.id: pillar.formulas(stack, pools[t.pool]) for t in todo} if clean else None
    pillars = {t.id: pillar.build(stack, pools[t.pool], cluster=name) for t in todo} if clean else None
    reports = config.drain(name, todo, clean_states=clean_states, pillars=pillars, trust_new=trust_new_hosts,
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
        from pathlib import Path

        if not rec.stack_file or not Path(rec.stack_file).exists():
            raise InputError(f"cluster {rec.name} has rack hosts but its stack file {rec.stack_file!r} is gone",
                             "pass the stack file: gpufleet down STACK (it says how to reach the hosts)")
        from gpufleet import catalog, spec

        stack = spec.load(rec.stack_file, catalog.load())
    from gpufleet.configure import nodes as config

    return stack, config.rack_targets(stack)

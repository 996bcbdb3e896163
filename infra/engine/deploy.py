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
from gpufleet.errors import GpufleetError, InputError
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


def bring_up(stack, cat, *, confirm: Callable[[Plan], bool], cluster: str | None = None,
             registry: Registry | None = None, pulumi_command=None,
             on_progress: Callable[[automation.Progress], None] | None = None,
             prompt: Callable[[], str] | None = None, configure: bool = True, trust_new_hosts: bool = False,
             reconfigure: bool = False, on_host_progress=None, runner_factory=None) -> UpOutcome:
    """Create the cloud pools (Pulumi), record the cluster, then configure the rack hosts (SSH + Salt).

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
                  expires_at=format_expiry(cl.expires_at), backend=backend)
    if clouds:
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
    return UpOutcome(the_plan, rec, progress, hosts)


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
              on_host_progress=None, runner_factory=None) -> tuple[ClusterRecord, automation.Progress | None, list]:
    """Destroy a cluster's cloud resources and drain its rack hosts (``clean``: undo the states too).

    It leaves the registry only once the destroy succeeded and every rack host is drained; a
    rerun drains only the hosts not drained yet. Machines are never wiped.
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
    clouds = sorted({n.provider for n in rec.nodes if n.provider in CLOUDS})
    needs_pulumi = bool(clouds) or rec.backend is not None  # a failed `up` may have left resources
    cmd = _ready(clouds, needs_pulumi, pulumi_command)
    stack, targets = _rack_targets_of(rec, stack)
    if not confirm(rec):
        raise Aborted("nothing was destroyed", "run again and answer yes, or pass --yes")
    progress = None
    if needs_pulumi:
        progress = automation.Progress(total=None, on_change=on_progress)
        automation.destroy(name, pulumi_command=cmd, progress=progress, prompt=prompt, providers=clouds,
                           backend=rec.backend)
    reports = []
    if targets:
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
        if any(not r.ok for r in reports):
            # the cloud part is gone (destroyed above): what stays known is the hosts still to drain
            reg.record(name=rec.name, stack=rec.stack, stack_file=rec.stack_file, owner=rec.owner,
                       expires_at=rec.expires_at, backend=None if needs_pulumi else rec.backend,
                       nodes=[n for n in rec.nodes if n.provider not in CLOUDS], state="draining")
            raise config.PartialFailure(reports, "drained")
    reg.remove(name)
    return rec, progress, reports


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

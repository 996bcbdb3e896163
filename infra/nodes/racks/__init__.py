"""Rack hosts: machines that exist, reached over SSH. ``reach`` gathers their facts and checks the
stack's software against them before anything is created; ``configure`` runs salt-ssh
(``nodes.racks.salt``), ``verify`` sends the checks over SSH (``nodes.racks.checks``), ``drain`` marks them
out of service (and, when asked, undoes the states). Nothing is ever created or wiped."""

from __future__ import annotations

from pathlib import Path

from gpufleet.clouds.baremetal import hosts
from gpufleet.configure import pillar, saltrun
from gpufleet.errors import AllHostsFailed, InputError
from gpufleet.nodes import health as hl
from gpufleet.nodes.health import NodeHealth, Repaired
from gpufleet.nodes.kind import Benched, Drained, Reached
from gpufleet.nodes.outcome import NodeOutcome
from gpufleet.nodes.racks import bench as rack_bench
from gpufleet.nodes.racks import checks as rack
from gpufleet.nodes.racks import salt as configuration
from gpufleet.nodes.run import Run
from gpufleet.providers import CLOUDS
from gpufleet.state import caller
from gpufleet.state.registry import Node
from gpufleet.verify import bundle, expect
from gpufleet.verify.report import NodeVerdict

NAME = "rack hosts"
CREATES = False  # the machines exist: nothing is created for them, a rack of which no host works is not up


def owns(pool) -> bool:
    return pool.provider not in CLOUDS


def reach(run: Run) -> Reached:
    """Salt is installed, the hosts answer and their OS fits the stack's software (else exit 2):
    all before anything is created or recorded. Their facts are kept for ``configure`` (an `up` that
    does not configure reaches no host). For `down`: the stack that says how to reach the hosts."""
    if run.tearing_down:
        if recorded(run.record):
            run.stack = stack_of(run.record, run.stack, run.load_stack)
        return Reached()
    if not run.configuring:
        return Reached()
    if run.seams.runner_factory is None:
        saltrun.find_salt_ssh()
        saltrun.states_dir()
    targets = hosts.rack_targets(run.stack)
    gathered = hosts.gather(targets, trust_new=run.trust_new_hosts, progress=run.progress)
    if not any(r.facts for r in gathered.values()):
        raise AllHostsFailed([outcome(r) for r in gathered.values()], "reached")
    configuration.check_hosts(run.stack, gathered)
    run.gathered = gathered
    return Reached()


def who(run: Run) -> dict[str, str]:
    """Racks have no principal of their own: who brings them up is the OS user running gpufleet."""
    return {p.provider: caller.local() for p in run.stack.pools if owns(p)}


def replaced(run: Run) -> list:
    """Nothing: an update takes the hosts as they are."""
    return []


def create(run: Run) -> list[Node]:
    """The hosts as registry nodes (``run.prices``: $ per node-hour by pool, from the plan)."""
    out = []
    for p in run.stack.pools:
        if not owns(p):
            continue
        for i, h in enumerate(p.hosts):
            out.append(Node(pool=p.name, idx=i, provider=p.provider, location=p.site, machine=f"{p.gpus_per_node}x {p.gpu}",
                            node_id=h.address, private_ip=h.address, ssh_endpoint=f"{h.address}:{h.port}",
                            usd_per_hour=run.prices.get(p.name)))
    return out


def configure(run: Run) -> list[NodeOutcome]:
    """Apply the formulas on every host, with the facts ``reach`` gathered when it ran."""
    health = None
    if run.stack.slurm:  # the Slurm health check runs the verify checks with each pool's expectations
        health = ({p.name: expect.for_pool(run.stack, p, run.cat) for p in run.stack.pools}, bundle.build()[0])
    reports = configuration.configure(run.stack, run.cluster, hosts.rack_targets(run.stack), registry=run.registry,
                                      trust_new=run.trust_new_hosts, force=run.force, progress=run.progress,
                                      runner_factory=run.seams.runner_factory, gathered=run.gathered,
                                      health=health, collector=run.monitor)
    return [outcome(r) for r in reports]


def outcome(r: hosts.HostReport) -> NodeOutcome:
    """A host's report in the shape every kind's takes: its Salt runs summed (in earnest and rehearsed)."""
    f, real, test = r.facts, [x for x in r.runs if not x.test], [x for x in r.runs if x.test]
    return NodeOutcome(r.target, NAME, r.state, r.ok, f"{r.target.address}:{r.target.port}",
                       system=f"{f.os_name.split()[0] if f.os_name else f.os_id} {f.os_version}" if f else None,
                       gpus=len(f.gpus) if f else 0, facts=f.to_dict() if f else None, applied=bool(real),
                       changed=r.changed, states=sum(x.states for x in real),
                       rehearsed=sum(x.states for x in test) if test else None,
                       failed=[{"state": x["id"], "comment": x["comment"]} for run in r.runs for x in run.failed],
                       error=r.error, hint=r.hint, warnings=r.warnings, detail=r.to_dict())


def scheduler(run: Run) -> dict | None:
    """Slurm's view of the cluster from its controller, when a rack host is the controller (asked
    over SSH, ``run.local`` or not: the rack is this site's own)."""
    if not run.stack.slurm:
        return None
    controllers = {p.name for p in run.stack.pools if p.role == "controller"}
    ctl = [t for t in hosts.rack_targets(run.stack) if t.pool in controllers]
    return hosts.scheduler_view(ctl[0]) if ctl else None


def targets(run: Run, node: str | None = None) -> list:
    """The stack's hosts (``node``: only that one, by its name ``pool-idx`` or address)."""
    return [t for t in hosts.rack_targets(run.stack) if node in (None, t.id, t.address)]


def verify(run: Run, level: str, node: str | None = None) -> list[NodeVerdict]:
    """Run the checks at ``level`` over SSH on the stack's hosts (``node``: only that one); after `up`'s
    configuration, on the hosts that configured."""
    if run.configured is not None:
        return _verify(run, [r.target for r in run.configured.get(NAME, []) if r.ok], level)
    return _verify(run, targets(run, node), level)


def _verify(run: Run, chosen: list, level: str) -> list[NodeVerdict]:
    if not chosen:
        return []
    pools = {p.name: p for p in run.stack.pools}
    exps = {t.id: expect.for_pool(run.stack, pools[t.pool], run.cat, node=t.id) for t in chosen}
    return rack.verify_hosts(chosen, exps, level=level, trust_new=run.trust_new_hosts, progress=run.progress)


def bench(run: Run, plan: dict, python: str, launch=None) -> list[Benched]:
    """The benchmark ``plan`` over SSH on every host of the stack (a job of ``launch.nodes``: the first that many),
    with the host's ``python``."""
    chosen = targets(run)
    if launch and launch.nodes > 1:
        if len(chosen) < launch.nodes:
            raise InputError(f"--nodes {launch.nodes}: the cluster has {len(chosen)} rack host(s)",
                             f"--nodes {len(chosen)} or fewer")
        chosen = chosen[:launch.nodes]
    if not chosen:
        return []
    return rack_bench.bench_hosts(chosen, plan, python=python, trust_new=run.trust_new_hosts, progress=run.progress,
                                  launch=launch)


def drain(run: Run) -> Drained:
    """Take the cluster's hosts not drained yet out of service (``run.clean``: undo the states too);
    each host's outcome is recorded."""
    if not recorded(run.record):
        return Drained()
    clean = run.clean
    done = {k for k, v in run.registry.hosts(run.cluster).items() if v["state"] == "drained"}
    todo = [t for t in hosts.rack_targets(run.stack) if (t.pool, t.idx) not in done]
    pools = {p.name: p for p in run.stack.pools}
    clean_states = {t.id: pillar.formulas(run.stack, pools[t.pool]) for t in todo} if clean else None
    pillars = {t.id: pillar.build(run.stack, pools[t.pool], cluster=run.cluster) for t in todo} if clean else None
    reports = configuration.drain(run.cluster, todo, clean_states=clean_states, pillars=pillars,
                                  trust_new=run.trust_new_hosts, progress=run.progress,
                                  runner_factory=run.seams.runner_factory)
    run.registry.set_hosts(run.cluster, {
        (r.target.pool, r.target.idx): {"address": r.target.address, "state": r.state,
                                        "detail": r.error or ("drained and cleaned" if clean else "drained")}
        for r in reports})
    return Drained(reports=[outcome(r) for r in reports])


def recorded(record) -> bool:
    """Whether the cluster's record holds rack hosts (they need the stack file to be reached)."""
    return any(owns(n) for n in record.nodes)


def stack_of(record, stack, load):
    """The stack that says how to reach the cluster's hosts: the one given, or the file `up` recorded
    (``load(path)``) when this machine recorded it alone (``ClusterRecord.own_stack_file``)."""
    if stack is not None:
        return stack
    if record.store is not None:  # a store's record names a file of its writer's choosing: never read unasked
        raise InputError(record.stack_hint("gpufleet down STACK"), "pass the stack file: gpufleet down STACK (it says "
                         "how to reach the hosts)")
    if not record.stack_file or not Path(record.stack_file).exists():
        raise InputError(f"cluster {record.name} has rack hosts but its stack file {record.stack_file!r} is gone",
                         "pass the stack file: gpufleet down STACK (it says how to reach the hosts)")
    return load(record.stack_file)


def health(run: Run) -> list[NodeHealth]:
    """Each host as Slurm says it (asked on the host, over SSH): drained by the health program with a
    GF-* fault code in its reason is faulty; a host that cannot be asked, or a rack without Slurm
    (nothing there reports a fault), is unknown. Rack hosts are never replaced."""
    if not recorded(run.record):
        return []
    chosen = targets(run)
    out = [NodeHealth(t.id, t.pool, NAME, hl.UNKNOWN, t.address, t.address, replaceable=False) for t in chosen]
    if not run.stack.slurm:
        for nh in out:
            nh.why = "no Slurm on this rack: a host's faults are read from Slurm's node state"
        return out
    for nh, said in zip(out, hosts.slurm_states(chosen, trust_new=run.trust_new_hosts)):
        if said is None or isinstance(said, str):
            nh.why = said or "Slurm does not know this host"
            continue
        state, reason = said
        nh.drained, nh.jobs = hl.from_slurm(state)
        code = next((w for w in (reason or "").split() if hl.CODE.match(w)), None)
        nh.state = "faulty" if code else "ok"
        if code:
            nh.faults = [{"code": code, "check": "slurm.reason", "evidence": reason[:hl.EVIDENCE_MAX]}]
    return out


def repair(run: Run, node: NodeHealth, action: str) -> Repaired:
    """Drain or isolate a host in Slurm (its reason: gpufleet's and the fault code); never replace it."""
    if action == "replace":
        return Repaired(node.node, action, False, "a rack host cannot be replaced: it stays drained and named")
    if action in ("release", "keep"):  # an elastic pool's scale-down: a rack's pools are fixed (spec)
        return Repaired(node.node, action, False, "a rack host is never given back: a rack's pool has a fixed size")
    if node.drained:  # Slurm has it drained already (its health program did, with the fault code)
        return Repaired(node.node, action, True, "drained in Slurm already" + (", isolated: named in `gpufleet status`"
                                                                             if action == "isolate" else ""))
    (target,) = [t for t in targets(run) if t.id == node.node]
    why = hosts.drain_in_slurm(target, f"gpufleet heal: {node.code or 'GF-UNKNOWN'}", trust_new=run.trust_new_hosts)
    if why:
        return Repaired(node.node, action, False, why)
    return Repaired(node.node, action, True, "drained in Slurm" + (", isolated: named in `gpufleet status`"
                                                                   if action == "isolate" else ""))

"""Cloud nodes: Pulumi creates them; they configure and verify themselves from the stack's bucket
(``nodes.cloud.channel``), `up` publishes what they apply and waits for what they report; `down`
destroys the Pulumi stack and then deletes whatever the clouds still tag for the cluster."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from gpufleet.clouds import cloud, inventory, quotas
from gpufleet.clouds.pools import resource_name
from gpufleet.configure import slurm
from gpufleet.engine import automation
from gpufleet.engine.plan import plan
from gpufleet.engine.program import build, layout
from gpufleet.errors import DeployError, GpufleetError, InputError
from gpufleet.nodes.cloud import bench as cloudbench
from gpufleet.nodes.cloud import channel as cloudnodes
from gpufleet.nodes.cloud import failover
from gpufleet.nodes.cloud import heal as healing
from gpufleet.nodes.cloud.apis import open_apis
from gpufleet.nodes.health import NodeHealth, Repaired
from gpufleet.nodes.kind import Benched, Drained, Reached, leftover_error
from gpufleet.nodes.outcome import NodeOutcome
from gpufleet.nodes.run import Run
from gpufleet.providers import CLOUDS
from gpufleet.state import team_config
from gpufleet.state.registry import Node, nodes_from_outputs, outgrown, outlived
from gpufleet.state.shared import shown
from gpufleet.verify import bundle, expect
from gpufleet.verify.report import NodeVerdict, apply_report

NAME = "cloud nodes"
CREATES = True  # its nodes exist only once `up` has created them


def owns(pool) -> bool:
    return pool.provider in CLOUDS


def providers(stack) -> list[str]:
    return sorted({p.provider for p in stack.pools if owns(p)})


def ready(providers_used: list[str], pulumi_command):
    """Credentials for every cloud and a Pulumi CLI, checked before anyone is asked anything."""
    for p in providers_used:
        cloud(p).credentials()
    return pulumi_command or automation.find_pulumi()


def reach(run: Run) -> Reached:
    """An update's state in this backend, credentials, the Pulumi CLI and (``run.check_quotas``) the
    quotas: the quota lines read. The pools with places elsewhere (capacity failover, ``run.places``)
    have their quotas read here but a short one does not stop `up`: the failover preflight skips
    that place (``run.skipped``); NoPlaceLeft when a pool has no place left. For `down`: ``reach_to_destroy``."""
    if run.tearing_down:
        return reach_to_destroy(run)
    if run.existing:
        require_backend(run.existing)  # its state where this `up` will look for it
    run.places = failover.places(run.stack, run.cat) if run.failover else {}
    run.elsewhere = set(run.places)
    reached = _quotas(run)
    if run.places and run.check_quotas:
        run.skipped = failover.preflight(run, run.places)
    failover.require_places(run.places, run.skipped)
    return reached


def reach_to_destroy(run: Run) -> Reached:
    """A teardown's: when a Pulumi stack exists (or a failed `up` may have started one), its state in this
    backend and the Pulumi CLI; the APIs of the clouds the record names open (``run.api``): refused
    credentials or an unreachable API stop here, before anything is destroyed."""
    used = run.record.clouds  # provider -> regions, from the stack and the recorded nodes
    if run.record.backend is not None:
        require_backend(run.record)
        run.seams.pulumi_command = ready(sorted(used), run.seams.pulumi_command)
    run.api = open_apis(sorted(used), used, given=run.seams.cloud_api) if used else None
    return Reached()


def _quotas(run: Run) -> Reached:
    used = providers(run.stack)
    run.seams.pulumi_command = ready(used, run.seams.pulumi_command)
    if not run.check_quotas:
        return Reached()
    regions = {p.provider: [p.region] for p in run.stack.pools if owns(p)}
    opened = open_apis(used, regions, given=run.seams.cloud_api)
    run.identity = {p: opened.identity[p]["principal"] for p in used if p in opened.identity}
    lines, _ = quotas.check(quotas.needs(run.stack, run.cat, run.existing), opened)
    quotas.refuse_if_short([x for x in lines if not set(x.pools) <= run.elsewhere])
    return Reached(quotas=lines)


def who(run: Run) -> dict[str, str]:
    """The caller on each cloud the stack uses (AWS: the STS caller ARN; GCP: the credentials'
    account; Azure: the signed-in principal), as ``reach`` read it with the quotas; without that
    check, asked now, and a cloud that cannot say is left out (its resources carry no creator)."""
    for p in providers(run.stack):
        if p not in run.identity:
            try:
                run.identity[p] = inventory.api(p).identity()["principal"]
            except GpufleetError:
                continue
    return dict(run.identity)


def require_backend(record) -> None:
    """Refuse an `up` or `down` of a cluster whose Pulumi state is in another backend than the one this
    machine uses now (InputError, with the ways out). Pulumi would find no stack there and start an empty
    one (the Automation API's create_or_select_stack): `up` would create every node again beside the first
    ones, `down` would destroy nothing of what the state holds. So it goes for a cluster carried into a team
    before its state (a gpufleet before `team init` moved it), one brought up with another
    PULUMI_BACKEND_URL, or one brought up in a team by a member who is now alone."""
    here = automation.backend_url()
    if record.backend is None or record.backend == here:
        return
    theirs = shown(team_config.redacted(record.backend), 300)
    raise InputError(f"cluster {record.name}'s Pulumi state is in {theirs}, not in the backend this machine uses "
                     f"({team_config.redacted(here)}): Pulumi would start an empty stack there, `up` would create "
                     "every node again beside those that state holds, and `down` would destroy none of them",
                     f"run it where that state can be read, naming it: PULUMI_BACKEND_URL={shlex.quote(theirs)} "
                     "gpufleet ...; "
                     "a cluster brought up alone is moved into the team's backend by `gpufleet team init` on the "
                     f"machine that holds its state; without its state, `gpufleet reap --cluster {record.name}` "
                     "deletes what the clouds tag for it")


def record_fields(stack) -> dict:
    """What the registry keeps of the clouds' part: the Pulumi backend and the places to look."""
    return {"backend": automation.backend_url(),
            "locations": sorted({(p.provider, p.region) for p in stack.pools if owns(p)})}


def create(run: Run) -> list[Node]:
    """The cloud pools created: the cluster recorded as ``creating`` (its backend and places added to
    ``run.recording``) before Pulumi starts, so that `status`, `down` and `reap` know it even if this
    process dies; the running nodes it replaces gone first (``release``); then each failover pool at
    the first of its places that holds it (``run.stack`` becomes the stack as placed, ``run.landed``
    the bill there), the others where the stack says."""
    reg, record = run.registry, run.recording
    record.update(record_fields(run.stack))
    run.backend = record["backend"]
    kept = dict(record, nodes=run.existing.nodes if run.existing else [])  # what `down` and `status` find if it fails
    reg.record(**kept, state="updating" if run.existing else "creating")
    for a in run.skipped:
        reg.add_attempt(run.cluster, a.to_dict())
        if run.on_attempt:
            run.on_attempt(a)
    try:
        release(run, run.replacing)
    except GpufleetError:
        reg.record(**kept, state="failed")
        raise
    if run.places:
        nodes = _placed(run, kept)
    else:
        run.on_failure = lambda: reg.record(**kept, state="failed")
        nodes = deploy(run)
    retire(run, nodes)
    return nodes


def retire(run: Run, nodes: list[Node]) -> None:
    """The nodes `heal` put in the place of Pulumi's (outside its state: AWS's in a one-node fleet of their
    own), and those `scale` added (``outgrown``), whose pool Pulumi has since made anew (``nodes``, its new list,
    holds none of them nor the nodes they replaced): deleted by their ids among what is tagged for their pool, as
    Pulumi deleted the pool's own old nodes, so none runs on outside every list. LeftoverError when one is still
    there (the cluster stays ``updating`` with them recorded: the next `up` tries again; `down` sweeps them by
    tag)."""
    stale = outlived(run.existing.replacements if run.existing else [], nodes)
    ids = {(r.pool, i) for r in stale for i in (r.node.node_id, r.fleet_id) if i}
    # and the nodes `scale` added to pools Pulumi has made anew (their own fleets on AWS)
    grown = outgrown(run.existing.resizes, nodes, run.existing.nodes, run.existing.replacements) if run.existing else []
    ids |= {(r.pool, i) for r in grown if r.change == "added" for i in (r.node.node_id, r.fleet_id) if i}
    pools = {r.pool for r in stale} | {r.pool for r in grown if r.change == "added"}
    regions: dict[str, list[str]] = {}
    for n in run.existing.nodes if pools else []:
        if owns(n) and n.pool in pools and n.location not in regions.get(n.provider, []):
            regions.setdefault(n.provider, []).append(n.location)
    if not regions:
        return
    opened = open_apis(sorted(regions), regions, given=run.seams.cloud_api)
    api = inventory.Clouds(open={p: opened[p] for p in regions}, regions=regions)
    found, unread = inventory.collect(api, cluster=run.cluster)
    outcomes = []
    if any((x.pool, x.id) in ids for x in found):  # deleted, then asked again: what is still there is left
        outcomes = inventory.delete([x for x in found if (x.pool, x.id) in ids], api)
        found, unread = inventory.collect(api, cluster=run.cluster)
    left = [x for x in found if (x.pool, x.id) in ids]
    if left or unread:
        err = leftover_error(run.cluster, left, unread, outcomes)
        err.message = f"the nodes `heal` made for pools Pulumi has made anew are not all gone: {err.message}"
        err.hint = ("the pools' new nodes are up but not recorded yet; run `gpufleet up` again once the cause is "
                    "fixed (it deletes only these), or `gpufleet down`, which finds them by tag")
        raise err


def _placed(run: Run, kept: dict) -> list[Node]:
    limits = {k: v for k, v in (("max_attempts", run.max_attempts), ("budget_s", run.failover_budget_s)) if v is not None}
    try:
        placement = failover.place(run, run.places, on_attempt=run.on_attempt, skipped=run.skipped,
                                   record=lambda a: run.registry.add_attempt(run.cluster, a.to_dict()), **limits)
    except GpufleetError as e:
        # `down` and `reap` look wherever an attempt was made, not only where the stack said
        tried = {(a["provider"], a["region"]) for a in getattr(e, "attempts", None) or [] if a["outcome"] != "skipped"}
        run.registry.record(**dict(kept, locations=sorted(set(map(tuple, kept["locations"])) | tried)), state="failed")
        raise
    run.stack = placement.stack
    placed = plan(run.stack, run.cat, cluster=run.placed, lay=run.layout)  # the bill where they landed
    run.recording.update(locations=record_fields(placement.stack)["locations"], predicted=placed.spend.summary())
    run.landed = placed.spend
    return placement.nodes


def deploy(run: Run) -> list[Node]:
    """Pulumi's up of the program (``run.layout`` for ``run.placed``); the nodes it made.
    ``run.on_failure()`` is called before a failure is raised, when some resources may exist."""
    program = build(run.layout, run.placed, trust_new_hosts=run.trust_new_hosts, refresh_images=run.refresh_images)
    run.deployed = automation.Progress(total=run.resources, on_change=run.on_progress)
    try:
        result = automation.up(run.cluster, program, pulumi_command=run.seams.pulumi_command, progress=run.deployed,
                               prompt=run.prompt, backend=run.backend)
    except GpufleetError:
        if run.on_failure:
            run.on_failure()
        raise
    run.outputs = result.outputs
    return nodes_from_outputs(result.outputs)


@dataclass
class Replaced:
    """A pool whose running nodes an `up` would replace, and why: the inputs of the resource holding
    them (a base.Cloud ``node_kinds``) that its cloud cannot change in place."""

    pool: str
    provider: str
    region: str  # where its running nodes are
    nodes: int  # how many run there now (the registry's)
    why: list[str] = field(default_factory=list)

    def line(self) -> str:
        return f"replaces {self.nodes} running node(s) of pool {self.pool}: {'; '.join(self.why)}"

    def to_dict(self) -> dict:
        return {"pool": self.pool, "provider": self.provider, "region": self.region, "nodes": self.nodes,
                "why": self.why, "message": self.line()}


def replaced(run: Run) -> list:
    """The running nodes an update would replace, for ``confirm`` to show: Pulumi's preview of the first
    attempt (failover's first places, as the budgets left them) against the cluster's state."""
    if not run.existing:
        return []
    first = {p: cs.ordered[0] for p, cs in run.places.items()}
    lay = layout(failover.placed(run.stack, first), run.cat, failover.reserved(first)) if first else run.layout
    return replacements(run, lay, run.placed)


def replacements(run: Run, lay, cluster) -> list[Replaced]:
    """The pools whose running nodes an `up` of ``lay`` would replace, read off Pulumi's preview of that
    program against the cluster's state (nothing is changed): the resource holding them replaced, or
    deleted while the pool stays in the stack (it lands elsewhere: another cloud's resources, failover's
    first place); none without a running cloud node. A pool the stack no longer has is the user's to drop."""
    running: dict[str, list] = {}
    for n in run.existing.nodes if run.existing else []:
        if n.provider in CLOUDS:
            running.setdefault(n.pool, []).append(n)
    if not running:
        return []
    program = build(lay, cluster, trust_new_hosts=run.trust_new_hosts, refresh_images=run.refresh_images)
    steps = automation.preview(run.cluster, program, pulumi_command=run.seams.pulumi_command, prompt=run.prompt,
                               backend=automation.backend_url())
    kept = {p.name for p in run.stack.pools}
    out: dict[str, Replaced] = {}
    for step in steps:
        pool = pool_of(run.cluster, step.name, list(running))
        if pool is None or step.kind not in cloud(running[pool][0].provider).node_kinds:
            continue
        if step.op == automation.DELETING and pool not in kept:
            continue
        first = running[pool][0]
        r = out.setdefault(pool, Replaced(pool, first.provider, first.location, len(running[pool])))
        what = f"{step.kind.rsplit(':', 1)[-1]} {step.name}"
        r.why.append(f"{what} is deleted (the pool lands elsewhere)" if step.op == automation.DELETING else
                     f"{what}: {', '.join(step.keys) or 'its inputs'} changed")
    return list(out.values())


def pool_of(cluster: str, name: str, pools: list[str]) -> str | None:
    """The pool a resource of the program belongs to: each cloud's program names a pool's component
    ``resource_name(cluster, pool)`` and its resources after it (the longest that fits wins)."""
    fits = [p for p in pools if name.startswith(resource_name(cluster, p) + "-")]
    return max(fits, key=lambda p: len(resource_name(cluster, p))) if fits else None


def release(run: Run, replaced: list[Replaced]) -> None:
    """Before the `up` that replaces them, the running nodes of each pool whose cloud's deletion returns
    while they still hold their capacity (base.Cloud ``released_first``) are deleted and proven gone
    (bounded by GPUFLEET_DELETE_WAIT, inventory.Retry), so that a reservation or Capacity Block sized to
    the pool has room for the new nodes. LeftoverError, before Pulumi runs, when any is still there."""
    for r in replaced:
        kinds = cloud(r.provider).released_first
        if not kinds:
            continue
        opened = open_apis([r.provider], {r.provider: [r.region]}, given=run.seams.cloud_api)
        api = inventory.Clouds(open={r.provider: opened[r.provider]}, regions={r.provider: [r.region]})
        found, unread = inventory.collect(api, cluster=run.cluster)
        mine = [x for x in found if x.pool == r.pool and x.kind in kinds]
        outcomes = inventory.delete(mine, api) if mine else []
        left = [o.resource for o in outcomes if not o.ok]
        if left or unread:
            err = leftover_error(run.cluster, left, unread, outcomes)
            err.message = (f"the running nodes of pool {r.pool} are not all gone, so its new nodes were not asked "
                           f"for (they would not find the capacity the old ones hold): {err.message}")
            err.hint = "nothing was replaced yet; run `gpufleet up` again once they are terminated"
            raise err


def outputs(run: Run) -> dict:
    """The cluster's Pulumi outputs: those of this run's `up`, or read from its stack (``run.backend``)."""
    if run.outputs is None:
        run.outputs = automation.outputs(run.cluster, pulumi_command=run.seams.pulumi_command, prompt=run.prompt,
                                         backend=run.backend)
    return run.outputs


def configure(run: Run) -> list[NodeOutcome]:
    """Publish each pool's configuration and wait for the statuses of ``run.nodes``; unless
    ``run.verifying`` is off, the nodes run the quick verification after applying."""
    if run.outputs is None and run.record is not None:
        require_backend(run.record)  # its outputs are read from its stack, where the record says
    reports = cloudnodes.configure_pools(run.stack, run.cat, run.cluster, outputs(run),
                                         [n for n in run.nodes if owns(n)], registry=run.registry,
                                         timeout_s=wait_s(run), progress=run.progress, stores=run.seams.stores,
                                         force=run.force, scheduler=scheduler_pillars(run), collector=run.monitor,
                                         **tree_extras(run.stack, run.cat, verify=run.verifying))
    return [outcome(r) for r in reports]


def outcome(r: cloudnodes.NodeReport) -> NodeOutcome:
    """A node's report in the shape every kind's takes; where to look when it failed is on the node."""
    f, waited = r.facts or {}, r.state in ("timeout", "pending")
    return NodeOutcome(r.target, NAME, r.state, r.ok, r.target.address or r.target.node_id,
                       system=(f.get("os") or "-").split(" (")[0] if f else None, gpus=f.get("gpu_count", 0),
                       facts=r.facts, applied=not waited, changed=r.changed, rehearsed=len(r.rehearsed) or None,
                       failed=r.failed, seconds=r.seconds, error=r.error, hint=r.hint,
                       look=r.hint if r.state in ("failed", "timeout") else None, warnings=r.warnings,
                       verify=r.verify, detail=r.to_dict())


def scheduler_pillars(run: Run):
    """For a stack with Slurm: what makes each pool's ``slurm`` pillar from its nodes' facts, with the
    munge key the nodes hold already (published by whoever ran `up`: a teammate's `configure` keeps
    it), or else the cluster's key (the team's, in team mode)."""
    if not run.stack.slurm:
        return None
    expectations = {p.name: expect.for_pool(run.stack, p, run.cat) for p in run.stack.pools if owns(p)}
    data = bundle.build()[0]
    return lambda facts, published: slurm.pool_pillars(
        run.stack, run.cluster, run.cat, facts, expectations=expectations, bundle=data,
        key=published or slurm.munge_key(run.cluster, run.registry.shared))


def state_tree(stack, cat) -> tuple[bytes, str]:
    """The state tree archive `up` publishes for the stack's cloud pools, and its SHA-256 (what a golden
    image bakes: a node booting from it compares the two)."""
    return cloudnodes.tree_archive(extra=tree_extras(stack, cat, verify=False)["extra"])


def tree_extras(stack, cat, *, verify: bool = True) -> dict:
    """What the cloud pools' configuration carries besides the states (and the node's watch,
    ``channel.tree_archive``'s own): the verify bundle in the tree (so `gpufleet verify` can run it
    later) and, unless ``verify`` is off, each pool's expectations for the quick verification its
    nodes run after applying."""
    data, _ = bundle.build()
    pools = {p.name: expect.for_pool(stack, p, cat) for p in stack.pools if owns(p)} if verify else None
    return {"extra": {cloudnodes.VERIFY_BUNDLE: data}, "verify": pools}


def configured_verdicts(reports: list) -> list[NodeVerdict]:
    """The verdicts the cloud nodes sent with their configuration."""
    out = []
    for r in reports:
        if not r.ok:
            continue
        v = NodeVerdict(r.target.id, r.target.pool, r.target.address)
        if r.verify:
            apply_report(v, r.verify)
        elif r.state == "current":
            continue  # nothing applied this time, so nothing verified: `gpufleet verify` does it on demand
        else:
            v.error = "the node sent no verification report"
        out.append(v)
    return out


def scheduler(run: Run) -> dict | None:
    """Slurm's view when a cloud node is the controller: its agent puts what Slurm says in its status
    (within a minute of a change), read here from the bucket the stack's outputs name. ``run.local``:
    the clouds are not asked, so neither is this."""
    stack, record, local = run.stack, run.record, run.local
    ctl = [p for p in stack.pools if p.role == "controller" and owns(p)]
    if not stack.slurm or not ctl or local or record is None or not record.backend:
        return None
    name = f"{ctl[0].name}-0"
    try:
        outs = automation.outputs(record.name, pulumi_command=automation.find_pulumi(), backend=record.backend)
        ref = outs["pools"][ctl[0].name]["bucket"]
        view = cloudnodes.scheduler_view(cloud(ref["cloud"]).objects(ref), ctl[0].name, name)
    except GpufleetError as e:
        return {"controller": name, "error": e.message}
    except KeyError:
        return {"controller": name, "error": "the stack's outputs name no bucket for the controller's pool"}
    return view or {"controller": name, "error": "its agent has not said yet (it does within a minute)"}


def targets(run: Run, node: str | None) -> list:
    """The recorded cloud nodes of the stack's pools (``node``: only that one, by name or address)."""
    pools = {p.name for p in run.stack.pools}
    return [n for n in run.record.nodes if owns(n) and n.pool in pools
            and node in (None, f"{n.pool}-{n.idx}", n.private_ip, n.node_id)]


def verify(run: Run, level: str, node: str | None = None) -> list[NodeVerdict]:
    """Ask the recorded nodes (``node``: only that one) through their bucket to run the checks at
    ``level``; their verdicts. After `up`'s configuration, the verdicts they sent with it."""
    if run.configured is not None:
        return configured_verdicts(run.configured.get(NAME, []))
    nodes = targets(run, node)
    if not nodes:
        return []
    pools = {p.name: p for p in run.stack.pools}
    exps = {p: expect.for_pool(run.stack, pools[p], run.cat) for p in {n.pool for n in nodes}}
    answers = cloudnodes.verify_pools(outputs(run), nodes, exps, level=level, timeout_s=wait_s(run),
                                      progress=run.progress, stores=run.seams.stores)
    return [verdict(t, got, wait_s(run)) for t, got in answers]


def bench(run: Run, plan: dict, python: str, launch=None) -> list[Benched]:
    """The benchmark ``plan`` on every recorded node through its pool's bucket (``nodes.cloud.bench``), each node alone
    or on ``launch.procs`` of its GPUs (processes the node script starts); not one job over several nodes
    (``launch.nodes`` > 1: InputError)."""
    nodes = targets(run, None) if run.record is not None else []
    if not nodes:
        return []
    if launch and launch.nodes > 1:
        raise InputError(f"--nodes {launch.nodes}: one torchrun job over several nodes runs on rack hosts, over SSH; "
                         "cloud nodes are benchmarked each on its own, through their bucket",
                         "leave --nodes out (--gpus all runs the step on all of each node's GPUs)")
    require_backend(run.record)  # its outputs (the buckets) are read from its stack, where the record says
    wait = cloudbench.RUN_S + cloudbench.PICKUP_S if run.seams.wait_s is None else run.seams.wait_s
    return cloudbench.bench_pools(outputs(run), nodes, plan, python, launch, timeout_s=wait, progress=run.progress,
                                  stores=run.seams.stores)


def wait_s(run: Run) -> float:
    """How long the nodes are waited for: the run's, else the channel's default."""
    return cloudnodes.WAIT_S if run.seams.wait_s is None else run.seams.wait_s


def verdict(target, report: dict | None, wait_s: float) -> NodeVerdict:
    """A cloud node's verdict from the report in its status (None: it did not answer)."""
    v = NodeVerdict(target.id, target.pool, target.address)
    if report is None:
        v.verdict, v.error = "timeout", f"no verification report after {wait_s:.0f}s"
        v.hint = "the node's agent runs every minute: see /var/log/gpufleet/node.log on it"
    else:
        apply_report(v, report)
    return v


def drain(run: Run) -> Drained:
    """Destroy the cluster's Pulumi stack (``run.backend``: None when there is none), then delete
    whatever the clouds (``run.api``) still tag for it and ask again; destroy once more when the sweep
    removed what blocked it. Nothing raises: what is left is in the result."""
    out = Drained()
    if run.backend is not None:
        out.progress = automation.Progress(total=None, on_change=run.on_progress)
        out.emptied = empty_buckets(run.cluster, run.seams.pulumi_command, run.prompt, run.backend)
        out.error = _destroy(run, out.progress)
    if run.api is not None:
        out.swept, out.left, out.unread = sweep(run.cluster, run.api, on_progress=run.on_sweep)
        if out.error is not None and not out.left and not out.unread:
            out.error = _destroy(run, out.progress)  # what blocked Pulumi may be gone now
    return out


def _destroy(run: Run, progress) -> DeployError | None:
    try:
        automation.destroy(run.cluster, pulumi_command=run.seams.pulumi_command, progress=progress, prompt=run.prompt,
                           backend=run.backend)
    except DeployError as e:
        return e
    return None


def empty_buckets(name: str, cmd, prompt, backend) -> int:
    """Empty the stack's buckets (every object version) so that Pulumi can delete them; the number
    of objects deleted. A bucket that cannot be read here is left to the sweep after the destroy,
    which finds it by tag and empties it as well."""
    try:
        outs = automation.outputs(name, pulumi_command=cmd, prompt=prompt, backend=backend)
    except GpufleetError:
        return 0
    refs = {p["bucket"]["name"]: p["bucket"] for p in (outs.get("pools") or {}).values() if p.get("bucket")}
    deleted = 0
    for ref in refs.values():
        try:
            deleted += cloud(ref["cloud"]).objects(ref).delete_all()
        except GpufleetError:
            continue
    return deleted


def sweep(cluster: str, api, *, on_progress=None):
    """Delete whatever is still tagged for ``cluster``, then ask again: (outcomes, left, unread places)."""
    found, unread = inventory.collect(api, cluster=cluster)
    outcomes = []
    if found:
        outcomes = inventory.delete(found, api, on_progress=on_progress)
        found, unread = inventory.collect(api, cluster=cluster)
    return outcomes, found, unread


def health(run: Run) -> list[NodeHealth]:
    """Each recorded cloud node of the stack's pools, as its agent's status says (``nodes.cloud.heal``)."""
    return healing.health(run, owns, outputs, NAME)


def give_slot(run: Run, new: Node) -> tuple[bool, str]:
    """A node `scale` or `heal` added to an elastic pool joins Slurm as its slot (``nodes.cloud.heal.give_slot``):
    (whether it does, what to tell of it)."""
    return healing.give_slot(run, new, outputs)


def forget_slots(run: Run, gone: list[Node]) -> str:
    """The Slurm slots of nodes `scale` or `heal` removed deleted (``nodes.cloud.heal.forget_slots``): what to tell."""
    return healing.forget_slots(run, gone, outputs)


def repair(run: Run, node: NodeHealth, action: str) -> Repaired:
    """Drain (its agent's job), isolate, or replace through the pool's own request (``nodes.cloud.heal``)."""
    return healing.repair(run, node, action, outputs)

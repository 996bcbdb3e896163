"""`gpufleet up`: validate, plan, check, confirm, deploy, record, configure and verify the nodes,
each kind of node its own way (``gpufleet.nodes``: cloud nodes configure themselves from the
stack's bucket, rack hosts over SSH).

Nothing is created before the stack is valid, its program renders under mocks, the
credentials of every provider it uses are present, the Pulumi CLI is installed and the
quotas leave room; then the caller's ``confirm`` sees the plan and its cost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from gpufleet import nodes as kinds
from gpufleet.clouds.tags import format_expiry, parse_expiry
from gpufleet.engine import automation
from gpufleet.engine.plan import Plan, cluster_for, plan
from gpufleet.errors import GpufleetError, InputError
from gpufleet.fleet import bounds, budgets, ssh, team
from gpufleet.nodes.cloud import failover as fail
from gpufleet.nodes.run import Run, Seams
from gpufleet.state.registry import ClusterRecord, Registry
from gpufleet.verify.report import record as record_verdicts


class Aborted(GpufleetError):
    """The user declined at the confirmation prompt; nothing was changed."""


class ReplacesRunningNodes(InputError):
    """The `up` would replace running nodes and was not allowed to (``replace_nodes=False``: --yes without
    --replace); nothing was changed. Exit code 2."""

    def __init__(self, replaced: list):
        self.replaced = replaced
        super().__init__("this up " + "; ".join(r.line() for r in replaced),
                         "run it at a terminal to be asked, or pass --replace with --yes to replace them; "
                         "or undo the change that needs it")

    def to_dict(self) -> dict:
        return {**super().to_dict(), "replaces": [r.to_dict() for r in self.replaced]}


@dataclass
class UpOutcome:
    plan: Plan
    record: ClusterRecord
    progress: automation.Progress | None
    # every node's configuration (nodes.outcome.NodeOutcome), rack hosts and cloud nodes alike, kind by kind
    configured: list = field(default_factory=list)
    quotas: list = field(default_factory=list)  # clouds.base.QuotaLine, checked before anything was created
    verdicts: list = field(default_factory=list)  # verify.report.NodeVerdict, one per node verified
    attempts: list = field(default_factory=list)  # nodes.cloud.failover.Attempt.to_dict(): where the pools were tried
    budgets: list = field(default_factory=list)  # fleet.budgets.Check: each budget it falls under, before creating


@dataclass
class UpOptions:
    """How `up` goes (the CLI's flags); the defaults are `gpufleet up STACK`'s."""

    cluster: str | None = None  # the cluster's name (the stack's by default)
    registry: Registry | None = None  # the team's or this machine's by default
    prompt: Callable[[], str] | None = None  # the Pulumi passphrase, asked when needed
    configure: bool = True  # False: the cloud nodes wait for `gpufleet configure`
    trust_new_hosts: bool = False
    reconfigure: bool = False  # apply the states again on nodes already configured the same way
    check: bool = True  # read the quotas before anything is created
    verify: bool = True  # the nodes that configured run the quick verification
    failover: bool = True  # False: each pool is tried at its own place only
    max_attempts: int | None = None  # failover's limits (None: gpufleet.limits' FAILOVER_*)
    failover_budget_s: float | None = None
    budget_list: list[budgets.Budget] | None = None  # the configured budgets by default
    over_budget: bool = False  # the user consents to exceed a budget
    replace_nodes: bool | None = None  # running nodes replaced: True allowed, False refused, None: ``confirm`` asks
    refresh_images: bool = False  # look up again the images that image names were pinned to
    seams: Seams = field(default_factory=Seams)  # the programs and stores tests put in place


@dataclass
class UpEvents:
    """What `up` tells as it goes (each None: not told)."""

    on_progress: Callable[[automation.Progress], None] | None = None  # Pulumi's progress
    on_host_progress: Callable | None = None  # (phase, done, total, message) of the per-node work
    on_attempt: Callable | None = None  # each failover attempt (nodes.cloud.failover.Attempt), as it happens


def bring_up(stack, cat, options: UpOptions | None = None, *, confirm: Callable[[Plan], bool],
             on_event: UpEvents | None = None) -> UpOutcome:
    """Create the cloud pools (Pulumi), record the cluster, then configure and verify every node.

    Before anything is created, each kind of node the stack uses is reached (``NodeKind.reach``:
    credentials, the Pulumi CLI and quotas, ``check``; the rack hosts and their software). The
    cluster is recorded as ``creating`` before Pulumi starts, so `status`, `down` and `reap` know
    it even if this process dies. Configuration problems of single nodes do not undo anything:
    each node's outcome is in ``UpOutcome.configured`` and in the registry; the caller decides the
    exit code. ``configure=False`` leaves the cloud nodes waiting for `gpufleet configure`. Every
    node that configured then runs the quick verification (``verify``), its verdict in
    ``UpOutcome.verdicts`` and, when it fails, in the registry.

    A pool with a ``failover`` block lands in the first of its places that holds it
    (``nodes.cloud.failover``; ``failover=False`` tries only its own); every attempt is in
    ``UpOutcome.attempts``, told to ``on_attempt`` as it happens and recorded in the registry.
    Its places where the cluster would exceed a budget are skipped before any attempt
    (``budgets.drop_places``), and where it landed is checked again before anything is configured.

    An update never replaces running cloud nodes unasked: Pulumi's preview of it says which pools'
    nodes it would replace (``nodes.cloud.replacements``, in ``Plan.replacements`` for ``confirm`` to
    show); ``replace_nodes`` True allows it, False refuses it (ReplacesRunningNodes, exit 2: ``--yes``
    without ``--replace``), None leaves it to ``confirm``. Their old nodes are then gone before the
    new ones are asked for (``nodes.cloud.release``: the capacity they hold is free for them).
    ``refresh_images`` looks up again the images that image names were pinned to (said in the plan's
    warnings): nodes launched from then on boot the newest; running ones keep theirs.
    """
    opts, events = options or UpOptions(), on_event or UpEvents()
    run, the_plan = _prepared(stack, cat, opts, events)
    reg, name, existing, used = run.registry, run.cluster, run.existing, kinds.used(stack)
    attempts: list[dict] = []  # this run's, as told

    def tell(a) -> None:
        attempts.append(a.to_dict())
        if events.on_attempt:
            events.on_attempt(a)

    run.on_attempt = tell
    quota_lines = [q for k in used for q in k.reach(run).quotas]  # a misfit stops here: nothing is created
    # who brings it up, per provider; an update keeps the first creator, as it keeps the expiry
    created_by = {p: who for kind in used for p, who in kind.who(run).items()}
    created_by.update(existing.created_by if existing else {})
    run.placed = replace(run.placed, created_by=created_by)
    creators = list(created_by.values())
    budget_list = budgets.configured() if opts.budget_list is None else opts.budget_list
    spend = the_plan.spend
    if run.places:  # each pool's places held to the budgets too; the check is for the first each has left
        if not opts.over_budget:
            run.skipped += _within_budgets(name, stack, spend, creators, reg.list(), budget_list, run.places,
                                           run.skipped)
        spend = budgets.moved(spend, {p: cs.ordered[0] for p, cs in run.places.items()})
    checked = budgets.check(name, stack, spend, creators, reg.list(), budget_list, consent=opts.over_budget)
    the_plan.replacements = run.replacing = [r for k in used for r in k.replaced(run)]
    if the_plan.replacements and opts.replace_nodes is False:
        raise ReplacesRunningNodes(the_plan.replacements)
    if not confirm(the_plan):
        raise Aborted("nothing was created", "run again and answer yes, or pass --yes")

    # the stack file as a path from anywhere (ssh and ssh-config read it from other folders)
    run.recording = dict(name=name, stack=stack.name, owner=stack.owner, backend=None, locations=[],
                         stack_file=str(Path(stack.source).absolute()) if stack.source else "",
                         expires_at=format_expiry(run.placed.expires_at), created_by=created_by,
                         predicted=the_plan.spend.summary())
    run.nodes = [n for k in used for n in k.create(run)]
    rec = reg.record(**run.recording, nodes=run.nodes, state="up",
                     access=ssh.access_record(run.stack, name, run.nodes))
    run.nodes = rec.nodes  # Pulumi's with the nodes `heal` replaced outside its state in their place
    run.monitor = budgets.monitor_settings(rec, stack, budget_list, creators)
    if run.landed is not None:  # where failover placed the pools, against the budgets as they stand now
        others = [r for r in reg.list() if r.name != name] + ([existing] if existing else [])
        checked = budgets.check(name, run.stack, run.landed, creators, others, budget_list,
                                consent=opts.over_budget, landed=True)
    verdicts, configured = [], {}
    if opts.configure:
        run.configured = configured = {k.NAME: k.configure(run) for k in used}
        if not any(k.CREATES for k in used) and not any(r.ok for rs in configured.values() for r in rs):
            reg.set_state(name, "failed")  # no host works: not up
            rec = reg.get(name)
        if opts.verify:
            verdicts = [v for k in used for v in k.verify(run, "quick")]
    record_verdicts(reg, name, verdicts)
    return UpOutcome(the_plan, rec, run.deployed,
                     [r for k in kinds.listing_order(used) for r in configured.get(k.NAME, [])],
                     quota_lines, verdicts, attempts, checked)


def _prepared(stack, cat, opts: UpOptions, events: UpEvents) -> tuple[Run, Plan]:
    """The run of this `up` and its plan; InputError when the cluster's name is another stack's."""
    reg = opts.registry or team.registry()
    name = opts.cluster or stack.name
    existing = reg.get(name)
    if existing and existing.stack != stack.name:
        raise InputError(f"cluster {name!r} is already up from stack {existing.stack!r} ({existing.stack_file})",
                         "choose another name with --cluster")
    for p in stack.pools if existing else []:  # an elastic pool's size as `scale` left it (spec.Pool.running)
        if p.size is not None:
            p.recorded_as(sum(1 for n in existing.nodes if n.pool == p.name))
    if existing:
        bounds.refuse_unsafe_sizes(stack, existing, name)  # a lower max, a pool made fixed, a new min: `scale` first
    # an update keeps the cluster's expiry; `down` and a new `up` start a new lease
    cl = cluster_for(stack, name, expires_at=parse_expiry(existing.expires_at) if existing else None)
    the_plan = plan(stack, cat, cluster=cl, refresh_images=opts.refresh_images)
    if opts.refresh_images:
        the_plan.warnings.append("--refresh-image: every image name a pool boots (ubuntu-22.04 ...) is looked up "
                                 "again; nodes launched from now on boot the newest, running nodes keep theirs "
                                 "(replace them on purpose to change theirs)")
    run = Run(stack, cat, name, reg, opts.seams, trust_new_hosts=opts.trust_new_hosts, force=opts.reconfigure,
              progress=events.on_host_progress, on_progress=events.on_progress, prompt=opts.prompt,
              configuring=opts.configure, verifying=opts.verify, check_quotas=opts.check,
              refresh_images=opts.refresh_images, failover=opts.failover, max_attempts=opts.max_attempts,
              failover_budget_s=opts.failover_budget_s, layout=the_plan.layout, placed=cl,
              resources=len(the_plan.cloud_resources), existing=existing,
              prices={c.pool: c.usd_per_node_hour for c in the_plan.pools})
    return run, the_plan


def _within_budgets(name: str, stack, spend, creators: list[str], records: list, budget_list: list, places: dict,
                    skipped: list) -> list:
    """The places where the cluster would exceed a budget, dropped and told as skips; OverBudget (exit 5,
    the skips with it) when a pool has no place left: nothing is created."""
    dropped = budgets.drop_places(name, stack, spend, creators, records, budget_list, places)
    told = [fail.skip(d.pool, d.place, d.why) for d in dropped]
    try:
        budgets.require_places(name, places, dropped)
    except budgets.OverBudget as e:
        e.attempts = [a.to_dict() for a in [*skipped, *told]]
        raise
    return told

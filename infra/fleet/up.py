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
from gpufleet.configure import cloudnodes
from gpufleet.engine import automation
from gpufleet.engine.plan import Plan, cluster_for, plan
from gpufleet.engine.program import layout
from gpufleet.errors import GpufleetError, InputError
from gpufleet.fleet import budgets, ssh, team
from gpufleet.fleet import failover as fail
from gpufleet.nodes import cloud as cloud_nodes
from gpufleet.nodes import racks
from gpufleet.nodes.run import Run
from gpufleet.state.registry import ClusterRecord, Node, Registry
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
    hosts: list = field(default_factory=list)  # clouds.baremetal.hosts.HostReport, one per configured host
    quotas: list = field(default_factory=list)  # clouds.base.QuotaLine, checked before anything was created
    nodes: list = field(default_factory=list)  # configure.cloudnodes.NodeReport, one per cloud node
    verdicts: list = field(default_factory=list)  # verify.report.NodeVerdict, one per node verified
    attempts: list = field(default_factory=list)  # fleet.failover.Attempt.to_dict(): where the pools were tried
    budgets: list = field(default_factory=list)  # fleet.budgets.Check: each budget it falls under, before creating

    @property
    def configured(self) -> list:
        """Every node's configuration outcome, rack hosts and cloud nodes alike."""
        return self.hosts + self.nodes


def bring_up(stack, cat, *, confirm: Callable[[Plan], bool], cluster: str | None = None,
             registry: Registry | None = None, pulumi_command=None,
             on_progress: Callable[[automation.Progress], None] | None = None,
             prompt: Callable[[], str] | None = None, configure: bool = True, trust_new_hosts: bool = False,
             reconfigure: bool = False, on_host_progress=None, runner_factory=None, check: bool = True,
             cloud_api=None, wait_s: float = cloudnodes.WAIT_S, stores: dict | None = None,
             verify: bool = True, failover: bool = True, max_attempts: int = fail.MAX_ATTEMPTS,
             failover_budget_s: float = fail.BUDGET_S, on_attempt=None,
             budget_list: list[budgets.Budget] | None = None, over_budget: bool = False,
             replace_nodes: bool | None = None, refresh_images: bool = False) -> UpOutcome:
    """Create the cloud pools (Pulumi), record the cluster, then configure and verify every node.

    Before anything is created, each kind of node the stack uses is reached (``nodes.<kind>.reach``:
    credentials, the Pulumi CLI and quotas, ``check``; the rack hosts and their software). The
    cluster is recorded as ``creating`` before Pulumi starts, so `status`, `down` and `reap` know
    it even if this process dies. Configuration problems of single nodes do not undo anything:
    each node's outcome is in ``UpOutcome.hosts`` / ``.nodes`` and in the registry; the caller
    decides the exit code. ``configure=False`` leaves the cloud nodes waiting for `gpufleet
    configure`. Every node that configured then runs the quick verification (``verify``), its
    verdict in ``UpOutcome.verdicts`` and, when it fails, in the registry.

    A pool with a ``failover`` block lands in the first of its places that holds it
    (``fleet.failover``; ``failover=False`` tries only its own); every attempt is in
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
    reg = registry or team.registry()
    name = cluster or stack.name
    existing = reg.get(name)
    if existing and existing.stack != stack.name:
        raise InputError(f"cluster {name!r} is already up from stack {existing.stack!r} ({existing.stack_file})",
                         "choose another name with --cluster")
    if existing:
        cloud_nodes.require_backend(existing)  # its state where this `up` will look for it
    # an update keeps the cluster's expiry; `down` and a new `up` start a new lease
    cl = cluster_for(stack, name, expires_at=parse_expiry(existing.expires_at) if existing else None)
    the_plan = plan(stack, cat, cluster=cl, refresh_images=refresh_images)
    run = Run(stack, cat, name, reg, trust_new_hosts=trust_new_hosts, force=reconfigure, progress=on_host_progress,
              pulumi_command=pulumi_command, prompt=prompt, on_progress=on_progress, cloud_api=cloud_api,
              stores=stores, wait_s=wait_s, check_quotas=check, runner_factory=runner_factory,
              layout=the_plan.layout, existing=existing, refresh_images=refresh_images)
    if refresh_images:
        the_plan.warnings.append("--refresh-image: every image name a pool boots (ubuntu-22.04 ...) is looked up "
                                 "again; nodes launched from now on boot the newest, running nodes keep theirs "
                                 "(replace them on purpose to change theirs)")
    used = kinds.used(stack)
    places = fail.places(stack, cat) if failover and cloud_nodes in used else {}
    attempts: list[dict] = []  # this run's, as told

    def tell(a) -> None:
        attempts.append(a.to_dict())
        if on_attempt:
            on_attempt(a)

    quota_lines, skipped = [], []
    if cloud_nodes in used:
        quota_lines = cloud_nodes.reach(run, elsewhere=set(places))
        if places and check:
            skipped = fail.preflight(run, places)
        fail.require_places(places, skipped)
    if configure and racks in used:
        racks.reach(run)  # a misfit is bad input (exit 2): nothing is created or recorded
    # who brings it up, per provider; an update keeps the first creator, as it keeps the expiry
    created_by = {p: who for kind in used for p, who in kind.who(run).items()}
    created_by.update(existing.created_by if existing else {})
    cl = replace(cl, created_by=created_by)
    creators, budget_list = list(created_by.values()), budgets.configured() if budget_list is None else budget_list
    spend = the_plan.spend
    if places:  # each pool's places held to the budgets too; the check is for the first each has left
        if not over_budget:
            skipped += _within_budgets(name, stack, spend, creators, reg.list(), budget_list, places, skipped)
        spend = budgets.moved(spend, {p: cs.ordered[0] for p, cs in places.items()})
    checked = budgets.check(name, stack, spend, creators, reg.list(), budget_list, consent=over_budget)
    if existing and cloud_nodes in used:
        first = {p: cs.ordered[0] for p, cs in places.items()}  # the first attempt: failover's first places
        lay = layout(fail.placed(stack, first), cat, fail.reserved(first)) if places else the_plan.layout
        the_plan.replacements = cloud_nodes.replacements(run, lay, cl)
    if the_plan.replacements and replace_nodes is False:
        raise ReplacesRunningNodes(the_plan.replacements)
    if not confirm(the_plan):
        raise Aborted("nothing was created", "run again and answer yes, or pass --yes")

    # the stack file as a path from anywhere (ssh and ssh-config read it from other folders)
    record = dict(name=name, stack=stack.name, stack_file=str(Path(stack.source).absolute()) if stack.source else "",
                  owner=stack.owner,
                  expires_at=format_expiry(cl.expires_at), backend=None, locations=[], created_by=created_by,
                  predicted=the_plan.spend.summary())
    nodes: list[Node] = []
    if cloud_nodes in used:
        record.update(cloud_nodes.record_fields(stack))
        kept = dict(record, nodes=existing.nodes if existing else [])  # what `down` and `status` find if it fails
        reg.record(**kept, state="updating" if existing else "creating")
        run.found.update(cluster=cl, resources=len(the_plan.cloud_resources), backend=record["backend"])
        for a in skipped:
            reg.add_attempt(name, a.to_dict())
            tell(a)
        try:
            cloud_nodes.release(run, the_plan.replacements)
        except GpufleetError:
            reg.record(**kept, state="failed")
            raise
        if places:
            nodes, landed = _placed(run, reg, kept, record, places, max_attempts, failover_budget_s, tell, skipped)
        else:
            nodes = cloud_nodes.create(run, on_failure=lambda: reg.record(**kept, state="failed"))
    if racks in used:
        nodes += racks.create(run, {c.pool: c.usd_per_node_hour for c in the_plan.pools})
    rec = reg.record(**record, nodes=nodes, state="up", access=ssh.access_record(run.stack, name, nodes))
    if places:  # where failover placed the pools, against the budgets as they stand now: before configuring
        others = [r for r in reg.list() if r.name != name] + ([existing] if existing else [])
        checked = budgets.check(name, run.stack, landed, creators, others, budget_list, consent=over_budget,
                                landed=True)
    cloud_reports, hosts, verdicts = [], [], []
    if configure and cloud_nodes in used:
        cloud_reports = cloud_nodes.configure(run, nodes, verify=verify)
        if verify:
            verdicts += cloud_nodes.configured_verdicts(cloud_reports)
    if configure and racks in used:
        hosts = racks.configure(run)
        if not any(k.CREATES for k in used) and not any(h.ok for h in hosts):  # no host works: not up
            reg.set_state(name, "failed")
            rec = reg.get(name)
        if verify:
            verdicts += racks.verify_configured(run, hosts)
    record_verdicts(reg, name, verdicts)
    return UpOutcome(the_plan, rec, run.found.get("progress"), hosts, quota_lines, cloud_reports, verdicts,
                     attempts, checked)


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


def _placed(run: Run, reg: Registry, kept: dict, record: dict, places: dict, max_attempts: int, budget_s: float,
            on_attempt, skipped: list) -> tuple[list[Node], object]:
    """The cloud pools created, each failover pool at the first place that held it, and the bill
    predicted there (engine.spend.Spend); ``run.stack`` becomes the stack as placed, and ``record``
    its locations."""
    try:
        placement = fail.place(run, places, max_attempts=max_attempts, budget_s=budget_s, on_attempt=on_attempt,
                               record=lambda a: reg.add_attempt(run.cluster, a.to_dict()), skipped=skipped)
    except GpufleetError as e:
        # `down` and `reap` look wherever an attempt was made, not only where the stack said
        tried = {(a["provider"], a["region"]) for a in getattr(e, "attempts", None) or [] if a["outcome"] != "skipped"}
        reg.record(**dict(kept, locations=sorted(set(map(tuple, kept["locations"])) | tried)), state="failed")
        raise
    run.stack = placement.stack
    placed = plan(run.stack, run.cat, cluster=run.found["cluster"], lay=run.layout)  # the bill where they landed
    record.update(locations=cloud_nodes.record_fields(placement.stack)["locations"], predicted=placed.spend.summary())
    return placement.nodes, placed.spend

"""`gpufleet up STACK` and `gpufleet down STACK|CLUSTER`."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from gpufleet.cli import options, output
from gpufleet.cli.output import STATE
from gpufleet.cli.tables import (
    attempt_line,
    place,
    render_attempts,
    render_node_outcomes,
    render_outcomes,
    render_resources,
    render_verdicts,
    short_id,
)
from gpufleet.errors import GpufleetError, PartialFailure, Unhealthy
from gpufleet.limits import FAILOVER_BUDGET_S, FAILOVER_MAX_ATTEMPTS

UP_HELP = ("Bring a stack up: validate, plan and price it, check credentials, quotas and the Pulumi CLI, ask, then create "
           "the cloud pools with Pulumi, record the cluster, and configure every node with Salt: cloud nodes configure "
           "themselves from the stack's bucket (no inbound SSH) while `up` waits for their statuses, rack hosts over SSH. "
           "Re-running updates it in place; nodes already configured the same way are skipped. "
           "Every node that configured then runs the quick verification (`gpufleet verify`; --no-verify skips it). "
           "Exit 3 when some nodes failed to configure or did not answer in time (the others are done), 1 when "
           "some failed verification (they are marked unhealthy).")
CONFIGURE_HELP = ("Apply the stack's Salt states again on a cluster that is up, after a change to the states or the stack's "
                  "software: cloud nodes pick the new configuration up from the stack's bucket within a minute and "
                  "report back; rack hosts are configured over SSH. Nodes already at it do nothing. Exit 3 when some "
                  "nodes failed or did not answer in time.")
WaitTimeout = Annotated[float, typer.Option("--wait-timeout", min=0, max=86400, help="Seconds to wait for the cloud "
                                            "nodes to report their configuration.")]
NoWait = Annotated[bool, typer.Option("--no-wait", help="Fail at once (exit 4) when another command holds the cluster "
                                      "(team mode: its lease; alone: a heal pass or command on this machine), "
                                      "instead of waiting for it.")]


def _held(cluster: str, command: str, no_wait: bool):
    """The cluster's lease for the command's run (team mode; alone, this machine's lock of it), the wait said as it
    starts."""
    from gpufleet.fleet import team

    def waiting(lease) -> None:  # alone: the lock's holder, in words
        output.warn(f"cluster {cluster} is held by {lease if isinstance(lease, str) else lease.words()}; " +
                    ("its last heartbeat looks old: watching whether it still beats (a clock here or there may be off)"
                     if no_wait else "waiting for it (--no-wait fails at once)"))
    return team.session(cluster, command, wait=not no_wait, on_wait=waiting, on_warning=output.warn)
DOWN_HELP = ("Destroy a cluster's cloud resources and drain its rack hosts (by stack file or cluster name), then ask "
             "every cloud for anything still tagged for it, delete that in dependency order with retries, and exit 1 "
             "with the list if something is left. It leaves the registry only once nothing is left and every host is "
             "drained. Machines are never wiped; --clean undoes the Salt states.")


@output.handle_errors
def up(
    stack: options.StackFile,
    cluster: options.Cluster = None,
    yes: options.Yes = False,
    trust_new_hosts: options.TrustNewHosts = False,
    reconfigure: Annotated[bool, typer.Option("--reconfigure", help="Apply the states again on hosts already "
                                              "configured the same way.")] = False,
    configure: Annotated[bool, typer.Option("--configure/--no-configure", help="Configure the nodes with Salt after "
                                            "the cloud part (cloud nodes then wait for `gpufleet configure`).")] = True,
    check: Annotated[bool, typer.Option("--check/--no-check", help="Check the clouds' quotas for the stack first "
                                        "(gpufleet check) and refuse when one is short.")] = True,
    wait_timeout: WaitTimeout = 1800,
    verify: Annotated[bool, typer.Option("--verify/--no-verify", help="End with the quick verification of every "
                                         "node that configured (`gpufleet verify`).")] = True,
    failover: Annotated[bool, typer.Option("--failover/--no-failover", help="Pools with a `failover:` block try "
                                           "their other places when the cloud refuses one (--no-failover: only "
                                           "their own).")] = True,
    max_attempts: Annotated[int, typer.Option("--max-attempts", min=1, max=1000, help="Most Pulumi runs failover "
                                              "makes, every pool's together.")] = FAILOVER_MAX_ATTEMPTS,
    failover_budget: Annotated[float, typer.Option("--failover-budget", min=1, max=7 * 86400, metavar="SECONDS",
                                                   help="No new failover attempt starts after this long.")] = FAILOVER_BUDGET_S,
    no_wait: NoWait = False,
    over_budget: Annotated[bool, typer.Option("--over-budget", help="Bring it up even when its projected spend for "
                                              "its TTL exceeds what a budget it falls under has left this month "
                                              "(otherwise exit 5).")] = False,
    replace: Annotated[bool, typer.Option("--replace", help="Let this up replace running cloud nodes where a "
                                          "change needs it (instance type, size, zone, market: what the cloud "
                                          "cannot change in place). Without it an up under --yes that would is "
                                          "refused (exit 2) naming them; at a terminal you are asked.")] = False,
    refresh_image: Annotated[bool, typer.Option("--refresh-image", help="Look up again the image each image name "
                                                "(ubuntu-22.04 ...) was pinned to at the first up: nodes launched "
                                                "from now on boot the newest; running nodes keep theirs.")] = False,
):
    from gpufleet import catalog, stacks
    from gpufleet.cli.plan import render
    from gpufleet.fleet import budgets
    from gpufleet.fleet.up import UpEvents, UpOptions, bring_up
    from gpufleet.nodes.run import Seams

    cat = catalog.load(STATE.config)
    st = stacks.load(stack, cat)

    def confirm(p) -> bool:
        if not STATE.json:
            render(p)
            for r in p.replacements:  # running nodes this up deletes and launches anew
                output.warn(r.line())
        replacing = sum(r.nodes for r in p.replacements)
        # a stack of racks alone creates nothing in a cloud: it takes its hosts into the cluster
        what = f"Create these {len(p.cloud_resources)} resources" if p.cloud_resources else \
            f"Take these {sum(len(x.hosts) for x in st.pools if x.on_rack)} rack host(s) into the cluster"
        return options.confirm(f"{what} for {output.money(p.usd_per_hour)}/h"
                               + (f", replacing {replacing} running node(s)?" if replacing else "?"), yes)

    try:
        with _held(cluster or st.name, "up", no_wait) as logged, output.steps("Bringing up") as update:
            opts = UpOptions(cluster=cluster, prompt=options.passphrase_prompt(), configure=configure,
                             trust_new_hosts=trust_new_hosts, reconfigure=reconfigure, check=check, verify=verify,
                             failover=failover, max_attempts=max_attempts, failover_budget_s=failover_budget,
                             budget_list=budgets.configured(STATE.config), over_budget=over_budget,
                             replace_nodes=True if replace else (False if yes else None),
                             refresh_images=refresh_image, seams=Seams(wait_s=wait_timeout))
            events = UpEvents(on_progress=lambda pr: update(pr.done, pr.total, _in_flight(pr)),
                              on_host_progress=lambda phase, done, total, msg: update(done, total, f"{phase}: {msg}"),
                              on_attempt=_tell_attempt)
            outcome = bring_up(st, cat, options=opts, confirm=confirm, on_event=events)
            failed = PartialFailure.of(outcome.configured) or (Unhealthy(outcome.verdicts) if not all(
                v.ok for v in outcome.verdicts) else None)
            logged.update(_logged(failed), usd_per_hour=outcome.record.usd_per_hour,
                          created_by=outcome.record.created_by, predicted=outcome.record.predicted,
                          **({"over_budget": [c.standing.budget.name for c in outcome.budgets if c.exceeded]}
                             if any(c.exceeded for c in outcome.budgets) else {}))
    except GpufleetError as e:
        if getattr(e, "reports", None) and not STATE.json:
            render_node_outcomes(e.reports, "Configuration")  # every host, and why each failed
        if getattr(e, "attempts", None) and not STATE.json:
            render_attempts(e.attempts)
        raise
    rec = outcome.record
    for q in outcome.quotas:
        if q.ok is None:
            output.warn(f"{q.provider} {q.region}: quota {q.quota!r} {q.note or 'could not be read'}")
    if STATE.json:
        doc = {"cluster": rec.to_dict(), "changes": outcome.progress.ops if outcome.progress else {},
               "quotas": [q.to_dict() for q in outcome.quotas],
               "elapsed_s": round(outcome.progress.elapsed, 1) if outcome.progress else 0,
               "hosts": [h.to_dict() for h in outcome.configured], "ok": failed is None,
               "verified": [v.to_dict() for v in outcome.verdicts], "attempts": outcome.attempts,
               "budgets": [c.to_dict() for c in outcome.budgets],
               "replaced": [r.to_dict() for r in outcome.plan.replacements]}  # running nodes it replaced (--replace)
        if failed:  # the error's fields next to the result, in one document
            doc.update({k: v for k, v in failed.to_dict().items() if k not in ("hosts", "nodes")})
        output.emit_json(doc)
        if failed:
            raise typer.Exit(failed.exit_code)
        return
    for c in outcome.budgets:
        if c.exceeded:
            unpriced = f" and {'; '.join(c.unpriced)} that the catalog cannot price" if c.unpriced else ""
            output.warn(f"over budget {c.standing.budget.name!r} (--over-budget): this cluster adds "
                        f"{output.money(c.projected)}{unpriced}, {output.money(max(c.standing.left, 0))} was left "
                        "this month")
    if outcome.attempts:
        render_attempts(outcome.attempts)
    _render_nodes(rec, outcome.progress)
    if outcome.configured:
        render_node_outcomes(outcome.configured, "Configuration")
    if outcome.verdicts:
        render_verdicts(outcome.verdicts, "Verification (quick)")
    if failed:
        raise failed


def _logged(failed) -> dict:
    """What the team's event log says of a command that ended with ``failed`` (None: it did its job)."""
    return {"outcome": f"failed: {failed.message}"[:300], "exit_code": failed.exit_code} if failed else {}


def _tell_attempt(attempt) -> None:
    """Each placement attempt as it happens, on stderr (the table at the end has them all)."""
    if not STATE.json:
        from rich.markup import escape

        output.console(stderr=True).print(escape(attempt_line(attempt.to_dict())))


@output.handle_errors
def configure(
    stack: options.StackFile,
    cluster: options.Cluster = None,
    reconfigure: Annotated[bool, typer.Option("--reconfigure", help="Apply the states again on nodes already "
                                              "configured the same way.")] = False,
    trust_new_hosts: options.TrustNewHosts = False,
    wait_timeout: WaitTimeout = 1800,
    no_wait: NoWait = False,
):
    from gpufleet import catalog, stacks
    from gpufleet.fleet.configure import reconfigure as apply_again

    cat = catalog.load(STATE.config)
    st = stacks.load(stack, cat)
    with _held(cluster or st.name, "configure", no_wait) as logged, output.steps("Configuring") as update:
        configured = apply_again(st, cat, cluster=cluster, force=reconfigure, trust_new_hosts=trust_new_hosts,
                                 wait_s=wait_timeout, prompt=options.passphrase_prompt(),
                                 progress=lambda phase, done, total, msg: update(done, total, f"{phase}: {msg}"))
        failed = PartialFailure.of(configured)
        logged.update(_logged(failed))
    if STATE.json:
        doc = {"cluster": cluster or st.name, "hosts": [h.to_dict() for h in configured], "ok": failed is None}
        if failed:
            doc.update({k: v for k, v in failed.to_dict().items() if k != "hosts"})
        output.emit_json(doc)
        if failed:
            raise typer.Exit(failed.exit_code)
        return
    if configured:
        render_node_outcomes(configured, "Configuration")
    changed = sum(h.changed for h in configured)
    output.console().print(f"{len(configured)} node(s), {changed} change(s).")
    if failed:
        raise failed


def _in_flight(pr) -> str:
    if not pr.in_flight:
        return ""
    urn = next(iter(pr.in_flight))
    return f"{pr.in_flight[urn]} {urn.rsplit('::', 1)[-1]}"


def _render_nodes(rec, progress) -> None:
    rows = [[n.pool, n.provider, place(n.location, n.zone), n.machine, short_id(n.node_id) if n.node_id else "-",
             n.private_ip or "-", n.ssh_endpoint or "", output.money(n.usd_per_hour) if n.usd_per_hour is not None else "-"]
            for n in rec.nodes]
    output.table(f"Cluster {rec.name} is up", ["pool", "provider", "where", "machine", "node", "private IP", "SSH",
                                                "$/h"], rows, justify={"$/h": "right"},
                 optional=("where", "private IP", "$/h", "provider", "SSH"))
    changes = (", ".join(f"{k} {v}" for k, v in sorted(progress.ops.items())) or "no changes") if progress \
        else "No cloud resources"
    took = f" in {progress.elapsed:.0f}s" if progress else ""
    cost = output.money(rec.usd_per_hour) + "/h" if rec.usd_per_hour is not None else "unpriced pools included"
    output.console().print(f"{changes}{took}. {len(rec.nodes)} node(s), {cost}; expires {rec.expires_at}. "
                           f"Recorded in the registry.")


@output.handle_errors
def down(
    target: Annotated[str, typer.Argument(help="Stack file or cluster name.", metavar="STACK|CLUSTER")],
    cluster: Annotated[Optional[str], typer.Option("--cluster", "-c", help="Cluster name, when STACK was brought up under "
                                                   "another name.")] = None,
    yes: options.Yes = False,
    clean: Annotated[bool, typer.Option("--clean", help="Also apply each formula's clean state on the rack hosts "
                                        "(removes what gpufleet installed; data is never touched).")] = False,
    trust_new_hosts: options.TrustNewHosts = False,
    no_wait: NoWait = False,
):
    from gpufleet import catalog
    from gpufleet.fleet.down import tear_down
    from gpufleet.stacks import stack_of

    stack_obj = stack_of(target, catalog.load(STATE.config))
    name = cluster or (stack_obj.name if stack_obj else target)

    def confirm(rec) -> bool:
        if not STATE.json:
            output.console().print(f"Cluster [bold]{rec.name}[/bold] (stack {rec.stack}, {len(rec.nodes)} node(s), "
                                   f"state {rec.state}) will be destroyed.")
        return options.confirm(f"Destroy cluster {rec.name}?", yes)

    try:
        with _held(name, "down", no_wait), output.steps("Tearing down") as update:
            out = tear_down(
                name, confirm=confirm, prompt=options.passphrase_prompt(), stack=stack_obj, clean=clean,
                trust_new_hosts=trust_new_hosts, on_progress=lambda pr: update(pr.done, None, _in_flight(pr)),
                on_host_progress=lambda phase, done, total, msg: update(done, total, f"{phase}: {msg}"),
                on_sweep=lambda done, total, msg: update(done, total, f"deleting leftovers: {msg}"))
    except GpufleetError as e:
        if not STATE.json:
            if getattr(e, "reports", None):
                render_node_outcomes(e.reports, "Drain")
            if getattr(e, "resources", None) and isinstance(e.resources[0], dict):
                render_resources("Still there after the teardown", e.resources)
        raise
    progress, hosts = out.progress, out.hosts
    if STATE.json:
        output.emit_json({"cluster": out.record.name, "destroyed": True, "changes": progress.ops if progress else {},
                          "swept": [o.to_dict() for o in out.swept], "left": [], "checked": sorted(out.record.clouds),
                          "hosts": [h.to_dict() for h in hosts]})
        return
    if hosts:
        render_node_outcomes(hosts, "Drain")
    if out.swept:
        render_outcomes("Left outside the Pulumi state, deleted by tag", out.swept)
    deleted = progress.ops.get("delete", 0) if progress else 0
    racks = f", {len(hosts)} rack host(s) drained" + (" and cleaned" if clean else "") if hosts else ""
    swept = f", {len(out.swept)} leftover(s) deleted by tag" if out.swept else ""
    checked = ", ".join(sorted(out.record.clouds))
    proof = f" The clouds ({checked}) report nothing tagged for it." if checked else ""
    output.console().print(f"Cluster {out.record.name} torn down ({deleted} cloud resources deleted{swept}{racks}) "
                           f"and removed from the registry.{proof}")

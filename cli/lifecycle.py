"""`gpufleet status`, `gpufleet reap` and `gpufleet check`: what runs, what to remove, what fits."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Optional

import typer

from gpufleet.cli import options, output
from gpufleet.cli.output import STATE
from gpufleet.cli.tables import age, person, render_findings, render_outcomes
from gpufleet.errors import EXIT_FAILED

# The rule of every command that asks the clouds, said in each one's help.
UNREAD_RULE = ("A cloud without credentials (or its SDK) is skipped with a warning; exit 1 when a cloud or region that "
               "should have been read could not be (unreachable, credentials refused, permission denied: each named), "
               "or when no cloud could be asked at all; exit 2 when a cloud named with --provider has no credentials.")
STATUS_HELP = ("List clusters: the registry's, merged with what the clouds report by tag (nodes, state, age, expiry, "
               "price per hour, cost so far). Resources tagged for a cluster the registry does not know are orphans. "
               "--local asks no cloud. " + UNREAD_RULE)
REAP_HELP = ("Find tagged resources that are expired or whose cluster is gone from the registry and the Pulumi state, "
             "on every cloud and region. A dry run unless --yes; --yes deletes them in dependency order. Untagged "
             "resources are never touched. Safe from cron: exit 1 also when something could not be deleted. "
             + UNREAD_RULE)
CHECK_HELP = ("Show whose credentials each cloud gets, and, for a STACK, the GPU quotas it needs against what is "
              "available (AWS vCPU quotas per instance class, GCP GPU quotas per region, Azure vCPUs per VM family). "
              "Exit 1 when a quota is short. `up` runs this first. " + UNREAD_RULE)



def warn_unread(clouds, unread: dict[str, str]) -> None:
    """Each cloud that was not asked (no credentials or SDK) and each place that should have been
    read and was not, with why."""
    for p, why in clouds.skipped.items():
        output.warn(f"{p} not asked: {why}")
    for where, why in unread.items():
        if where not in clouds.skipped:
            output.warn(f"{where} could not be read: {why}")


def exit_if_unread(unread: dict[str, str], clouds) -> None:
    """The rule of every command that asks the clouds: exit 1 when something that should have been
    read could not be (the result is incomplete), after showing what was found. The hint names the
    reason there was: no cloud could be asked at all (no credentials or SDK), or some were asked
    and failed."""
    if not unread:
        return
    if STATE.json:
        raise typer.Exit(EXIT_FAILED)  # the document already says what ("unread")
    from gpufleet.errors import GpufleetError

    if all(where in clouds.skipped for where in unread):
        raise GpufleetError("no cloud could be asked: none has credentials (or its SDK) here, so nothing is known "
                            "about what runs there",
                            "set up one cloud's credentials (each warning above says where it looked), name the "
                            "clouds you use with --provider; `gpufleet status --local` reads only the registry")
    failed = [w for w in unread if w not in clouds.skipped]
    raise GpufleetError(f"could not read {', '.join(failed)}: the result is incomplete",
                        "each is named above with why; fix it and run again")


@output.handle_errors
def status(
    target: Annotated[Optional[str], typer.Argument(help="Stack file or cluster name (default: every cluster).",
                                                    metavar="[STACK|CLUSTER]")] = None,
    provider: options.Providers = None,
    region: options.Regions = None,
    local: Annotated[bool, typer.Option("--local", help="Only the registry; do not ask the clouds.")] = False,
    only_mine: Annotated[bool, typer.Option("--mine", help="Only the clusters you brought up: created by your "
                                            "identity on each cloud asked (AWS caller ARN, Google account, Azure "
                                            "principal), or by your OS user on racks.")] = False,
    owner: Annotated[Optional[str], typer.Option("--owner", help="Only the clusters whose stack owner or creator "
                                                 "names this (any part of it, any case: alice finds "
                                                 "alice@example.com and .../assumed-role/Admin/alice).")] = None,
):
    from gpufleet import catalog
    from gpufleet.cli import budget as budget_cmd
    from gpufleet.fleet import budgets
    from gpufleet.fleet import status as st

    if only_mine and local:
        output.warn("--mine with --local: the clouds are not asked who you are there, so only clusters your OS "
                    "user brought up (or whose recorded creator is it) are shown")
    with output.steps("Asking the clouds") as update:
        seen: list[str] = []
        report = st.run(target, catalog.load(STATE.config), providers=options.clouds(provider), regions=region,
                        local=local, on_region=lambda where: (seen.append(where), update(len(seen), None, where)),
                        only_mine=only_mine, owner=owner,
                        budget_list=budgets.configured(STATE.config, on_bad=budget_cmd.left_out))
    warn_unread(report.clouds, report.unread)
    rows, now = report.rows, dt.datetime.now(dt.timezone.utc)
    if STATE.json:
        output.emit_json(report.to_dict())
        exit_if_unread(report.unread, report.clouds)
        return
    if not rows and (only_mine or owner):
        output.console().print("No clusters " + (f"created by {', '.join(report.me)}" if only_mine else "")
                               + (" and " if only_mine and owner else "") + (f"owned or created by {owner!r}"
                                                                             if owner else "") + ".")
        _held_images(report.images, now)
        exit_if_unread(report.unread, report.clouds)
        return
    if not rows:
        asked = "the clouds were not asked (--local)" if local else "no cloud was asked" if not report.checked else \
            f"the clouds asked ({', '.join(report.checked)}) report nothing tagged gpufleet:cluster"
        output.console().print(f"No clusters: the registry ({report.registry}) is empty; {asked}.")
        _held_images(report.images, now)
        exit_if_unread(report.unread, report.clouds)
        return
    table = []
    for r in rows:
        nodes = str(r.nodes_recorded) if r.nodes_found is None else (
            str(r.nodes_found) if r.nodes_found == r.nodes_recorded or r.state == "orphan"
            else f"{r.nodes_found} (registry {r.nodes_recorded})")
        table.append([r.name, r.state, ", ".join(r.where) or "-", nodes, age(now, r.created_at),
                      _expiry(now, r.expires_at), output.money(r.usd_per_hour), output.money(r.cost_so_far),
                      _creators(r.created_by), "; ".join(r.notes)])
    output.table("Clusters", ["cluster", "state", "where", "nodes", "age", "expires", "$/h", "cost so far", "by",
                              "notes"],
                 table, justify={"$/h": "right", "cost so far": "right"}, wraps=("where", "notes"),
                 optional=("expires", "nodes", "cost so far", "age", "by"),
                 styles=["red" if r.state in ("orphan", "leaking", "failed") else None for r in rows])
    _scheduler(rows)
    _held_images(report.images, now)
    if report.budgets:
        budget_cmd.render(report.budgets, now)
    exit_if_unread(report.unread, report.clouds)


def _scheduler(rows: list) -> None:
    """Slurm's view of each cluster that runs it: its nodes and jobs per state, the drained nodes' reasons."""
    viewed = [r for r in rows if r.scheduler and not r.scheduler.get("error")]
    if not viewed:
        return
    def counts(d: dict) -> str:
        return ", ".join(f"{n} {state}" for state, n in sorted(d.items())) or "none"

    output.table("Slurm (from each controller)", ["cluster", "controller", "nodes", "jobs", "drained: reason"],
                 [[r.name, r.scheduler["controller"], counts(r.scheduler["nodes"]), counts(r.scheduler["jobs"]),
                   "; ".join(f"{n}: {why}" for n, why in r.scheduler["drained"].items()) or "-"] for r in viewed],
                 wraps=("controller", "nodes", "jobs", "drained: reason"), optional=("controller",))


def _creators(created_by: dict[str, str]) -> str:
    """Who brought a cluster up, once each: a principal's last path segment (an ARN's session or user
    name), which is the person where a path has one."""
    return ", ".join(dict.fromkeys(person(v) for v in created_by.values())) or "-"


def _held_images(images: list, now) -> None:
    """The golden images the clouds hold: they bill for storage whether or not a cluster is up."""
    if not images:
        return
    output.table("Golden images (storage billed until deleted)", ["image", "cloud", "region", "id", "GB", "age",
                                                                  "expires", "state"],
                 [[h.image.name, h.image.provider, h.image.region, h.image.id,
                   f"{h.image.size_gb:g}" if h.image.size_gb else "-", age(now, h.created), _expiry(now, h.expires),
                   f"{h.state}: {h.detail}" if h.detail else h.state]
                  for h in images], optional=("region", "cloud", "age", "GB", "id"), wraps=("state", "id"),
                 justify={"GB": "right"},
                 styles=["yellow" if h.state != "current" else None for h in images])


def _expiry(now, t) -> str:
    if t is None:
        return "-"
    h = (t - now).total_seconds() / 3600
    return f"in {output.duration(h)}" if h >= 0 else f"expired {output.duration(-h)} ago"


@output.handle_errors
def reap(
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Delete what is found (default: a dry run).")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only list what would be deleted (the default; "
                                          "for scripts that say so).")] = False,
    older_than: Annotated[Optional[str], typer.Option("--older-than", help="Only resources at least this old "
                                                      "(e.g. 2h, 3d).")] = None,
    cluster: Annotated[Optional[list[str]], typer.Option("--cluster", "-c", help="Only this cluster; naming it also "
                                                         "lifts the grace period for its orphans. Repeatable.")] = None,
    provider: options.Providers = None,
    region: options.Regions = None,
    grace: Annotated[str, typer.Option("--grace", help="Orphans younger than this are kept: they may be an `up` "
                                       "still running elsewhere.")] = "30m",
):
    from gpufleet import catalog
    from gpufleet.cli.budget import left_out
    from gpufleet.engine import automation
    from gpufleet.errors import InputError
    from gpufleet.fleet import budgets
    from gpufleet.fleet.reap import reap as run_reap

    if yes and dry_run:
        raise InputError("--yes and --dry-run contradict each other", "drop one of them")
    older, grace_d = options.duration("--older-than", older_than), options.duration("--grace", grace)
    with output.steps("Asking the clouds") as update:
        seen: list[str] = []
        res = run_reap(catalog.load(STATE.config), yes=yes, older_than=older, clusters=cluster,
                       providers=options.clouds(provider), regions=region, grace=grace_d,
                       on_region=lambda where: (seen.append(where), update(len(seen), None, where)),
                       on_delete=lambda d, total, m: update(d, total, f"deleting: {m}"),
                       budget_list=budgets.configured(STATE.config, on_bad=left_out))
    warn_unread(res.clouds, res.unread)
    if not res.state_read:
        output.warn(f"the Pulumi state at {automation.backend_url()} could not be read (no Pulumi CLI?): orphans are "
                    "kept, only expired resources are reaped")
    sel, outcomes, failed, clouds, found = res.selection, res.outcomes, res.failed, res.clouds, res.found
    if STATE.json:
        output.emit_json(res.to_dict())
        if res.trouble:
            raise typer.Exit(EXIT_FAILED)
        return
    if res.unread and not found:
        exit_if_unread(res.unread, res.clouds)  # nothing read means nothing known: never "Nothing to reap"
    if sel.reap:
        render_findings("Expired or orphaned" + ("" if yes else " (dry run: nothing deleted)"), sel.reap)
    for f in sel.kept:
        output.warn(f"kept {f.resource.where} {f.resource.label()}: {f.detail}")
    for f in sel.unreadable:
        output.warn(f"{f.resource.where} {f.resource.label()}: {f.detail}")
    if outcomes:
        render_outcomes("Deleted" if not failed else "Deletion", outcomes)
    _reaped_images(res, yes)
    _past_budget(res.past_budget)
    c = output.console()
    asked = ", ".join(f"{p} ({len(r)} region{'s' if len(r) != 1 else ''})" for p, r in clouds.regions.items()) or "no cloud"
    if not sel.reap:
        if not res.expired_images:
            c.print(f"Nothing to reap: {len(found)} tagged resource(s) on {asked}, none expired or orphaned.")
    elif not yes:
        c.print(f"{len(sel.reap)} resource(s) would be deleted, {output.money(sel.usd_per_hour)}/h. "
                "Run again with --yes to delete them.")
    else:
        c.print(f"Deleted {len(outcomes) - len(failed)} of {len(outcomes)} resource(s); "
                f"{output.money(sum(o.resource.usd_per_hour or 0 for o in outcomes if o.ok))}/h no longer billed.")
    exit_if_unread(res.unread, res.clouds)
    if res.trouble:
        raise typer.Exit(EXIT_FAILED)


def _past_budget(past: list) -> None:
    """Clusters running past a budget this month: listed for a person to decide, never reaped."""
    if not past:
        return
    output.table("Past their budget this month (not reaped: `gpufleet down CLUSTER` stops one)",
                 ["budget", "per month", "spent", "clusters"],
                 [[s.budget.name, output.money(s.budget.usd_per_month), output.money(s.spent), ", ".join(s.clusters)]
                  for s in past], justify={"per month": "right", "spent": "right"}, wraps=("clusters",),
                 styles=["red"] * len(past))


def _reaped_images(res, yes: bool) -> None:
    """Expired golden images: what would go (or went) with their snapshots; unreadable expiries warned."""
    for h in res.images:
        if h.state == "unreadable":
            output.warn(f"golden image {h.image.name} ({h.image.provider} {h.image.region}): {h.detail}")
    expired = res.expired_images
    if not expired:
        return
    outcome = {id(r.image): r for r in res.removed}  # with --yes, one for each expired image
    now, rows = dt.datetime.now(dt.timezone.utc), []
    for h in expired:
        r = outcome.get(id(h.image))
        rows.append([h.image.name, h.image.provider, h.image.region, h.image.id,
                     f"{h.image.size_gb:g}" if h.image.size_gb else "-", _expiry(now, h.expires),
                     "would delete" if r is None else ("deleted" if r.ok else f"failed: {r.message}")])
    output.table("Expired golden images" + ("" if yes else " (dry run: nothing deleted)"),
                 ["image", "cloud", "region", "id", "GB", "expires", "outcome"], rows,
                 optional=("region", "cloud", "id", "GB"), wraps=("outcome",), justify={"GB": "right"})
    if not yes:
        output.console().print(f"{len(expired)} golden image(s) would be deleted with their snapshots. "
                               "Run again with --yes to delete them.")


@output.handle_errors
def check(
    stack: Annotated[Optional[str], typer.Argument(help="Stack file: check its quotas too.", metavar="[STACK]")] = None,
    provider: options.Providers = None,
):
    from gpufleet import catalog
    from gpufleet.fleet.check import run

    with output.steps("Checking credentials and quotas"):
        report = run(stack, catalog.load(STATE.config), providers=options.clouds(provider))
    clouds, lines, short = report.clouds, report.lines, report.short
    if STATE.json:  # one document: the report, and the error's fields when a quota is short
        output.emit_json(report.to_dict())
        if short:
            raise typer.Exit(short.exit_code)
        exit_if_unread(report.unread, report.clouds)
        return
    if not report.cloud_pools:
        output.console().print("The stack has no cloud pools: no credentials or quotas to check.")
        return
    rows = [[p, who.get("principal", "-"), who.get("account", "-"), who.get("source", "-")]
            for p, who in clouds.identity.items()]
    rows += [[p, f"not checked: {why}", "-", "-"] for p, why in clouds.skipped.items()]
    rows += [[p, f"could not be read: {why}", "-", "-"] for p, why in clouds.failed.items()]
    output.table("Credentials", ["cloud", "who", "account / project / subscription", "from"], rows,
                 wraps=("who", "account / project / subscription", "from"))
    if lines:
        qrows = [[f"{x.provider}/{x.region}", f"{x.quota} ({x.unit})", f"{x.needed:g}", _num(x.limit), _num(x.used),
                  _num(x.available), {True: "ok", False: "SHORT", None: "unknown"}[x.ok], ", ".join(x.pools),
                  x.note] for x in lines]
        output.table("Quotas", ["where", "quota", "need", "limit", "used", "free", "", "pools", "note"], qrows,
                     justify={k: "right" for k in ("need", "limit", "used", "free")},
                     optional=("pools", "limit", "used"), wraps=("quota", "pools", "note"),
                     styles=["red" if x.ok is False else ("yellow" if x.ok is None else None) for x in lines])
    if short:
        raise short
    exit_if_unread(report.unread, report.clouds)


def _num(v) -> str:
    return "-" if v is None else f"{v:g}"


registry_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="The local registry of clusters.")


@registry_app.command("rebuild", help="Write the registry anew from what the clouds' tags (every cloud with "
                      "credentials, every region) and the Pulumi state say; rack-only clusters, which carry no "
                      "tags, are kept from the old file when it can be read. The old file is kept beside it "
                      "(registry.db.bak-<time>). A registry that can still be read is replaced only with --yes, "
                      "and not when a cloud or region could not be read. " + UNREAD_RULE)
@output.handle_errors
def rebuild(
    provider: options.Providers = None,
    region: options.Regions = None,
    yes: options.Yes = False,
):
    from gpufleet import catalog
    from gpufleet.fleet import registry as rebuilding
    from gpufleet.paths import registry_path

    old, problem = rebuilding.old_registry(registry_path())
    if old is not None and old.list() and not options.confirm(
            f"Replace the registry {old.path} ({len(old.list())} cluster(s)) with what the clouds say?", yes):
        from gpufleet.errors import GpufleetError

        raise GpufleetError("nothing was changed", "run again and answer yes, or pass --yes")
    if problem:
        output.warn(f"{problem}: it is kept as a backup")
    with output.steps("Asking the clouds") as update:
        seen: list[str] = []
        res = rebuilding.rebuild(catalog.load(STATE.config), providers=options.clouds(provider), regions=region,
                                 on_region=lambda where: (seen.append(where), update(len(seen), None, where)))
    warn_unread(res.clouds, res.unread)
    if STATE.json:
        output.emit_json(res.to_dict())
        if not res.written or res.unread:
            raise typer.Exit(EXIT_FAILED)
        return
    rebuilding.refuse_unread(res)
    rows = [[c.name, c.stack, c.owner, c.expires_at or "-", ", ".join(f"{p}/{r}" for p, r in c.locations) or "-",
             len(c.nodes), "kept (rack)" if c.name in res.kept_racks else ("Pulumi state" if c.backend else "tags")]
            for c in res.clusters]
    output.table(f"Registry {res.path}", ["cluster", "stack", "owner", "expires", "where", "nodes", "from"], rows,
                 optional=("nodes", "from", "owner", "stack"), wraps=("where", "from"))
    output.console().print(f"{len(res.clusters)} cluster(s) written" + (f" (to the team store {res.store} too)"
                                                                       if res.store else "")
                           + (f"; the old file is {res.backup}" if res.backup else "") + "."
                           + (f" Kept in the store while their lease is held: {', '.join(res.kept_held)}."
                              if res.kept_held else ""))
    exit_if_unread(res.unread, res.clouds)

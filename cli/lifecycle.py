"""`gpufleet status`, `gpufleet reap` and `gpufleet check`: what runs, what to remove, what fits."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Optional

import typer

from gpufleet.cli import output
from gpufleet.cli.output import STATE

STATUS_HELP = ("List clusters: the registry's, merged with what the clouds report by tag (nodes, state, age, expiry, "
               "price per hour, cost so far). Resources tagged for a cluster the registry does not know are orphans.")
REAP_HELP = ("Find tagged resources that are expired or whose cluster is gone from the registry and the Pulumi state, "
             "on every cloud and region. A dry run unless --yes; --yes deletes them in dependency order. Untagged "
             "resources are never touched. Exit 1 when something could not be deleted or checked. Safe from cron.")
CHECK_HELP = ("Show whose credentials each cloud gets, and, for a STACK, the GPU quotas it needs against what is "
              "available (AWS vCPU quotas per instance class, GCP GPU quotas per region, Azure vCPUs per VM family). "
              "Exit 1 when a quota is short, 2 when credentials are missing. `up` runs this first.")

Providers = Annotated[Optional[list[str]], typer.Option("--provider", "-p", help="Only this cloud (aws, gcp, azure); "
                                                        "repeat for several.")]
Regions = Annotated[Optional[list[str]], typer.Option("--region", "-r", help="Only this region (e.g. us-east-1, "
                                                      "us-central1, eastus); repeat for several. Default: all.")]


def _providers(values: list[str] | None) -> list[str] | None:
    from gpufleet.errors import InputError, did_you_mean
    from gpufleet.providers import CLOUDS

    for v in values or []:
        if v not in CLOUDS:
            s = did_you_mean(v, CLOUDS)
            raise InputError(f"--provider {v!r} is not a cloud gpufleet manages",
                             f"did you mean {s!r}?" if s else f"choose from {', '.join(CLOUDS)}")
    return list(dict.fromkeys(values)) if values else None


def _duration(flag: str, value: str | None) -> dt.timedelta | None:
    if value is None:
        return None
    if value.strip() in ("0", "0m", "0h", "0d"):
        return dt.timedelta(0)
    from gpufleet.errors import InputError
    from gpufleet.spec import HintedValueError, parse_ttl

    try:
        return parse_ttl(value)
    except HintedValueError as e:
        raise InputError(f"{flag} {e}", e.hint) from None


def _open(providers, regions, *, required: bool):
    from gpufleet.lifecycle import inventory

    clouds = inventory.open_clouds(providers, required=required, regions=regions or None)
    for p, why in clouds.skipped.items():
        output.warn(f"{p} not checked: {why}")
    return clouds


def _collect(clouds, cluster: str | None = None):
    from gpufleet.lifecycle import inventory

    total = sum(len(r) for r in clouds.regions.values())
    seen = [0]
    with output.steps("Asking the clouds", total) as update:
        def on_region(where: str) -> None:
            seen[0] += 1
            update(seen[0], total, where)

        found, problems = inventory.collect(clouds, cluster=cluster, on_region=on_region)
    for where, why in problems.items():
        output.warn(f"{where} could not be read: {why}")
    return found, problems


def _target_clusters(target: str | None, reg) -> tuple[list, str | None]:
    """Registry clusters for a stack file or cluster name (all without one), and the name asked for."""
    if target is None:
        return reg.list(), None
    from gpufleet.cli.cluster import _stack_of

    st = _stack_of(target)
    if st is not None:
        return [c for c in reg.list() if c.stack == st.name], st.name
    rec = reg.get(target)
    return ([rec] if rec else []), target


@output.handle_errors
def status(
    target: Annotated[Optional[str], typer.Argument(help="Stack file or cluster name (default: every cluster).",
                                                    metavar="[STACK|CLUSTER]")] = None,
    provider: Providers = None,
    region: Regions = None,
    local: Annotated[bool, typer.Option("--local", help="Only the registry; do not ask the clouds.")] = False,
):
    from gpufleet import catalog
    from gpufleet.lifecycle import status as st
    from gpufleet.lifecycle.registry import Registry
    from gpufleet.lifecycle.resources import price

    reg = Registry()
    records, name = _target_clusters(target, reg)
    resources, checked, problems = [], set(), {}
    if not local:
        regions = region
        if not regions and name is not None and records:  # known clusters: only where they run
            regions = {}
            for rec in records:
                for p, rs in rec.clouds.items():
                    regions[p] = list(dict.fromkeys([*regions.get(p, []), *rs]))
        wanted = _providers(provider) or (sorted(regions) if isinstance(regions, dict) else None)
        if wanted != []:  # [] = the clusters asked for have no cloud pools
            clouds = _open(wanted, regions, required=bool(provider))
            one = records[0].name if len(records) == 1 else (name if not records else None)
            resources, problems = _collect(clouds, cluster=one if name else None)
            if name and len(records) > 1:
                keep = {r.name for r in records}
                resources = [r for r in resources if r.cluster in keep]
            checked = set(clouds.open)
            price(resources, catalog.load(STATE.config))
    now = dt.datetime.now(dt.timezone.utc)
    rows = st.build(records, resources, checked=checked, now=now)
    if name is not None and not rows:
        from gpufleet.errors import NotFound

        raise NotFound("cluster", name, [c.name for c in reg.list()], " in the registry or the clouds' tags")
    if STATE.json:
        output.emit_json({"clusters": [r.to_dict() for r in rows], "checked": sorted(checked),
                          "unread": problems, "registry": str(reg.path)})
        return
    if not rows:
        output.console().print(f"No clusters: the registry ({reg.path}) is empty and the clouds asked "
                               f"({', '.join(sorted(checked)) or 'none'}) report nothing tagged gpufleet:cluster.")
        return
    table = []
    for r in rows:
        nodes = str(r.nodes_recorded) if r.nodes_found is None else (
            str(r.nodes_found) if r.nodes_found == r.nodes_recorded or r.state == "orphan"
            else f"{r.nodes_found} (registry {r.nodes_recorded})")
        table.append([r.name, r.state, ", ".join(r.where) or "-", nodes, _age(now, r.created_at),
                      _expiry(now, r.expires_at), output.money(r.usd_per_hour), output.money(r.cost_so_far),
                      "; ".join(r.notes)])
    output.table("Clusters", ["cluster", "state", "where", "nodes", "age", "expires", "$/h", "cost so far", "notes"],
                 table, justify={"$/h": "right", "cost so far": "right"},
                 styles=["red" if r.state in ("orphan", "leaking", "failed") else None for r in rows])


def _age(now, t) -> str:
    return output.duration((now - t).total_seconds() / 3600) if t else "-"


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
    provider: Providers = None,
    region: Regions = None,
    grace: Annotated[str, typer.Option("--grace", help="Orphans younger than this are kept: they may be an `up` "
                                       "still running elsewhere.")] = "30m",
):
    from gpufleet import catalog
    from gpufleet.engine import automation
    from gpufleet.lifecycle import inventory, reaper
    from gpufleet.lifecycle.registry import Registry
    from gpufleet.lifecycle.resources import price

    if yes and dry_run:
        from gpufleet.errors import InputError

        raise InputError("--yes and --dry-run contradict each other", "drop one of them")
    older = _duration("--older-than", older_than)
    grace_d = _duration("--grace", grace)
    providers = _providers(provider)
    clouds = _open(providers, region, required=bool(providers))
    found, problems = _collect(clouds, cluster=cluster[0] if cluster and len(cluster) == 1 else None)
    price(found, catalog.load(STATE.config))
    reg = Registry()
    in_state = automation.state_stacks()
    known = {c.name for c in reg.list()} | (in_state or set())
    now = dt.datetime.now(dt.timezone.utc)
    sel = reaper.select(found, known=known, state_read=in_state is not None, now=now, older_than=older,
                        clusters=cluster, grace=grace_d)
    if in_state is None:
        output.warn(f"the Pulumi state at {automation.backend_url()} could not be read (no Pulumi CLI?): orphans are "
                    "kept, only expired resources are reaped")
    outcomes = []
    if yes and sel.reap:
        with output.steps("Deleting", len(sel.reap)) as update:
            outcomes = inventory.delete([f.resource for f in sel.reap], clouds,
                                        on_progress=lambda d, t, m: update(d, t, m))
        _mark_reaped(reg, sel, outcomes)
    failed = [o for o in outcomes if not o.ok]
    trouble = bool(failed or (yes and (problems or sel.unreadable)))
    if STATE.json:
        output.emit_json({"dry_run": not yes, "checked": sorted(clouds.open), "skipped": clouds.skipped,
                          "unread": problems, "pulumi_state_read": in_state is not None,
                          "found": len(found), "reap": [f.to_dict() for f in sel.reap],
                          "usd_per_hour": round(sel.usd_per_hour, 4),
                          "kept": [f.to_dict() for f in sel.kept], "unreadable": [f.to_dict() for f in sel.unreadable],
                          "deleted": [o.to_dict() for o in outcomes if o.ok], "failed": [o.to_dict() for o in failed]})
        if trouble:
            raise typer.Exit(1)
        return
    if sel.reap:
        render_findings("Expired or orphaned" + ("" if yes else " (dry run: nothing deleted)"), sel.reap)
    for f in sel.kept:
        output.warn(f"kept {f.resource.where} {f.resource.label()}: {f.detail}")
    for f in sel.unreadable:
        output.warn(f"{f.resource.where} {f.resource.label()}: {f.detail}")
    if outcomes:
        render_outcomes("Deleted" if not failed else "Deletion", outcomes)
    c = output.console()
    asked = ", ".join(f"{p} ({len(r)} region{'s' if len(r) != 1 else ''})" for p, r in clouds.regions.items()) or "no cloud"
    if not sel.reap:
        c.print(f"Nothing to reap: {len(found)} tagged resource(s) on {asked}, none expired or orphaned.")
    elif not yes:
        c.print(f"{len(sel.reap)} resource(s) would be deleted, {output.money(sel.usd_per_hour)}/h. "
                "Run again with --yes to delete them.")
    else:
        c.print(f"Deleted {len(outcomes) - len(failed)} of {len(outcomes)} resource(s); "
                f"{output.money(sum(o.resource.usd_per_hour or 0 for o in outcomes if o.ok))}/h no longer billed.")
    if trouble:
        raise typer.Exit(1)


def _mark_reaped(reg, sel, outcomes) -> None:
    """A registry cluster whose every found resource was reaped is marked so; `down` then clears it."""
    by: dict[str, list] = {}
    for o in outcomes:
        by.setdefault(o.resource.cluster, []).append(o.ok)
    for name, oks in by.items():
        if all(oks):
            reg.set_state(name, "reaped")  # a no-op for a cluster the registry does not have


@output.handle_errors
def check(
    stack: Annotated[Optional[str], typer.Argument(help="Stack file: check its quotas too.", metavar="[STACK]")] = None,
    provider: Providers = None,
):
    from gpufleet import catalog, spec
    from gpufleet.errors import QuotaError
    from gpufleet.lifecycle import inventory, preflight
    from gpufleet.lifecycle.registry import Registry
    from gpufleet.providers import CLOUDS

    providers = _providers(provider)
    lines: list = []
    if stack is None:
        clouds = inventory.open_clouds(providers, required=bool(providers), regions={})
    else:
        cat = catalog.load(STATE.config)
        st = spec.load(stack, cat)
        used = sorted({p.provider for p in st.pools if p.provider in CLOUDS})
        used = [p for p in used if not providers or p in providers]
        regions = {p.provider: [p.region] for p in st.pools if p.provider in used}
        clouds = inventory.open_clouds(used, required=True, regions=regions) if used else inventory.Clouds()
        with output.steps("Checking quotas"):
            lines, _ = preflight.check([n for n in preflight.needs(st, cat, Registry().get(st.name))
                                        if n.provider in used], clouds)
    short = None
    try:
        preflight.refuse_if_short(lines)
    except QuotaError as e:
        short = e
    if STATE.json:  # one document: the report, and the error's fields when a quota is short
        output.emit_json({"identity": clouds.identity, "skipped": clouds.skipped,
                          "quotas": [x.to_dict() for x in lines], "ok": short is None,
                          **(short.to_dict() if short else {})})
        if short:
            raise typer.Exit(short.exit_code)
        return
    else:
        if not clouds.identity and not clouds.skipped:
            output.console().print("The stack has no cloud pools: no credentials or quotas to check.")
            return
        rows = [[p, who.get("principal", "-"), who.get("account", "-"), who.get("source", "-")]
                for p, who in clouds.identity.items()]
        rows += [[p, f"not checked: {why}", "-", "-"] for p, why in clouds.skipped.items()]
        output.table("Credentials", ["cloud", "who", "account / project / subscription", "from"], rows)
        if lines:
            qrows = [[x.provider, x.region, x.quota, x.unit, f"{x.needed:g}", _num(x.limit), _num(x.used),
                      _num(x.available), {True: "ok", False: "SHORT", None: "unknown"}[x.ok], ", ".join(x.pools),
                      x.note] for x in lines]
            output.table("Quotas", ["cloud", "region", "quota", "unit", "needed", "limit", "used", "available", "",
                                    "pools", "note"], qrows,
                         styles=["red" if x.ok is False else ("yellow" if x.ok is None else None) for x in lines])
    if short:
        raise short


def _num(v) -> str:
    return "-" if v is None else f"{v:g}"


# --- shared renderers (also used by `down`) ---------------------------------------------------

def render_findings(title: str, findings) -> None:
    now = dt.datetime.now(dt.timezone.utc)
    rows = [[f.resource.where, f.resource.kind, f.resource.id, f.resource.cluster, f.reason, f.detail,
             _age(now, f.resource.created_at),
             output.money(f.resource.usd_per_hour) if f.resource.usd_per_hour is not None else "-"] for f in findings]
    output.table(title, ["where", "kind", "id", "cluster", "why", "detail", "age", "$/h"], rows, justify={"$/h": "right"})


def render_outcomes(title: str, outcomes) -> None:
    rows = [[o.resource.where, o.resource.kind, o.resource.id, o.resource.cluster, o.status, o.message]
            for o in outcomes]
    output.table(title, ["where", "kind", "id", "cluster", "result", "message"], rows,
                 styles=[None if o.ok else "red" for o in outcomes])


def render_resources(title: str, resources: list[dict]) -> None:
    rows = [[f"{r['provider']}/{r['zone'] or r['region']}", r["kind"], r["id"], r.get("state") or "-",
             r.get("status") or "-", r.get("message") or ""] for r in resources]
    output.table(title, ["where", "kind", "id", "state", "deletion", "why"], rows, styles=["red"] * len(rows))

"""`gpufleet plan STACK`: every resource `up` would create, and what it costs, offline."""

from __future__ import annotations

import re

from gpufleet.cli import options, output
from gpufleet.cli.output import STATE

HELP = ("Show every resource `up` would create for a stack and its cost per hour. Runs the same Pulumi "
        "program as `up` under Pulumi's mock runtime: no credentials, no Pulumi CLI.")


@output.handle_errors
def plan(
    stack: options.StackFile,
    cluster: options.Cluster = None,
):
    from gpufleet import catalog, stacks
    from gpufleet.engine import plan as planner

    cat = catalog.load(STATE.config)
    st = stacks.load(stack, cat)
    cl = planner.cluster_for(st, cluster)
    with output.progress("Rendering the Pulumi program under mocks", total=None) as advance:
        result = planner.plan(st, cat, cluster=cl, progress=advance, attempts=True)
    if any(p.image for p in result.pools):  # is each golden image its pool's? (the tree `up` publishes)
        from gpufleet import nodes

        _, tree = nodes.state_tree(st, cat)
        for p in (p for p in result.pools if p.image):
            p.image["current"] = p.image["tree"] == tree
            p.image["current_tree"] = tree
    checks = _budgets(st, result, cl.name)
    if STATE.json:
        output.emit_json({**result.to_dict(), "budgets": [c.to_dict() for c in checks]})
        return
    render(result)
    render_budgets(checks)


def _budgets(stack, result, cluster: str) -> list:
    """Each budget the cluster would fall under, against what it would add (the caller as its creator,
    as this machine knows them; `up` asks the clouds)."""
    from gpufleet.cli.budget import left_out
    from gpufleet.fleet import budgets, team
    from gpufleet.state import caller

    return budgets.check(cluster, stack, result.spend, [caller.local()], team.registry().list(),
                         budgets.configured(STATE.config, on_bad=left_out), consent=True)


def render_budgets(checks: list) -> None:
    if not checks:
        return
    rows = [[c.standing.budget.name, output.money(c.standing.budget.usd_per_month), output.money(c.standing.spent),
             output.money(c.standing.left), output.money(c.projected),
             _verdict(c)] for c in checks]
    output.table("Budgets this month (spent: estimated from the registry)",
                 ["budget", "per month", "spent", "left", "this cluster", "verdict"], rows,
                 justify={k: "right" for k in ("per month", "spent", "left", "this cluster")}, wraps=("verdict",),
                 styles=["red" if c.exceeded else None for c in checks])


def _verdict(check) -> str:
    if check.unpriced:  # never taken for $0
        return f"NOT PRICED ({'; '.join(check.unpriced)}): `up` refuses it (--over-budget consents)"
    return "EXCEEDS: `up` refuses it (--over-budget consents)" if check.exceeded else "fits"


def render(result) -> None:
    c = output.console()
    c.print(f"[bold]Plan[/bold] for stack [bold]{result.stack}[/bold] as cluster [bold]{result.cluster}[/bold]; "
            f"every resource tagged gpufleet:* and expiring at {result.expires_at}")
    # a pool is a few resources whatever its nodes (one fleet request): a row each
    rows = [[r.parent or "", short_type(r.type), r.name, r.summary()]
            for r in sorted(result.cloud_resources, key=lambda r: (r.parent or "", r.type, r.name))]
    if rows:
        # narrow terminals lose the settings first (their longest words, ids, need ~70 columns), then the
        # component (the name says it too: Pulumi names children after their parent), then the type
        output.table(f"{len(result.cloud_resources)} resources to create", ["component", "type", "name", "key settings"],
                     rows, optional=("type", "component", "key settings"), wraps=("key settings",))
    if result.rack_hosts:
        c.print(f"{len(result.rack_hosts)} rack host(s) in the Pulumi stack (verified and fact-gathered over SSH at "
                "`up`, drained at `down`; nothing is created for them)")
    money_rows = []
    for p in result.pools:
        money_rows.append([p.pool, p.provider, p.where, p.machine, p.nodes, p.gpus,
                           output.money(p.usd_per_node_hour) if p.usd_per_node_hour is not None else "-",
                           output.money(p.usd_per_hour) if p.usd_per_hour is not None else "-", p.note])
    output.table("Cost per pool (compute, list prices from the catalog)",
                 ["pool", "provider", "region/site", "machine", "nodes", "GPUs", "$/node-h", "$/h", "note"], money_rows,
                 justify={"nodes": "right", "GPUs": "right", "$/node-h": "right", "$/h": "right"},
                 optional=("GPUs", "provider", "$/node-h"), wraps=("note",))
    render_images(result)
    for p in result.pools:
        if p.failover:
            render_candidates(p.pool, p.failover)
    for w in result.warnings:
        c.print(f"[bold red]warning:[/bold red] {w}")
    render_spend(result.spend)


def stack_bill(stack_file: str, cat):
    """The whole stack's predicted bill as `plan` places it (`compare --stack` and `report --stack` show it
    under their offers); None, and said, where the Pulumi SDK that renders its program is not installed."""
    from gpufleet import stacks
    from gpufleet.engine import plan as planner
    from gpufleet.errors import SdkMissing

    st = stacks.load(stack_file, cat)
    try:
        with output.steps("Pricing every line of the stack's bill (its program under Pulumi's mocks)"):
            return planner.plan(st, cat).spend
    except SdkMissing as e:
        output.warn(f"the stack's bill beyond its instances is not priced: {e.message}")
        return None


def render_spend(spend) -> None:
    """Every line of the predicted bill, then the total per hour and for the stack's TTL."""
    c = output.console()
    ttl = output.duration(spend.ttl_hours)
    rows = [[x.line, x.pool, f"{x.provider}/{x.region}", x.what,
             output.money(x.usd_per_hour) if x.priced and x.usd_per_hour else "-" if x.priced else "?",
             output.money(x.usd_per_hour * spend.ttl_hours + x.usd_once) if x.priced else "?",
             "; ".join(filter(None, [x.note, f"{_short(x.source)} ({x.as_of})" if x.as_of else _short(x.source)]))]
            for x in spend.lines]
    output.table(f"Every line of the bill (list prices; traffic over the TTL of {ttl})",
                 ["line", "pool", "where", "what", "$/h", f"$ for {ttl}", "rate from"], rows,
                 justify={"$/h": "right", f"$ for {ttl}": "right"}, optional=("rate from", "pool", "where"),
                 wraps=("what", "rate from"))
    for note in spend.notes:
        c.print(f"[yellow]note:[/yellow] {note}")
    missing = [x.what for x in spend.unpriced]
    c.print(f"[bold]Total: {output.money(spend.usd_per_hour)}/h, {output.money(spend.usd_for_ttl)} for the TTL of "
            f"{ttl}[/bold]" + (f" (traffic {output.money(spend.usd_once)})" if spend.usd_once else "")
            + (f"; not priced: {', '.join(missing)}" if missing else ""))


def _short(source: str, most: int = 48) -> str:
    """A source as a table cell: up to its first clause (`--json` has it whole)."""
    head = re.split(r"[,;(]|:\s", source, maxsplit=1)[0].strip()
    return head if len(head) <= most else head[:most - 1] + "…"


def render_images(result) -> None:
    """Which golden image each pool boots, and whether it holds the state tree `up` publishes now
    (a node from a stale one applies every formula at boot, and says so)."""
    booting = [p for p in result.pools if p.image]
    if not booting:
        return
    for p in booting:
        i = p.image
        fresh = "current" if i["current"] else \
            f"stale: built from state tree {i['tree'][:12]}, now {i['current_tree'][:12]}; nodes apply every formula"
        output.console().print(f"pool {p.pool} boots golden image {i['name']} ({i['id']}, built {i['built_at']}): {fresh}")


def render_candidates(pool: str, failover: dict) -> None:
    """The places `up` tries for a pool, in order, and what was left out before any attempt."""
    rows = [[i, c["provider"], _where(c), c["instance_type"],
             "reserved" if c["reservation"] else "spot" if c["spot"] else "on-demand",
             output.money(c["price_per_node_hour"]) if c["price_per_node_hour"] is not None else "-",
             output.money(c["price_per_hour"]) if c["price_per_hour"] is not None else "-",
             f"{c['reservation']}: {c['billing']}" if c["reservation"] else c["why"]]
            for i, c in enumerate(failover["candidates"], 1)]
    dropped = failover["dropped"]
    caption = None
    if dropped:
        reasons: dict[str, int] = {}
        for d in dropped:
            reasons[d["why"]] = reasons.get(d["why"], 0) + 1
        common = max(reasons, key=reasons.get)
        caption = (f"{len(dropped)} left out before any attempt, most for: {common} (plan --json lists each); "
                   "`up` also skips a region whose quota is short")
    output.table(f"Failover for pool {pool}: {len(rows)} places, tried in this order until one holds the whole pool",
                 ["#", "provider", "zone/region", "instance", "market", "$/node-h", "$/h", "why"], rows, caption=caption,
                 justify={"#": "right", "$/node-h": "right", "$/h": "right"}, optional=("why", "$/node-h", "market"),
                 wraps=("why",))


def _where(c: dict) -> str:
    z = c["zone"]
    return c["region"] if z is None else z if z.startswith(c["region"]) else f"{c['region']}/{z}"


def short_type(token: str) -> str:
    """A Pulumi type token as `pulumi preview` prints it: aws:ec2/instance:Instance -> aws:ec2:Instance
    (the module's file part is left out where it only repeats the type's name)."""
    parts = token.split(":")
    if len(parts) != 3:
        return token
    package, module, name = parts
    if module.split("/")[-1].lower() == name.lower():
        module = module.split("/")[0]
    return f"{package}:{module}:{name}"

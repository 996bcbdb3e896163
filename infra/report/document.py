"""What a report says, as a list of blocks (headings, paragraphs, tables, charts) that the HTML
and Markdown renderers each lay out their way: the words and numbers are written once, here."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet.report.charts import Chart
from gpufleet.report.clusters import ClustersData
from gpufleet.report.model import Data, Entry


@dataclass
class Heading:
    level: int
    text: str


@dataclass
class Para:
    text: str
    kind: str = ""  # "" | lead | warning | note


@dataclass
class Items:
    items: list[str]


@dataclass
class Table:
    columns: list[str]
    rows: list[list[str]]
    numeric: set[str] = field(default_factory=set)  # right-aligned columns
    row_kinds: list[str] = field(default_factory=list)  # per row: "" | pick | infeasible | alert
    row_ids: list[str] = field(default_factory=list)  # data-offer of each row
    caption: str = ""
    fold_after: int = 0  # HTML: rows past this many are folded away under a summary (0: none)


@dataclass
class Figure:
    chart: Chart
    caption: str


Block = Heading | Para | Items | Table | Figure
PRICED_ROWS = 12  # rows of the list vs negotiated table
MARKET_ROWS = 15  # rows of the spot vs on-demand table shown before the rest are folded (HTML)
RANKED_ROWS = 40  # rows of the ranked table shown before the rest are folded (HTML)


def money(v: float) -> str:
    return f"${v:,.0f}" if abs(v) >= 1000 else f"${v:,.2f}"


def hours(h: float) -> str:
    if h < 1:
        return f"{h * 60:.0f} min"
    return f"{h:,.1f} h" if h < 48 else f"{h / 24:,.1f} days"


def rate(v: float, unit: str) -> str:
    return f"{v:,.0f} {unit}" if v >= 10 else f"{v:,.2f} {unit}"


def pct(v: float) -> str:
    return f"{v:.0%}"


def _offer_cells(e: Entry) -> list[str]:
    r = e.row
    note = ", ".join(([r.market] if r.market == "spot" else []) + e.tags) if r.feasible else f"cannot run: {r.reason}"
    return [str(e.rank), f"{r.provider}/{r.region}", r.instance, f"{r.gpus_per_node}x {r.gpu}", str(r.nodes),
            money(r.usd_per_hour), e.basis, rate(r.throughput, r.unit) if r.feasible else "-",
            f"{hours(r.time_to_train_h)} ±{r.error_band:.0%}" if r.feasible else "-",
            money(r.cost_to_train_usd) if r.feasible else "-", r.bottleneck if r.feasible else "-", note]


def report_blocks(data: Data, charts: dict[str, Chart]) -> list[Block]:
    out: list[Block] = [Heading(1, f"Where to train {data.workload}: cost and time of every offer")]
    # the question
    out.append(Heading(2, "The question"))
    ask = [f"Workload: {data.workload}, {data.sample_label}",
           *(f"Constraint: {c}" for c in data.constraints),
           f"Offers compared: {len(data.entries)} ({len(data.feasible)} can run it)",
           f"Catalog prices as of {data.catalog_as_of} ({data.catalog_age_days} days old"
           + (f", past the {data.max_age_days}-day limit: refresh with `gpufleet catalog refresh`)" if data.stale else ")"),
           *(f"Prices of {a.provider}: {', '.join(a.sources)}" for a in data.ages),
           f"Generated {data.generated} by gpufleet report"]
    if data.stack:
        ask.insert(1, f"Stack: {data.stack}")
    out.append(Items(ask))
    # the answer
    out.append(Heading(2, "Recommendation"))
    out.append(Para(data.recommendation, "lead"))
    for pool, why in data.left_out.items():
        out.append(Para(f"Pool {pool} is left out of the comparison: {why}.", "warning"))
    if "cost-time" in charts:
        out.append(Figure(charts["cost-time"], "Each point is one offer (hover for its name); the line is the Pareto "
                          "frontier: no offer is both cheaper and faster than one on it. Ringed: the three picks."))
    if data.picks:
        rows, kinds = [], []
        for name, e in data.picks.items():
            rows.append([name, e.label, money(e.row.usd_per_hour), hours(e.time_to_train_h),
                         money(e.cost_to_train_usd), e.basis])
            kinds.append("pick")
        out.append(Table(["pick", "offer", "$/h", "time to train", "cost to train", "price"], rows,
                         {"$/h", "time to train", "cost to train"}, kinds))
    # scaling
    if "scaling" in charts:
        out.append(Heading(2, "Scaling: what more nodes buy"))
        out.append(Figure(charts["scaling"], "The leading offers at 1 to 16 nodes: throughput, scaling efficiency "
                          "(throughput per GPU against one node's) and cost to train; each point's marker is its "
                          "bottleneck."))
        rows = []
        for s in data.scaling:
            base = next((p for p in s.points if p.feasible), None)
            for p in s.points:
                rows.append([s.offer if p is s.points[0] else "", str(p.nodes), str(p.gpus),
                             f"{p.throughput:,.0f}" if p.feasible else "-",
                             f"{p.throughput / base.throughput:.2f}x" if p.feasible and base else "-",
                             pct(p.efficiency) if p.feasible else "-",
                             hours(p.time_to_train_h) if p.feasible else "-",
                             money(p.cost_to_train_usd) if p.feasible else "-",
                             p.bottleneck if p.feasible else f"cannot run: {p.reason}"])
            rows += [[s.offer, "", "", "", "", "", "", "", skip] for skip in s.skipped]
        out.append(Table(["offer", "nodes", "GPUs", "throughput", "speed-up", "efficiency", "time", "cost",
                          "bottleneck"], rows, {"nodes", "GPUs", "throughput", "speed-up", "efficiency", "time", "cost"}))
    # the ranked table
    out.append(Heading(2, "Every offer, ranked by cost to train"))
    out.append(Table(["rank", "where", "instance", "GPUs", "nodes", "$/h", "price", "throughput",
                      "time to train", "cost to train", "bottleneck", "note"],
                     [_offer_cells(e) for e in data.entries],
                     {"rank", "nodes", "$/h", "throughput", "time to train", "cost to train"},
                     ["pick" if set(e.tags) & {"cheapest", "fastest", "trade-off"} else
                      "" if e.row.feasible else "infeasible" for e in data.entries],
                     [e.id for e in data.entries],
                     caption="; ".join(data.assumptions[1:]), fold_after=RANKED_ROWS))
    if data.spend:
        out += spend_blocks(data.spend)
    # markets and discounts
    out.append(Heading(2, "Spot vs on demand, and negotiated prices"))
    if data.markets:
        out.append(Table(["offer", "nodes", "on-demand $/h", "on-demand cost", "spot $/h", "spot cost", "spot saves"],
                         [[m.offer, str(m.nodes), money(m.ondemand_usd_per_hour), money(m.ondemand_cost),
                           money(m.spot_usd_per_hour), money(m.spot_cost), pct(m.saving)] for m in data.markets],
                         {"nodes", "on-demand $/h", "on-demand cost", "spot $/h", "spot cost", "spot saves"},
                         caption="Spot capacity can be reclaimed at short notice: a run on it needs checkpoints.",
                         fold_after=MARKET_ROWS))
    else:
        out.append(Para(f"Spot: {data.market_note}.", "note"))
    priced = [e for e in data.entries if e.discount or "quote" in e.basis]
    if priced:
        shown = priced[:PRICED_ROWS]
        out.append(Table(["offer", "list $/h", "discount", "your $/h", "cost to train", "price"],
                         [[e.label, money(e.list_usd_per_hour), pct(e.discount), money(e.row.usd_per_hour),
                           money(e.cost_to_train_usd), e.basis] for e in shown],
                         {"list $/h", "discount", "your $/h", "cost to train"},
                         caption=f"The {len(shown)} cheapest of {len(priced)} offers with a negotiated discount or "
                                 "your own quote; the ranked table has them all." if len(priced) > len(shown) else ""))
    else:
        out.append(Para("Negotiated discounts: none in the config, so every cloud price above is a list price "
                        "(`discounts:` in the config takes a fraction off list per provider).", "note"))
    # own vs rent
    out.append(Heading(2, "Own vs rent"))
    if not data.ownership:
        out.append(Para("No rack in the config (`sites:`) or the stack (`site_costs:`): add one to see what owning "
                        "would cost and the utilisation at which it beats renting.", "note"))
    for i, o in enumerate(data.ownership):
        s = o.site
        out.append(Heading(3, f"{s.name}: {s.nodes} x {s.gpus_per_node} {s.gpu}"))
        out.append(Para(f"At your utilisation of {pct(s.utilization)}, a GPU-hour on {s.name} costs "
                        f"{money(o.usd_per_gpu_hour)} (capex over {s.depreciation_years:g} years, power at "
                        f"{s.power_kw_per_node:g} kW x PUE {s.pue:g} x ${s.usd_per_kwh:g}/kWh, operations; idle hours "
                        "charged to the useful ones)."
                        + (f" This run on {o.nodes} node(s) takes {hours(o.time_to_train_h)} and costs "
                           f"{money(o.cost_to_train_usd)}; the rack costs {money(o.owned_usd_per_month)} a month, "
                           "used or not." if o.feasible else "")))
        if o.note:
            out.append(Para(o.note + ".", "note"))
        if o.rentals:
            out.append(Table(["rent instead", "cloud $/GPU-h", "time to train", "cost to train", "owning wins above"],
                             [[r.offer, money(r.usd_per_gpu_hour), hours(r.time_to_train_h), money(r.cost_to_train_usd),
                               pct(r.break_even) + " utilisation" if r.break_even <= 1 else
                               f"never (would need {pct(r.break_even)})"] for r in o.rentals],
                             {"cloud $/GPU-h", "time to train", "cost to train", "owning wins above"},
                             ["alert" if r.break_even > s.utilization else "" for r in o.rentals],
                             [f"{s.name}:{r.offer}" for r in o.rentals],
                             caption=f"Owning beats renting once the rack is busier than the break-even utilisation "
                                     f"(highlighted: above your {pct(s.utilization)})."))
        chart = charts.get(f"own-{i}")
        if chart:
            out.append(Figure(chart, "What the work the rack does in a month would cost: owning (flat) against "
                              "renting each offer for the same work; they cross at the break-even utilisation."))
    # how sure
    out.append(Heading(2, "How sure these numbers are"))
    out.append(Items([
        "Times and costs are predictions of gpufleet's performance model; its typical error for predictions like "
        "these, measured out of fold (each published source predicted by a fit without it, `gpufleet calibrate`), is "
        + ", ".join(f"±{v:.0%} on {k}" for k, v in data.error_bands.items()) + ".",
        "Offers within that error of the cheapest are marked within-error in the table: a tie, not a loss.",
        *(f"{a.provider}: your site costs ({', '.join(a.sources)}), not a catalog price" if a.owned else
          f"{a.provider}: prices as of {a.as_of} ({a.age_days} days old)" for a in data.ages),
        (f"Your own quotes (prices you pay, no discount applied): {', '.join(data.quotes[:10])}; every other cloud "
         "price is a list price" + (" less your negotiated discount." if any(e.discount for e in data.entries) else ".")
         if data.quotes else
         "No price here is your own quote: the cloud prices are list prices"
         + (" less your negotiated discount." if any(e.discount for e in data.entries) else ".")),
    ]))
    return out


def spend_blocks(s) -> list[Block]:
    """The stack as planned, every line of its bill (engine.spend.Spend): what the offers' $/h leave out."""
    ttl = hours(s.ttl_hours)
    rows = [[x.line, x.pool, f"{x.provider}/{x.region}", x.what,
             (money(x.usd_per_hour) if x.usd_per_hour else "-") if x.priced else "?",
             money(x.usd_per_hour * s.ttl_hours + x.usd_once) if x.priced else "?",
             "; ".join(filter(None, [x.note, f"{x.source} ({x.as_of})" if x.as_of else x.source]))] for x in s.lines]
    missing = [x.what for x in s.unpriced]
    out: list[Block] = [Heading(2, "Every line of the bill, as the stack is planned"),
                        Table(["line", "pool", "where", "what", "$/h", f"$ for {ttl}", "rate from"], rows,
                              {"$/h", f"$ for {ttl}"},
                              caption=f"List prices; traffic over the stack's TTL of {ttl}. Total {money(s.usd_per_hour)}/h, "
                                      f"{money(s.usd_for_ttl)} for the TTL"
                                      + (f"; not priced: {', '.join(missing)}" if missing else "") + ".")]
    out += [Para(n, "note") for n in s.notes]
    return out


def cluster_blocks(data: ClustersData, charts: dict[str, Chart]) -> list[Block]:
    out: list[Block] = [Heading(1, "Running clusters: cost so far")]
    out.append(Items([f"As of {data.now:%Y-%m-%d %H:%M} UTC, from the registry ({data.registry})"
                      + (f" and the clouds' tags ({', '.join(data.checked)})" if data.checked else
                         " only (no cloud asked)"),
                      f"{len(data.clusters)} cluster(s), {money(data.total)} so far",
                      *(f"{p}: {money(v)}" for p, v in data.by_provider.items())]))
    if data.past_ttl:
        out.append(Para(f"{len(data.past_ttl)} cluster(s) past their TTL, still costing money: "
                        f"{', '.join(c.name for c in data.past_ttl)} (`gpufleet reap` removes them).", "warning"))
    for where, why in data.unread.items():
        out.append(Para(f"{where} could not be read ({why}): its clusters may cost more than shown.", "warning"))
    if "clusters" in charts:
        out.append(Figure(charts["clusters"], "Cost accrues at each cluster's $/h from its start; red: past its TTL."))
    if not data.clusters:
        out.append(Para("No clusters: nothing is running, nothing costs money.", "lead"))
        return out
    out.append(Table(["cluster", "state", "where", "$/h", "cost so far", "by provider", "expires", "notes"],
                     [[c.name, c.state, ", ".join(c.where) or "-", money(c.usd_per_hour), money(c.cost_so_far),
                       ", ".join(f"{p} {money(v)}" for p, v in c.by_provider.items()) or "-",
                       (f"{c.expires_at:%Y-%m-%d %H:%M}" + (" (past TTL)" if c.past_ttl else "")) if c.expires_at
                       else "-", "; ".join(c.notes)] for c in data.clusters],
                     {"$/h", "cost so far"}, ["alert" if c.past_ttl else "" for c in data.clusters],
                     [c.name for c in data.clusters]))
    if data.billed is not None:
        out += billed_blocks(data.billed)
    return out


def billed_blocks(b) -> list[Block]:
    """What the clouds billed against what `up` predicted, per cluster and line (fleet.cost.CostReport)."""
    rows, classes = [], []
    for r in b.rows:
        for x in r.lines:
            d = x.difference
            rows.append([r.cluster, x.line, "-" if x.predicted is None else money(x.predicted), money(x.billed),
                         "-" if d is None else ("+" if d >= 0 else "-") + money(abs(d))])
            classes.append("")
        rows.append([r.cluster, "total", "-" if r.predicted is None else money(r.predicted), money(r.billed),
                     "-" if r.drift is None else f"{r.drift:+.0%}"])
        classes.append("alert" if r in b.drifted else "")
    through = sorted({r.through for r in b.rows if r.through})
    out: list[Block] = [Heading(2, "Billed against predicted"),
                        Para(f"From {b.since:%Y-%m-%d} through {through[-1] if through else '-'}, as the clouds' "
                             f"bills say ({', '.join(b.read)}); the prediction is `up`'s for the same days. Billing "
                             "lags hours to a day behind.")]
    for r in b.drifted:
        out.append(Para(f"{r.cluster} was billed {r.drift:+.0%} against its prediction; most off: "
                        + ", ".join(f"{x.line} ({money(x.billed)} billed, {money(x.predicted)} predicted)"
                                    for x in r.widest()) + ".", "warning"))
    out.append(Table(["cluster", "line", "predicted", "billed", "difference"], rows,
                     {"predicted", "billed", "difference"}, classes, [f"{r[0]}-{r[1]}" for r in rows]))
    return out

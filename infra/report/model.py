"""The report's data: one comparison (``gpufleet.compare.compare``) and the few more it needs
(the leading offers at more node counts, the other market, each rack's own run, cloud offers
to set a rack against), turned into what a budget owner reads. No rendering here."""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from gpufleet import compare as cmp
from gpufleet.catalog import Catalog, age_in_days
from gpufleet.catalog.onprem import Site
from gpufleet.limits import MAX_POOL_NODES
from gpufleet.providers import CLOUDS
from gpufleet.report import frontier, ownership

SCALING_NODES = (1, 2, 4, 8, 16)  # node counts of the scaling curves, with those asked for
LEADING = 4  # offers drawn as scaling curves
RENTALS = 3  # cloud offers each rack is set against


def offer_of(row: cmp.Row) -> tuple[str, str, str, str]:
    return (row.provider, row.region, row.instance, row.market)


def kind_of(row: cmp.Row) -> tuple[str, str, str]:
    """The machine, wherever it is offered: the same instance type in two regions is one kind."""
    return (row.provider, row.instance, row.market)


def label(row: cmp.Row) -> str:
    """``aws/us-east-1 p5.48xlarge x2`` (and ``spot`` for a spot price)."""
    return (f"{row.provider}/{row.region} {row.instance} x{row.nodes}"
            + (f" {row.market}" if row.market == "spot" else ""))


@dataclass
class Entry:
    """One row of the comparison with what the report adds: its rank, an id for the chart, and
    where its price comes from (a list price, a discount off it, the user's own quote, a rack)."""

    rank: int
    id: str
    row: cmp.Row
    list_usd_per_hour: float  # before any negotiated discount
    discount: float
    basis: str  # list price | list less 12% | your quote | owned (site costs)
    sources: list[str]
    tags: list[str] = field(default_factory=list)  # the picks it is, compare's tags

    @property
    def label(self) -> str:
        return label(self.row)

    @property
    def cost_to_train_usd(self) -> float:
        return self.row.cost_to_train_usd

    @property
    def time_to_train_h(self) -> float:
        return self.row.time_to_train_h


@dataclass
class ScalePoint:
    nodes: int
    gpus: int
    throughput: float
    efficiency: float
    time_to_train_h: float
    cost_to_train_usd: float
    bottleneck: str
    feasible: bool
    reason: str


@dataclass
class Series:
    """One offer at several node counts."""

    offer: str  # provider/region instance [spot]
    points: list[ScalePoint]
    skipped: list[str] = field(default_factory=list)  # node counts a rack does not have


@dataclass
class MarketPair:
    """The same offer on demand and on spot."""

    offer: str
    nodes: int
    ondemand_usd_per_hour: float
    ondemand_cost: float
    spot_usd_per_hour: float
    spot_cost: float
    quote: bool = False  # one of the two prices is the user's own quote

    @property
    def saving(self) -> float:
        return 1 - self.spot_cost / self.ondemand_cost


@dataclass
class Rental:
    """A cloud offer a rack is set against, and the utilisation at which owning beats it."""

    offer: str
    nodes: int
    cost_to_train_usd: float
    time_to_train_h: float
    usd_per_gpu_hour: float
    break_even: float  # utilisation; above 1 owning never beats it


@dataclass
class Ownership:
    site: Site
    usd_per_gpu_hour: float  # at the site's utilisation
    nodes: int = 0  # of the rack's run
    cost_to_train_usd: float = 0.0  # the rack's run at the site's utilisation
    time_to_train_h: float = 0.0
    owned_usd_per_month: float = 0.0
    rentals: list[Rental] = field(default_factory=list)
    note: str = ""  # why there is no run, or where the rentals come from

    @property
    def feasible(self) -> bool:
        return self.cost_to_train_usd > 0


@dataclass
class ProviderAge:
    provider: str
    as_of: str
    age_days: int
    sources: list[str]
    owned: bool = False  # racks priced from the user's site costs, not a catalog


@dataclass
class Data:
    """Everything one report shows, in the order it shows it."""

    workload: str
    sample_label: str
    constraints: list[str]
    assumptions: list[str]
    generated: str
    catalog_as_of: str
    catalog_age_days: int
    stale: bool
    max_age_days: int
    entries: list[Entry]
    frontier: list[Entry]
    picks: dict[str, Entry]
    recommendation: str
    scaling: list[Series]
    markets: list[MarketPair]
    market_note: str
    ownership: list[Ownership]
    ages: list[ProviderAge]
    error_bands: dict[str, float]
    quotes: list[str]  # offers priced (in part) by the user's own quotes
    left_out: dict[str, str]
    stack: str | None = None
    spend: Any = None  # the stack's predicted bill, every line (engine.spend.Spend), when a stack was given

    @property
    def feasible(self) -> list[Entry]:
        return [e for e in self.entries if e.row.feasible]

    def to_dict(self) -> dict:
        """The machine-readable summary (``--json``)."""
        def pick(e: Entry) -> dict:
            r = e.row
            return {"id": e.id, "offer": e.label, "provider": r.provider, "region": r.region, "instance": r.instance,
                    "nodes": r.nodes, "market": r.market, "usd_per_hour": round(r.usd_per_hour, 4),
                    "time_to_train_h": round(r.time_to_train_h, 4), "cost_to_train_usd": round(r.cost_to_train_usd, 2)}

        return {"workload": self.workload, "samples": self.sample_label, "stack": self.stack,
                "catalog_as_of": self.catalog_as_of, "catalog_age_days": self.catalog_age_days,
                "catalog_stale": self.stale, "offers": len(self.entries), "feasible": len(self.feasible),
                "recommendation": self.recommendation, "picks": {k: pick(e) for k, e in self.picks.items()},
                "frontier": [e.id for e in self.frontier],
                "ownership": [{"site": o.site.name, "utilization": o.site.utilization,
                               "usd_per_gpu_hour": round(o.usd_per_gpu_hour, 4), "note": o.note,
                               "break_even": {r.offer: round(r.break_even, 4) for r in o.rentals}}
                              for o in self.ownership],
                "left_out": self.left_out, "spend": self.spend.to_dict() if self.spend else None}


# --- building -----------------------------------------------------------------------------

def build(cat: Catalog, req: cmp.Request, *, report: cmp.Report | None = None, constraints: list[str] | None = None,
          stack: str | None = None, spend=None, today: dt.date | None = None) -> Data:
    """The report for ``req`` on ``cat`` (``report``: the comparison, when the caller has it)."""
    today = today or dt.date.today()
    rep = report or cmp.compare(cat, req, today)
    entries = _entries(rep.rows)
    feasible = [e for e in entries if e.row.feasible]
    chosen = frontier.picks(feasible)
    for e in feasible:
        e.tags = [n for n in frontier.PICKS if chosen.get(n) is e] + e.tags
    front = frontier.frontier(feasible)
    markets, market_note = _markets(cat, req, rep, today)
    return Data(
        workload=rep.workload, sample_label=rep.sample_label, constraints=constraints or [],
        assumptions=rep.assumptions, generated=today.isoformat(), catalog_as_of=rep.catalog_as_of,
        catalog_age_days=rep.catalog_age_days, stale=rep.stale, max_age_days=rep.max_age_days,
        entries=entries, frontier=front, picks=chosen, recommendation=recommendation(rep.workload, chosen),
        scaling=_scaling(cat, req, chosen, feasible, today), markets=markets, market_note=market_note,
        ownership=_ownership(cat, req, feasible, today), ages=_ages(rep.rows, today),
        error_bands=_bands(rep.rows),
        quotes=[e.label for e in entries if "quote" in e.basis] + [f"{m.offer} (spot vs on demand)" for m in markets
                                                                   if m.quote],
        left_out=dict(rep.left_out),
        stack=stack, spend=spend)


def _entries(rows: list[cmp.Row]) -> list[Entry]:
    out, seen = [], set()
    for i, r in enumerate(rows, 1):
        ident = "-".join((r.provider, r.region, r.instance, r.market, f"x{r.nodes}"))
        while ident in seen:  # two stack pools on the same offer
            ident += "-b"
        seen.add(ident)
        parts = r.price_parts
        listed = sum(p["usd_per_hour"] for p in parts) * r.nodes if parts else r.usd_per_hour
        discount = r.discount
        quoted = [p for p in parts if p["quote"]]
        if r.market == "owned":
            basis = "owned (site costs)"
        elif quoted and len(quoted) == len(parts):
            basis = "your quote"
        elif quoted:
            basis = "your quote + " + (f"list less {discount:.0%}" if discount else "list price")
        elif discount:
            basis = f"list less {discount:.0%}"
        else:
            basis = "list price"
        sources = list(dict.fromkeys(p["source"] for p in r.price_parts))
        tags = [t for t in r.tags if t not in ("cheapest", "fastest")]  # the picks are the report's own
        out.append(Entry(i, ident, r, listed, discount, basis, sources, tags))
    return out


def _money(v: float) -> str:
    return f"${v:,.0f}" if v >= 100 else f"${v:,.2f}"


def _hours(h: float) -> str:
    if h < 1:
        return f"{h * 60:.0f} min"
    return f"{h:.1f} h" if h < 48 else f"{h / 24:.1f} days"


def recommendation(workload: str, chosen: dict[str, Entry]) -> str:
    """One sentence: the cheapest, the fastest and the best trade-off."""
    if not chosen:
        return f"No offer matching these constraints can train {workload}."
    c, f, t = chosen["cheapest"], chosen["fastest"], chosen["trade-off"]

    def said(e: Entry) -> str:
        return f"{e.label} ({_money(e.cost_to_train_usd)} in {_hours(e.time_to_train_h)})"

    if c is f:
        return f"For {workload}, {said(c)} is both the cheapest and the fastest offer: choose it."
    if t is c or t is f:
        other = f if t is c else c
        which = "cheapest" if t is c else "fastest"
        return (f"For {workload}, choose {said(t)}, the {which} and the best trade-off; "
                f"the {'fastest' if t is c else 'cheapest'} is {said(other)}.")
    more = t.cost_to_train_usd / c.cost_to_train_usd - 1
    faster = c.time_to_train_h / t.time_to_train_h
    return (f"For {workload}, the best trade-off is {said(t)}: {more:.0%} more than the cheapest, {said(c)}, "
            f"and {faster:.1f}x as fast; the fastest is {said(f)}.")


def _scaling(cat: Catalog, req: cmp.Request, chosen: dict[str, Entry], feasible: list[Entry],
             today: dt.date) -> list[Series]:
    """The leading offers (the picks first, then the cheapest) at every node count of
    ``SCALING_NODES`` and of the request."""
    leading: list[tuple] = []
    kinds: set[tuple] = set()
    for e in [*chosen.values(), *feasible]:  # the picks, then the cheapest of other machines
        if offer_of(e.row) not in leading and kind_of(e.row) not in kinds:
            leading.append(offer_of(e.row))
            kinds.add(kind_of(e.row))
    leading = leading[:LEADING]
    if not leading:
        return []
    counts = sorted({n for n in (*SCALING_NODES, *req.nodes) if n <= MAX_POOL_NODES}
                    | {e.row.nodes for e in feasible if offer_of(e.row) in leading})
    storage = {(p, r, i): st for p, r, i, _, _, st in (req.only or [])}
    only = [(p, r, i, n, m == "spot", storage.get((p, r, i))) for p, r, i, m in leading for n in counts]
    rep = cmp.compare(cat, dataclasses.replace(req, only=only, min_gpus=None, max_price=None), today)
    out = []
    for key in leading:
        rows = sorted((r for r in rep.rows if offer_of(r) == key), key=lambda r: r.nodes)
        p, r, i, m = key
        name = f"{p}/{r} {i}" + (" spot" if m == "spot" else "")
        skipped = [f"{s['nodes']} nodes: {s['reason']}" for s in rep.skipped
                   if s["offer"] == "/".join(key)]
        out.append(Series(name, [ScalePoint(x.nodes, x.total_gpus, x.throughput, x.scaling_efficiency,
                                            x.time_to_train_h, x.cost_to_train_usd, x.bottleneck, x.feasible,
                                            x.reason) for x in rows], skipped))
    return out


def _markets(cat: Catalog, req: cmp.Request, rep: cmp.Report, today: dt.date) -> tuple[list[MarketPair], str]:
    """Each cloud row beside the same offer in the other market (on demand vs spot)."""
    other_only = None if req.only is None else [(p, r, i, n, not s, st) for p, r, i, n, s, st in req.only if p in CLOUDS]
    other = [] if other_only == [] else cmp.compare(cat, dataclasses.replace(req, spot=not req.spot, only=other_only),
                                                    today).rows
    index = {(r.provider, r.region, r.instance, r.nodes): r for r in other if r.market != "owned"}
    pairs = []
    for r in rep.rows:
        o = index.get((r.provider, r.region, r.instance, r.nodes))
        if r.market == "owned" or o is None or not (r.feasible and o.feasible):
            continue
        od, sp = (r, o) if r.market == "ondemand" else (o, r)
        quoted = any(p["quote"] for x in (od, sp) for p in x.price_parts)
        pairs.append(MarketPair(f"{r.provider}/{r.region} {r.instance}", r.nodes, od.usd_per_hour,
                                od.cost_to_train_usd, sp.usd_per_hour, sp.cost_to_train_usd, quoted))
    note = "" if pairs else ("no offer here has both an on-demand and a spot price in the catalog (its spot prices "
                             "are a snapshot per region, not every offer has one): `gpufleet catalog refresh` fetches "
                             "current ones, or add quotes under `prices:` (market: spot) in the config")
    return pairs, note


def _ownership(cat: Catalog, req: cmp.Request, feasible: list[Entry], today: dt.date) -> list[Ownership]:
    """Each rack of the config or the stack: its cost per GPU-hour, its own run of the workload,
    and the utilisation at which it beats each of the leading cloud offers."""
    sites = list({s.name: s for s in cat.sites}.values())  # a stack's site_costs override the config's
    if not sites:
        return []
    picked = [e.row for e in feasible if set(e.tags) & set(frontier.PICKS)]
    cloud = [r for r in [*picked, *(e.row for e in feasible)] if r.market != "owned"]
    note = ""
    if not cloud:  # a stack of racks only: set them against the catalog's cloud offers for the workload
        wider = dataclasses.replace(req, only=None, providers=[], regions=[], gpus=[], min_gpus=None, max_price=None,
                                    spot=False)
        cloud = [r for r in cmp.compare(cat, wider, today).rows if r.feasible and r.market != "owned"]
        note = "no cloud offer among those compared: set against the catalog's cheapest cloud offers for this workload"
    rentals, seen = [], set()
    for r in cloud:  # the picks, then the cheapest of other machines
        if kind_of(r) not in seen:
            seen.add(kind_of(r))
            rentals.append(r)
    rentals = sorted(rentals[:RENTALS], key=lambda r: r.cost_to_train_usd)
    stack_nodes = {r: n for p, r, _, n, _, _ in (req.only or []) if p not in CLOUDS}
    out = []
    for site in sites:
        own = Ownership(site, ownership.usd_per_gpu_hour(site), note=note)
        counts = [stack_nodes[site.name]] if site.name in stack_nodes else \
            ([n for n in req.nodes if n <= site.nodes] or [site.nodes])
        runs = cmp.compare(cat, dataclasses.replace(req, only=[("baremetal", site.name, f"{site.name}-node", n, False,
                                                                 None) for n in counts],
                                                     min_gpus=None, max_price=None), today).rows
        ok = [r for r in runs if r.feasible]
        if not ok:
            why = runs[0].reason if runs else "no run of the rack could be priced"
            own.note = f"the rack cannot run this workload ({why})"
            out.append(own)
            continue
        run = ok[0]  # the cheapest
        own.nodes, own.cost_to_train_usd, own.time_to_train_h = run.nodes, run.cost_to_train_usd, run.time_to_train_h
        own.owned_usd_per_month = ownership.owned_usd_per_month(site, run.nodes)
        for r in rentals:
            own.rentals.append(Rental(label(r), r.nodes, r.cost_to_train_usd, r.time_to_train_h,
                                      r.usd_per_hour / r.total_gpus,
                                      ownership.break_even_utilization(run.cost_to_train_usd, site.utilization,
                                                                       r.cost_to_train_usd)))
        out.append(own)
    return out


def _ages(rows: list[cmp.Row], today: dt.date) -> list[ProviderAge]:
    by: dict[str, list[cmp.Row]] = {}
    for r in rows:
        by.setdefault(r.provider, []).append(r)
    out = []
    for p, rs in sorted(by.items()):
        dates = [x["as_of"] for r in rs for x in r.price_parts if x.get("as_of")]
        sources = list(dict.fromkeys(x["source"] for r in rs for x in r.price_parts))
        as_of = min(dates) if dates else today.isoformat()
        out.append(ProviderAge(p, as_of, age_in_days(as_of, today), sources, all(r.market == "owned" for r in rs)))
    return out


def _bands(rows: list[cmp.Row]) -> dict[str, float]:
    """The model's typical error for the predictions shown: one GPU, several."""
    out = {}
    for r in rows:
        out["one GPU" if r.total_gpus == 1 else "several GPUs"] = r.error_band
    return dict(sorted(out.items()))

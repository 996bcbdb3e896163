"""Every line a cluster is billed for, predicted from its plan: the instances, every reservation its
pools hold (billed whether their nodes run in it or not: a pool in one adds nothing beyond it), and
what each cloud's ``spend`` reads off the program's resources (root volumes,
shared file systems, NAT gateways, public addresses), priced from the catalog's rates
(``catalog.rates``, each with its source and date), plus the traffic the stack says it moves
(``data:``: the dataset read into each region, checkpoints copied to other regions, results
downloaded; none said, none estimated, and the plan says so).

Recurring lines are per hour; traffic is a total over the stack's TTL (``usd_once``). A line whose
rate the catalog lacks is unpriced (``priced`` False), named, and counts nothing in the totals (a
budget check never takes an unpriced node line for $0: ``unpriced_nodes``). A flex-start pool's
nodes are at the on-demand list rate, an upper bound: Google bills flex-start at Dynamic Workload
Scheduler prices, "Discounted (up to 53%)" (cloud.google.com/ai-hypercomputer/docs/consumption-models,
read 2026-11), which the catalog does not have.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from gpufleet.catalog import rates
from gpufleet.clouds import bill_lines, candidates, cloud
from gpufleet.clouds.base import Planned, Usage
from gpufleet.clouds.resources import HOURS_PER_MONTH
from gpufleet.providers import CLOUDS

NO_DATA = "the stack says nothing of the data it moves (`data:`): traffic is not estimated"
FLEX_BOUND = ("flex-start: the on-demand list rate, an upper bound (Google bills flex-start at Dynamic Workload "
              "Scheduler prices, discounted up to 53%; the catalog has none)")


@dataclass
class CostLine:
    line: str  # one of bill_lines.PREDICTED
    pool: str  # "-": the cluster's shared parts
    provider: str
    region: str
    what: str
    usd_per_hour: float = 0.0  # recurring
    usd_once: float = 0.0  # over the whole TTL (traffic)
    priced: bool = True  # False: the catalog has no price for it (counted as 0, and named)
    source: str = ""
    as_of: str = ""
    note: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Spend:
    """A cluster's predicted bill: its lines, for ``ttl_hours``."""

    lines: list[CostLine]
    ttl_hours: float
    notes: list[str] = field(default_factory=list)

    @property
    def usd_per_hour(self) -> float:
        return sum(x.usd_per_hour for x in self.lines)

    @property
    def usd_once(self) -> float:
        return sum(x.usd_once for x in self.lines)

    @property
    def usd_for_ttl(self) -> float:
        return self.usd_per_hour * self.ttl_hours + self.usd_once

    @property
    def unpriced(self) -> list[CostLine]:
        return [x for x in self.lines if not x.priced]

    @property
    def unpriced_nodes(self) -> list[str]:
        """The pools' nodes or reservations the catalog cannot price, each named with its pool."""
        return [f"pool {x.pool}: {x.what}" for x in self.unpriced if x.line in bill_lines.NODES]

    def by_line(self) -> dict[str, dict[str, float]]:
        """Per line of the bill: $/h and $ over the TTL."""
        out: dict[str, dict[str, float]] = {}
        for x in self.lines:
            d = out.setdefault(x.line, {"usd_per_hour": 0.0, "usd_for_ttl": 0.0})
            d["usd_per_hour"] += x.usd_per_hour
            d["usd_for_ttl"] += x.usd_per_hour * self.ttl_hours + x.usd_once
        return {k: out[k] for k in bill_lines.PREDICTED if k in out}

    def summary(self) -> dict:
        """What the registry keeps of it: per line, $/h and $ once, and the TTL."""
        per_hour: dict[str, float] = {}
        once: dict[str, float] = {}
        for x in self.lines:
            per_hour[x.line] = round(per_hour.get(x.line, 0.0) + x.usd_per_hour, 6)
            if x.usd_once:
                once[x.line] = round(once.get(x.line, 0.0) + x.usd_once, 6)
        return {"usd_per_hour": per_hour, "usd_once": once, "ttl_hours": self.ttl_hours,
                "unpriced": [x.what for x in self.unpriced]}

    def to_dict(self) -> dict:
        return {"ttl_hours": self.ttl_hours, "usd_per_hour": round(self.usd_per_hour, 4),
                "usd_for_ttl": round(self.usd_for_ttl, 2), "by_line": {k: {n: round(v, 4) for n, v in d.items()}
                                                                        for k, d in self.by_line().items()},
                "lines": [x.to_dict() for x in self.lines], "unpriced": [x.what for x in self.unpriced],
                "notes": self.notes}


def estimate(plan, stack, cat) -> Spend:
    """The plan's predicted bill over the stack's TTL."""
    out = Spend(_instances(plan, stack, cat), stack.ttl_delta.total_seconds() / 3600)
    planned = _planned(plan)
    for p in sorted({r[0] for r in planned}):
        out.lines += [_priced(p, u, cat) for u in cloud(p).spend([r[1] for r in planned if r[0] == p])]
    regions = sorted({(c.provider, c.where) for c in plan.pools if c.provider in CLOUDS})
    if stack.data is None:
        if regions:
            out.notes.append(NO_DATA)
    else:
        for provider, region in regions:
            out.lines += [_priced(provider, u, cat) for u in traffic(stack.data, region)]
    out.lines.sort(key=lambda x: (bill_lines.PREDICTED.index(x.line), x.pool, x.provider, x.region))
    return out


def _instances(plan, stack, cat) -> list[CostLine]:
    """A line per pool for its nodes at their place's price, and one per reservation the pools hold
    (each once), billed whether nodes run in it or not: a Capacity Block's fee over its hours, the
    on-demand rate for the others. A pool whose nodes run in one of them has no line of its own."""
    pools = {p.name: p for p in stack.pools}
    out, seen = [], set()
    for c in plan.pools:
        pool = pools[c.pool]
        held = candidates.holds(pool, cat) if c.provider in CLOUDS else []
        inside = _runs_in(plan, c)
        for h in held:
            if (h.provider, h.reservation.id) not in seen:
                seen.add((h.provider, h.reservation.id))
                out.append(_reservation(c.pool, pool.nodes, h, used=h.reservation.id == inside))
        if inside is not None:
            continue
        price = cat.offer(c.provider, c.where, c.machine, "spot" if pool.spot else "ondemand") \
            if c.provider in CLOUDS else None
        bound = FLEX_BOUND if pool.flex_start is not None else ""
        out.append(CostLine(bill_lines.INSTANCES, c.pool, c.provider, c.where, f"{c.nodes} x {c.machine}", c.usd_per_hour or 0.0,
                            source="; ".join(dict.fromkeys(x.source for x in price.parts)) if price else
                            ("site costs" if c.usd_per_hour is not None else ""),
                            as_of=price.as_of if price else "", priced=c.usd_per_hour is not None,
                            note="; ".join(x for x in (c.note, bound) if x)))
    return out


def _runs_in(plan, c) -> str | None:
    """The id of the reservation the pool's nodes run in: where failover placed it, else the first of
    its places (`plan`'s view: the first `up` tries)."""
    lay = plan.layout
    if lay is not None and lay.placed:
        mine = next((p for p in lay.pools if p.name == c.pool), None)
        return getattr(getattr(mine, "reservation", None), "id", None)
    first = (c.failover or {}).get("candidates") or [{}]
    return first[0].get("reservation") if first[0].get("why") == candidates.RESERVED else None


def _reservation(pool: str, nodes: int, h, *, used: bool) -> CostLine:
    priced = h.price_per_hour is not None
    note = "the pool runs in it" if used else "held, not used by the pool: billed all the same"
    if not priced:
        note += f"; no ondemand price for {h.instance_type} in {h.region} in the catalog"
    return CostLine(bill_lines.RESERVATION, pool, h.provider, h.region, f"{nodes} x {h.instance_type} in {h.reservation.id}: "
                    f"{h.billing}", h.price_per_hour or 0.0, priced=priced, source="the reservation's terms", note=note)


def _planned(plan) -> list[tuple[str, Planned]]:
    """The plan's cloud resources, each with its provider, pool, region and the pool's nodes: a pool's
    component is named ``<cluster>-<pool>``, a region's network ``<cluster>-<region>``."""
    pools = {f"{plan.cluster}-{c.pool}": c for c in plan.pools if c.provider in CLOUDS}
    regions = {f"{plan.cluster}-{c.where}": c for c in plan.pools if c.provider in CLOUDS}
    out = []
    for r in plan.cloud_resources:
        if r.parent in pools:
            c = pools[r.parent]
            out.append((c.provider, Planned(r.type, r.inputs, c.pool, c.where, c.nodes)))
        elif r.parent in regions:
            c = regions[r.parent]
            out.append((c.provider, Planned(r.type, r.inputs, "-", c.where, 0)))
    return out


def traffic(data, region: str) -> list[Usage]:
    """What the stack's ``data:`` moves in and out of one region (GB, once over the TTL)."""
    out = []
    if data.dataset_gb and data.dataset_from == "other-region":
        out.append(Usage("-", bill_lines.TRANSFER, "transfer:inter-region", "gb", region, data.dataset_gb,
                         f"dataset, {data.dataset_gb:g} GB from another region"))
    if data.dataset_gb and data.dataset_from == "internet":  # free to come in, but through the NAT gateway
        out.append(Usage("-", bill_lines.TRANSFER, "nat:data", "gb", region, data.dataset_gb,
                         f"dataset, {data.dataset_gb:g} GB from the Internet through the NAT gateway"))
    copies = data.checkpoint_gb * data.checkpoints * data.checkpoint_copies
    if copies:
        out.append(Usage("-", bill_lines.TRANSFER, "transfer:inter-region", "gb", region, copies,
                         f"{data.checkpoints} checkpoint(s) of {data.checkpoint_gb:g} GB copied to "
                         f"{data.checkpoint_copies} other region(s)"))
    if data.egress_gb:
        out.append(Usage("-", bill_lines.TRANSFER, "transfer:internet-out", "gb", region, data.egress_gb,
                         f"{data.egress_gb:g} GB downloaded out of the cloud"))
        out.append(Usage("-", bill_lines.TRANSFER, "nat:data", "gb", region, data.egress_gb,
                         f"{data.egress_gb:g} GB out through the NAT gateway"))
    return out


def _priced(provider: str, u: Usage, cat) -> CostLine:
    r = rates.rate(provider, u.item, u.region)
    if r is None:
        return CostLine(u.line, u.pool, provider, u.region, u.what, priced=False,
                        note=f"no rate for {provider} {u.item} in the catalog")
    if r.unit != u.unit:
        raise ValueError(f"{provider} {u.item}: the catalog counts it in {r.unit}, the plan in {u.unit}")
    usd = r.usd * (1 - cat.discounts.get(provider, 0.0))
    line = CostLine(u.line, u.pool, provider, u.region, u.what, source=r.source, as_of=r.as_of,
                    note="" if r.region in (u.region, "*") else f"the rate of {r.region} (none for {u.region})")
    if u.unit == "gb":
        line.usd_once = usd * u.quantity
    elif u.unit in ("hour", "tib-hour"):
        line.usd_per_hour = usd * u.quantity
    else:  # per month of 730 hours, as the clouds price storage
        line.usd_per_hour = usd * u.quantity / HOURS_PER_MONTH
    return line

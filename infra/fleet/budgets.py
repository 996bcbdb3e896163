"""Budgets: what clusters may spend in a calendar month (UTC), from the user config (``budgets:``) and,
in team mode, the team's store (`gpufleet budget set`). Spent this month is estimated from the
registry: each cluster's predicted bill (``up``'s, every line; else its launch prices) for its hours
in the month, its traffic spread over its TTL. `gpufleet cost` holds those figures against the bill.

``check`` is what `up` asks before it creates anything: a cluster whose projected spend for its TTL
(for an update, the change over the hours left) exceeds what a budget it falls under has left this
month is refused with exit 5, unless the caller consents (``--over-budget``). A pool that may fail
over is held to the same budgets at each of its places (``drop_places``): a place where the cluster
would exceed one is dropped before any attempt, with the numbers, and when a pool has none left the
cluster is refused before anything is created. `up` checks again where the pools landed, before it
configures anything.

A reservation a pool holds is committed spend: it is billed whether the pool's nodes run in it or not
(engine.spend), so every place of the pool counts it, and the place in it adds nothing beyond it;
it is never dropped for a budget while a dearer open-market place is kept. A place, or a
reservation, the catalog cannot price is never counted as $0: the check cannot show the budget
holds, and refuses it (naming it) unless the caller consents.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import ValidationError

from gpufleet import config
from gpufleet.clouds import bill_lines
from gpufleet.clouds.tags import names, time_or_none
from gpufleet.errors import EXIT_OVER_BUDGET, GpufleetError, InputError
from gpufleet.fleet import team
from gpufleet.monitoring import collector
from gpufleet.paths import user_config
from gpufleet.state import budgets as team_budgets
from gpufleet.state.registry import ClusterRecord
from gpufleet.state.shared import BadObject


@dataclass(frozen=True)
class Budget:
    name: str
    usd_per_month: float
    stack: str | None = None
    owner: str | None = None
    source: str = ""  # the config file, or the team's store

    def covers(self, stack: str, owner: str, creators: list[str]) -> bool:
        return (self.stack is None or self.stack == stack) and (
            self.owner is None or any(names(v, self.owner) for v in (owner, *creators)))

    def to_dict(self) -> dict:
        return {"name": self.name, "usd_per_month": self.usd_per_month, "stack": self.stack, "owner": self.owner,
                "source": self.source}


@dataclass
class Standing:
    """A budget this month: spent so far (estimated), what is left, the clusters it counts."""

    budget: Budget
    spent: float
    clusters: list[str] = field(default_factory=list)

    @property
    def left(self) -> float:
        return self.budget.usd_per_month - self.spent

    @property
    def over(self) -> bool:
        return self.spent > self.budget.usd_per_month

    def to_dict(self) -> dict:
        return {**self.budget.to_dict(), "spent_usd": round(self.spent, 2), "left_usd": round(self.left, 2),
                "clusters": self.clusters}


@dataclass
class Check:
    """One budget against what bringing a cluster up (or updating it) would add this month."""

    standing: Standing
    projected: float
    unpriced: tuple[str, ...] = ()  # the cluster's nodes or reservations without a price: ``projected`` lacks them

    @property
    def exceeded(self) -> bool:
        """Over what is left, or not shown to fit: an unpriced place is never counted as $0."""
        return bool(self.unpriced) or self.projected > self.standing.left

    def to_dict(self) -> dict:
        return {**self.standing.to_dict(), "projected_usd": round(self.projected, 2), "exceeded": self.exceeded,
                "unpriced": list(self.unpriced)}


def worst(checks: list[Check]) -> Check:
    return max(checks, key=lambda c: (bool(c.unpriced), c.projected - c.standing.left))


def _unpriced(c: Check) -> str:
    return f"{'; '.join(c.unpriced)} {'has' if len(c.unpriced) == 1 else 'have'} no price in the catalog"


class OverBudget(GpufleetError):
    exit_code = EXIT_OVER_BUDGET

    def __init__(self, cluster: str, checks: list[Check], *, where: str = "", landed: bool = False):
        """``where``: the place the figure is for (the cheapest of a pool's places); ``landed``: the pools
        are created already (the check where failover placed them), and nothing was configured."""
        self.checks = checks
        w = worst(checks)
        s = w.standing
        left = f"budget {s.budget.name!r} has ${max(s.left, 0):,.2f} left this month (${s.spent:,.2f} of " \
               f"${s.budget.usd_per_month:,.2f} spent)"
        said = (f"cluster {cluster} cannot be held to its budgets{where}: {_unpriced(w)}, and an unpriced place "
                f"is never counted as $0 (${w.projected:,.2f} over its TTL without it; {left})" if w.unpriced else
                f"cluster {cluster} would spend ${w.projected:,.2f} over its TTL{where}, but {left}")
        super().__init__(said + (f"; {len(checks) - 1} other budget(s) too" if len(checks) > 1 else ""),
                         f"its pools are up and nothing was configured: `gpufleet down {cluster}` stops them, "
                         f"`gpufleet configure {cluster}` goes on" if landed else
                         ("quote its price under `prices:` in your config, let the pool go where the catalog "
                          "prices it, " if w.unpriced else "shorten the stack's ttl or its pools, raise the budget, ")
                         + "or pass --over-budget to bring it up anyway (the event log records the consent)")

    def to_dict(self) -> dict:
        return {**super().to_dict(), "budgets": [c.to_dict() for c in self.checks]}


def configured(config_path=None, on_bad: Callable[[BadObject], None] | None = None) -> list[Budget]:
    """The user config's budgets and the team's (a name in both: the team's, said in its source). The
    team's ``budgets.json`` that is not what gpufleet writes is BadObject, naming it; ``on_bad``: told
    instead, and the config's budgets alone are given (for what only shows budgets)."""
    out: dict[str, Budget] = {}
    path = user_config(config_path)
    for b in config.load(path).budgets if path else []:
        out[b.name] = Budget(b.name, b.usd_per_month, b.stack, b.owner, str(path))
    store = team.current()
    try:
        for b in _team_budgets(store) if store is not None else []:
            out[b.name] = Budget(b.name, b.usd_per_month, b.stack, b.owner, store.url)
    except BadObject as e:
        if on_bad is None:
            raise
        on_bad(e)
    return sorted(out.values(), key=lambda b: b.name)


def _team_budgets(store) -> list[config.Budget]:
    """The store's budgets, each held to the config's own checks (a store is not ours to trust)."""
    out = []
    for doc in team_budgets.read(store):
        try:
            out.append(config.Budget.model_validate(doc))
        except ValidationError as e:
            raise BadObject(store.url, team_budgets.KEY, f"has a budget that is not one ({doc.get('name')!r}: "
                            f"{e.errors()[0]['loc']} {e.errors()[0]['msg']})") from None
    return out


def month_start(now: dt.datetime) -> dt.datetime:
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def _hours(a: dt.datetime, b: dt.datetime) -> float:
    return max(0.0, (b - a).total_seconds() / 3600)


def per_hour(rec: ClusterRecord) -> float:
    """What a cluster costs an hour: its predicted bill's every line, else its nodes' launch prices."""
    p = rec.predicted or {}
    return sum(p.get("usd_per_hour", {}).values()) if p.get("usd_per_hour") else (rec.usd_per_hour or 0.0)


def monitor_settings(rec: ClusterRecord, stack, budget_list: list[Budget], creators: list[str]) -> dict | None:
    """The monitor host's cluster collector settings (monitoring.collector.settings: the cluster's $/h, since when,
    the budgets it falls under), where the stack runs Prometheus; None where it does not."""
    m = stack.monitoring
    if m is None or not m.prometheus:
        return None
    covering = [(b.name, b.usd_per_month) for b in budget_list if b.covers(stack.name, stack.owner, creators)]
    return collector.settings(rec.name, usd_per_hour=per_hour(rec) or None, since=rec.created_at,
                              budgets=covering, slurm=stack.slurm is not None)


def spent_this_month(rec: ClusterRecord, now: dt.datetime) -> float:
    """A cluster's estimated spend since the month began: its hours in the month at ``per_hour``, and
    its traffic, spread over its TTL, for the same share."""
    created = time_or_none(rec.created_at) or now
    hours = _hours(max(created, month_start(now)), now)
    p = rec.predicted or {}
    ttl = p.get("ttl_hours") or 0
    once = sum((p.get("usd_once") or {}).values())
    return per_hour(rec) * hours + (once * min(1.0, hours / ttl) if ttl else 0.0)


def standings(budgets: list[Budget], records: list[ClusterRecord], now: dt.datetime) -> list[Standing]:
    out = []
    for b in budgets:
        mine = [r for r in records if b.covers(r.stack, r.owner, list(r.created_by.values()))]
        out.append(Standing(b, sum(spent_this_month(r, now) for r in mine), [r.name for r in mine]))
    return out


def projected(spend, existing: ClusterRecord | None, now: dt.datetime) -> float:
    """What bringing the cluster up adds: its predicted bill for the TTL; for an update, the change in
    its hourly cost over the hours it has left."""
    if existing is None:
        return spend.usd_for_ttl
    left = _hours(now, time_or_none(existing.expires_at) or now)
    return max(0.0, (spend.usd_per_hour - per_hour(existing)) * left)


def instances_per_hour(spend) -> dict[str, float]:
    """pool -> what its nodes cost an hour in ``spend`` (engine.spend.Spend's INSTANCES lines, or a Projection's)."""
    if isinstance(spend, Projection):
        return dict(spend.instances)
    out: dict[str, float] = {}
    for x in spend.lines:
        if x.line == bill_lines.INSTANCES:
            out[x.pool] = out.get(x.pool, 0.0) + x.usd_per_hour
    return out


def headroom_per_hour(stack, spend) -> float:
    """What the cluster may cost an hour beyond ``spend`` (planned at each elastic pool's min) once every elastic
    pool is at its max. `up`'s check is the last that can refuse: `gpufleet scale` and `heal` grow a pool inside
    the bounds the stack gave, without another check, so the spend `up` consents to is the spend at max."""
    per_pool = instances_per_hour(spend)
    out = 0.0
    for p in stack.pools:
        if p.size is not None and p.nodes and p.name in per_pool:
            out += per_pool[p.name] / p.nodes * (p.size.max - p.nodes)
    return out


def checks(name: str, stack, spend, creators: list[str], records: list[ClusterRecord], budgets: list[Budget],
           now: dt.datetime | None = None) -> list[Check]:
    """Every budget the cluster falls under, against what it would add (``spend``: engine.spend.Spend
    or a Projection), each elastic pool counted at its max (``headroom_per_hour``)."""
    now = now or dt.datetime.now(dt.timezone.utc)
    existing = next((r for r in records if r.name == name), None)
    others = [r for r in records if r.name != name] + ([existing] if existing else [])
    more = headroom_per_hour(stack, spend)
    add = projected(spend, existing, now)
    if more:
        left = spend.ttl_hours if existing is None else _hours(now, time_or_none(existing.expires_at) or now)
        add += more * left
    return [Check(s, add, tuple(spend.unpriced_nodes))
            for s in standings([b for b in budgets if b.covers(stack.name, stack.owner, creators)], others, now)]


def check(name: str, stack, spend, creators: list[str], records: list[ClusterRecord], budgets: list[Budget], *,
          consent: bool = False, now: dt.datetime | None = None, landed: bool = False) -> list[Check]:
    """``checks``, and OverBudget (exit 5) when one is exceeded and the caller did not consent."""
    out = checks(name, stack, spend, creators, records, budgets, now)
    exceeded = [c for c in out if c.exceeded]
    if exceeded and not consent:
        raise OverBudget(name, exceeded, landed=landed)
    return out


@dataclass(frozen=True)
class Projection:
    """A cluster's predicted bill with some pools at other places than the plan's: the plan's lines,
    each moved pool's nodes at its place's price (its other lines as planned: a place in another
    region or cloud may bill its storage and network a little differently, which the check where the
    pools landed sees)."""

    usd_per_hour: float
    usd_once: float
    ttl_hours: float
    unpriced_nodes: tuple[str, ...] = ()  # as engine.spend.Spend's
    committed_per_hour: float = 0.0  # the reservations the pools hold, billed used or not
    instances: tuple[tuple[str, float], ...] = ()  # (pool, $/h of its nodes) at these places

    @property
    def usd_for_ttl(self) -> float:
        return self.usd_per_hour * self.ttl_hours + self.usd_once


def moved(spend, places: dict) -> Projection:
    """``spend`` (engine.spend.Spend) with each pool of ``places`` (pool -> clouds.candidates.Candidate)
    there: its nodes at the place's price, or nothing beyond the reservation where the place is one
    (the reservations a pool holds are lines of ``spend`` whatever its place: billed used or not). A
    place without a price is named in ``unpriced_nodes``, never counted as $0."""
    kept = [x for x in spend.lines if not (x.pool in places and x.line == bill_lines.INSTANCES)]
    unpriced = [f"pool {x.pool}: {x.what}" for x in kept if not x.priced and x.line in bill_lines.NODES]
    per_hour = sum(x.usd_per_hour for x in kept)
    nodes = {p: v for p, v in instances_per_hour(spend).items() if p not in places}
    for pool, c in places.items():
        if c.reservation is not None:
            continue
        if c.price_per_hour is None:
            unpriced.append(f"pool {pool}: {c.label()}")
        else:
            per_hour += c.price_per_hour
            nodes[pool] = c.price_per_hour
    return Projection(per_hour, spend.usd_once, spend.ttl_hours, tuple(unpriced),
                      sum(x.usd_per_hour for x in kept if x.line == bill_lines.RESERVATION), tuple(sorted(nodes.items())))


@dataclass
class Dropped:
    """A place a pool may not go: the cluster would exceed ``checks`` there, or could not be priced."""

    pool: str
    place: object  # clouds.candidates.Candidate
    checks: list[Check]
    committed: float = 0.0  # $ over the TTL of the reservations the pools hold, in the figure

    @property
    def why(self) -> str:
        w = worst(self.checks)
        if w.unpriced:
            return f"not priced: {_unpriced(w)}, so budget {w.standing.budget.name!r} cannot be held to it here"
        held = f" (${self.committed:,.2f} of it the reservation(s) it holds, billed used or not)" if self.committed \
            else ""
        return (f"over budget {w.standing.budget.name!r}: the cluster would spend ${w.projected:,.2f} over its TTL "
                f"here{held}, ${max(w.standing.left, 0):,.2f} is left this month")


def drop_places(name: str, stack, spend, creators: list[str], records: list[ClusterRecord], budgets: list[Budget],
                plans: dict, now: dt.datetime | None = None) -> list[Dropped]:
    """Drop from each pool's places (``plans``: pool -> clouds.candidates.Candidates, in order) those
    where the cluster would exceed a budget it falls under, or cannot be priced, the rest of the stack
    as planned; each dropped place is returned."""
    now = now or dt.datetime.now(dt.timezone.utc)
    dropped = []
    for pool, cs in plans.items():
        kept = []
        for c in cs.ordered:
            there = moved(spend, {pool: c})
            exceeded = [k for k in checks(name, stack, there, creators, records, budgets, now) if k.exceeded]
            if exceeded:
                dropped.append(Dropped(pool, c, exceeded, there.committed_per_hour * there.ttl_hours))
            else:
                kept.append(c)
        cs.ordered = kept
    return dropped


def require_places(name: str, plans: dict, dropped: list[Dropped]) -> None:
    """OverBudget (exit 5), before anything is created, when the budgets left a pool no place: the
    figure is its cheapest place's."""
    for pool, cs in plans.items():
        mine = [d for d in dropped if d.pool == pool]
        if mine and not cs.ordered:
            cheapest = min(mine, key=lambda d: (bool(worst(d.checks).unpriced), worst(d.checks).projected))
            raise OverBudget(name, cheapest.checks, where=f" even at the cheapest of pool {pool}'s {len(mine)} "
                                                          f"place(s), {cheapest.place.label()}")


def put(budget: Budget) -> None:
    """Set a team budget in the store (team mode only: alone, budgets live in the config file)."""
    store = team.current()
    if store is None:
        raise InputError("no team store: alone, budgets live in the config file (budgets: in config.yaml)",
                         "add it there, or gpufleet team init URL to share budgets with the team")
    team_budgets.change(store, budget.name, {k: v for k, v in budget.to_dict().items() if k != "source" and v is not None})


def remove(name: str) -> bool:
    store = team.current()
    if store is None:
        raise InputError("no team store: budgets in the config file are removed there", "edit config.yaml")
    if all(b["name"] != name for b in team_budgets.read(store)):
        return False
    team_budgets.change(store, name, None)
    return True

"""Capacity failover: place each cloud pool whole in the first of its places that holds it.

A pool's places come from ``clouds.candidates`` (its own first, then what its ``failover`` block
allows, in compare's order). Before any attempt, the quota preflight skips the places whose
region is short (said, never tried), and a cloud without credentials here is skipped with why.
Then each attempt is one Pulumi `up` of the stack with every pool at its current place. When the
cloud refuses a pool, the refusal's classification (``clouds.base.Refusal``, from the clouds'
documented error codes) says what it rules out for the next attempt: the zone, the region or the
whole cloud; anything else (a permission, a bad argument, an unknown error) stops at once.
Before the next place is tried, the failed attempt's part of the pool is removed and proven gone:
Pulumi's `up` without the pool deletes what its state holds, and a sweep by the pool's tags
deletes whatever the cloud launched outside it (a fleet request cut short). If anything is left,
failover stops there rather than leave a place billing behind it.

Every attempt is told as it happens (``on_attempt``) and recorded in the registry; `up` ends with
the whole list, also when every place failed (``NoPlaceLeft``, exit 1).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gpufleet.clouds import candidates, inventory
from gpufleet.clouds.base import Need
from gpufleet.engine.program import layout
from gpufleet.errors import GpufleetError, LeftoverError
from gpufleet.limits import FAILOVER_BUDGET_S, FAILOVER_MAX_ATTEMPTS
from gpufleet.nodes import cloud as cloud_nodes
from gpufleet.nodes.kind import leftover_error
from gpufleet.nodes.run import Run
from gpufleet.providers import CLOUDS

SCOPES = ("zone", "region", "provider")  # what a refusal may rule out; anything else stops failover


class NoPlaceLeft(GpufleetError):
    """Every place a pool may land was tried or ruled out (or the attempts or the time ran out)."""


@dataclass
class Attempt:
    pool: str
    place: candidates.Candidate
    outcome: str  # created | refused | skipped | failed
    started_at: str
    seconds: float = 0.0
    refusal: object = None  # clouds.base.Refusal of a refused or failed attempt
    note: str = ""  # why a place was skipped; what the cleanup removed

    def to_dict(self) -> dict:
        r = self.refusal
        return {"pool": self.pool, "provider": self.place.provider, "region": self.place.region,
                "zone": self.place.zone, "instance_type": self.place.instance_type, "spot": self.place.spot,
                "reservation": getattr(self.place.reservation, "id", None),
                "price_per_hour": self.place.price_per_hour, "started_at": self.started_at,
                "seconds": round(self.seconds, 1), "outcome": self.outcome,
                "scope": getattr(r, "scope", None), "kind": getattr(r, "kind", None),
                "code": getattr(r, "code", None) or (self.note if self.outcome == "skipped" else None),
                "message": getattr(r, "message", None) or self.note or None, "source": getattr(r, "source", None)}


@dataclass
class Placement:
    """Where the stack's pools landed, and every attempt that got them there."""

    stack: object  # the stack with each pool at its place (what `up` configures and records)
    nodes: list
    attempts: list[Attempt] = field(default_factory=list)


def places(stack, cat) -> dict[str, candidates.Candidates]:
    """Each pool with a ``failover`` block or reservations: its places in order."""
    return {p.name: candidates.for_pool(stack, p, cat) for p in stack.pools if p.failover is not None or p.reservations}


def preflight(run: Run, plans: dict[str, candidates.Candidates]) -> list[Attempt]:
    """Skip the places whose region's quota is short, or whose cloud cannot be asked here; each
    skip is returned (to be told and recorded), and the places left stay in ``plans``."""
    skipped = []
    wanted: dict[str, set[str]] = {}
    for c in (c for cs in plans.values() for c in cs.ordered):
        wanted.setdefault(c.provider, set()).add(c.region)
    apis = _apis(run, {p: sorted(rs) for p, rs in wanted.items()})
    pools = {p.name: p for p in run.stack.pools}
    for name, cs in plans.items():
        kept = []
        for c in cs.ordered:
            why = _unreachable(apis, c) or _short(run, apis, pools[name], c)
            if why:
                skipped.append(Attempt(name, c, "skipped", _now(), note=why))
            else:
                kept.append(c)
        cs.ordered = kept
    return skipped


def require_places(plans: dict[str, candidates.Candidates], skipped: list[Attempt]) -> None:
    """NoPlaceLeft, before anything is created, when the preflight left a pool no place to try."""
    for name, cs in plans.items():
        if not cs.ordered:
            raise _exhausted(name, skipped, "the preflight ruled out every place (nothing was created)")


def skip(pool: str, c: candidates.Candidate, why: str) -> Attempt:
    """A place ruled out before any attempt (told and recorded as the preflight's skips are)."""
    return Attempt(pool, c, "skipped", _now(), note=why)


def place(run: Run, plans: dict[str, candidates.Candidates], *, max_attempts: int = FAILOVER_MAX_ATTEMPTS,
          budget_s: float = FAILOVER_BUDGET_S, on_attempt: Callable[[Attempt], None] | None = None,
          record: Callable[[Attempt], None] | None = None, skipped: list[Attempt] = (),
          clock=time.monotonic) -> Placement:
    """Create the cloud pools, each failover pool at the first of its places that holds it
    (``skipped``: what the preflight ruled out, told already; an error's attempts list them too)."""
    told: list[Attempt] = list(skipped)

    def tell(a: Attempt) -> None:
        told.append(a)
        for f in (record, on_attempt):
            if f:
                f(a)

    queue = {name: list(cs.ordered) for name, cs in plans.items()}
    current = {name: q.pop(0) for name, q in queue.items()}
    start, runs = clock(), 0
    while True:
        stack = placed(run.stack, current)
        run.layout = layout(stack, run.cat, reserved(current))
        began, t0 = _now(), clock()
        runs += 1
        try:
            nodes = cloud_nodes.deploy(run)
        except GpufleetError as e:
            failure = e
        else:
            for name in plans:
                tell(Attempt(name, current[name], "created", began, clock() - t0))
            return Placement(stack, nodes, told[len(skipped):])
        refusal = getattr(failure, "refusal", None)
        scope = getattr(refusal, "scope", None)
        pool = failed_pool(run.cluster, run.deployed, current)
        if pool is not None:
            tell(Attempt(pool, current[pool], "refused" if scope in SCOPES else "failed", began, clock() - t0, refusal))
        if pool is None or scope not in SCOPES:  # not a failover pool's, or nothing another place can fix
            failure.attempts = [a.to_dict() for a in told]
            raise failure
        removed = clean(run, stack, pool, current)
        if removed:
            told[-1].note = f"removed {removed} leftover resource(s) of the attempt"
        for name in queue:  # a region's quota or a cloud's credentials hold for every pool there
            queue[name] = [c for c in queue[name] if not ruled_out(c, current[pool], scope, same_pool=name == pool)]
        if not queue[pool]:
            raise _exhausted(pool, told, "every place was tried or ruled out")
        if runs >= max_attempts:
            raise _exhausted(pool, told, f"{runs} attempts made (--max-attempts)")
        if clock() - start >= budget_s:
            raise _exhausted(pool, told, f"{clock() - start:.0f} s spent (--failover-budget)")
        current[pool] = queue[pool].pop(0)


def reserved(current: dict[str, candidates.Candidate]) -> dict[str, candidates.Candidate]:
    """The pools placed at a reservation (they launch into it)."""
    return {name: c for name, c in current.items() if c.reservation is not None}


def placed(stack, current: dict[str, candidates.Candidate]):
    """The stack with each pool of ``current`` at its place."""
    pools = [candidates.placed(p, current[p.name]) if p.name in current else p for p in stack.pools]
    return stack.model_copy(update={"pools": pools})


def ruled_out(c: candidates.Candidate, failed: candidates.Candidate, scope: str, *, same_pool: bool) -> bool:
    """Whether a refusal of ``failed`` (ruling out its ``scope``) rules out place ``c`` too. A zone's
    capacity is that instance type's, in that market, for that pool's size, and a reservation's is
    its own (the open market beside it may still hold the pool); a region's quota and a cloud's
    credentials hold for every pool."""
    if c.provider != failed.provider:
        return False
    if scope == "provider":
        return True
    if c.region != failed.region:
        return False
    if scope == "region":
        return c.spot == failed.spot  # spot quotas are counted apart from on-demand ones
    held = getattr(c.reservation, "id", None), getattr(failed.reservation, "id", None)
    return same_pool and held[0] == held[1] and \
        (c.zone, c.instance_type, c.spot) == (failed.zone, failed.instance_type, failed.spot)


def failed_pool(cluster: str, progress, current: dict) -> str | None:
    """The failover pool whose resource Pulumi reported failed (the program names a pool's resources
    ``<cluster>-<pool>...``, the longest pool name that fits wins), or the only failover pool when
    Pulumi named no resource."""
    names = [urn.rsplit("::", 1)[-1] for urn in (getattr(progress, "failed", None) or [])]
    for n in names:
        fits = [p for p in current if n == f"{cluster}-{p}" or n.startswith(f"{cluster}-{p}-")]
        if fits:
            return max(fits, key=len)
    if names:
        return None  # a resource of no failover pool (a region's network, a pool without failover)
    return next(iter(current)) if len(current) == 1 else None


def clean(run: Run, stack, pool: str, current: dict[str, candidates.Candidate]) -> int:
    """Remove what the refused attempt made of ``pool`` and prove it gone; the number of resources
    the sweep deleted (Pulumi's own deletions not counted). LeftoverError when anything is left."""
    where = current[pool]
    without = stack.model_copy(update={"pools": [p for p in stack.pools if p.name != pool]})
    run.layout = layout(without, run.cat, reserved({n: c for n, c in current.items() if n != pool}))
    try:
        cloud_nodes.deploy(run)
    except GpufleetError as e:
        raise LeftoverError(f"could not remove the refused attempt of pool {pool} at {where.label()}: {e.message}",
                            f"failover stopped so that nothing is left billing; run `gpufleet down {run.cluster}`") \
            from None
    opened = _apis(run, {where.provider: [where.region]})
    api = inventory.Clouds(open={where.provider: opened[where.provider]}, regions={where.provider: [where.region]})
    found, unread = inventory.collect(api, cluster=run.cluster)
    mine = [r for r in found if r.pool == pool]
    outcomes = inventory.delete(mine, api) if mine else []
    if mine:
        found, unread = inventory.collect(api, cluster=run.cluster)
        mine = [r for r in found if r.pool == pool]
    if mine or unread:
        raise leftover_error(run.cluster, mine, unread, outcomes)
    return sum(1 for o in outcomes if o.ok)


def _exhausted(pool: str, attempts: list[Attempt], why: str) -> NoPlaceLeft:
    e = NoPlaceLeft(f"no place held pool {pool}: {why}", "the table lists each attempt and why it failed; widen the "
                    "pool's failover block (zones: any, more regions or providers, same-gpu types), raise the price "
                    "cap, ask for quota, or retry later")
    e.attempts = [a.to_dict() for a in attempts]
    return e


def _apis(run: Run, regions: dict[str, list[str]]) -> dict:
    """provider -> its open API (those the caller gave, else opened with the user's credentials);
    a cloud that cannot be opened maps to why, as a string."""
    given = run.seams.cloud_api
    out: dict = {}
    for p in regions:
        opened = given if given is not None else inventory.open_clouds([p], required=False, regions={p: regions[p]})
        out[p] = opened.api_or_why(p)
        if p in opened.identity:  # who a pool placed on this cloud is created by (``nodes.cloud.who``)
            run.identity[p] = opened.identity[p]["principal"]
    return out


def _unreachable(apis: dict, c: candidates.Candidate) -> str | None:
    api = apis.get(c.provider)
    return f"{c.provider} cannot be asked here: {api}" if isinstance(api, str) else None


def _short(run: Run, apis: dict, pool, c: candidates.Candidate) -> str | None:
    if not run.check_quotas or c.provider not in CLOUDS:
        return None
    need = Need(pool.name, c.provider, c.region, run.cat.instance(c.provider, c.instance_type), pool.nodes, c.spot,
                None, candidates.placed(pool, c).flex_start is not None, getattr(c.reservation, "id", None))
    try:
        lines = apis[c.provider].quotas(c.region, [need])
    except GpufleetError:
        return None  # an unreadable quota is not a short one: the attempt will tell
    short = [x for x in lines if x.ok is False]
    return "; ".join(f"quota {x.quota!r} has {x.available:g} {x.unit} available, the pool needs {x.needed:g}"
                     for x in short) or None


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


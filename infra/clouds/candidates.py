"""Where a cloud pool may land: the reservations it holds first (``reservations``, in the order
listed), then its own place on the open market, then the alternatives its ``failover`` block
allows (other zones, regions, clouds, instance types with the same GPUs, on-demand after spot),
each one whole place for the whole pool, in the order `compare` ranks them.

A reservation is priced as its cloud bills it: an AWS Capacity Block was paid up front for its
window (its fee over its hours), and an On-Demand Capacity Reservation, a GCP reservation and an
Azure capacity reservation group are billed at the on-demand rate while they exist, used or not
(read 2026-11: AWS capacity-blocks-extend.html, "The price of a Capacity Block offering is charged
up front", and capacity-reservations-pricing-billing.html, "charged at the equivalent On-Demand
rate whether you run instances in reserved capacity or not"; GCP, a reservation "incurs charges for
its reserved resources, even when it's not being consumed"; Azure's capacity reservation overview,
the pay-as-you-go rate for the reserved capacity whether VMs use it or not). A Capacity Block
outside its window is left out: EC2 refuses launches into one before its start ("Insufficient
Capacity Error", ec2-fleet-launch-instances-capacity-blocks-walkthrough.html) and after its end it
is gone. Whichever place a pool lands in, its reservations are billed: a budget counts them at
every place (fleet.budgets), and the place in one adds nothing beyond it.

What cannot work is left out before any attempt, and said: no price in the catalog, above the
price cap, a zone that does not offer the type, what the cloud cannot do for the pool (its own
``check_pool``), a workload that does not fit. The quota preflight (``clouds.quotas``) prunes
more at `up`, where the clouds can be asked. Reading the catalog only, this stays fast: `plan`
shows the list and `up` walks it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field, replace

from gpufleet import compare, spec
from gpufleet.catalog import consumption
from gpufleet.clouds import golden, provider
from gpufleet.perf import workloads
from gpufleet.state.images import Manifest

OWN, ZONE, REGION, CLOUD, TYPE, ON_DEMAND = ("the stack's own", "another zone", "another region", "another cloud",
                                             "another instance type", "on-demand after spot")
RESERVED = "a reservation it holds"
# A type not sold on demand (GCP A4, A3 Ultra) is reserved through future reservations, calendar mode
# included, which Google bills at a discount for the whole period ("Discounted" in the consumption table of
# cloud.google.com/ai-hypercomputer/docs/consumption-models, read 2026-11): the catalog has only the list rate
DISCOUNTED = "billed for its whole period, used or not, at a discount: priced at the on-demand list rate, an upper bound"


@dataclass(frozen=True)
class Candidate:
    """One whole place for a pool; ``zone`` None: the first zone offering the type (the cloud's
    module picks it, as without failover)."""

    provider: str
    region: str
    zone: str | None
    instance_type: str
    spot: bool
    price_per_hour: float | None  # USD for the whole pool (nodes x the node's price)
    price_per_node_hour: float | None
    why: str  # RESERVED, OWN, ZONE, REGION, CLOUD, TYPE or ON_DEMAND
    reservation: object = None  # spec.Reservation of a RESERVED place
    billing: str = ""  # how a reservation is billed, in words

    @property
    def market(self) -> str:
        return "spot" if self.spot else "ondemand"

    @property
    def where(self) -> str:
        """The zone (``eastus/2`` where the zone's name does not say its region), or the region."""
        if self.zone is None:
            return self.region
        return self.zone if self.zone.startswith(self.region) else f"{self.region}/{self.zone}"

    def label(self) -> str:
        held = [f"reservation {self.reservation.id}"] if self.reservation is not None else []
        return " ".join([self.provider, self.where, self.instance_type] + (["spot"] if self.spot else []) + held)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["reservation"] = self.reservation.id if self.reservation is not None else None
        return out


@dataclass
class Candidates:
    pool: str
    ordered: list[Candidate] = field(default_factory=list)
    dropped: list[dict] = field(default_factory=list)  # {"candidate": label, "why": reason}: never tried

    def to_dict(self) -> dict:
        return {"candidates": [c.to_dict() for c in self.ordered], "dropped": self.dropped}


def placed(pool, c: Candidate):
    """The pool as it lands on ``c`` (a copy; the stack's own pool is unchanged)."""
    update = {"provider": c.provider, "region": c.region, "zone": c.zone, "instance_type": c.instance_type,
              "gpu": None, "gpus_per_node": None, "spot": c.spot}
    if pool.interconnect and pool.interconnect not in provider(c.provider).interconnects:
        update["interconnect"] = None  # another cloud's name for it: that cloud's default fabric for the type
    if c.provider != pool.provider:
        if golden.name_of(pool) is None:  # a golden image keeps its name: that cloud's build of it (_bootable)
            update["image"] = None  # an image names one cloud's format; the other's default for the same OS
        update["flex_start"] = None  # GCP's own provisioning model: elsewhere the pool's nodes start as usual
    return pool.model_copy(update=update)


def for_pool(stack, pool, cat, now: dt.datetime | None = None) -> Candidates:
    """The pool's places in the order `up` tries them: its reservations, then its own (only those
    without a ``failover`` block)."""
    own_type = spec.resolve_instance(pool, cat)
    out = Candidates(pool.name)
    f = pool.failover
    own_zone = pool.zone
    if f and f.zones and own_zone is None:
        zones = _zones(cat, pool.provider, own_type.name, pool.region)
        own_zone = zones[0] if zones else None  # the one the cloud's module would pick: first by name
    own = _candidate(cat, pool, pool.provider, pool.region, own_zone, own_type.name, pool.spot, OWN)
    held = holds(pool, cat, now, out.dropped)
    unsold = _unsold(pool, own)  # an A4 pool's open market after its reservations: Google sells none on demand
    if unsold:
        out.dropped.append({"candidate": own.label(), "why": unsold})
    mine = [] if unsold else [own]
    if f is None:
        out.ordered += _bootable(pool, [*held, *mine], out.dropped)
        return out
    seen = {_key(own)}
    alternatives = []
    for place in _places(stack, pool, cat, own_type):
        why = _unsold(pool, place) or _unfit(stack, pool, cat, place)
        if why:
            out.dropped.append({"candidate": place.label(), "why": why})
            continue
        for zone in _zone_choices(pool, cat, place, own_zone):
            c = replace(place, zone=zone, why=ZONE if place.why == OWN and zone != own_zone else place.why)
            if _key(c) not in seen:
                seen.add(_key(c))
                alternatives.append(c)
    ranks, unfit = _ranked(stack, pool, cat, alternatives)
    for key, why in unfit.items():
        out.dropped.append({"candidate": " ".join(key), "why": why})
    kept = [c for c in alternatives if (c.provider, c.region, c.instance_type, c.market) not in unfit]
    # spot before on-demand (a spot pool's fallback comes last), then compare's ranking, then by name
    kept.sort(key=lambda c: (c.why == ON_DEMAND, ranks.get((c.provider, c.region, c.instance_type, c.market),
                                                           float("inf")), c.provider, c.region, c.zone or ""))
    out.ordered = _bootable(pool, [*held, *mine, *kept], out.dropped)
    return out


def _bootable(pool, places: list[Candidate], dropped: list) -> list[Candidate]:
    """The places where the pool's golden image (``gpufleet:<name>``) boots; the others go to
    ``dropped`` with why (an AMI or an Azure gallery version is regional, a GCP image global). On
    another cloud that means the same image name built for that cloud: its stock OS would lack what
    the image holds."""
    name = golden.name_of(pool)
    if name is None:
        return places
    manifest, out = Manifest(), []
    for c in places:
        why = golden.missing(manifest, name, c.provider, c.region)
        if why:
            dropped.append({"candidate": c.label(), "why": why})
        else:
            out.append(c)
    return out


def _unsold(pool, c: Candidate) -> str | None:
    """Why the cloud does not sell ``c``'s nodes the way the pool would buy them there (catalog.consumption)."""
    model = consumption.model_of(c.spot, placed(pool, c).flex_start is not None, c.reservation is not None)
    if consumption.sold(c.provider, c.instance_type, model):
        return None
    return (f"{c.provider} sells {c.instance_type} only {consumption.of(c.provider, c.instance_type).words()}, "
            f"not {consumption.WORDS[model]}")


def holds(pool, cat, now: dt.datetime | None = None, dropped: list | None = None) -> list[Candidate]:
    """The pool's reservations as places, priced as their clouds bill them (None: the catalog lacks
    the rate); a Capacity Block outside its window goes to ``dropped`` with why."""
    now = now or dt.datetime.now(dt.timezone.utc)
    dropped = [] if dropped is None else dropped
    own_type = spec.resolve_instance(pool, cat) if pool.reservations else None
    out = []
    for r in pool.reservations:
        it = r.instance_type or own_type.name
        block = r.capacity_block
        if block is not None:
            c = Candidate(r.provider, r.region, r.zone, it, False, block.upfront_usd / block.hours,
                          block.upfront_usd / block.hours / pool.nodes, RESERVED, r,
                          f"capacity block, ${block.upfront_usd:,.0f} paid up front for {block.hours:,.0f} h from "
                          f"{_utc(block.starts_at)}")
            if not block.starts_at <= now < block.ends_at:
                dropped.append({"candidate": c.label(), "why": f"the capacity block runs from {_utc(block.starts_at)} "
                                f"to {_utc(block.ends_at)}, and EC2 launches into it only then"})
                continue
        else:
            c = replace(_candidate(cat, pool, r.provider, r.region, r.zone, it, False, RESERVED), reservation=r,
                        billing="billed at the on-demand rate, used or not" if consumption.sold(r.provider, it, "ondemand")
                        else DISCOUNTED)
        out.append(c)
    return out


def _utc(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%MZ")


def _key(c: Candidate) -> tuple:
    return c.provider, c.region, c.zone, c.instance_type, c.spot, getattr(c.reservation, "id", None)


def _zones(cat, prov: str, instance: str, region: str) -> list[str]:
    offered = cat.offered_zones(prov, instance, region)
    return sorted(offered if offered is not None else cat.region_zones(prov, region))


def _candidate(cat, pool, prov, region, zone, instance, spot, why) -> Candidate:
    offer = cat.offer(prov, region, instance, "spot" if spot else "ondemand")
    node = offer.usd_per_hour if offer else None
    return Candidate(prov, region, zone, instance, spot, None if node is None else node * pool.nodes, node, why)


def _places(stack, pool, cat, own_type):
    """Every (cloud, region, type, market) the failover block allows where the type is sold, zone unset:
    the catalog has a price for it there in some market (one without a price in this market is a place
    all the same, which ``_unfit`` drops with why, rather than one that is not there)."""
    f = pool.failover
    markets = [pool.spot] + ([False] if pool.spot and f.spot_fallback else [])
    same_gpu = [it for it in cat.instances.values() if (it.gpu, it.gpu_count) == (own_type.gpu, own_type.gpu_count)]
    for spot in markets:
        for prov in [pool.provider, *f.providers]:
            if f.instance_types == "same-gpu" or (prov != pool.provider and f.instance_types is None):
                types = [it.name for it in same_gpu if it.provider == prov]
            elif f.instance_types is None:
                types = [own_type.name]
            else:
                types = [t for t in f.instance_types if (prov, t) in cat.instances]
            if prov == pool.provider:
                regions = [pool.region, *f.regions]
            else:  # the regions named for that cloud, else every region of it
                named = [r for r in f.regions if r in cat.regions.get(prov, {})]
                regions = named or sorted(cat.regions.get(prov, {}))
            for region in regions:
                for t in types:
                    if any(cat.offer(prov, region, t, m) is not None for m in ("spot", "ondemand")):
                        yield _candidate(cat, pool, prov, region, None, t, spot, _why(pool, prov, region, t, spot,
                                                                                       own_type))


def _why(pool, prov, region, instance, spot, own_type) -> str:
    if spot != pool.spot:
        return ON_DEMAND
    if prov != pool.provider:
        return CLOUD
    if region != pool.region:
        return REGION
    return TYPE if instance != own_type.name else OWN


def _zone_choices(pool, cat, place: Candidate, own_zone) -> list[str | None]:
    f = pool.failover
    home = (place.provider, place.region) == (pool.provider, pool.region)
    if f.zones is None:
        return [own_zone if home else None]
    offered = _zones(cat, place.provider, place.instance_type, place.region)
    if f.zones == "any":
        return offered or [None]
    if not home:
        return [None]
    return [z for z in [own_zone, *f.zones] if not offered or z in offered]


def _unfit(stack, pool, cat, c: Candidate) -> str | None:
    """Why ``c`` cannot work for the pool, before anything is asked of the cloud (None: it can)."""
    cap = pool.failover.max_price_per_node_hour
    if c.price_per_node_hour is None:
        return f"no {c.market} price for {c.instance_type} in {c.region} in the catalog"
    if cap is not None and c.price_per_node_hour > cap:
        return f"${c.price_per_node_hour:,.2f}/node-hour is above failover.max_price_per_node_hour (${cap:,.2f})"
    it = cat.instance(c.provider, c.instance_type)
    moved = placed(pool, c)
    wanted = pool.interconnect
    prov = provider(c.provider)
    if wanted and moved.interconnect:
        fabric = prov.interconnects[wanted]
        if fabric and it.fabric != fabric:
            return f"{c.instance_type} has no {wanted}"
    elif wanted and provider(pool.provider).interconnects.get(wanted) and not it.fabric:
        return f"{c.instance_type} has no RDMA fabric to stand in for {wanted}"
    problems = prov.check_pool(stack, moved, it)
    return "; ".join(p.message for p in problems) or None


def _ranked(stack, pool, cat, alternatives: list[Candidate]) -> tuple[dict, dict]:
    """compare's ranking of the alternatives for the stack's workload ({key: cost to train}) and those
    the workload cannot run on ({key: why}); without a workload, the price ranks them."""
    keys = {(c.provider, c.region, c.instance_type, c.market): c.price_per_node_hour for c in alternatives}
    w = stack.workload
    if w is None or not alternatives:
        return keys, {}
    req = compare.Request(workload=workloads.get(w.name), epochs=w.epochs, tokens=w.tokens,
                          precision=w.precision or "mixed", batch_per_gpu=w.batch_per_gpu, nodes=[pool.nodes],
                          spot=pool.spot, only=[(p, r, i, pool.nodes, m == "spot", None) for p, r, i, m in keys])
    ranks, unfit = {}, {}
    for row in compare.compare(cat, req).rows:
        k = (row.provider, row.region, row.instance, row.market)
        if k not in keys:
            continue
        if row.feasible:
            ranks[k] = row.cost_to_train_usd
        else:
            unfit[k] = row.reason
    return ranks, unfit

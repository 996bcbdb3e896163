"""`gpufleet capacity find`: the reserved capacity a stack's pools could launch into, and the
capacity the clouds offer to sell for them, asked where each cloud has a read call for it.

For each cloud pool (or the one named), every place it may land (its own, and those its
``failover`` block allows, as `plan` lists them; ``clouds.candidates``) is reduced to one question
per (cloud, region, instance type): what the account holds there (AWS On-Demand Capacity
Reservations and Capacity Blocks, GCP reservations, Azure capacity reservation groups) and, on
AWS, the Capacity Block offerings for the pool's nodes over ``hours``. What is held can go into
the pool's ``reservations`` as the table shows it; an offering is bought with the cloud's own
command, which gpufleet prints and never runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gpufleet.clouds import candidates, inventory
from gpufleet.errors import InputError
from gpufleet.stacks import cloud_pools

# Capacity Blocks are sold in whole days up to 14 days, then in whole weeks up to 182 days
# (DescribeCapacityBlockOfferings CapacityDurationHours, API reference, read 2026-11)
DAY, WEEK, MAX_DAYS_BY_DAY, MAX_HOURS = 24, 168, 14, 182 * 24


@dataclass
class Found:
    """What the clouds hold or offer for one pool."""

    pool: str
    nodes: int
    asked: list[dict] = field(default_factory=list)  # {"provider", "region", "instance_type"} per question
    capacity: list = field(default_factory=list)  # clouds.base.Capacity, held ones first
    unread: dict[str, str] = field(default_factory=dict)  # "gcp us-central1" -> why it could not be asked

    def fits(self, c) -> bool:
        """Whether ``c`` holds (or sells) all the pool's nodes."""
        return c.instances >= self.nodes

    def to_dict(self) -> dict:
        return {"pool": self.pool, "nodes": self.nodes, "asked": self.asked,
                "capacity": [c.to_dict() | {"fits": self.fits(c)} for c in self.capacity], "unread": self.unread}


def check_hours(hours: int) -> None:
    """The durations the clouds sell (InputError, exit 2, for any other)."""
    whole_days = hours % DAY == 0 and DAY <= hours <= MAX_DAYS_BY_DAY * DAY
    whole_weeks = hours % WEEK == 0 and MAX_DAYS_BY_DAY * DAY < hours <= MAX_HOURS
    if not (whole_days or whole_weeks):
        raise InputError(f"--hours {hours} is not a duration Capacity Blocks are sold for",
                         "whole days up to 14 (24, 48, ... 336), then whole weeks up to 182 days (504, 672, ... 4368)")


def find(stack, cat, *, pool: str | None = None, hours: int = DAY, start: str | None = None,
         open_api: Callable[[str, list[str]], object] | None = None) -> list[Found]:
    """Each cloud pool's (or ``pool``'s) reserved and offered capacity, place by place."""
    check_hours(hours)
    pools = cloud_pools(stack, pool)
    questions = {p.name: _questions(stack, p, cat) for p in pools}
    wanted: dict[str, set[str]] = {}
    for qs in questions.values():
        for prov, region, _ in qs:
            wanted.setdefault(prov, set()).add(region)
    apis = {prov: (open_api or _open)(prov, sorted(regions)) for prov, regions in wanted.items()}
    out = []
    for p in pools:
        found = Found(p.name, p.nodes)
        for prov, region, itype in questions[p.name]:
            found.asked.append({"provider": prov, "region": region, "instance_type": itype})
            api = apis[prov]
            if isinstance(api, str):
                found.unread[f"{prov} {region}"] = api
                continue
            try:
                found.capacity += api.capacity(region, itype, p.nodes, hours, start)
            except Exception as e:  # noqa: BLE001 - CloudUnreadable and its kin: said per place, the rest still asked
                found.unread[f"{prov} {region}"] = getattr(e, "message", None) or str(e)
        found.capacity.sort(key=lambda c: (not c.held, not found.fits(c), c.upfront_usd or 0.0, c.provider, c.zone or ""))
        out.append(found)
    return out


def _questions(stack, pool, cat) -> list[tuple[str, str, str]]:
    """(cloud, region, instance type) of every place the pool may land, once each, in `plan`'s order."""
    seen: dict[tuple[str, str, str], None] = {}
    for c in candidates.for_pool(stack, pool, cat).ordered:
        seen.setdefault((c.provider, c.region, c.instance_type), None)
    return list(seen)


def _open(provider: str, regions: list[str]):
    """The cloud's API, or why it cannot be asked here (no credentials, no SDK, refused)."""
    return inventory.open_clouds([provider], required=False, regions={provider: regions}).api_or_why(provider)

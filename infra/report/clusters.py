"""`gpufleet report --clusters`: what the running clusters have cost so far, per cluster and per
provider, from `status` (``gpufleet.fleet.status.Report``: the registry merged with the clouds'
tags), with each cluster past its TTL marked. Costs accrue at a constant $/h from creation, so a
cluster's cost over time is a straight line from its start to now."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field


@dataclass
class ClusterCost:
    name: str
    state: str
    owner: str | None
    where: list[str]
    created_at: dt.datetime | None
    expires_at: dt.datetime | None
    usd_per_hour: float
    cost_so_far: float
    by_provider: dict[str, float]
    notes: list[str]
    past_ttl: bool
    start: dt.datetime  # when its cost began to accrue: the cost so far over its $/h, back from now

    def to_dict(self) -> dict:
        return {"cluster": self.name, "state": self.state, "usd_per_hour": round(self.usd_per_hour, 4),
                "cost_so_far_usd": round(self.cost_so_far, 2), "past_ttl": self.past_ttl,
                "by_provider": {p: round(c, 2) for p, c in self.by_provider.items()}}


@dataclass
class ClustersData:
    now: dt.datetime
    registry: str
    clusters: list[ClusterCost]
    checked: list[str]  # clouds asked
    unread: dict[str, str] = field(default_factory=dict)
    billed: object = None  # fleet.cost.CostReport, when the clouds' bills could be read: predicted against billed

    @property
    def by_provider(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for c in self.clusters:
            for p, v in c.by_provider.items():
                out[p] = out.get(p, 0.0) + v
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    @property
    def total(self) -> float:
        return sum(c.cost_so_far for c in self.clusters)

    @property
    def past_ttl(self) -> list[ClusterCost]:
        return [c for c in self.clusters if c.past_ttl]

    def to_dict(self) -> dict:
        return {"now": self.now.isoformat(), "registry": self.registry, "total_usd": round(self.total, 2),
                "by_provider_usd": {p: round(v, 2) for p, v in self.by_provider.items()},
                "past_ttl": [c.name for c in self.past_ttl], "clusters": [c.to_dict() for c in self.clusters],
                "checked": self.checked, "unread": self.unread,
                "billed": self.billed.to_dict() if self.billed is not None else None}


def _start(row, now: dt.datetime) -> dt.datetime:
    """Nodes launched before the cluster was recorded cost from their launch: the line starts where
    the cost so far, at the cluster's $/h, began."""
    start = row.created_at or now
    if row.usd_per_hour > 0:
        start = min(start, now - dt.timedelta(hours=row.cost_so_far / row.usd_per_hour))
    return start


def build(status, now: dt.datetime, billed=None) -> ClustersData:
    """From `status`'s report (its ``rows`` of ClusterStatus, ``registry``, ``checked``, ``unread``) and,
    when the bills were read, `gpufleet cost`'s report."""
    rows = [ClusterCost(r.name, r.state, r.owner, list(r.where), r.created_at, r.expires_at, r.usd_per_hour,
                        r.cost_so_far, dict(r.cost_by_provider), list(r.notes),
                        r.expires_at is not None and r.expires_at < now, _start(r, now))
            for r in status.rows]
    rows.sort(key=lambda c: (not c.past_ttl, -c.cost_so_far, c.name))
    return ClustersData(now, status.registry, rows, list(status.checked), dict(status.unread),
                        billed if billed is not None and any(r.billed for r in billed.rows) else None)

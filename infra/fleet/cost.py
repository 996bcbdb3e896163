"""`gpufleet cost [CLUSTER] [--since DATE]`: what the clouds billed gpufleet's clusters, per cluster and
line, against what `up` predicted for the same days.

Each cloud's bill is read by its ``billed`` (AWS Cost Explorer, the GCP billing export in BigQuery,
Azure Cost Management), all by the ``gpufleet:cluster`` tag. The prediction is the registry's (the
bill `up` predicted, every line), for the hours the cluster ran between ``since`` and the last day the
clouds' figures cover: billing lags by hours to a day, and the comparison stops where the bill does.
A cloud without credentials (or, for GCP, without a billing export table) is skipped and said; one
that could not be read (refused, the AWS tag not activated) is named and makes the command exit 1.
A cluster billed more than ``drift`` off its prediction is a warning naming the lines that differ most.

Predictions are in US dollars. A bill in another currency counts in them only at the rate the bill
itself gives (clouds.base.Billed), and says so; an amount without one is listed in its currency and
the cluster's bill is not held against its prediction at all, rather than against a part of it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from gpufleet.clouds import bill_lines, cloud, inventory
from gpufleet.clouds.base import Billed
from gpufleet.clouds.tags import time_or_none
from gpufleet.errors import CloudUnreadable, GpufleetError, InputError
from gpufleet.fleet import team
from gpufleet.providers import CLOUDS
from gpufleet.state.registry import ClusterRecord, Registry


@dataclass
class LineCost:
    line: str
    predicted: float | None  # None: nothing predicted (the cluster is not in the registry)
    billed: float

    @property
    def difference(self) -> float | None:
        return None if self.predicted is None else self.billed - self.predicted

    def to_dict(self) -> dict:
        d = self.difference
        return {"line": self.line, "predicted_usd": None if self.predicted is None else round(self.predicted, 2),
                "billed_usd": round(self.billed, 2), "difference_usd": None if d is None else round(d, 2)}


@dataclass
class ClusterCost:
    cluster: str
    lines: list[LineCost]
    through: str | None  # the last day the clouds' figures cover (None: nothing billed yet)
    providers: list[str]
    estimated: bool = False  # a cloud says some figure may still change
    notes: list[str] = field(default_factory=list)
    converted: dict[str, float] = field(default_factory=dict)  # currency -> amount counted at the bill's own rate
    unconverted: dict[str, float] = field(default_factory=dict)  # currency -> amount the bill gives no rate for

    @property
    def predicted(self) -> float | None:
        known = [x.predicted for x in self.lines if x.predicted is not None]
        return sum(known) if known else None

    @property
    def billed(self) -> float:
        return sum(x.billed for x in self.lines)

    @property
    def drift(self) -> float | None:
        """Billed against predicted; None when an amount could not be counted in dollars."""
        p = self.predicted
        return None if not p or self.through is None or self.unconverted else self.billed / p - 1

    def widest(self, n: int = 3) -> list[LineCost]:
        """The lines that differ most, in dollars."""
        return sorted((x for x in self.lines if x.difference), key=lambda x: -abs(x.difference))[:n]

    def to_dict(self) -> dict:
        return {"cluster": self.cluster, "through": self.through, "providers": self.providers,
                "predicted_usd": None if self.predicted is None else round(self.predicted, 2),
                "billed_usd": round(self.billed, 2), "drift": None if self.drift is None else round(self.drift, 4),
                "estimated": self.estimated, "lines": [x.to_dict() for x in self.lines], "notes": self.notes,
                "converted": {k: round(v, 2) for k, v in self.converted.items()},
                "unconverted": {k: round(v, 2) for k, v in self.unconverted.items()}}


@dataclass
class CostReport:
    since: dt.date
    until: dt.date  # exclusive
    drift: float  # the share beyond which a difference is a warning
    rows: list[ClusterCost] = field(default_factory=list)
    read: list[str] = field(default_factory=list)  # clouds whose bill was read
    skipped: dict[str, str] = field(default_factory=dict)  # no credentials or settings: not this user's
    failed: dict[str, str] = field(default_factory=dict)  # should have been read, and could not be
    hints: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def drifted(self) -> list[ClusterCost]:
        return [r for r in self.rows if r.drift is not None and abs(r.drift) > self.drift]

    def to_dict(self) -> dict:
        return {"since": self.since.isoformat(), "until": self.until.isoformat(), "drift_threshold": self.drift,
                "clusters": [r.to_dict() for r in self.rows], "read": self.read, "skipped": self.skipped,
                "unread": self.failed, "hints": self.hints, "notes": self.notes,
                "drifted": [r.cluster for r in self.drifted]}


def run(cluster: str | None = None, since: dt.date | None = None, *, providers: list[str] | None = None,
        settings: dict | None = None, drift: float = 0.15, registry: Registry | None = None,
        now: dt.datetime | None = None, billed=None) -> CostReport:
    """Every cluster's bill (or one's) since ``since`` (default: the first of this month, UTC).
    ``billed(provider, since, until, clusters, settings)`` reads one cloud (default: its own)."""
    now = now or dt.datetime.now(dt.timezone.utc)
    since = since or now.date().replace(day=1)
    until = now.date() + dt.timedelta(days=1)
    if since >= until:
        raise InputError(f"--since {since.isoformat()} is in the future", "give a day up to today, e.g. 2026-11-01")
    reg = registry or team.registry()
    records = {r.name: r for r in reg.list() if cluster is None or r.name == cluster}
    # every cloud when no cluster is recorded: one brought up elsewhere is billed too, and a bill
    # not read is not "nothing billed"
    wanted = providers or (sorted({p for r in records.values() for p in r.clouds}) if records else list(CLOUDS))
    out = CostReport(since, until, drift)
    rows: list[Billed] = []
    for p in wanted:
        try:
            got = (billed or _billed)(p, since, until, [cluster] if cluster else None, settings or {})
        except InputError:
            raise
        except CloudUnreadable as e:
            out.failed[p] = e.reason
            out.hints[p] = e.hint or ""
            continue
        except GpufleetError as e:  # no credentials, no SDK, no billing table: not this user's cloud
            if providers:
                raise  # named with --provider: the user meant it (exit 2, with the way to set it up)
            out.skipped[p] = inventory.why_not(p, e)
            continue
        out.read.append(p)
        rows += got.rows
        out.notes += got.notes
    names = sorted({r.cluster for r in rows} | set(records))
    out.rows = [_cluster(n, [r for r in rows if r.cluster == n], records.get(n), since, now) for n in names]
    return out


def _billed(provider: str, since, until, clusters, settings):
    return cloud(provider).billed(since, until, clusters, settings)


def _cluster(name: str, billed: list[Billed], rec: ClusterRecord | None, since: dt.date,
             now: dt.datetime) -> ClusterCost:
    providers = sorted({b.provider for b in billed} | set(rec.clouds if rec else ()))
    through = min((max(b.through for b in billed if b.provider == p) for p in {b.provider for b in billed}),
                  default=None)
    merge = any(b.line == bill_lines.NETWORK for b in billed)  # a bill that keeps NAT and addresses together
    spent: dict[str, float] = {}
    row = ClusterCost(name, [], through, providers, any(b.estimated for b in billed))
    for b in billed:
        if b.currency != "USD":
            kept = row.unconverted if b.usd is None else row.converted
            kept[b.currency] = kept.get(b.currency, 0.0) + (b.amount or 0.0)
        if b.usd is None:
            continue
        key = bill_lines.NETWORK if merge and b.line in bill_lines.NETWORK_PARTS else b.line
        spent[key] = spent.get(key, 0.0) + b.usd
    for currency, amount in sorted(row.converted.items()):
        row.notes.append(f"{amount:,.2f} {currency} billed, counted in US dollars at the bill's own rate")
    for currency, amount in sorted(row.unconverted.items()):
        row.notes.append(f"{amount:,.2f} {currency} billed with no US dollar rate in the bill: not counted, and "
                         "the bill is not held against the prediction (in US dollars)")
    if rec is None:
        row.lines = [LineCost(k, None, v) for k, v in sorted(spent.items())]
        row.notes.append("not in the registry (taken down, or brought up elsewhere): nothing predicted to compare")
        return row
    predicted = _predicted(rec, since, through, now, merge)
    row.lines = [LineCost(k, predicted.get(k, 0.0), spent.get(k, 0.0)) for k in sorted(set(predicted) | set(spent))]
    if not billed:
        row.notes.append("nothing billed yet: the clouds' billing lags hours to a day behind")
    if not rec.predicted:
        row.notes.append("brought up before gpufleet predicted every line: only its instances are predicted")
    return row


def _predicted(rec: ClusterRecord, since: dt.date, through: str | None, now: dt.datetime,
               merge: bool) -> dict[str, float]:
    """What `up` predicted for the hours the cluster ran from ``since`` to the end of ``through``."""
    start = dt.datetime.combine(since, dt.time(), dt.timezone.utc)
    end = min(now, dt.datetime.combine(dt.date.fromisoformat(through), dt.time(), dt.timezone.utc)
              + dt.timedelta(days=1)) if through else now
    created = time_or_none(rec.created_at) or start
    hours = max(0.0, (end - max(start, created)).total_seconds() / 3600)
    p = rec.predicted or {"usd_per_hour": {bill_lines.INSTANCES: rec.usd_per_hour or 0.0}}
    ttl = p.get("ttl_hours") or 0
    out: dict[str, float] = {}
    for line, usd in (p.get("usd_per_hour") or {}).items():
        key = bill_lines.NETWORK if merge and line in bill_lines.NETWORK_PARTS else line
        out[key] = out.get(key, 0.0) + usd * hours
    for line, usd in (p.get("usd_once") or {}).items():
        key = bill_lines.NETWORK if merge and line in bill_lines.NETWORK_PARTS else line
        out[key] = out.get(key, 0.0) + usd * (min(1.0, hours / ttl) if ttl else 0.0)
    return out

"""Which tagged resources the reaper takes: expired ones, and orphans of clusters nobody knows.

It works from the clouds' tags alone (``lifecycle.inventory``): a resource is *expired* when
its ``gpufleet:expires-at`` has passed, an *orphan* when its ``gpufleet:cluster`` is in
neither the local registry nor the Pulumi state. Untagged resources are never listed, so
never touched. A resource whose tags cannot be read is reported and left alone.

Orphans are held back while they may be an `up` still running somewhere else: younger than
the grace period, of unknown age, or when the Pulumi state could not be read.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from gpufleet.errors import InputError
from gpufleet.lifecycle.resources import Resource
from gpufleet.providers.common import format_expiry


@dataclass
class Finding:
    resource: Resource
    reason: str  # expired | orphan | kept | unreadable
    detail: str

    def to_dict(self) -> dict:
        return {**self.resource.to_dict(), "reason": self.reason, "detail": self.detail}


@dataclass
class Selection:
    reap: list[Finding] = field(default_factory=list)
    kept: list[Finding] = field(default_factory=list)  # would qualify, held back (young or unknown-age orphans)
    unreadable: list[Finding] = field(default_factory=list)  # tags gpufleet cannot read: never deleted

    @property
    def usd_per_hour(self) -> float:
        return sum(f.resource.usd_per_hour or 0.0 for f in self.reap)


def cluster_ages(resources: list[Resource], now: dt.datetime) -> dict[str, dt.timedelta]:
    """Per cluster, the age of its oldest resource that says when it was created."""
    first: dict[str, dt.datetime] = {}
    for r in resources:
        if r.created_at and r.cluster and (r.cluster not in first or r.created_at < first[r.cluster]):
            first[r.cluster] = r.created_at
    return {c: now - t for c, t in first.items()}


def age_of(r: Resource, now: dt.datetime, ages: dict[str, dt.timedelta]) -> dt.timedelta | None:
    """Its own age, else its cluster's (security groups and subnets do not say when they were made)."""
    return r.age(now) or ages.get(r.cluster)


def select(resources: list[Resource], *, known: set[str], state_read: bool, now: dt.datetime,
           older_than: dt.timedelta | None = None, clusters: list[str] | None = None,
           grace: dt.timedelta = dt.timedelta(minutes=30)) -> Selection:
    """Sort tagged resources into what to reap, what to keep for now, and what to fix by hand.

    ``known``: clusters in the registry or the Pulumi state; ``state_read``: whether the
    Pulumi state could be consulted; ``older_than``: only resources at least this old;
    ``clusters``: only these clusters (naming a cluster also lifts the grace period).
    """
    sel = Selection()
    ages = cluster_ages(resources, now)
    for r in resources:
        if clusters and r.cluster not in clusters:
            continue
        age = age_of(r, now, ages)
        if older_than is not None and (age is None or age < older_than):
            continue
        try:
            expires = r.expires_at()
        except InputError as e:
            sel.unreadable.append(Finding(r, "unreadable", f"{e.message}; not touched. Fix the tag "
                                          f"gpufleet:expires-at on {r.id} ({e.hint}) or delete it by hand"))
            continue
        if expires is not None and expires <= now:
            sel.reap.append(Finding(r, "expired", f"expired {_ago(now - expires)} ago ({format_expiry(expires)})"))
            continue
        if r.cluster in known:
            continue
        why = f"cluster {r.cluster!r} is in neither the registry nor the Pulumi state"
        if clusters:
            sel.reap.append(Finding(r, "orphan", why))
        elif not state_read:
            sel.kept.append(Finding(r, "kept", f"{why}, but the Pulumi state could not be read: kept until it "
                                    "expires (or name it with --cluster)"))
        elif age is None:
            sel.kept.append(Finding(r, "kept", f"{why}; its age is unknown: kept until it expires (or name it "
                                    "with --cluster)"))
        elif age < grace:
            sel.kept.append(Finding(r, "kept", f"{why}; only {_ago(age)} old, maybe an `up` still running "
                                    f"elsewhere: kept for the grace period ({_ago(grace)})"))
        else:
            sel.reap.append(Finding(r, "orphan", f"{why} ({_ago(age)} old)"))
    return sel


def _ago(d: dt.timedelta) -> str:
    s = d.total_seconds()
    if s < 3600:
        return f"{s / 60:.0f} min"
    if s < 172800:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} d"


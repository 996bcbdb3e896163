"""`gpufleet reap`: expired resources, and orphans of clusters nobody knows, found by tag and deleted;
and golden images whose ``gpufleet:expires-at`` has passed (``held_images``).

``select`` decides, from the clouds' tags alone (``clouds.inventory``), what to reap: a resource is *expired* when
its ``gpufleet:expires-at`` has passed, an *orphan* when its ``gpufleet:cluster`` is in
neither the local registry nor the Pulumi state. Untagged resources are never listed, so
never touched. A resource whose tags cannot be read is reported and left alone.

Orphans are held back while they may be an `up` still running somewhere else: younger than
the grace period, of unknown age, or when the Pulumi state could not be read.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from gpufleet.clouds import held_images, inventory
from gpufleet.clouds.resources import Resource, price
from gpufleet.clouds.tags import format_expiry
from gpufleet.engine import automation
from gpufleet.errors import InputError
from gpufleet.fleet import budgets, team
from gpufleet.state.registry import Registry


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
        if held_images.is_builder(r.tags) and not clusters:  # no Pulumi state or registry knows an image build
            own = r.age(now)  # its own: a stack's builds share their cluster, each builder is of its build
            if own is not None and own >= held_images.BUILD_LIMIT:
                sel.reap.append(Finding(r, "orphan", f"an image build's builder {_ago(own)} old: no build runs "
                                        f"{_ago(held_images.BUILD_LIMIT)}, its Packer was stopped"))
            else:
                old = f"{_ago(own)} old" if own is not None else "of unknown age"
                sel.kept.append(Finding(r, "kept", f"an image build's builder, {old}: kept for "
                                        f"{_ago(held_images.BUILD_LIMIT)} while its build may run (or name its "
                                        "cluster with --cluster)"))
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


@dataclass
class Reaped:
    """What one `reap` saw, chose and did."""

    clouds: inventory.Clouds
    found: list[Resource]
    unread: dict[str, str]  # clouds and places that should have been read and were not, and why
    state_read: bool  # whether the Pulumi state could be consulted
    selection: Selection
    outcomes: list = field(default_factory=list)  # inventory.Outcome of each deletion asked for
    dry_run: bool = True
    images: list = field(default_factory=list)  # held_images.Held: expired golden images (and unreadable ones)
    removed: list = field(default_factory=list)  # held_images.Removed of each image deletion asked for
    past_budget: list = field(default_factory=list)  # budgets.Standing over their month: listed, never reaped

    @property
    def expired_images(self) -> list:
        return [h for h in self.images if h.state == "expired"]

    @property
    def failed(self) -> list:
        return [o for o in self.outcomes if not o.ok]

    @property
    def trouble(self) -> bool:
        """Something could not be read or deleted (or, when deleting, a tag could not be read): cron must notice."""
        return bool(self.failed or self.unread or any(not r.ok for r in self.removed)
                    or (not self.dry_run and (self.selection.unreadable or len(self.images) > len(self.expired_images))))

    def to_dict(self) -> dict:
        sel = self.selection
        return {"dry_run": self.dry_run, "checked": sorted(self.clouds.open), "skipped": self.clouds.skipped,
                "unread": self.unread, "pulumi_state_read": self.state_read, "found": len(self.found),
                "reap": [f.to_dict() for f in sel.reap], "usd_per_hour": round(sel.usd_per_hour, 4),
                "kept": [f.to_dict() for f in sel.kept], "unreadable": [f.to_dict() for f in sel.unreadable],
                "deleted": [o.to_dict() for o in self.outcomes if o.ok], "failed": [o.to_dict() for o in self.failed],
                "images": [h.to_dict() for h in self.images],
                "images_removed": [r.to_dict() for r in self.removed],
                "past_budget": [s.to_dict() for s in self.past_budget]}


def reap(cat, *, yes: bool = False, older_than: dt.timedelta | None = None, clusters: list[str] | None = None,
         providers: list[str] | None = None, regions: list[str] | None = None,
         grace: dt.timedelta = dt.timedelta(minutes=30), registry: Registry | None = None,
         on_region=None, on_delete=None, now: dt.datetime | None = None,
         budget_list: list | None = None) -> Reaped:
    """Find what to reap on every cloud with credentials (``providers``: only these, and they must
    open); with ``yes`` delete it in dependency order and mark the clusters whose every resource
    went as ``reaped`` in the registry. Clusters past a budget this month are listed, never reaped:
    spending is a decision for a person (`gpufleet down`)."""
    reg = registry or team.registry()
    clouds = inventory.open_clouds(providers, required=bool(providers), regions=regions or None)
    found, places = inventory.collect(clouds, cluster=clusters[0] if clusters and len(clusters) == 1 else None,
                                      on_region=on_region)
    price(found, cat)
    when = now or dt.datetime.now(dt.timezone.utc)
    images: list = []
    if not clusters:  # golden images belong to no cluster: asked for when reaping is not limited to some
        held, image_places = held_images.held(clouds)
        places.update(image_places)
        images = [h for h in held_images.judge(held, when) if h.state in ("expired", "unreadable")
                  and (older_than is None or (h.created is not None and when - h.created >= older_than))]
    in_state = automation.state_stacks()
    known = {c.name for c in reg.list()} | (in_state or set())
    sel = select(found, known=known, state_read=in_state is not None, now=when,
                 older_than=older_than, clusters=clusters, grace=grace)
    out = Reaped(clouds, found, clouds.unread(places), in_state is not None, sel, dry_run=not yes, images=images)
    out.past_budget = [s for s in budgets.standings(budgets.configured() if budget_list is None else budget_list,
                                                    reg.list(), when) if s.over]
    if yes and sel.reap:
        out.outcomes = inventory.delete([f.resource for f in sel.reap], clouds, on_progress=on_delete)
        _mark_reaped(reg, out.outcomes)
    if yes and out.expired_images:
        out.removed = held_images.remove(clouds, [h.image for h in out.expired_images])
    return out


def _mark_reaped(reg: Registry, outcomes) -> None:
    """A registry cluster whose every found resource was reaped is marked so; `down` then clears it."""
    by: dict[str, list] = {}
    for o in outcomes:
        by.setdefault(o.resource.cluster, []).append(o.ok)
    for name, oks in by.items():
        if all(oks):
            reg.set_state(name, "reaped")  # a no-op for a cluster the registry does not have

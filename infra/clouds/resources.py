"""What the clouds report as a gpufleet cluster's resources, in one shape for every cloud.

The clouds' tags are the truth: every resource gpufleet creates carries ``gpufleet:cluster``,
``gpufleet:stack``, ``gpufleet:pool``, ``gpufleet:owner`` and ``gpufleet:expires-at`` (GCP:
the labels ``gpufleet-cluster`` ...). Each cloud's API (``clouds.<cloud>.api``) lists
resources by those tags and deletes them; this module holds what they share: the resource
record, the order in which kinds are deleted, hourly prices, and the loops of one-by-one calls.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from gpufleet.clouds import cloud
from gpufleet.clouds.tags import TAG_PREFIX, format_expiry, parse_expiry
from gpufleet.errors import InputError, did_you_mean

# Kinds in the order they are deleted: what uses a thing goes before the thing. Deletion
# waits for one rank to be gone before the next starts.
DELETE_ORDER: dict[str, int] = {
    "instance": 0, "scale-set": 0,
    "file-system": 1, "bucket": 1, "fleet": 1,  # an instant EC2 Fleet: once its instances are terminated
    "nat-gateway": 2, "router": 2,
    "network-interface": 3, "volume": 3, "disk": 3,
    "address": 4, "placement-group": 4, "launch-template": 4, "key-pair": 4, "identity": 4,
    "security-group": 5, "firewall": 5,
    "subnet": 6, "route-table": 6,
    "internet-gateway": 7,
    "network": 8,
    "resource-group": 9,  # Azure: only once empty of everything, tagged or not
}

HOURS_PER_MONTH = 730  # the clouds' own convention for monthly storage prices


@dataclass
class Resource:
    """One cloud resource that carries gpufleet tags."""

    provider: str
    region: str
    kind: str  # a key of DELETE_ORDER
    id: str
    tags: dict[str, str]  # gpufleet:* keys (GCP labels are mapped back to them)
    name: str = ""
    zone: str | None = None
    state: str | None = None
    machine: str | None = None  # instance type, machine type or VM size
    count: int = 1  # VMs in a scale set
    spot: bool = False
    size_gb: float | None = None
    disk_type: str | None = None
    created_at: dt.datetime | None = None
    ref: dict = field(default_factory=dict)  # what the cloud module needs to delete it
    usd_per_hour: float | None = None
    price_note: str = ""

    @property
    def cluster(self) -> str | None:
        return self.tags.get(TAG_PREFIX + "cluster")

    @property
    def owner(self) -> str | None:
        return self.tags.get(TAG_PREFIX + "owner")

    @property
    def pool(self) -> str | None:
        return self.tags.get(TAG_PREFIX + "pool")

    @property
    def where(self) -> str:
        return f"{self.provider}/{self.zone or self.region}"

    @property
    def rank(self) -> int:
        return DELETE_ORDER[self.kind]

    @property
    def key(self) -> tuple[str, str, str, str]:
        """Unique across clouds and scopes (a GCP regional and a global address may share a name)."""
        return (self.provider, self.region, self.kind, self.id)

    def expires_at(self) -> dt.datetime | None:
        """The ``expires-at`` tag as a time; None when there is none; InputError when unreadable."""
        raw = self.tags.get(TAG_PREFIX + "expires-at")
        return parse_expiry(raw) if raw else None

    def age(self, now: dt.datetime) -> dt.timedelta | None:
        return now - self.created_at if self.created_at else None

    def label(self) -> str:
        return f"{self.kind} {self.id}" + (f" ({self.name})" if self.name and self.name != self.id else "")

    def to_dict(self) -> dict:
        return {"provider": self.provider, "region": self.region, "zone": self.zone, "kind": self.kind, "id": self.id,
                "name": self.name, "state": self.state, "machine": self.machine, "count": self.count,
                "spot": self.spot, "cluster": self.cluster, "owner": self.owner,
                "expires_at": self.tags.get(TAG_PREFIX + "expires-at"),
                "created_at": format_expiry(self.created_at) if self.created_at else None, "usd_per_hour": self.usd_per_hour,
                "price_note": self.price_note or None}



def price(resources: list[Resource], cat) -> None:
    """Fill in ``usd_per_hour``: VMs from the catalog (same region, else the nearest known
    price, said so), disks and network leftovers from each cloud's ``leftover_prices``."""
    cheapest: dict[tuple[str, str, str], tuple[float, str]] = {}
    for o in cat.offers():
        k = (o.provider, o.instance.name, o.market)
        if k not in cheapest or o.usd_per_hour < cheapest[k][0]:
            cheapest[k] = (o.usd_per_hour, o.region)
    for r in resources:
        if r.kind in ("instance", "scale-set") and r.machine:
            market = "spot" if r.spot else "ondemand"
            offer = cat.offer(r.provider, r.region, r.machine, market)
            if offer is not None:
                r.usd_per_hour = offer.usd_per_hour * r.count
            elif (r.provider, r.machine, market) in cheapest:
                p, where = cheapest[(r.provider, r.machine, market)]
                r.usd_per_hour, r.price_note = p * r.count, f"priced as in {where}"
            elif r.spot and cat.offer(r.provider, r.region, r.machine, "ondemand") is not None:
                r.usd_per_hour = cat.offer(r.provider, r.region, r.machine, "ondemand").usd_per_hour * r.count
                r.price_note = "no spot price in the catalog: on-demand price (an upper bound)"
            else:
                r.price_note = f"{r.machine} is not in the catalog"
        elif r.kind in ("volume", "disk") and r.size_gb:
            per_gb = cloud(r.provider).leftover_prices.get("disk", {}).get(r.disk_type or "")
            if per_gb is not None:
                r.usd_per_hour = r.size_gb * per_gb / HOURS_PER_MONTH
        elif r.kind in cloud(r.provider).leftover_prices.get("fixed", {}):
            r.usd_per_hour = cloud(r.provider).leftover_prices["fixed"][r.kind]


def pick_regions(provider: str, names: list[str], wanted: list[str] | None, hint: str, what: str = "") -> list[str]:
    """``wanted`` (in order, once each) after checking each is one of the cloud's ``names``;
    every name when nothing is wanted. A region that does not exist is bad input."""
    for r in wanted or []:
        if r not in names:
            s = did_you_mean(r, names)
            raise InputError(f"{provider} has no region {r!r}{what}", f"did you mean {s!r}?" if s else hint)
    return list(dict.fromkeys(wanted)) if wanted else sorted(names)


def delete_each(resources: list[Resource], delete, classify) -> dict[str, tuple[str, str]]:
    """Ask for each deletion in turn: {id: ("deleted", "") or classify(error)}. ``delete(r)``
    may itself return a (status, message) to answer without calling the cloud."""
    out = {}
    for r in resources:
        try:
            out[r.id] = delete(r) or ("deleted", "")
        except Exception as e:  # noqa: BLE001 - the cloud's answer, classified
            out[r.id] = classify(e)
    return out


def present_each(resources: list[Resource], get, classify) -> dict[str, str]:
    """Of ``resources``, those still there: {id: state}. ``get(r)`` returns a state or raises."""
    left = {}
    for r in resources:
        try:
            left[r.id] = get(r) or "present"
        except Exception as e:  # noqa: BLE001
            if classify(e)[0] != "gone":
                left[r.id] = "unknown"
    return left

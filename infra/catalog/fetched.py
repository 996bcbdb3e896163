"""What the price fetchers of the clouds (``clouds.<cloud>.prices``) return, and their helpers.

Each fetcher returns a ``Fetched``: ``FetchedPrice`` rows with their provenance (API, region,
SKU id, fetched-at; the parts a price is made of where the provider prices them separately),
``InstanceFacts`` as the provider's own instance APIs state them (GPU model and count,
vCPUs, memory, EFA/InfiniBand, network, zones per region) and notes; or it raises
``FetchError`` for its provider alone. Nothing here writes the catalog (``catalog.store``
checks and stores). AWS: Price List, spot price history, instance types and offerings;
GCP: Cloud Billing Catalog, machine and accelerator types; Azure: Retail Prices, resource SKUs.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, fields

from gpufleet.errors import GpufleetError


class FetchError(GpufleetError):
    """One provider's prices could not be fetched or read; the others are unaffected."""

    def __init__(self, provider: str, message: str, hint: str | None = None):
        self.provider = provider
        super().__init__(f"{provider}: {message}", hint)


@dataclass(frozen=True)
class FetchedPrice:
    provider: str
    item: str  # instance type / VM size; for separately priced parts, a machine type or gpu:<GPU>
    region: str
    market: str  # ondemand | spot
    usd_per_hour: float
    api: str  # which API said so
    sku_id: str  # the provider's id of the priced SKU / meter ("+"-joined when made of parts)
    fetched_at: str  # ISO 8601 UTC
    parts: tuple[dict, ...] = ()  # {"what", "sku_id", "usd_per_hour"} when the provider prices parts

    @classmethod
    def from_dict(cls, d: dict) -> FetchedPrice:
        d = _known(cls, d)
        return cls(**{**d, "parts": tuple(d.get("parts") or ())})


@dataclass(frozen=True)
class InstanceFacts:
    """What a provider's own instance API says about one instance type (None: it does not say)."""

    provider: str
    item: str
    api: str
    fetched_at: str
    gpu: str | None = None  # the catalog's GPU name, mapped from the provider's
    gpu_count: int | None = None
    gpu_memory_gib: float | None = None
    vcpus: int | None = None
    memory_gib: float | None = None
    efa: bool | None = None
    infiniband: bool | None = None
    network: str | None = None
    zones: dict[str, list[str]] = field(default_factory=dict)  # region -> zones offering it

    @classmethod
    def from_dict(cls, d: dict) -> InstanceFacts:
        return cls(**_known(cls, d))


def _known(cls, d: dict) -> dict:
    """``d`` less the keys ``cls`` has no field for (a store written by another version)."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in d.items() if k in names}


@dataclass
class Fetched:
    prices: list[FetchedPrice]
    facts: list[InstanceFacts] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what was left out, and why


def stamp(now: dt.datetime | None = None) -> str:
    return (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")


def retry_after(value: str | None, default: float) -> float:
    """Seconds from a Retry-After header (seconds form), else ``default``."""
    try:
        return max(0.0, float(value)) if value is not None else default
    except ValueError:
        return default


def missing_note(provider_word: str, names) -> list[str]:
    """A note naming what the provider offers that the catalog lacks (empty when nothing)."""
    names = sorted(set(names))
    if not names:
        return []
    shown = ", ".join(names[:25]) + (f" and {len(names) - 25} more" if len(names) > 25 else "")
    return [f"{len(names)} {provider_word} the catalog lacks (add them to instances.csv to compare them): {shown}"]

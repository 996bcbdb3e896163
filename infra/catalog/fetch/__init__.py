"""Fetchers that rebuild the catalog's prices from the providers' own pricing APIs.

Each fetcher returns ``FetchedPrice`` rows with their provenance (API, region, SKU id,
fetched-at) or raises ``FetchError`` for its provider alone; nothing here writes the
catalog (``catalog.refresh`` checks and stores them). So far: Azure (Retail Prices) and AWS
(Price List, spot price history, instance facts); GCP is not yet.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.errors import GpufleetError


class FetchError(GpufleetError):
    """One provider's prices could not be fetched or read; the others are unaffected."""

    def __init__(self, provider: str, message: str, hint: str | None = None):
        self.provider = provider
        super().__init__(f"{provider}: {message}", hint)


@dataclass(frozen=True)
class FetchedPrice:
    provider: str
    item: str  # instance type / VM size
    region: str
    market: str  # ondemand | spot
    usd_per_hour: float
    api: str  # which API said so
    sku_id: str  # the provider's id of the priced SKU / meter
    fetched_at: str  # ISO 8601 UTC
    gpu_count: int | None = None  # what the provider's own instance facts say, when it says

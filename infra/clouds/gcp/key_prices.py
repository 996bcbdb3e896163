"""GCP prices with an API key only: the Cloud Billing Catalog's SKUs priced onto the catalog's machine shapes.

The Cloud Billing Catalog is public data read with an API key instead of credentials: ``GET
https://cloudbilling.googleapis.com/v1/services/SERVICE_ID/skus?key=API_KEY`` ("Before you can
use the Cloud Billing Catalog API, you'll need to enable the Cloud Billing API and get an API
key", docs.cloud.google.com/billing/v1/how-tos/catalog-api, read 2026-11). Compute Engine's
machine and accelerator types take OAuth credentials only, so here a machine's vCPUs, memory and
GPUs are the catalog's and its regions and zones are those the catalog prices it in; the SKUs,
paging and pricing are ``prices``' own. The key comes from ``GPUFLEET_GCP_API_KEY`` (restrict it
to the Cloud Billing API).
"""

from __future__ import annotations

import datetime as dt
import os

import requests

from gpufleet.catalog.fetched import Fetched, FetchError, stamp
from gpufleet.clouds.gcp import prices
from gpufleet.clouds.gcp.prices import FLAGSHIPS, Machine  # noqa: F401 - the refresh reads FLAGSHIPS here

KEY_ENV = "GPUFLEET_GCP_API_KEY"


def shapes(cat) -> tuple[dict[str, Machine], dict[str, tuple[int, dict[str, list[str]]]]]:
    """The catalog's GCP machine types and separately attached GPUs as ``prices.build`` takes
    the Compute API's: shapes from the instance table, regions and zones from the price rows."""
    where: dict[str, dict[str, set[str]]] = {}
    for p in cat.prices:
        if p.provider == "gcp" and not p.quote:
            where.setdefault(p.item, {}).setdefault(p.region, set()).update(p.zones or cat.region_zones("gcp", p.region))
    zones = {item: {r: sorted(z) for r, z in by_region.items()} for item, by_region in where.items()}
    mts: dict[str, Machine] = {}
    accs: dict[str, tuple[int, dict[str, list[str]]]] = {}
    for (provider, _), it in sorted(cat.instances.items()):
        if provider != "gcp":
            continue
        bundled = it.gpu_attach == "bundled"
        mts.setdefault(it.base_machine, Machine(it.vcpus, it.memory_gib, {it.gpu: it.gpu_count} if bundled else {},
                                                zones.get(it.base_machine, {})))
        if not bundled:
            most, _ = accs.get(it.gpu, (0, {}))
            accs[it.gpu] = (max(most, it.gpu_count), zones.get(f"gpu:{it.gpu}", {}))
    return mts, accs


def fetch(cat, regions: list[str], *, key: str, now: dt.datetime | None = None, sleep=None, progress=None) -> Fetched:
    """Every catalog GCP machine type priced in ``regions`` from the SKUs an API key reads."""
    session = requests.Session()
    session.params = {"key": key}  # merged into each page's query by requests
    mts, accs = shapes(cat)
    got = prices.build(cat, prices.all_skus(session, sleep=sleep, progress=progress), mts, accs, regions, stamp(now))
    # the shapes were the catalog's, not the API's: nothing here is a fact the provider said
    got.notes.append("with an API key: the SKU prices are Google's, the machine shapes and zones the catalog's "
                     "(machine types need credentials)")
    return Fetched(got.prices, [], got.notes)


def for_catalog(cat, progress=None) -> Fetched:
    key = os.environ.get(KEY_ENV, "").strip()
    if not key:
        raise FetchError("gcp", f"no API key for the Cloud Billing Catalog ({KEY_ENV} is not set)",
                         "create an API key (Google Cloud console, APIs & Services > Credentials), restrict it to the "
                         f"Cloud Billing API and set {KEY_ENV}; or refresh without --public, with credentials")
    return fetch(cat, sorted(cat.regions.get("gcp", {})), key=key, progress=progress)

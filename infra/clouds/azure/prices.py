"""Azure VM prices from the public Retail Prices REST API (no credentials needed).

``GET https://prices.azure.com/api/retail/prices?api-version=2023-01-01-preview&meterRegion='primary'&$filter=...``
answers ``{"Items": [...], "NextPageLink": ..., "Count": n}``; each item has ``armSkuName``,
``armRegionName``, ``skuName`` (``... Spot`` / ``... Low Priority``), ``productName`` (``...
Windows`` for Windows meters), ``type`` (``Consumption``, ``Reservation``,
``DevTestConsumption``), ``unitOfMeasure`` (``1 Hour``), ``retailPrice``, ``currencyCode``,
``skuId``, ``effectiveStartDate``.
https://learn.microsoft.com/rest/api/cost-management/retail-prices/azure-retail-prices

Pages are followed through ``NextPageLink``; a 429 or 5xx answer is retried after its
``Retry-After`` (capped); a page that is not the documented JSON fails the whole fetch
(a partial price list must not replace a whole one). ``GPUFLEET_AZURE_PRICES_ENDPOINT``
replaces the endpoint.

Where Azure credentials exist, azure-mgmt-compute's resource SKUs (``GET
/subscriptions/{id}/providers/Microsoft.Compute/skus?$filter=location eq '<region>'``) add
what each size is: ``capabilities`` (``vCPUs``, ``MemoryGB``, ``GPUs``, ``RdmaEnabled``) and
the zones of each region it is offered in (``locationInfo[].zones``, less any
``restrictions`` for this subscription). Without credentials the prices still update and the
result says the capabilities were not checked.
https://learn.microsoft.com/rest/api/compute/resource-skus/list
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request

from gpufleet.catalog.fetched import Fetched, FetchedPrice, FetchError, InstanceFacts, missing_note, retry_after, stamp
from gpufleet.clouds.azure.sdk import load
from gpufleet.errors import CredentialsError, SdkMissing

ENDPOINT = "https://prices.azure.com/api/retail/prices"
API_VERSION = "2023-01-01-preview"
API = "azure-retail-prices"
SKUS_API = "azure-resource-skus"


def odata_filter(skus: list[str], regions: list[str] | None = None) -> str:
    """Linux consumption meters of the VM sizes asked for (OData values are case-sensitive)."""
    parts = ["serviceName eq 'Virtual Machines'", "priceType eq 'Consumption'",
             "(" + " or ".join(f"armSkuName eq '{s}'" for s in skus) + ")"]
    if regions:
        parts.append("(" + " or ".join(f"armRegionName eq '{r}'" for r in regions) + ")")
    return " and ".join(parts)


def pages(url: str, *, max_pages: int = 1000, retries: int = 5, max_wait: float = 60.0, sleep=None):
    """Yield each page's ``Items``, following ``NextPageLink``."""
    sleep = sleep or time.sleep
    n = 0
    while url:
        n += 1
        if n > max_pages:
            raise FetchError("azure", f"more than {max_pages} pages of prices; the filter is too wide")
        body = _get(url, retries=retries, max_wait=max_wait, sleep=sleep)
        try:
            doc = json.loads(body)
            items = doc["Items"]
            if not isinstance(items, list):
                raise TypeError("Items is not a list")
        except (ValueError, KeyError, TypeError) as e:
            raise FetchError("azure", f"page {n} of the Retail Prices API is not the documented JSON ({e}): "
                             f"{body[:120]!r}", "try again later; the previous prices are kept") from None
        yield items
        url = doc.get("NextPageLink")


def _get(url: str, *, retries: int, max_wait: float, sleep) -> bytes:
    for attempt in range(retries + 1):
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": "application/json"}),
                                        timeout=60) as resp:
                return resp.read()
        except urllib.error.HTTPError as e:
            if e.code not in (429, 500, 502, 503, 504) or attempt == retries:
                raise FetchError("azure", f"the Retail Prices API answered {e.code} {e.reason}",
                                 "try again later; the previous prices are kept") from None
            wait = retry_after(e.headers.get("Retry-After"), 2.0 ** attempt)
            sleep(min(wait, max_wait))
        except (urllib.error.URLError, TimeoutError, OSError) as e:
            if attempt >= min(retries, 2):  # offline: say so in seconds, not minutes
                raise FetchError("azure", f"the Retail Prices API cannot be reached ({getattr(e, 'reason', e)})",
                                 "check the network (or HTTPS proxy); the previous prices are kept") from None
            sleep(min(2.0 ** attempt, max_wait))
    raise AssertionError("unreachable")


def parse(items, *, skus: set[str], fetched_at: str) -> list[FetchedPrice]:
    """Linux pay-as-you-go and Spot hourly USD prices of ``skus``; the newest meter wins."""
    best: dict[tuple[str, str, str], tuple[str, FetchedPrice]] = {}
    for x in items:
        sku = x.get("armSkuName")
        if sku not in skus or x.get("type") != "Consumption" or x.get("currencyCode", "USD") != "USD":
            continue
        if "Windows" in (x.get("productName") or "") or x.get("unitOfMeasure") != "1 Hour":
            continue
        name = f"{x.get('skuName', '')} {x.get('meterName', '')}"
        if "Low Priority" in name:
            continue
        price = x.get("retailPrice")
        if not isinstance(price, (int, float)) or price <= 0:
            continue
        market = "spot" if "Spot" in name else "ondemand"
        row = FetchedPrice("azure", sku, x.get("armRegionName", ""), market, float(price), API,
                           x.get("skuId") or x.get("meterId") or "", fetched_at)
        key = (sku, row.region, market)
        start = x.get("effectiveStartDate") or ""
        if key not in best or start > best[key][0]:
            best[key] = (start, row)
    return sorted((r for _, r in best.values()), key=lambda r: (r.item, r.region, r.market))


def capabilities(resource_skus, skus: set[str], regions: list[str], at: str) -> list[InstanceFacts]:
    """InstanceFacts of ``skus`` from resource SKUs (REST JSON dicts), per region."""
    found: dict[str, InstanceFacts] = {}
    zones: dict[str, dict[str, list[str]]] = {}
    for s in resource_skus:
        if s.get("resourceType") != "virtualMachines" or s.get("name") not in skus:
            continue
        name, restrictions = s["name"], s.get("restrictions") or []
        shut = {v.lower() for r in restrictions if r.get("type") == "Location" for v in r.get("values") or []}
        zone_shut = {(loc.lower(), z) for r in restrictions if r.get("type") == "Zone"
                     for loc in (r.get("restrictionInfo") or {}).get("locations") or r.get("values") or []
                     for z in (r.get("restrictionInfo") or {}).get("zones") or []}
        for info in s.get("locationInfo") or []:
            loc = (info.get("location") or "").lower()
            if loc in regions and loc not in shut:
                zones.setdefault(name, {})[loc] = sorted(z for z in info.get("zones") or [] if (loc, z) not in zone_shut)
        if name not in found:
            caps = {c.get("name"): c.get("value") for c in s.get("capabilities") or []}
            rdma = caps.get("RdmaEnabled")
            found[name] = InstanceFacts("azure", name, SKUS_API, at, gpu_count=_num(caps.get("GPUs"), int),
                                        vcpus=_num(caps.get("vCPUs"), int), memory_gib=_num(caps.get("MemoryGB"), float),
                                        infiniband=None if rdma is None else rdma.lower() == "true")
    return [InstanceFacts(**{**f.__dict__, "zones": dict(sorted(zones.get(n, {}).items()))})
            for n, f in sorted(found.items())]


def _num(v, kind):
    try:
        return kind(v) if v is not None else None
    except ValueError:
        return None


def _rest(model) -> dict:
    """A resource SKU model as its REST JSON: older msrest-generated models serialize to it, the
    newer mapping models (azure-mgmt-compute 39 here) hold it."""
    if hasattr(model, "serialize"):
        return model.serialize(keep_readonly=True)
    return model.as_dict() if hasattr(model, "as_dict") else dict(model)


def _resource_skus(skus: list[str], regions: list[str], at: str) -> tuple[list[InstanceFacts], list[str]]:
    try:
        api = load("api")
        compute = api.AzureApi().compute
        entries = [_rest(s) for region in regions for s in compute.resource_skus.list(filter=f"location eq '{region}'")]
    except (CredentialsError, SdkMissing) as e:
        why = str(e).removeprefix("azure: ")
        return [], [f"capabilities (GPUs, InfiniBand, zones) not checked: {why}; "
                    "prices come from the public Retail Prices API alone"]
    except Exception as e:  # noqa: BLE001 - refused credentials, network: the prices still count
        return [], [f"capabilities not checked: resource SKUs could not be read ({api.classify(e)[1][:160]})"]
    unlisted = {s["name"] for s in entries if s.get("resourceType") == "virtualMachines" and s.get("name") not in skus
                and any(c.get("name") == "GPUs" and (_num(c.get("value"), int) or 0) > 0
                        for c in s.get("capabilities") or [])}
    return capabilities(entries, set(skus), regions, at), missing_note("GPU VM sizes", unlisted)


def fetch(skus: list[str], regions: list[str] | None = None, *, endpoint: str | None = None,
          now: dt.datetime | None = None, sleep=None, facts: bool = True, progress=None) -> Fetched:
    """Every Linux on-demand and Spot price of ``skus`` (in ``regions``, default all), and with
    credentials the sizes' capabilities and zones."""
    base = endpoint or os.environ.get("GPUFLEET_AZURE_PRICES_ENDPOINT", ENDPOINT)
    # primary meters only: this API version lists non-primary meters of a size and region too
    url = base + "?" + urllib.parse.urlencode({"api-version": API_VERSION, "meterRegion": "'primary'",
                                               "$filter": odata_filter(skus, regions)}, quote_via=urllib.parse.quote)
    at = stamp(now)
    items: list[dict] = []
    for n, page in enumerate(pages(url, sleep=sleep), 1):
        items += page
        if progress:
            progress(f"price page {n} ({len(items):,} meters)")
    out = Fetched(parse(items, skus=set(skus), fetched_at=at))
    if facts:
        if progress:
            progress("resource SKUs")
        out.facts, out.notes = _resource_skus(skus, regions or [], at)
    return out


# One SKU any sound price list has (on-demand, in its home region): a refresh without it is refused.
FLAGSHIPS = [("Standard_ND96isr_H100_v5", "eastus")]


def for_catalog(cat, progress=None) -> Fetched:
    """The prices (and, with credentials, facts) of every Azure size and region the catalog has."""
    skus = sorted(n for (p, n) in cat.instances if p == "azure")
    return fetch(skus, sorted(cat.regions.get("azure", {})), progress=progress)

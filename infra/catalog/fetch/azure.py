"""Azure VM prices from the public Retail Prices REST API (no credentials needed).

``GET https://prices.azure.com/api/retail/prices?api-version=2023-01-01-preview&$filter=...``
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
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request

from gpufleet.catalog.fetch import FetchedPrice, FetchError

ENDPOINT = "https://prices.azure.com/api/retail/prices"
API_VERSION = "2023-01-01-preview"
API = "azure-retail-prices"


def odata_filter(skus: list[str], regions: list[str] | None = None) -> str:
    """Linux consumption meters of the VM sizes asked for (OData values are case-sensitive)."""
    parts = ["serviceName eq 'Virtual Machines'", "priceType eq 'Consumption'",
             "(" + " or ".join(f"armSkuName eq '{s}'" for s in skus) + ")"]
    if regions:
        parts.append("(" + " or ".join(f"armRegionName eq '{r}'" for r in regions) + ")")
    return " and ".join(parts)


def pages(url: str, *, max_pages: int = 1000, retries: int = 5, max_wait: float = 60.0, sleep=time.sleep):
    """Yield each page's ``Items``, following ``NextPageLink``."""
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
            wait = _retry_after(e.headers.get("Retry-After"), 2.0 ** attempt)
            sleep(min(wait, max_wait))
        except (urllib.error.URLError, TimeoutError, OSError) as e:
            if attempt == retries:
                raise FetchError("azure", f"the Retail Prices API cannot be reached ({getattr(e, 'reason', e)})",
                                 "check the network (or HTTPS proxy); the previous prices are kept") from None
            sleep(min(2.0 ** attempt, max_wait))
    raise AssertionError("unreachable")


def _retry_after(value: str | None, default: float) -> float:
    try:
        return max(0.0, float(value)) if value is not None else default
    except ValueError:
        return default


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


def fetch(skus: list[str], regions: list[str] | None = None, *, endpoint: str | None = None,
          now: dt.datetime | None = None, sleep=time.sleep) -> list[FetchedPrice]:
    """Every Linux on-demand and Spot price of ``skus`` (in ``regions``, default all)."""
    base = endpoint or os.environ.get("GPUFLEET_AZURE_PRICES_ENDPOINT", ENDPOINT)
    url = base + "?" + urllib.parse.urlencode({"api-version": API_VERSION, "$filter": odata_filter(skus, regions)},
                                              quote_via=urllib.parse.quote)
    at = (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    items = [x for page in pages(url, sleep=sleep) for x in page]
    return parse(items, skus=set(skus), fetched_at=at)

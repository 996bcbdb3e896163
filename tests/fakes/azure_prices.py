"""A stand-in for Azure's public Retail Prices API (https://prices.azure.com/api/retail/prices).

It answers in the documented format: ``{"BillingCurrency": "USD", "CustomerEntityId":
"Default", "CustomerEntityType": "Retail", "Items": [...], "NextPageLink": ..., "Count": n}``,
100 items a page by default (``$skip`` in ``NextPageLink``, as the live API pages), and
filters on what gpufleet sends: ``serviceName``, ``priceType``, ``armSkuName`` and
``armRegionName`` equalities joined by ``and``/``or``, and ``meterRegion='primary'``. ``faults`` (fakes/jsonserver.py)
script a 429 with ``Retry-After`` or a malformed page.
https://learn.microsoft.com/rest/api/cost-management/retail-prices/azure-retail-prices
"""

from __future__ import annotations

import re
import zlib

from fakes.jsonserver import JsonServer


def item(sku: str, region: str, price: float, *, spot: bool = False, windows: bool = False, kind: str = "Consumption",
         low_priority: bool = False, start: str = "2025-06-01T00:00:00Z", primary: bool = True) -> dict:
    """One meter as the API lists it (fields of the documented response); ``primary=False``: a
    non-primary meter, which the API leaves out when asked for ``meterRegion='primary'``."""
    size = sku.removeprefix("Standard_").replace("_", " ")
    suffix = " Spot" if spot else (" Low Priority" if low_priority else "")
    meter = zlib.crc32(repr((sku, region, spot, windows)).encode()) % 10**4
    return {"currencyCode": "USD", "tierMinimumUnits": 0.0, "retailPrice": price, "unitPrice": price,
            "armRegionName": region, "location": region, "effectiveStartDate": start,
            "meterId": f"m-{sku}-{region}-{spot}-{windows}-{kind}", "meterName": size + suffix,
            "productId": "DZH318Z0BQ4L", "skuId": f"DZH318Z0BQ4L/{meter:04d}",
            "productName": f"Virtual Machines {size.split()[0]} Series" + (" Windows" if windows else ""),
            "skuName": size + suffix, "serviceName": "Virtual Machines", "serviceId": "DZH313Z7MMC8",
            "serviceFamily": "Compute", "unitOfMeasure": "1 Hour", "type": kind, "isPrimaryMeterRegion": primary,
            "armSkuName": sku}


class RetailPricesFake(JsonServer):
    def __init__(self):
        super().__init__()
        self.items: list[dict] = []
        self.page_size = 100
        self.filters: list[str] = []

    def reset(self) -> None:
        with self.lock:
            self.items.clear()
            self.filters.clear()
            self.faults.clear()
            self.calls.clear()
        self.page_size = 100

    def route(self, method, path, query, body):
        if path != "/api/retail/prices" or method != "GET":
            return 404, {"error": {"code": "NotFound", "message": path}}, {}
        flt = query.get("$filter", "")
        self.filters.append(flt)
        primary_only = query.get("meterRegion") == "'primary'"
        parts = _parse(flt)
        rows = [x for x in self.items if _match(parts, x) and (x["isPrimaryMeterRegion"] or not primary_only)]
        skip = int(query.get("$skip") or 0)
        page = rows[skip:skip + self.page_size]
        out = {"BillingCurrency": "USD", "CustomerEntityId": "Default", "CustomerEntityType": "Retail",
               "Items": page, "NextPageLink": None, "Count": len(page)}
        if skip + self.page_size < len(rows):
            from urllib.parse import quote

            out["NextPageLink"] = (f"{self.url}/api/retail/prices?api-version={query.get('api-version', '')}"
                                   f"&$filter={quote(flt)}" + ("&meterRegion='primary'" if primary_only else "")
                                   + f"&$skip={skip + self.page_size}")
        return 200, out, {}


def _parse(flt: str) -> list[dict[str, set[str]]]:
    """``a eq 'v' and (b eq 'w' or b eq 'z')`` as its and-parts, each the values a field may take
    (one and-part names one field, as gpufleet's filters do). Parsed once a request: the catalog's
    filter names every size and region, and re-reading it per item made a refresh take minutes."""
    parts = []
    for part in re.split(r"\s+and\s+", flt.strip()) if flt.strip() else []:
        alternatives = re.findall(r"(\w+) eq '([^']*)'", part)
        if not alternatives:
            raise ValueError(f"filter the fake does not know: {part}")
        wanted: dict[str, set[str]] = {}
        for k, v in alternatives:
            wanted.setdefault(k, set()).add(v)
        parts.append(wanted)
    return parts


def _match(parts: list[dict[str, set[str]]], x: dict) -> bool:
    """Each and-part holds: one of its fields has one of its values."""
    return all(any((x.get("type") if k == "priceType" else x.get(k)) in vs for k, vs in wanted.items())
               for wanted in parts)

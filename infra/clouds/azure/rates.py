"""What Azure bills besides VMs, per region, from the public Retail Prices API (no credentials): the
rows of the catalog's rates table that `catalog refresh --rates` replaces.

The names filtered on are those of items recorded from the API (``tests/data/rates/azure_retail.json``
names each one's source):

* Premium SSD managed disks: ``serviceName`` Storage, ``productName`` Premium SSD Managed Disks,
  ``meterName`` ``<tier> LRS Disk`` (not ``<tier> LRS Disk Mount``, the shared-disk charge of the
  same SKU), per ``1/Month``: one disk a month, the tiers of ``clouds.azure.spend``.
* Static public IPv4: ``serviceName`` Virtual Network, ``productName`` IP Addresses,
  ``meterName`` Standard IPv4 Static Public IP, per ``1 Hour``. Its item is not a primary meter
  region's (``isPrimaryMeterRegion`` false), so this query lists every meter region and, where a
  region has two, takes the primary's.

Only ``type`` Consumption in USD, the tier from 0 units. NAT gateways, bandwidth and Azure Managed
Lustre are not fetched: no recorded item shows their meters' names (the NAT gateway's may be one
global meter), and a guessed filter would find nothing or the wrong thing. Their rows stay.
"""

from __future__ import annotations

import datetime as dt
import os
import urllib.parse
from dataclasses import dataclass

from gpufleet.catalog.fetched import FetchError
from gpufleet.catalog.rates import Rate
from gpufleet.clouds.azure.prices import API_VERSION, ENDPOINT, pages
from gpufleet.clouds.azure.spend import PREMIUM_TIERS

API = "Azure Retail Prices API"


@dataclass(frozen=True)
class Query:
    service: str
    product: str
    meters: dict[str, str]  # meterName -> the rates table's item
    unit: str  # the item's unitOfMeasure
    table_unit: str

    def odata(self) -> str:
        return (f"serviceName eq '{self.service}' and productName eq '{self.product}' and priceType eq 'Consumption' and ("
                + " or ".join(f"meterName eq '{m}'" for m in self.meters) + ")")


QUERIES = (
    Query("Storage", "Premium SSD Managed Disks", {f"{t} LRS Disk": f"disk:premium-ssd:{t}" for _, t in PREMIUM_TIERS},
          "1/Month", "disk-month"),
    Query("Virtual Network", "IP Addresses", {"Standard IPv4 Static Public IP": "ipv4"}, "1 Hour", "hour"),
)


def rates_of(q: Query, items: list[dict], as_of: str) -> list[Rate]:
    """The table's rows for ``q`` from its items: per meter and region, the primary meter region's
    where there are two, else the newest."""
    best: dict[tuple[str, str], tuple[tuple, dict]] = {}
    for x in items:
        item = q.meters.get(x.get("meterName", ""))
        if (item is None or x.get("type") != "Consumption" or x.get("currencyCode", "USD") != "USD"
                or float(x.get("tierMinimumUnits") or 0) != 0 or not x.get("armRegionName")):
            continue
        if x.get("unitOfMeasure") != q.unit:
            raise FetchError("azure", f"{x['meterName']} in {x['armRegionName']} is priced per {x.get('unitOfMeasure')!r}, "
                             f"not {q.unit!r}", "the Retail Prices API changed; the previous rates are kept")
        rank = (bool(x.get("isPrimaryMeterRegion")), x.get("effectiveStartDate") or "")
        key = (item, x["armRegionName"])
        if key not in best or rank > best[key][0]:
            best[key] = (rank, x)
    return [Rate("azure", item, region, q.table_unit, float(x["retailPrice"]),
                 f"{API} ({q.service}, {q.product}): '{x['meterName']}' {x['retailPrice']} per {q.unit}, "
                 f"skuId {x.get('skuId', '')}, effective {(x.get('effectiveStartDate') or '')[:10]}", as_of)
            for (item, region), (_, x) in sorted(best.items())]


def fetch(progress=None, *, endpoint: str | None = None, now: dt.datetime | None = None, sleep=None) -> list[Rate]:
    """Every query's rows; any query that fails or finds nothing fails the fetch."""
    base = endpoint or os.environ.get("GPUFLEET_AZURE_PRICES_ENDPOINT", ENDPOINT)
    as_of = (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y-%m")
    out: list[Rate] = []
    for q in QUERIES:
        if progress:
            progress(q.product)
        url = base + "?" + urllib.parse.urlencode({"api-version": API_VERSION, "$filter": q.odata()},
                                                  quote_via=urllib.parse.quote)
        got = rates_of(q, [x for page in pages(url, sleep=sleep) for x in page], as_of)
        if not got:
            raise FetchError("azure", f"the Retail Prices API has no {q.product} meters named "
                             f"{', '.join(sorted(q.meters))[:120]}", "its meters changed; the previous rates are kept")
        out += got
    return out

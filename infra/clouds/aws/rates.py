"""What AWS bills besides instances, per region, from the Price List Query API (``pricing.get_products``,
served from us-east-1, signed): the rows of the catalog's rates table that `catalog refresh --rates`
replaces.

Each item is one query (a ServiceCode and TERM_MATCH filters, every region at once) and the usage
type its rows must have; the attribute names and values are those of answers recorded from the API
(``tests/data/rates/aws_get_products.json`` names each one's source):

* EBS storage: AmazonEC2, ``productFamily`` Storage, ``volumeApiName`` gp3|gp2|io2|st1|sc1, per
  ``GB-Mo`` (io2's dimension says ``GB-month``); gp3's IOPS above its baseline: ``productFamily``
  System Operation, usage type ``EBS:VolumeP-IOPS.gp3``, per ``IOPS-Mo``; its throughput:
  Provisioned Throughput, ``EBS:VolumeP-Throughput.gp3``, per ``GiBps-mo`` (divided by 1,024 into
  the MiB/s the table and the volume's setting use).
* NAT gateways: AmazonEC2, ``productFamily`` NAT Gateway, ``NatGateway-Hours`` and
  ``NatGateway-Bytes`` with or without a region prefix, never ``RegionalNatGateway-*`` (another
  product in the same family).
* Public IPv4: AmazonVPC, ``group`` VPCPublicIPv4Address (the record has no product family),
  usage type ``<prefix>-PublicIPv4:InUseAddress`` (not ``:ContiguousBlock``).
* Traffic: AWSDataTransfer, ``transferType`` AWS Outbound to ``toLocation`` External (the first
  priced tier, as the table's rows are), and InterRegion Outbound (to the destination most of a
  region's rows price the same; the row says how many).

FSx for Lustre is not fetched: no recorded answer shows the attribute values of its Persistent_2
tiers, and a guessed filter would find nothing or the wrong thing. Its rows stay as they are.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import Counter
from dataclasses import dataclass

from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from gpufleet.catalog.fetched import FetchError
from gpufleet.catalog.rates import Rate
from gpufleet.clouds.aws import prices

API = "AWS Price List API get_products"


@dataclass(frozen=True)
class Query:
    item: str  # the rates table's item
    service: str
    filters: tuple[tuple[str, str], ...]
    usage: str  # a regular expression the row's usagetype must match
    units: tuple[str, ...]  # the price dimension's unit, as AWS writes it
    unit: str  # the table's
    scale: float = 1.0
    pick: str = "only"  # only: one priced dimension | first-tier: the lowest priced tier | commonest: see above


_PREFIX = r"^([A-Z0-9]+-)?"
QUERIES = (
    *(Query(f"ebs:{v}", "AmazonEC2", (("productFamily", "Storage"), ("volumeApiName", v)),
            _PREFIX + r"EBS:VolumeUsage\." + v + "$", ("GB-Mo", "GB-month"), "gb-month")
      for v in ("gp3", "gp2", "io2", "st1", "sc1")),
    Query("ebs:gp3-iops", "AmazonEC2", (("productFamily", "System Operation"), ("volumeApiName", "gp3")),
          _PREFIX + r"EBS:VolumeP-IOPS\.gp3$", ("IOPS-Mo",), "iops-month"),
    Query("ebs:gp3-throughput", "AmazonEC2", (("productFamily", "Provisioned Throughput"), ("volumeApiName", "gp3")),
          _PREFIX + r"EBS:VolumeP-Throughput\.gp3$", ("GiBps-mo",), "mbps-month", scale=1 / 1024),
    Query("nat-gateway", "AmazonEC2", (("productFamily", "NAT Gateway"),), _PREFIX + "NatGateway-Hours$", ("Hrs",), "hour"),
    Query("nat:data", "AmazonEC2", (("productFamily", "NAT Gateway"),), _PREFIX + "NatGateway-Bytes$", ("GB",), "gb"),
    Query("ipv4", "AmazonVPC", (("group", "VPCPublicIPv4Address"),), _PREFIX + r"PublicIPv4:InUseAddress$", ("Hrs",),
          "hour"),
    Query("transfer:internet-out", "AWSDataTransfer", (("transferType", "AWS Outbound"), ("toLocation", "External")),
          _PREFIX + r"DataTransfer-Out-Bytes$", ("GB",), "gb", pick="first-tier"),
    Query("transfer:inter-region", "AWSDataTransfer", (("transferType", "InterRegion Outbound"),),
          r"^[A-Z0-9]+-[A-Z0-9]+-AWS-Out-Bytes$", ("GB",), "gb", pick="commonest"),
)


def dimensions(doc: str) -> tuple[dict, list[dict]]:
    """(the product's attributes, its on-demand price dimensions) of one PriceList entry."""
    d = json.loads(doc)
    dims = [dim for term in (d.get("terms", {}).get("OnDemand") or {}).values()
            for dim in term.get("priceDimensions", {}).values()]
    return d["product"]["attributes"], dims


def rates_of(q: Query, entries: list[str], as_of: str) -> list[Rate]:
    """The table's rows for ``q`` from its PriceList entries (JSON strings, as get_products returns them)."""
    found: dict[str, list[tuple[float, str]]] = {}
    for doc in entries:
        attrs, dims = dimensions(doc)
        region = attrs.get("regionCode") or attrs.get("fromRegionCode")
        if not region or not re.match(q.usage, attrs.get("usagetype", "")):
            continue
        priced = [d for d in dims if d.get("unit") in q.units and "USD" in d.get("pricePerUnit", {})]
        if q.pick == "first-tier":  # tiers by volume: the first one billed (a free allowance costs nothing)
            priced = sorted((d for d in priced if float(d["pricePerUnit"]["USD"]) > 0),
                            key=lambda d: float(d.get("beginRange") or 0))[:1]
        for dim in priced:
            found.setdefault(region, []).append((float(dim["pricePerUnit"]["USD"]) * q.scale, attrs["usagetype"]))
    out = []
    for region, quoted in sorted(found.items()):
        if q.pick == "commonest":  # one row per destination: the price most of them have (the higher on a tie)
            counts = Counter(round(p, 10) for p, _ in quoted)
            n = max(counts.values())
            usd = max(p for p, c in counts.items() if c == n)
            how = f"the price {n} of its {len(quoted)} destinations have"
        elif len(quoted) > 1:
            raise FetchError("aws", f"{q.item} in {region}: {len(quoted)} prices where one was expected "
                             f"({', '.join(sorted({u for _, u in quoted}))})",
                             "the Price List's products changed; the previous rates are kept")
        else:
            (usd, usage), = quoted
            how = usage
        out.append(Rate("aws", q.item, region, q.unit, round(usd, 8),
                        f"{API} ({q.service}, {', '.join(f'{k}={v}' for k, v in q.filters)}): {how}", as_of))
    return out


def fetch(progress=None, *, client=None, now: dt.datetime | None = None) -> list[Rate]:
    """Every query's rows; any query that fails fails the fetch (a partial table must not replace a whole one)."""
    pricing = client or prices.client("pricing", prices.PRICING_REGION)
    as_of = (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y-%m")
    out: list[Rate] = []
    for q in QUERIES:
        if progress:
            progress(q.item)
        try:
            entries = [doc for page in pricing.get_paginator("get_products").paginate(
                ServiceCode=q.service, FormatVersion="aws_v1",
                Filters=[{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in q.filters]) for doc in page["PriceList"]]
        except NoCredentialsError:
            raise FetchError("aws", "no credentials found (the Price List API is signed)",
                             "run `aws configure` or set AWS_PROFILE; the previous rates are kept") from None
        except (BotoCoreError, ClientError) as e:
            raise FetchError("aws", f"the Price List API failed ({e})", "try again later; the previous rates are kept") from None
        got = rates_of(q, entries, as_of)
        if not got:
            raise FetchError("aws", f"the Price List has no {q.item} rows ({q.service}, {dict(q.filters)})",
                             "its products changed; the previous rates are kept")
        out += got
    return out

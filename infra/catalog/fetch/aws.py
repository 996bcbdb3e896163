"""AWS EC2 prices: the Price List API (on-demand), spot price history, instance facts (boto3).

* ``pricing.get_products`` (served from us-east-1) with TERM_MATCH filters: ServiceCode
  AmazonEC2, the instance type, Linux, shared tenancy, no pre-installed software, capacity
  status Used. Each ``PriceList`` entry is a JSON document: ``product.sku``,
  ``product.attributes`` (``regionCode``, ``gpu`` ...) and ``terms.OnDemand.*.priceDimensions.*``
  (``unit: Hrs``, ``pricePerUnit.USD``). https://docs.aws.amazon.com/aws-cost-management/latest/APIReference/API_pricing_GetProducts.html
* ``ec2.describe_spot_price_history`` per region (Linux/UNIX, the last hour): the cheapest
  zone's current price is the region's spot price.
* ``ec2.describe_instance_types``: the GPU count AWS gives for each type, which the refresh
  checks against the GPU table.

Credentials are needed (the Price List API is signed). ``AWS_ENDPOINT_URL`` /
``AWS_ENDPOINT_URL_PRICING`` redirect it, as for every boto3 client.
"""

from __future__ import annotations

import datetime as dt
import json

from gpufleet.catalog.fetch import FetchedPrice, FetchError

API = "aws-price-list"
SPOT_API = "aws-ec2-spot-price-history"
PRICING_REGION = "us-east-1"


def _client(service: str, region: str):
    import boto3
    from botocore.config import Config

    return boto3.session.Session().client(service, region_name=region,
                                          config=Config(retries={"mode": "standard", "max_attempts": 8}))


def _fail(e) -> FetchError:
    from botocore.exceptions import NoCredentialsError

    if isinstance(e, NoCredentialsError):
        return FetchError("aws", "no credentials found (the Price List API is signed)",
                          "run `aws configure` or set AWS_PROFILE; the previous prices are kept")
    return FetchError("aws", f"the pricing APIs failed ({e})", "try again later; the previous prices are kept")


def parse_product(doc: str | dict) -> list[tuple[str, str, float, str, int | None]]:
    """(instance type, region, USD per hour, SKU, GPUs) for each hourly on-demand dimension of one entry."""
    d = json.loads(doc) if isinstance(doc, str) else doc
    prod = d["product"]
    attrs = prod["attributes"]
    gpus = int(attrs["gpu"]) if str(attrs.get("gpu", "")).isdigit() else None
    out = []
    for term in (d.get("terms", {}).get("OnDemand") or {}).values():
        for dim in term.get("priceDimensions", {}).values():
            if dim.get("unit") != "Hrs":
                continue
            usd = float(dim["pricePerUnit"]["USD"])
            if usd > 0:
                out.append((attrs["instanceType"], attrs["regionCode"], usd, prod["sku"], gpus))
    return out


def fetch(instance_types: list[str], regions: list[str], *, now: dt.datetime | None = None) -> list[FetchedPrice]:
    from botocore.exceptions import BotoCoreError, ClientError

    at = (now or dt.datetime.now(dt.timezone.utc)).replace(microsecond=0)
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    wanted = set(regions)
    try:
        pricing = _client("pricing", PRICING_REGION)
        facts: dict[str, int] = {}
        ec2_home = _client("ec2", regions[0] if regions else PRICING_REGION)
        # a filter, not InstanceTypes=: a type the region does not know is left out, not an error
        for page in ec2_home.get_paginator("describe_instance_types").paginate(
                Filters=[{"Name": "instance-type", "Values": instance_types}]):
            for t in page["InstanceTypes"]:
                facts[t["InstanceType"]] = sum(g.get("Count", 0) for g in (t.get("GpuInfo") or {}).get("Gpus", []))
        rows: dict[tuple, FetchedPrice] = {}
        for itype in instance_types:
            filters = [{"Type": "TERM_MATCH", "Field": f, "Value": v} for f, v in (
                ("instanceType", itype), ("operatingSystem", "Linux"), ("tenancy", "Shared"),
                ("preInstalledSw", "NA"), ("capacitystatus", "Used"))]
            for page in pricing.get_paginator("get_products").paginate(ServiceCode="AmazonEC2", Filters=filters,
                                                                       FormatVersion="aws_v1"):
                for doc in page.get("PriceList", []):
                    try:
                        found = parse_product(doc)
                    except (ValueError, KeyError, TypeError) as e:
                        raise FetchError("aws", f"a Price List entry for {itype} is not the documented JSON ({e})",
                                         "try again later; the previous prices are kept") from None
                    for item, region, usd, sku, gpus in found:
                        if region in wanted:
                            rows[(item, region, "ondemand")] = FetchedPrice(
                                "aws", item, region, "ondemand", usd, API, sku, stamp, gpus or facts.get(item))
        for region in regions:
            ec2 = _client("ec2", region)
            cheapest: dict[str, tuple[float, str]] = {}
            for page in ec2.get_paginator("describe_spot_price_history").paginate(
                    InstanceTypes=instance_types, ProductDescriptions=["Linux/UNIX"],
                    StartTime=at - dt.timedelta(hours=1), EndTime=at):
                for h in page["SpotPriceHistory"]:
                    usd = float(h["SpotPrice"])
                    if h["InstanceType"] not in cheapest or usd < cheapest[h["InstanceType"]][0]:
                        cheapest[h["InstanceType"]] = (usd, h["AvailabilityZone"])
            for item, (usd, zone) in cheapest.items():
                rows[(item, region, "spot")] = FetchedPrice("aws", item, region, "spot", usd, SPOT_API,
                                                            f"{zone}/{item}", stamp, facts.get(item))
    except FetchError:
        raise
    except (ClientError, BotoCoreError) as e:
        raise _fail(e) from None
    return sorted(rows.values(), key=lambda r: (r.item, r.region, r.market))

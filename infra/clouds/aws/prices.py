"""AWS EC2 prices: the Price List API (on-demand), spot price history, instance facts (boto3).

* ``pricing.get_products`` (served from us-east-1) with TERM_MATCH filters: ServiceCode
  AmazonEC2, the instance type, Linux, shared tenancy, no pre-installed software, capacity
  status Used, location type AWS Region (not Local Zones, which share their region's code).
  Each ``PriceList`` entry is a JSON document: ``product.sku``, ``product.attributes``
  (``regionCode``, ``gpu`` ...) and ``terms.OnDemand.*.priceDimensions.*`` (``unit: Hrs``,
  ``pricePerUnit.USD``).
  https://docs.aws.amazon.com/aws-cost-management/latest/APIReference/API_pricing_GetProducts.html
* ``ec2.describe_spot_price_history`` per region (Linux/UNIX, the last hour): each zone's
  newest price; the cheapest zone's is the region's spot price.
* ``ec2.describe_instance_types``: GPU model, count and memory, vCPUs, memory, EFA support and
  network performance as AWS states them; the refresh checks the GPU model and count against
  the GPU table and reports other differences;
* ``ec2.describe_instance_type_offerings`` (location type ``availability-zone``) per region:
  which zones offer each type (``gpufleet plan`` and the spec check use them).

Credentials are needed (the Price List API is signed). ``AWS_ENDPOINT_URL`` /
``AWS_ENDPOINT_URL_PRICING`` redirect it, as for every boto3 client.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from concurrent.futures import ThreadPoolExecutor

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from gpufleet.catalog.fetched import Fetched, FetchedPrice, FetchError, InstanceFacts, missing_note, stamp
from gpufleet.clouds.aws import credentials
from gpufleet.clouds.aws.rules import FLAGSHIPS  # noqa: F401 - the refresh reads it here

API = "aws-price-list"
SPOT_API = "aws-ec2-spot-price-history"
FACTS_API = "aws-ec2-instance-types"
PRICING_REGION = "us-east-1"


def client(service: str, region: str):
    return credentials.session().client(service, region_name=region,
                                          config=Config(retries={"mode": "standard", "max_attempts": 8}))


def _fail(e) -> FetchError:
    if isinstance(e, NoCredentialsError):
        return FetchError("aws", "no credentials found (the Price List API is signed)",
                          "run `aws configure` or set AWS_PROFILE; the previous prices are kept")
    return FetchError("aws", f"the pricing APIs failed ({e})", "try again later; the previous prices are kept")


def parse_product(doc: str | dict) -> list[tuple[str, str, float, str]]:
    """(instance type, region, USD per hour, SKU) for each hourly on-demand dimension of one entry."""
    d = json.loads(doc) if isinstance(doc, str) else doc
    prod = d["product"]
    attrs = prod["attributes"]
    out = []
    for term in (d.get("terms", {}).get("OnDemand") or {}).values():
        for dim in term.get("priceDimensions", {}).values():
            if dim.get("unit") != "Hrs":
                continue
            usd = float(dim["pricePerUnit"]["USD"])
            if usd > 0:
                out.append((attrs["instanceType"], attrs["regionCode"], usd, prod["sku"]))
    return out


def spot_prices(history) -> dict[str, tuple[float, str]]:
    """Instance type -> (USD per hour, zone): each zone's newest price, the cheapest zone."""
    newest: dict[tuple[str, str], tuple] = {}
    for h in history:
        key = (h["InstanceType"], h["AvailabilityZone"])
        if key not in newest or h["Timestamp"] > newest[key][0]:
            newest[key] = (h["Timestamp"], float(h["SpotPrice"]))
    out: dict[str, tuple[float, str]] = {}
    for (item, zone), (_, usd) in sorted(newest.items()):
        if item not in out or usd < out[item][0]:
            out[item] = (usd, zone)
    return out


def spot_rows(region: str, history, when: str) -> list[FetchedPrice]:
    """The region's spot price of each instance type (``spot_prices``), the zone in its SKU id."""
    return [FetchedPrice("aws", item, region, "spot", usd, SPOT_API, f"{zone}/{item}", when)
            for item, (usd, zone) in spot_prices(history).items()]


def gpu_namer(cat):
    """AWS's GPU name ("NVIDIA A100") and memory (MiB) -> the catalog's GPU: the model whose
    memory is nearest (A100 40960 MiB -> A100-40GB), the SXM part before PCIe/NVL variants."""
    def name(text: str, mib: int | None) -> str | None:
        model = (text.split() or [""])[-1].lower()
        cands = [g for g in cat.gpus.values() if g.name.split("-")[0].lower() == model]
        if mib:
            cands = [g for g in cands if abs(g.memory_gb - mib / 1024) <= 0.15 * g.memory_gb]
        cands.sort(key=lambda g: (abs(g.memory_gb - (mib or 0) / 1024) if mib else 0, len(g.name)))
        return cands[0].name if cands else None
    return name


def facts_of(t: dict, cat_gpu, at: str) -> InstanceFacts:
    """One ``InstanceTypes`` entry of describe_instance_types as InstanceFacts (``cat_gpu``: AWS's
    GPU name -> the catalog's, or None)."""
    gpus = (t.get("GpuInfo") or {}).get("Gpus") or []
    net = t.get("NetworkInfo") or {}
    names = {cat_gpu(f"{g.get('Manufacturer', '')} {g.get('Name', '')}", (g.get("MemoryInfo") or {}).get("SizeInMiB"))
             for g in gpus}
    mem = sum((g.get("MemoryInfo") or {}).get("SizeInMiB", 0) for g in gpus[:1])
    return InstanceFacts(
        "aws", t["InstanceType"], FACTS_API, at, gpu=names.pop() if len(names) == 1 else None,
        gpu_count=sum(g.get("Count", 0) for g in gpus) if gpus else None,
        gpu_memory_gib=mem / 1024 if mem else None, vcpus=(t.get("VCpuInfo") or {}).get("DefaultVCpus"),
        memory_gib=(t.get("MemoryInfo") or {}).get("SizeInMiB", 0) / 1024 or None,
        efa=net.get("EfaSupported"), network=net.get("NetworkPerformance"))


def on_demand(price_list, wanted: set[str], when: str, itype: str = "") -> list[FetchedPrice]:
    """On-demand rows of Price List entries (JSON strings, as get_products returns them) in ``wanted`` regions."""
    out = []
    for doc in price_list:
        try:
            found = parse_product(doc)
        except (ValueError, KeyError, TypeError) as e:
            raise FetchError("aws", f"a Price List entry{' for ' + itype if itype else ''} is not the documented "
                             f"JSON ({e})", "try again later; the previous prices are kept") from None
        out += [FetchedPrice("aws", item, region, "ondemand", usd, API, sku, when)
                for item, region, usd, sku in found if region in wanted]
    return out


def fetch(instance_types: list[str], regions: list[str], *, now: dt.datetime | None = None,
          cat_gpu=lambda name, mib: None, workers: int = 8, progress=None) -> Fetched:
    """On-demand prices (Price List), spot prices, instance facts and zones; regions side by side."""
    if credentials.session().get_credentials() is None:
        raise _fail(NoCredentialsError())
    at = (now or dt.datetime.now(dt.timezone.utc)).replace(microsecond=0)
    when = stamp(at)
    wanted = set(regions)

    def products(itype: str) -> list[FetchedPrice]:
        filters = [{"Type": "TERM_MATCH", "Field": f, "Value": v} for f, v in (
            ("instanceType", itype), ("operatingSystem", "Linux"), ("tenancy", "Shared"),
            ("preInstalledSw", "NA"), ("capacitystatus", "Used"),
            ("locationType", "AWS Region"))]  # a Local Zone's entry carries its parent region's regionCode
        pages = pricing.get_paginator("get_products").paginate(
            ServiceCode="AmazonEC2", Filters=filters, FormatVersion="aws_v1")
        rows = on_demand((doc for page in pages for doc in page.get("PriceList", [])), wanted, when, itype)
        step(f"Price List {itype}")
        return rows

    ec2s: dict = {}
    done, lock = [], threading.Lock()

    def step(what: str) -> None:
        with lock:
            done.append(what)
            if progress:
                progress(f"{len(done)}/{len(instance_types) + len(regions)} ({what})")

    def region_facts(region: str):
        ec2 = ec2s[region] = client("ec2", region)
        offered = [(o["InstanceType"], o["Location"]) for page in
                   ec2.get_paginator("describe_instance_type_offerings").paginate(
                       LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": instance_types}])
                   for o in page["InstanceTypeOfferings"]]
        history = [h for page in ec2.get_paginator("describe_spot_price_history").paginate(
            InstanceTypes=instance_types, ProductDescriptions=["Linux/UNIX"],
            StartTime=at - dt.timedelta(hours=1), EndTime=at) for h in page["SpotPriceHistory"]]
        step(f"zones and spot prices in {region}")
        return region, offered, spot_rows(region, history, when)

    def types_in(region: str, names: list[str]) -> list[dict]:
        # a filter, not InstanceTypes=: a type the region does not know is left out, not an error
        return [t for page in ec2s[region].get_paginator("describe_instance_types").paginate(
            Filters=[{"Name": "instance-type", "Values": names}]) for t in page["InstanceTypes"]]

    pricing = client("pricing", PRICING_REGION)  # clients are thread-safe; making one costs ~0.1 s
    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            priced = list(pool.map(products, instance_types))
            per_region = list(pool.map(region_facts, regions))
        rows = {(r.item, r.region, r.market): r for found in priced for r in found}
        zones: dict[str, dict[str, list[str]]] = {}
        for region, offered, spot in per_region:
            for itype, zone in offered:
                zones.setdefault(itype, {}).setdefault(region, []).append(zone)
            rows.update({(r.item, r.region, r.market): r for r in spot})
        # us-east-1 has nearly every type; a type it lacks is asked of a region offering it
        ec2s.setdefault(PRICING_REGION, client("ec2", PRICING_REGION))
        facts = {t["InstanceType"]: facts_of(t, cat_gpu, when) for t in types_in(PRICING_REGION, instance_types)}
        # GPU types AWS offers that the catalog does not list (a new family should not go unseen for weeks)
        unlisted = [t["InstanceType"] for t in types_in(PRICING_REGION, ["p*", "g*"])
                    if t.get("GpuInfo") and t["InstanceType"] not in instance_types]
        for itype in instance_types:
            if itype not in facts and zones.get(itype):
                for t in types_in(sorted(zones[itype])[0], [itype]):
                    facts[itype] = facts_of(t, cat_gpu, when)
    except FetchError:
        raise
    except (ClientError, BotoCoreError) as e:
        raise _fail(e) from None
    out = Fetched(sorted(rows.values(), key=lambda r: (r.item, r.region, r.market)),
                  notes=missing_note("GPU instance types in us-east-1", unlisted))
    for name in instance_types:
        f = facts.get(name)
        if f is None:
            out.notes.append(f"{name}: describe_instance_types does not know it and no region offers it (retired?)")
            continue
        out.facts.append(InstanceFacts(**{**f.__dict__, "zones": {r: sorted(z) for r, z in
                                                                   sorted(zones.get(name, {}).items())}}))
    return out


def for_catalog(cat, progress=None) -> Fetched:
    """The prices and facts of every AWS instance type and region the catalog has."""
    types = sorted(n for (p, n) in cat.instances if p == "aws")
    return fetch(types, sorted(cat.regions.get("aws", {})), cat_gpu=gpu_namer(cat), progress=progress)

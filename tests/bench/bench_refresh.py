"""Parse and merge a full-size catalog refresh (target: under 10 s here).

The payloads are what the three providers' APIs answer for `gpufleet catalog refresh`, as
raw HTTP bodies, generated in the documented formats by tests/fakes/price_lists.py (no
provider can be reached from here, so nothing was recorded from a live API; see that module):

* GCP: every Compute Engine SKU of the Cloud Billing Catalog (~29,000, in pages of 5,000)
  plus the machine and accelerator types of the catalog's regions (aggregated lists);
* Azure: Retail Prices items for the catalog's sizes in ~260 regions (pages of 100, as the
  API pages) plus resource SKUs;
* AWS: Price List pages (get_products JSON, 100 entries a page), spot price history (EC2
  XML, 12 records per type and zone over the last hour) per region, and instance types
  (moto's copy of AWS's describe_instance_types data where moto is installed).

Each provider's figures: parsing (bytes -> rows, with the same functions and SDK model
classes the fetchers use: json for the SKU pages, google-cloud-compute's models for the
machine types, botocore's EC2 parser for spot history), then the checks; then the merge of all
three: the atomic write of the store, reading it back, and building every offer of the catalog from it.

Run: python tests/bench/bench_refresh.py [SCALE]  (default 15; exit 1 when a check fails or the target
is missed). The unit tests run ``refresh_at(1)`` and check what it computed, never its time.
"""

from __future__ import annotations

import gzip
import importlib
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
TARGET_S = 10.0
AT = "2026-11-22T08:00:00Z"


class Recorder:
    """Collects what fakes.price_lists.gcp_world adds, as the Compute API would list it."""

    def __init__(self):
        self.items: dict[str, list[dict]] = {}
        self.skus: list[dict] = []

    def add(self, collection, scope, name, **fields):
        self.items.setdefault(collection, []).append({"name": name, "zone": f"https://www.googleapis.com/compute/"
                                                      f"v1/projects/p/{scope}", "_scope": scope, **fields})

    def aggregated(self, collection: str) -> bytes:
        out: dict[str, dict] = {}
        for x in self.items.get(collection, []):
            out.setdefault(x["_scope"], {}).setdefault(collection, []).append(
                {k: v for k, v in x.items() if k != "_scope"})
        return json.dumps({"kind": f"compute#{collection}AggregatedList", "items": out}).encode()


def payloads(cat, scale: int = 15) -> dict:
    from fakes.aws import EC2_NS, spot_history_xml
    from fakes.azure import resource_sku
    from fakes.price_lists import aws_products, aws_spot_history, azure_items, gcp_world

    rec = Recorder()
    gcp_world(rec, cat, scale=scale)
    skus = rec.skus
    gcp = {"sku_pages": [json.dumps({"skus": skus[i:i + 5000], "nextPageToken": str(i + 5000)}).encode()
                         for i in range(0, len(skus), 5000)],
           "machine_types": rec.aggregated("machineTypes"), "accelerator_types": rec.aggregated("acceleratorTypes"),
           "count": len(skus)}
    items = azure_items(cat, scale=2 * scale)
    sizes = [n for (p, n), _ in cat.instances.items() if p == "azure"]
    others = [f"Standard_D{i}s_v5" for i in range(2, 2 + 13 * scale)]
    rskus = [resource_sku(n, r, gpus=cat.instances[("azure", n)].gpu_count) for n in sizes for r in cat.regions["azure"]]
    rskus += [resource_sku(n, r) for n in others for r in sorted(cat.regions["azure"])]
    azure = {"pages": [json.dumps({"BillingCurrency": "USD", "Items": items[i:i + 100], "NextPageLink": "next",
                                   "Count": len(items[i:i + 100])}).encode() for i in range(0, len(items), 100)],
             "resource_skus": json.dumps({"value": rskus}).encode(), "count": len(items), "resource_count": len(rskus)}
    regions = sorted(cat.regions["aws"]) + [f"xx-region-{i}" for i in range(10)]
    products = aws_products(cat, regions=regions)
    spot = aws_spot_history(cat, records=max(2, scale * 4 // 5))
    aws = {"pages": [json.dumps({"FormatVersion": "aws_v1", "PriceList": [json.dumps(p) for p in products[i:i + 100]]})
                     .encode() for i in range(0, len(products), 100)],
           "spot": {r: (f'<?xml version="1.0" encoding="UTF-8"?><DescribeSpotPriceHistoryResponse xmlns="{EC2_NS}">'
                        f"<requestId>1</requestId>{spot_history_xml(h)}</DescribeSpotPriceHistoryResponse>").encode()
                    for r, h in spot.items()},
           "count": len(products), "spot_count": sum(len(h) for h in spot.values())}
    try:
        import moto.ec2

        data = json.loads(gzip.open(Path(moto.ec2.__file__).parent / "resources" / "instance_types.json.gz").read())
        aws["types"] = [data[n] for (p, n) in cat.instances if p == "aws" and n in data]
    except (ImportError, OSError):
        aws["types"] = []
    return {"gcp": gcp, "azure": azure, "aws": aws}


def parse_gcp(cat, raw):
    from google.cloud import compute_v1

    from gpufleet.clouds.gcp import prices as gcp

    skus = (s for page in raw["sku_pages"] for s in json.loads(page)["skus"])
    mts = gcp.machines(compute_v1.MachineTypeAggregatedList.from_json(raw["machine_types"],
                                                                      ignore_unknown_fields=True).items.items())
    accs = gcp.accelerators(compute_v1.AcceleratorTypeAggregatedList.from_json(raw["accelerator_types"],
                                                                              ignore_unknown_fields=True).items.items())
    return gcp.build(cat, skus, mts, accs, sorted(cat.regions["gcp"]), AT)


def parse_azure(cat, raw):
    from gpufleet.catalog.fetched import Fetched
    from gpufleet.clouds.azure import prices as azure

    sizes = sorted(n for (p, n) in cat.instances if p == "azure")
    items = [x for page in raw["pages"] for x in json.loads(page)["Items"]]
    out = Fetched(azure.parse(items, skus=set(sizes), fetched_at=AT))
    out.facts = azure.capabilities(json.loads(raw["resource_skus"])["value"], set(sizes),
                                   sorted(cat.regions["azure"]), AT)
    return out


def parse_aws(cat, raw):
    import botocore.session
    from botocore.parsers import create_parser

    from gpufleet.catalog.fetched import Fetched
    from gpufleet.clouds.aws import prices as aws

    wanted = set(cat.regions["aws"])
    rows = [r for page in raw["pages"] for r in aws.on_demand(json.loads(page)["PriceList"], wanted, AT)]
    op = botocore.session.get_session().get_service_model("ec2").operation_model("DescribeSpotPriceHistory")
    parser = create_parser("ec2")
    for region, body in raw["spot"].items():
        history = parser.parse({"body": body, "headers": {}, "status_code": 200}, op.output_shape)["SpotPriceHistory"]
        rows += aws.spot_rows(region, history, AT)
    namer = aws.gpu_namer(cat)
    return Fetched(rows, [aws.facts_of(t, namer, AT) for t in raw["types"]])


def _billing_client_parse(pages) -> None:
    """Why the fetcher reads SKU pages with json: google-cloud-billing's REST client parses each
    page into protobuf messages (json_format, pure Python). Same pages, same run."""
    try:
        from google.cloud import billing_v1
    except ImportError:
        print("google-cloud-billing not installed: its parse time not measured")
        return
    t = time.perf_counter()
    n = sum(len(json.loads(p)["skus"]) for p in pages)
    plain = time.perf_counter() - t
    t = time.perf_counter()
    m = sum(len(billing_v1.ListSkusResponse.from_json(p, ignore_unknown_fields=True).skus) for p in pages)
    proto = time.perf_counter() - t
    print(f"the {n:,} SKUs through json.loads: {plain:.2f} s; through google-cloud-billing's messages ({m:,}): "
          f"{proto:.2f} s ({proto / plain:.1f}x)")


@dataclass
class Refreshed:
    """What one run computed: per provider the rows parsed and the problems the checks found, whether
    the store was written, the offers built from it; and the seconds parse + check + merge took."""

    prices: dict[str, int] = field(default_factory=dict)
    facts: dict[str, int] = field(default_factory=dict)
    problems: dict[str, list[str]] = field(default_factory=dict)
    written: bool = False
    offers: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.written and not any(self.problems.values())


def refresh_at(scale: int) -> Refreshed:
    """Generate the payloads at ``scale``, then parse, check and merge them, printing each step's time."""
    from gpufleet import catalog
    from gpufleet.catalog import store
    from gpufleet.fleet import refresh

    cat = catalog.load(use_config=False)
    t0 = time.perf_counter()
    raw = payloads(cat, scale)
    made = time.perf_counter() - t0
    sizes = {p: sum(len(b) for v in d.values() for b in (v if isinstance(v, list) else v.values()
                                                          if isinstance(v, dict) else [v]) if isinstance(b, bytes))
             for p, d in raw.items()}
    print(f"payloads generated in {made:.1f} s (not timed below): "
          + ", ".join(f"{p} {s / 1e6:.1f} MB" for p, s in sizes.items()))
    what = {"gcp": f"{raw['gcp']['count']:,} SKUs",
            "azure": f"{raw['azure']['count']:,} price items + {raw['azure']['resource_count']:,} resource SKUs",
            "aws": f"{raw['aws']['count']:,} Price List entries + {raw['aws']['spot_count']:,} spot records + "
                   f"{len(raw['aws']['types'])} instance types"}
    out = Refreshed()
    t = time.perf_counter()
    for module in ("botocore.parsers", "botocore.session", "google.cloud.compute_v1"):
        importlib.import_module(module)
    out.seconds = time.perf_counter() - t
    print(f"imports (google-cloud-compute, botocore): {out.seconds:.2f} s, counted in the total")
    fetched = {}
    print(f"{'provider':<8} {'parse s':>8} {'check s':>8} {'prices':>7} {'facts':>6}  input")
    for p, fn in (("gcp", parse_gcp), ("azure", parse_azure), ("aws", parse_aws)):
        t = time.perf_counter()
        got = fn(cat, raw[p])
        parse_s = time.perf_counter() - t
        t = time.perf_counter()
        problems = store.check(p, got.prices, 0, cat, got.facts)
        store.differences(p, got.facts, cat)
        check_s = time.perf_counter() - t
        out.seconds += parse_s + check_s
        out.prices[p], out.facts[p], out.problems[p] = len(got.prices), len(got.facts), problems
        fetched[p] = got
        print(f"{p:<8} {parse_s:>8.2f} {check_s:>8.2f} {len(got.prices):>7,} {len(got.facts):>6}  {what[p]}"
              + (f"  PROBLEMS: {problems[:2]}" if problems else ""))
        if problems:
            return out
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "prices.json"
        t = time.perf_counter()
        res = refresh.refresh(cat, list(fetched), path=path,
                              fetchers={p: (lambda c, progress, g=g: g) for p, g in fetched.items()})
        stored = store.read_store(path)
        merged = catalog.load(use_config=False)
        catalog.use_refreshed(merged, stored)
        out.offers = len(merged.offers())
        merge_s = time.perf_counter() - t
        size = path.stat().st_size
    out.seconds += merge_s
    out.written = res.written
    print(f"merge: checks, atomic write ({size / 1e6:.1f} MB), read back, {out.offers:,} offers built: {merge_s:.2f} s"
          f" (written: {res.written})")
    _billing_client_parse(raw["gcp"]["sku_pages"])
    return out


def main(scale: int = 15) -> int:
    """The benchmark: 0 when every payload parsed, passed the checks and merged within the target."""
    got = refresh_at(scale)
    met = got.seconds < TARGET_S
    print(f"total parse + check + merge: {got.seconds:.2f} s (target {TARGET_S:.0f} s: {'met' if met else 'MISSED'})")
    return 0 if got.ok and met else 1

if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 15))

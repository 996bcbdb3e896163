"""Build the embedded catalog's instance, price and region files from gathered source data.

    python -m gpufleet.catalog.build SOURCES [--out infra/catalog/data] [--moto PATH]

Inputs, each fact with its source:
- ``SOURCES/skypilot-catalog/**.csv``: rows of SkyPilot's public catalog (``skypilot-org/
  skypilot-catalog``, ``catalogs/v7/<cloud>/vms.csv``, Apache-2.0 data; whole files or extracts
  of their GPU rows), per instance type and zone: on-demand and spot price, vCPUs, memory,
  GPUs. The folder names the cloud (``aws``, ``gcp``, ``azure``); a ``*.SOURCE.md`` beside each
  file names the commit. SkyPilot's catalog is a snapshot of the clouds' own price APIs.
- ``SOURCES/azure-zones.csv``: Azure's availability zones per region (SkyPilot lists none).
- AWS instance facts (vCPUs, memory, GPUs, network, EFA, local NVMe) and the zone names per
  region: AWS's DescribeInstanceTypes / DescribeInstanceTypeOfferings data as recorded in moto
  (``moto/ec2/resources``; moto is a test dependency).
- ``sources/families.csv``: the GPU instance families to ship, and their GPU.
- ``sources/instance_specs.csv``: GCP and Azure instance facts SkyPilot does not give (network,
  fabric, local SSD), from the providers' machine pages.
- ``sources/pricing_pages.csv``: prices read from the providers' pricing pages (2025-06). Newer
  than the snapshot, they win where both price the same item, region and market.

Every output row keeps its source and as-of date. The checks (``problems``) refuse a build whose
result is not sound; the price bounds are those that gate ``gpufleet catalog refresh``.
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import gzip
import io
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from gpufleet.catalog import azure_retail, parse_gpus, skypilot
from gpufleet.catalog.store import price_problem
from gpufleet.errors import CatalogError

HERE = Path(__file__).parent
# SkyPilot snapshots by the catalog version folder they are read from, each a sources.csv key (its
# citation and as-of date there). A folder without a version is v7's layout.
SNAPSHOTS = {"v7": "skypilot-v7", "v9": "skypilot-v9"}
MOVED = 0.25  # a price that moved more than this share against the previous build is a note to look at
INSTANCE_COLUMNS = ["provider", "name", "gpu", "gpu_count", "vcpus", "memory_gib", "network_gbps", "fabric",
                    "efa_interfaces", "local_nvme_gb", "gpu_attach", "source", "as_of"]
PRICE_COLUMNS = ["provider", "item", "region", "market", "usd_per_hour", "zones", "source", "as_of"]


@dataclass
class Family:
    provider: str
    name: str
    match: str
    gpu: str
    unpriced: str = ""  # why the sources give the family no price (a note, not a failed build)


@dataclass
class Built:
    instances: list[dict]
    prices: list[dict]
    regions: list[dict]
    problems: list[str]
    notes: list[str]


def _csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def families(inputs: Path = HERE / "sources") -> list[Family]:
    return [Family(r["provider"], r["family"], r["match"], r["gpu"], r.get("unpriced") or "")
            for r in _csv(inputs / "families.csv")]


def family_of(provider: str, item: str, fams: list[Family]) -> Family | None:
    return next((f for f in fams if f.provider == provider and fnmatch.fnmatchcase(item, f.match)), None)


# --- AWS facts from moto's recording of the EC2 API ------------------------------------

def _moto_dir(path: str | None) -> Path:
    if path:
        return Path(path)
    try:
        import moto  # a test dependency: only the build reads its recordings
    except ImportError:
        raise CatalogError("the AWS instance facts come from moto's recording of the EC2 API, and moto is not installed",
                           "pip install -e '.[test]', or give --moto DIR (moto/ec2/resources)") from None
    return Path(moto.__file__).parent / "ec2" / "resources"


def _gbps(text: str) -> float:
    """'Up to 25 Gigabit' -> 25, '3200 Gigabit' -> 3200, '4x 100 Gigabit' -> 400."""
    words = text.replace("Up to", "").split()
    n = float(words[0].rstrip("x")) * (float(words[1]) if words[0].endswith("x") else 1.0)
    return n


_AWS_GPU = {("V100", 16): "V100", ("V100", 32): "V100-32GB", ("A100", 40): "A100-40GB", ("A100", 80): "A100-80GB"}


def aws_facts(moto_dir: Path, wanted: set[str], gpus: dict) -> dict[str, dict]:
    """Instance type -> instance row fields, for the wanted types, from DescribeInstanceTypes."""
    from importlib.metadata import version

    label = f"AWS EC2 DescribeInstanceTypes as recorded in moto {version('moto')}"
    with gzip.open(moto_dir / "instance_types.json.gz") as f:
        types = json.load(f)
    out = {}
    for name in sorted(wanted):
        t = types.get(name)
        if t is None:
            continue
        g = t["GpuInfo"]["Gpus"][0]
        mem_gb = round(g["MemoryInfo"]["SizeInMiB"] / 1024 / 8) * 8  # 22888 MiB (A10G) -> 24, 81920 -> 80
        gpu = _AWS_GPU.get((g["Name"], mem_gb), g["Name"])
        efa = (t["NetworkInfo"].get("EfaInfo") or {}).get("MaximumEfaInterfaces", 0)
        out[name] = {
            "provider": "aws", "name": name, "gpu": gpu if gpu in gpus else g["Name"], "gpu_count": g["Count"],
            "vcpus": t["VCpuInfo"]["DefaultVCpus"], "memory_gib": t["MemoryInfo"]["SizeInMiB"] / 1024,
            "network_gbps": _gbps(t["NetworkInfo"]["NetworkPerformance"]), "fabric": "efa" if efa else "ethernet",
            "efa_interfaces": efa, "local_nvme_gb": (t.get("InstanceStorageInfo") or {}).get("TotalSizeInGB", 0),
            "gpu_attach": "bundled", "source": label, "as_of": "2026-11",
        }
    return out


def aws_zone_names(moto_dir: Path, region: str) -> list[str]:
    path = moto_dir / "instance_type_offerings" / "availability-zone" / f"{region}.json.gz"
    if not path.exists():
        return []
    with gzip.open(path) as f:
        return sorted({r["Location"] for r in json.load(f)})


# --- prices ------------------------------------------------------------------------------

def _price_rows(provider: str, item: str, lst: skypilot.Listing, notes: list[str]) -> list[dict]:
    out = []
    if lst.ondemand:
        if len(lst.ondemand) > 1:
            notes.append(f"{provider} {item} {lst.region}: zones list different on-demand prices "
                         f"{sorted(lst.ondemand)}; the highest is kept")
        out.append(_row(provider, item, lst.region, "ondemand", max(lst.ondemand), sorted(lst.zones)))
    spot = {z: p for z, p in lst.spot.items() if not lst.ondemand or p < min(lst.ondemand)}
    if len(spot) < len(lst.spot):  # SkyPilot fills in the on-demand price where it found no spot price
        notes.append(f"{provider} {item} {lst.region}: a spot price not below on-demand is no spot offer: left out")
    if spot:
        out.append(_row(provider, item, lst.region, "spot", min(spot.values()), sorted(spot)))
    return out


def _row(provider, item, region, market, usd, zones, source="", as_of="") -> dict:
    return {"provider": provider, "item": item, "region": region, "market": market, "usd_per_hour": round(usd, 6),
            "zones": " ".join(z for z in zones if z != region), "source": source, "as_of": as_of}


def _gcp_bundled(item: str, spec: dict, listings: dict, region: str) -> dict[str, tuple[float, list[str]]]:
    """GCP bills an accelerator machine's vCPUs and memory and its GPUs apart; SkyPilot lists each.
    market -> (machine + GPUs, zones where both are offered)."""
    machine = listings[(item, region)]
    gpus = listings.get((f"gpu:{GCP_GPU_ROWS.get(item, _sky_name(spec['gpu']))}:{spec['gpu_count']}", region))
    if gpus is None:
        return {}
    out = {}
    if machine.ondemand and gpus.ondemand:
        zones = sorted(machine.zones & gpus.zones)
        if zones:
            out["ondemand"] = (max(machine.ondemand) + max(gpus.ondemand), zones)
    both = sorted(set(machine.spot) & set(gpus.spot))
    if both:
        out["spot"] = (min(machine.spot[z] + gpus.spot[z] for z in both), both)
    return out


# SkyPilot's name of the GPU rows that price a GCP machine's GPUs, where it is not the GPU table's
GCP_GPU_ROWS = {"a3-megagpu-8g": "H100-MEGA"}
_SKY_GPU = {"A100-40GB": "A100"}


def _sky_name(gpu: str) -> str:
    return _SKY_GPU.get(gpu, gpu)


@dataclass
class _Run:
    """What one build gathers as it goes."""

    specs: dict[tuple[str, str], dict]
    fams: list[Family]
    instances: dict[tuple[str, str], dict]
    prices: list[dict]
    problems: list[str]
    notes: list[str]
    source: str = ""  # the sources.csv key of the layer being read, and its as-of date
    as_of: str = ""
    label: str = ""  # how the instance rows name it ("SkyPilot catalog v9")

    def layer(self, source: str, as_of: str, label: str) -> "_Run":
        """A run over one source's rows: its own instances and prices, the build's problems and notes."""
        return _Run(self.specs, self.fams, {}, [], self.problems, self.notes, source, as_of, label)


def build(sources: Path, moto_dir: Path | None = None, inputs: Path = HERE / "sources") -> Built:
    """``inputs``: the folder of families.csv, instance_specs.csv and pricing_pages.csv.

    Sources are read as layers, oldest first, and a newer layer's row replaces an older one's for
    the same item, region and market: the previous build (``SOURCES/previous/``, when there), each
    SkyPilot snapshot by version, Azure's retail prices, then the pricing pages where they are
    newer. Every row keeps its own source and as-of date."""
    gpus = parse_gpus()
    run = _Run({(r["provider"], r["name"]): r for r in _csv(inputs / "instance_specs.csv")}, families(inputs),
               {}, [], [], [])
    keys = _source_keys()
    pages = _csv(inputs / "pricing_pages.csv")
    moto = _moto_dir(str(moto_dir) if moto_dir else None)
    previous = _previous(sources / "previous", keys)
    run.instances.update(previous[0])
    merged = {_key(r): r for r in previous[1]}
    for version, listings in _snapshots(sources):
        key = SNAPSHOTS.get(version)
        if key not in keys:
            run.problems.append(f"SkyPilot catalog {version}: no sources.csv key for it (known: {', '.join(SNAPSHOTS)})")
            continue
        layer = run.layer(key, keys[key], f"SkyPilot catalog {version}")
        _aws(layer, listings["aws"], moto, pages, gpus, run.instances)
        _gcp(layer, listings["gcp"], run.instances)
        _azure(layer, listings["azure"], run.instances)
        _merge(run, layer, merged)
    for path in sorted((sources / "azure-retail").glob("*")) if (sources / "azure-retail").is_dir() else []:
        month, listings = azure_retail.read(path)
        key = f"azure-retail-{month}"
        if key not in keys:
            run.problems.append(f"{path.name}: Azure retail prices of {month}: no sources.csv key {key!r}")
            continue
        layer = run.layer(key, keys[key], "Azure Retail Prices")
        _azure(layer, listings, run.instances)
        _merge(run, layer, merged)
    prices = _without_spot_outliers(_newer_first(list(merged.values()), pages, run.notes), run.notes)
    _moved(previous[1], prices, run.notes)
    regions = _regions(sources, moto, prices, run.problems)
    inst_rows = sorted(run.instances.values(), key=lambda r: (r["provider"], r["gpu"], int(r["gpu_count"]), r["name"]))
    problems = run.problems + check(inst_rows, prices, regions, gpus, run.fams)
    notes = run.notes + [f"{f.provider} {f.name}: no price: {f.unpriced}" for f in run.fams if f.unpriced]
    return Built(inst_rows, prices, regions, problems, list(dict.fromkeys(notes)))


def _key(r: dict) -> tuple[str, str, str, str]:
    return r["provider"], r["item"], r["region"], r["market"]


def _source_keys() -> dict[str, str]:
    """sources.csv: key -> as-of date."""
    return {r["key"]: r["as_of"] for r in _csv(HERE / "data" / "sources.csv")}


def _previous(folder: Path, keys: dict[str, str]) -> tuple[dict, list[dict]]:
    """The previous build's instance and price rows (its ``instances.csv`` and ``prices.csv``), each
    price dated by its own as_of or its source key's."""
    if not (folder / "prices.csv").exists():
        return {}, []
    instances = {(r["provider"], r["name"]): r for r in _csv(folder / "instances.csv")} \
        if (folder / "instances.csv").exists() else {}
    prices = [dict(r, as_of=r["as_of"] or keys.get(r["source"], "")) for r in _csv(folder / "prices.csv")]
    return instances, prices


def _snapshots(sources: Path) -> list[tuple[str, dict]]:
    """(version, {cloud: listings}) of each SkyPilot snapshot under ``skypilot-catalog/``, oldest first;
    the path names the version (``v9``; none: v7) and the cloud."""
    by_version: dict[str, dict[str, list[Path]]] = {}
    for path in sorted((sources / "skypilot-catalog").rglob("*.csv")):
        parts = path.relative_to(sources / "skypilot-catalog").parts
        version = next((p for p in parts if re.fullmatch(r"v\d+", p)), "v7")
        for cloud in ("aws", "gcp", "azure"):
            if cloud in parts:
                by_version.setdefault(version, {}).setdefault(cloud, []).append(path)
    return [(v, {c: skypilot.read(by_version[v].get(c, [])) for c in ("aws", "gcp", "azure")})
            for v in sorted(by_version, key=lambda v: int(v[1:]))]


def _merge(run: _Run, layer: _Run, merged: dict) -> None:
    """A layer's rows, dated by it, in place of the older layers' for the same item, region and market."""
    for r in layer.prices:
        merged[_key(r)] = dict(r, source=layer.source, as_of=layer.as_of)
    run.instances.update(layer.instances)


def _moved(previous: list[dict], prices: list[dict], notes: list[str]) -> None:
    """A note for each price that moved more than MOVED against the previous build."""
    before = {_key(r): float(r["usd_per_hour"]) for r in previous}
    for r in prices:
        old = before.get(_key(r))
        new = float(r["usd_per_hour"])
        if old and abs(new - old) > MOVED * old:
            notes.append(f"{'/'.join(_key(r))}: ${old:g}/h in the previous build, ${new:g}/h now ({new / old - 1:+.0%}, "
                         f"{r['source']} as of {r['as_of']}): look at it")


def _aws(run: _Run, listings: dict, moto: Path, pages: list[dict], gpus: dict, known: dict) -> None:
    """Every instance type of a family that the snapshot or a pricing page lists; its facts from
    the EC2 API's recording, else (types it lacks) from instance_specs.csv, else from an older
    layer (``known``)."""
    items = {item for (item, _r) in listings if family_of("aws", item, run.fams)} | {
        r["item"] for r in pages if r["provider"] == "aws" and family_of("aws", r["item"], run.fams)}
    facts = aws_facts(moto, items, gpus)
    for item in sorted(items - set(facts)):
        spec = run.specs.get(("aws", item))
        lst = next((v for (i, _r), v in listings.items() if i == item), None)
        if lst is None and ("aws", item) in known:
            continue
        if spec is None or lst is None:
            run.problems.append(f"aws {item}: not in the recorded EC2 instance types, and no instance_specs.csv row")
            continue
        row = _instance_row(run, spec, lst)
        if row is None:
            run.problems.append(f"aws {item}: no vCPUs and memory in the source or instance_specs.csv")
            continue
        facts[item] = row
    for name, row in facts.items():
        run.instances[("aws", name)] = row
    for (item, _region), lst in sorted(listings.items()):
        if item in facts:
            run.prices += _price_rows("aws", item, lst, run.notes)
            _agree(run.problems, run.notes, "aws", facts[item], lst)


def _gcp(run: _Run, listings: dict, known: dict) -> None:
    """Accelerator machines (machine + GPU rows, summed) and N1 machines with GPUs attached (machine
    and GPU priced apart, as GCP bills them; the offer adds them up)."""
    _drop_off_list_gpu_prices(listings, run.notes)
    separate = {s["name"].split("+", 1)[0] for (p, _n), s in run.specs.items() if p == "gcp" and s["gpu_attach"] == "separate"}
    attached = {s["gpu"] for (p, _n), s in run.specs.items() if p == "gcp" and s["gpu_attach"] == "separate"}
    for (provider, name), spec in run.specs.items():
        if provider != "gcp":
            continue
        spec = dict(spec, gpu_count=int(spec["gpu_count"]))
        base = name.split("+", 1)[0]
        regions = sorted(r for (i, r) in listings if i == base)
        if not regions:
            if ("gcp", name) not in known:  # an older layer's row stands
                run.notes.append(f"gcp {name}: not in the snapshot: left out")
            continue
        row = _instance_row(run, spec, listings[(base, regions[0])])
        if row is None:
            run.problems.append(f"gcp {name}: no vCPUs and memory in the source or instance_specs.csv")
            continue
        run.instances[("gcp", name)] = row
        if spec["gpu_attach"] != "bundled":
            continue
        for region in regions:
            for market, (usd, zones) in _gcp_bundled(name, spec, listings, region).items():
                run.prices.append(_row("gcp", name, region, market, usd, zones))
    for (item, _region), lst in sorted(listings.items()):
        if item in separate:
            run.prices += _price_rows("gcp", item, lst, run.notes)
        elif item.startswith("gpu:") and item.endswith(":1"):  # an attached GPU is priced per GPU
            gpu = skypilot.GPU_NAMES.get(item.split(":")[1], item.split(":")[1])
            if gpu in attached:
                run.prices += _price_rows("gcp", f"gpu:{gpu}", lst, run.notes)


def _azure(run: _Run, listings: dict, known: dict) -> None:
    """Per region; the sources list no zones (they come from azure-zones.csv). ``known``: the
    instance rows of older layers, kept where this source gives no vCPUs and memory."""
    for (item, _region), lst in sorted(listings.items()):
        spec = run.specs.get(("azure", item))
        if spec is None:
            if family_of("azure", item, run.fams):
                run.notes.append(f"azure {item}: in a family but without instance_specs.csv row: left out")
            continue
        key = ("azure", item)
        if key not in run.instances and (lst.vcpus or key not in known):  # else an older layer's row stands
            row = _instance_row(run, spec, lst)
            if row is None:
                run.notes.append(f"azure {item}: no vCPUs and memory in the source or instance_specs.csv: left out")
                continue
            run.instances[key] = row
        row = run.instances.get(key) or known[key]
        _agree(run.problems, run.notes, "azure", row, lst)
        run.prices += _price_rows("azure", item, lst, run.notes)


OFF_LIST = 0.55  # a GPU's on-demand price below this fraction of its dearest region's is not a list price


def _drop_off_list_gpu_prices(listings: dict, notes: list[str]) -> None:
    """The snapshot prices some GCP GPUs in some regions at one repeated figure, a third to a half of
    what the same GPU costs in the other regions and on Google's pricing page (H100: $4.20 a GPU-hour
    in seven regions against $9.80-12.74 in the rest, $11.06 on the page): another SKU than on-demand
    list (Flex-start, most likely), not an offer anyone gets on demand. Such on-demand prices are
    dropped, and said so. Regions differ by up to 1.6x in list price (L4: $0.56-0.90), so the line
    sits below that and above the lone figures (0.33-0.50 of the dearest region)."""
    by_item: dict[str, list] = {}
    for (item, _region), lst in listings.items():
        if item.startswith("gpu:") and lst.ondemand:
            by_item.setdefault(item, []).append(lst)
    for item, lsts in by_item.items():
        dearest = max(max(x.ondemand) for x in lsts)
        low = sorted(x.region for x in lsts if max(x.ondemand) < OFF_LIST * dearest)
        for x in lsts:
            if x.region in low:
                x.ondemand = set()
        if low:
            notes.append(f"gcp {item}: on-demand price below {OFF_LIST:.0%} of its dearest region's (${dearest:g}/h) in "
                         f"{', '.join(low)}: not a list price, left out")


def _instance_row(run: _Run, spec: dict, lst: skypilot.Listing) -> dict | None:
    """The instance's row: its facts from instance_specs.csv, vCPUs and memory from the source's
    rows (or, where the source gives none, from instance_specs.csv's own); None when neither has them."""
    if lst.vcpus:
        vcpus, memory, said = int(lst.vcpus), lst.memory_gib or 0, f"vCPUs and memory: {run.label}"
    elif spec.get("vcpus"):
        vcpus, memory, said = int(spec["vcpus"]), float(spec["memory_gib"]), "vCPUs and memory from the same page"
    else:
        return None
    return {"provider": spec["provider"], "name": spec["name"], "gpu": spec["gpu"], "gpu_count": int(spec["gpu_count"]),
            "vcpus": vcpus, "memory_gib": memory, "network_gbps": spec["network_gbps"],
            "fabric": spec["fabric"], "efa_interfaces": spec["efa_interfaces"], "local_nvme_gb": spec["local_nvme_gb"],
            "gpu_attach": spec["gpu_attach"], "source": f"{spec['source']}; {said}", "as_of": run.as_of}


# Where the snapshot and the provider's own page disagree, and the page is taken (said in the build's notes)
DISAGREEMENTS = {("azure", "Standard_ND96isr_H100_v5"): "SkyPilot's rows say 12 GPUs; Microsoft's ND H100 v5 page "
                 "(learn.microsoft.com/azure/virtual-machines/nd-h100-v5-series) says 8 x H100: the page's 8"}


def _agree(problems: list[str], notes: list[str], provider: str, row: dict, lst: skypilot.Listing) -> None:
    """The snapshot's GPU count for an instance type must be the instance table's."""
    if lst.gpu_count is None or lst.gpu_count == int(row["gpu_count"]):
        return
    known = DISAGREEMENTS.get((provider, row["name"]))
    if known:
        if known not in notes:
            notes.append(known)
        return
    problems.append(f"{provider} {row['name']}: the snapshot says {lst.gpu_count} GPUs, the instance facts "
                    f"{row['gpu_count']}")


def _newer_first(snapshot: list[dict], pages: list[dict], notes: list[str]) -> list[dict]:
    """The pricing pages' rows in place of the sources' for the same item, region and market where
    the page is newer; and the items only a page prices."""
    page_keys = {(r["provider"], r["item"], r["region"], r["market"]): r for r in pages}
    out = []
    for r in snapshot:
        key = (r["provider"], r["item"], r["region"], r["market"])
        page = page_keys.get(key)
        if page is None or page["as_of"] <= r["as_of"]:  # a page no newer than the source's row
            out.append(r)
            continue
        old, new = float(r["usd_per_hour"]), float(page["usd_per_hour"])
        if abs(old - new) > 0.02 * new:
            notes.append(f"{'/'.join(key)}: snapshot ${old:g}/h, pricing page ({page['as_of']}) ${new:g}/h: the page's")
        out.append(dict(r, usd_per_hour=new, source=page["source"], as_of=page["as_of"]))
    have = {(r["provider"], r["item"], r["region"], r["market"]) for r in out}
    out += [dict(r, zones="") for k, r in page_keys.items() if k not in have]
    return sorted(out, key=lambda r: (r["provider"], r["item"], r["region"], r["market"]))


# The spot discounts the providers publish, (least, most) off on-demand: AWS "up to 90% off the
# On-Demand price" (aws.amazon.com/ec2/spot/pricing), Azure "up to 90%" (azure.microsoft.com/pricing/
# spot-virtual-machines), GCP "60-91% off" (cloud.google.com/spot-vms). The snapshot's lowest spot
# prices sit on those floors (AWS: exactly a tenth of on-demand in tens of regions), none below.
SPOT_DISCOUNT = {"aws": (0.0, 0.90), "azure": (0.0, 0.90), "gcp": (0.60, 0.91)}
LIST_SPREAD = 1.61  # the most an item's list price differs between regions in one snapshot (GCP L4: $0.56-0.90)


def spot_outliers(prices: list[dict]) -> dict[tuple[str, str, str], str]:
    """(provider, item, region) of each spot price outside its provider's published discounts -> why.
    Such a row is no spot offer: SkyPilot's filler (the on-demand price where it found no spot price;
    in a region whose on-demand row was left out as off-list nothing showed it) or another SKU's
    price. A spot price is measured against the same region's on-demand price; in a region without
    one, against what that price can be: within LIST_SPREAD of the item's in the other regions."""
    ondemand: dict[tuple[str, str], dict[str, float]] = {}
    for p in prices:
        if p["market"] == "ondemand":
            ondemand.setdefault((p["provider"], p["item"]), {})[p["region"]] = float(p["usd_per_hour"])
    out = {}
    for p in prices:
        listed = ondemand.get((p["provider"], p["item"]), {})
        if p["market"] != "spot" or p["provider"] not in SPOT_DISCOUNT or not listed:
            continue
        least, most = SPOT_DISCOUNT[p["provider"]]
        here = listed.get(p["region"])
        high, low = (here, here) if here else (min(listed.values()) * LIST_SPREAD, max(listed.values()) / LIST_SPREAD)
        spot = float(p["usd_per_hour"])
        # a price at exactly the least discount is one (GCP: 40% of on-demand in tens of rows), and prices are
        # quoted to four decimals (a tenth of $42.6044 is $4.2604): 0.1% leeway at either end
        if spot >= high * (1 - least) * (1.001 if least else 1.0) or spot < low * (1 - most) * 0.999:
            ref = f"${here:g}/h there" if here else f"${low:.4g}-{high:.4g}/h (its other regions' within {LIST_SPREAD}x)"
            off = f"{least:.0%}-{most:.0%}" if least else f"up to {most:.0%}"
            out[(p["provider"], p["item"], p["region"])] = (
                f"{p['provider']} {p['item']} {p['region']}: spot ${spot:g}/h against on-demand {ref}, where "
                f"{p['provider']} publishes spot at {off} off on-demand: no spot offer, left out")
    return out


def _without_spot_outliers(prices: list[dict], notes: list[str]) -> list[dict]:
    out = spot_outliers(prices)
    notes += out.values()
    return [p for p in prices if p["market"] != "spot" or (p["provider"], p["item"], p["region"]) not in out]


def _regions(sources: Path, moto: Path, prices: list[dict], problems: list[str]) -> list[dict]:
    """Every region of the shipped prices (and of the regions file before), with its zones."""
    old = _csv(sources / "previous" / "regions.csv" if (sources / "previous" / "regions.csv").exists()
               else HERE / "data" / "regions.csv")
    azure_zones = {r["region"]: r["zones"] for r in _csv(sources / "azure-zones.csv")} \
        if (sources / "azure-zones.csv").exists() else {}
    out = {(r["provider"], r["region"]): r for r in old}
    for p in prices:
        key = (p["provider"], p["region"])
        if key in out:
            continue
        if p["provider"] == "aws":
            zones = " ".join(aws_zone_names(moto, p["region"]))
        elif p["provider"] == "gcp":
            zones = " ".join(sorted({z for q in prices if (q["provider"], q["region"]) == key for z in q["zones"].split()}))
        else:
            zones = azure_zones.get(p["region"])
            if zones is None:
                problems.append(f"azure {p['region']}: no zone list in azure-zones.csv (write an empty one for a region "
                                "without availability zones)")
                zones = ""
        out[key] = {"provider": key[0], "region": key[1], "geo": geo(*key), "zones": zones}
    return sorted(out.values(), key=lambda r: (r["provider"], r["region"]))


_AZURE_GEO = [("europe", "eu"), ("uk", "eu"), ("france", "eu"), ("germany", "eu"), ("norway", "eu"), ("sweden", "eu"),
              ("switzerland", "eu"), ("poland", "eu"), ("italy", "eu"), ("spain", "eu"), ("asia", "asia"),
              ("japan", "asia"), ("korea", "asia"), ("indonesia", "asia"), ("malaysia", "asia"), ("india", "asia"),
              ("australia", "asia"), ("newzealand", "asia"), ("brazil", "sa"), ("chile", "sa"), ("austria", "eu"),
              ("belgium", "eu"), ("denmark", "eu"),
              ("canada", "us"), ("mexico", "us"), ("uae", "me"), ("qatar", "me"), ("israel", "me"),
              ("southafrica", "africa"), ("us", "us")]
_PREFIX_GEO = [("us-", "us"), ("ca-", "us"), ("northamerica-", "us"), ("eu-", "eu"), ("europe-", "eu"),
               ("ap-", "asia"), ("asia-", "asia"), ("australia-", "asia"), ("sa-", "sa"), ("southamerica-", "sa"),
               ("me-", "me"), ("il-", "me"), ("af-", "africa"), ("africa-", "africa"), ("mx-", "us")]


def geo(provider: str, region: str) -> str:
    table = _AZURE_GEO if provider == "azure" else _PREFIX_GEO
    match = (lambda r, k: k in r) if provider == "azure" else (lambda r, k: r.startswith(k))
    return next((g for k, g in table if match(region, k)), "other")


# --- checks ------------------------------------------------------------------------------

def check(instances: list[dict], prices: list[dict], regions: list[dict], gpus: dict, fams: list[Family]) -> list[str]:
    """What makes a build unsound: an instance whose GPU is not in the GPU table, or whose family's
    GPU differs; a price outside the bounds refresh enforces; a region without a zone list (AWS
    and GCP: no zones at all; Azure: not in the zone source); a family with no priced region."""
    out = []
    by_name = {(r["provider"], r["name"]): r for r in instances}
    for r in instances:
        if r["gpu"] not in gpus:
            out.append(f"{r['provider']} {r['name']}: GPU {r['gpu']!r} has no row in gpus.csv")
        fam = family_of(r["provider"], r["name"], fams)
        if fam is not None and fam.gpu != r["gpu"]:
            out.append(f"{r['provider']} {r['name']}: its family {fam.name} carries {fam.gpu}, the facts say {r['gpu']}")
    separate = {n.split("+")[0] for (p, n), r in by_name.items() if r["gpu_attach"] == "separate"}
    for p in prices:
        where = f"{p['provider']} {p['item']} {p['region']} {p['market']}"
        inst = by_name.get((p["provider"], p["item"]))
        gpu_count = inst and int(inst["gpu_count"])
        if inst is None and not (p["item"].startswith("gpu:") or p["item"] in separate):
            out.append(f"{where}: not an instance type of the built table")
            continue
        problem = price_problem(where, float(p["usd_per_hour"]), 1 if p["item"].startswith("gpu:") else gpu_count)
        if problem:
            out.append(problem)
    priced = {(p["provider"], p["item"]) for p in prices}
    for f in fams:
        names = [n for (prov, n) in by_name if prov == f.provider and fnmatch.fnmatchcase(n, f.match)]
        if not f.unpriced and not any((f.provider, n) in priced or (f.provider, n.split("+")[0]) in priced for n in names):
            out.append(f"{f.provider} {f.name}: no instance type of the family has a price (not in any source)")
    zoned = {(r["provider"], r["region"]): r["zones"].split() for r in regions}
    for key in sorted({(p["provider"], p["region"]) for p in prices}):
        if key not in zoned or (key[0] != "azure" and not zoned[key]):
            out.append(f"{key[0]} {key[1]}: a priced region without a zone list")
    return out


def write(built: Built, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, columns, rows in (("instances.csv", INSTANCE_COLUMNS, built.instances),
                                ("prices.csv", PRICE_COLUMNS, built.prices),
                                ("regions.csv", ["provider", "region", "geo", "zones"], built.regions)):
        buf = io.StringIO()
        w = csv.DictWriter(buf, columns, lineterminator="\n", extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: _fmt(r.get(k, "")) for k in columns})
        (out / name).write_text(buf.getvalue(), encoding="utf-8")


def _fmt(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpufleet.catalog.build", description=__doc__.split("\n\n")[0])
    ap.add_argument("sources", type=Path, help="folder with skypilot-catalog/ and azure-zones.csv")
    ap.add_argument("--out", type=Path, default=HERE / "data", help="where the catalog files go")
    ap.add_argument("--moto", help="moto's ec2/resources folder (default: the installed moto's)")
    args = ap.parse_args(argv)
    if not (args.sources / "skypilot-catalog").is_dir():
        print(f"error: {args.sources}/skypilot-catalog: no such folder", file=sys.stderr)
        return 2
    try:
        built = build(args.sources, Path(args.moto) if args.moto else None)
    except CatalogError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for n in built.notes:
        print(f"note: {n}")
    if built.problems:
        for p in built.problems:
            print(f"problem: {p}", file=sys.stderr)
        print(f"{len(built.problems)} problems: nothing written", file=sys.stderr)
        return 1
    write(built, args.out)
    markets = {m: sum(1 for p in built.prices if p["market"] == m) for m in ("ondemand", "spot")}
    print(f"wrote {len(built.instances)} instance types, {markets['ondemand']} on-demand and {markets['spot']} spot "
          f"prices, {len(built.regions)} regions to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

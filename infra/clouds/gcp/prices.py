"""GCP prices: the Cloud Billing Catalog API's Compute Engine SKUs, priced onto machine types.

Compute Engine does not sell a GPU machine at one price: a bill has a vCPU line, a RAM line
and a GPU line (a2-highgpu-1g = 12 x "A2 Instance Core" + 85 GiB x "A2 Instance Ram" + 1 x
"Nvidia Tesla A100 GPU"). Reading only one of them makes an A100 look four times cheaper than
it is. So this fetcher

1. reads every Compute Engine SKU (``GET https://cloudbilling.googleapis.com/v1/services/
   6F81-5844-456A/skus``, 5,000 a page, ``nextPageToken``, with google-auth's credentials): each SKU has
   ``skuId``, ``description``, ``category`` (``resourceFamily: Compute``, ``resourceGroup``,
   ``usageType``: ``OnDemand`` / ``Preemptible`` (spot) / ``Commit1Yr`` ...),
   ``serviceRegions`` and ``pricingInfo[].pricingExpression`` (``usageUnit`` ``h`` or
   ``GiBy.h``, ``tieredRates[].unitPrice`` as ``units`` + ``nanos``).
   https://cloud.google.com/billing/docs/reference/rest/v1/services.skus/list
   Core/RAM SKUs are told apart by their description (``[Spot Preemptible ]<FAMILY>
   [Predefined ]Instance Core|Ram running in <geo>``), GPU SKUs by ``Nvidia <model> GPU
   [attached to ...] running in <geo>``; commitments, custom and sole-tenant SKUs are left out.
   Where one GPU has several SKUs in a region and market, a machine family's own (``attached to
   A3 VMs`` for an A3) is taken first, then a plain one (no ``attached to``, ``attached to
   VMs``, ``attached to Spot Preemptible VMs``), then any other; Virtual Workstation SKUs (a
   licence billed on top of the GPU) are not GPU prices;
2. reads the machine types (``guestCpus``, ``memoryMb``, ``accelerators``) and accelerator types
   (``maximumCardsPerInstance``) per zone from google-cloud-compute's aggregated lists;
3. prices each catalog machine type in each region whose zones offer it as vCPUs x core +
   GiB x RAM + GPUs x GPU of its family and market, keeping each part (what, SKU id, $/h).
   N1 machines and their attachable GPUs stay separate items (``n1-standard-8``, ``gpu:T4``),
   as the embedded catalog has them.

Local SSD that some machine types come with is billed as its own SKU and is not included.

The SKU pages are read as JSON, not through google-cloud-billing's ``CloudCatalogClient``:
that client turns each page into protobuf messages with protobuf's pure-Python JSON parser,
about 7.5 s for the ~25,000 SKUs of a full list here against about 1 s for ``json.loads``
(tests/bench/bench_refresh.py prints both), which alone would break the refresh's 10 s budget.
A 429 or 5xx page is retried after its ``Retry-After``; a page that is not the documented JSON
fails the whole fetch. ``GPUFLEET_GCP_BILLING_ENDPOINT`` replaces the API endpoint;
``GPUFLEET_GCP_ENDPOINT`` the Compute one (as for ``gpufleet status``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass

import requests

from gpufleet.catalog.fetched import Fetched, FetchedPrice, FetchError, InstanceFacts, missing_note, retry_after, stamp
from gpufleet.clouds.gcp.api import GcpApi, classify
from gpufleet.clouds.gcp.rules import ACCELERATORS
from gpufleet.errors import CredentialsError

SERVICE = "services/6F81-5844-456A"  # Compute Engine in the Cloud Billing Catalog
ENDPOINT = "https://cloudbilling.googleapis.com"
API = "gcp-cloud-billing-catalog"
MACHINE_API = "gcp-compute-machine-types"
PAGE_SIZE = 5000
MARKETS = {"OnDemand": "ondemand", "Preemptible": "spot"}
_PART = re.compile(r"^(?:Spot Preemptible |Preemptible )?(?P<family>[A-Z][A-Z0-9]*) (?:Predefined )?"
                   r"Instance (?P<part>Core|Ram) running in ", re.I)
_GPU = re.compile(r"^(?:Spot Preemptible |Preemptible )?Nvidia (?P<model>.+?) GPU(?P<attached> attached to .+?)?"
                  r" running in ", re.I)
# GPU model as billing descriptions write it -> the catalog's GPU (2026-11, descriptions as listed
# by the Cloud Billing Catalog API: "Nvidia Tesla T4", "Nvidia Tesla A100 80GB", "Nvidia H100 80GB" ...)
BILLING_GPUS = {"k80": "K80", "p4": "P4", "p100": "P100", "v100": "V100", "t4": "T4", "l4": "L4",
                "a100": "A100-40GB", "a100 40gb": "A100-40GB", "a100 80gb": "A100-80GB",
                "h100": "H100", "h100 80gb": "H100", "h200": "H200", "h200 141gb": "H200", "b200": "B200"}


@dataclass(frozen=True)
class Rate:
    sku_id: str
    description: str
    usd: float  # per hour (GPU, core) or per GiB-hour (RAM)
    attached: str = ""  # "A3 VMs" of "... GPU attached to A3 VMs running in"; "" for the plain SKU


GENERIC = ("", "VMs", "Spot Preemptible VMs", "Preemptible VMs")  # "attached to" naming no machine family


def pick(rates: dict[str, Rate] | None, family: str) -> Rate | None:
    """The family's own SKU, else a plain one ("... GPU running in", "... GPU attached to VMs"),
    else any (the lowest SKU id, for a stable choice)."""
    if not rates:
        return None
    for key in (f"{family} VMs", *GENERIC):
        if key in rates:
            return rates[key]
    return rates[min(rates, key=lambda k: rates[k].sku_id)]


def accelerator_gpu(cat, accel: str) -> str | None:
    """The catalog GPU of a GCP accelerator type (``nvidia-tesla-v100`` -> V100)."""
    for gpu, name in ACCELERATORS.items():
        if name == accel:
            return gpu
    return cat.gpu(accel).name if cat.has_gpu(accel) else None


def gpu_of(model: str) -> str | None:
    m = re.sub(r"\s+", " ", model.lower().replace("tesla ", "")).strip()
    return BILLING_GPUS.get(m)


def _usd(pricing_info) -> tuple[float, str] | None:
    """USD per usage unit of the newest price (the first priced tier) and the unit."""
    if not pricing_info:
        return None
    expr = pricing_info[-1]["pricingExpression"]
    for t in sorted(expr.get("tieredRates") or [], key=lambda t: float(t.get("startUsageAmount") or 0)):
        price = t["unitPrice"]
        usd = int(price.get("units") or 0) + int(price.get("nanos") or 0) / 1e9
        if usd > 0:
            return usd, expr.get("usageUnit", "")
    return None


def rates(skus: Iterable[dict], regions: set[str]) -> tuple[dict[tuple[str, str, str, str], dict[str, Rate]], set[str]]:
    """(part, family or catalog GPU, region, market) -> {what it is attached to: Rate} for the hourly
    Compute SKUs (JSON, as the API lists them) in ``regions``; and the GPU models priced that the
    catalog does not know."""
    out: dict[tuple[str, str, str, str], dict[str, Rate]] = {}
    unknown: set[str] = set()
    for sku in skus:
        category = sku.get("category") or {}
        market = MARKETS.get(category.get("usageType"))
        if market is None or category.get("resourceFamily") != "Compute":
            continue
        if not regions.intersection(sku.get("serviceRegions") or ()):
            continue
        desc = sku.get("description", "")
        m = _PART.match(desc)
        if m:
            part = "core" if m.group("part").lower() == "core" else "ram"
            name, attached, unit = m.group("family").upper(), "", "h" if part == "core" else "GiBy.h"
        else:
            g = _GPU.match(desc)
            if not g or "virtual workstation" in g.group("model").lower():
                continue  # a Virtual Workstation SKU is a licence on top of the GPU, not the GPU
            part, name, unit = "gpu", gpu_of(g.group("model")), "h"
            attached = (g.group("attached") or "").removeprefix(" attached to ")
            if name is None:
                unknown.add(g.group("model"))
                continue
        priced = _usd(sku.get("pricingInfo"))
        if priced is None or priced[1] != unit:
            continue
        rate = Rate(sku["skuId"], desc, priced[0], attached)
        for region in sku["serviceRegions"]:
            if region in regions:
                out.setdefault((part, name, region, market), {}).setdefault(attached, rate)
    return out, unknown


def sku_pages(session, base: str, *, page_size: int = PAGE_SIZE, retries: int = 5, max_wait: float = 60.0,
              sleep=None, max_pages: int = 500):
    """Each page's SKUs (JSON dicts), following ``nextPageToken``; ``session`` is an authorized
    requests session."""
    sleep = sleep or time.sleep
    url = f"{base.rstrip('/')}/v1/{SERVICE}/skus"
    params = {"pageSize": page_size, "currencyCode": "USD"}
    for n in range(1, max_pages + 1):
        for attempt in range(retries + 1):
            try:
                resp = session.get(url, params=params, timeout=120)
            except (requests.RequestException, OSError) as e:
                if attempt >= min(retries, 2):
                    raise FetchError("gcp", f"the Cloud Billing Catalog API cannot be reached ({str(e)[:160]})",
                                     "check the network (or HTTPS proxy); the previous prices are kept") from None
                sleep(min(2.0 ** attempt, max_wait))
                continue
            if resp.status_code in (429, 500, 502, 503, 504) and attempt < retries:
                sleep(min(retry_after(resp.headers.get("Retry-After"), 2.0 ** attempt), max_wait))
                continue
            if resp.status_code >= 400:
                try:
                    msg = resp.json()["error"]["message"]
                except (ValueError, KeyError, TypeError):
                    msg = resp.text[:160]
                raise FetchError("gcp", f"the Cloud Billing Catalog API answered {resp.status_code} ({msg[:160]})",
                                 "enable the Cloud Billing API for the project (and try again later); the previous "
                                 "prices are kept")
            break
        try:
            body = json.loads(resp.content)
            skus = body["skus"]
            if not isinstance(skus, list) or not all(isinstance(x, dict) and isinstance(x.get("pricingInfo", []), list)
                                                     for x in skus):
                raise TypeError("skus is not a list of SKU objects")
        except (ValueError, KeyError, TypeError) as e:
            raise FetchError("gcp", f"page {n} of the Cloud Billing Catalog API is not the documented JSON "
                             f"({str(e)[:120]}): {resp.content[:80]!r}",
                             "try again later; the previous prices are kept") from None
        yield skus
        if not body.get("nextPageToken"):
            return
        params["pageToken"] = body["nextPageToken"]
    raise FetchError("gcp", f"more than {max_pages} pages of SKUs; the API is not answering as documented")


def all_skus(session, *, sleep=None, progress=None):
    """Every SKU of every page (``GPUFLEET_GCP_BILLING_ENDPOINT`` or the API), each page told to ``progress``."""
    seen = 0
    base = os.environ.get("GPUFLEET_GCP_BILLING_ENDPOINT", ENDPOINT)
    for n, page in enumerate(sku_pages(session, base, sleep=sleep), 1):
        seen += len(page)
        if progress:
            progress(f"SKU page {n} ({seen:,} SKUs)")
        yield from page


@dataclass
class Machine:
    cpus: int
    memory_gib: float
    accelerators: dict[str, int]  # accelerator type -> count
    zones: dict[str, list[str]]  # region -> zones


def machines(pairs) -> dict[str, Machine]:
    """Machine types from an aggregated list's (scope, scoped list) pairs."""
    out: dict[str, Machine] = {}
    for _scope, scoped in pairs:
        for mt in getattr(scoped, "machine_types", None) or []:
            zone = mt.zone.rsplit("/", 1)[-1]
            m = out.setdefault(mt.name, Machine(mt.guest_cpus, mt.memory_mb / 1024.0,
                                                {a.guest_accelerator_type: a.guest_accelerator_count
                                                 for a in mt.accelerators}, {}))
            m.zones.setdefault(zone.rsplit("-", 1)[0], []).append(zone)
    for m in out.values():
        for zs in m.zones.values():
            zs.sort()
    return out


def accelerators(pairs) -> dict[str, tuple[int, dict[str, list[str]]]]:
    """Accelerator type -> (most cards per VM, region -> zones)."""
    out: dict[str, tuple[int, dict[str, list[str]]]] = {}
    for _scope, scoped in pairs:
        for at in getattr(scoped, "accelerator_types", None) or []:
            zone = at.zone.rsplit("/", 1)[-1]
            most, zones = out.get(at.name, (0, {}))
            zones.setdefault(zone.rsplit("-", 1)[0], []).append(zone)
            out[at.name] = (max(most, at.maximum_cards_per_instance), zones)
    return out


def compose(cat, rate: dict, mts: dict[str, Machine], accs: dict, regions: list[str], at: str) -> Fetched:
    """Price every catalog GCP machine type from its parts; its facts from the machine types."""
    prices: dict[tuple[str, str, str], FetchedPrice] = {}
    facts: list[InstanceFacts] = []
    notes: list[str] = []

    def machine_price(item, family, m, gpus, region, market):
        core, ram = pick(rate.get(("core", family, region, market)), family), \
            pick(rate.get(("ram", family, region, market)), family)
        if core is None or ram is None:
            return None
        parts = [{"what": f"{m.cpus} vCPU ({core.description})", "sku_id": core.sku_id, "usd_per_hour": m.cpus * core.usd},
                 {"what": f"{m.memory_gib:g} GiB ({ram.description})", "sku_id": ram.sku_id,
                  "usd_per_hour": m.memory_gib * ram.usd}]
        for gpu, count in gpus:
            g = pick(rate.get(("gpu", gpu, region, market)), family)
            if g is None:
                return None
            parts.append({"what": f"{count}x {gpu} ({g.description})", "sku_id": g.sku_id,
                          "usd_per_hour": count * g.usd})
        for p in parts:
            p["usd_per_hour"] = round(p["usd_per_hour"], 6)
        return FetchedPrice("gcp", item, region, market, round(sum(p["usd_per_hour"] for p in parts), 6), API,
                            "+".join(p["sku_id"] for p in parts), at, tuple(parts))

    for (provider, name), it in sorted(cat.instances.items()):
        if provider != "gcp":
            continue
        base = it.base_machine
        m = mts.get(base)
        if m is None:
            notes.append(f"{base}: not among the project's machine types; {name} not priced")
            continue
        family = base.split("-", 1)[0].upper()
        if it.gpu_attach == "bundled":
            gpus = [(accelerator_gpu(cat, a) or a, n) for a, n in m.accelerators.items()]
            zones = m.zones
            facts.append(InstanceFacts("gcp", name, MACHINE_API, at, gpu=gpus[0][0] if len(gpus) == 1 else None,
                                       gpu_count=sum(n for _, n in gpus), vcpus=m.cpus, memory_gib=m.memory_gib,
                                       zones={r: z for r, z in zones.items() if r in regions}))
            for region in regions:
                if region not in zones:
                    continue  # the region prices the family's SKUs but no zone has the machine
                for market in MARKETS.values():
                    row = machine_price(name, family, m, gpus, region, market)
                    if row:
                        prices[(name, region, market)] = row
            continue
        accel = next((a for a in accs if accelerator_gpu(cat, a) == it.gpu), None)
        most, azones = accs.get(accel, (0, {}))
        zones = {r: sorted(set(z) & set(azones.get(r, []))) for r, z in m.zones.items()}
        zones = {r: z for r, z in zones.items() if z and r in regions}
        # a count above the accelerator's most per VM is one the API says cannot be had
        facts.append(InstanceFacts("gcp", name, MACHINE_API, at, gpu=it.gpu if accel else None,
                                   gpu_count=None if accel is None else min(it.gpu_count, most),
                                   vcpus=m.cpus, memory_gib=m.memory_gib, zones=zones))
        if accel is None:
            notes.append(f"{name}: no accelerator type of the project is a {it.gpu}; its GPU price is not checked")
        for region in regions:
            for market in MARKETS.values():
                if region in m.zones and (base, region, market) not in prices:
                    row = machine_price(base, family, m, [], region, market)
                    if row:
                        prices[(base, region, market)] = row
                g = pick(rate.get(("gpu", it.gpu, region, market)), family)
                if g is not None and region in zones:
                    prices[(f"gpu:{it.gpu}", region, market)] = FetchedPrice(
                        "gcp", f"gpu:{it.gpu}", region, market, round(g.usd, 6), API, g.sku_id, at,
                        ({"what": f"1x {it.gpu} ({g.description})", "sku_id": g.sku_id, "usd_per_hour": round(g.usd, 6)},))
    return Fetched(sorted(prices.values(), key=lambda r: (r.item, r.region, r.market)), facts, notes)


def fetch(cat, regions: list[str], *, now: dt.datetime | None = None, sleep=None, progress=None) -> Fetched:
    """Every catalog GCP machine type priced in ``regions``, on-demand and spot."""
    g = GcpApi()
    try:
        session = g.session()
    except CredentialsError as e:
        raise FetchError("gcp", str(e).removeprefix("gcp: "), e.hint) from None
    at = stamp(now)
    wanted = sorted({it.base_machine for (p, _), it in cat.instances.items() if p == "gcp"})
    if progress:
        progress("machine and accelerator types")
    try:
        mts = machines(g.client("MachineTypesClient").aggregated_list(request={
            "project": g.project, "filter": f'name eq "({"|".join(map(re.escape, wanted))})"', "max_results": 500}))
        accs = accelerators(g.client("AcceleratorTypesClient").aggregated_list(request={"project": g.project}))
    except Exception as e:  # noqa: BLE001 - refused credentials, disabled API, network
        raise FetchError("gcp", f"the machine types could not be read ({classify(e)[1][:200]})",
                         "check the project and its Compute Engine API; the previous prices are kept") from None
    return build(cat, all_skus(session, sleep=sleep, progress=progress), mts, accs, regions, at)


def build(cat, skus: Iterable, mts: dict[str, Machine], accs: dict, regions: list[str], at: str) -> Fetched:
    """SKUs + machine and accelerator types -> priced machine types (what ``fetch`` does once
    the API has answered; the benchmark calls it on recorded pages)."""
    rate, unknown = rates(skus, set(regions))
    out = compose(cat, rate, mts, accs, regions, at)
    if unknown:
        out.notes.append("GPU models the API prices that the catalog does not know: " + ", ".join(sorted(unknown)))
    out.notes += missing_note("accelerator types", [a for a in accs if accelerator_gpu(cat, a) is None])
    return out


# One SKU any sound price list has (on-demand, in its home region): a refresh without it is refused.
FLAGSHIPS = [("a3-highgpu-8g", "us-central1")]


def for_catalog(cat, progress=None) -> Fetched:
    """Every catalog GCP machine type priced in every region the catalog has."""
    return fetch(cat, sorted(cat.regions.get("gcp", {})), progress=progress)

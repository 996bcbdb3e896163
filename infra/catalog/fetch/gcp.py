"""GCP prices: the Cloud Billing Catalog API's Compute Engine SKUs, priced onto machine types.

Compute Engine does not sell a GPU machine at one price: a bill has a vCPU line, a RAM line
and a GPU line (a2-highgpu-1g = 12 x "A2 Instance Core" + 85 GiB x "A2 Instance Ram" + 1 x
"Nvidia Tesla A100 GPU"). Reading only one of them makes an A100 look four times cheaper than
it is. So this fetcher

1. reads every Compute Engine SKU (``services/6F81-5844-456A/skus``, google-cloud-billing's
   ``CloudCatalogClient.list_skus`` over REST, 5,000 a page, ``nextPageToken``): each SKU has
   ``skuId``, ``description``, ``category`` (``resourceFamily: Compute``, ``resourceGroup``,
   ``usageType``: ``OnDemand`` / ``Preemptible`` (spot) / ``Commit1Yr`` ...),
   ``serviceRegions`` and ``pricingInfo[].pricingExpression`` (``usageUnit`` ``h`` or
   ``GiBy.h``, ``tieredRates[].unitPrice`` as ``units`` + ``nanos``).
   https://cloud.google.com/billing/docs/reference/rest/v1/services.skus/list
   Core/RAM SKUs are told apart by their description (``[Spot Preemptible ]<FAMILY>
   [Predefined ]Instance Core|Ram running in <geo>``), GPU SKUs by ``Nvidia <model> GPU
   [attached to ...] running in <geo>``; commitments, custom and sole-tenant SKUs are left out;
2. reads the machine types (``guestCpus``, ``memoryMb``, ``accelerators``) and accelerator types
   (``maximumCardsPerInstance``) per zone from google-cloud-compute's aggregated lists;
3. prices each catalog machine type in each region whose zones offer it as vCPUs x core +
   GiB x RAM + GPUs x GPU of its family and market, keeping each part (what, SKU id, $/h).
   N1 machines and their attachable GPUs stay separate items (``n1-standard-8``, ``gpu:T4``),
   as the embedded catalog has them.

Local SSD that some machine types come with is billed as its own SKU and is not included.
A 429 or 5xx page is retried after its ``Retry-After``; a page that is not the documented JSON
fails the whole fetch. ``GPUFLEET_GCP_BILLING_ENDPOINT`` replaces the API endpoint;
``GPUFLEET_GCP_ENDPOINT`` the Compute one (as for ``gpufleet status``).
"""

from __future__ import annotations

import datetime as dt
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass

from gpufleet.catalog.fetch import Fetched, FetchedPrice, FetchError, InstanceFacts, retry_after, stamp

SERVICE = "services/6F81-5844-456A"  # Compute Engine in the Cloud Billing Catalog
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
    plain: bool  # "... GPU running in" rather than "... GPU attached to ... running in"


def accelerator_gpu(cat, accel: str) -> str | None:
    """The catalog GPU of a GCP accelerator type (``nvidia-tesla-v100`` -> V100)."""
    from gpufleet.providers.common import GCP_ACCELERATORS

    for gpu, name in GCP_ACCELERATORS.items():
        if name == accel:
            return gpu
    return cat.gpu(accel).name if cat.has_gpu(accel) else None


def gpu_of(model: str) -> str | None:
    m = re.sub(r"\s+", " ", model.lower().replace("tesla ", "")).strip()
    return BILLING_GPUS.get(m)


def _usd(pricing_info) -> tuple[float, str] | None:
    """USD per usage unit of the newest price (the first tier, else the first priced one) and the unit."""
    if not pricing_info:
        return None
    info = pricing_info[-1]
    expr = info.pricing_expression
    tiers = sorted(expr.tiered_rates, key=lambda t: t.start_usage_amount)
    for t in tiers:
        usd = t.unit_price.units + t.unit_price.nanos / 1e9
        if usd > 0:
            return usd, expr.usage_unit
    return None


def rates(skus: Iterable, regions: set[str]) -> tuple[dict[tuple[str, str, str, str], Rate], set[str]]:
    """(part, family or catalog GPU, region, market) -> Rate for the hourly Compute SKUs in
    ``regions``; and the GPU models the API prices that the catalog does not know."""
    out: dict[tuple[str, str, str, str], Rate] = {}
    unknown: set[str] = set()
    for sku in skus:
        cat = sku.category
        market = MARKETS.get(cat.usage_type)
        if market is None or cat.resource_family != "Compute":
            continue
        desc = sku.description
        m = _PART.match(desc)
        if m:
            part = "core" if m.group("part").lower() == "core" else "ram"
            name, plain, unit = m.group("family").upper(), True, "h" if part == "core" else "GiBy.h"
        else:
            g = _GPU.match(desc)
            if not g:
                continue
            part, name, plain, unit = "gpu", gpu_of(g.group("model")), not g.group("attached"), "h"
            if name is None:
                unknown.add(g.group("model"))
                continue
        priced = _usd(sku.pricing_info)
        if priced is None or priced[1] != unit:
            continue
        rate = Rate(sku.sku_id, desc, priced[0], plain)
        for region in sku.service_regions:
            if region not in regions:
                continue
            key = (part, name, region, market)
            have = out.get(key)
            if have is None or (rate.plain and not have.plain):
                out[key] = rate
    return out, unknown


def sku_pages(client, *, page_size: int = PAGE_SIZE, retries: int = 5, max_wait: float = 60.0, sleep=time.sleep,
              max_pages: int = 500):
    """Each page's SKUs (proto-plus ``Sku``), following ``nextPageToken``."""
    from google.api_core import exceptions as gexc
    from google.protobuf.json_format import ParseError

    token, n = "", 0
    retryable = (gexc.TooManyRequests, gexc.InternalServerError, gexc.BadGateway, gexc.ServiceUnavailable,
                 gexc.GatewayTimeout)
    while True:
        n += 1
        if n > max_pages:
            raise FetchError("gcp", f"more than {max_pages} pages of SKUs; the API is not answering as documented")
        for attempt in range(retries + 1):
            try:
                pager = client.list_skus(request={"parent": SERVICE, "page_size": page_size, "page_token": token,
                                                  "currency_code": "USD"}, retry=None, timeout=120)
                page = next(iter(pager.pages))
                break
            except retryable as e:
                if attempt == retries:
                    raise FetchError("gcp", f"the Cloud Billing Catalog API answered {e.code} ({e.message[:120]})",
                                     "try again later; the previous prices are kept") from None
                resp = getattr(e, "response", None)
                sleep(min(retry_after(resp.headers.get("Retry-After") if resp is not None else None, 2.0 ** attempt),
                          max_wait))
            except gexc.GoogleAPICallError as e:
                raise FetchError("gcp", f"the Cloud Billing Catalog API answered {e.code} ({e.message[:160]})",
                                 "enable the Cloud Billing API for the project; the previous prices are kept") from None
            except (ParseError, ValueError, TypeError, KeyError) as e:
                raise FetchError("gcp", f"page {n} of the Cloud Billing Catalog API is not the documented JSON "
                                 f"({str(e)[:160]})", "try again later; the previous prices are kept") from None
        yield page.skus
        token = page.next_page_token
        if not token:
            return


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
        core, ram = rate.get(("core", family, region, market)), rate.get(("ram", family, region, market))
        if core is None or ram is None:
            return None
        parts = [{"what": f"{m.cpus} vCPU ({core.description})", "sku_id": core.sku_id, "usd_per_hour": m.cpus * core.usd},
                 {"what": f"{m.memory_gib:g} GiB ({ram.description})", "sku_id": ram.sku_id,
                  "usd_per_hour": m.memory_gib * ram.usd}]
        for gpu, count in gpus:
            g = rate.get(("gpu", gpu, region, market))
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
                g = rate.get(("gpu", it.gpu, region, market))
                if g is not None and region in zones:
                    prices[(f"gpu:{it.gpu}", region, market)] = FetchedPrice(
                        "gcp", f"gpu:{it.gpu}", region, market, round(g.usd, 6), API, g.sku_id, at,
                        ({"what": f"1x {it.gpu} ({g.description})", "sku_id": g.sku_id, "usd_per_hour": round(g.usd, 6)},))
    return Fetched(sorted(prices.values(), key=lambda r: (r.item, r.region, r.market)), facts, notes)


def _clients():
    from google.api_core.client_options import ClientOptions
    from google.cloud import billing_v1

    from gpufleet.lifecycle.gcp import Gcp

    g = Gcp()
    creds = g._auth()
    endpoint = os.environ.get("GPUFLEET_GCP_BILLING_ENDPOINT")
    billing = billing_v1.CloudCatalogClient(credentials=creds, transport="rest",
                                            client_options=ClientOptions(api_endpoint=endpoint) if endpoint else None)
    return g, billing


def fetch(cat, regions: list[str], *, now: dt.datetime | None = None, sleep=time.sleep) -> Fetched:
    """Every catalog GCP machine type priced in ``regions``, on-demand and spot."""
    from gpufleet.errors import CredentialsError

    try:
        g, billing = _clients()
    except CredentialsError as e:
        raise FetchError("gcp", str(e).removeprefix("gcp: "), e.hint) from None
    at = stamp(now)
    wanted = sorted({it.base_machine for (p, _), it in cat.instances.items() if p == "gcp"})
    try:
        mts = machines(g.client("MachineTypesClient").aggregated_list(request={
            "project": g._project, "filter": f'name eq "({"|".join(map(re.escape, wanted))})"', "max_results": 500}))
        accs = accelerators(g.client("AcceleratorTypesClient").aggregated_list(request={"project": g._project}))
    except Exception as e:  # noqa: BLE001 - refused credentials, disabled API, network
        from gpufleet.lifecycle.gcp import classify

        raise FetchError("gcp", f"the machine types could not be read ({classify(e)[1][:200]})",
                         "check the project and its Compute Engine API; the previous prices are kept") from None
    return build(cat, (s for page in sku_pages(billing, sleep=sleep) for s in page), mts, accs, regions, at)


def build(cat, skus: Iterable, mts: dict[str, Machine], accs: dict, regions: list[str], at: str) -> Fetched:
    """SKUs + machine and accelerator types -> priced machine types (what ``fetch`` does once
    the API has answered; the benchmark calls it on recorded pages)."""
    rate, unknown = rates(skus, set(regions))
    out = compose(cat, rate, mts, accs, regions, at)
    if unknown:
        out.notes.append("GPU models the API prices that the catalog does not know: " + ", ".join(sorted(unknown)))
    return out

"""The GPU catalog: GPU specs, instance types, prices (with provenance) and offers.

Data is CSV shipped with the package (``data/``), read with the standard ``csv`` module.
User overrides (discounts, custom prices, owned racks) come from the config file
(:mod:`gpufleet.config`). No cloud SDK is imported here.
"""

from __future__ import annotations

import csv
import datetime as dt
import functools
from importlib import resources
from pathlib import Path

from gpufleet.catalog import store
from gpufleet.catalog.fetched import FetchedPrice
from gpufleet.catalog.model import (
    FABRICS,
    PRECISIONS,
    Catalog,
    Gpu,
    HealthThreshold,
    InstanceType,
    Offer,
    Price,
    PricePart,
    age_in_days,
    offer_key,
)
from gpufleet.catalog.onprem import Site
from gpufleet.errors import CatalogError, NotFound, SpecError, SpecErrors, did_you_mean
from gpufleet.paths import user_config
from gpufleet.providers import CLOUDS
from gpufleet.yamlsrc import dotted

# --- loading -------------------------------------------------------------------------

def _read_csv(name: str, text: str | None = None, path: str | None = None):
    """Rows of a CSV as (line number, dict); ``text`` overrides the packaged file."""
    if text is None:
        text = resources.files("gpufleet.catalog").joinpath("data", name).read_text(encoding="utf-8")
    label = path or f"gpufleet/catalog/data/{name}"
    reader = csv.DictReader(text.splitlines())
    for row in reader:
        yield label, reader.line_num, row


def _num(label: str, line: int, row: dict, key: str, *, required: bool = True, positive: bool = False) -> float | None:
    raw = (row.get(key) or "").strip()
    if raw == "":
        if required:
            raise CatalogError(f"{label}:{line}: {key}: missing value")
        return None
    try:
        v = float(raw)
    except ValueError:
        raise CatalogError(f"{label}:{line}: {key}: {raw!r} is not a number") from None
    if v < 0 or (positive and v == 0):
        raise CatalogError(f"{label}:{line}: {key}: {raw!r} must be {'positive' if positive else 'non-negative'}")
    return v


def _need(label: str, line: int, row: dict, key: str) -> str:
    v = (row.get(key) or "").strip()
    if not v:
        raise CatalogError(f"{label}:{line}: {key}: missing value (every row needs one)")
    return v


def parse_gpus(text: str | None = None, path: str | None = None) -> dict[str, Gpu]:
    out: dict[str, Gpu] = {}
    for label, line, row in _read_csv("gpus.csv", text, path):
        name = _need(label, line, row, "name")
        tf = {}
        for p in PRECISIONS:
            v = _num(label, line, row, f"{p}_tflops", required=(p == "fp32"), positive=True)
            if v is not None:
                tf[p] = v
        out[name] = Gpu(
            name=name,
            aliases=tuple(a.strip() for a in (row.get("aliases") or "").split(";") if a.strip()),
            arch=_need(label, line, row, "arch"),
            memory_gb=_num(label, line, row, "memory_gb", positive=True),
            memory_bw_gbs=_num(label, line, row, "memory_bw_gbs", positive=True),
            tflops=tf,
            nvlink_gbs=_num(label, line, row, "nvlink_gbs"),
            pcie_gen=int(_num(label, line, row, "pcie_gen", positive=True)),
            tdp_w=_num(label, line, row, "tdp_w", positive=True),
            source=_need(label, line, row, "source"),
            as_of=_need(label, line, row, "as_of"),
            nvlink_domain=int(_num(label, line, row, "nvlink_domain", required=False) or 0),
        )
    return out


def parse_instances(gpus: dict[str, Gpu], text: str | None = None, path: str | None = None):
    out: dict[tuple[str, str], InstanceType] = {}
    for label, line, row in _read_csv("instances.csv", text, path):
        provider = _need(label, line, row, "provider")
        if provider not in CLOUDS:
            raise CatalogError(f"{label}:{line}: provider: {provider!r} is not one of {', '.join(CLOUDS)}")
        gpu = _need(label, line, row, "gpu")
        if gpu not in gpus:
            raise NotFound("GPU", gpu, gpus, extra=f" in {label}:{line}")
        fabric = _need(label, line, row, "fabric")
        if fabric not in FABRICS:
            raise CatalogError(f"{label}:{line}: fabric: {fabric!r} is not one of {', '.join(FABRICS)}")
        it = InstanceType(
            provider=provider, name=_need(label, line, row, "name"), gpu=gpu,
            gpu_count=int(_num(label, line, row, "gpu_count", positive=True)),
            vcpus=int(_num(label, line, row, "vcpus", positive=True)),
            memory_gib=_num(label, line, row, "memory_gib", positive=True),
            network_gbps=_num(label, line, row, "network_gbps", positive=True),
            fabric=fabric,
            efa_interfaces=int(_num(label, line, row, "efa_interfaces")),
            local_nvme_gb=_num(label, line, row, "local_nvme_gb"),
            gpu_attach=_need(label, line, row, "gpu_attach"),
            source=_need(label, line, row, "source"), as_of=_need(label, line, row, "as_of"),
        )
        out[(provider, it.name)] = it
    return out


def parse_sources(text: str | None = None) -> dict[str, tuple[str, str]]:
    """sources.csv: key -> (citation, as_of), for price rows that name their source by key."""
    return {_need(label, line, row, "key"): (_need(label, line, row, "citation"), _need(label, line, row, "as_of"))
            for label, line, row in _read_csv("sources.csv", text)}


def parse_prices(text: str | None = None, path: str | None = None,
                 sources: dict[str, tuple[str, str]] | None = None) -> list[Price]:
    """prices.csv; a row's ``source`` is a citation, or a key of ``sources`` (which then gives its
    as-of date unless the row has one); ``zones``, when present, are those offering the price."""
    out = []
    sources = sources or {}
    for label, line, row in _read_csv("prices.csv", text, path):
        market = _need(label, line, row, "market")
        if market not in ("ondemand", "spot"):
            raise CatalogError(f"{label}:{line}: market: {market!r} must be 'ondemand' or 'spot'")
        source = _need(label, line, row, "source")
        citation, as_of = sources.get(source, (source, ""))
        as_of = (row.get("as_of") or "").strip() or as_of
        if not as_of:
            raise CatalogError(f"{label}:{line}: as_of: missing value (and {source!r} is not a key of sources.csv)")
        out.append(Price(_need(label, line, row, "provider"), _need(label, line, row, "item"),
                         _need(label, line, row, "region"), market,
                         _num(label, line, row, "usd_per_hour", positive=True), citation, as_of,
                         zones=tuple((row.get("zones") or "").split())))
    return out


def parse_regions(text: str | None = None) -> tuple[dict[str, dict[str, str]], dict[tuple[str, str], tuple[str, ...]]]:
    """(provider -> region -> geo, (provider, region) -> zones)."""
    out: dict[str, dict[str, str]] = {}
    zones: dict[tuple[str, str], tuple[str, ...]] = {}
    for label, line, row in _read_csv("regions.csv", text):
        provider, region = _need(label, line, row, "provider"), _need(label, line, row, "region")
        out.setdefault(provider, {})[region] = row.get("geo", "")
        zones[(provider, region)] = tuple((row.get("zones") or "").split())
    return out, zones


def parse_health(gpus: dict[str, Gpu], text: str | None = None) -> dict[tuple[str, int], HealthThreshold]:
    """health.csv: (GPU, GPUs per node) -> the thresholds `gpufleet verify` judges by."""
    out = {}
    for label, line, row in _read_csv("health.csv", text):
        gpu = _need(label, line, row, "gpu")
        if gpu not in gpus:
            near = did_you_mean(gpu, list(gpus))
            raise CatalogError(f"{label}:{line}: gpu: {gpu!r} is not in gpus.csv" + (f" (did you mean {near}?)" if near
                                                                                     else ""))
        size = (row.get("nccl_bytes") or "").strip() or None
        if size is not None and not (size[:-1].isdigit() and size[-1] in "KMG"):
            raise CatalogError(f"{label}:{line}: nccl_bytes: {size!r} is not a size like 8G or 512M")
        count = int(_num(label, line, row, "gpu_count", positive=True))
        out[(gpu, count)] = HealthThreshold(
            gpu, count, _num(label, line, row, "nccl_busbw_gbs", required=False, positive=True), size,
            _num(label, line, row, "copy_gbs", required=False, positive=True),
            _num(label, line, row, "ib_rate_gbps", required=False, positive=True),
            _need(label, line, row, "source"), _need(label, line, row, "as_of"),
            _num(label, line, row, "nccl_ring_busbw_gbs", required=False, positive=True),
            (row.get("ring_source") or "").strip() or None,
            tuple(x for x in (row.get("nvls_instances") or "").split(";") if x.strip()))
    return out


@functools.lru_cache(maxsize=1)
def health() -> dict[tuple[str, int], HealthThreshold]:
    return parse_health(_embedded().gpus)


@functools.lru_cache(maxsize=1)
def _embedded() -> Catalog:
    gpus = parse_gpus()
    regions, zones = parse_regions()
    return Catalog(gpus=gpus, instances=parse_instances(gpus), prices=parse_prices(sources=parse_sources()), regions=regions,
                   zones=zones)


def load(config_path: str | Path | None = None, *, use_config: bool = True, refreshed: bool = True) -> Catalog:
    """The embedded catalog, with the prices of the last `gpufleet catalog refresh` in place of
    the embedded ones of each provider it fetched (``refreshed=False``: not those), then the
    user's overrides (discounts, prices, racks). ``use_config=False``: the embedded catalog alone."""
    base = _embedded()
    cat = Catalog(gpus=dict(base.gpus), instances=dict(base.instances), prices=list(base.prices),
                  regions=base.regions, zones=base.zones)
    if use_config:
        stored = store.read_store() if refreshed else None
        if stored is not None:
            use_refreshed(cat, stored)
        path = user_config(config_path)
        if path is not None:
            # pydantic is imported only when there is a config to read: `compare` stays fast without one
            from gpufleet import config

            use_config_file(cat, config.load(path), str(path))
    return cat


def use_refreshed(cat: Catalog, stored: dict) -> None:
    """Use the stored rows in place of the embedded prices of each provider the store holds,
    and its zones per instance type."""
    held = {r.provider for r in stored["prices"]}
    if not held:
        return

    def price(r: FetchedPrice) -> Price:
        day = r.fetched_at[:10]
        return Price(r.provider, r.item, r.region, r.market, r.usd_per_hour, f"{r.api} (SKU {r.sku_id})", day,
                     tuple(PricePart(x["what"], x["usd_per_hour"], f"{r.api} (SKU {x['sku_id']})", day)
                           for x in r.parts))

    cat.prices = [p for p in cat.prices if p.provider not in held] + [price(r) for r in stored["prices"]]
    cat.facts = {(f.provider, f.item): f for f in stored.get("facts", [])}
    cat.offered = {key: {r: tuple(z) for r, z in f.zones.items()} for key, f in cat.facts.items()}
    cat.reset_offers()


def use_config_file(cat: Catalog, cfg, path: str) -> None:
    """The user's discounts, price quotes and owned racks (``config.UserConfig``); a quote for an
    instance type or region the catalog does not know is refused with its line (it would be dropped)."""
    for prov, d in cfg.discounts.items():
        if not 0 <= d < 1:
            raise CatalogError(f"config: discounts.{prov}: {d} must be a fraction in [0, 1)",
                               "write 0.15 for a 15% discount")
    cat.discounts.update(cfg.discounts)
    errs = [e for i, q in enumerate(cfg.prices) for e in _quote_problems(cat, cfg.located, i, q)]
    if errs:
        raise SpecErrors(errs)
    for q in cfg.prices:
        cat.prices.append(Price(q.provider, q.item, q.region, q.market, q.usd_per_hour, q.source, q.as_of, quote=True))
    for s in cfg.sites:
        cat.gpu(s.gpu)  # raises NotFound with a suggestion
        cat.sites.append(Site(**s.model_dump(), source=f"site costs in {path}", as_of=dt.date.today().isoformat()))
    cat.max_age_days = cfg.catalog_max_age_days
    cat.reset_offers()


def _quote_problems(cat: Catalog, located, i: int, q) -> list[SpecError]:
    items = {n for (p, n) in cat.instances if p == q.provider} | {
        x for (p, _), it in cat.instances.items() if p == q.provider and it.gpu_attach == "separate"
        for x in (it.base_machine, f"gpu:{it.gpu}")}
    out = []
    for key, value, known in (("item", q.item, items), ("region", q.region, cat.regions.get(q.provider, {}))):
        if value not in known:
            s = did_you_mean(value, known)
            keys = ("prices", i, key)
            out.append(SpecError(located.path, located.line(keys), dotted(keys),
                                 f"{q.provider} has no {'instance type' if key == 'item' else 'region'} {value!r} "
                                 "in the catalog: the quote would price nothing",
                                 f"did you mean {s!r}?" if s else f"see `gpufleet catalog instances --provider {q.provider}`"))
    return out


__all__ = ["CLOUDS", "Catalog", "Gpu", "InstanceType", "Offer", "Price", "PricePart", "load", "age_in_days",
           "offer_key", "PRECISIONS", "FABRICS"]

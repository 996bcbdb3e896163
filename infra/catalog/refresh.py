"""`gpufleet catalog refresh`: new prices from the providers' APIs, replacing the old only when sound.

The refreshed prices live in one JSON file in the user's data directory
(``$XDG_DATA_HOME/gpufleet/catalog/prices.json``, or ``$GPUFLEET_PRICES``); ``catalog.load``
uses its rows in place of the embedded prices of each provider it holds. A refresh

1. fetches each provider asked for; a provider that fails (offline, throttled, malformed
   answer) keeps its previous rows and the result says why;
2. checks each fetched provider's new rows: no more than ``MAX_SHRINK`` fewer than before,
   the flagship SKUs there, every price positive and within sane bounds per GPU-hour, GPU
   model and count (where the API reports them) as in the GPU table, every row with its API,
   SKU id and fetch time; a provider whose rows fail keeps its previous rows too;
3. when any provider passed, writes the new content to a temporary file in the same
   directory and renames it over the old one (``os.replace``: atomic); when none did, writes
   nothing at all (the old file stays byte for byte).
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gpufleet.catalog.fetch import Fetched, FetchedPrice, InstanceFacts
from gpufleet.errors import CatalogError, GpufleetError

SCHEMA = 2  # 1: prices only (read still; its gpu_count column is dropped)
MAX_SHRINK = 0.25  # a provider may lose at most this fraction of its rows in one refresh
USD_PER_GPU_HOUR = (0.05, 40.0)  # outside this, a price is a parsing error, not a price
# One SKU per provider that any sound price list has (on-demand, in its home region).
FLAGSHIPS = {"aws": [("p5.48xlarge", "us-east-1")], "gcp": [("a3-highgpu-8g", "us-central1")],
             "azure": [("Standard_ND96isr_H100_v5", "eastus")]}


def store_path() -> Path:
    if os.environ.get("GPUFLEET_PRICES"):
        return Path(os.environ["GPUFLEET_PRICES"])
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "gpufleet" / "catalog" / "prices.json"


def read_store(path: Path | None = None) -> dict | None:
    """The refreshed prices, or None when there are none yet; a damaged file is a CatalogError."""
    path = path or store_path()
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("schema") not in (1, SCHEMA) or not isinstance(doc.get("prices"), list):
            raise ValueError(f"schema {doc.get('schema')!r}")
        rows = [FetchedPrice.from_dict(r) for r in doc["prices"]]
        facts = [InstanceFacts.from_dict(f) for f in doc.get("facts", [])]
    except (OSError, ValueError, TypeError, AttributeError) as e:
        raise CatalogError(f"{path}: the refreshed prices cannot be read ({e})",
                           f"run `gpufleet catalog refresh` again, or delete {path} to use the embedded prices") from None
    return {"providers": doc.get("providers", {}), "prices": rows, "facts": facts}


@dataclass
class ProviderResult:
    provider: str
    status: str  # updated | kept (fetch failed: previous rows stay) | rejected (a check failed)
    rows: int
    previous: int
    message: str = ""
    notes: list[str] = field(default_factory=list)  # left out by the fetcher; facts that differ from the table

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Refresh:
    path: Path
    written: bool
    results: list[ProviderResult] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # integrity checks that failed

    def to_dict(self) -> dict:
        return {"path": str(self.path), "written": self.written, "results": [r.to_dict() for r in self.results],
                "problems": self.problems}


def _skus(cat, provider: str) -> list[str]:
    return sorted(n for (p, n) in cat.instances if p == provider)


def fetch_azure(cat, progress=None) -> Fetched:
    from gpufleet.catalog.fetch import azure

    return azure.fetch(_skus(cat, "azure"), sorted(cat.regions.get("azure", {})), progress=progress)


def fetch_aws(cat, progress=None) -> Fetched:
    from gpufleet.catalog.fetch import aws

    return aws.fetch(_skus(cat, "aws"), sorted(cat.regions.get("aws", {})), cat_gpu=aws.gpu_namer(cat),
                     progress=progress)


def fetch_gcp(cat, progress=None) -> Fetched:
    from gpufleet.catalog.fetch import gcp

    return gcp.fetch(cat, sorted(cat.regions.get("gcp", {})), progress=progress)


FETCHERS: dict[str, Callable] = {"aws": fetch_aws, "gcp": fetch_gcp, "azure": fetch_azure}


def refresh(cat, providers: list[str], *, path: Path | None = None, fetchers: dict[str, Callable] | None = None,
            on_provider: Callable[[str, str], None] | None = None, max_shrink: float = MAX_SHRINK) -> Refresh:
    """Fetch ``providers``, check the result, replace the stored prices atomically (or not at all).

    ``fetchers[p](cat, progress)``; ``on_provider(p, what)`` hears each step of each provider."""
    path = path or store_path()
    fetchers = fetchers or FETCHERS
    old = read_store(path) or {"providers": {}, "prices": [], "facts": []}
    by_provider: dict[str, list[FetchedPrice]] = {}
    for r in old["prices"]:
        by_provider.setdefault(r.provider, []).append(r)
    facts_of: dict[str, list[InstanceFacts]] = {}
    for f in old["facts"]:
        facts_of.setdefault(f.provider, []).append(f)
    meta = dict(old["providers"])
    out = Refresh(path, written=False)
    fresh: dict[str, Fetched] = {}
    for p in providers:
        if on_provider:
            on_provider(p, "fetching")
        previous = len(by_provider.get(p) or [x for x in cat.prices if x.provider == p])
        if p not in fetchers:
            out.results.append(ProviderResult(p, "kept", previous, previous, f"{p}: no fetcher; its prices stay"))
            continue
        try:
            got = fetchers[p](cat, (lambda what, p=p: on_provider(p, what)) if on_provider else None)
        except GpufleetError as e:  # FetchError, or credentials that are missing or refused
            out.results.append(ProviderResult(p, "kept", previous, previous, e.message + (f" ({e.hint})" if e.hint else "")))
            continue
        except Exception as e:  # noqa: BLE001 - an SDK's own error: this provider fails, the others go on
            out.results.append(ProviderResult(p, "kept", previous, previous, f"{p}: the fetch failed "
                                              f"({type(e).__name__}: {str(e)[:200]}); its previous prices are kept"))
            continue
        fresh[p] = got
        out.results.append(ProviderResult(p, "updated", len(got.prices), previous, notes=list(got.notes)))
    for res in out.results:
        if res.provider in fresh:
            got = fresh[res.provider]
            problems = check(res.provider, got.prices, res.previous, cat, got.facts, max_shrink)
            res.notes += differences(res.provider, got.facts, cat)
            if problems:  # this provider's new rows are dropped; its previous ones stay
                res.status, res.message = "rejected", "; ".join(problems[:3]) + (
                    f" (and {len(problems) - 3} more)" if len(problems) > 3 else "") + "; its previous prices are kept"
                out.problems += problems
                del fresh[res.provider]
    if not fresh:
        return out  # nothing written: the old file stays as it was, byte for byte
    for p, got in fresh.items():
        by_provider[p] = got.prices
        if got.facts or not facts_of.get(p):
            facts_of[p] = got.facts
        else:  # e.g. Azure without credentials this time: the zones it said last time still stand
            next(r for r in out.results if r.provider == p).notes.append(
                f"the instance facts (zones) of the last refresh that had them are kept ({len(facts_of[p])} types)")
        meta[p] = {"fetched_at": max(r.fetched_at for r in got.prices) if got.prices else None,
                   "rows": len(got.prices), "apis": sorted({r.api for r in got.prices} | {f.api for f in got.facts})}
    _write(path, {"schema": SCHEMA, "providers": meta,
                  "prices": [_row(r) for p in sorted(by_provider) for r in by_provider[p]],
                  "facts": [asdict(f) for p in sorted(facts_of) for f in facts_of[p]]})
    out.written = True
    return out


def _row(r: FetchedPrice) -> dict:
    d = asdict(r)
    if not d["parts"]:
        del d["parts"]
    return d


def _kinds(provider: str, cat) -> dict[str, int | None]:
    """Item -> GPUs it prices: instance types (their count), and for separately priced GPUs the
    machine types (None: no GPUs) and ``gpu:<GPU>`` (1)."""
    out: dict[str, int | None] = {}
    for (p, name), it in cat.instances.items():
        if p != provider:
            continue
        out[name] = it.gpu_count
        if it.gpu_attach == "separate":
            out.setdefault(it.base_machine, None)
            out[f"gpu:{it.gpu}"] = 1
    return out


def check(provider: str, rows: list[FetchedPrice], previous: int, cat, facts: list[InstanceFacts] = (),
          max_shrink: float = MAX_SHRINK) -> list[str]:
    """What is wrong with one provider's new rows (empty when they may replace the old)."""
    problems = []
    if previous and len(rows) < (1 - max_shrink) * previous:
        problems.append(f"{provider}: {len(rows)} prices where there were {previous} (more than "
                        f"{max_shrink:.0%} fewer); an API change or a partial answer? (--max-shrink allows more)")
    have = {(r.item, r.region) for r in rows if r.market == "ondemand"}
    for item, region in FLAGSHIPS.get(provider, []):
        if (item, region) not in have:
            problems.append(f"{provider}: no on-demand price for {item} in {region}, which any sound price list has")
    lo, hi = USD_PER_GPU_HOUR
    kinds = _kinds(provider, cat)
    for r in rows:
        where = f"{provider} {r.item} {r.region} {r.market}"
        if not r.api or not r.sku_id or not _is_time(r.fetched_at):
            problems.append(f"{where}: no source (API, SKU id and fetch time)")
            continue
        if r.item not in kinds:
            problems.append(f"{where}: not an instance type of the catalog")
            continue
        gpus = kinds[r.item]
        per_gpu = r.usd_per_hour / max(1, gpus or 1)
        if not (r.usd_per_hour > 0 and (lo if gpus else 0) <= per_gpu <= hi):
            problems.append(f"{where}: ${r.usd_per_hour}/h is ${per_gpu:.2f} per {'GPU-' if gpus else ''}hour, "
                            f"outside ${lo if gpus else 0}-${hi}")
        if r.parts:
            total = sum(float(x.get("usd_per_hour") or 0) for x in r.parts)
            if any(not x.get("sku_id") or not float(x.get("usd_per_hour") or 0) > 0 for x in r.parts) or \
                    abs(total - r.usd_per_hour) > 0.001 * r.usd_per_hour + 1e-6:
                problems.append(f"{where}: its parts (${total:.4f}/h) do not make its price (${r.usd_per_hour}/h)")
    for f, it in _with_row(provider, facts, cat):
        if f.gpu_count is not None and f.gpu_count != it.gpu_count:
            problems.append(f"{provider} {f.item}: the API says {f.gpu_count} GPUs, the GPU table {it.gpu_count}")
        if f.gpu is not None and f.gpu != it.gpu:
            problems.append(f"{provider} {f.item}: the API says its GPU is {f.gpu}, the GPU table {it.gpu}")
    return problems[:50]


def _with_row(provider: str, facts, cat):
    """(facts, the table's row) for each instance type the table has."""
    for f in facts:
        it = cat.instances.get((provider, f.item))
        if it is not None:
            yield f, it


def differences(provider: str, facts: list[InstanceFacts], cat) -> list[str]:
    """Instance facts the provider states differently from the table, which do not stop a refresh
    (rounded memory, network names) but are worth a look."""
    out = []
    for f, it in _with_row(provider, facts, cat):
        if f.vcpus is not None and f.vcpus != it.vcpus:
            out.append(f"{f.item}: {f.vcpus} vCPUs by the API, {it.vcpus} in the table")
        if f.memory_gib is not None and abs(f.memory_gib - it.memory_gib) > 0.05 * it.memory_gib:
            out.append(f"{f.item}: {f.memory_gib:g} GiB memory by the API, {it.memory_gib:g} in the table")
        if f.efa is not None and f.efa != (it.fabric == "efa"):
            out.append(f"{f.item}: EFA is supported by the API but the table's fabric is {it.fabric} (EFA unused)"
                       if f.efa else f"{f.item}: the table's fabric is efa, but the API says EFA is not supported")
        if f.infiniband is not None and f.infiniband != it.fabric.startswith("infiniband"):
            out.append(f"{f.item}: InfiniBand {'present' if f.infiniband else 'absent'} by the API, fabric "
                       f"{it.fabric} in the table")
    return out


def _is_time(s: str) -> bool:
    try:
        dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
        return True
    except (ValueError, AttributeError):
        return False


def _write(path: Path, doc: dict) -> None:
    """Write beside the old file, flush it to disk, rename over the old one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def apply(cat, store: dict) -> None:
    """Use the stored rows in place of the embedded prices of each provider the store holds,
    and its zones per instance type."""
    from gpufleet.catalog import Price, PricePart

    held = {r.provider for r in store["prices"]}
    if not held:
        return

    def price(r: FetchedPrice) -> Price:
        day = r.fetched_at[:10]
        return Price(r.provider, r.item, r.region, r.market, r.usd_per_hour, f"{r.api} (SKU {r.sku_id})", day,
                     tuple(PricePart(x["what"], x["usd_per_hour"], f"{r.api} (SKU {x['sku_id']})", day)
                           for x in r.parts))

    cat.prices = [p for p in cat.prices if p.provider not in held] + [price(r) for r in store["prices"]]
    cat.facts = {(f.provider, f.item): f for f in store.get("facts", [])}
    cat.offered = {key: {r: tuple(z) for r, z in f.zones.items()} for key, f in cat.facts.items()}
    cat._offers = None

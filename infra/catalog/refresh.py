"""`gpufleet catalog refresh`: new prices from the providers' APIs, replacing the old only when sound.

The refreshed prices live in one JSON file in the user's data directory
(``$XDG_DATA_HOME/gpufleet/catalog/prices.json``, or ``$GPUFLEET_PRICES``); ``catalog.load``
uses its rows in place of the embedded prices of each provider it holds. A refresh

1. fetches each provider asked for; a provider that fails (offline, throttled, malformed
   answer) keeps its previous rows and the result says why;
2. builds the new file's content beside the old and checks it: no provider shrinks by more
   than ``MAX_SHRINK``, the flagship SKUs are there, every price is positive and within sane
   bounds per GPU-hour, GPU counts (where the API reports them) agree with the GPU table,
   every row has its API, SKU id and fetch time;
3. writes it to a temporary file in the same directory and renames it over the old one
   (``os.replace``: atomic), or, when a check fails, writes nothing at all.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gpufleet.catalog.fetch import FetchedPrice, FetchError
from gpufleet.errors import CatalogError

SCHEMA = 1
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
        if doc.get("schema") != SCHEMA or not isinstance(doc.get("prices"), list):
            raise ValueError(f"schema {doc.get('schema')!r}")
        rows = [FetchedPrice(**r) for r in doc["prices"]]
    except (OSError, ValueError, TypeError) as e:
        raise CatalogError(f"{path}: the refreshed prices cannot be read ({e})",
                           f"run `gpufleet catalog refresh` again, or delete {path} to use the embedded prices") from None
    return {"providers": doc.get("providers", {}), "prices": rows}


@dataclass
class ProviderResult:
    provider: str
    status: str  # updated | kept (fetch failed: previous rows stay) | rejected (a check failed)
    rows: int
    previous: int
    message: str = ""

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


def fetch_azure(cat) -> list[FetchedPrice]:
    from gpufleet.catalog.fetch import azure

    skus = sorted(n for (p, n) in cat.instances if p == "azure")
    return azure.fetch(skus, sorted(cat.regions.get("azure", {})))


def fetch_aws(cat) -> list[FetchedPrice]:
    from gpufleet.catalog.fetch import aws

    return aws.fetch(sorted(n for (p, n) in cat.instances if p == "aws"), sorted(cat.regions.get("aws", {})))


FETCHERS: dict[str, Callable] = {"aws": fetch_aws, "azure": fetch_azure}


def refresh(cat, providers: list[str], *, path: Path | None = None, fetchers: dict[str, Callable] | None = None,
            on_provider: Callable[[str, str], None] | None = None) -> Refresh:
    """Fetch ``providers``, check the result, replace the stored prices atomically (or not at all)."""
    path = path or store_path()
    fetchers = fetchers or FETCHERS
    old = read_store(path) or {"providers": {}, "prices": []}
    by_provider: dict[str, list[FetchedPrice]] = {}
    for r in old["prices"]:
        by_provider.setdefault(r.provider, []).append(r)
    meta = dict(old["providers"])
    out = Refresh(path, written=False)
    fresh: dict[str, list[FetchedPrice]] = {}
    for p in providers:
        if on_provider:
            on_provider(p, "fetching")
        previous = len(by_provider.get(p) or [x for x in cat.prices if x.provider == p])
        if p not in fetchers:
            out.results.append(ProviderResult(p, "kept", previous, previous, f"{p}: no fetcher yet; its prices stay"))
            continue
        try:
            rows = fetchers[p](cat)
        except FetchError as e:
            out.results.append(ProviderResult(p, "kept", previous, previous, e.message + (f" ({e.hint})" if e.hint else "")))
            continue
        fresh[p] = rows
        out.results.append(ProviderResult(p, "updated", len(rows), previous))
    for res in out.results:
        if res.provider in fresh:
            problems = check(res.provider, fresh[res.provider], res.previous, cat)
            if problems:
                res.status, res.message = "rejected", "; ".join(problems)
                out.problems += problems
    if out.problems or not fresh:
        return out  # nothing written: the old file stays as it was, byte for byte
    for p, rows in fresh.items():
        by_provider[p] = rows
        meta[p] = {"fetched_at": max(r.fetched_at for r in rows) if rows else None, "rows": len(rows),
                   "apis": sorted({r.api for r in rows})}
    _write(path, {"schema": SCHEMA, "providers": meta,
                  "prices": [asdict(r) for p in sorted(by_provider) for r in by_provider[p]]})
    out.written = True
    return out


def check(provider: str, rows: list[FetchedPrice], previous: int, cat) -> list[str]:
    """What is wrong with one provider's new rows (empty when they may replace the old)."""
    problems = []
    if previous and len(rows) < (1 - MAX_SHRINK) * previous:
        problems.append(f"{provider}: {len(rows)} prices where there were {previous} (more than "
                        f"{MAX_SHRINK:.0%} fewer); an API change or a partial answer?")
    have = {(r.item, r.region) for r in rows if r.market == "ondemand"}
    for item, region in FLAGSHIPS.get(provider, []):
        if (item, region) not in have:
            problems.append(f"{provider}: no on-demand price for {item} in {region}, which any sound price list has")
    lo, hi = USD_PER_GPU_HOUR
    for r in rows:
        where = f"{provider} {r.item} {r.region} {r.market}"
        if not r.api or not r.sku_id or not _is_time(r.fetched_at):
            problems.append(f"{where}: no source (API, SKU id and fetch time)")
            continue
        it = cat.instances.get((provider, r.item))
        if it is None:
            problems.append(f"{where}: not an instance type of the catalog")
            continue
        gpus = getattr(r, "gpu_count", None)
        if gpus is not None and gpus != it.gpu_count:
            problems.append(f"{where}: the API says {gpus} GPUs, the GPU table {it.gpu_count}")
        per_gpu = r.usd_per_hour / max(1, it.gpu_count)
        if not (r.usd_per_hour > 0 and lo <= per_gpu <= hi):
            problems.append(f"{where}: ${r.usd_per_hour}/h is ${per_gpu:.2f} per GPU-hour, outside ${lo}-${hi}")
    return problems[:50]


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
    """Use the stored rows in place of the embedded prices of each provider the store holds."""
    from gpufleet.catalog import Price

    held = {r.provider for r in store["prices"]}
    if not held:
        return
    cat.prices = [p for p in cat.prices if p.provider not in held] + [
        Price(r.provider, r.item, r.region, r.market, r.usd_per_hour, f"{r.api} (SKU {r.sku_id})", r.fetched_at[:10])
        for r in store["prices"]]
    cat._offers = None

"""The refreshed prices: one JSON file, its checks, and how the catalog uses it.

The file lives in the user's data directory (``paths.prices_path()``); ``catalog.load`` uses
its rows in place of the embedded prices of each provider it holds. ``check`` says what is
wrong with one provider's new rows (no more than ``MAX_SHRINK`` fewer than before, the
flagship SKUs there, every price positive and within sane bounds per GPU-hour, GPU model and
count as in the GPU table, every row with its API, SKU id and fetch time); ``write`` replaces
the file atomically (a temporary file beside it, renamed over it). The refresh itself, which
fetches through each cloud, is ``fleet.refresh``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import asdict
from pathlib import Path

from gpufleet.catalog.fetched import FetchedPrice, InstanceFacts
from gpufleet.errors import EXIT_FAILED, CatalogError
from gpufleet.paths import prices_path, replace_atomically
from gpufleet.userfiles import TABLE_BYTES, read_text

SCHEMA = 2  # 1: prices only (read still; its gpu_count column is dropped)
MAX_SHRINK = 0.25  # a provider may lose at most this fraction of its rows in one refresh
# outside this, a price is a parsing error, not a price; the dearest real one: Azure ND GB200 v6 in Brazil
# South, $216.32/h for 4 GPUs = $54.08 per GPU-hour (Azure Retail Prices, 2026-06)
USD_PER_GPU_HOUR = (0.05, 80.0)


class StoreDamaged(CatalogError):
    """The refreshed prices' file cannot be read; `catalog refresh` replaces it (keeping it aside).
    Exit code 1, as a damaged registry: gpufleet's own file, not the user's input (a path that names
    no file at all is ``userfiles.FileRefused``, exit 2)."""

    exit_code = EXIT_FAILED

    def __init__(self, path: Path, problem: str):
        self.path = path
        super().__init__(f"{path}: the refreshed prices cannot be read ({problem})",
                         f"run `gpufleet catalog refresh`, which replaces it (keeping it aside), or delete {path} to "
                         "use the embedded prices")


def read_store(path: Path | None = None) -> dict | None:
    """The refreshed prices, or None when there are none yet; a damaged file is StoreDamaged."""
    path = path or prices_path()
    try:
        text = read_text(path, "a prices file (JSON)", TABLE_BYTES, variable="GPUFLEET_PRICES")
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise ValueError(f"a JSON {type(doc).__name__}, not gpufleet's prices")
        if doc.get("schema") not in (1, SCHEMA) or not isinstance(doc.get("prices"), list):
            raise ValueError(_not_ours(doc))
        rows = [FetchedPrice.from_dict(r) for r in doc["prices"]]
        facts = [InstanceFacts.from_dict(f) for f in doc.get("facts", [])]
    except (OSError, ValueError, TypeError, AttributeError, RecursionError) as e:
        raise StoreDamaged(path, str(e)[:200]) from None
    return {"providers": doc.get("providers", {}), "prices": rows, "facts": facts}


def _not_ours(doc: dict) -> str:
    """What makes a JSON object other than a prices file this gpufleet reads."""
    if "schema" not in doc:
        return "no schema: not a prices file of gpufleet's"
    if doc["schema"] not in (1, SCHEMA):
        return f"schema {doc['schema']!r}, where this gpufleet reads 1 and {SCHEMA}: a newer gpufleet's?"
    return "no list of prices"


def row(r: FetchedPrice) -> dict:
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
          max_shrink: float = MAX_SHRINK, flagships: list[tuple[str, str]] = ()) -> list[str]:
    """What is wrong with one provider's new rows (empty when they may replace the old).
    ``flagships``: (item, region) pairs any sound on-demand price list of the provider has."""
    problems = []
    if previous and len(rows) < (1 - max_shrink) * previous:
        problems.append(f"{provider}: {len(rows)} prices where there were {previous} (more than "
                        f"{max_shrink:.0%} fewer); an API change or a partial answer? (--max-shrink allows more)")
    have = {(r.item, r.region) for r in rows if r.market == "ondemand"}
    for item, region in flagships:
        if (item, region) not in have:
            problems.append(f"{provider}: no on-demand price for {item} in {region}, which any sound price list has")
    kinds = _kinds(provider, cat)
    for r in rows:
        where = f"{provider} {r.item} {r.region} {r.market}"
        if not r.api or not r.sku_id or not _is_time(r.fetched_at):
            problems.append(f"{where}: no source (API, SKU id and fetch time)")
            continue
        if r.item not in kinds:
            problems.append(f"{where}: not an instance type of the catalog")
            continue
        problem = price_problem(where, r.usd_per_hour, kinds[r.item])
        if problem:
            problems.append(problem)
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


def price_problem(where: str, usd_per_hour: float, gpus: int | None) -> str | None:
    """A price outside the sane bounds per GPU-hour (per hour for an item without GPUs), or None.
    Both a refresh and the embedded catalog's build refuse such a price."""
    lo, hi = USD_PER_GPU_HOUR
    per_gpu = usd_per_hour / max(1, gpus or 1)
    if usd_per_hour > 0 and (lo if gpus else 0) <= per_gpu <= hi:
        return None
    return f"{where}: ${usd_per_hour}/h is ${per_gpu:.2f} per {'GPU-' if gpus else ''}hour, outside ${lo if gpus else 0}-${hi}"


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


def set_aside(path: Path, now: dt.datetime | None = None) -> Path:
    """Move a damaged file out of the way, beside itself: ``prices.json.bad-<time>``."""
    aside = path.with_name(f"{path.name}.bad-{(now or dt.datetime.now(dt.timezone.utc)).strftime('%Y%m%dT%H%M%SZ')}")
    os.replace(path, aside)
    return aside


def write(path: Path, doc: dict) -> None:
    """Replace the stored prices atomically (beside the old file, flushed, renamed over it)."""
    def dump(f) -> None:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")

    replace_atomically(path, dump, "GPUFLEET_PRICES")

"""`gpufleet catalog refresh`: new prices from the providers' APIs, replacing the old only when sound.

A refresh

1. fetches each provider asked for through its cloud (``clouds.<cloud>.prices``); a provider
   that fails (offline, throttled, malformed answer, no credentials) keeps its previous rows
   and the result says why;
2. checks each fetched provider's new rows (``catalog.store.check``); a provider whose rows
   fail keeps its previous rows too;
3. when any provider passed, replaces the stored prices atomically (``catalog.store.write``);
   when none did, writes nothing at all (the old file stays byte for byte).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gpufleet.catalog import store
from gpufleet.catalog.fetched import Fetched, FetchedPrice, InstanceFacts
from gpufleet.clouds import cloud
from gpufleet.errors import GpufleetError, SdkMissing
from gpufleet.paths import prices_path
from gpufleet.providers import CLOUDS


@dataclass
class ProviderResult:
    provider: str
    status: str  # updated | kept (fetch failed: previous rows stay) | rejected (a check failed) | skipped (no SDK)
    rows: int
    previous: int
    message: str = ""
    notes: list[str] = field(default_factory=list)  # left out by the fetcher; facts that differ from the table

    @property
    def failed(self) -> bool:
        return self.status in ("kept", "rejected")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Refresh:
    path: Path
    written: bool
    results: list[ProviderResult] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # integrity checks that failed
    set_aside: Path | None = None  # where a damaged store was moved before the new one was written

    def to_dict(self) -> dict:
        return {"path": str(self.path), "written": self.written, "results": [r.to_dict() for r in self.results],
                "problems": self.problems, "set_aside": str(self.set_aside) if self.set_aside else None}


def refresh(cat, providers: list[str] | None = None, *, path: Path | None = None,
            fetchers: dict[str, Callable] | None = None, on_provider: Callable[[str, str], None] | None = None,
            max_shrink: float = store.MAX_SHRINK, public: bool = False) -> Refresh:
    """Fetch ``providers`` (default: every cloud; a cloud whose SDK is missing is then skipped, while
    naming it is an SdkMissing error), check the result, replace the stored prices atomically (or
    not at all). ``fetchers[p](cat, progress)`` replaces a cloud's own (``prices().for_catalog``);
    ``on_provider(p, what)`` hears each step of each provider; ``public``: a cloud's public price list
    where it has one (no credentials; AWS: on-demand only)."""
    path = path or prices_path()
    named = providers is not None
    providers = list(providers) if named else list(CLOUDS)
    fetchers = dict(fetchers or {})
    flagships: dict[str, list] = {}
    skipped: dict[str, str] = {}
    for p in providers:
        if p in fetchers:
            continue
        try:
            module = (public and cloud(p).public_prices()) or cloud(p).prices()
        except SdkMissing as e:
            if named:
                raise
            skipped[p] = e.message
            continue
        fetchers[p], flagships[p] = module.for_catalog, module.FLAGSHIPS
    try:
        old = store.read_store(path) or {"providers": {}, "prices": [], "facts": []}
    except store.StoreDamaged:  # what a refresh is for: start afresh, keep the damaged file aside when writing
        old, damaged = {"providers": {}, "prices": [], "facts": []}, True
    else:
        damaged = False
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
        if p in skipped:
            out.results.append(ProviderResult(p, "skipped", previous, previous, f"{skipped[p]}; its prices stay"))
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
            problems = store.check(res.provider, got.prices, res.previous, cat, got.facts, max_shrink,
                                   flagships.get(res.provider, ()))
            res.notes += store.differences(res.provider, got.facts, cat)
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
    if damaged:
        out.set_aside = store.set_aside(path)
    store.write(path, {"schema": store.SCHEMA, "providers": meta,
                       "prices": [store.row(r) for p in sorted(by_provider) for r in by_provider[p]],
                       "facts": [asdict(f) for p in sorted(facts_of) for f in facts_of[p]]})
    out.written = True
    return out



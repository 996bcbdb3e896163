"""`gpufleet catalog refresh --rates`: new rates (storage, NAT, addresses, traffic) from the providers'
price APIs, replacing the old the way `catalog refresh` replaces prices: each provider fetched
through its cloud (``clouds.<cloud>.rates``), its rows checked against the ones they replace
(``catalog.rates.check``), and the table written atomically only when some provider passed. A
provider that fails or is refused keeps its rows; rows no fetcher covers stay as they were, with
their own source and date. The file holds the fetched rows only: read, each replaces the embedded
row of the same provider, item and region, so a newer gpufleet's embedded rows still show through.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gpufleet.catalog import rates
from gpufleet.clouds import cloud
from gpufleet.errors import GpufleetError, SdkMissing
from gpufleet.paths import rates_path
from gpufleet.providers import CLOUDS


@dataclass
class ProviderRates:
    provider: str
    status: str  # updated | kept (the fetch failed) | rejected (a check failed) | skipped (no fetcher or SDK)
    rows: int  # fetched (or, when not updated, the provider's rows in the table)
    message: str = ""
    changed: int = 0  # rows whose price differs from the one replaced

    @property
    def failed(self) -> bool:
        return self.status in ("kept", "rejected")


@dataclass
class RatesRefresh:
    path: Path
    written: bool
    results: list[ProviderRates] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"path": str(self.path), "written": self.written, "results": [asdict(r) for r in self.results],
                "problems": self.problems}


def refresh(providers: list[str] | None = None, *, fetchers: dict[str, Callable] | None = None,
            on_provider: Callable[[str, str], None] | None = None) -> RatesRefresh:
    """Fetch ``providers``' rates (default: every cloud), check them, and write the table (or not at
    all). ``fetchers[p](progress)`` replaces a cloud's own ``rates().fetch``."""
    path = rates_path()
    named = providers is not None
    current = rates.table()
    fetched_before = rates.refreshed()
    out = RatesRefresh(path, written=False)
    for p in (list(providers) if named else list(CLOUDS)):
        held = sum(1 for k in current if k[0] == p)
        if on_provider:
            on_provider(p, "fetching")
        try:
            fetch = (fetchers or {}).get(p) or _fetcher(p)
        except SdkMissing as e:
            if named:
                raise
            out.results.append(ProviderRates(p, "skipped", held, f"{e.message}; its rates stay"))
            continue
        if fetch is None:
            out.results.append(ProviderRates(p, "skipped", held, "gpufleet has no fetcher for its rates: its rows "
                                             "stay as the catalog has them, each with its source and date"))
            continue
        try:
            got = fetch((lambda what, p=p: on_provider(p, what)) if on_provider else None)
        except GpufleetError as e:  # FetchError, or credentials missing or refused
            out.results.append(ProviderRates(p, "kept", held, e.message + (f" ({e.hint})" if e.hint else "")))
            continue
        problems = rates.check(p, got, current) or ([] if got else [f"{p}: the answer had no rates"])
        if problems:
            out.problems += problems
            out.results.append(ProviderRates(p, "rejected", held, "; ".join(problems[:3]) + (
                f" (and {len(problems) - 3} more)" if len(problems) > 3 else "") + "; its previous rates are kept"))
            continue
        changed = sum(1 for r in got if (was := current.get((r.provider, r.item, r.region))) is None or was.usd != r.usd)
        fetched_before.update({(r.provider, r.item, r.region): r for r in got})
        out.results.append(ProviderRates(p, "updated", len(got), changed=changed))
    if any(r.status == "updated" for r in out.results):
        rates.write(path, fetched_before)
        out.written = True
    return out


def _fetcher(provider: str):
    module = cloud(provider).rates()
    return module.fetch if module is not None else None

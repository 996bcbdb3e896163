"""What a cluster is billed for besides its instances, per unit: block storage, shared file systems,
NAT gateways, public addresses and traffic (``data/rates.csv``). Each row is one provider's list
price for one item in one region (``*``: the provider prices it the same in every region), with its
unit, source and as-of date, like the instance prices. A table in the user's data directory
(``GPUFLEET_RATES``) holds the rows `gpufleet catalog refresh --rates` fetched (``fleet.refresh_rates``),
each read in place of the embedded row of the same provider, item and region.
"""

from __future__ import annotations

import csv
import functools
import io
from dataclasses import astuple, dataclass
from pathlib import Path

from gpufleet.errors import CatalogError
from gpufleet.paths import rates_path, replace_atomically
from gpufleet.userfiles import TABLE_BYTES, read_text

DATA = Path(__file__).with_name("data") / "rates.csv"
UNITS = ("hour", "gb-month", "gib-month", "tib-hour", "disk-month", "iops-month", "mbps-month", "gb")
COLUMNS = ("provider", "item", "region", "unit", "usd", "source", "as_of")


@dataclass(frozen=True)
class Rate:
    provider: str
    item: str
    region: str  # or "*"
    unit: str
    usd: float
    source: str
    as_of: str


def read(path: Path) -> dict[tuple[str, str, str], Rate]:
    """A rates table; a row that is not one is a CatalogError naming the file and line."""
    out: dict[tuple[str, str, str], Rate] = {}
    try:
        text = read_text(path, "a rates table (CSV)", TABLE_BYTES, variable="GPUFLEET_RATES")
    except FileNotFoundError as e:
        raise CatalogError(f"{path} cannot be read ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise CatalogError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})",
                           "rebuild it with `gpufleet catalog refresh`") from None
    rows = csv.DictReader(io.StringIO(text, newline=""))
    if tuple(rows.fieldnames or ()) != COLUMNS:
        raise CatalogError(f"{path}: its columns are {rows.fieldnames}, not {list(COLUMNS)}",
                           "rebuild it with `gpufleet catalog refresh`")
    for n, row in enumerate(rows, start=2):
        try:
            r = Rate(row["provider"], row["item"], row["region"], row["unit"], float(row["usd"]),
                     row["source"], row["as_of"])
        except (TypeError, ValueError) as e:
            raise CatalogError(f"{path}:{n}: not a rate ({e})") from None
        if r.unit not in UNITS or r.usd < 0 or not r.source or not r.as_of:
            raise CatalogError(f"{path}:{n}: {r.item}: a rate needs a unit of {', '.join(UNITS)}, a price "
                               "of 0 or more, a source and a date")
        out[(r.provider, r.item, r.region)] = r
    return out


# a fetched rate further than this factor from the one it replaces is a misread answer, not a new price
MAX_FACTOR = 3.0


def check(provider: str, fetched: list[Rate], current: dict[tuple[str, str, str], Rate]) -> list[str]:
    """What is wrong with a provider's fetched rates: a unit not ours, a negative price, a unit other
    than the row's it replaces, or a price more than MAX_FACTOR off it."""
    problems = []
    for r in fetched:
        was = current.get((r.provider, r.item, r.region)) or current.get((r.provider, r.item, "*"))
        if r.provider != provider or r.unit not in UNITS or r.usd < 0 or not r.source or not r.as_of:
            problems.append(f"{provider}: {r.item} in {r.region}: not a rate ({r.unit}, {r.usd})")
        elif was is not None and was.unit != r.unit:
            problems.append(f"{provider}: {r.item} in {r.region}: billed per {r.unit}, the table says per {was.unit}")
        elif was is not None and was.usd > 0 and not was.usd / MAX_FACTOR <= r.usd <= was.usd * MAX_FACTOR:
            problems.append(f"{provider}: {r.item} in {r.region}: ${r.usd:g} per {r.unit}, more than {MAX_FACTOR:g}x "
                            f"off ${was.usd:g} ({was.source[:60]})")
    return problems


def write(path: Path, table: dict[tuple[str, str, str], Rate]) -> None:
    """The table as CSV, sorted, replacing ``path`` atomically."""
    def rows(f) -> None:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        w.writerows(astuple(table[k]) for k in sorted(table))

    replace_atomically(path, rows, "GPUFLEET_RATES", newline="")


@functools.lru_cache(maxsize=8)
def _merged(refreshed: str | None, _mtime: int) -> dict[tuple[str, str, str], Rate]:
    return {**read(DATA), **(read(Path(refreshed)) if refreshed else {})}


def refreshed() -> dict[tuple[str, str, str], Rate]:
    """The rows the last `catalog refresh --rates` fetched (none before the first)."""
    path = rates_path()
    return read(path) if path.exists() else {}


def table() -> dict[tuple[str, str, str], Rate]:
    """The embedded rows, each replaced by the refreshed one of the same provider, item and region."""
    path = rates_path()
    try:
        mtime = path.stat().st_mtime_ns
    except FileNotFoundError:
        return _merged(None, 0)
    return _merged(str(path), mtime)


def rate(provider: str, item: str, region: str) -> Rate | None:
    """The rate of ``item`` in ``region``; else the provider's row for every region (``*``); else its
    rate in another region, one of the same geography first (``us-...`` for ``us-east-1``), which the
    priced line names; else None."""
    t = table()
    found = t.get((provider, item, region)) or t.get((provider, item, "*"))
    if found is not None:
        return found
    others = sorted((r for (p, i, _), r in t.items() if p == provider and i == item),
                    key=lambda r: (r.region.split("-")[0] != region.split("-")[0], r.region))
    return others[0] if others else None

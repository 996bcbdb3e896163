"""What a cluster is billed for besides its instances, per unit: block storage, shared file systems,
NAT gateways, public addresses and traffic (``data/rates.csv``). Each row is one provider's list
price for one item in one region (``*``: the provider prices it the same in every region), with its
unit, source and as-of date, like the instance prices. A table in the user's data directory
(``GPUFLEET_RATES``; `gpufleet catalog refresh` writes it) is read in the embedded one's place.
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass
from pathlib import Path

from gpufleet.errors import CatalogError
from gpufleet.paths import rates_path

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
        with path.open(newline="") as f:
            rows = csv.DictReader(f)
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
    except OSError as e:
        raise CatalogError(f"{path} cannot be read ({e.strerror})") from None
    return out


@functools.lru_cache(maxsize=4)
def _table(path: str) -> dict[tuple[str, str, str], Rate]:
    return read(Path(path))


def table() -> dict[tuple[str, str, str], Rate]:
    """The refreshed table when there is one, else the embedded."""
    refreshed = rates_path()
    return _table(str(refreshed if refreshed.exists() else DATA))


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

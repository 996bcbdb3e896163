"""How each instance type is sold (``data/consumption.csv``): the consumption models of the types a
provider does not sell the usual way, on demand and on spot. Google sells A4 and A3 Ultra machines
reservation-bound (future reservations), flex-start or spot, and not on demand, though its price
list carries a rate for them (the rate the discounts of those models start from): such an offer is
a price, not something `up` can create, and compare does not rank it.
"""

from __future__ import annotations

import csv
import fnmatch
import functools
from dataclasses import dataclass
from pathlib import Path

from gpufleet.errors import CatalogError

DATA = Path(__file__).with_name("data") / "consumption.csv"
MODELS = ("ondemand", "spot", "flex-start", "reservation-bound")
WORDS = {"ondemand": "on demand", "spot": "spot", "flex-start": "flex-start", "reservation-bound": "reservation-bound"}


@dataclass(frozen=True)
class Sold:
    provider: str
    match: str  # a glob of instance type names
    models: tuple[str, ...]
    source: str
    as_of: str

    def words(self) -> str:
        """``models`` as a sentence: "reservation-bound, flex-start or spot"."""
        said = [WORDS[m] for m in sorted(self.models, key=lambda m: -MODELS.index(m))]
        return ", ".join(said[:-1]) + f" or {said[-1]}" if len(said) > 1 else said[0]


@functools.cache
def table() -> tuple[Sold, ...]:
    out = []
    with DATA.open(newline="") as f:
        for n, row in enumerate(csv.DictReader(f), start=2):
            models = tuple(row["models"].split())
            if not models or any(m not in MODELS for m in models) or not row["source"] or not row["as_of"]:
                raise CatalogError(f"{DATA}:{n}: {row['match']}: models must be some of {', '.join(MODELS)}, "
                                   "with a source and a date")
            out.append(Sold(row["provider"], row["match"], models, row["source"], row["as_of"]))
    return tuple(out)


def of(provider: str, instance: str) -> Sold | None:
    """How ``instance`` is sold when not the usual way (None: on demand and on spot)."""
    return next((s for s in table() if s.provider == provider and fnmatch.fnmatchcase(instance, s.match)), None)


def model_of(spot: bool, flex_start: bool, reserved: bool) -> str:
    """The consumption model a place buys its nodes in."""
    return "reservation-bound" if reserved else "spot" if spot else "flex-start" if flex_start else "ondemand"


def sold(provider: str, instance: str, model: str) -> bool:
    """Whether the provider sells ``instance`` in that consumption model (one of MODELS). A type
    without a row is sold on demand and on spot, and in whatever else its cloud's own rules allow it
    (flex-start, reservations), which they check."""
    s = of(provider, instance)
    return s is None or model in s.models

"""Azure pay-as-you-go prices per region, as Microsoft's Karpenter provider for AKS snapshots them
from the Azure Retail Prices API: source data for the embedded catalog's build.

``Azure/karpenter-provider-azure`` generates ``pkg/providers/pricing/zz_generated.pricing.go`` from
``https://prices.azure.com/api/retail/prices`` for 57 public regions (its ``hack/code/prices_gen``:
``priceType eq 'Consumption'``, USD, Virtual Machines; Windows and Low Priority items dropped; spot
items fetched and discarded; each ``armSkuName``'s ``retailPrice``). The file (or an excerpt of its
lines) reads::

    // generated at 2026-06-18T03:43:41Z
        initialOnDemandPrices["eastus"] = map[string]float64{
            "Standard_NC24ads_A100_v4":  3.673000,
        }

Only those three kinds of line are read; anything else is refused, so a changed format is noticed.
"""

from __future__ import annotations

import re
from pathlib import Path

from gpufleet.catalog.skypilot import Listing
from gpufleet.errors import CatalogError

_GENERATED = re.compile(r"^// generated at (\d{4}-\d{2})-\d{2}T[\d:]+Z$")
_REGION = re.compile(r'^initialOnDemandPrices\["([a-z0-9]+)"\] = map\[string\]float64\{$')
_PRICE = re.compile(r'^"(Standard_[A-Za-z0-9_]+)":\s+(\d+\.\d+),$')
_SKIPPED = re.compile(r"^(package \w+|var .*|// [a-z0-9]+|\}|)$")


def read(path: Path) -> tuple[str, dict[tuple[str, str], Listing]]:
    """(the month it was generated, ``YYYY-MM``; (size, region) -> Listing with its on-demand price)."""
    generated, region, out = None, None, {}
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if m := _GENERATED.match(line):
            generated = m[1]
        elif m := _REGION.match(line):
            region = m[1]
        elif m := _PRICE.match(line):
            if region is None:
                raise CatalogError(f"{path}:{n}: a price before any region's map")
            out[(m[1], region)] = Listing(m[1], region, None, None, None, None, ondemand={float(m[2])}, rows=1)
        elif line == "}":
            region = None
        elif not _SKIPPED.match(line):
            raise CatalogError(f"{path}:{n}: not a line of Karpenter's generated Azure prices: {line[:80]!r}")
    if generated is None:
        raise CatalogError(f"{path}: no '// generated at' line: the prices cannot be dated",
                           "keep the file's header lines in an excerpt")
    return generated, out

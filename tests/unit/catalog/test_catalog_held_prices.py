"""The embedded catalog against on-demand list prices it was not built from (tests/data/held-prices)."""

import csv

from conftest import ROOT

HELD = ROOT / "tests" / "data" / "held-prices" / "list_prices.csv"
WITHIN = 0.10


def test_the_catalog_is_within_ten_percent_of_held_out_list_prices(cat):
    rows = list(csv.DictReader(HELD.open()))
    assert len(rows) >= 30 and {r["provider"] for r in rows} == {"aws", "gcp", "azure"}
    off = []
    for r in rows:
        offer = cat.offer(r["provider"], r["region"], r["item"], "ondemand")
        if offer is None:
            off.append(f"{r['provider']} {r['item']} {r['region']}: no on-demand price in the catalog")
        elif abs(offer.usd_per_hour / float(r["price"]) - 1) > WITHIN:
            off.append(f"{r['provider']} {r['item']} {r['region']}: catalog ${offer.usd_per_hour:.4f}, "
                       f"held ${float(r['price']):.4f} ({r['as_of']})")
    assert not off, "\n".join(off)

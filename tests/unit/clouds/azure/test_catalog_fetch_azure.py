"""The Azure Retail Prices fetcher against a fake of the public API (fakes/azure_prices.py):
paging through NextPageLink, throttling, a malformed page, and which meters count."""

import pytest

from gpufleet.catalog.fetched import FetchError
from gpufleet.clouds.azure import prices as fetcher

from fakes.azure_prices import item

SKUS = ["Standard_ND96isr_H100_v5", "Standard_NC24ads_A100_v4"]


@pytest.fixture
def prices(azure_prices):
    return azure_prices


def test_pages_are_followed_and_only_linux_payg_and_spot_count(prices):
    prices.items += [item("Standard_ND96isr_H100_v5", "eastus", 98.32),
                     item("Standard_ND96isr_H100_v5", "eastus", 39.33, spot=True),
                     item("Standard_ND96isr_H100_v5", "eastus", 120.0, windows=True),
                     item("Standard_ND96isr_H100_v5", "eastus", 70.0, kind="Reservation"),
                     item("Standard_ND96isr_H100_v5", "eastus", 19.66, low_priority=True),
                     item("Standard_ND96isr_H100_v5", "eastus", 90.00, start="2024-01-01T00:00:00Z"),  # older meter
                     item("Standard_ND96isr_H100_v5", "eastus", 80.0, start="2026-01-01T00:00:00Z", primary=False),
                     item("Standard_NC24ads_A100_v4", "westeurope", 4.09)]
    # 250 meters of another size: filtered out by the API, not by gpufleet
    prices.items += [item("Standard_D2s_v5", f"region{i}", 0.1) for i in range(250)]
    prices.items += [item("Standard_NC24ads_A100_v4", f"region{i:03d}", 3.67) for i in range(230)]
    rows = fetcher.fetch(SKUS, sleep=lambda s: None, facts=False).prices
    got = {(r.item, r.region, r.market): r.usd_per_hour for r in rows}
    assert got[("Standard_ND96isr_H100_v5", "eastus", "ondemand")] == 98.32  # the newest meter, Linux, pay-as-you-go
    assert got[("Standard_ND96isr_H100_v5", "eastus", "spot")] == 39.33
    assert got[("Standard_NC24ads_A100_v4", "westeurope", "ondemand")] == 4.09
    assert len(rows) == 3 + 230
    assert len([c for c in prices.calls if c[0] == "GET"]) == 3  # 237 meters, 100 a page
    assert "armSkuName eq 'Standard_ND96isr_H100_v5'" in prices.filters[0]
    r = rows[0]
    assert r.api == "azure-retail-prices" and r.sku_id.startswith("DZH318Z0BQ4L/") and r.fetched_at.endswith("Z")


def test_throttling_is_retried_after_retry_after(prices):
    prices.items += [item("Standard_ND96isr_H100_v5", f"r{i:03d}", 98.0) for i in range(150)]
    prices.faults[("GET", r"/api/retail/prices")] = [
        (429, {"error": {"code": "TooManyRequests"}}, {"Retry-After": "7"})]
    waits = []
    rows = fetcher.fetch(SKUS, sleep=waits.append, facts=False).prices
    assert waits == [7.0] and len(rows) == 150


def test_a_malformed_page_fails_the_whole_fetch(prices):
    prices.items += [item("Standard_ND96isr_H100_v5", f"r{i:03d}", 98.0) for i in range(150)]
    prices.faults[("GET", r"/api/retail/prices")] = [
        (200, {"BillingCurrency": "USD", "Items": [item("Standard_ND96isr_H100_v5", "r000", 98.0)] * 100,
               "NextPageLink": prices.url + "/api/retail/prices?$skip=100"}, {}),
        (200, b"<html>upstream error</html>", {})]
    with pytest.raises(FetchError) as ei:
        fetcher.fetch(SKUS, sleep=lambda s: None)
    assert "page 2" in ei.value.message and "previous prices are kept" in ei.value.hint


def test_an_api_that_keeps_failing_is_one_clear_error(prices):
    prices.faults[("GET", r"/api/retail/prices")] = [(503, {"error": {"code": "ServiceUnavailable"}}, {})] * 10
    with pytest.raises(FetchError) as ei:
        fetcher.fetch(SKUS, sleep=lambda s: None)
    assert ei.value.provider == "azure" and "503" in ei.value.message

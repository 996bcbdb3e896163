"""`gpufleet catalog refresh` end to end: the Azure Retail Prices fetcher against the fake
public API, the checks, the atomic replace, and `catalog.load` using the result."""

import json
import pathlib

import pytest

from conftest import cli
from fakes.azure_prices import item


@pytest.fixture
def api(azure_prices, monkeypatch, tmp_path, cat):
    monkeypatch.setenv("GPUFLEET_PRICES", str(tmp_path / "catalog" / "prices.json"))
    azure_prices.full = lambda factor=1.0: _price_list(cat, factor)
    return azure_prices


def _price_list(cat, factor):
    """Every catalog Azure size in every catalog Azure region: on-demand, and spot at 40%."""
    out = []
    for (p, name), it in sorted(cat.instances.items()):
        if p != "azure":
            continue
        for region in sorted(cat.regions["azure"]):
            price = round(3.1 * it.gpu_count * factor, 2)
            out += [item(name, region, price), item(name, region, round(price * 0.4, 2), spot=True)]
    return out


def test_a_refresh_replaces_the_azure_prices_and_keeps_their_provenance(api, tmp_path):
    rows = len(api.full())  # every catalog size in every catalog region, both markets
    api.items += api.full() + [item("Standard_ND96isr_H100_v5", "eastus", 200.0, windows=True)]
    r = cli("--json", "catalog", "refresh", "--provider", "azure")
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert res["written"] and res["results"][0]["status"] == "updated" and res["results"][0]["rows"] == rows
    store = json.loads((tmp_path / "catalog" / "prices.json").read_text())
    assert store["providers"]["azure"]["rows"] == rows and store["providers"]["azure"]["apis"] == ["azure-retail-prices"]
    r = cli("--json", "catalog", "instances", "--provider", "azure", "--gpu", "H100")
    offers = {(o["region"], o["market"]): o for o in json.loads(r.stdout)["offers"]
              if o["instance"]["name"] == "Standard_ND96isr_H100_v5"}
    eastus = offers[("eastus", "ondemand")]
    assert eastus["usd_per_hour"] == pytest.approx(24.8)  # 3.1 x 8 GPUs, not the Windows meter
    assert "azure-retail-prices (SKU DZH318Z0BQ4L/" in json.dumps(eastus)
    assert offers[("eastus", "spot")]["usd_per_hour"] == pytest.approx(9.92)


def test_an_unreachable_api_keeps_the_previous_prices(api, tmp_path):
    api.faults[("GET", r"/api/retail/prices")] = [
        (503, {"error": {"code": "ServiceUnavailable"}}, {"Retry-After": "0"})] * 20
    r = cli("catalog", "refresh", "--provider", "azure")
    assert r.exit_code == 1 and "503" in r.output and "previous prices are kept" in r.output
    assert not (tmp_path / "catalog" / "prices.json").exists()  # the embedded catalog stays


@pytest.mark.parametrize("spoil,needle", [
    (lambda items: [x for x in items if x["armSkuName"] != "Standard_ND96isr_H100_v5" or x["armRegionName"] != "eastus"],
     "no on-demand price for Standard_ND96isr_H100_v5 in eastus"),
    (lambda items: [dict(x, retailPrice=0.001) if x["armSkuName"] == "Standard_NC40ads_H100_v5" else x for x in items],
     "per GPU-hour, outside"),
    (lambda items: [x for x in items if x["armRegionName"] in ("eastus", "westus2")], "more than 25% fewer"),
])
def test_a_refresh_that_fails_its_checks_leaves_the_old_catalog_byte_for_byte(api, tmp_path, spoil, needle):
    api.items += api.full()
    assert cli("catalog", "refresh", "-p", "azure").exit_code == 0
    path = tmp_path / "catalog" / "prices.json"
    before, mtime = path.read_bytes(), path.stat().st_mtime_ns
    api.items[:] = spoil(api.full(factor=1.1))
    r = cli("--json", "catalog", "refresh", "-p", "azure")
    assert r.exit_code == 1
    res = json.loads(r.stdout)
    assert not res["written"] and res["results"][0]["status"] == "rejected"
    assert any(needle in p for p in res["problems"]), res["problems"]
    assert path.read_bytes() == before and path.stat().st_mtime_ns == mtime
    assert not list(path.parent.glob(".*.tmp"))


def test_a_damaged_store_is_named_with_a_way_out(api, tmp_path):
    path = tmp_path / "catalog" / "prices.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    r = cli("catalog", "gpus")
    assert r.exit_code == 1 and str(path) in r.output and "delete" in r.output and "Traceback" not in r.output


def test_a_refresh_replaces_a_damaged_store_and_keeps_it_aside(api, tmp_path):
    path = tmp_path / "catalog" / "prices.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"schema": 2, "prices": [{"truncated')
    api.items += api.full()
    r = cli("--json", "catalog", "refresh", "-p", "azure")
    assert r.exit_code == 0, r.output
    aside = json.loads(r.stdout)["set_aside"]
    assert aside and pathlib.Path(aside).read_text() == '{"schema": 2, "prices": [{"truncated'
    assert cli("catalog", "gpus").exit_code == 0  # the new store reads


def test_offline_and_without_credentials_each_provider_says_why_and_the_embedded_catalog_stays(monkeypatch, tmp_path):
    """No AWS or GCP credentials (the tests see none), Azure's public API unreachable."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        unused_port = s.getsockname()[1]
    monkeypatch.setenv("GPUFLEET_PRICES", str(tmp_path / "prices.json"))
    monkeypatch.setenv("GPUFLEET_AZURE_PRICES_ENDPOINT", f"http://127.0.0.1:{unused_port}/api/retail/prices")
    import gpufleet.clouds.azure.prices as az

    monkeypatch.setattr(az.time, "sleep", lambda s: None)  # the retries' waits (this test only)
    r = cli("--json", "catalog", "refresh")
    assert r.exit_code == 1 and "Traceback" not in r.output
    res = {x["provider"]: x for x in json.loads(r.stdout)["results"]}
    assert {p: x["status"] for p, x in res.items()} == {"aws": "kept", "gcp": "kept", "azure": "kept"}
    assert "no credentials found" in res["aws"]["message"] and "aws configure" in res["aws"]["message"]
    assert "no application default credentials" in res["gcp"]["message"]
    assert "cannot be reached" in res["azure"]["message"]
    assert not (tmp_path / "prices.json").exists()
    r = cli("catalog", "refresh")
    assert r.exit_code == 1 and "Nothing was fetched; the embedded catalog stays" in r.output


# --- AWS: moto for EC2 facts, the Price List and spot history from fakes/aws.py ----------------

def _aws_price_list(aws, cat, factor=1.0):
    from fakes.aws import product

    aws.extras.products[:] = [product(name, region, round(4.0 * it.gpu_count * factor, 4), it.gpu_count)
                              for (p, name), it in sorted(cat.instances.items()) if p == "aws"
                              for region in sorted(cat.regions["aws"])]
    # Boston's Local Zone: its entry says regionCode us-east-1 too, at its own price
    aws.extras.products.append(product("p5.48xlarge", "us-east-1", 99.0, 8, location_type="AWS Local Zone"))
    # moto's own spot history is a $0.00001 placeholder (which the checks reject: see the next test);
    # every region gets recorded-looking prices instead
    for region in cat.regions["aws"]:
        aws.extras.spot[region] = [{"instance_type": "p5.48xlarge", "zone": f"{region}a", "price": 33.0}]
    aws.extras.spot["us-east-1"] = [{"instance_type": "p5.48xlarge", "zone": "us-east-1a", "price": 31.5},
                                    {"instance_type": "p5.48xlarge", "zone": "us-east-1c", "price": 29.25}]


def test_aws_refresh_from_the_price_list_and_spot_history(aws, api, cat, tmp_path):
    _aws_price_list(aws, cat)
    r = cli("--json", "catalog", "refresh", "-p", "aws")
    assert r.exit_code == 0, r.output
    store = json.loads((tmp_path / "catalog" / "prices.json").read_text())
    rows = {(x["item"], x["region"], x["market"]): x for x in store["prices"]}
    p5 = rows[("p5.48xlarge", "us-east-1", "ondemand")]
    assert p5["usd_per_hour"] == 32.0 and p5["api"] == "aws-price-list"
    facts = {f["item"]: f for f in store["facts"]}
    assert facts["p5.48xlarge"]["gpu_count"] == 8 and facts["p5.48xlarge"]["gpu"] == "H100"
    # GPU types moto's copy of AWS's data has and the catalog does not are named
    note = next(n for n in json.loads(r.stdout)["results"][0]["notes"] if "the catalog lacks" in n)
    named = note.split(": ", 1)[1].split(" and ")[0].split(", ")
    assert named and not {x for x in named} & {n for (p, n) in cat.instances if p == "aws"}
    spot = rows[("p5.48xlarge", "us-east-1", "spot")]
    assert spot["usd_per_hour"] == 29.25 and spot["sku_id"] == "us-east-1c/p5.48xlarge"  # the cheapest zone
    r = cli("--json", "catalog", "instances", "--provider", "aws", "--gpu", "H100")
    offer = next(o for o in json.loads(r.stdout)["offers"]
                 if o["instance"]["name"] == "p5.48xlarge" and o["region"] == "us-east-1" and o["market"] == "ondemand")
    assert offer["usd_per_hour"] == 32.0 and "aws-price-list" in offer["price_parts"][0]["source"]


def _table_says(monkeypatch, cat, provider, name, **changes):
    """The embedded GPU table, with one instance type's row changed (as a wrong table would be)."""
    import dataclasses

    from gpufleet import catalog

    wrong = dataclasses.replace(cat, instances=dict(cat.instances))
    wrong.instances[(provider, name)] = dataclasses.replace(cat.instances[(provider, name)], **changes)
    monkeypatch.setattr(catalog, "_embedded", lambda: wrong)


def test_aws_gpu_model_and_count_must_agree_with_the_gpu_table(aws, api, cat, tmp_path, monkeypatch):
    """describe_instance_types (moto's copy of AWS's data) says g5.xlarge has 1 A10G; a table
    that says 4 L4s is wrong, and the refresh stops."""
    _aws_price_list(aws, cat)
    _table_says(monkeypatch, cat, "aws", "g5.xlarge", gpu_count=4, gpu="L4")
    r = cli("--json", "catalog", "refresh", "-p", "aws")
    res = json.loads(r.stdout)
    assert r.exit_code == 1 and not res["written"] and not (tmp_path / "catalog" / "prices.json").exists()
    assert any("g5.xlarge: the API says 1 GPUs, the GPU table 4" in p for p in res["problems"]), res["problems"]
    assert any("g5.xlarge: the API says its GPU is A10G, the GPU table L4" in p for p in res["problems"])


def test_moto_placeholder_spot_prices_are_caught_by_the_checks(aws, api, cat, tmp_path):
    _aws_price_list(aws, cat)
    aws.extras.spot.clear()  # moto answers: $0.00001 an hour for everything
    r = cli("--json", "catalog", "refresh", "-p", "aws")
    res = json.loads(r.stdout)
    assert r.exit_code == 1 and not res["written"]
    assert any("spot: $1e-05/h" in p and "outside" in p for p in res["problems"])


def test_aws_without_credentials_keeps_the_prices(api, monkeypatch):
    r = cli("catalog", "refresh", "-p", "aws")
    assert r.exit_code == 1 and "aws: no credentials found" in r.output


# --- Azure capabilities: resource SKUs through azure-mgmt-compute against the ARM fake ----------

def _resource_skus(arm, cat, regions=("eastus", "westeurope")):
    from fakes.azure import resource_sku

    arm.skus[:] = [resource_sku(name, region, gpus=it.gpu_count, vcpus=it.vcpus, memory_gb=it.memory_gib,
                                rdma=it.fabric.startswith("infiniband"),
                                restricted_zones=("3",) if name == "Standard_ND96isr_H100_v5" else ())
                   for (p, name), it in sorted(cat.instances.items()) if p == "azure" for region in regions]


def test_azure_capabilities_and_zones_come_from_resource_skus_with_credentials(azure, api, cat, tmp_path):
    api.items += api.full()
    _resource_skus(azure, cat)
    from fakes.azure import resource_sku

    azure.skus += [resource_sku("Standard_ND128isr_GB300_v6", "eastus", gpus=4, vcpus=128),
                   resource_sku("Standard_D8s_v5", "eastus", vcpus=8, memory_gb=32)]
    r = cli("--json", "catalog", "refresh", "-p", "azure")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["results"][0]["notes"] == [
        "1 GPU VM sizes the catalog lacks (add them to instances.csv to compare them): Standard_ND128isr_GB300_v6"]
    store = json.loads((tmp_path / "catalog" / "prices.json").read_text())
    facts = {f["item"]: f for f in store["facts"]}
    nd = facts["Standard_ND96isr_H100_v5"]
    assert nd["gpu_count"] == 8 and nd["infiniband"] is True and nd["api"] == "azure-resource-skus"
    assert nd["zones"] == {"eastus": ["1", "2"], "westeurope": ["1", "2"]}  # zone 3 is restricted for this subscription
    assert store["providers"]["azure"]["apis"] == ["azure-resource-skus", "azure-retail-prices"]
    assert any("/providers/microsoft.compute/skus" in c[1].lower() for c in azure.calls)


def test_azure_without_credentials_still_updates_prices_and_says_capabilities_were_not_checked(api, cat, tmp_path):
    api.items += api.full()
    r = cli("catalog", "refresh", "-p", "azure")
    assert r.exit_code == 0, r.output
    assert "capabilities (GPUs, InfiniBand, zones) not checked" in r.output
    assert (tmp_path / "catalog" / "prices.json").exists()


def test_zones_from_a_refresh_with_credentials_survive_one_without(azure, api, cat, tmp_path, monkeypatch):
    api.items += api.full()
    _resource_skus(azure, cat)
    assert cli("catalog", "refresh", "-p", "azure").exit_code == 0
    monkeypatch.delenv("ARM_SUBSCRIPTION_ID")  # credentials gone
    r = cli("catalog", "refresh", "-p", "azure")
    assert r.exit_code == 0 and "not checked" in r.output and "of the last refresh that had them are kept" in r.output
    store = json.loads((tmp_path / "catalog" / "prices.json").read_text())
    assert {f["item"]: f for f in store["facts"]}["Standard_ND96isr_H100_v5"]["zones"]["eastus"] == ["1", "2"]


def test_azure_gpu_counts_from_resource_skus_must_agree_with_the_table(azure, api, cat, tmp_path):
    api.items += api.full()
    _resource_skus(azure, cat)
    for s in azure.skus:
        if s["name"] == "Standard_NC24s_v3":
            s["capabilities"] = [c if c["name"] != "GPUs" else {"name": "GPUs", "value": "2"} for c in s["capabilities"]]
    r = cli("--json", "catalog", "refresh", "-p", "azure")
    res = json.loads(r.stdout)
    assert r.exit_code == 1 and not res["written"]
    assert any("Standard_NC24s_v3: the API says 2 GPUs, the GPU table 4" in p for p in res["problems"])


def test_compare_shows_the_refreshed_prices_age_and_warns_past_the_configured_limit(api, tmp_path, monkeypatch):
    """The embedded prices are months old: compare warns (limit from the config) and names the
    refresh; after one, the Azure rows are today's and the warning is gone."""
    import datetime as dt

    cfg = tmp_path / "config.yaml"
    cfg.write_text("catalog_max_age_days: 30\n")
    monkeypatch.setenv("GPUFLEET_CONFIG", str(cfg))
    before = cli("compare", "resnet50", "--provider", "azure", "--gpu", "H100")
    assert before.exit_code == 0 and "run `gpufleet catalog refresh`" in before.output
    assert "past the 30-day limit" in before.output
    api.items += api.full()
    assert cli("catalog", "refresh", "-p", "azure").exit_code == 0
    r = cli("--json", "compare", "resnet50", "--provider", "azure", "--gpu", "H100")
    data = json.loads(r.stdout)
    assert data["catalog_age_days"] == 0 and data["catalog_as_of"] == dt.datetime.now(dt.timezone.utc).date().isoformat()
    assert all("azure-retail-prices" in p["source"] for o in data["offers"] for p in o["price_parts"])
    after = cli("compare", "resnet50", "--provider", "azure", "--gpu", "H100")
    assert "(0 days old)" in after.output and "catalog refresh" not in after.output


def test_a_deliberate_shrink_passes_with_max_shrink(api, tmp_path):
    api.items += api.full()
    assert cli("catalog", "refresh", "-p", "azure").exit_code == 0
    api.items[:] = [x for x in api.full() if x["armRegionName"] in ("eastus", "westus2")]
    r = cli("catalog", "refresh", "-p", "azure")
    assert r.exit_code == 1 and "--max-shrink allows more" in r.output
    r = cli("catalog", "refresh", "-p", "azure", "--max-shrink", "0.99")  # 2 of 49 regions left
    assert r.exit_code == 0 and "Refreshing prices: 1/1" in r.output
    store = json.loads((tmp_path / "catalog" / "prices.json").read_text())
    assert {x["region"] for x in store["prices"]} == {"eastus", "westus2"}


def test_sources_says_which_providers_are_refreshed_and_how_old_the_rest_are(api):
    r = cli("--json", "catalog", "sources")
    before = {x["provider"]: x for x in json.loads(r.stdout)["providers"]}
    assert {x["from"] for x in before.values()} == {"embedded"} and before["azure"]["age_days"] > 30
    api.items += api.full()
    assert cli("catalog", "refresh", "-p", "azure").exit_code == 0
    after = {x["provider"]: x for x in json.loads(cli("--json", "catalog", "sources").stdout)["providers"]}
    assert after["azure"]["from"] == "refresh" and after["azure"]["age_days"] == 0
    assert after["azure"]["prices"] == len(api.full())
    assert after["azure"]["apis"] == ["azure-retail-prices"] and after["aws"]["from"] == "embedded"
    r = cli("catalog", "sources")
    assert r.exit_code == 0 and "refresh" in r.output and "embedded" in r.output

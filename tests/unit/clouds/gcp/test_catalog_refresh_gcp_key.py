"""`catalog refresh -p gcp --public`: the Cloud Billing Catalog read with an API key, no credentials.

The SKUs come from the Compute fake's Cloud Billing Catalog (fakes/gcp.py), which refuses a key
it does not hold as the API does; the machine shapes are the catalog's, so no Compute API call
is made."""

import json

import pytest

from conftest import cli
from fakes.price_lists import GCP_FAMILIES, GCP_GPUS, _factor, gcp_skus


@pytest.fixture
def keyed(gcp, monkeypatch, tmp_path, cat):
    for var in ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT"):
        monkeypatch.delenv(var, raising=False)  # nothing but the key
    monkeypatch.setenv("GPUFLEET_GCP_BILLING_ENDPOINT", gcp.url)
    monkeypatch.setenv("GPUFLEET_PRICES", str(tmp_path / "prices.json"))
    gcp.skus += gcp_skus(sorted(cat.regions["gcp"]))
    gcp.api_keys.add("AIza-test-key")
    return gcp


def test_an_api_key_prices_the_catalog_machines_without_credentials(keyed, monkeypatch, cat, tmp_path):
    monkeypatch.setenv("GPUFLEET_GCP_API_KEY", "AIza-test-key")
    r = cli("--json", "catalog", "refresh", "-p", "gcp", "--public")
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)["results"][0]
    assert res["status"] == "updated" and any("machine shapes and zones the catalog's" in n for n in res["notes"])
    assert keyed.sku_queries and all(q["key"] == "AIza-test-key" for q in keyed.sku_queries)
    assert not any("/compute/" in path for _, path in keyed.calls)  # machine types would need credentials
    stored = json.loads((tmp_path / "prices.json").read_text())
    a3 = next(p for p in stored["prices"] if (p["item"], p["region"], p["market"]) == ("a3-highgpu-8g", "us-central1",
                                                                                      "ondemand"))
    it, f = cat.instance("gcp", "a3-highgpu-8g"), _factor("gcp", "us-central1")
    core, ram = GCP_FAMILIES["A3"]
    assert a3["usd_per_hour"] == pytest.approx(it.vcpus * core * f + it.memory_gib * ram * f + 8 * GCP_GPUS["H100"][2] * f,
                                               rel=1e-5)
    assert a3["api"] == "gcp-cloud-billing-catalog" and len(a3["parts"]) == 3
    # only where the catalog has the machine: its regions, not every region that prices A3 cores
    regions = {p["region"] for p in stored["prices"] if p["item"] == "a3-highgpu-8g"}
    assert regions == set(cat.instance_regions("gcp", "a3-highgpu-8g")) & set(cat.regions["gcp"])
    assert stored["facts"] == []  # the shapes were the catalog's: nothing the provider said


def test_without_a_key_the_message_says_where_to_get_one(keyed, monkeypatch, tmp_path):
    monkeypatch.delenv("GPUFLEET_GCP_API_KEY", raising=False)
    r = cli("catalog", "refresh", "-p", "gcp", "--public")
    assert r.exit_code == 1 and "GPUFLEET_GCP_API_KEY is not set" in r.output, r.output
    assert "APIs & Services > Credentials" in r.output and "Traceback" not in r.output
    assert not keyed.sku_queries and not (tmp_path / "prices.json").exists()


def test_a_key_the_api_refuses_keeps_the_previous_prices(keyed, monkeypatch, tmp_path):
    monkeypatch.setenv("GPUFLEET_GCP_API_KEY", "AIza-revoked")
    r = cli("catalog", "refresh", "-p", "gcp", "--public")
    assert r.exit_code == 1 and "answered 400 (API key not valid" in r.output, r.output
    assert not (tmp_path / "prices.json").exists()

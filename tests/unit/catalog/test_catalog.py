"""The embedded catalog: provenance on every row, composed GCP prices, racks, user overrides."""

import pytest

from gpufleet import catalog
from gpufleet.catalog.onprem import HOURS_PER_YEAR, Site
from gpufleet.errors import CatalogError, InputError, SpecErrors

REQUIRED_GPUS = ["V100", "T4", "A10G", "L4", "L40S", "A100-40GB", "A100-80GB", "H100", "H100-PCIe", "H200", "B200"]


def test_required_gpus_with_specs_and_provenance(cat):
    for name in REQUIRED_GPUS:
        g = cat.gpu(name)
        assert g.tflops["fp32"] > 0 and g.memory_gb > 0 and g.memory_bw_gbs > 0 and g.tdp_w > 0
        assert g.source and g.as_of
    for name in ["A100-40GB", "H100", "H200", "B200", "L40S"]:
        g = cat.gpu(name)
        # dense tensor throughput ordering every datasheet agrees on
        assert g.tflops["fp32"] < g.tflops["tf32"] < g.tflops["bf16"]
    for name in ["H100", "H200", "B200", "L4", "L40S"]:
        assert cat.gpu(name).tflops["fp8"] == pytest.approx(2 * cat.gpu(name).tflops["bf16"], rel=0.02)
    assert "fp8" not in cat.gpu("A100-80GB").tflops


def test_gpu_aliases_and_precision_fallback(cat):
    assert cat.gpu("nvidia-tesla-t4").name == "T4"
    v100 = cat.gpu("V100")
    assert v100.peak_tflops("bf16") == v100.tflops["fp16"]  # V100 has no bf16: runs as fp16
    assert v100.peak_tflops("tf32") == v100.tflops["fp32"]


def test_every_instance_and_price_row_is_sourced(cat):
    for it in cat.instances.values():
        assert it.gpu in cat.gpus and it.gpu_count >= 1 and it.source and it.as_of
    for p in cat.prices:
        assert p.usd_per_hour > 0 and p.source and p.as_of
    providers = {p for (p, _) in cat.instances}
    assert providers == {"aws", "gcp", "azure"}
    geos = {cat.regions[o.provider][o.region] for o in cat.offers()}
    assert {"us", "eu", "asia"} <= geos


def test_efa_counts_follow_the_instance_type(cat):
    assert cat.instance("aws", "p5.48xlarge").efa_interfaces == 32
    assert cat.instance("aws", "p4d.24xlarge").efa_interfaces == 4


def test_gcp_separately_priced_gpus_are_machine_plus_gpus(cat):
    offer = next(o for o in cat.offers() if o.instance.name == "n1-standard-32+4xT4")
    machine = next(p for p in cat.prices if p.item == "n1-standard-32" and p.region == offer.region)
    gpu = next(p for p in cat.prices if p.item == "gpu:T4" and p.region == offer.region)
    assert [x.what for x in offer.parts] == ["n1-standard-32", "4x T4"]
    assert offer.usd_per_hour == pytest.approx(machine.usd_per_hour + 4 * gpu.usd_per_hour)


def test_onprem_rack_cost_model():
    base = dict(name="dc", gpu="H100", gpus_per_node=8, nodes=2, purchase_usd_per_node=200000,
                depreciation_years=4, utilization=1.0, power_kw_per_node=10, usd_per_kwh=0.1, pue=1.5)
    s = Site(**base)
    parts = dict(s.hourly_parts())
    assert parts["capex"] == pytest.approx(200000 / (4 * HOURS_PER_YEAR))
    assert parts["power"] == pytest.approx(10 * 1.5 * 0.1)
    assert s.usd_per_gpu_hour() == pytest.approx(s.usd_per_node_hour() / 8)
    half = Site(**{**base, "utilization": 0.5})
    assert half.usd_per_node_hour() == pytest.approx(2 * s.usd_per_node_hour())


def test_catalog_age(cat):
    import datetime as dt

    assert catalog.age_in_days("2026-01", dt.date(2026, 1, 31)) == 30
    assert cat.age_days(dt.date(2100, 1, 1)) > 0


CONFIG = """\
discounts: {aws: 0.25}
prices:
  - {provider: aws, item: p4d.24xlarge, region: us-east-1, market: spot, usd_per_hour: 9.5, source: quote}
sites:
  - {name: dc1, gpu: H100, gpus_per_node: 8, nodes: 4, purchase_usd_per_node: 250000,
     depreciation_years: 4, utilization: 0.6, power_kw_per_node: 10.2, usd_per_kwh: 0.12, pue: 1.4}
"""


def test_user_config_discounts_prices_and_sites(write, cat):
    path = write("config.yaml", CONFIG)
    mine = catalog.load(path)
    list_price = next(o for o in cat.offers() if o.key == "aws/us-east-1/p4d.24xlarge/ondemand").usd_per_hour
    offers = {o.key: o for o in mine.offers()}
    assert offers["aws/us-east-1/p4d.24xlarge/ondemand"].usd_per_hour == pytest.approx(list_price * 0.75)
    # a quote is what is paid: the negotiated discount is off list prices, not off it (issue 16)
    assert offers["aws/us-east-1/p4d.24xlarge/spot"].usd_per_hour == pytest.approx(9.5)
    rack = offers["baremetal/dc1/dc1-node/owned"]
    assert rack.max_nodes == 4 and rack.gpu.name == "H100"
    # the embedded catalog (its own spot snapshot) is not modified by a user's overrides
    embedded = catalog.load(use_config=False).offer("aws", "us-east-1", "p4d.24xlarge", "spot")
    assert embedded.usd_per_hour != pytest.approx(9.5) and not any(p.quote for p in embedded.parts)


def test_bad_config_is_located(write):
    path = write("config.yaml", CONFIG.replace("usd_per_hour: 9.5", "usd_per_hour: -1"))
    with pytest.raises(SpecErrors) as ei:
        catalog.load(path)
    (e,) = ei.value.errors
    assert e.line == 3 and e.key == "prices[0].usd_per_hour"
    path = write("c2.yaml", "discount: {aws: 0.1}\n")
    with pytest.raises(SpecErrors) as ei:
        catalog.load(path)
    assert "discounts" in ei.value.errors[0].hint


def test_missing_explicit_config_is_an_error(tmp_path):
    with pytest.raises(InputError):
        catalog.load(tmp_path / "absent.yaml")


def test_malformed_catalog_csv_names_file_line_and_column():
    text = "provider,item,region,market,usd_per_hour,source,as_of\naws,g5.xlarge,us-east-1,ondemand,abc,src,2025-06\n"
    with pytest.raises(CatalogError) as ei:
        catalog.parse_prices(text, "prices.csv")
    assert ei.value.message == "prices.csv:2: usd_per_hour: 'abc' is not a number"
    text = text.replace("abc", "1.0").replace(",src,", ",,")
    with pytest.raises(CatalogError, match="prices.csv:2: source: missing value"):
        catalog.parse_prices(text, "prices.csv")

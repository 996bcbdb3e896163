"""compare: ranking, marks, filters and the scaling curve."""

import json

import pytest

from gpufleet import catalog
from gpufleet import compare as cmp
from gpufleet.errors import InputError
from gpufleet.perf import workloads
from tests.conftest import cli


def _req(**kw):
    return cmp.Request(workload=workloads.get(kw.pop("wl", "resnet50")), **kw)


def test_ranked_by_cost_with_cheapest_and_fastest_marked(cat):
    rep = cmp.compare(cat, _req())
    feasible = [r for r in rep.rows if r.feasible]
    assert len(feasible) >= 30
    costs = [r.cost_to_train_usd for r in feasible]
    assert costs == sorted(costs)
    cheapest = [r for r in rep.rows if "cheapest" in r.tags]
    fastest = [r for r in rep.rows if "fastest" in r.tags]
    assert len(cheapest) == len(fastest) == 1
    assert cheapest[0].cost_to_train_usd == min(costs)
    assert fastest[0].time_to_train_h == min(r.time_to_train_h for r in feasible)
    for r in rep.rows:
        assert r.cost_to_train_usd == pytest.approx(r.time_to_train_h * r.usd_per_hour)
        assert r.usd_per_pflop_hour > 0 and r.bottleneck in ("compute", "network", "cpu", "storage")
    assert rep.catalog_as_of and rep.catalog_age_days >= 0


def test_filters(cat):
    rep = cmp.compare(cat, _req(providers=["gcp"], gpus=["T4"]))
    assert rep.rows and {(r.provider, r.gpu) for r in rep.rows} == {("gcp", "T4")}
    rep = cmp.compare(cat, _req(max_price=2.0))
    assert rep.rows and max(r.usd_per_hour for r in rep.rows) <= 2.0
    rep = cmp.compare(cat, _req(regions=["eu-west-1"]))
    assert {r.region for r in rep.rows} == {"eu-west-1"}
    rep = cmp.compare(cat, _req(min_gpus=16, nodes=[1, 2]))
    assert rep.rows and all(r.total_gpus >= 16 for r in rep.rows)


def test_spot_works_offline_from_the_snapshot_and_a_quote_replaces_it(cat, write):
    rep = cmp.compare(cat, _req(spot=True))
    assert rep.rows and {r.market for r in rep.rows} == {"spot"}
    assert rep.spot_as_of == min(r.price_as_of for r in rep.rows) and any("preempt" in a for a in rep.assumptions)
    embedded = cat.offer("aws", "us-east-1", "g5.xlarge", "spot").usd_per_hour
    path = write("c.yaml", "prices:\n  - {provider: aws, item: g5.xlarge, region: us-east-1, market: spot, usd_per_hour: 0.4}\n")
    rep = cmp.compare(catalog.load(path), _req(spot=True))
    mine = [r for r in rep.rows if (r.instance, r.region) == ("g5.xlarge", "us-east-1")]
    assert [r.usd_per_hour for r in mine] == [0.4] and embedded != 0.4
    # a selection the snapshot has no spot price for still says how to get one
    rep = cmp.compare(cat, _req(spot=True, providers=["baremetal"]))
    assert rep.rows == [] and any("add quotes" in a for a in rep.assumptions)


def test_scaling_curve_over_node_counts(cat):
    rep = cmp.compare(cat, _req(wl="llm-7b", tokens=1e10, gpus=["H100"], providers=["aws"], nodes=[1, 2, 4, 8]))
    by_nodes = {r.nodes: r for r in rep.rows if r.region == "us-east-1"}
    assert sorted(by_nodes) == [1, 2, 4, 8]
    tput = [by_nodes[n].throughput for n in (1, 2, 4, 8)]
    assert tput == sorted(tput)
    assert all(0 < by_nodes[n].scaling_efficiency <= 1 for n in by_nodes)


def test_owned_rack_competes_in_the_same_table(write):
    path = write("c.yaml", "sites:\n  - {name: dc1, gpu: A100-80GB, gpus_per_node: 8, nodes: 2, purchase_usd_per_node: 150000,\n"
                 "     depreciation_years: 5, utilization: 0.8, power_kw_per_node: 6.5, usd_per_kwh: 0.1, pue: 1.3}\n")
    rep = cmp.compare(catalog.load(path), _req(nodes=[1, 2, 4]))
    rack = [r for r in rep.rows if r.provider == "baremetal"]
    assert sorted(r.nodes for r in rack) == [1, 2]  # the site has 2 nodes
    assert any(s["reason"] == "the site has 2 nodes" for s in rep.skipped)


def test_llm_defaults_and_units(cat):
    rep = cmp.compare(cat, _req(wl="llm-1b", gpus=["H100"]))
    assert rep.samples == pytest.approx(20 * workloads.get("llm-1b").params)
    with pytest.raises(InputError):
        cmp.compare(cat, _req(wl="llm-1b", epochs=1))
    with pytest.raises(InputError):
        cmp.compare(cat, _req(storage="fast"))


def test_framework_flag_predicts_the_framework_and_says_so():
    args = ("--json", "compare", "bert-large", "--gpu", "A100-80GB", "--provider", "aws")
    base, tf1 = cli(*args), cli(*args, "--framework", "tf1")
    assert base.exit_code == tf1.exit_code == 0, base.output + tf1.output
    b, t = json.loads(base.stdout), json.loads(tf1.stdout)
    speed = {(o["instance"], o["region"], o["market"]): o["throughput"] for o in b["offers"]}
    assert t["offers"] and all(o["throughput"] < speed[o["instance"], o["region"], o["market"]] for o in t["offers"])
    assert any("framework tf1" in a for a in t["assumptions"])
    assert any("framework pytorch" in a for a in b["assumptions"])
    bad = cli("compare", "resnet50", "--framework", "jax")
    assert bad.exit_code == 2 and "jax" in bad.output and "pytorch" in bad.output


def test_a4_and_a3_ultra_are_never_ranked_on_demand_and_their_spot_offers_are(cat):
    """Google sells A4 and A3 Ultra reservation-bound, flex-start or spot, not on demand, though its price
    list has a rate for them (catalog/data/consumption.csv, its sources): `up` could not create the offer."""
    rep = cmp.compare(cat, _req(gpus=["B200", "H200"], providers=["gcp"]))
    ranked = {(r.instance, r.market) for r in rep.rows}
    assert not {i for i, m in ranked if m == "ondemand"} & {"a4-highgpu-8g", "a3-ultragpu-8g"}
    assert cat.offer("gcp", "us-central1", "a4-highgpu-8g", "ondemand") is not None  # the price stays a price
    said = next(a for a in rep.assumptions if "a4-highgpu-8g" in a)
    assert "reservation-bound, flex-start or spot" in said and "a3-ultragpu-8g" in said
    spot = cmp.compare(cat, _req(gpus=["B200"], providers=["gcp"], spot=True))
    assert "a4-highgpu-8g" in {r.instance for r in spot.rows}

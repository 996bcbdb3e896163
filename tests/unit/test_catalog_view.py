"""What `catalog` and `plan` show people: tables that fit 80 and 100 columns without a cut name,
provenance listed once, orders and messages that say what they do (issue 29, items 4, 6, 7)."""

import json
import re

import pytest

from conftest import EXAMPLES, ROOT, assert_fits, cli, cli_at, table_cells


@pytest.mark.parametrize("columns", [100, 80])
def test_the_catalog_tables_fit_the_terminal_and_cut_no_name(columns, cat):
    out = cli_at(columns, "catalog", "gpus").stdout
    assert_fits(out, columns, [g.name for g in cat.gpus.values()])
    h100 = [o for o in cat.offers() if o.gpu.name == "H100"]
    out = cli_at(columns, "catalog", "instances", "--gpu", "H100").stdout
    assert_fits(out, columns, sorted({o.instance.name for o in h100}))
    out = cli_at(columns, "catalog", "regions", "--gpu", "H100").stdout
    assert_fits(out, columns, sorted({o.region for o in h100 if o.market != "owned"}))
    assert "--wide shows every column" in " ".join(out.split())


def test_instances_are_one_row_each_with_the_cheapest_region_and_how_many_sell_it(cat):
    rows = table_cells(cli_at(100, "catalog", "instances", "--gpu", "H100", "--provider", "aws").stdout)
    p5 = next(r for r in rows if "p5.48xlarge" in r)
    assert sum("p5.48xlarge" in r for r in rows) == 1
    mine = [o for o in cat.offers() if o.instance.name == "p5.48xlarge"]
    cheapest = min((o for o in mine if o.market == "ondemand"), key=lambda o: o.usd_per_hour)
    assert cheapest.region in p5 and f"${cheapest.usd_per_hour:.2f}" in p5
    assert str(len({o.region for o in mine})) in p5
    # --wide: every column, the price's parts and dates among them
    out = cli_at(100, "--wide", "catalog", "instances", "--gpu", "T4", "--provider", "gcp").stdout
    assert "n1-standard-8 0.38 + 1x T4 0.35" in out and "not shown" not in out


@pytest.mark.parametrize("columns", [100, 80])
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_a_plan_fits_the_terminal_and_cuts_no_name(path, columns):
    doc = json.loads(cli("--json", "plan", str(path)).stdout)
    names = [r["name"] for r in doc["resources"]]
    pools = [p["pool"] for p in doc["pools"]] + [p["machine"] for p in doc["pools"]]
    r = cli_at(columns, "plan", str(path))
    assert r.exit_code == 0, r.output
    assert_fits(r.stdout, columns, names + pools)


def test_a_plan_shows_a_pool_as_its_few_resources_with_short_types():
    out = cli_at(200, "plan", str(ROOT / "stacks/examples/gcp-a3.yaml")).stdout  # two T4 nodes
    rows = table_cells(out)
    # the two T4 nodes are one row: their all-or-nothing request (clouds.gcp.pool_vms), not a row per VM
    assert any("gcp-a3-t4-eval-nodes" in r and any("n1-standard-8 x2" in cell for cell in r) for r in rows)
    assert not any("gcp-a3-t4-eval-0" in cell for r in rows for cell in r)
    # Pulumi's own short form (what `pulumi preview` prints): gcp:compute/network:Network -> gcp:compute:Network
    assert any("gcp:compute:Network" in r for r in rows) and "gcp:compute/network:Network" not in out


def test_show_lists_each_source_once_and_the_prices_refer_to_it(cat):
    out = cli_at(100, "catalog", "show", "p5.48xlarge").stdout
    citation = next(o.parts[0].source for o in cat.offers() if o.instance.name == "p5.48xlarge")
    assert out.replace("\n", " ").count(citation[:60]) == 1
    offers = [o for o in cat.offers() if o.instance.name == "p5.48xlarge"]
    priced = [line for line in out.splitlines() if re.match(r"\s+\S+\s+(ondemand|spot)\s+\$", line)]
    assert len(priced) == len(offers) and all(re.search(r"\[\d+\]$", line) for line in priced)
    assert re.search(r"^\s+\[1\] ", out, re.M) and len(out.splitlines()) < 50


def test_regions_are_cheapest_on_demand_first_then_the_spot_only_ones_cheapest_first():
    rows = json.loads(cli("--json", "catalog", "regions", "--gpu", "H100").stdout)["regions"]
    listed = [r["ondemand"]["usd_per_gpu_hour"] for r in rows if r["ondemand"]]
    spot_only = [r["spot"]["usd_per_gpu_hour"] for r in rows if not r["ondemand"]]
    assert listed == sorted(listed) and spot_only == sorted(spot_only) and spot_only
    assert [bool(r["ondemand"]) for r in rows] == [True] * len(listed) + [False] * len(spot_only)
    said = " ".join(cli_at(200, "catalog", "regions", "--help").stdout.split())
    assert "cheapest on-demand $/GPU-hour first" in said and "spot only" in said


def test_a_model_too_big_for_memory_says_what_was_compared():
    rows = json.loads(cli("--json", "compare", "llm:1b", "--gpu", "L4", "--top", "0").stdout)["infeasible"]
    reason = next(r["reason"] for r in rows if not r["feasible"] and r["gpus_per_node"] == 1)
    m = re.search(r"needs ([\d.]+) GB per GPU; ([\d.]+) GB usable of the L4's 24 GB", reason)
    assert m, reason
    state, usable = float(m[1]), float(m[2])
    assert usable == pytest.approx(0.85 * 24, abs=0.05) and state > usable


def test_free_text_columns_wrap_so_that_tables_of_what_happened_fit(capsys, monkeypatch):
    from types import SimpleNamespace

    from gpufleet.cli import output, tables

    res = SimpleNamespace(where="aws/us-east-1", kind="ec2-instance", id="i-0123456789abcdef0", cluster="team-a-llm")
    why = "blocked by instance i-0123456789abcdef0 that still holds the network interface; retried for 5 min"
    monkeypatch.setenv("COLUMNS", "100")
    output.console.cache_clear()
    tables.render_outcomes("Deleted", [SimpleNamespace(resource=res, status="failed", message=why, ok=False)])
    tables.render_resources("Left", [{"provider": "aws", "zone": None, "region": "us-east-1", "kind": "vpc",
                                      "id": "vpc-0123456789abcdef0", "message": why}])
    out = capsys.readouterr().out
    output.console.cache_clear()
    assert_fits(out, 100, ["i-0123456789abcdef0", "vpc-0123456789abcdef0", "aws/us-east-1", "team-a-llm"])

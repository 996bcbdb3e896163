"""`compare` as a newcomer meets it (issue 29, items 4, 5, 6, 8, 9): a table that fits the terminal,
an offer's regions in one row, infeasible offers counted instead of ranked, a hint when the answer
needs more nodes than asked, and the catalog's age said once a day."""

import csv
import io
import json

import pytest

from conftest import assert_fits, cli, cli_at, table_cells


@pytest.fixture(autouse=True)
def _data(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # where the age warning remembers its day


def _rows(columns, *args):
    return table_cells(cli_at(columns, "compare", *args).stdout)


@pytest.mark.parametrize("columns", [100, 80])
def test_compare_fits_the_terminal_and_cuts_no_name(columns):
    out = cli_at(columns, "compare", "resnet50", "--top", "12").stdout
    data = json.loads(cli("--json", "compare", "resnet50").stdout)
    first = data["offers"][0]
    from gpufleet.cli.output import money

    assert_fits(out, columns, [first["instance"], money(first["cost_to_train_usd"])])
    if columns == 100:  # the cheapest region, whole, with the count of the others
        assert any(c.startswith(first["region"] + " +") for c in table_cells(out)[0])
    r = cli_at(columns, "compare", "llm-7b", "--tokens", "1e11", "--gpu", "H100,A100-80GB", "--nodes", "1,2,4")
    assert r.exit_code == 0
    assert_fits(r.stdout, columns, [])


def test_wide_shows_every_column_and_one_row_per_offer():
    rows = _rows(100, "resnet50", "--top", "5", "--wide")
    assert len(rows[0]) > 10 and len(rows) == 5


def test_an_offers_regions_are_one_row_unless_asked_per_region():
    data = json.loads(cli("--json", "compare", "resnet50").stdout)
    cheapest = data["offers"][0]
    same = [o for o in data["offers"] if (o["provider"], o["instance"], o["nodes"], o["market"]) ==
            (cheapest["provider"], cheapest["instance"], cheapest["nodes"], cheapest["market"])]
    assert len(same) > 3  # g4dn.xlarge is sold in many regions: JSON keeps a row each
    rows = _rows(200, "resnet50", "--top", "12")
    mine = [r for r in rows if any(cheapest["instance"] in c for c in r)]
    assert len(mine) == 1 and f"{cheapest['region']} +{len(same) - 1}" in mine[0]
    per_region = _rows(200, "resnet50", "--top", "12", "--by-region")
    assert len([r for r in per_region if any(cheapest["instance"] in c for c in r)]) > 1
    md = cli("compare", "resnet50", "--markdown", "--top", "12").stdout
    assert md.count(f"| {cheapest['instance']} ") == 1 or md.count(f" {cheapest['instance']} |") == 1
    rows = list(csv.DictReader(io.StringIO(cli("compare", "resnet50", "--csv").stdout)))
    assert len([r for r in rows if r["instance"] == cheapest["instance"] and r["market"] == "ondemand"]) == len(same)


def test_infeasible_offers_are_counted_not_ranked():
    r = cli("--json", "compare", "llm:70b", "--provider", "aws,azure")
    data = json.loads(r.stdout)
    assert all(o["feasible"] for o in data["offers"]) and data["offers"]
    assert [o["rank"] for o in data["offers"]] == list(range(1, len(data["offers"]) + 1))
    assert data["infeasible"] and all(not o["feasible"] and o["reason"] and o["rank"] is None
                                      and o["cost_to_train_usd"] is None for o in data["infeasible"])
    table = cli_at(200, "compare", "llm:70b", "--provider", "aws,azure")
    assert f"{len(data['infeasible'])} offers cannot run it" in table.stdout and "--show-infeasible" in table.stdout
    assert all("cannot run" not in " ".join(row) for row in table_cells(table.stdout))
    rows = list(csv.DictReader(io.StringIO(cli("compare", "llm:70b", "--provider", "aws,azure", "--csv").stdout)))
    assert rows and all(r["feasible"] == "True" for r in rows)
    shown = cli_at(200, "compare", "llm:70b", "--provider", "aws,azure", "--show-infeasible", "--top", "0")
    assert any("cannot run" in " ".join(row) for row in table_cells(shown.stdout))


def test_when_the_answer_needs_more_nodes_it_says_how_many():
    r = cli("--json", "compare", "llm:70b")
    data = json.loads(r.stdout)
    hint = data["more_nodes"]
    assert hint and hint["nodes"] > 1 and hint["time_to_train_h"] <= 30 * 24, hint
    assert min(o["time_to_train_h"] for o in data["offers"]) > 30 * 24  # one node: far too long
    said = cli("compare", "llm:70b").output
    assert f"--nodes {hint['nodes']}" in said and hint["instance"] in said
    quick = json.loads(cli("--json", "compare", "resnet50").stdout)
    assert quick["more_nodes"] is None  # one node is a fine answer: nothing to say
    # no offer can run it on the nodes asked: no answer, exit 1, and the node count that would do
    r = cli("--json", "compare", "llm:70b", "--gpu", "L4")
    data = json.loads(r.stdout)
    assert r.exit_code == 1 and not data["offers"] and data["infeasible"] and data["more_nodes"]["nodes"] > 1


def test_the_catalog_age_is_said_once_a_day_and_always_in_json():
    first = cli("compare", "resnet50", "--top", "3").output
    assert "days old" in first and "warning" in first
    again = cli("compare", "resnet50", "--top", "3").output
    assert "warning: the catalog" not in again
    data = json.loads(cli("--json", "compare", "resnet50").stdout)
    assert data["catalog_age_days"] > 90 and data["catalog_stale"]


@pytest.mark.parametrize("columns", [100, 80])
def test_calibrate_fits_the_terminal(columns):
    r = cli_at(columns, "calibrate")
    assert r.exit_code == 0
    data = json.loads(cli("--json", "calibrate").stdout)
    assert_fits(r.stdout, columns, [data["per_row"][0]["id"]])

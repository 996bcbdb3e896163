"""`gpufleet report`: the file for the example workloads and stacks says what it should (the three
picks, every offer in the table and on the chart, the library's break-even numbers), the maths
is right on its own, and bad input ends with a message, an exit code and nothing written."""

import datetime as dt
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpufleet import compare as cmp
from gpufleet.catalog.onprem import Site
from gpufleet.report import frontier, ownership
from gpufleet.report.document import money

from conftest import EXAMPLES, ROOT
from conftest import cli as run

CONFIG = """\
discounts: {aws: 0.12}
prices:
  - {provider: aws, item: p4d.24xlarge, region: us-east-1, market: spot, usd_per_hour: 9.80,
     source: "AWS console", as_of: 2026-11-20}
sites:
  - {name: dc1, gpu: H100, gpus_per_node: 8, nodes: 4, purchase_usd_per_node: 250000,
     depreciation_years: 4, utilization: 0.6, power_kw_per_node: 10.2, usd_per_kwh: 0.12, pue: 1.4,
     ops_usd_per_node_year: 15000}
"""
WORKLOADS = {"resnet50": ["resnet50", "--epochs", "90"],
             "llm-7b": ["llm-7b", "--tokens", "1e10", "--gpu", "H100,A100-80GB", "--nodes", "1,2"]}


def user_config(tmp_path: Path) -> str:
    p = tmp_path / "config.yaml"
    p.write_text(CONFIG)
    return str(p)


def registry_with_clusters(tmp_path: Path, monkeypatch) -> None:
    """A registry of two clusters: one running 10 hours on AWS, one on GCP past its TTL."""
    from gpufleet.state.registry import Node, Registry

    monkeypatch.setenv("GPUFLEET_REGISTRY", str(tmp_path / "registry.db"))
    now = dt.datetime.now(dt.timezone.utc)

    def iso(hours: float) -> str:
        return (now + dt.timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%SZ")

    reg = Registry()
    reg.record(name="train-a", stack="aws-training", stack_file="a.yaml", owner="ops@example.com", expires_at=iso(14),
               backend=None, locations=[("aws", "us-east-1")],
               nodes=[Node("gpu", i, "aws", "us-east-1", "p4d.24xlarge", usd_per_hour=32.77, launched_at=iso(-10))
                      for i in range(2)])
    reg.record(name="old-b", stack="gcp-a3", stack_file="b.yaml", owner="ops@example.com", expires_at=iso(-5),
               backend=None, locations=[("gcp", "us-central1")],
               nodes=[Node("gpu", 0, "gcp", "us-central1", "a3-highgpu-8g", usd_per_hour=88.25, launched_at=iso(-30))])


def offers_in(html: str) -> tuple[set[str], set[str]]:
    """The ids of the ranked table's rows and of the cost/time chart's points."""
    chart = html[html.index('id="chart-cost-time"'):]
    chart = chart[:chart.index("</figure>")]
    table = html[html.index("Every offer, ranked"):]
    table = table[:table.index("<h2")]  # the ranked table, and the rows folded under it
    return set(re.findall(r'<tr[^>]*data-offer="([^"]+)"', table)), set(re.findall(r'class="point" data-offer="([^"]+)"',
                                                                                   chart))


# --- the maths, on its own -------------------------------------------------------------------

@dataclass
class P:
    cost_to_train_usd: float
    time_to_train_h: float


def test_the_frontier_keeps_what_nothing_beats_and_the_picks_sit_on_it():
    pts = [P(100, 10), P(120, 5), P(400, 1), P(150, 3), P(130, 8), P(500, 2), P(100, 12)]
    front = frontier.frontier(pts)
    assert front == [P(400, 1), P(150, 3), P(120, 5), P(100, 10)]  # fastest first, each cheaper than the faster
    picks = frontier.picks(pts)
    assert picks["cheapest"] == P(100, 10) and picks["fastest"] == P(400, 1)
    assert picks["trade-off"] == P(150, 3)  # nearest the ideal ($100 in 1 h) on log scales
    assert all(p in front for p in picks.values())
    assert frontier.picks([]) == {} and frontier.picks([P(5, 5)]) == {k: P(5, 5) for k in frontier.PICKS}


def test_break_even_is_where_owning_and_renting_the_same_work_cost_the_same():
    site = Site(name="dc1", gpu="H100", gpus_per_node=8, nodes=4, purchase_usd_per_node=250000, depreciation_years=4,
                utilization=0.6, power_kw_per_node=10.2, usd_per_kwh=0.12, pue=1.4, ops_usd_per_node_year=15000)
    per_node_hour = 250000 / (4 * 8760) + 10.2 * 1.4 * 0.12 + 15000 / 8760  # at full use
    assert ownership.usd_per_gpu_hour(site) == pytest.approx(per_node_hour / 0.6 / 8)
    assert ownership.usd_per_gpu_hour(site, 1.0) == pytest.approx(per_node_hour / 8)
    hours, nodes = 20.0, 2
    owned_cost = per_node_hour * nodes / site.utilization * hours  # a 20-hour run at 60%
    for rented in (owned_cost / 2, owned_cost, owned_cost * 3):
        u = ownership.break_even_utilization(owned_cost, site.utilization, rented)
        assert u == pytest.approx(owned_cost * 0.6 / rented)
        if u <= 1:
            assert ownership.rented_usd_per_month(u, hours, rented) == pytest.approx(
                ownership.owned_usd_per_month(site, nodes))
    assert ownership.break_even_utilization(owned_cost, 0.6, owned_cost / 2) > 1  # owning never wins
    with pytest.raises(ValueError):
        ownership.break_even_utilization(0, 0.6, 1)


# --- the report for the examples ---------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_the_report_for_an_example_workload(name, tmp_path):
    from gpufleet import catalog
    from gpufleet.perf import workloads
    from gpufleet.report import model

    out = tmp_path / f"{name}.html"
    cfg = user_config(tmp_path)
    r = run("--json", "--config", cfg, "report", *WORKLOADS[name], "--out", str(out))
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["path"] == str(out) and summary["files"] == [str(out)] and summary["format"] == "html"
    html = out.read_text()
    # the three picks: in the sentence, in the picks table, labelled on the chart
    assert set(summary["picks"]) == {"cheapest", "fastest", "trade-off"}
    lead = re.search(r'<p class="lead">(.*?)</p>', html).group(1)
    chart = html[html.index('id="chart-cost-time"'):html.index("</figure>", html.index('id="chart-cost-time"'))]
    for pick in summary["picks"].values():
        assert pick["offer"] in lead and pick["offer"] in chart
    # every offer in the ranked table, every one that can run it a point on the chart
    rows, points = offers_in(html)
    assert len(rows) == summary["offers"] and len(points) == summary["feasible"] and points <= rows
    assert {p["id"] for p in summary["picks"].values()} <= points and set(summary["frontier"]) <= points
    # text stays text: the axis labels can be found in the SVG
    for label in ("Time to train (hours)", "Cost to train (USD)", "Scaling efficiency (%)", "Utilisation of the rack"):
        assert re.search(rf"<text[^>]*>{re.escape(label)}", html), label
    # self-contained: no script, nothing to fetch
    assert "<script" not in html and not re.search(r'(src|href)="(https?:)?//', html) and "@import" not in html
    # the break-even numbers are the library's, for the same comparison
    cat = catalog.load(cfg)
    req = cmp.Request(workload=workloads.get(name, None), **_request_args(WORKLOADS[name], cat))
    data = model.build(cat, req)
    (own,) = data.ownership
    assert own.rentals
    for rent in own.rentals:
        expected = ownership.break_even_utilization(own.cost_to_train_usd, own.site.utilization, rent.cost_to_train_usd)
        assert rent.break_even == expected
        assert summary["ownership"][0]["break_even"][rent.offer] == round(expected, 4)
        assert f'data-break-even="{expected:.6f}"' in html
        shown = f"{expected:.0%} utilisation" if expected <= 1 else f"never (would need {expected:.0%})"
        assert shown in html
    assert f"${ownership.usd_per_gpu_hour(own.site):,.2f}" in html
    # how sure: the error band and the list prices vs the quote and the discount
    assert "out of fold" in html and "±" in html and "list less 12%" in html


def _request_args(argv: list[str], cat) -> dict:
    args = dict(zip(argv[1::2], argv[2::2]))
    return {"epochs": float(args["--epochs"]) if "--epochs" in args else None,
            "tokens": float(args["--tokens"]) if "--tokens" in args else None,
            "gpus": [cat.gpu(g).name for g in args.get("--gpu", "").split(",") if g],
            "nodes": [int(n) for n in args.get("--nodes", "1").split(",")]}


def test_the_spot_quote_is_set_beside_the_on_demand_price(tmp_path):
    out = tmp_path / "r.html"
    r = run("--config", user_config(tmp_path), "report", "resnet50", "--gpu", "A100-40GB", "--out", str(out))
    assert r.exit_code == 0, r.output
    html = out.read_text()
    section = html[html.index("Spot vs on demand"):html.index("Own vs rent")]
    assert "aws/us-east-1 p4d.24xlarge" in section and "spot saves" in section and "your quote" not in section


@pytest.mark.parametrize("stack", EXAMPLES, ids=lambda p: p.stem)
def test_the_report_for_an_example_stack(stack, tmp_path):
    import yaml

    out = tmp_path / "stack.html"
    r = run("--json", "report", "--stack", str(stack), "--out", str(out))
    if "workload" not in yaml.safe_load(stack.read_text()):
        assert r.exit_code == 2 and "no `workload:` block" in r.output and not out.exists()
        r = run("--json", "report", "resnet50", "--stack", str(stack), "--out", str(out))
    summary = json.loads(r.stdout)
    # a pool that cannot be compared (a rack without site_costs, a spot pool without a price) is
    # said in the report and makes it exit 1, as `compare` does; the report is written all the same
    assert r.exit_code == (1 if summary["left_out"] else 0), r.output
    html = out.read_text()
    rows, points = offers_in(html)
    assert len(rows) == summary["offers"] and len(points) == summary["feasible"]
    for pick in summary["picks"].values():
        assert pick["offer"] in html
    for pool in summary["left_out"]:
        assert f"Pool {pool} is left out" in html
    bill = summary["spend"]  # the stack as planned, every line of its bill, under the offers
    assert bill["lines"] and "Every line of the bill, as the stack is planned" in html
    assert f"Total {money(bill['usd_per_hour'])}/h" in html
    if stack.stem == "baremetal-rack":  # racks only: set against the catalog's cloud offers
        (own,) = summary["ownership"]
        assert own["site"] == "dc1" and len(own["break_even"]) == 3 and "no cloud offer among those compared" in html


def test_markdown_with_its_charts_beside_it(tmp_path):
    out = tmp_path / "llm.md"
    r = run("--json", "--config", user_config(tmp_path), "report", *WORKLOADS["llm-7b"], "--out", str(out))
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["format"] == "markdown"
    md = out.read_text()
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert links == ["llm-cost-time.svg", "llm-scaling.svg", "llm-own-0.svg"]
    assert sorted(Path(f).name for f in summary["files"]) == sorted(["llm.md", *links])
    for link in links:
        svg = (tmp_path / link).read_text()
        assert svg.startswith("<?xml") and "<text" in svg and "<script" not in svg
    assert "Time to train (hours)" in (tmp_path / "llm-cost-time.svg").read_text()
    for pick in summary["picks"].values():
        assert pick["offer"] in md
    # the report writes its file and charts, nothing else (the test's own config and data homes aside)
    written = sorted(p.name for p in tmp_path.iterdir() if p.name not in ("xdg", "xdg-data"))
    assert "| rank | where |" in md and md.count("| 1 |") >= 1 and written == sorted(["config.yaml", "llm.md", *links])


def test_the_same_question_gives_the_same_file(tmp_path):
    a, b = tmp_path / "a.html", tmp_path / "b.html"
    for out in (a, b):
        assert run("report", "llm-7b", "--gpu", "H100", "--out", str(out)).exit_code == 0
    assert a.read_bytes() == b.read_bytes()


# --- running clusters ------------------------------------------------------------------------------

def test_clusters_cost_so_far_per_cluster_and_provider_with_the_expired_one_marked(tmp_path, monkeypatch):
    registry_with_clusters(tmp_path, monkeypatch)
    out = tmp_path / "fleet.html"
    r = run("--json", "report", "--clusters", "--local", "--out", str(out))
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["past_ttl"] == ["old-b"]
    assert data["by_provider_usd"]["aws"] == pytest.approx(2 * 32.77 * 10, rel=0.01)
    assert data["by_provider_usd"]["gcp"] == pytest.approx(88.25 * 30, rel=0.01)
    assert data["total_usd"] == pytest.approx(sum(data["by_provider_usd"].values()), abs=0.02)
    html = out.read_text()
    assert re.search(r'<tr class="alert" data-offer="old-b">', html) and "past their TTL" in html
    assert 'data-offer="train-a"' in html and "Cost so far (USD)" in html


def test_clusters_with_an_empty_registry(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUFLEET_REGISTRY", str(tmp_path / "registry.db"))
    out = tmp_path / "fleet.md"
    r = run("report", "--clusters", "--local", "--out", str(out))
    assert r.exit_code == 0, r.output
    assert "No clusters" in out.read_text()


# --- bad input: a message, an exit code, nothing written ---------------------------------------------------

@pytest.mark.parametrize("args,code,says", [
    (["report", "resnet5O"], 2, "unknown workload"),
    (["report", "resnet50", "--nodes", "0"], 2, "--nodes"),
    (["report", "resnet50", "--epochs", "-1"], 2, "--epochs must be positive"),
    (["report", "resnet50", "--provider", "oracle"], 2, "unknown provider"),
    (["report"], 2, "name a workload"),
    (["report", "resnet50", "--clusters"], 2, "--clusters reports the running clusters"),
    (["report", "resnet50", "--local"], 2, "--local goes with --clusters"),
    (["report", "resnet50", "--gpu", "H100", "--max-price", "0.01"], 1, "no offer matches these filters"),
    (["report", "llm:70b", "--gpu", "T4"], 1, "can run llm:70b"),
])
def test_bad_input_says_so_and_writes_nothing(args, code, says, tmp_path):
    out = tmp_path / "out" / "r.html"
    out.parent.mkdir()
    r = run(*args, "--out", str(out))
    assert r.exit_code == code and says in r.output, r.output
    assert "Traceback" not in r.output and list(out.parent.iterdir()) == []


def test_an_unwritable_out_is_bad_input(tmp_path):
    afile = tmp_path / "a-file"
    afile.write_text("")
    for out, says in ((tmp_path / "missing" / "r.html", "does not exist"), (tmp_path, "is a folder"),
                      (afile / "r.html", "does not exist")):
        r = run("report", "resnet50", "--out", str(out))
        assert r.exit_code == 2 and says in r.output, r.output
    r = run("--json", "report", "resnet50", "--out", str(tmp_path / "missing" / "r.html"))
    assert r.exit_code == 2 and json.loads(r.stdout)["error"] == "InputError"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_without_matplotlib_the_report_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    r = run("report", "resnet50", "--out", str(tmp_path / "r.html"))
    assert r.exit_code == 2 and "pip install 'gpufleet[report]'" in r.output
    assert list(tmp_path.iterdir()) == []


def test_the_docs_say_how_to_get_a_report():
    readme = (ROOT / "README.md").read_text()
    assert "(docs/reports.md)" in readme  # the README links the page that says it
    section = (ROOT / "docs" / "reports.md").read_text()
    assert "gpufleet report" in section and "matplotlib" in section and "gpufleet[report]" in section

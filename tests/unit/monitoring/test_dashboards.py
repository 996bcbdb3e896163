"""gpufleet's Grafana dashboards (issue 53): built with grafana-foundation-sdk, read back by the SDK's own
models, and every query parsed by a PromQL parser and checked against the metric catalogue.

The SDK ships no JSON schema of Grafana's (its python package holds builders, models, the encoder and
the runtime's variant registry: grafana_foundation_sdk 1769699379!11.6.0, read 2026-11-27), so the
schema check here is its models' own ``from_json``/``to_json``: the JSON is what its Grafana 11.6 types
read and write back unchanged. Queries are parsed by PyPI's promql-parser (a binding of the Rust
promql-parser crate, which follows Prometheus 2.45's grammar), after Grafana's own variables are put in
as Grafana does before it sends a query."""

from __future__ import annotations

import json
import sys

import pytest

from gpufleet.errors import ExtraMissing
from gpufleet.monitoring import dashboards, names

promql_parser = pytest.importorskip("promql_parser")
pytest.importorskip("grafana_foundation_sdk")

# what Grafana puts in for its variables before a query reaches Prometheus (a node's name, an interval)
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "30s", "${node}": "gpu-0", "$node": "gpu-0"}


def interpolated(expr: str) -> str:
    for var, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(var, value)
    assert "$" not in expr, f"a Grafana variable the test does not know: {expr}"
    return expr


def metric_names(expr: str) -> set[str]:
    """Every metric an expression selects (the names of its vector selectors, a matrix's among them)."""
    found: set[str] = set()

    def visit(e):
        if isinstance(e, promql_parser.MatrixSelector):
            e = e.vector_selector
        if isinstance(e, promql_parser.VectorSelector):
            found.add(e.name or next(m.value for m in e.matchers.matchers if m.name == "__name__"))
        return True

    promql_parser.walk(promql_parser.parse(interpolated(expr)), visit)
    return found


def _scalar(e) -> bool:
    while isinstance(e, promql_parser.ParenExpr):
        e = e.expr
    return isinstance(e, promql_parser.NumberLiteral)


def joins(expr: str) -> list[list[str] | None]:
    """For each binary operation between two vectors, the labels of its ``on(...)`` (None: no on); ``or``
    matches nothing (it adds the right side's series the left lacks), so it is left out."""
    out = []

    def visit(e):
        if isinstance(e, promql_parser.BinaryExpr) and str(e.op) != "or" and not (_scalar(e.lhs) or _scalar(e.rhs)):
            m = e.modifier.matching if e.modifier else None
            out.append(list(m.labels) if m is not None and m.type == promql_parser.LabelModifierType.Include else None)
        return True

    promql_parser.walk(promql_parser.parse(interpolated(expr)), visit)
    return out


@pytest.fixture(scope="module")
def built() -> dict[str, dict]:
    return dashboards.build()


def _panels(dash: dict) -> list[dict]:
    out = []
    for p in dash["panels"]:
        out += [p, *p.get("panels", [])]
    return [p for p in out if p.get("type") != "row"]


def _exprs(dash: dict) -> list[str]:
    return [t["expr"] for p in _panels(dash) for t in p.get("targets", [])]


def test_three_dashboards_with_the_panels_the_issue_asks_for(built):
    assert set(built) == {"gpufleet-fleet", "gpufleet-node", "gpufleet-slurm"}
    titles = {uid: " | ".join(p["title"] for p in _panels(d)) for uid, d in built.items()}
    for words in ("GPUs busy by pool", "GPUs idle by pool", "$/h", "$ so far", "$/h of idle GPUs", "health",
                  "Drained nodes"):
        assert words in titles["gpufleet-fleet"], words
    for words in ("utilisation", "memory", "Power", "clocks", "Temperature", "XID", "ECC", "remap", "NVLink",
                  "InfiniBand"):
        assert words in titles["gpufleet-node"], words
    for words in ("Nodes by state", "Jobs by state", "Pending jobs by reason", "Drained nodes and why"):
        assert words in titles["gpufleet-slurm"], words
    variables = [v["name"] for v in built["gpufleet-node"]["templating"]["list"]]
    assert "node" in variables and "datasource" in variables


def test_each_round_trips_through_the_sdks_own_models(built):
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models.dashboard import Dashboard

    register_default_plugins()  # so panels' options and queries decode as their own types, not as dicts
    for uid, d in built.items():
        again = json.loads(JSONEncoder(sort_keys=True).encode(Dashboard.from_json(d)))
        assert again == d, uid
        assert d["uid"] == uid and d["schemaVersion"] >= 39  # Grafana 11's dashboard schema


def test_every_panel_has_a_query_on_the_provisioned_prometheus(built):
    for uid, d in built.items():
        for p in _panels(d):
            assert p.get("targets"), (uid, p["title"])
            for t in p["targets"]:
                assert t["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, (uid, p["title"])


def test_every_query_parses_and_names_only_catalogued_metrics(built):
    catalogue = names.catalogue()
    seen = set()
    for uid, d in built.items():
        for expr in _exprs(d):
            used = metric_names(expr)  # a parse error fails here, naming the expression
            assert used, expr
            assert used <= set(catalogue), (uid, expr, used - set(catalogue))
            seen |= used
    # the dashboards read DCGM's, the agents', the collector's and node_exporter's metrics
    assert {"DCGM_FI_DEV_GPU_UTIL", "gpufleet_node_price_usd_per_hour", "gpufleet_slurm_jobs_pending",
            "node_infiniband_port_data_received_bytes_total"} <= seen


def test_every_variable_query_reads_a_catalogued_metric(built):
    """A query variable's ``label_values(METRIC, LABEL)`` is Grafana's, not PromQL: its metric is checked alone."""
    import re

    for uid, d in built.items():
        for v in d["templating"]["list"]:
            if v["type"] == "query":
                metric, label = re.fullmatch(r"label_values\((\w+), (\w+)\)", v["query"]).groups()
                assert names.known(metric) and label in names.TARGET_LABELS, (uid, v["query"])


def test_series_are_joined_on_node_never_instance_or_hostname(built):
    for uid, d in built.items():
        for expr in _exprs(d):
            for on in joins(expr):
                assert on is not None and "node" in on, (uid, expr)
            assert "instance" not in expr and "Hostname" not in expr, (uid, expr)


def test_the_checks_here_catch_a_bad_query():
    assert metric_names("sum(DCGM_FI_DEV_GPU_UTILISATION)") - set(names.catalogue()) == {"DCGM_FI_DEV_GPU_UTILISATION"}
    assert joins("a / b") == [None]
    assert joins("a / on(node) b") == [["node"]]
    assert joins("a unless b") == [None] and joins("a or b") == []
    with pytest.raises(ValueError):
        metric_names("sum(rate(x[5m])")


def test_without_the_sdk_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "grafana_foundation_sdk", None)
    monkeypatch.setitem(sys.modules, "grafana_foundation_sdk.builders", None)
    with pytest.raises(ExtraMissing) as e:
        dashboards.build()
    assert e.value.extra == "dashboards" and "gpufleet[dashboards]" in e.value.hint


def test_json_is_the_same_bytes_each_time(built):
    assert dashboards.encode(built["gpufleet-fleet"]) == dashboards.encode(dashboards.build()["gpufleet-fleet"])


def test_the_extra_takes_grafana_11_6_not_the_newest_epochs_10_1():
    """grafana-foundation-sdk's versions are EPOCH!GRAFANA: PyPI's newest (2026-01) is 1769699998!10.1.0."""
    import tomllib
    from importlib.metadata import version

    from packaging.requirements import Requirement

    from conftest import ROOT

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dashboards"]
    spec = Requirement(extra[0]).specifier
    assert not spec.contains("1769699998!10.1.0") and spec.contains("1769699379!11.6.0")
    assert version("grafana-foundation-sdk").endswith("!11.6.0")


def test_the_throttle_panel_shows_the_share_of_time_from_dcgms_nanoseconds(built, tmp_path):
    """DCGM's violation counters count nanoseconds (DCGM v4.2.3 dcgmlib/dcgm_fields.h: "Power Violation time in
    ns", "Thermal Violation time in ns"; NVML nvml.h violationTime "in Nanoseconds"; read 2026-11-27): a GPU held
    back 30 % of the time (18 s a minute) reads 0.3 on the panel, evaluated by Prometheus's own promtool."""
    import shutil
    import subprocess

    import yaml

    from conftest import require

    exe = shutil.which("promtool")
    require(exe is not None, "promtool is missing (Debian's prometheus package: `make sysdeps`)")
    (panel,) = [p for p in _panels(built["gpufleet-node"]) if p["title"].startswith("Throttled")]
    labels = 'cluster="watched",pool="gpu",node="gpu-0",gpu="0"'
    exprs = [interpolated(t["expr"]).replace("[1m]", "[5m]") for t in panel["targets"]]
    case = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": f"{m}{{{labels}}}", "values": "0+18000000000x10"}
                         for m in ("DCGM_FI_DEV_POWER_VIOLATION", "DCGM_FI_DEV_THERMAL_VIOLATION")],
        "promql_expr_test": [{"expr": e, "eval_time": "10m", "exp_samples": [{"labels": f"{{{labels}}}", "value": 0.3}]}
                             for e in exprs]}]}
    (tmp_path / "throttle.test.yml").write_text(yaml.safe_dump(case))
    ran = subprocess.run([exe, "test", "rules", "throttle.test.yml"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=60)
    assert len(exprs) == 2 and ran.returncode == 0, ran.stdout + ran.stderr


def test_the_spend_panel_says_what_the_collector_counts(built):
    """The collector counts this calendar month (UTC), not since the cluster came up (gpufleet-cluster-metrics,
    spent_this_month): the panel's description is the metric's own, as the catalogue declares it."""
    (panel,) = [p for p in _panels(built["gpufleet-fleet"])
                if [t["expr"] for t in p.get("targets", [])] == ["sum(gpufleet_cluster_spend_usd)"]]
    assert panel["description"] == names.catalogue()["gpufleet_cluster_spend_usd"].help

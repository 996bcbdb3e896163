"""The alert rules (monitoring/rules.py), checked by Prometheus's own promtool: every rule fires and stays
quiet as its cases under tests/monitoring/rules/ say (``promtool test rules``, a firing and a quiet case each),
the rules rendered for every example stack pass ``promtool check rules``, and every expression, parsed by
promql-parser, names only metrics of the catalogue (names.py). promtool is Debian 12's (`make sysdeps`)."""

import shutil
import subprocess

import promql_parser
import pytest
import yaml

from gpufleet import stacks
from gpufleet.monitoring import names
from gpufleet.monitoring.rules import render_rules
from gpufleet.nodecheck.faults import FATAL_XIDS

from conftest import ROOT, require

CASES = ROOT / "tests" / "monitoring" / "rules"
EXAMPLES = sorted((ROOT / "stacks" / "examples").glob("*.yaml"))
# the stack the cases are written for: two pools watched at different intervals, a dearer idle threshold
STACK = """name: watched
owner: ops
monitoring: {prometheus: true, host: gpu, idle_alert_usd_per_hour: 20}
pools:
  - {name: gpu, provider: aws, region: us-east-1, instance_type: p4d.24xlarge}
  - {name: cheap, provider: aws, region: us-east-1, instance_type: g4dn.xlarge, health: {interval: 300}}
"""

# a rack with Slurm: its compute hosts' health check writes their metrics every 120 s, the controller none
RACK = """name: lab
owner: ops
monitoring: {prometheus: true}
slurm: {health_check_interval: 120}
pools:
  - {name: ctl, provider: baremetal, site: lab, role: controller, hosts: [{address: 10.0.9.1}]}
  - {name: rack, provider: baremetal, site: lab, gpu: L4, gpus_per_node: 1, hosts: [{address: 10.0.9.2}, {address: 10.0.9.3}]}
"""


def promtool() -> str:
    exe = shutil.which("promtool")
    require(exe is not None, "promtool is missing (Debian's prometheus package: `make sysdeps`)")
    return exe


def rule_list(text: str) -> list[dict]:
    return [r for g in yaml.safe_load(text)["groups"] for r in g["rules"]]


def test_every_rule_fires_and_stays_quiet_as_its_promtool_cases_say(write, tmp_path):
    (tmp_path / "gpufleet.yml").write_text(render_rules(stacks.load(write("watched.yaml", STACK)), "watched"))
    (tmp_path / "gpufleet-rack.yml").write_text(render_rules(stacks.load(write("lab.yaml", RACK)), "lab"))
    cases = sorted(CASES.glob("*.test.yml"))
    for case in cases:
        shutil.copy(case, tmp_path / case.name)
    ran = subprocess.run([promtool(), "test", "rules", *[c.name for c in cases]], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.count("SUCCESS") == len(cases)


def test_every_rule_has_a_firing_and_a_quiet_case(write):
    firing, quiet = set(), set()
    for case in CASES.glob("*.test.yml"):
        for test in yaml.safe_load(case.read_text())["tests"]:
            for t in test.get("alert_rule_test", ()):
                (firing if t.get("exp_alerts") else quiet).add(t["alertname"])
    alerts = {r["alert"] for r in rule_list(render_rules(stacks.load(write("watched.yaml", STACK)), "watched"))}
    assert alerts - firing == set() and alerts - quiet == set()
    assert firing | quiet <= alerts  # no case for a rule that is gone


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_promtool_checks_the_rules_rendered_for_every_example_stack(example, tmp_path):
    rendered = tmp_path / "gpufleet.yml"
    rendered.write_text(render_rules(stacks.load(example), example.stem))
    ran = subprocess.run([promtool(), "check", "rules", str(rendered)], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stdout + ran.stderr


def metric_names(expr: str) -> set[str]:
    found = set()

    def visit(node):
        if isinstance(node, promql_parser.VectorSelector):
            found.add(node.name)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_alert_names_catalogued_metrics_its_node_and_a_severity(example):
    for r in rule_list(render_rules(stacks.load(example), example.stem)):
        used = metric_names(r["expr"])
        assert used and {n for n in used if not names.known(n)} == set(), r["alert"]
        assert r["labels"]["severity"] in ("critical", "warning"), r["alert"]
        assert "{{ $labels.node }}" in r["annotations"]["summary"], r["alert"]


def test_the_fatal_xids_are_the_node_checks_own_in_the_count_and_the_last_xid():
    """Both sources of the alert, the exporter's per-XID count (its xid matcher) and the last-XID gauge (each
    ``== N``), name exactly the node check's fatal XIDs; 92 (a high single-bit ECC rate, which the GPU corrects)
    is none of them (NVIDIA's XID catalog, docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html)."""
    import re

    (xid,) = [r for r in rule_list(render_rules(stacks.load(EXAMPLES[0]), "c1")) if r["alert"] == "GpuXidFatal"]
    (matcher,) = re.findall(r'DCGM_EXP_XID_ERRORS_COUNT\{xid=~"([0-9|]+)"\}', xid["expr"])
    counted = {int(x) for x in matcher.split("|")}
    last = {int(x) for x in re.findall(r"DCGM_FI_DEV_XID_ERRORS == (\d+)", xid["expr"])}
    assert counted == last == set(FATAL_XIDS) - {79}  # 79 is GpuFellOffBus's
    assert 92 not in FATAL_XIDS


def test_the_stale_alert_is_quiet_for_a_fresh_cluster_not_named_after_its_stack(write, tmp_path):
    """`up --cluster lab-2` of stack lab: Prometheus labels every target cluster="lab-2" (scrape.scrape_config), so
    rules naming the stack had GpufleetMetricsStale ("missing on the monitor host") fire for the cluster's whole
    life, with fresh files (rev53b #4). The rules the monitor host gets, fed fresh files, through real promtool."""
    from gpufleet.configure import pillar

    (tmp_path / "rules.yml").write_text(pillar.monitor_pillar(stacks.load(write("lab.yaml", RACK)), "lab-2")["rules"])
    mtime = ('node_textfile_mtime_seconds{{cluster="lab-2",pool="{p}",node="{n}",'
             'file="/var/lib/prometheus/node-exporter/{f}"}}')
    fresh = [{"series": mtime.format(p=p, n=n, f=f), "values": "0+60x10"} for p, n, f in
             (("rack", "rack-0", "gpufleet.prom"), ("rack", "rack-1", "gpufleet.prom"),
              ("ctl", "ctl-0", "gpufleet_cluster.prom"))]
    case = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [
        {"interval": "1m", "input_series": fresh,
         "alert_rule_test": [{"eval_time": "6m", "alertname": "GpufleetMetricsStale", "exp_alerts": []}]},
        # the same cluster without the collector's file: the absent() branch fires, labelled with the cluster
        {"interval": "1m", "input_series": fresh[:2],
         "alert_rule_test": [{"eval_time": "6m", "alertname": "GpufleetMetricsStale", "exp_alerts": [
             {"exp_labels": {"severity": "warning", "cluster": "lab-2",
                             "file": "gpufleet_cluster.prom (missing on the monitor host)"},
              "exp_annotations": {"summary": ": metrics file stale, missing or unreadable: "
                                             "gpufleet_cluster.prom (missing on the monitor host)"}}]}]}]}
    (tmp_path / "case.test.yml").write_text(yaml.safe_dump(case))
    ran = subprocess.run([promtool(), "test", "rules", "case.test.yml"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr

"""The CLI through typer's CliRunner and as the installed entry point."""

import csv
import io
import json
import subprocess
import sys

import pytest

from conftest import EXAMPLES, ROOT, gpufleet_exe
from conftest import cli as run


def test_compare_json_csv_markdown():
    r = run("--json", "compare", "resnet50", "--gpu", "A100-80GB,H100", "--nodes", "1,2")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert {o["gpu"] for o in data["offers"]} == {"A100-80GB", "H100"}
    assert {o["nodes"] for o in data["offers"]} == {1, 2}
    assert data["catalog_as_of"] and "price_parts" in data["offers"][0]
    r = run("compare", "resnet50", "--provider", "azure", "--csv")
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert r.exit_code == 0 and rows and {x["provider"] for x in rows} == {"azure"}
    r = run("compare", "bert-large", "--markdown", "--gpu", "V100")
    assert r.exit_code == 0 and r.stdout.startswith("### bert-large") and "| # | provider | instance |" in r.stdout


def test_compare_table_marks_cheapest_and_fastest():
    r = run("compare", "llm-7b", "--tokens", "1e10", "--gpu", "H100,A100-80GB", "--nodes", "1,4")
    assert r.exit_code == 0, r.output
    assert "cheapest" in r.stdout and "fastest" in r.stdout and "days old" in r.stdout


def test_compare_stack_file():
    r = run("--json", "compare", "--stack", str(ROOT / "stacks/examples/baremetal-rack.yaml"))
    assert r.exit_code == 0, r.output
    (row,) = json.loads(r.stdout)["offers"]
    assert row["provider"] == "baremetal" and row["nodes"] == 4 and row["market"] == "owned"
    assert row["storage"].startswith("local NVMe") or row["storage"].startswith("network")


@pytest.mark.parametrize("args,needle", [
    (["compare", "resnet5"], "did you mean 'resnet50'"),
    (["compare", "resnet50", "--gpu", "H1OO"], "did you mean 'H100'"),
    (["compare", "resnet50", "--provider", "awz"], "did you mean 'aws'"),
    (["compare", "resnet50", "--region", "us-east-l"], "did you mean 'us-east-1'"),
    (["compare", "resnet50", "--nodes", "1,x"], "--nodes"),
    (["compare", "resnet50", "--epochs", "-1"], "must be positive"),
    (["compare"], "name a workload"),
    (["catalog", "show", "p4d.24xlarg"], "did you mean 'p4d.24xlarge'"),
])
def test_bad_input_exit_2_without_traceback(args, needle):
    r = run(*args)
    assert r.exit_code == 2, r.output
    assert needle in r.output and "Traceback" not in r.output


def test_validate_reports_file_line_key(write):
    good = str(EXAMPLES[0])
    bad = write("bad.yaml", "name: x\nowner: me\npools:\n  - name: p\n    provider: aws\n    region: us-east-1\n"
                            "    instance_type: p4d.24xlarge\n    nodez: 2\n")
    r = run("validate", good, bad)
    assert r.exit_code == 2
    assert f"{bad}:8: pools[0].nodez: unknown key" in r.output and "did you mean 'nodes'" in r.output
    assert f"ok {good}" in r.output
    r = run("--json", "validate", bad)
    data = json.loads(r.stdout)
    assert r.exit_code == 2 and data[0]["errors"][0]["line"] == 8


def test_catalog_commands():
    for sub in (["gpus"], ["instances", "--provider", "gcp"], ["workloads"], ["show", "H100"], ["show", "p5.48xlarge"]):
        r = run("--json", "catalog", *sub)
        assert r.exit_code == 0, (sub, r.output)
        json.loads(r.stdout)
    r = run("catalog", "instances", "--gpu", "T4", "--provider", "gcp")
    assert "n1-standard-8 0.38 + 1x T4 0.35" in r.stdout


def test_calibrate_prints_per_row_errors():
    r = run("--json", "calibrate")
    data = json.loads(r.stdout)
    assert r.exit_code == 0 and len(data["per_row"]) == data["rows"] and data["median_abs_error"] <= 0.25
    assert data["params"]["fw:tf1"] < 1.0 and "framework" in data["per_row"][0]
    # issue 52: out of fold by GPU generation and by model family too, and the groups predicted worst
    assert data["out_of_fold"]["generation"] > 0 and data["out_of_fold"]["family"] > 0
    assert "pascal" in data["out_of_fold"]["per_group"]["generation"]
    worst = data["worst_groups"]
    assert len(worst) == 8 and {g["by"] for g in worst} <= {"source", "workload", "gpu", "generation", "family"}
    assert worst == sorted(worst, key=lambda g: -g["median_abs_error"])
    r = run("calibrate")
    assert "Worst groups out of fold" in r.stdout
    assert "median |error|" in r.stdout and "m01" in r.stdout
    # the fitted parameters with their priors and bounds, the framework speeds among them
    assert "Fitted parameters" in r.stdout and "fw:tf2" in r.stdout and "0.4..1.5" in r.stdout


def test_installed_entry_point_and_light_imports():
    exe = gpufleet_exe()
    out = subprocess.run([exe, "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("gpufleet ")
    probe = (
        "import sys, runpy\n"
        "sys.argv = ['gpufleet'] + sys.argv[1:]\n"
        "try:\n    runpy.run_module('gpufleet.cli', run_name='__main__')\n"
        "except SystemExit as e:\n    code = e.code\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('boto3', 'botocore', 'pulumi', 'pulumi_aws', 'pulumi_gcp', 'pulumi_azure_native', 'google', 'azure', "
        "'paramiko', 'salt', 'matplotlib'))\n"
        "print('HEAVY=' + ','.join(heavy), file=sys.stderr)\n"
    )
    for args in (["--help"], ["compare", "resnet50", "--top", "3"], ["--json", "compare", "llm-7b"],
                 ["validate", str(EXAMPLES[0])]):
        res = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True)
        assert res.stderr.rstrip().endswith("HEAVY="), (args, res.stderr[-500:])
    # control: the probe does see an SDK when one is imported (boto3 is a test dependency)
    res = subprocess.run([sys.executable, "-c", "import boto3\n" + probe, "--help"], capture_output=True, text=True)
    assert "HEAVY=boto3" in res.stderr, res.stderr[-500:]


def test_usage_error_exit_code_2():
    r = run("compare", "resnet50", "--format", "yaml")
    assert r.exit_code == 2


def test_up_of_racks_alone_asks_to_take_their_hosts_not_to_create_no_resources(monkeypatch, tmp_path):
    """A stack of racks creates nothing in a cloud: its confirmation names the hosts it takes into the
    cluster (it asked "Create these 0 resources?")."""
    from gpufleet.cli import options
    from gpufleet.engine import plan as planner
    from gpufleet.errors import GpufleetError
    from gpufleet.fleet import up

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    asked = []
    monkeypatch.setattr(options, "confirm", lambda question, yes: asked.append(question) or False)

    def bring_up(st, cat, *, confirm, **kw):
        confirm(planner.plan(st, cat, cluster=planner.cluster_for(st)))
        raise GpufleetError("stopped here by the test")

    monkeypatch.setattr(up, "bring_up", bring_up)
    run("up", str(ROOT / "stacks" / "examples" / "local-rack.yaml"))
    assert len(asked) == 1 and asked[0].startswith("Take these 4 rack host(s) into the cluster for $"), asked

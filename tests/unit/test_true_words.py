"""What gpufleet says is true and said once (issue 47, items 9 and 10): a file that is not a prices
file says what it is instead of "(schema None)" and exits 1 as the README says; nothing read is
never "nothing billed"; a cloud's name is not said twice; `report --out -` writes to stdout."""

import json

import pytest

from conftest import cli


@pytest.mark.parametrize("text,said", [
    ("{}", "no schema: not a prices file of gpufleet's"),
    ("[1, 2]", "a JSON list, not gpufleet's prices"),
    ('{"schema": 9, "prices": []}', "schema 9, where this gpufleet reads 1 and 2"),
])
def test_a_file_that_is_not_a_prices_file_says_what_it_is_and_exits_1(tmp_path, monkeypatch, text, said):
    path = tmp_path / "prices.json"
    path.write_text(text)
    monkeypatch.setenv("GPUFLEET_PRICES", str(path))
    r = cli("compare", "resnet50")
    assert r.exit_code == 1 and f"{path}: the refreshed prices cannot be read ({said}" in r.output, r.output
    assert "None" not in r.output and "Traceback" not in r.output, r.output


def _record_aws_cluster():
    from gpufleet.state.registry import Node, Registry

    Registry().record(name="c1", stack="c1", stack_file="s.yaml", owner="ops@example.com",
                      expires_at="2099-01-01T00:00:00Z", backend=None,
                      nodes=[Node("gpu", 0, "aws", "us-east-1", "x", usd_per_hour=10.0)],
                      locations=[("aws", "us-east-1")])


def test_cost_with_nothing_recorded_and_no_credentials_says_it_read_nothing_and_exits_1():
    r = cli("cost")
    assert r.exit_code == 1 and "nothing billed" not in r.output, r.output
    assert "aws not read: no credentials found" in r.output and "aws: aws" not in r.output, r.output
    r = cli("--json", "cost")
    doc = json.loads(r.stdout)
    assert r.exit_code == 1 and doc["read"] == [] and sorted(doc["skipped"]) == ["aws", "azure", "gcp"], r.output


def test_cost_says_nothing_billed_only_of_the_clouds_it_read(monkeypatch):
    from gpufleet.clouds.base import BillRead
    from gpufleet.errors import CredentialsError
    from gpufleet.fleet import cost

    def billed(provider, *a):
        if provider != "aws":
            raise CredentialsError(provider, f"{provider}: no credentials found")
        return BillRead([], [])

    real = cost.run
    monkeypatch.setattr(cost, "run", lambda *a, **kw: real(*a, **kw, billed=billed))
    r = cli("cost")
    assert r.exit_code == 0 and "nothing billed to gpufleet:cluster in the period (read: aws)" in r.output, r.output


def test_status_local_says_the_clouds_were_not_asked_because_of_local(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    r = cli("status", "--local")
    assert r.exit_code == 0 and "the clouds were not asked (--local)" in r.output, r.output
    assert "clouds asked (none)" not in r.output, r.output
    _record_aws_cluster()
    r = cli("--json", "status", "--local")
    notes = json.loads(r.stdout)["clusters"][0]["notes"]
    assert "aws not asked (--local): costed from the registry" in notes and "no credentials" not in str(notes), notes


def test_status_says_why_a_cloud_of_a_cluster_was_not_asked_once():
    _record_aws_cluster()
    r = cli("--json", "status", "c1")
    notes = json.loads(r.stdout)["clusters"][0]["notes"]
    assert any(n.startswith("aws not asked (no credentials found") for n in notes), notes
    assert not any("aws: " in n for n in notes), notes


def test_the_clusters_report_names_each_cloud_once(tmp_path):
    pytest.importorskip("matplotlib")
    r = cli("report", "--clusters", "--out", str(tmp_path / "r.html"))
    assert "aws: aws:" not in r.output and "warning: aws: no credentials found" in r.output, r.output


def test_capacity_find_with_no_place_asked_says_so_not_that_the_list_is_incomplete():
    from conftest import ROOT

    r = cli("capacity", "find", str(ROOT / "stacks" / "examples" / "aws-training.yaml"))
    assert r.exit_code == 1 and "the list is incomplete" not in r.output, r.output
    assert "no place could be asked: nothing is known about the capacity there" in r.output, r.output
    assert "could not be asked: no credentials found" in r.output and "aws: aws" not in r.output, r.output


def test_report_out_dash_writes_the_page_to_stdout_and_no_file(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    r = cli("report", "--clusters", "--local", "--out", "-")
    assert r.exit_code == 0 and r.stdout.startswith("<!DOCTYPE html>") and r.stdout.rstrip().endswith("</html>"), \
        r.output
    assert list(here.iterdir()) == [], list(here.iterdir())
    for args in (["report", "--markdown"], ["--json", "report"]):
        r = cli(*args, "--clusters", "--local", "--out", "-")
        assert r.exit_code == 2 and "--out -" in r.output and list(here.iterdir()) == [], r.output

"""Team mode shares measured rows (issue 52): `bench --record` writes them to the team's store, `compare` on another
user's machine with the same store reads them, and rows from the store are checked against their format before
use. On the shared-directory store and on PostgreSQL (the tests' own server, tests/conftest.py)."""

import importlib.util
import json

import pytest
from test_bench import H200
from test_team import _new_store, _open

from gpufleet.fleet import bench, team

from conftest import cli, require


@pytest.fixture(params=["file", "postgres"])
def team_url(request, tmp_path, monkeypatch):
    url = _new_store(request, tmp_path, monkeypatch)
    _open(url).create(team.PROBE, b'{"by": "the tests"}')
    monkeypatch.setenv("GPUFLEET_TEAM", url)
    return url


def test_recorded_rows_go_to_the_team_store_and_another_user_compares_with_them(team_url, cat, tmp_path, monkeypatch):
    alice, bob = tmp_path / "alice.json", tmp_path / "bob.json"
    monkeypatch.setenv("GPUFLEET_MEASURED", str(alice))
    done = bench.record(bench.judge(H200, cat, "H200", tiny=False), instance="p5e.48xlarge")
    assert done["rows"] == 2 and done["path"].startswith(team_url)
    assert not alice.exists()  # in team mode the team's store holds them, not one user's file
    # another user, the same store, nothing of their own
    monkeypatch.setenv("GPUFLEET_MEASURED", str(bob))
    r = cli("--json", "compare", "bert-large", "--gpu", "H200", "--top", "1")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    said = [a for a in doc["assumptions"] if a.startswith("measured: H200")]
    assert said and "p5e.48xlarge" in said[0], doc["assumptions"]
    assert "measured" in doc["offers"][0]["tags"]
    r = cli("--json", "calibrate", "--mine")
    assert r.exit_code == 0 and len(json.loads(r.stdout)["rows"]) == 2, r.output


def test_bench_record_through_the_cli_writes_to_the_team_store(team_url, tmp_path, monkeypatch):
    require(importlib.util.find_spec("torch") is not None, "torch is not installed (the test extra brings it)")
    monkeypatch.setenv("GPUFLEET_MEASURED", str(tmp_path / "mine.json"))
    r = cli("--json", "bench", "--here", "--tiny", "--record", "--workload", "resnet50")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["recorded"]["path"].startswith(team_url)
    assert [k for k in _open(team_url).keys("measured/")] and not (tmp_path / "mine.json").exists()
    monkeypatch.setenv("GPUFLEET_MEASURED", str(tmp_path / "other.json"))
    r = cli("--json", "compare", "resnet50", "--gpu", "H200", "--top", "1")
    assert any(a.startswith("measured: 1 row from host") and a.endswith("tiny: not used")
               for a in json.loads(r.stdout)["assumptions"]), r.output


@pytest.mark.parametrize("row_change,problem", [
    ({"gpu": "H200\x1b]0;owned\x07"}, "gpu:"),
    ({"host": "$(reboot)"}, "host:"),
    ({"measured": "fast"}, "measured:"),
    ({"unit": "rm -rf /"}, "unit:"),
    ({"when": "yesterday"}, "when:"),
    ({"predicted": 1e-9}, "against predicted"),
])
def test_a_row_from_the_store_that_is_not_of_the_format_is_left_out_and_named(team_url, cat, tmp_path, monkeypatch,
                                                                             row_change, problem):
    monkeypatch.setenv("GPUFLEET_MEASURED", str(tmp_path / "mine.json"))
    bench.record(bench.judge(H200, cat, "H200", tiny=False), instance="p5e.48xlarge")
    store = _open(team_url)
    (key,) = store.keys("measured/")
    doc = json.loads(store.read(key)[0])
    doc["rows"][1].update(row_change)  # the BERT row, as someone (or something) else wrote it
    store.create("measured/20991231T000000.000000Z-bad.json", json.dumps(doc).encode())
    bad = "measured/20991231T000000.000000Z-bad.json"
    r = cli("--json", "compare", "bert-large", "--gpu", "H200", "--top", "1")
    assert r.exit_code == 0, r.output
    # the bad object is named and left out whole; the good one is used
    doc = json.loads(r.stdout)
    assert list(doc["measured_left_out"]) == [bad] and problem in doc["measured_left_out"][bad], doc["measured_left_out"]
    said = [a for a in doc["assumptions"] if a.startswith("measured: H200")]
    assert said and "from 1 row(s)" in said[0], said
    r = cli("compare", "bert-large", "--gpu", "H200", "--top", "1")
    assert r.exit_code == 0 and bad in r.stderr and "\x1b" not in r.stderr, r.stderr


def test_compare_answers_when_the_team_store_cannot_be_reached_and_says_so(tmp_path, monkeypatch):
    require(importlib.util.find_spec("psycopg") is not None, "psycopg is not installed (pip install 'gpufleet[postgres]')")
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("GPUFLEET_TEAM", f"postgres://postgres@127.0.0.1:{port}/postgres")
    monkeypatch.setenv("GPUFLEET_MEASURED", str(tmp_path / "mine.json"))
    r = cli("--json", "compare", "resnet50", "--gpu", "H200", "--top", "1")
    assert r.exit_code == 0, r.output
    (why,) = json.loads(r.stdout)["measured_left_out"].values()
    assert "could not be read" in why and "cannot be reached" in why, why

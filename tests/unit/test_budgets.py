"""Budgets (issue 36): what clusters may spend in a month, from the config file and the team's store;
`plan` shows what a cluster would take of them, `up` refuses one that would exceed (exit 5) unless
consented, `status` shows them, `reap` lists clusters past theirs and reaps nothing for it."""

import datetime as dt
import json
import shutil

import pytest

from gpufleet import stacks
from gpufleet.engine import automation
from gpufleet.engine import plan as planner
from gpufleet.fleet import budgets, team
from gpufleet.state.registry import Node, Registry

from conftest import ROOT, cli

pytest.importorskip("pulumi")
from fakes.pulumi_cli import FakePulumiCLI  # noqa: E402

AWS_STACK = ROOT / "stacks" / "examples" / "aws-training.yaml"  # 12 h of 2 x p4d and its storage: ~$545
NOW = dt.datetime(2026, 11, 20, 12, 0, tzinfo=dt.timezone.utc)


@pytest.fixture
def config(tmp_path, monkeypatch):
    def write(text: str):
        path = tmp_path / "config.yaml"
        path.write_text(text)
        monkeypatch.setenv("GPUFLEET_CONFIG", str(path))
        return path
    return write


@pytest.fixture
def fake(cat, aws, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "test-passphrase")
    f = FakePulumiCLI(planner.plan(stacks.load(AWS_STACK, cat), cat, workers=1))
    monkeypatch.setattr(automation, "find_pulumi", lambda: f)
    return f


def _record(reg, name, *, stack="s", owner="ops@example.com", created, per_hour, once=0.0, ttl=24.0, by=None):
    reg.record(name=name, stack=stack, stack_file="s.yaml", owner=owner, expires_at="2026-12-31T00:00:00Z",
               backend=None, nodes=[Node("gpu", 0, "aws", "us-east-1", "p4d.24xlarge", usd_per_hour=1.0)],
               created_by=by or {}, predicted={"usd_per_hour": {"instances": per_hour}, "usd_once":
                                               {"transfer": once} if once else {}, "ttl_hours": ttl})
    with reg._db(write=True) as db:  # when it was created is the registry's own: set it as `up` would have
        db.execute("UPDATE clusters SET created_at = ? WHERE name = ?", (created, name))


def test_spent_this_month_counts_each_clusters_hours_in_the_month(tmp_path):
    reg = Registry(tmp_path / "r.db")
    _record(reg, "early", created="2026-10-25T00:00:00Z", per_hour=10.0)  # from Nov 1 on: 19.5 days
    _record(reg, "late", created="2026-11-20T00:00:00Z", per_hour=2.0, once=48.0, ttl=24.0)  # 12 h: half its traffic
    _record(reg, "alice", stack="llm", owner="lab@example.com", created="2026-11-20T06:00:00Z", per_hour=1.0,
            by={"aws": "arn:aws:sts::1:assumed-role/Admin/alice@example.com"})
    every, llm, alices = budgets.standings(
        [budgets.Budget("all", 10_000), budgets.Budget("llm", 100, stack="llm"), budgets.Budget("a", 50, owner="ALICE")],
        reg.list(), NOW)
    assert every.spent == pytest.approx(10 * 19.5 * 24 + (2 * 12 + 48 / 2) + 1 * 6)
    assert (llm.clusters, llm.spent) == (["alice"], pytest.approx(6.0))
    assert alices.clusters == ["alice"] and not alices.over and every.left == pytest.approx(10_000 - every.spent)


def test_up_refuses_a_cluster_that_would_exceed_a_budget_and_consent_lets_it(fake, config, tmp_path, monkeypatch):
    config("budgets:\n  - {name: training, usd_per_month: 300, stack: aws-training}\n"
           "  - {name: everything, usd_per_month: 100000}\n")
    (tmp_path / "shared").mkdir()
    team.init(f"file://{tmp_path / 'shared'}")
    r = cli("up", str(AWS_STACK), "--yes", "--no-configure")
    assert r.exit_code == 5, r.output
    assert "would spend $544.68" in r.output and "budget 'training' has $300.00 left this month" in r.output
    assert "--over-budget" in r.output and "Traceback" not in r.output
    assert not any(c[0] == "up" for c in fake.calls) and Registry().get("aws-training") is None  # nothing created
    r = cli("--json", "up", str(AWS_STACK), "--yes", "--no-configure")
    doc = json.loads(r.stdout)
    assert r.exit_code == 5 and doc["error"] == "OverBudget" and doc["budgets"][0]["name"] == "training"
    assert doc["budgets"][0]["projected_usd"] == pytest.approx(545, abs=1)

    r = cli("--json", "up", str(AWS_STACK), "--yes", "--no-configure", "--over-budget")
    assert r.exit_code == 0, r.output
    got = {b["name"]: b for b in json.loads(r.stdout)["budgets"]}
    assert got["training"]["exceeded"] and not got["everything"]["exceeded"]
    assert Registry().get("aws-training").predicted["usd_per_hour"]["file-system"] > 0
    log = team.log("aws-training")
    assert [e["exit_code"] for e in log] == [5, 5, 0] and log[0]["outcome"].startswith("failed: cluster aws-training "
                                                                                       "would spend $544.68")
    assert log[-1]["over_budget"] == ["training"] and "over_budget" not in log[0]


def test_plan_shows_what_a_cluster_would_take_of_each_budget(config, tmp_path, monkeypatch):
    config("budgets:\n  - {name: small, usd_per_month: 200}\n  - {name: other-stack, usd_per_month: 1, stack: x}\n")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    r = cli("--json", "plan", str(AWS_STACK))
    assert r.exit_code == 0, r.output  # plan only shows: it refuses nothing
    (b,) = json.loads(r.stdout)["budgets"]  # the other stack's budget does not cover it
    assert (b["name"], b["left_usd"], b["exceeded"]) == ("small", 200, True)
    r = cli("plan", str(AWS_STACK))
    assert "Budgets this month" in r.output and "EXCEEDS: `up` refuses it" in r.output


def test_status_shows_each_budget_and_reap_lists_clusters_past_theirs(aws, config, tmp_path, monkeypatch):
    config("budgets:\n  - {name: tight, usd_per_month: 5}\n  - {name: roomy, usd_per_month: 1000000}\n")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    now = dt.datetime.now(dt.timezone.utc)
    _record(Registry(), "burner", created=(now - dt.timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ"), per_hour=40.0)
    r = cli("--json", "status", "--local")
    got = {b["name"]: b for b in json.loads(r.stdout)["budgets"]}
    assert got["tight"]["spent_usd"] == pytest.approx(80, rel=0.05) and got["tight"]["left_usd"] < 0
    assert "Budgets," in cli("status", "--local").output
    r = cli("--json", "reap", "--region", "us-east-1")
    assert r.exit_code == 0, r.output
    (past,) = json.loads(r.stdout)["past_budget"]
    assert (past["name"], past["clusters"]) == ("tight", ["burner"])
    r = cli("reap", "--region", "us-east-1")
    assert "Past their budget this month" in r.output and "burner" in r.output
    assert Registry().get("burner") is not None  # listed, never reaped


def test_team_budgets_live_in_the_store_and_alone_in_the_config(tmp_path, monkeypatch):
    r = cli("budget", "set", "ml", "--usd-per-month", "100")
    assert r.exit_code == 2 and "budgets live in the config file" in r.output
    (tmp_path / "shared").mkdir()
    assert cli("team", "init", f"file://{tmp_path / 'shared'}").exit_code == 0
    assert cli("budget", "set", "ml", "--usd-per-month", "100", "--owner", "alice").exit_code == 0
    assert cli("budget", "set", "ml", "--usd-per-month", "250").exit_code == 0  # replaced, not added
    r = cli("budget", "set", "no good", "--usd-per-month", "1")
    assert r.exit_code == 2 and "name" in r.output and "Traceback" not in r.output
    (b,) = json.loads(cli("--json", "budget", "list").stdout)["budgets"]
    assert (b["name"], b["usd_per_month"], b["owner"], b["source"]) == ("ml", 250, None, f"file://{tmp_path / 'shared'}")
    assert cli("budget", "rm", "ml").exit_code == 0 and cli("budget", "rm", "ml").exit_code == 2


def test_a_bad_budget_in_the_config_file_is_bad_input_with_its_line(config):
    path = config("budgets:\n  - {name: ok, usd_per_month: 10}\n  - {name: neg, usd_per_month: -5}\n")
    r = cli("budget", "list")
    assert r.exit_code == 2 and f"{path}:3" in r.output and "usd_per_month" in r.output


def test_an_update_is_held_to_what_it_adds_over_the_hours_it_has_left(tmp_path, cat):
    reg = Registry(tmp_path / "r.db")
    _record(reg, "aws-training", stack="aws-training", created="2026-11-20T00:00:00Z", per_hour=40.0)
    stack = stacks.load(AWS_STACK, cat)
    spend = planner.plan(stack, cat, workers=1).spend
    (c,) = budgets.check("aws-training", stack, spend, [], reg.list(), [budgets.Budget("b", 1e9)], now=NOW)
    left = (dt.datetime(2026, 12, 31, tzinfo=dt.timezone.utc) - NOW).total_seconds() / 3600
    assert c.projected == pytest.approx((spend.usd_per_hour - 40.0) * left)


# --- what a budget check does with what the catalog cannot price (hostile review of issue 49, item 3) ---

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFjtZCMk8DLg9Gw3q44fZDXDQHKWHrf7Wb55hmdcfA0A x"
# The catalog has spot rows only for a4-highgpu-8g in us-east4 (SkyPilot's snapshot, 2025-06): no on-demand
# price, which flex-start is priced from
FLEX_A4 = ("{name: b, provider: gcp, region: us-east4, instance_type: a4-highgpu-8g, nodes: 2, "
           "flex_start: {run_hours: 24}}")


def _gcp_stack(write, pool: str) -> str:
    return write("f.yaml", f"name: flex\nowner: o@example.com\nttl: 24h\naccess: {{public_key: '{KEY}'}}\n"
                           f"pools:\n  - {pool}\n")


def test_an_unpriced_place_is_never_counted_as_nothing_against_a_budget(gcp, cat, config, write, tmp_path,
                                                                         monkeypatch):
    """Before, 2 x a4-highgpu-8g on flex-start in us-east4 came to $1.24 for 24 h (its disks and NAT): the
    instances had no price and counted $0, and `up` went ahead under a $500 budget. Now `plan` says the
    budget cannot be held to it and `up` refuses (exit 5) before anything is created, naming the pool."""
    config("budgets:\n  - {name: lab, usd_per_month: 500}\n")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "test-passphrase")
    path = _gcp_stack(write, FLEX_A4)
    (b,) = json.loads(cli("--json", "plan", path).stdout)["budgets"]
    assert b["exceeded"] and b["unpriced"] == ["pool b: 2 x a4-highgpu-8g"], b
    assert "NOT PRICED (pool b: 2 x a4-highgpu-8g)" in cli("plan", path).output
    f = FakePulumiCLI(planner.plan(stacks.load(path, cat), cat, workers=1))
    monkeypatch.setattr(automation, "find_pulumi", lambda: f)
    r = cli("--json", "up", path, "--yes", "--no-configure")
    doc = json.loads(r.stdout)
    assert r.exit_code == 5 and doc["error"] == "OverBudget", r.output
    assert "pool b: 2 x a4-highgpu-8g has no price in the catalog" in doc["message"]
    assert not any(c[0] == "up" for c in f.calls) and Registry().get("flex") is None
    r = cli("--json", "up", path, "--yes", "--no-configure", "--over-budget")  # consent names it and goes on
    assert r.exit_code == 0 and json.loads(r.stdout)["budgets"][0]["unpriced"] == ["pool b: 2 x a4-highgpu-8g"], r.output


def test_up_holds_an_elastic_pool_to_the_budget_at_its_max_and_plan_prices_its_min(cat, tmp_path):
    """`gpufleet scale` and heal grow an elastic pool without another check: `up`'s is the last that can refuse,
    so it counts the pool at max; the plan (what `up` brings up) stays at min and says so."""
    text = AWS_STACK.read_text()
    assert "nodes: 2" in text
    fixed = stacks.load(AWS_STACK, cat)
    shutil.copytree(AWS_STACK.parent / "keys", tmp_path / "keys")  # the key it names, relative to it
    (tmp_path / "e.yaml").write_text(text.replace("nodes: 2", "nodes: {min: 2, max: 5}", 1))
    elastic = stacks.load(tmp_path / "e.yaml", cat)
    planned = planner.plan(elastic, cat, workers=1)
    assert planned.spend.usd_per_hour == pytest.approx(planner.plan(fixed, cat, workers=1).spend.usd_per_hour)
    (pool,) = [p for p in planned.pools if p.pool == elastic.pools[0].name]
    assert pool.nodes == 2 and "elastic 2-5" in pool.note and "at its min" in pool.note
    (c,) = budgets.checks("new", elastic, planned.spend, [], [], [budgets.Budget("b", 1e9)], now=NOW)
    per_node = budgets.instances_per_hour(planned.spend)[elastic.pools[0].name] / 2
    assert c.projected == pytest.approx(planned.spend.usd_for_ttl + 3 * per_node * planned.spend.ttl_hours)


def test_the_monitor_is_told_the_clusters_price_start_and_the_budgets_it_falls_under(tmp_path, write):
    """What `up` and `configure` put in the monitor's pillar for its collector (monitoring.collector): the
    cluster's $/h (its predicted bill), its start, only the budgets that cover it; nothing without Prometheus."""
    reg = Registry(tmp_path / "r.db")
    _record(reg, "c1", created="2026-11-20T00:00:00Z", per_hour=7.5)
    text = ("name: s\nowner: ops@example.com\nmonitoring: {prometheus: true, host: gpu}\npools:\n"
            "  - {name: gpu, provider: aws, region: us-east-1, instance_type: p4d.24xlarge}\n")
    st = stacks.load(write("s.yaml", text))
    mine, other = budgets.Budget("lab", 5000.0, stack="s"), budgets.Budget("llm", 900.0, stack="llm")
    got = budgets.monitor_settings(reg.get("c1"), st, [mine, other], [])
    assert got["settings"] == {"cluster": "c1", "usd_per_hour": 7.5, "since": "2026-11-20T00:00:00Z", "slurm": False,
                               "budgets": [{"name": "lab", "usd_per_month": 5000.0}]}
    plain = stacks.load(write("p.yaml", text.replace("monitoring: {prometheus: true, host: gpu}\n", "")))
    assert budgets.monitor_settings(reg.get("c1"), plain, [mine], []) is None

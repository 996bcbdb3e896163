"""`compare` and `report` answer the same question, so they take the same comparison flags: the list
is read from `compare`'s own click command (not written here), and `report` must accept each option
with the same names, the same type and the same default; `report` then runs with the flags it lacked
once (--deadline, --layout, --global-batch). Short flags are the same wherever a flag exists."""

import pytest
import typer.main

from gpufleet.cli.app import app

from conftest import cli as run

# the options that are about the output of one command, not about what is compared
OWN = {"compare": {"fmt", "csv_", "markdown", "top", "by_region", "show_infeasible"},
       "report": {"out", "markdown", "clusters", "local"}}


def _commands() -> dict:
    group = typer.main.get_command(app)
    return {name: group.commands[name] for name in ("compare", "report", "status")}


def _params(cmd, command: str) -> dict:
    return {p.name: p for p in cmd.params if p.name not in OWN[command]}


def test_report_takes_every_comparison_flag_compare_takes():
    cmds = _commands()
    compared, reported = _params(cmds["compare"], "compare"), _params(cmds["report"], "report")
    assert len(compared) > 15  # the list is read, not empty
    missing = sorted(set(compared) - set(reported))
    assert not missing, f"report lacks compare's {missing}"
    for name, p in compared.items():
        q = reported[name]
        assert (p.opts, p.secondary_opts, p.param_type_name, type(p.type), p.default, p.multiple) == \
               (q.opts, q.secondary_opts, q.param_type_name, type(q.type), q.default, q.multiple), name
    assert set(reported) == set(compared), "report has a comparison flag compare lacks"


def test_provider_and_region_have_the_same_short_flags_everywhere():
    group = typer.main.get_command(app)

    def walk(g, path=()):
        for name, c in g.commands.items():
            if hasattr(c, "commands"):  # a noun's group (typer carries its own click)
                yield from walk(c, path + (name,))
            else:
                yield " ".join(path + (name,)), c

    seen: dict[str, set] = {}
    for where, c in walk(group):
        for p in c.params:
            for long in p.opts:
                if long in ("--provider", "--region", "--out", "--cluster", "--yes"):
                    seen.setdefault(long, set()).add((tuple(sorted(set(p.opts) - {long})), where))
    for long, uses in seen.items():
        shorts = {s for s, _ in uses}
        assert len(shorts) == 1, f"{long} has different short flags: {sorted(uses)}"
    assert ("-p",) in {s for s, _ in seen["--provider"]}


@pytest.mark.parametrize("args", [
    ["resnet50", "--epochs", "90", "--deadline", "30d"],
    ["llm-7b", "--tokens", "1e10", "--gpu", "H100", "--layout", "tp8", "--global-batch", "1e6"],
    ["resnet50", "--epochs", "90", "-p", "aws", "-r", "us-east-1"],
])
def test_report_runs_with_the_flags_compare_takes(args, tmp_path):
    out = tmp_path / "r.html"
    r = run("report", *args, "--out", str(out))
    assert r.exit_code == 0, r.output
    assert out.read_text().startswith("<!DOCTYPE html>") or "<html" in out.read_text()[:500]
    c = run("compare", *args)
    assert c.exit_code == 0, c.output

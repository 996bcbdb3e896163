"""`gpufleet budget list|set|rm`: what clusters may spend in a month."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from gpufleet.cli import output
from gpufleet.cli.output import STATE

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                  help="Budgets per calendar month (UTC): every cluster, a stack's, or an owner's. `plan` shows what a "
                       "cluster would take of them, `up` refuses one that would exceed (exit 5, --over-budget "
                       "consents), `status` and `reap` show clusters past theirs. Budgets come from the config file "
                       "(budgets:) and, in team mode, the team's store.")


@app.command("list", help="Every budget, where it comes from, spent this month (estimated from the registry) and left.")
@output.handle_errors
def list_budgets():
    import datetime as dt

    from gpufleet.fleet import budgets, team

    now = dt.datetime.now(dt.timezone.utc)
    rows = budgets.standings(budgets.configured(STATE.config), team.registry().list(), now)
    if STATE.json:
        output.emit_json({"month": now.strftime("%Y-%m"), "budgets": [s.to_dict() for s in rows]})
        return
    render(rows, now)


def left_out(err) -> None:
    """The team's budgets could not be used (``fleet.budgets.configured``'s ``on_bad``): said, where a
    command only shows budgets beside what it does."""
    output.warn(f"the team's budgets are left out: {err.message} ({err.hint})")


def render(rows: list, now) -> None:
    if not rows:
        output.console().print("No budgets (budgets: in the config file; in team mode, gpufleet budget set).")
        return
    output.table(f"Budgets, {now:%B %Y} (spent: estimated from the registry; `gpufleet cost` has the bill)",
                 ["budget", "covers", "per month", "spent", "left", "clusters", "from"],
                 [[s.budget.name, _covers(s.budget), output.money(s.budget.usd_per_month), output.money(s.spent),
                   output.money(s.left), ", ".join(s.clusters) or "-", s.budget.source] for s in rows],
                 justify={k: "right" for k in ("per month", "spent", "left")}, optional=("from", "clusters"),
                 wraps=("covers", "clusters", "from"), styles=["red" if s.over else None for s in rows])


def _covers(b) -> str:
    return " and ".join(filter(None, [f"stack {b.stack}" if b.stack else "", f"owner {b.owner}" if b.owner else ""])) \
        or "every cluster"


@app.command("set", help="Set a team budget in the team's store (team mode; alone, budgets live in the config file).")
@output.handle_errors
def set_budget(
    name: Annotated[str, typer.Argument(help="The budget's name.")],
    usd_per_month: Annotated[float, typer.Option("--usd-per-month", min=0.01, help="What it allows a month.")],
    stack: Annotated[Optional[str], typer.Option("--stack", help="Only this stack's clusters.")] = None,
    owner: Annotated[Optional[str], typer.Option("--owner", help="Only clusters whose owner or creator names this.")] = None,
):
    import json

    from gpufleet import config
    from gpufleet.fleet import budgets
    from gpufleet.validation import validate_located
    from gpufleet.yamlsrc import load_text

    raw = {"name": name, "usd_per_month": usd_per_month, **({"stack": stack} if stack else {}),
           **({"owner": owner} if owner else {})}
    b = validate_located(config.Budget, load_text(json.dumps(raw), "budget"))  # the config's own checks
    budgets.put(budgets.Budget(b.name, b.usd_per_month, b.stack, b.owner))
    if STATE.json:
        output.emit_json({"set": raw})
        return
    output.console().print(f"Budget {name}: {output.money(usd_per_month)} a month for {_covers(b)}.")


@app.command("rm", help="Remove a team budget from the team's store.")
@output.handle_errors
def remove(name: Annotated[str, typer.Argument(help="The budget's name.")]):
    from gpufleet.errors import NotFound
    from gpufleet.fleet import budgets

    if not budgets.remove(name):
        raise NotFound("team budget", name, [b.name for b in budgets.configured(STATE.config)],
                       listed_by="gpufleet budget list")
    if STATE.json:
        output.emit_json({"removed": name})
        return
    output.console().print(f"Budget {name} removed.")

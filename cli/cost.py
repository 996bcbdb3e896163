"""`gpufleet cost [CLUSTER] [--since DATE]`: billed against predicted, per cluster and line."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Optional

import typer

from gpufleet.cli import options, output
from gpufleet.cli.output import STATE
from gpufleet.errors import EXIT_FAILED

HELP = ("What the clouds billed each cluster (AWS Cost Explorer, the GCP billing export in BigQuery, Azure Cost "
        "Management, all by the gpufleet:cluster tag), per line of the bill, against what `up` predicted for the "
        "same days. Billing lags hours to a day: the comparison stops where the bill does, and says so. A cluster "
        "off its prediction by more than the drift (config billing.drift, default 15%) is a warning naming the lines "
        "that differ most. Exit 1 when a cloud that should have been read could not be (the AWS tag not activated "
        "among them, with the command that activates it).")


@output.handle_errors
def cost(
    cluster: Annotated[Optional[str], typer.Argument(help="Only this cluster (default: every one).")] = None,
    since: Annotated[Optional[str], typer.Option("--since", metavar="YYYY-MM-DD", help="From this day, UTC "
                                                 "(default: the first of this month).")] = None,
    provider: options.Providers = None,
):
    from gpufleet import config
    from gpufleet.errors import InputError
    from gpufleet.fleet import cost as costs
    from gpufleet.paths import user_config

    try:
        day = dt.date.fromisoformat(since) if since else None
    except ValueError:
        raise InputError(f"--since {since!r} is not a day", "write it like 2026-11-01") from None
    path = user_config(STATE.config)
    settings = config.load(path).billing if path else config.Billing()
    with output.steps("Reading the clouds' bills"):
        report = costs.run(cluster, day, providers=options.clouds(provider), drift=settings.drift,
                           settings=settings.model_dump())
    for p, why in report.skipped.items():
        output.warn(f"{p} not read: {why}")
    for p, why in report.failed.items():
        output.warn(f"{p}'s bill could not be read: {why}" + (f"; {report.hints[p]}" if report.hints.get(p) else ""))
    for r in report.drifted:
        output.warn(f"{r.cluster} was billed {r.drift:+.0%} against its prediction; most off: "
                    + ", ".join(f"{x.line} {output.money(x.billed)} billed vs {output.money(x.predicted)}"
                                for x in r.widest()))
    if STATE.json:
        output.emit_json(report.to_dict())
    else:
        render(report)
    if report.failed or (not report.read and (report.skipped or report.rows)):
        raise typer.Exit(EXIT_FAILED)


def render(report) -> None:
    # a cluster's total first, its lines under it: the cluster's name once, not on every line (a column
    # of names as long as llm-pretrain-h100-2026-11-02 left no room for the figures at 80 columns)
    rows, styles = [], []
    for r in report.rows:
        rows.append([r.cluster, "-" if r.predicted is None else output.money(r.predicted), output.money(r.billed),
                     "-" if r.drift is None else f"{r.drift:+.0%}" + (" (estimated)" if r.estimated else "")])
        styles.append("bold red" if r in report.drifted else "bold")
        for x in r.lines:
            d = x.difference
            rows.append([f"  {x.line}", "-" if x.predicted is None else output.money(x.predicted),
                         output.money(x.billed), "-" if d is None else f"{'+' if d >= 0 else '-'}{output.money(abs(d))}"])
            styles.append(None)
    if rows:
        output.table(f"Billed against predicted, {report.since.isoformat()} to {report.until - dt.timedelta(days=1):%Y-%m-%d}",
                     ["cluster, then each line", "predicted", "billed", "difference"], rows,
                     justify={"predicted": "right", "billed": "right", "difference": "right"}, styles=styles)
    elif report.read:
        output.console().print("No clusters in the registry and nothing billed to gpufleet:cluster in the period "
                               f"(read: {', '.join(report.read)}).")
    else:  # not having read a bill is not "nothing billed"
        output.console().print("No clusters in the registry, and no cloud's bill was read: nothing is known about "
                               "what was billed.")
    c = output.console()
    for r in report.rows:
        for n in r.notes:
            c.print(f"note: {r.cluster}: {n}")
    for n in dict.fromkeys(report.notes):
        c.print(f"note: {n}")
    through = sorted({r.through for r in report.rows if r.through})
    if through:
        c.print(f"The bills cover days through {through[0]}" + (f" to {through[-1]}" if len(through) > 1 else "")
                + "; predictions are compared over the same days.")

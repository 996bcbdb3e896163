"""`gpufleet compare` and `gpufleet calibrate`."""

from __future__ import annotations

import dataclasses
import sys
from enum import Enum
from typing import Annotated

import typer

from gpufleet import paths
from gpufleet.cli import options, output
from gpufleet.cli.output import STATE
from gpufleet.errors import EXIT_FAILED, GpufleetError

HELP = """Rank every matching offer (cloud instance types and owned racks) for a workload:
$/hour, predicted throughput, time and cost to train, $/PFLOP-hour, bottleneck and scaling
efficiency. Works offline on the embedded catalog.

Examples: gpufleet compare resnet50 --epochs 90;  gpufleet compare llm-7b --tokens 1e11
--gpu H100,A100-80GB --nodes 1,2,4,8;  gpufleet compare llm:70b --tokens 1e12 --deadline 30d;
gpufleet compare --stack aws-training.yaml (an example stack: gpufleet examples --copy . writes it)"""

CALIBRATE_HELP = """Show the performance model's error against published measurements, row by row
(--fit re-fits the parameters from the data and shows the result without saving)."""


class Fmt(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"
    markdown = "markdown"


@output.handle_errors
@options.comparison_flags
def compare(
    flags: options.ComparisonFlags,
    fmt: Annotated[Fmt, typer.Option("--format", help="Output format.")] = Fmt.table,
    csv_: Annotated[bool, typer.Option("--csv", help="Same as --format csv.")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Same as --format markdown.")] = False,
    top: Annotated[int, typer.Option(help="Rows in the table or Markdown (0 = all; JSON/CSV always list all).")] = 25,
    by_region: Annotated[bool, typer.Option("--by-region", help="One row per region in the table and Markdown "
                                            "(by default an offer's regions are one row: the cheapest, +N).")] = False,
    show_infeasible: Annotated[bool, typer.Option("--show-infeasible", help="List the offers that cannot run the "
                                                  "workload, with why (by default they are only counted).")] = False,
):
    from gpufleet import catalog
    from gpufleet import compare as cmp
    from gpufleet.errors import InputError

    fmt = Fmt.json if STATE.json else Fmt.csv if csv_ else Fmt.markdown if markdown else fmt
    if top < 0:
        raise InputError(f"--top {top}: give the number of rows to show, or 0 for all")
    cat = catalog.load(STATE.config)
    asked = options.comparison(cat, flags)
    left_out: dict[str, str] = {}
    report = cmp.compare(cat, dataclasses.replace(asked.request, measured=_measured_layer(left_out)))
    report.left_out, report.measured_left_out = asked.left_out, left_out
    bill = None
    # the offers price instances; the stack as planned has every line of its bill
    if flags.stack and report.feasible and fmt in (Fmt.table, Fmt.json):
        from gpufleet.cli.plan import stack_bill

        bill = stack_bill(flags.stack, cat)
    _render(report, fmt, top, by_region, show_infeasible, bill)
    for pool, why in asked.left_out.items():
        output.warn(f"pool {pool} is left out of the comparison: {why}")
    if report.rows and not report.feasible:
        output.warn("no offer can run it as asked (see the foot of the table, or --show-infeasible)")
    # no answer, or a stack pool that cannot be compared: a comparison not done
    if not report.feasible or asked.left_out:
        raise typer.Exit(EXIT_FAILED)


# every column; the table leaves out the optional ones (the last first) when the terminal is narrow
# (the ones kept longest named first: the GPUs, region and note, then what a wide terminal adds)
COLUMNS = ["#", "provider", "instance", "region", "gpus", "market", "$/h", "throughput", "time", "±", "cost", "$/PFLOP-h",
           "bottleneck", "scaling", "note"]
OPTIONAL = ("gpus", "region", "note", "provider", "±", "market", "throughput", "$/PFLOP-h", "bottleneck", "scaling")
RIGHT = ("#", "$/h", "throughput", "time", "±", "cost", "$/PFLOP-h", "scaling")


def _grouped(rows: list, by_region: bool) -> list[tuple]:
    """(row, other regions) per offer: rows are cheapest first, so an offer's first row is its
    cheapest region; ``by_region``: every row on its own."""
    if by_region:
        return [(r, 0) for r in rows]
    first: dict[tuple, list] = {}
    for r in rows:
        first.setdefault((r.provider, r.instance, r.nodes, r.market, r.feasible), [r, 0])[1] += 1
    return [(r, n - 1) for r, n in first.values()]


def _cells(i: int, r, others: int) -> list:
    gpus = f"{r.gpus_per_node}x {r.gpu}" + (f" ×{r.nodes}" if r.nodes > 1 else "")  # per node × nodes
    region = r.region + (f" +{others}" if others else "")  # the cheapest region, and how many more sell it
    if not r.feasible:
        return ["-", r.provider, r.instance, region, gpus, r.market, output.money(r.usd_per_hour), "-", "-", "-", "-",
                "-", r.bottleneck, "-", f"cannot run: {r.reason}"]
    note = ", ".join(r.tags + ([r.layout] if r.layout not in ("data parallel", "") else []))
    return [i, r.provider, r.instance, region, gpus, r.market, output.money(r.usd_per_hour),
            output.rate(r.throughput, r.unit), output.duration(r.time_to_train_h), f"{r.error_band:.0%}",
            output.money(r.cost_to_train_usd), output.money(r.usd_per_pflop_hour), r.bottleneck,
            f"{r.scaling_efficiency:.0%}", note]


def _render(report, fmt: Fmt, top: int, by_region: bool = False, show_infeasible: bool = False, bill=None) -> None:
    if fmt is Fmt.json:
        output.emit_json({**report.to_dict(), **({"spend": bill.to_dict()} if bill else {})})
        return
    shown = report.rows if show_infeasible else report.feasible
    if fmt is Fmt.csv:  # a row per region, as the data is
        cols = ["rank", "provider", "region", "instance", "gpu", "gpus_per_node", "nodes", "market", "usd_per_hour",
                "throughput", "unit", "time_to_train_h", "cost_to_train_usd", "usd_per_pflop_hour", "bottleneck",
                "scaling_efficiency", "feasible", "reason", "tags", "price_as_of"]
        output.write_csv(cols, [[r.rank or "", r.provider, r.region, r.instance, r.gpu, r.gpus_per_node, r.nodes, r.market,
                                 f"{r.usd_per_hour:.4f}", f"{r.throughput:.2f}", r.unit,
                                 *((f"{r.time_to_train_h:.4f}", f"{r.cost_to_train_usd:.2f}", f"{r.usd_per_pflop_hour:.4f}")
                                   if r.feasible else ("", "", "")),
                                 r.bottleneck, f"{r.scaling_efficiency:.4f}", r.feasible, r.reason, ";".join(r.tags),
                                 r.price_as_of] for r in shown])
        return
    groups = _grouped(shown, by_region)
    listed = groups if top == 0 else groups[:top]
    cells = [_cells(i, r, n) for i, (r, n) in enumerate(listed, 1)]
    title = f"{report.workload}: {report.sample_label}"
    more = f"showing {len(listed)} of {len(groups)} (--top 0 for all)" if len(listed) < len(groups) else ""
    foot = _infeasible_foot(report, show_infeasible)
    if fmt is Fmt.markdown:
        output.write_markdown(COLUMNS, cells, title)
        sys.stdout.write("\n" + " ".join(filter(None, [
            f"Catalog prices as of {report.catalog_as_of} ({report.catalog_age_days} days old).",
            more and more[0].upper() + more[1:] + ".", foot])) + "\n")
        _say_more_nodes(report)
        return
    listed_prices = any(r.market == "ondemand" for r in report.rows) or not report.spot_as_of
    styles = ["bold green" if "cheapest" in r.tags else "bold cyan" if "fastest" in r.tags
              else "dim" if not r.feasible else None for r, _ in listed]
    caption = "\n".join(report.assumptions[1:] + [
        "gpus: per node, × nodes; region: the cheapest that sells it, +N more (--by-region: one row each); "
        "±: the prediction's typical error", "; ".join(filter(None, [
        *([f"list prices as of {report.catalog_as_of} ({report.catalog_age_days} days old)"
           + (f" to {report.catalog_newest}, each offer's by its own source" if report.catalog_newest
              and report.catalog_newest != report.catalog_as_of else "")] if listed_prices else []),
        *([f"spot prices as of {report.spot_as_of} ({report.spot_age_days} days old)"] if report.spot_as_of else []),
        more])), foot])
    output.table(title, COLUMNS, cells, caption=caption.strip(), styles=styles, optional=OPTIONAL, wraps=("note",),
                 justify={c: "right" for c in RIGHT})
    if bill:
        from gpufleet.cli.plan import render_spend

        render_spend(bill)
    _scaling_curves(report)
    _say_layout(report)
    _say_more_nodes(report)
    if report.stale and listed_prices and output.once_a_day("catalog-age"):
        output.warn(f"the catalog's list prices are {report.catalog_age_days} days old, past the {report.max_age_days}-day "
                    "limit (catalog_max_age_days in the config): run `gpufleet catalog refresh`, or add current "
                    "quotes under `prices:` (said once a day; --json always carries the age)")
    if report.spot_age_days is not None and report.spot_age_days > 1 and output.once_a_day("spot-age"):
        output.warn(f"the spot prices are a snapshot {report.spot_age_days} days old: spot prices move hourly, and spot "
                    "nodes can be preempted")
    if not report.rows:
        output.warn("no offer matches these filters")


def _infeasible_foot(report, shown: bool) -> str:
    """How many offers cannot run the workload, and the commonest why."""
    bad = report.infeasible
    if not bad:
        return ""
    why: dict[str, int] = {}
    for r in bad:
        why[r.bottleneck] = why.get(r.bottleneck, 0) + 1
    common = max(why, key=why.get)
    example = next(r for r in bad if r.bottleneck == common)
    listed = "listed below the ranked ones" if shown else "--show-infeasible lists them"
    return (f"{len(bad)} offers cannot run it ({why[common]} for {common}, e.g. {example.instance}: "
            f"{example.reason}); {listed}")


def _say_layout(report) -> None:
    """An LLM's layout on the cheapest offer, and the runner-up the pick was weighed against."""
    best = next((r for r in report.feasible if r.runner_up), None)
    if best is not None:
        output.console().print(f"[dim]{best.instance} x{best.nodes}: {best.layout}; runner-up {best.runner_up} "
                               "(--layout scores another)[/dim]", highlight=False)


def _say_more_nodes(report) -> None:
    m = report.more_nodes
    if not m:
        return
    output.warn(f"the best answer needs more nodes than asked: {m['provider']} {m['instance']} x{m['nodes']} nodes "
                f"({m['region']}) would train it in {output.duration(m['time_to_train_h'])} for "
                f"{output.money(m['cost_to_train_usd'])}" + ("" if m["within_a_month"] else " (the fewest that can run it: "
                                                            "no count up to 128 trains it within a month)")
                + f": compare again with --nodes {m['nodes']}")


def _scaling_curves(report, offers: int = 5) -> None:
    """With several node counts: one row per node count for the best few offers, each in its cheapest
    region (the same machine elsewhere scales the same)."""
    if len({r.nodes for r in report.rows}) < 2:
        return
    best: dict[tuple, str] = {}  # (provider, instance, market) -> its cheapest region
    for r in report.feasible:
        best.setdefault((r.provider, r.instance, r.market), r.region)
    cells = []
    for (provider, instance, market), region in list(best.items())[:offers]:
        curve = sorted((r for r in report.feasible if (r.provider, r.region, r.instance, r.market) ==
                        (provider, region, instance, market)), key=lambda r: r.nodes)
        for r in curve:
            cells.append([f"{r.provider} {r.instance}" if r is curve[0] else "", r.nodes, r.total_gpus,
                          output.rate(r.throughput, r.unit), f"{r.throughput / curve[0].throughput:.2f}x",
                          f"{r.scaling_efficiency:.0%}", output.duration(r.time_to_train_h),
                          output.money(r.cost_to_train_usd), r.bottleneck])
    output.table("Scaling curve (best offers)", ["offer", "nodes", "gpus", "throughput", "speed-up", "efficiency",
                                                  "time", "cost", "bottleneck"], cells,
                 justify={c: "right" for c in ("nodes", "gpus", "throughput", "speed-up", "efficiency", "time", "cost")},
                 optional=("efficiency", "throughput", "gpus", "speed-up", "bottleneck"))


@output.handle_errors
def calibrate(
    fit: Annotated[bool, typer.Option("--fit", help="Re-fit the parameters and the out-of-fold errors from the data "
                                      "(minutes; not saved: `python -m gpufleet.perf.calibration --write` saves).")] = False,
    mine: Annotated[bool, typer.Option("--mine", help="The fit with and without your recorded measurements "
                                       "(`gpufleet bench --record`), side by side (a refit: a minute).")] = False,
):
    from gpufleet.perf import calibration
    from gpufleet.perf.model import PRIORS, fitted_document, fitted_params

    rs = calibration.rows()
    if mine:
        if fit:
            with output.progress("fitting the model to published measurements"):
                base = calibration.fit(rs)[0]
        _calibrate_mine(rs, base if fit else fitted_params())
        return
    if fit:
        with output.progress("fitting the model to published measurements, then once per left-out group"):
            params, _ = calibration.fit(rs)
            gen = calibration.generalisation(rs, start=params)
        oof = {"per_row": {by: g["per_row"] for by, g in gen.items()},
               "per_group": {by: g["per_group"] for by, g in gen.items()},
               **{f"median_by_{by}": g["median_abs_error"] for by, g in gen.items()}}
    else:
        params, oof = fitted_params(), fitted_document().get("out_of_fold") or {}
    s = calibration.summary(rs, params)
    s["sources"] = calibration.sources()
    s["params"] = dict(params.values)
    s["warnings"] = calibration.warnings(params)
    s["out_of_fold"] = {k: oof.get(f"median_by_{k}") for k in calibration.GROUPINGS} | {
        "per_group": oof.get("per_group") or {}}
    s["worst_groups"] = calibration.worst_groups(rs, oof.get("per_row") or {})
    by_source = (oof.get("per_row") or {}).get("source") or {}
    for r in s["per_row"]:
        r["error_out_of_fold"] = by_source.get(r["id"])
    if STATE.json:
        output.emit_json(s)
        return
    cells = [[r["id"], r["workload"], r["gpu"], r["precision"], r["framework"], r["gpus"], f"{r['measured']:,.1f}",
              f"{r['predicted']:,.1f}", r["unit"], f"{r['error']:+.1%}",
              f"{r['error_out_of_fold']:+.1%}" if r["error_out_of_fold"] is not None else "-", r["source"]]
             for r in s["per_row"]]
    o = s["out_of_fold"]
    output.table("Performance model vs published measurements", ["id", "workload", "gpu", "precision", "framework",
                 "gpus", "measured", "predicted", "unit", "error", "out of fold", "source"], cells,
                 optional=("out of fold", "gpus", "precision", "workload", "unit", "framework", "source"),
                 caption=f"in sample: median |error| {s['median_abs_error']:.1%} (single GPU "
                         f"{s['median_abs_error_single_gpu']:.1%}, multi-GPU {s['median_abs_error_multi_gpu']:.1%}), "
                         f"p90 {s['p90_abs_error']:.1%} over {s['rows']} rows\n"
                         + "out of fold: median |error| " + ", ".join(
                             f"{k} left out {v:.1%}" for k, v in o.items() if isinstance(v, float))
                         + "\n" + "\n".join(f"{k}: {v}" for k, v in s["sources"].items()),
                 justify={c: "right" for c in ("gpus", "measured", "predicted", "error", "out of fold")})
    for by, groups in o["per_group"].items():
        output.table(f"Out of fold, {by} left out", [by, "median |error|"],
                     [[g, f"{e:.1%}"] for g, e in groups.items()], justify={"median |error|": "right"})
    output.table("Worst groups out of fold", ["left out", "group", "rows", "median |error|", "median error"],
                 [[g["by"], g["group"], g["rows"], f"{g['median_abs_error']:.1%}", f"{g['median_error']:+.1%}"]
                  for g in s["worst_groups"]],
                 caption="each group predicted by a fit that did not see it; error above 0: predicted too fast",
                 justify={c: "right" for c in ("rows", "median |error|", "median error")})
    output.table("Fitted parameters", ["parameter", "value", "prior", "bounds"],
                 [[n, f"{s['params'][n]:.4g}", f"{prior:g}", f"{lo:g}..{hi:g}"]
                  for n, (prior, _, (lo, hi)) in PRIORS.items()],
                 caption="fw:<framework>: speed relative to PyTorch; the meaning of each: infra/perf/model.py",
                 justify={c: "right" for c in ("value", "prior", "bounds")})
    for w in s["warnings"]:
        output.warn(f"parameter {w}")


def _measured_layer(skipped: dict[str, str] | None = None) -> list:
    """The user's and (team mode) the team's measured rows; an object of the store that is none is named (a
    warning, and in ``skipped``)."""
    from gpufleet.fleet.bench import recorded_rows
    from gpufleet.state.shared import shown

    skipped = {} if skipped is None else skipped
    rows = recorded_rows(skipped)
    for key, why in skipped.items():  # a store's words: not ours, shown as shared.shown makes them safe to show
        output.warn(f"the team store's {shown(key, 200)} is left out of the measured layer: {shown(why, 300)}")
    return rows


def _calibrate_mine(rs, base) -> None:
    """`calibrate --mine`: the user's rows predicted by ``base`` and by a fit with them among the published rows."""
    from gpufleet import catalog
    from gpufleet.perf import calibration

    recorded = _measured_layer()
    tiny = sum(1 for r in recorded if not r.used)
    if tiny == len(recorded):
        raise GpufleetError(f"no measurements recorded in {paths.measured_path()}"
                            + (f" but {tiny} tiny row(s), not used (toy shapes say nothing of a GPU)" if tiny else ""),
                            "record some on a GPU: gpufleet bench --here --record")
    left_out: dict[str, str] = {}
    mine = calibration.mine_rows(recorded, catalog.load(STATE.config), left_out)
    for row, why in left_out.items():
        output.warn(f"your recorded row {row} is left out: {why}")
    if not mine:
        raise GpufleetError("none of your recorded rows is of a GPU this catalog has", "see the rows left out above")
    with output.progress(f"refitting the model with your {len(mine)} measurement(s) among the published rows"):
        cmp = calibration.with_mine(rs, mine, base)
    if STATE.json:
        output.emit_json(cmp)
        return
    pub = cmp["published_median_abs_error"]
    output.table("Your measurements: the shipped fit and one refitted with them",
                 ["id", "gpu", "workload", "measured", "unit", "without yours", "error", "with yours", "error ",
                  "recorded"],
                 [[r["id"], r["gpu"], r["workload"], f"{r['measured']:,.1f}", r["unit"],
                   f"{r['predicted_without']:,.1f}", f"{r['error_without']:+.1%}", f"{r['predicted_with']:,.1f}",
                   f"{r['error_with']:+.1%}", r["notes"]] for r in cmp["rows"]],
                 caption=f"published rows: median |error| {pub['without']:.1%} without yours, {pub['with']:.1%} with; "
                         "your rows weigh as one source among the published ones; error = predicted / measured - 1",
                 justify={c: "right" for c in ("measured", "without yours", "error", "with yours", "error ")},
                 optional=("recorded", "unit"))
    output.table("Fitted parameters, without and with your measurements", ["parameter", "without yours", "with yours",
                 "change"],
                 [[n, f"{v['without']:.4g}", f"{v['with']:.4g}", f"{v['with'] / v['without'] - 1:+.0%}"]
                  for n, v in cmp["params"].items()],
                 justify={c: "right" for c in ("without yours", "with yours", "change")})
    for w in cmp["warnings"]:
        output.warn(f"with your measurements, parameter {w}")

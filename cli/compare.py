"""`gpufleet compare` and `gpufleet calibrate`."""

from __future__ import annotations

import sys
from enum import Enum
from typing import Annotated, Optional

import typer

from gpufleet.cli import output
from gpufleet.cli.output import STATE

HELP = """Rank every matching offer (cloud instance types and owned racks) for a workload:
$/hour, predicted throughput, time and cost to train, $/PFLOP-hour, bottleneck and scaling
efficiency. Works offline on the embedded catalog.

Examples: gpufleet compare resnet50 --epochs 90;  gpufleet compare llm-7b --tokens 1e11
--gpu H100,A100-80GB --nodes 1,2,4,8;  gpufleet compare --stack stacks/examples/aws-training.yaml"""

CALIBRATE_HELP = """Show the performance model's error against published measurements, row by row
(--fit re-fits the parameters from the data and shows the result without saving)."""


class Fmt(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"
    markdown = "markdown"


def _split(values: list[str] | None) -> list[str]:
    return [x.strip() for v in (values or []) for x in v.split(",") if x.strip()]


def _nodes(text: str) -> list[int]:
    from gpufleet.errors import InputError
    from gpufleet.spec import MAX_POOL_NODES

    try:
        out = [int(x) for x in text.split(",")]
    except ValueError:
        raise InputError(f"--nodes {text!r} is not a list of whole numbers", "e.g. --nodes 1,2,4,8") from None
    if not out or any(n < 1 or n > MAX_POOL_NODES for n in out):
        raise InputError(f"--nodes {text!r}: node counts go from 1 to {MAX_POOL_NODES:,}", "e.g. --nodes 1,2,4,8")
    return sorted(set(out))


@output.handle_errors
def compare(
    workload: Annotated[Optional[str], typer.Argument(help="Workload name (see `gpufleet catalog workloads`) or "
                                                      "llm:<size>, e.g. llm:8b.")] = None,
    stack: Annotated[Optional[str], typer.Option("--stack", help="Compare a stack file's pools (and its workload).")] = None,
    epochs: Annotated[Optional[float], typer.Option(help="Epochs to train (image/BERT workloads).")] = None,
    tokens: Annotated[Optional[float], typer.Option(help="Tokens to train (LLM workloads), e.g. 1e12.")] = None,
    gpu: Annotated[Optional[list[str]], typer.Option("--gpu", help="GPU types to consider (repeat or comma-separate).")] = None,
    min_gpus: Annotated[Optional[int], typer.Option("--min-gpus", help="At least this many GPUs in the cluster.")] = None,
    provider: Annotated[Optional[list[str]], typer.Option("--provider", help="aws, gcp, azure, baremetal.")] = None,
    region: Annotated[Optional[list[str]], typer.Option("--region", help="Regions to consider.")] = None,
    spot: Annotated[bool, typer.Option("--spot", help="Spot/preemptible prices only.")] = False,
    max_price: Annotated[Optional[float], typer.Option("--max-price", help="Max USD per hour for the cluster.")] = None,
    nodes: Annotated[str, typer.Option("--nodes", help="Node counts, e.g. 1,2,4,8 for a scaling curve.")] = "1",
    precision: Annotated[str, typer.Option(help="mixed, fp32, tf32, fp16, bf16 or fp8.")] = "mixed",
    batch_per_gpu: Annotated[Optional[int], typer.Option("--batch-per-gpu", help="Samples per GPU between gradient "
                                                         "exchanges.")] = None,
    storage: Annotated[Optional[str], typer.Option(help="nvme, network, lustre:<MB/s>, nfs:<MB/s>; default: local NVMe "
                                                   "if present.")] = None,
    workload_file: Annotated[Optional[str], typer.Option("--workload-file", help="YAML file with your own workloads.")] = None,
    fmt: Annotated[Fmt, typer.Option("--format", help="Output format.")] = Fmt.table,
    csv_: Annotated[bool, typer.Option("--csv", help="Same as --format csv.")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Same as --format markdown.")] = False,
    top: Annotated[int, typer.Option(help="Rows in the table or Markdown (0 = all; JSON/CSV always list all).")] = 25,
):
    from gpufleet import catalog
    from gpufleet import compare as cmp
    from gpufleet.errors import InputError, NotFound
    from gpufleet.perf import workloads
    from gpufleet.providers import PROVIDERS
    from gpufleet.spec import MAX_EPOCHS, MAX_TOKENS

    fmt = Fmt.json if STATE.json else Fmt.csv if csv_ else Fmt.markdown if markdown else fmt
    cat = catalog.load(STATE.config)
    if precision not in ("mixed", "fp32", "tf32", "fp16", "bf16", "fp8"):
        raise NotFound("precision", precision, ["mixed", "fp32", "tf32", "fp16", "bf16", "fp8"])
    for name, v, most in (("--epochs", epochs, MAX_EPOCHS), ("--tokens", tokens, MAX_TOKENS),
                          ("--max-price", max_price, 1e7), ("--min-gpus", min_gpus, 1e6),
                          ("--batch-per-gpu", batch_per_gpu, 1e6)):
        if v is not None and not 0 < v <= most:  # also NaN
            raise InputError(f"{name} must be positive and at most {most:g}, got {v:g}")
    if top < 0:
        raise InputError(f"--top {top}: give the number of rows to show, or 0 for all")
    only, left_out = None, {}
    if stack:
        from gpufleet.fleet import stacks

        st = stacks.load(stack, cat)
        pools = cmp.stack_pools(st, cat, stack)
        only, left_out = pools.only, pools.left_out
        if st.workload and not workload:
            workload = st.workload.name
            epochs = epochs or st.workload.epochs
            tokens = tokens or st.workload.tokens
            batch_per_gpu = batch_per_gpu or st.workload.batch_per_gpu
            if st.workload.precision:
                precision = st.workload.precision
    if not workload and stack:
        from gpufleet.errors import SpecError

        raise SpecError(stack, 1, "workload", "the stack has no `workload:` block and no workload was named",
                        "add e.g. `workload: {name: resnet50, epochs: 90}` to the stack, or name one: "
                        "gpufleet compare resnet50 --stack STACK")
    if not workload:
        raise InputError("name a workload (e.g. resnet50, llm-7b) or give --stack with a `workload:` block",
                         "see `gpufleet catalog workloads`")
    wl = workloads.get(workload, workload_file)
    providers = _split(provider)
    for p in providers:
        if p not in PROVIDERS:
            raise NotFound("provider", p, PROVIDERS)
    regions = _split(region)
    for r in regions:
        if not any(r in regs for regs in cat.regions.values()):
            raise NotFound("region", r, [x for regs in cat.regions.values() for x in regs])
    req = cmp.Request(
        workload=wl, epochs=epochs, tokens=tokens, gpus=[cat.gpu(g).name for g in _split(gpu)],
        min_gpus=min_gpus, providers=providers, regions=regions, spot=spot, max_price=max_price,
        nodes=_nodes(nodes), precision=precision, batch_per_gpu=batch_per_gpu, storage=storage, only=only,
    )
    report = cmp.compare(cat, req)
    report.left_out = left_out
    _render(report, fmt, top)
    for pool, why in left_out.items():
        output.warn(f"pool {pool} is left out of the comparison: {why}")
    if not report.rows or left_out:  # a stack pool that cannot be compared is a comparison not done
        raise typer.Exit(1)


COLUMNS = ["rank", "provider", "region", "instance", "gpus", "nodes", "market", "$/h", "throughput",
           "time", "cost", "$/PFLOP-h", "bottleneck", "scaling", "note"]


def _cells(i: int, r) -> list:
    note = ",".join(r.tags + ([r.layout] if r.layout not in ("data parallel", "") else [])) if r.feasible \
        else f"infeasible: {r.reason}"
    return [i, r.provider, r.region, r.instance, f"{r.gpus_per_node}x {r.gpu}", r.nodes, r.market,
            output.money(r.usd_per_hour), output.rate(r.throughput, r.unit),
            f"{output.duration(r.time_to_train_h)} ±{r.error_band:.0%}",
            output.money(r.cost_to_train_usd), output.money(r.usd_per_pflop_hour), r.bottleneck,
            f"{r.scaling_efficiency:.0%}", note]


def _render(report, fmt: Fmt, top: int) -> None:
    if fmt is Fmt.json:
        output.emit_json(report.to_dict())
        return
    if fmt is Fmt.csv:
        cols = ["rank", "provider", "region", "instance", "gpu", "gpus_per_node", "nodes", "market", "usd_per_hour",
                "throughput", "unit", "time_to_train_h", "cost_to_train_usd", "usd_per_pflop_hour", "bottleneck",
                "scaling_efficiency", "feasible", "tags", "price_as_of"]
        output.write_csv(cols, [[i, r.provider, r.region, r.instance, r.gpu, r.gpus_per_node, r.nodes, r.market,
                                 f"{r.usd_per_hour:.4f}", f"{r.throughput:.2f}", r.unit, f"{r.time_to_train_h:.4f}",
                                 f"{r.cost_to_train_usd:.2f}", f"{r.usd_per_pflop_hour:.4f}", r.bottleneck,
                                 f"{r.scaling_efficiency:.4f}", r.feasible, ";".join(r.tags), r.price_as_of]
                                for i, r in enumerate(report.rows, 1)])
        return
    rows = report.rows if top == 0 else report.rows[:top]
    cells = [_cells(i, r) for i, r in enumerate(rows, 1)]
    title = f"{report.workload}: {report.sample_label}"
    if fmt is Fmt.markdown:
        output.write_markdown(COLUMNS, cells, title)
        shown = f" Showing {len(rows)} of {len(report.rows)} (--top 0 for all)." if len(rows) < len(report.rows) else ""
        sys.stdout.write(f"\nCatalog prices as of {report.catalog_as_of} ({report.catalog_age_days} days old).{shown}\n")
        return
    styles = ["bold green" if "cheapest" in r.tags else "bold cyan" if "fastest" in r.tags
              else "dim" if not r.feasible else None for r in rows]
    caption = "\n".join(report.assumptions[1:] + [
        f"catalog prices as of {report.catalog_as_of} ({report.catalog_age_days} days old)"
        + (f"; showing {len(rows)} of {len(report.rows)} (--top 0 for all)" if len(rows) < len(report.rows) else "")])
    output.table(title, COLUMNS, cells, caption=caption, styles=styles,
                 justify={c: "right" for c in ("rank", "nodes", "$/h", "throughput", "time", "cost", "$/PFLOP-h", "scaling")})
    _scaling_curves(report)
    if report.stale:
        output.warn(f"the catalog's prices are {report.catalog_age_days} days old, past the {report.max_age_days}-day "
                    "limit (catalog_max_age_days in the config): run `gpufleet catalog refresh`, or add current "
                    "quotes under `prices:`")
    if not report.rows:
        output.warn("no offer matches these filters")


def _scaling_curves(report, offers: int = 5) -> None:
    """With several node counts: one row per node count for the best few offers."""
    if len({r.nodes for r in report.rows}) < 2:
        return
    seen: list[tuple] = []
    for r in report.rows:
        key = (r.provider, r.region, r.instance, r.market)
        if r.feasible and key not in seen:
            seen.append(key)
    cells = []
    for key in seen[:offers]:
        curve = sorted((r for r in report.rows if (r.provider, r.region, r.instance, r.market) == key), key=lambda r: r.nodes)
        for r in curve:
            cells.append([f"{r.provider}/{r.region}/{r.instance}" if r is curve[0] else "", r.nodes, r.total_gpus,
                          output.rate(r.throughput, r.unit), f"{r.throughput / curve[0].throughput:.2f}x",
                          f"{r.scaling_efficiency:.0%}", output.duration(r.time_to_train_h),
                          output.money(r.cost_to_train_usd), r.bottleneck])
    output.table("Scaling curve (best offers)", ["offer", "nodes", "gpus", "throughput", "speed-up", "efficiency",
                                                  "time", "cost", "bottleneck"], cells,
                 justify={c: "right" for c in ("nodes", "gpus", "throughput", "speed-up", "efficiency", "time", "cost")})


@output.handle_errors
def calibrate(
    fit: Annotated[bool, typer.Option("--fit", help="Re-fit the parameters and the out-of-fold errors from the data "
                                      "(minutes; not saved: `python -m gpufleet.perf.calibration --write` saves).")] = False,
):
    from gpufleet.perf import calibration
    from gpufleet.perf.model import fitted_document, fitted_params

    rs = calibration.rows()
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
    by_source = (oof.get("per_row") or {}).get("source") or {}
    for r in s["per_row"]:
        r["error_out_of_fold"] = by_source.get(r["id"])
    if STATE.json:
        output.emit_json(s)
        return
    cells = [[r["id"], r["workload"], r["gpu"], r["precision"], r["gpus"], f"{r['measured']:,.1f}",
              f"{r['predicted']:,.1f}", r["unit"], f"{r['error']:+.1%}",
              f"{r['error_out_of_fold']:+.1%}" if r["error_out_of_fold"] is not None else "-", r["source"]]
             for r in s["per_row"]]
    o = s["out_of_fold"]
    output.table("Performance model vs published measurements", ["id", "workload", "gpu", "precision", "gpus",
                 "measured", "predicted", "unit", "error", "out of fold", "source"], cells,
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
    for w in s["warnings"]:
        output.warn(f"parameter {w}")

"""Calibrate the performance model against published measurements, and say how well it predicts
what it was not fitted to.

``data/measurements.csv`` holds published training throughputs (NVIDIA DeepLearningExamples,
MLPerf Training results, the TensorFlow benchmark pages, MosaicML LLM Foundry), each with its
source and the framework it ran in; ``data/llm_runs.csv`` published LLM pre-training runs of
2024-26 with the layout, batch and model shape each ran with (``llm_rows``). This module

* predicts every row and reports the per-row error (``summary``);
* fits the model's global parameters (``fit``): the mean absolute log error, each source's rows
  weighted together as one (a source with 100 rows does not outvote one with 5), plus a pull
  toward each parameter's prior (``model.PRIORS``), minimised by a Nelder-Mead search in log
  space, deterministic from the priors;
* reports generalisation (``out_of_fold``): every row predicted by a fit that did not see its
  group, for five groupings: by source (grouped k-fold), leave one workload out, leave one GPU
  out, leave one GPU generation (architecture) out, leave one model family out; and the groups
  predicted worst (``worst_groups``);
* warns of a parameter that ended at a bound (``warnings``);
* refits with the user's own measurements (``gpufleet bench --record``, ``perf.measured``) among the published
  rows, to show what they would change (``with_mine``);
* writes the fit and its out-of-fold errors to ``data/fitted.json``
  (``python -m gpufleet.perf.calibration --write``).
"""

from __future__ import annotations

import csv
import json
import math
import multiprocessing
import os
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from gpufleet import catalog, processes
from gpufleet.perf import measured, workloads
from gpufleet.perf.model import FRAMEWORKS, NAMES, PRIORS, Params, Scenario, fitted_params, predict

PRIOR_WEIGHT = 0.02  # against the mean |log error|: a parameter one prior-spread away costs 0.02
GROUPINGS: dict[str, Callable] = {
    "source": lambda r: r.source,
    "workload": lambda r: r.scenario.workload.name,
    "gpu": lambda r: r.scenario.gpu.name,
    # issue 52: a new GPU generation, or a kind of network the fit never saw, is what a user predicts most
    "generation": lambda r: r.scenario.gpu.arch,
    "family": lambda r: r.scenario.workload.family,
}
WORST_GROUPS = 8  # how many of the worst-predicted groups `calibrate` shows
WORST_MIN_ROWS = 3  # a group of fewer rows is a row or two, not a pattern the model misses


@dataclass(frozen=True)
class Row:
    id: str
    scenario: Scenario
    measured: float
    unit: str
    source: str
    notes: str


def _text(name: str) -> str:
    return resources.files("gpufleet.perf").joinpath("data", name).read_text(encoding="utf-8")


def sources() -> dict[str, str]:
    return {r["key"]: r["source"] for r in csv.DictReader(_text("sources.csv").splitlines())}


def rows(cat=None) -> list[Row]:
    cat = cat or catalog.load(use_config=False)
    out = []
    for r in csv.DictReader(_text("measurements.csv").splitlines()):
        if r["framework"] not in FRAMEWORKS:  # named here, not as a KeyError deep inside a fit
            raise ValueError(f"measurements.csv row {r['id']}: framework {r['framework']!r} is not one of "
                             f"{', '.join(FRAMEWORKS)}")
        s = Scenario(
            workload=workloads.get(r["workload"]), gpu=cat.gpu(r["gpu"]),
            gpus_per_node=int(r["gpus_per_node"]), nodes=int(r["nodes"]), precision=r["precision"],
            batch_per_gpu=int(r["batch_per_gpu"]), network_gbps=float(r["network_gbps"]),
            vcpus=int(r["vcpus"]), comm=r["comm"], ps_shards=int(r["ps_shards"]) if r["ps_shards"] else None,
            activation_checkpointing=r["act_ckpt"] == "1", synthetic_data=r["data"] == "synthetic",
            gpu_decode=r["data"] == "dali", framework=r["framework"], sequence_binning=r["seq_binning"] == "1",
        )
        out.append(Row(r["id"], s, float(r["measured"]), r["unit"], r["source"], r["notes"]))
    return out + llm_rows(cat)


SHAPE = ("params", "layers", "d_model", "heads", "kv_heads", "ffn", "gated", "tied", "vocab", "seq_len")


def llm_rows(cat) -> list[Row]:
    """data/llm_runs.csv: published LLM pre-training runs (NeMo / Megatron-Bridge tables, torchtitan,
    torchao, fms-fsdp, llm-foundry), each with the model's shape and the layout, global batch and
    micro-batch it ran with, so the step model is scored on the run as it was made."""
    out = []
    for r in csv.DictReader(_text("llm_runs.csv").splitlines()):
        gpus, per_node = int(r["gpus"]), int(r["gpus_per_node"])
        shape = {k: float(r[k]) if k == "params" else int(r[k]) for k in SHAPE}
        s = Scenario(
            workload=workloads.decoder(r["model"], shape, "gpufleet/perf/data/llm_runs.csv"), gpu=cat.gpu(r["gpu"]),
            gpus_per_node=min(per_node, gpus), nodes=max(1, gpus // per_node), precision=r["precision"],
            network_gbps=float(r["network_gbps"]), synthetic_data=True, layout=r["layout"],
            global_batch_tokens=float(r["global_batch_tokens"]), micro_batch=int(r["micro_batch"]),
            framework=r["framework"],
        )
        out.append(Row(r["id"], s, float(r["tokens_per_s_per_gpu"]) * gpus, "tok/s", r["source"], r["notes"]))
    return out


MINE = "mine"  # the source of the user's own rows: weighted together as one source, as every source is


def mine_rows(recorded: list[measured.Measured], cat, skipped: dict[str, str] | None = None) -> list[Row]:
    """The user's recorded measurements as calibration rows, trained as the benchmark did (on its GPUs and nodes);
    tiny rows are none of them, and a row of a GPU this catalog lacks (a teammate's config names other GPUs) is left
    out, named in ``skipped`` with why."""
    out = []
    for m in (r for r in recorded if r.used):
        if not cat.has_gpu(m.gpu):
            if skipped is not None:
                skipped[f"{m.gpu} {m.workload} of {m.cluster or m.host or 'unknown'} on {m.when}"] = (
                    f"this catalog has no GPU {m.gpu!r} (the config's `gpus:` adds it)")
            continue
        out.append(Row(f"{MINE}{len(out) + 1}", measured.scenario(
            measured.bench_workload(m.workload), cat.gpu(m.gpu), m.batch, gpus_per_node=max(1, m.gpus // m.nodes),
            nodes=m.nodes), m.measured * m.gpus, m.unit, MINE, f"{m.host} {m.instance} {m.when}".strip()))
    return out


def with_mine(rs: list[Row], mine: list[Row], base: Params) -> dict:
    """The fit ``base`` (of the published rows ``rs``) beside one refitted from it with ``mine`` among them: each
    of the user's rows and the published rows' median |error| under both, and the parameters side by side."""
    refit, _ = fit(rs + mine, start=base)
    return {
        "rows": [{"id": r.id, "gpu": r.scenario.gpu.name, "workload": r.scenario.workload.name, "unit": r.unit,
                  "notes": r.notes, "measured": r.measured,
                  "predicted_without": predict(r.scenario, base, efficiency=False).throughput,
                  "predicted_with": predict(r.scenario, refit, efficiency=False).throughput,
                  "error_without": e0, "error_with": e1}
                 for r, e0, e1 in zip(mine, errors(mine, base), errors(mine, refit))],
        "published_median_abs_error": {"without": statistics.median(abs(e) for e in errors(rs, base)),
                                       "with": statistics.median(abs(e) for e in errors(rs, refit))},
        "params": {n: {"without": base.values[n], "with": refit.values[n]} for n in NAMES},
        "warnings": warnings(refit),
    }


def errors(rs: list[Row], p: Params) -> list[float]:
    """Signed relative error (predicted / measured - 1) per row."""
    return [predict(r.scenario, p, efficiency=False).throughput / r.measured - 1.0 for r in rs]


def _weights(rs: list[Row]) -> list[float]:
    per = {}
    for r in rs:
        per[r.source] = per.get(r.source, 0) + 1
    return [1.0 / per[r.source] / len(per) for r in rs]


def _objective(vec: list[float], rs: list[Row], weights: list[float]) -> float:
    penalty = 0.0
    for n, v in zip(NAMES, vec):
        prior, spread, (lo, hi) = PRIORS[n]
        if not (math.log(lo) <= v <= math.log(hi)):
            return 1e9
        penalty += ((v - math.log(prior)) / spread) ** 2
    p = Params.from_vector(vec)
    fit = sum(w * abs(math.log(predict(r.scenario, p, efficiency=False).throughput / r.measured))
              for r, w in zip(rs, weights))
    return fit + PRIOR_WEIGHT * penalty / len(NAMES)


def _nelder_mead(f, x0, step=0.5, iters=4000, tol=1e-7):
    n = len(x0)
    pts = [list(x0)] + [[x0[j] + (step if j == i else 0.0) for j in range(n)] for i in range(n)]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = sorted(range(n + 1), key=vals.__getitem__)
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        if abs(vals[-1] - vals[0]) < tol:
            break
        cen = [sum(p[j] for p in pts[:-1]) / n for j in range(n)]
        refl = [c + (c - w) for c, w in zip(cen, pts[-1])]
        fr = f(refl)
        if fr < vals[0]:
            exp = [c + 2 * (c - w) for c, w in zip(cen, pts[-1])]
            fe = f(exp)
            pts[-1], vals[-1] = (exp, fe) if fe < fr else (refl, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = refl, fr
        else:
            con = [c + 0.5 * (w - c) for c, w in zip(cen, pts[-1])]
            fc = f(con)
            if fc < vals[-1]:
                pts[-1], vals[-1] = con, fc
            else:
                best = pts[0]
                pts = [best] + [[b + 0.5 * (x - b) for b, x in zip(best, p)] for p in pts[1:]]
                vals = [vals[0]] + [f(p) for p in pts[1:]]
    i = min(range(n + 1), key=vals.__getitem__)
    return pts[i], vals[i]


def fit(rs: list[Row] | None = None, start: Params | None = None, iters: int = 3000) -> tuple[Params, float]:
    """The global parameters that best explain ``rs``; deterministic from ``start`` (the priors)."""
    rs = rs or rows()
    weights = _weights(rs)
    x, val = _nelder_mead(lambda v: _objective(v, rs, weights), (start or Params()).to_vector(), iters=iters)
    x, val = _nelder_mead(lambda v: _objective(v, rs, weights), x, step=0.1, iters=iters)  # restart near the optimum
    return Params.from_vector(x), val


def warnings(p: Params) -> list[str]:
    """Parameters at (within 2% of) a bound: the data pushed them past what the priors find plausible."""
    out = []
    for n in NAMES:
        _, _, (lo, hi) = PRIORS[n]
        v = p.values[n]
        if v <= lo * 1.02 or v >= hi * 0.98:
            out.append(f"{n} = {v:.4g} is at its bound ({lo:g}..{hi:g})")
    return out


def _fold(args) -> dict[str, float]:
    rs, held, start = args
    p, _ = fit([r for r in rs if r.id not in held], start=start, iters=1500)
    return {r.id: predict(r.scenario, p, efficiency=False).throughput / r.measured - 1.0 for r in rs if r.id in held}


def out_of_fold(rs: list[Row], by: str, start: Params | None = None, workers: int | None = None) -> dict[str, float]:
    """Per row, its signed error predicted by a fit without its group (``by``: source, workload, gpu)."""
    key = GROUPINGS[by]
    groups: dict[str, set[str]] = {}
    for r in rs:
        groups.setdefault(key(r), set()).add(r.id)
    jobs = [(rs, held, start) for held in groups.values()]
    workers = workers or len(os.sched_getaffinity(0))  # one fold per CPU this process may run on
    with processes.interrupt_proof_pool(multiprocessing.get_context(), workers) as pool:  # Ctrl-C ends it (issue 47)
        parts = pool.map(_fold, jobs)
    return {k: v for part in parts for k, v in part.items()}


def generalisation(rs: list[Row], start: Params | None = None) -> dict:
    """Median |error| out of fold, overall and per group, for each grouping."""
    out = {}
    for by, key in GROUPINGS.items():
        errs = out_of_fold(rs, by, start)
        groups: dict[str, list[float]] = {}
        for r in rs:
            groups.setdefault(key(r), []).append(abs(errs[r.id]))
        out[by] = {"median_abs_error": statistics.median(abs(e) for e in errs.values()),
                   "per_group": {g: round(statistics.median(v), 4) for g, v in sorted(groups.items())},
                   "per_row": {k: round(v, 4) for k, v in errs.items()}}
    return out


def worst_groups(rs: list[Row], per_row: dict[str, dict[str, float]], n: int = WORST_GROUPS) -> list[dict]:
    """The ``n`` groups (of ``WORST_MIN_ROWS`` rows or more) of every grouping in ``per_row`` (grouping -> row id ->
    its out-of-fold error under that grouping) with the largest median |error|, each with its median signed error
    (above 0: predicted too fast)."""
    out = []
    for by, errs in per_row.items():
        groups: dict[str, list[float]] = {}
        for r in rs:
            if r.id in errs:
                groups.setdefault(GROUPINGS[by](r), []).append(errs[r.id])
        out += [{"by": by, "group": g, "rows": len(v), "median_abs_error": statistics.median(abs(e) for e in v),
                 "median_error": statistics.median(v)} for g, v in groups.items() if len(v) >= WORST_MIN_ROWS]
    return sorted(out, key=lambda d: (-d["median_abs_error"], d["by"], d["group"]))[:n]


def params_to_json(p: Params, objective: float, rs: list[Row], gen: dict) -> str:
    r6 = lambda v: float(f"{v:.6g}")  # noqa: E731
    by_id = {r.id: r for r in rs}
    bands: dict[str, list[float]] = {}
    for rid, e in gen["source"]["per_row"].items():
        r = by_id[rid]
        multi = r.scenario.gpus_per_node * r.scenario.nodes > 1
        bands.setdefault(f"{r.scenario.workload.family}:{'multi' if multi else 'single'}", []).append(abs(e))
        bands.setdefault(r.scenario.workload.family, []).append(abs(e))
    return json.dumps({
        "note": "Fitted by gpufleet.perf.calibration.fit() to data/measurements.csv; do not edit by hand.",
        "rows": len(rs), "objective": r6(objective),
        "params": {k: r6(v) for k, v in p.values.items()},
        "out_of_fold": {"median": r6(gen["source"]["median_abs_error"]),
                        **{f"median_by_{by}": r6(g["median_abs_error"]) for by, g in gen.items()},
                        "bands": {k: r6(statistics.median(v)) for k, v in sorted(bands.items())},
                        "per_group": {by: g["per_group"] for by, g in gen.items()},
                        "per_row": {by: g["per_row"] for by, g in gen.items()}},
    }, indent=2) + "\n"


def summary(rs: list[Row], p: Params) -> dict:
    errs = errors(rs, p)
    abs_errs = [abs(e) for e in errs]
    single = [abs(e) for r, e in zip(rs, errs) if r.scenario.gpus_per_node * r.scenario.nodes == 1]
    multi = [abs(e) for r, e in zip(rs, errs) if r.scenario.gpus_per_node * r.scenario.nodes > 1]
    return {
        "rows": len(rs),
        "median_abs_error": statistics.median(abs_errs),
        "median_abs_error_single_gpu": statistics.median(single) if single else None,
        "median_abs_error_multi_gpu": statistics.median(multi) if multi else None,
        "p90_abs_error": sorted(abs_errs)[int(0.9 * (len(abs_errs) - 1))],
        "max_abs_error": max(abs_errs),
        "per_row": [
            {"id": r.id, "workload": r.scenario.workload.name, "gpu": r.scenario.gpu.name,
             "precision": r.scenario.precision, "framework": r.scenario.framework,
             "gpus": r.scenario.gpus_per_node * r.scenario.nodes,
             "measured": r.measured, "predicted": round(predict(r.scenario, p).throughput, 1),
             "unit": r.unit, "error": round(e, 4), "source": r.source, "notes": r.notes}
            for r, e in zip(rs, errs)
        ],
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    rs = rows()
    if "--write" in argv:
        p, obj = fit(rs)
        gen = generalisation(rs, start=p)
        path = Path(__file__).parent / "data" / "fitted.json"
        path.write_text(params_to_json(p, obj, rs, gen))
        print(f"wrote {path} (objective {obj:.4f}; out of fold by " +
              ", ".join(f"{by} {g['median_abs_error']:.1%}" for by, g in gen.items()) + ")")
        for w in warnings(p):
            print(f"warning: {w}")
        fitted_params.cache_clear()
    s = summary(rs, fitted_params())
    for r in s["per_row"]:
        print(f"{r['id']} {r['workload']:>15} {r['gpu']:>10} {r['precision']:>5} x{r['gpus']:<4} "
              f"measured {r['measured']:>10.1f} predicted {r['predicted']:>10.1f} {r['unit']:<6} {r['error']:+.1%}")
    print(f"rows {s['rows']}  median |error| {s['median_abs_error']:.1%}  single-GPU {s['median_abs_error_single_gpu']:.1%}"
          f"  multi-GPU {s['median_abs_error_multi_gpu']:.1%}  p90 {s['p90_abs_error']:.1%}  max {s['max_abs_error']:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

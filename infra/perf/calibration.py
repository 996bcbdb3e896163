"""Calibrate the performance model against published measurements.

``data/measurements.csv`` holds published training throughputs (NVIDIA DeepLearningExamples,
the TensorFlow benchmark pages, MosaicML LLM Foundry), each with its source. This module

* predicts every row with the model and reports the per-row error (``report``);
* fits the model's free parameters to the rows (``fit``) by minimising the mean absolute
  log error with a Nelder-Mead search in log space, deterministic from a fixed start;
* writes the fitted parameters to ``data/fitted.json`` (``python -m gpufleet.perf.calibration --write``).
"""

from __future__ import annotations

import csv
import json
import math
import statistics
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from gpufleet import catalog
from gpufleet.perf import workloads
from gpufleet.perf.model import Params, Scenario, fitted_params, predict

GLOBAL = ["u_tensor", "u_simt", "k", "overlap", "net_eff", "decode_per_vcpu"]
BOUNDS = {"u_tensor": (0.05, 1.0), "u_simt": (0.05, 1.0), "k": (1.0, 8.0), "overlap": (0.01, 1.0),
          "net_eff": (0.05, 1.0), "decode_per_vcpu": (5.0, 2000.0)}


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
        s = Scenario(
            workload=workloads.get(r["workload"]), gpu=cat.gpu(r["gpu"]),
            gpus_per_node=int(r["gpus_per_node"]), nodes=int(r["nodes"]), precision=r["precision"],
            batch_per_gpu=int(r["batch_per_gpu"]), network_gbps=float(r["network_gbps"]),
            vcpus=int(r["vcpus"]), comm=r["comm"], ps_shards=int(r["ps_shards"]) if r["ps_shards"] else None,
            activation_checkpointing=r["act_ckpt"] == "1", synthetic_data=r["data"] == "synthetic",
        )
        out.append(Row(r["id"], s, float(r["measured"]), r["unit"], r["source"], r["notes"]))
    return out


def free_names(rs: list[Row]) -> list[str]:
    wl = sorted({r.scenario.workload.name for r in rs if r.scenario.workload.family != "llm"})
    return GLOBAL + [f"I:{w}" for w in wl] + ["I:family:llm"]


def errors(rs: list[Row], p: Params) -> list[float]:
    """Signed relative error (predicted / measured - 1) per row."""
    return [predict(r.scenario, p).throughput / r.measured - 1.0 for r in rs]


def _objective(vec, names, base, rs) -> float:
    for n, v in zip(names, vec):
        lo, hi = BOUNDS.get(n, (1.0, 1e5))
        if not (math.log(lo) <= v <= math.log(hi)):
            return 1e9
    p = Params.from_vector(names, vec, base)
    return sum(abs(math.log(predict(r.scenario, p).throughput / r.measured)) for r in rs) / len(rs)


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


def fit(rs: list[Row] | None = None, restarts: int = 3) -> tuple[Params, float]:
    """Fit every free parameter to the rows; deterministic (fixed start, restarts from the best)."""
    rs = rs or rows()
    names = free_names(rs)
    base = Params(intensity={n[2:]: 100.0 for n in names if n.startswith("I:")})
    x = base.to_vector(names)
    best = float("inf")
    for _ in range(restarts):
        x, val = _nelder_mead(lambda v: _objective(v, names, base, rs), x)
        if best - val < 1e-6:
            best = val
            break
        best = val
    p = Params.from_vector(names, x, base)
    # workloads without data fall back to the family's geometric mean intensity
    for fam in ("cnn", "transformer"):
        vals = [v for k, v in p.intensity.items()
                if any(r.scenario.workload.name == k and r.scenario.workload.family == fam for r in rs)]
        if vals:
            p.intensity[f"family:{fam}"] = math.exp(sum(map(math.log, vals)) / len(vals))
    return p, best


def params_to_json(p: Params, objective: float, n_rows: int) -> str:
    r6 = lambda v: float(f"{v:.6g}")  # noqa: E731
    return json.dumps({
        "note": "Fitted by gpufleet.perf.calibration.fit() to data/measurements.csv; do not edit by hand.",
        "rows": n_rows, "mean_abs_log_error": r6(objective),
        "params": {**{k: r6(getattr(p, k)) for k in GLOBAL},
                   "intensity": {k: r6(v) for k, v in sorted(p.intensity.items())}},
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
             "precision": r.scenario.precision, "gpus": r.scenario.gpus_per_node * r.scenario.nodes,
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
        path = Path(__file__).parent / "data" / "fitted.json"
        path.write_text(params_to_json(p, obj, len(rs)))
        print(f"wrote {path} (mean |log error| {obj:.4f})")
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

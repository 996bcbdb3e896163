"""`gpufleet bench --here`."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from gpufleet.cli import output
from gpufleet.cli.output import STATE
from gpufleet.errors import EXIT_FAILED, InputError

HELP = ("Time standard training steps on this machine with its own PyTorch (ResNet-50 in channels-last bf16, "
        "BERT-large phase 1, a decoder LLM of an llm:<size> shape with SDPA attention, fused AdamW and per-block "
        "torch.compile) on synthetic data, and show beside each the model's prediction for this GPU, the error and "
        "the MFU against the GPU's dense BF16 peak; an error beyond the model's stated one is flagged with what it "
        "suggests. --tiny runs toy shapes on the CPU in seconds. --record keeps the measurements in your "
        "calibration, and compare then uses them for that GPU. Exit 0 when every benchmark ran, 1 when one failed, "
        "2 when there is no PyTorch.")


@output.handle_errors
def bench(
    here: Annotated[bool, typer.Option("--here", help="Run on this machine (its first GPU, or its CPU with "
                                       "--tiny).")] = False,
    tiny: Annotated[bool, typer.Option("--tiny", help="Toy shapes on the CPU, in seconds (no prediction).")] = False,
    workload: Annotated[str, typer.Option("--workload", help="Comma-separated: resnet50, bert-large, "
                                          "llm:<size>[:<seq>].")] = "resnet50,bert-large,llm:1b",
    gpu: Annotated[Optional[str], typer.Option("--gpu", help="The catalog's name of this GPU, where the name "
                                               "PyTorch reports is not one the catalog knows.")] = None,
    python: Annotated[Optional[str], typer.Option("--python", help="The Python with PyTorch to train with "
                                                  "(default: the one running gpufleet).")] = None,
    record: Annotated[bool, typer.Option("--record", help="Keep the measurements in your calibration (a layer "
                                         "over the shipped fit that compare uses for this GPU).")] = False,
    instance: Annotated[Optional[str], typer.Option("--instance", help="The instance type this machine is, for "
                                                    "the record's provenance (e.g. p5en.48xlarge).")] = None,
):
    from gpufleet import catalog
    from gpufleet.fleet import bench as run

    if not here:
        raise InputError("bench runs on the machine it is started on for now: --here",
                         "run `gpufleet bench --here` on a node of the cluster (over `gpufleet ssh`)")
    names = [n.strip() for n in workload.split(",") if n.strip()]
    if not names:
        raise InputError("--workload names no benchmark", "e.g. --workload resnet50,llm:1b")
    if record and tiny:
        raise InputError("--record keeps measurements beside the model's predictions, and --tiny's toy shapes have none",
                         "record the full shapes on a GPU: gpufleet bench --here --record")
    cat = catalog.load(STATE.config)
    the_plan = run.plan(names, tiny)
    if gpu:
        cat.gpu(gpu)  # an unknown name is bad input before anything runs
    answer = run.run_here(the_plan, python)
    name = gpu or (None if tiny else run.catalog_gpu(cat, answer.get("device", {}).get("name", "")))
    report = run.judge(answer, cat, name, tiny)
    recorded = run.record(report, instance) if record else None
    if STATE.json:
        output.emit_json({**report.to_dict(), "recorded": recorded})
    else:
        _render(report, recorded)
    if any(r.measured is None for r in report.rows):
        raise typer.Exit(EXIT_FAILED)


def _render(report, recorded) -> None:
    v, d = report.versions, report.device
    cells = []
    for r in report.rows:
        cells.append([r.name, f"{r.measured:,.1f}" if r.measured is not None else "failed", r.unit,
                      f"{r.predicted:,.1f}" if r.predicted is not None else "",
                      f"{r.error:+.0%}" if r.error is not None else "",
                      "FLAG" if r.flagged else "", f"{r.mfu:.0%}" if r.mfu is not None else "",
                      f"{r.peak_mem_gb:.1f}" if r.peak_mem_gb is not None else "",
                      r.suggests or r.note])
    output.table(f"Training steps on {d.get('name')} ({report.gpu or 'not in the catalog' if d.get('kind') != 'cpu' else 'CPU'})",
                 ["benchmark", "measured /GPU", "unit", "predicted", "error", "", "MFU", "peak GB", "note"], cells,
                 caption=(f"PyTorch {v.get('torch')}, CUDA {v.get('cuda')}, cuDNN {v.get('cudnn')}, NCCL {v.get('nccl')}, "
                          f"driver {v.get('driver')}; "
                          + (f"{d.get('gpus_used')} of {d.get('gpus')} GPUs used" if d.get("gpus") else "on the CPU")
                          + "; error = "
                          "predicted / measured - 1, flagged beyond the model's typical error for the family"
                          + (f"; recorded in {recorded['path']}" if recorded else "")),
                 justify={"measured /GPU": "right", "predicted": "right", "error": "right", "MFU": "right"},
                 optional=("MFU", "peak GB"), wraps=("note",))

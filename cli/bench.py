"""`gpufleet bench --here` and `gpufleet bench STACK|CLUSTER`."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Annotated, Optional

import typer

from gpufleet.cli import options, output
from gpufleet.cli.output import STATE
from gpufleet.errors import EXIT_FAILED, GpufleetError, InputError
from gpufleet.nodebench.launch import ALL, RDZV_PORT, Launch

HELP = ("Time standard training steps on this machine (--here) or on every node of a cluster (rack hosts over SSH, "
        "cloud nodes through their bucket, idle ones only; all at once, each with its own Python and PyTorch) with "
        "the machine's own PyTorch (ResNet-50 in channels-last bf16, "
        "BERT-large phase 1, a decoder LLM of an llm:<size> shape with SDPA attention, fused AdamW and per-block "
        "torch.compile) on synthetic data, and show beside each the model's prediction for this GPU, the error and "
        "the MFU against the GPU's dense BF16 peak; an error beyond the model's stated one is flagged with what it "
        "suggests. --tiny runs toy shapes on the CPU in seconds. --record keeps the measurements in your "
        "calibration, and compare then uses them for that GPU. Exit 0 when every benchmark ran, 1 when one failed, "
        "2 when there is no PyTorch. On a cluster, the per-node spread is shown and a node well below its peers is "
        "flagged.")


@output.handle_errors
def bench(
    target: Annotated[Optional[str], typer.Argument(help="Stack file (YAML) or cluster name: bench its nodes.",
                                                    metavar="[STACK|CLUSTER]")] = None,
    here: Annotated[bool, typer.Option("--here", help="Run on this machine (its first GPU, or its CPU with "
                                       "--tiny).")] = False,
    tiny: Annotated[bool, typer.Option("--tiny", help="Toy shapes on the CPU, in seconds (no prediction).")] = False,
    workload: Annotated[str, typer.Option("--workload", help="Comma-separated: resnet50, bert-large, "
                                          "llm:<size>[:<seq>].")] = "resnet50,bert-large,llm:1b",
    gpu: Annotated[Optional[str], typer.Option("--gpu", help="The catalog's name of this GPU, where the name "
                                               "PyTorch reports is not one the catalog knows.")] = None,
    python: Annotated[Optional[str], typer.Option("--python", help="The Python with PyTorch to train with "
                                                  "(default: the one running gpufleet; on a cluster's nodes, "
                                                  "their python3).")] = None,
    record: Annotated[bool, typer.Option("--record", help="Keep the measurements in your calibration (a layer "
                                         "over the shipped fit that compare uses for this GPU; --tiny rows are "
                                         "kept marked tiny and never used).")] = False,
    instance: Annotated[Optional[str], typer.Option("--instance", help="The instance type this machine is, for "
                                                    "the record's provenance (e.g. p5en.48xlarge).")] = None,
    gpus: Annotated[Optional[str], typer.Option("--gpus", help="Run on this many GPUs of each node, or all, one "
                                                "process each (FSDP2 for the transformers, DDP for the CNN; NCCL; "
                                                "with --tiny: this many gloo processes on the CPU); they meet through "
                                                "a private file, nothing listens beyond loopback.")] = None,
    nodes: Annotated[Optional[int], typer.Option("--nodes", help="One torchrun job over the cluster's first N "
                                                 "nodes (its static rendezvous on the first node's address). "
                                                 "torchrun's store has no authentication and listens on every "
                                                 "interface: for the run, every host of the cluster's network can "
                                                 "read or change it (forge or stop the run; nothing it writes is "
                                                 "unpickled). Use it where you trust that network.",
                                                 min=1)] = None,
    port: Annotated[int, typer.Option("--port", help="The rendezvous port on the first node (--nodes).",
                                      min=1, max=65535)] = RDZV_PORT,
    cluster: options.Cluster = None,
    trust_new_hosts: options.TrustNewHosts = False,
    wait_timeout: Annotated[Optional[float], typer.Option("--wait-timeout", min=0, max=86400, help="Seconds to wait "
                                                          "for the cloud nodes' answers (default: 33 minutes, a "
                                                          "node's longest run and its watch's next round).")] = None,
):
    from gpufleet import catalog
    from gpufleet.fleet import bench as run

    if here == (target is not None):
        raise InputError("bench runs here (--here) or on a cluster's nodes (STACK|CLUSTER): one of the two",
                         "gpufleet bench --here, or gpufleet bench my-cluster")
    names = [n.strip() for n in workload.split(",") if n.strip()]
    if not names:
        raise InputError("--workload names no benchmark", "e.g. --workload resnet50,llm:1b")
    if nodes is not None and here:
        raise InputError("--nodes runs one job over a cluster's nodes, not --here", "gpufleet bench my-cluster --nodes 2")
    launch = _launch(gpus, nodes, port, tiny)
    cat = catalog.load(STATE.config)
    if target is not None:
        _bench_cluster(target, cluster, cat, names, tiny=tiny, python=python or "python3", record=record,
                       instance=instance, trust_new_hosts=trust_new_hosts, launch=launch, wait_s=wait_timeout)
        return
    the_plan = run.plan(names, tiny)
    if gpu:
        cat.gpu(gpu)  # an unknown name is bad input before anything runs
    answer = run.run_here(the_plan, python, launch=launch)
    name = gpu or (None if tiny else run.catalog_gpu(cat, answer.get("device", {}).get("name", "")))
    report = run.judge(answer, cat, name, tiny)
    recorded, refused = _record(run.record, report, instance) if record else (None, None)
    if STATE.json:
        output.emit_json({**report.to_dict(), "recorded": recorded, "record_error": refused and refused.to_dict()})
    else:
        _render(report, recorded)
    _exit(refused, any(r.measured is None for r in report.rows))


def _record(keep, *args) -> tuple[dict | None, GpufleetError | None]:
    """(what ``keep`` recorded, why it recorded nothing): a refusal is said after the run's results, never instead
    of them (a run is up to 30 minutes of GPU time)."""
    try:
        return keep(*args), None
    except GpufleetError as e:
        return None, e


def _exit(refused: GpufleetError | None, failed: bool) -> None:
    if refused is not None:
        if not STATE.json:  # in the JSON document already
            output.error(refused)
        raise typer.Exit(refused.exit_code)
    if failed:
        raise typer.Exit(EXIT_FAILED)


def _launch(gpus: str | None, nodes: int | None, port: int, tiny: bool) -> Launch | None:
    """How each node starts the benchmark: alone (neither flag), or under torchrun."""
    if gpus is None and nodes is None:
        return None
    procs = (gpus or (ALL if not tiny else "1")).strip().lower()
    if procs == "all" and not tiny:
        procs = ALL
    elif not procs.isdigit() or int(procs) < 1:
        raise InputError(f"--gpus takes a number of GPUs (1 or more) or all, not {gpus!r}"
                         + (" (with --tiny: a number of processes on the CPU)" if tiny else ""),
                         "e.g. --gpus 8, or --gpus all" if not tiny else "e.g. --tiny --gpus 2")
    return Launch(procs=str(int(procs)) if procs != ALL else ALL, nodes=nodes or 1, port=port,
                  job=f"gpufleet-bench-{uuid.uuid4().hex[:12]}")


def _recorded_words(recorded: dict | None) -> str:
    if not recorded:
        return ""
    left_out = f"; left out: {'; '.join(recorded['left_out'])}" if recorded.get("left_out") else ""
    return (f"; recorded in {recorded['path']}" + (" (tiny rows: kept, never used)" if recorded["tiny"] else "")
            + left_out)


def _render(report, recorded) -> None:
    v, d = report.versions, report.device
    cells = []
    for r in report.rows:
        cells.append([r.name, f"{r.measured:,.1f}" if r.measured is not None else "failed", r.unit,
                      f"{r.predicted:,.1f}" if r.predicted is not None else "",
                      f"{r.error:+.0%}" if r.error is not None else "",
                      "FLAG" if r.flagged else "", f"{r.mfu:.0%}" if r.mfu is not None else "",
                      f"{r.peak_mem_gb:.1f}" if r.peak_mem_gb is not None else "",
                      f"{r.rank_spread:.0%} ({r.sharding})" if r.rank_spread is not None else "",
                      r.suggests or r.note])
    output.table(f"Training steps on {d.get('name')} ({report.gpu or 'not in the catalog' if d.get('kind') != 'cpu' else 'CPU'})",
                 ["benchmark", "measured /GPU", "unit", "predicted", "error", "", "MFU", "peak GB", "ranks", "note"], cells,
                 caption=(f"PyTorch {v.get('torch')}, CUDA {v.get('cuda')}, cuDNN {v.get('cudnn')}, NCCL {v.get('nccl')}, "
                          f"driver {v.get('driver')}; "
                          + (f"{d.get('gpus_used')} of {d.get('gpus')} GPUs used" if d.get("gpus") else "on the CPU")
                          + (f"; {d['world_size']} ranks on {d.get('nodes')} node(s) ({d.get('backend')}), a GPU's "
                             "rate at the slowest rank's pace, ranks = their spread" if (d.get("world_size") or 1) > 1
                             else "")
                          + "; error = "
                          "predicted / measured - 1, flagged beyond the model's typical error for the family"
                          + _recorded_words(recorded)),
                 justify={"measured /GPU": "right", "predicted": "right", "error": "right", "MFU": "right"},
                 optional=("MFU", "peak GB", "ranks"), wraps=("note",))


def _bench_cluster(target: str, cluster, cat, names, *, tiny: bool, python: str, record: bool, instance, trust_new_hosts,
                   launch, wait_s=None):
    from gpufleet import stacks
    from gpufleet.fleet import bench as run
    from gpufleet.fleet import team
    from gpufleet.state.recorded import recorded, stack_file_for

    reg = team.registry()
    if not Path(target).exists() and (reg.get(target) is not None or options.names_a_cluster(target)):
        cluster, target = target, stack_file_for(recorded(reg, target), f"gpufleet bench STACK --cluster {target}")
    st = stacks.load(target, cat)
    with output.steps("Benchmarking") as update:
        result = run.bench_cluster(st, cat, names, tiny=tiny, python=python, cluster=cluster, registry=reg,
                                   trust_new_hosts=trust_new_hosts, launch=launch, wait_s=wait_s,
                                   progress=lambda phase, done, total, msg: update(done, total, f"{phase}: {msg}"))
    types = {p.name: p.instance_type for p in st.pools if p.instance_type}  # a rack pool's: --instance
    recorded_rows, refused = _record(run.record_cluster, result, instance, types) if record else (None, None)
    if STATE.json:
        output.emit_json({**result.to_dict(), "recorded": recorded_rows, "record_error": refused and refused.to_dict()})
    else:
        _render_cluster(result, recorded_rows)
    _exit(refused, result.failed)


def _render_cluster(result, recorded) -> None:
    if result.job is not None or any(n.report is None and n.error is None for n in result.nodes):
        if result.job is not None:
            _render(result.job, recorded)
        output.table(f"The job's nodes ({result.cluster})", ["node", "address", "ran its part"],
                     [[n.node, n.address, "yes" if n.error is None else f"no: {n.error}"] for n in result.nodes],
                     wraps=("ran its part",))
        return
    cells = []
    for n in result.nodes:
        if n.report is None:
            cells.append([n.node, n.address, "", "failed", "", "", "", "", f"{n.error} ({n.hint})" if n.hint else n.error])
            continue
        for r in n.report.rows:
            cells.append([n.node, n.address, r.name, f"{r.measured:,.1f}" if r.measured is not None else "failed", r.unit,
                          f"{r.predicted:,.1f}" if r.predicted is not None else "",
                          f"{r.error:+.0%}" if r.error is not None else "", "FLAG" if r.flagged else "",
                          r.suggests or r.note])
    output.table(f"Training steps on the nodes of {result.cluster}", ["node", "address", "benchmark", "measured /GPU",
                 "unit", "predicted", "error", "", "note"], cells,
                 caption="error = predicted / measured - 1, flagged beyond the model's typical error for the family "
                         "or well below the node's peers" + _recorded_words(recorded),
                 justify={"measured /GPU": "right", "predicted": "right", "error": "right"}, wraps=("note",))
    output.table("Per-node spread", ["benchmark", "gpu", "nodes", "min", "median", "max", "spread", "slow nodes"],
                 [[s["benchmark"], s["gpu"] or "", s["nodes"], f"{s['min']:,.1f}", f"{s['median']:,.1f}",
                   f"{s['max']:,.1f}", f"{s['spread']:.0%}", ", ".join(s["slow"])] for s in result.spread],
                 justify={c: "right" for c in ("nodes", "min", "median", "max", "spread")})

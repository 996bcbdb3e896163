"""Options and argument checks several commands share, declared once."""

from __future__ import annotations

import datetime as dt
import functools
import inspect
import sys
import typing
from dataclasses import dataclass, field, fields
from typing import Annotated, Optional

import typer

Providers = Annotated[Optional[list[str]], typer.Option("--provider", "-p", help="Only this cloud (aws, gcp, azure); "
                                                        "repeat for several.")]
Regions = Annotated[Optional[list[str]], typer.Option("--region", "-r", help="Only this region (e.g. us-east-1, "
                                                      "us-central1, eastus); repeat for several. Default: all.")]
Cluster = Annotated[Optional[str], typer.Option("--cluster", "-c", help="Cluster name (default: the stack's name).")]
StackFile = Annotated[str, typer.Argument(help="Stack file (YAML).", metavar="STACK")]
OnePool = Annotated[Optional[str], typer.Option("--pool", help="Only this pool.")]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before changing anything.")]
TrustNewHosts = Annotated[bool, typer.Option("--trust-new-hosts", help="Record the host keys of rack hosts not yet "
                                             "in the site's known_hosts (trust on first use). A changed key is "
                                             "refused regardless.")]


def clouds(values: list[str] | None) -> list[str] | None:
    """``--provider`` values: known clouds, each once, in order (None when none was given)."""
    from gpufleet.errors import InputError, did_you_mean
    from gpufleet.providers import CLOUDS

    for v in values or []:
        if v not in CLOUDS:
            s = did_you_mean(v, CLOUDS)
            raise InputError(f"--provider {v!r} is not a cloud gpufleet manages",
                             f"did you mean {s!r}?" if s else f"choose from {', '.join(CLOUDS)}")
    return list(dict.fromkeys(values)) if values else None


def duration(flag: str, value: str | None) -> dt.timedelta | None:
    """A duration flag (90m, 8h, 2d, 1w; 0 for none)."""
    if value is None:
        return None
    if value.strip() in ("0", "0m", "0h", "0d"):
        return dt.timedelta(0)
    from gpufleet.errors import InputError
    from gpufleet.spec import HintedValueError, parse_ttl

    try:
        return parse_ttl(value)
    except HintedValueError as e:
        raise InputError(f"{flag} {e}", e.hint) from None


def confirm(question: str, yes: bool) -> bool:
    """True when ``--yes`` was given or the person at the terminal says so; no terminal is bad input."""
    if yes:
        return True
    if not sys.stdin.isatty():
        from gpufleet.errors import InputError

        raise InputError("no terminal to confirm on", "pass --yes to proceed without asking")
    return typer.confirm(question, default=False, err=True)


def passphrase_prompt():
    """A prompt for the Pulumi state's passphrase, when there is a terminal to ask on."""
    if not sys.stdin.isatty():
        return None
    return lambda: typer.prompt("Passphrase for the Pulumi state secrets", hide_input=True, err=True)


# --- what to compare: the flags `compare` and `report` share --------------------------------

Workload = Annotated[Optional[str], typer.Argument(help="Workload name (see `gpufleet catalog workloads`) or "
                                                   "llm:<size>, e.g. llm:8b.")]
Stack = Annotated[Optional[str], typer.Option("--stack", help="Compare a stack file's pools (and its workload).")]
Epochs = Annotated[Optional[float], typer.Option(help="Epochs to train (image/BERT workloads).")]
Tokens = Annotated[Optional[float], typer.Option(help="Tokens to train (LLM workloads), e.g. 1e12.")]
Gpus = Annotated[Optional[list[str]], typer.Option("--gpu", help="GPU types to consider (repeat or comma-separate).")]
MinGpus = Annotated[Optional[int], typer.Option("--min-gpus", help="At least this many GPUs in the cluster.")]
AnyProvider = Annotated[Optional[list[str]], typer.Option("--provider", "-p", help="aws, gcp, azure, baremetal.")]
AnyRegion = Annotated[Optional[list[str]], typer.Option("--region", "-r", help="Regions to consider; globs too: "
                                                        "'eu-*,europe-*'.")]
Spot = Annotated[bool, typer.Option("--spot", help="Spot/preemptible prices only.")]
MaxPrice = Annotated[Optional[float], typer.Option("--max-price", help="Max USD per hour for the cluster.")]
Nodes = Annotated[str, typer.Option("--nodes", help="Node counts, e.g. 1,2,4,8 for a scaling curve.")]
Precision = Annotated[str, typer.Option(help="mixed, fp32, tf32, fp16, bf16 or fp8.")]
Framework = Annotated[str, typer.Option(help="The framework you train in: pytorch, tf1, tf2, paddle, mxnet or megatron "
                                        "(its measured speed relative to PyTorch; see `gpufleet calibrate`).")]
BatchPerGpu = Annotated[Optional[int], typer.Option("--batch-per-gpu", help="Samples per GPU between gradient exchanges "
                                                     "(LLMs: tokens per GPU per step; --global-batch is the usual way).")]
Layout = Annotated[Optional[str], typer.Option("--layout", help="LLMs: score this layout instead of picking one, e.g. "
                                               "'tp4 pp2 dp8', 'fsdp', 'tp2 fsdp', 'hsdp8', 'tp8 pp4 vp5 +recompute' "
                                               "(dp left out: what the GPUs leave).")]
GlobalBatch = Annotated[Optional[float], typer.Option("--global-batch", help="LLMs: tokens per optimizer step "
                                                      "(default 4M, as Llama-class recipes), e.g. 1e6.")]
Deadline = Annotated[Optional[str], typer.Option("--deadline", help="Train within this time (e.g. 30d, 2w, 36h): per "
                                                 "instance type, the cheapest node count (1-256) that does; --nodes is "
                                                 "then not used.")]
Storage = Annotated[Optional[str], typer.Option(help="nvme, network, lustre:<MB/s>, nfs:<MB/s>; default: local NVMe "
                                                "if present.")]
WorkloadFile = Annotated[Optional[str], typer.Option("--workload-file", help="YAML file with your own workloads.")]
PRECISIONS = ("mixed", "fp32", "tf32", "fp16", "bf16", "fp8")


@dataclass
class ComparisonFlags:
    """What to compare: the flags `compare` and `report` share, declared here once (a command takes
    them all through ``comparison_flags``, so one cannot lack a flag the other has)."""

    workload: Workload = None
    stack: Stack = None
    epochs: Epochs = None
    tokens: Tokens = None
    gpu: Gpus = None
    min_gpus: MinGpus = None
    provider: AnyProvider = None
    region: AnyRegion = None
    spot: Spot = False
    max_price: MaxPrice = None
    nodes: Nodes = "1"
    precision: Precision = "mixed"
    framework: Framework = "pytorch"
    batch_per_gpu: BatchPerGpu = None
    storage: Storage = None
    workload_file: WorkloadFile = None
    layout: Layout = None
    global_batch: GlobalBatch = None
    deadline: Deadline = None

    def given(self) -> list[str]:
        """The flags set to other than their defaults, as the command line names them."""
        return [("WORKLOAD" if f.name == "workload" else "--" + f.name.replace("_", "-"))
                for f in fields(self) if getattr(self, f.name) not in (f.default, [])]


def comparison_flags(command):
    """``command(flags: ComparisonFlags, **own)`` as typer sees a command taking every comparison flag
    and then its own options: typer reads the signature, so the flags become parameters of it, and a
    call gathers them back into one ``ComparisonFlags``."""
    hints = typing.get_type_hints(ComparisonFlags, include_extras=True)
    shared = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=hints[f.name])
              for f in fields(ComparisonFlags)]
    own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
           for p in inspect.signature(command, eval_str=True).parameters.values() if p.name != "flags"]

    @functools.wraps(command)
    def with_flags(**given):
        flags = ComparisonFlags(**{p.name: given.pop(p.name) for p in shared})
        return command(flags, **given)

    with_flags.__signature__ = inspect.Signature(shared + own)
    return with_flags


def split(values: list[str] | None) -> list[str]:
    """Repeated and comma-separated values as one list."""
    return [x.strip() for v in (values or []) for x in v.split(",") if x.strip()]


def node_counts(text: str) -> list[int]:
    from gpufleet.errors import InputError
    from gpufleet.limits import MAX_POOL_NODES

    try:
        out = [int(x) for x in text.split(",")]
    except ValueError:
        raise InputError(f"--nodes {text!r} is not a list of whole numbers", "e.g. --nodes 1,2,4,8") from None
    if not out or any(n < 1 or n > MAX_POOL_NODES for n in out):
        raise InputError(f"--nodes {text!r}: node counts go from 1 to {MAX_POOL_NODES:,}", "e.g. --nodes 1,2,4,8")
    return sorted(set(out))


@dataclass
class Comparison:
    """A checked request, the stack pools that cannot be compared, and the constraints in words."""

    request: object  # gpufleet.compare.Request
    left_out: dict[str, str] = field(default_factory=dict)
    stack: str | None = None
    constraints: list[str] = field(default_factory=list)


def comparison(cat, flags: ComparisonFlags, command: str = "compare") -> Comparison:
    """The flags of `compare` (and `report`) checked and made a ``compare.Request`` on ``cat``; a
    stack's racks with site costs become sites of ``cat``. Bad input raises (exit 2)."""
    workload, stack, epochs, tokens = flags.workload, flags.stack, flags.epochs, flags.tokens
    gpu, min_gpus, provider, region = flags.gpu, flags.min_gpus, flags.provider, flags.region
    spot, max_price, nodes, precision, framework = flags.spot, flags.max_price, flags.nodes, flags.precision, flags.framework
    batch_per_gpu, storage, workload_file = flags.batch_per_gpu, flags.storage, flags.workload_file
    layout, global_batch, deadline = flags.layout, flags.global_batch, flags.deadline
    from gpufleet import compare as cmp
    from gpufleet.errors import InputError, NotFound, SpecError
    from gpufleet.limits import MAX_EPOCHS, MAX_TOKENS
    from gpufleet.perf import workloads
    from gpufleet.perf.model import FRAMEWORKS
    from gpufleet.providers import PROVIDERS

    if precision not in PRECISIONS:
        raise NotFound("precision", precision, PRECISIONS, extra=f" (one of {', '.join(PRECISIONS)})")
    if framework not in FRAMEWORKS:
        raise InputError(f"unknown framework {framework!r}: one of {', '.join(FRAMEWORKS)}",
                         "tf1 and tf2 are TensorFlow 1.x and 2.x; for a framework without measurements, "
                         "pytorch (the reference) is the nearest")
    for name, v, most in (("--epochs", epochs, MAX_EPOCHS), ("--tokens", tokens, MAX_TOKENS),
                          ("--max-price", max_price, 1e7), ("--min-gpus", min_gpus, 1e6),
                          ("--batch-per-gpu", batch_per_gpu, 1e6), ("--global-batch", global_batch, 1e10)):
        if v is not None and not 0 < v <= most:  # also NaN
            raise InputError(f"{name} must be positive and at most {most:g}, got {v:g}")
    only, left_out, stack_name = None, {}, None
    if stack:
        from gpufleet import stacks
        from gpufleet.stacks import pools as stackpools  # `pools` is this function's

        st = stacks.load(stack, cat)
        stack_name = st.name
        pools = stackpools.stack_pools(st, cat, stack)
        only, left_out = pools.only, pools.left_out
        if st.workload and not workload:
            workload = st.workload.name
            epochs = epochs or st.workload.epochs
            tokens = tokens or st.workload.tokens
            batch_per_gpu = batch_per_gpu or st.workload.batch_per_gpu
            if st.workload.precision:
                precision = st.workload.precision
    if not workload and stack:
        raise SpecError(stack, 1, "workload", "the stack has no `workload:` block and no workload was named",
                        "add e.g. `workload: {name: resnet50, epochs: 90}` to the stack, or name one: "
                        f"gpufleet {command} resnet50 --stack STACK")
    if not workload:
        raise InputError("name a workload (e.g. resnet50, llm-7b) or give --stack with a `workload:` block",
                         "see `gpufleet catalog workloads`")
    wl = workloads.get(workload, workload_file)
    if (layout or global_batch) and wl.family != "llm":
        raise InputError(f"--{'layout' if layout else 'global-batch'} is for LLM workloads; {wl.name} is a {wl.family}",
                         "leave it out, or name an LLM (e.g. llm:8b, llm-7b)")
    if layout:
        from gpufleet.perf import parallel

        parallel.check(layout, wl)  # spelling and the model's layers now; the GPU count per offer
    deadline_h = None
    if deadline is not None:
        span = duration("--deadline", deadline)
        if not span:
            raise InputError("--deadline 0: give the time the training may take", "e.g. --deadline 30d")
        deadline_h = span.total_seconds() / 3600.0
    providers = split(provider)
    for p in providers:
        if p not in PROVIDERS:
            raise NotFound("provider", p, PROVIDERS)
    regions = split(region)
    known = [x for regs in cat.regions.values() for x in regs]
    for r in regions:
        if not any(cmp.region_matches([r], x) for x in known):
            raise NotFound("region", r, known)
    gpus = [cat.gpu(g).name for g in split(gpu)]
    req = cmp.Request(
        workload=wl, epochs=epochs, tokens=tokens, gpus=gpus, min_gpus=min_gpus, providers=providers, regions=regions,
        spot=spot, max_price=max_price, nodes=node_counts(nodes), precision=precision, batch_per_gpu=batch_per_gpu,
        storage=storage, only=only, framework=framework, layout=layout, global_batch=global_batch,
        deadline_h=deadline_h,
    )
    said = [f"{k}: {v}" for k, v in (
        ("stack pools only", stack if stack else None), ("GPUs", ", ".join(gpus)), ("providers", ", ".join(providers)),
        ("regions", ", ".join(regions)), ("market", "spot only" if spot else None),
        ("at most", f"${max_price:,.2f}/h for the cluster" if max_price else None),
        ("at least", f"{min_gpus} GPUs" if min_gpus else None), ("nodes", nodes if nodes != "1" else None),
        ("precision", precision if precision != "mixed" else None),
        ("framework", framework if framework != "pytorch" else None),
        ("per-GPU batch", str(batch_per_gpu) if batch_per_gpu else None), ("storage", storage),
        ("layout", layout), ("global batch", f"{global_batch:g} tokens" if global_batch else None),
        ("deadline", deadline)) if v]
    return Comparison(req, left_out, stack_name, said)


def names_a_cluster(target: str) -> bool:
    """A STACK|CLUSTER argument that is a name, not a path: no folder and no YAML suffix (a cluster name cannot
    have either)."""
    return "/" not in target and not target.endswith((".yaml", ".yml"))

"""Time training steps of standard models on this machine's first GPU (or its CPU) with its own PyTorch.

Standalone: the standard library and torch only, run as ``python3 train_steps.py PLAN.json`` (``-`` reads
the plan from stdin). The plan names the benchmarks with their shapes and batches:

    {"device": "cuda" | "auto" | "cpu", "warmup": 3, "steps": 10, "compile": true,
     "benchmarks": [{"name": "resnet50", "kind": "cnn", "batch": 256, "image": 224, "width": 64,
                     "blocks": [3, 4, 6, 3], "classes": 1000},
                    {"name": "bert-large", "kind": "encoder", "layers": 24, "d_model": 1024, "heads": 16,
                     "ffn": 4096, "vocab": 30522, "seq": 128, "batch": 64, "masked": 20},
                    {"name": "llm:1b:2048", "kind": "decoder", "layers": 16, "d_model": 2048, "heads": 32,
                     "kv_heads": 8, "ffn": 8192, "vocab": 128256, "tied": true, "seq": 2048, "batch": 4}]}

and the answer on stdout is one JSON object: the versions (PyTorch, CUDA, cuDNN, NCCL, driver), the
device, and per benchmark the samples per second, the step time, the peak memory and how it ran. One
line per benchmark goes to stderr as it runs. Synthetic data on the device; warm-up steps (and
torch.compile's compilation) excluded; timed steps between two device synchronisations.

How the models train, as practitioners do in 2026: ResNet-50 (He et al. 2015, v1.5: the stride on the 3x3
convolution) in channels-last memory under bf16 autocast with SGD; BERT-large phase 1 (Devlin et al. 2018;
NVIDIA DeepLearningExamples' recipe: post-LN encoder, the MLM loss over the masked positions only) and a
Llama-style decoder (RMSNorm, rotary positions, grouped-query attention, SwiGLU) under bf16 autocast with
scaled_dot_product_attention (flash kernels on the GPU) and fused AdamW; the decoder's blocks are compiled
one by one with torch.compile where the GPU allows (torchtitan's per-block compile).

On one node with ``"procs": N`` (or ``"gpu"``: one a visible GPU) in the plan, the script starts its N processes
itself, each with torchrun's environment, and their process group meets through a file (``init_method`` file://,
a FileStore) in a 0700 folder of its own; gloo's and NCCL's bootstrap sockets are on the loopback interface
(GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME): nothing listens on the node's network. torchrun --standalone would open a
TCPStore on every interface, unauthenticated, whose rendezvous state its agent unpickles (torch 2.13
elastic/rendezvous/dynamic_rendezvous.py _BackendRendezvousStateHolder.sync: any host of the network ran code in
the benchmark; hostile review rev51c #1). Across nodes torchrun starts them.

Under torchrun (its environment: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK) every process
trains its own batch on its own GPU (NCCL; gloo on the CPU) with the model sharded by FSDP2, as torchtitan
does: ``fully_shard`` on each block, then on the whole model, with bf16 parameters and fp32 gradient reduction
(``MixedPrecisionPolicy``) on a GPU (torch 2.13's torch.distributed.fsdp, read 2026-11). Each rank times its
own steps; the ranks' rows are gathered and the first process of each node prints the whole job's answer,
per benchmark the slowest rank's rate per GPU (the ranks step together) and every rank's; the rows travel as
JSON, never pickled (``all_gather_object`` unpickles what its peers send: torch's own warning on it).
Exit codes: 0 done (a benchmark that failed says so in its row), 3 no PyTorch here, 2 a bad plan; under
torchrun a failing benchmark ends the job (its peers would wait for it in a collective).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

NO_TORCH = 3
BAD_PLAN = 2
# torchrun's environment for each process it starts (torch/distributed/run.py, torch 2.13)
TORCHRUN_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")
# a process this script started on one node (``spawn``): the file its process group meets through
LOCAL_STORE = "GPUFLEET_BENCH_STORE"
LAUNCHER = "GPUFLEET_BENCH_LAUNCHER"  # and the process id of the script that started it


class Dist:
    """This process's place in a torchrun job; ``world == 1`` alone."""

    def __init__(self, env: dict):
        self.on = all(k in env for k in TORCHRUN_ENV)
        self.rank, self.local_rank, self.world, self.local_world, self.node = (
            (int(env[k]) for k in TORCHRUN_ENV) if self.on else (0, 0, 1, 1, 0))
        self.nodes = self.world // self.local_world if self.on else 1
        self.speaks = self.rank == 0  # progress lines: one process
        self.answers = self.local_rank == 0  # the answer: one process a node, whatever node rank 0 is on


def say(line: str, dist: Dist | None = None) -> None:
    if dist is None or dist.speaks:
        print(line, file=sys.stderr, flush=True)


def build_cnn(torch, nn, b: dict):
    """ResNet of bottleneck blocks: ``blocks`` per stage, ``width`` channels in the first."""

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, mid: int, stride: int):
            super().__init__()
            cout = 4 * mid
            self.body = nn.Sequential(
                nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(inplace=True),
                nn.Conv2d(mid, mid, 3, stride, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(inplace=True),
                nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.skip = nn.Identity() if stride == 1 and cin == cout else nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            return torch.relu(self.body(x) + self.skip(x))

    w = int(b.get("width", 64))
    layers = [nn.Conv2d(3, w, 7, 2, 3, bias=False), nn.BatchNorm2d(w), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
    cin = w
    for stage, count in enumerate(b.get("blocks", [3, 4, 6, 3])):
        mid = w * 2 ** stage
        for i in range(int(count)):
            layers.append(Bottleneck(cin, mid, 2 if i == 0 and stage > 0 else 1))
            cin = 4 * mid
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, int(b.get("classes", 1000)))]
    return nn.Sequential(*layers)


def build_encoder(torch, nn, b: dict):
    """BERT: token, position and segment embeddings, post-LN layers (GELU MLP), the MLM head tied to the
    token embeddings over the masked positions, and the next-sentence head."""
    F = torch.nn.functional
    d, heads, vocab, seq = int(b["d_model"]), int(b["heads"]), int(b["vocab"]), int(b["seq"])

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.up, self.down = nn.Linear(d, int(b["ffn"])), nn.Linear(int(b["ffn"]), d)
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)

        def forward(self, x):
            n, s, _ = x.shape
            q, k, v = self.qkv(x).view(n, s, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(n, s, d)
            x = self.ln1(x + self.out(a))
            return self.ln2(x + self.down(F.gelu(self.up(x))))

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos, self.seg = nn.Embedding(vocab, d), nn.Embedding(seq, d), nn.Embedding(2, d)
            self.ln = nn.LayerNorm(d)
            self.blocks = nn.ModuleList(Layer() for _ in range(int(b["layers"])))
            self.head = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.LayerNorm(d))
            self.bias = nn.Parameter(torch.zeros(vocab))
            self.nsp = nn.Linear(d, 2)

        def forward(self, ids, masked):
            pos = torch.arange(ids.shape[1], device=ids.device)
            x = self.ln(self.tok(ids) + self.pos(pos) + self.seg(torch.zeros_like(ids)))
            for blk in self.blocks:
                x = blk(x)
            mlm = self.head(x[:, masked]) @ self.tok.weight.t() + self.bias
            return mlm, self.nsp(x[:, 0])

    return Encoder()


def build_decoder(torch, nn, b: dict):
    """A Llama-style decoder: RMSNorm, rotary positions, grouped-query attention, SwiGLU (``gated`` false: the
    4d GELU MLP of MPT, two matrices, so that a library MPT size trains the parameters it is named by)."""
    F = torch.nn.functional
    d, heads, kv, seq = int(b["d_model"]), int(b["heads"]), int(b["kv_heads"]), int(b["seq"])
    hd, ffn, vocab, gated = d // heads, int(b["ffn"]), int(b["vocab"]), bool(b.get("gated", True))
    inv = 1.0 / (500000.0 ** (torch.arange(0, hd, 2).float() / hd))  # Llama 3's rope theta
    angles = torch.outer(torch.arange(seq).float(), inv)

    def rope(x, cos, sin):
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)  # in the activations' bf16 under autocast
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.n1, self.n2 = nn.RMSNorm(d), nn.RMSNorm(d)
            self.q, self.kv, self.o = nn.Linear(d, d, bias=False), nn.Linear(d, 2 * kv * hd, bias=False), \
                nn.Linear(d, d, bias=False)
            self.gate_up = nn.Linear(d, (2 if gated else 1) * ffn, bias=False)
            self.down = nn.Linear(ffn, d, bias=False)

        def forward(self, x, cos, sin):
            n, s, _ = x.shape
            h = self.n1(x)
            q = rope(self.q(h).view(n, s, heads, hd).transpose(1, 2), cos, sin)
            k, v = self.kv(h).view(n, s, 2, kv, hd).permute(2, 0, 3, 1, 4)
            k = rope(k, cos, sin)
            if kv != heads:  # each key/value head serves heads // kv query heads
                k, v = k.repeat_interleave(heads // kv, dim=1), v.repeat_interleave(heads // kv, dim=1)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(n, s, d)
            x = x + self.o(a)
            if not gated:
                return x + self.down(F.gelu(self.gate_up(self.n2(x))))
            g, u = self.gate_up(self.n2(x)).chunk(2, dim=-1)
            return x + self.down(F.silu(g) * u)

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.blocks = nn.ModuleList(Block() for _ in range(int(b["layers"])))
            self.norm = nn.RMSNorm(d)
            self.out = nn.Linear(d, vocab, bias=False)
            if b.get("tied"):
                self.out.weight = self.tok.weight
            self.register_buffer("cos", angles.cos(), persistent=False)
            self.register_buffer("sin", angles.sin(), persistent=False)

        def forward(self, ids):
            x = self.tok(ids)
            for blk in self.blocks:
                x = blk(x, self.cos, self.sin)
            return self.out(self.norm(x))

    return Decoder()


def step_fn(torch, kind: str, model, b: dict, dev, gpu: bool, sharded: bool = False):
    """One training step of ``model`` on synthetic data, and the samples it trains (``sharded``: FSDP2 computes
    in its bf16 parameters, without autocast)."""
    F = torch.nn.functional
    n = int(b["batch"])
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if gpu and not sharded else \
        torch.autocast(dev.type, enabled=False)
    if kind == "cnn":
        image = int(b.get("image", 224))
        x = torch.randn(n, 3, image, image, device=dev).to(memory_format=torch.channels_last)
        y = torch.randint(0, int(b.get("classes", 1000)), (n,), device=dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

        def loss():
            return F.cross_entropy(model(x), y)
    elif kind == "encoder":
        seq, vocab = int(b["seq"]), int(b["vocab"])
        ids = torch.randint(0, vocab, (n, seq), device=dev)
        masked = torch.arange(0, seq, max(1, seq // int(b.get("masked", max(1, seq * 15 // 100)))), device=dev)
        labels = torch.randint(0, vocab, (n, masked.numel()), device=dev)
        nsp = torch.randint(0, 2, (n,), device=dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=gpu)

        def loss():
            mlm, ns = model(ids, masked)
            return F.cross_entropy(mlm.reshape(-1, vocab), labels.reshape(-1)) + F.cross_entropy(ns, nsp)
    else:
        seq, vocab = int(b["seq"]), int(b["vocab"])
        ids = torch.randint(0, vocab, (n, seq + 1), device=dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=gpu)

        def loss():
            return F.cross_entropy(model(ids[:, :-1]).reshape(-1, vocab), ids[:, 1:].reshape(-1))

    def step():
        with autocast:
            value = loss()
        value.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


BUILDERS = {"cnn": build_cnn, "encoder": build_encoder, "decoder": build_decoder}


def distribute(torch, kind: str, model, gpu: bool, dev):
    """The model as its job trains it: a transformer sharded by FSDP2 as torchtitan does (each block, then the
    root; bf16 parameters and fp32 reduction on a GPU, the parameters' own fp32 on the CPU); the CNN replicated
    by DDP under autocast as NVIDIA's DeepLearningExamples train ResNet-50, since FSDP2 cannot shard its
    channels-last weights (torch 2.13: "FSDP does not support non-contiguous parameters yet"). Its name, and the
    model."""
    if kind == "cnn":
        from torch.nn.parallel import DistributedDataParallel

        return "ddp", DistributedDataParallel(model, device_ids=[dev] if gpu else None)
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if gpu else MixedPrecisionPolicy()
    for blk in model.blocks:
        fully_shard(blk, mp_policy=mp)
    return "fsdp2", fully_shard(model, mp_policy=mp)


def run_one(torch, b: dict, plan: dict, dev, gpu: bool, dist: Dist | None = None) -> dict:
    dist = dist or Dist({})
    kind = b.get("kind")
    if kind not in BUILDERS:
        raise ValueError(f"benchmark {b.get('name')!r}: kind {kind!r} is not one of {', '.join(BUILDERS)}")
    model = BUILDERS[kind](torch, torch.nn, b).to(dev)
    if kind == "cnn":
        model = model.to(memory_format=torch.channels_last)
    compiled = False
    if gpu and plan.get("compile", True) and kind == "decoder" and hasattr(torch, "compile"):
        for blk in model.blocks:  # per block: one graph reused by every layer, compiled in seconds
            blk.compile()
        compiled = True
    sharding = None
    if dist.on:
        sharding, model = distribute(torch, kind, model, gpu, dev)
    step = step_fn(torch, kind, model, b, dev, gpu, sharded=sharding == "fsdp2")
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    if gpu:
        torch.cuda.reset_peak_memory_stats()
    began = time.perf_counter()
    for _ in range(int(plan.get("warmup", 3))):
        step()
    sync()
    warm = time.perf_counter() - began
    steps = int(plan.get("steps", 10))
    began = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    seconds = (time.perf_counter() - began) / steps
    per_sample = int(b["seq"]) if kind == "decoder" else 1
    row = {"name": b["name"], "kind": kind, "batch": int(b["batch"]), "steps": steps, "step_s": seconds,
           "samples_per_s": int(b["batch"]) * per_sample / seconds, "unit": "tok" if kind == "decoder" else
           ("seq" if kind == "encoder" else "img"), "warmup_s": warm, "compiled": compiled,
           # after fully_shard a parameter is a DTensor whose numel() is the global tensor's (torch 2.13
           # torch/distributed/tensor/_api.py): the whole model's count on every rank, as alone
           "params": sum(p.numel() for p in model.parameters()),
           "precision": ("bf16 params" if sharding == "fsdp2" else "bf16 autocast") if gpu else "fp32"}
    if gpu:
        row["peak_mem_gb"] = torch.cuda.max_memory_allocated() / 1e9
    if sharding:
        row["sharding"] = sharding
        _gather(torch, row, dist, dev)
    return row


def gather_json(torch, mine: dict, world: int, dev) -> list:
    """Every rank's ``mine``, as JSON in byte tensors (lengths first, then each rank's bytes padded to the longest):
    torch.distributed.all_gather_object would unpickle what a peer sends ("known to be insecure ... will execute
    arbitrary code during unpickling", its docstring in torch 2.13 distributed_c10d.py)."""
    data = torch.tensor(list(json.dumps(mine).encode()), dtype=torch.uint8, device=dev)
    sizes = [torch.zeros(1, dtype=torch.int64, device=dev) for _ in range(world)]
    torch.distributed.all_gather(sizes, torch.tensor([data.numel()], dtype=torch.int64, device=dev))
    longest = max(int(n.item()) for n in sizes)
    padded = torch.zeros(longest, dtype=torch.uint8, device=dev)
    padded[:data.numel()] = data
    got = [torch.zeros(longest, dtype=torch.uint8, device=dev) for _ in range(world)]
    torch.distributed.all_gather(got, padded)
    return [json.loads(bytes(g[:int(n.item())].tolist()).decode()) for g, n in zip(got, sizes)]


def _gather(torch, row: dict, dist: Dist, dev) -> None:
    """Every rank's rate in ``row``; the job's rate per GPU is the slowest rank's (they step together)."""
    mine = {"rank": dist.rank, "node": dist.node, "host": platform.node(), "step_s": row["step_s"],
            "samples_per_s": row["samples_per_s"], "peak_mem_gb": row.get("peak_mem_gb")}
    ranks = gather_json(torch, mine, dist.world, dev)
    rates = [r["samples_per_s"] for r in ranks]
    slowest = min(ranks, key=lambda r: r["samples_per_s"])
    row.update({"ranks": ranks, "samples_per_s": slowest["samples_per_s"],
                "step_s": slowest["step_s"], "rank_spread": max(rates) / min(rates) - 1})
    if "peak_mem_gb" in row:
        row["peak_mem_gb"] = max(r["peak_mem_gb"] for r in ranks)


def versions(torch, gpu: bool) -> dict:
    v = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
         "cudnn": torch.backends.cudnn.version() if gpu else None, "nccl": None, "driver": None}
    if gpu:
        try:
            v["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except (AttributeError, RuntimeError, TypeError):
            pass
        smi = shutil.which("nvidia-smi")
        if smi:
            try:
                out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                                     text=True, timeout=30).stdout.split()
                v["driver"] = out[0] if out else None
            except (OSError, subprocess.SubprocessError):
                pass
    return v


def main(argv: list[str]) -> int:
    if LOCAL_STORE in os.environ:  # first: a launcher killed while this one still imports torch leaves it behind too
        _with_parent(int(os.environ[LAUNCHER]))
    if len(argv) != 2:
        say("usage: train_steps.py PLAN.json (or - for stdin)")
        return BAD_PLAN
    try:
        text = sys.stdin.read() if argv[1] == "-" else open(argv[1], encoding="utf-8").read()
        plan = json.loads(text)
        benchmarks = plan["benchmarks"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        say(f"train_steps: the plan cannot be read: {e}")
        return BAD_PLAN
    try:
        import torch
    except ImportError as e:
        print(json.dumps({"error": "no-torch", "python": sys.executable, "message": str(e)}))
        return NO_TORCH
    dist = Dist(os.environ)
    gpu = plan.get("device", "auto") != "cpu" and torch.cuda.is_available()
    if not dist.on and plan.get("procs") is not None:
        try:
            n = local_procs(torch, plan, gpu)
        except ValueError as e:
            say(f"train_steps: {e}")
            return BAD_PLAN
        return spawn(plan, n)
    dev = torch.device(f"cuda:{dist.local_rank}" if gpu else "cpu")
    if dist.on:
        if gpu:
            torch.cuda.set_device(dev)
        meet = {"init_method": f"file://{os.environ[LOCAL_STORE]}", "rank": dist.rank, "world_size": dist.world} \
            if LOCAL_STORE in os.environ else {}  # else torchrun's env://
        torch.distributed.init_process_group("nccl" if gpu else "gloo", device_id=dev if gpu else None, **meet)
    if gpu:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True
    device = {"kind": "cuda" if gpu else "cpu", "gpus": torch.cuda.device_count() if gpu else 0,
              "gpus_used": dist.world if gpu else 0,
              "name": torch.cuda.get_device_name(dev) if gpu else platform.processor() or platform.machine(),
              "memory_gb": torch.cuda.get_device_properties(dev).total_memory / 1e9 if gpu else None,
              "world_size": dist.world, "nodes": dist.nodes, "backend": ("nccl" if gpu else "gloo") if dist.on else None}
    torch.manual_seed(0)
    done = _run_all(torch, plan, benchmarks, dev, gpu, dist, device)
    if dist.on:  # together (gloo aborts a process whose peer left the group first); on a failure torchrun ends all
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
        # leave at once: a worker thread torch left joinable aborts the interpreter's teardown ("terminate called
        # without an active exception", exit -6, seen with torch 2.13 on 2 gloo ranks under load), after the result
        # was printed: torchrun would then call a finished run failed
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(done)
    return done


def local_procs(torch, plan: dict, gpu: bool) -> int:
    """How many processes the plan's ``procs`` asks for on this node: a count, or ``gpu`` (one a visible GPU, as
    torchrun's --nproc-per-node gpu)."""
    procs = str(plan["procs"])
    if procs == "gpu":
        if not gpu:
            raise ValueError("procs 'gpu' (one process a GPU) on a machine where PyTorch sees no GPU")
        return torch.cuda.device_count()
    if not procs.isdigit() or int(procs) < 1:
        raise ValueError(f"procs is a count of processes or 'gpu', not {procs!r}")
    return int(procs)


def loopback() -> str:
    """The loopback interface's name (lo on Linux, lo0 on macOS)."""
    names = [name for _, name in socket.if_nameindex()]
    return next((n for n in names if n == "lo" or n.startswith("lo") and n[2:].isdigit()), "lo")


def _with_parent(launcher: int) -> None:
    """In a process ``spawn`` started: end with ``launcher``, the script that started it (Linux's PR_SET_PDEATHSIG), so
    that a run killed at its time (bench's timeout, the watch's) leaves no process behind on the GPUs; at once where
    it is gone already (killed before this process asked)."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG (linux/prctl.h)
    except (OSError, AttributeError):  # not Linux
        pass
    if os.getppid() != launcher:
        os._exit(1)


def spawn(plan: dict, n: int) -> int:
    """Run the plan on ``n`` processes of this node, started here with torchrun's environment, whose process group
    meets through a FileStore in a 0700 folder of this run (tempfile.mkdtemp) and whose gloo/NCCL bootstrap sockets
    are on loopback (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME: github.com/pytorch/pytorch ProcessGroupGloo.cpp,
    docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html, read 2026-11-28). The first process's answer is
    this run's; as under torchrun, one that fails ends the others and the run (its exit code)."""
    folder = tempfile.mkdtemp(prefix="gpufleet-bench-job.")
    try:
        plan_file = os.path.join(folder, "plan.json")
        with open(plan_file, "w", encoding="utf-8") as f:
            json.dump({k: v for k, v in plan.items() if k != "procs"}, f)
        lo = loopback()
        env = {**os.environ, LOCAL_STORE: os.path.join(folder, "store"), "GLOO_SOCKET_IFNAME": lo,
               "NCCL_SOCKET_IFNAME": lo, LAUNCHER: str(os.getpid()), "WORLD_SIZE": str(n),
               "LOCAL_WORLD_SIZE": str(n), "GROUP_RANK": "0"}
        procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), plan_file], stdin=subprocess.DEVNULL,
                                  env={**env, "RANK": str(i), "LOCAL_RANK": str(i)})
                 for i in range(n)]
        try:
            while True:
                codes = [p.poll() for p in procs]
                failed = next((c for c in codes if c), None)
                if failed is not None or all(c == 0 for c in codes):
                    return failed if failed is not None else 0
                time.sleep(0.2)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _run_all(torch, plan: dict, benchmarks: list, dev, gpu: bool, dist: Dist, device: dict) -> int:
    results = []
    for i, b in enumerate(benchmarks, 1):
        on = f"{dist.world} processes of " if dist.on else ""
        say(f"[{i}/{len(benchmarks)}] {b.get('name')}: batch {b.get('batch')} on {on}{device['name']} ...", dist)
        if plan.get("device") == "cuda" and not gpu:  # a GPU's benchmark timed on the CPU is no GPU's measurement
            results.append({"name": b.get("name"), "kind": b.get("kind"), "error": (
                f"no CUDA GPU for this PyTorch ({torch.__version__}): not run on the CPU (a CPU-only build, or a "
                "driver that does not match the kernel: nvidia-smi says which)")})
            say(f"[{i}/{len(benchmarks)}] {b.get('name')}: failed: {results[-1]['error']}", dist)
            continue
        if dist.on:  # a failure ends the job: its peers would wait for this rank in a collective
            results.append(run_one(torch, b, plan, dev, gpu, dist))
            _said(results[-1], i, len(benchmarks), dist)
            continue
        try:
            row = run_one(torch, b, plan, dev, gpu)
        except Exception as e:  # out of memory, a compiler that fails here, a bad shape: said in the row
            row = {"name": b.get("name"), "kind": b.get("kind"), "error": f"{type(e).__name__}: {str(e)[:400]}"}
            say(f"[{i}/{len(benchmarks)}] {b.get('name')}: failed: {row['error']}")
            if gpu and b.get("kind") == "decoder" and plan.get("compile", True):
                say(f"[{i}/{len(benchmarks)}] {b.get('name')}: again without torch.compile ...")
                torch.cuda.empty_cache()
                try:
                    row = {**run_one(torch, b, {**plan, "compile": False}, dev, gpu), "compile_error": row["error"]}
                except Exception as again:
                    row["error"] += f"; without torch.compile: {type(again).__name__}: {str(again)[:400]}"
        if "error" not in row:
            _said(row, i, len(benchmarks), dist)
        results.append(row)
        if gpu:
            torch.cuda.empty_cache()
    if dist.answers:
        print(json.dumps({"versions": versions(torch, gpu), "device": device, "results": results,
                          "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}), flush=True)
    return 0


def _said(row: dict, i: int, total: int, dist: Dist) -> None:
    mem = f", peak {row['peak_mem_gb']:.1f} GB" if "peak_mem_gb" in row else ""
    ranks = f", {row['rank_spread']:.0%} between {dist.world} ranks" if "rank_spread" in row else ""
    say(f"[{i}/{total}] {row['name']}: {row['samples_per_s']:,.1f} {row['unit']}/s "
        f"({row['step_s'] * 1e3:.1f} ms a step{mem}{ranks})", dist)


if __name__ == "__main__":
    sys.exit(main(sys.argv))

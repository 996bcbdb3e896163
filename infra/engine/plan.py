"""`gpufleet plan`: run the stack's Pulumi program under Pulumi's own mock runtime.

No credentials and no Pulumi CLI are needed: ``pulumi.runtime.set_mocks`` replaces the
engine and the resource monitor inside this process. Every resource the program registers
is recorded with its inputs; provider lookups (image ids, zones offering an instance type)
are answered from the catalog. ``preview=False`` so that outputs are known and every
``apply`` runs exactly as it will under ``up``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import signal
import threading
from dataclasses import dataclass, field

from gpufleet import processes
from gpufleet.catalog.onprem import site_from_pool
from gpufleet.clouds import by_pulumi_package, candidates, cloud
from gpufleet.clouds.pools import resource_name
from gpufleet.clouds.tags import Cluster, expiry_from, format_expiry
from gpufleet.engine import spend
from gpufleet.engine.addresses import host_address
from gpufleet.engine.program import RACKS, Layout, build, layout
from gpufleet.engine.spend import Spend
from gpufleet.spec import check_cluster_name, internet_wide


@dataclass
class PlannedResource:
    type: str
    name: str
    parent: str | None  # the component (pool or network) it belongs to
    inputs: dict
    component: bool = False
    provider: bool = False
    # how an update treats it, where the program says (Pulumi's replaceOnChanges, deleteBeforeReplace,
    # ignoreChanges):
    # what a reviewer checks against what the provider's own update would do
    options: dict = field(default_factory=dict)

    def summary(self) -> str:
        c = _cloud_of(self.type)
        keys = c.mocks().COLUMNS.get(self.type) if c else None
        if keys is None:
            keys = [k for k, v in self.inputs.items() if isinstance(v, (str, int, float, bool)) and k not in ("tags", "name")][:2]
        parts = []
        for k in keys:
            if k in self.inputs and self.inputs[k] not in (None, ""):
                v = self.inputs[k]
                parts.append(f"{k}={_short(v)}")
        if c:
            parts += c.mocks().summary(self.type, self.inputs)
        return ", ".join(parts)

    def to_dict(self) -> dict:
        return {"type": self.type, "name": self.name, "parent": self.parent, "inputs": self.inputs,
                **({"options": self.options} if self.options else {})}


@dataclass
class PoolCost:
    pool: str
    provider: str
    where: str
    machine: str
    nodes: int
    gpus: int
    usd_per_node_hour: float | None
    usd_per_hour: float | None
    note: str = ""
    failover: dict | None = None  # clouds.candidates.Candidates.to_dict(): the places `up` tries, in order
    image: dict | None = None  # state.images.BuiltImage.to_dict() of the golden image it boots


@dataclass
class Plan:
    stack: str
    cluster: str
    expires_at: str
    resources: list[PlannedResource]
    pools: list[PoolCost]
    outputs: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # what a reviewer must not miss (SSH open to the Internet)
    layout: Layout | None = field(default=None, repr=False)  # what the program was built from (`up` deploys the same)
    spend: Spend | None = None  # every line of the predicted bill (engine.spend)
    # an update's: the pools whose running nodes it would replace (nodes.cloud.Replaced, from Pulumi's
    # preview), which `up` shows before asking
    replacements: list = field(default_factory=list)

    @property
    def cloud_resources(self) -> list[PlannedResource]:
        return [r for r in self.resources if not r.component and not r.provider and r.type != DYNAMIC_TYPE]

    @property
    def rack_hosts(self) -> list[PlannedResource]:
        """Bare-metal hosts the stack knows (dynamic resources: verified and fact-gathered, not created)."""
        return [r for r in self.resources if r.type == DYNAMIC_TYPE and not r.inputs.get(READER_KIND)]

    @property
    def usd_per_hour(self) -> float:
        return sum(p.usd_per_hour or 0.0 for p in self.pools)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.cloud_resources:
            out[r.type] = out.get(r.type, 0) + 1
        return out

    def to_dict(self) -> dict:
        return {"stack": self.stack, "cluster": self.cluster, "expires_at": self.expires_at,
                "usd_per_hour": self.usd_per_hour, "unpriced_pools": [p.pool for p in self.pools if p.usd_per_hour is None],
                "pools": [p.__dict__ for p in self.pools], "counts": self.counts(),
                "resources": [r.to_dict() for r in self.cloud_resources], "outputs": self.outputs,
                "warnings": self.warnings, "spend": self.spend.to_dict() if self.spend else None}


def pool_costs(lay: Layout, stack, cat) -> list[PoolCost]:
    """What each pool costs per hour: catalog prices for cloud pools, the site model for racks."""
    out = []
    for p in lay.pools:
        out.append(PoolCost(p.name, p.pool.provider, p.pool.region, p.instance.name, p.pool.nodes,
                            p.pool.nodes * p.instance.gpu_count, p.usd_per_node_hour, p.usd_per_hour,
                            "; ".join(x for x in (_elastic_note(p.pool, p.usd_per_node_hour), p.price_note) if x),
                            image=p.image.to_dict() if p.image else None))
    for p in stack.pools:
        if not p.on_rack:
            continue
        price, note = None, "no site_costs: give purchase price, power and utilization to price the rack"
        if p.site_costs:
            price, note = site_from_pool(p, cat, stack.source).usd_per_node_hour(), ""
        machine = f"{p.gpus_per_node}x {cat.gpu(p.gpu).name}" if p.gpu else "a host without GPUs"  # a controller
        out.append(PoolCost(p.name, p.provider, p.site, machine, p.nodes, p.nodes * (p.gpus_per_node or 0), price,
                            None if price is None else price * p.nodes, note))
    order = {p.name: i for i, p in enumerate(stack.pools)}
    return sorted(out, key=lambda c: order[c.pool])


def _elastic_note(pool, per_node: float | None) -> str:
    """What the plan says of an elastic pool: priced at its min (what `up` brings up), and at most what."""
    if pool.size is None:
        return ""
    most = f", up to ${per_node * pool.size.max:,.2f}/h at max" if per_node is not None else ""
    return (f"elastic {pool.size.min}-{pool.size.max}: priced at its min, what `up` brings up{most} (`gpufleet "
            "scale`; the budget check counts max)")


def cluster_for(stack, name: str | None = None, now: dt.datetime | None = None,
                expires_at: dt.datetime | None = None, created_by: dict[str, str] | None = None) -> Cluster:
    now = now or dt.datetime.now(dt.timezone.utc)
    return Cluster(name=check_cluster_name(name) if name else stack.name, stack=stack.name, owner=stack.owner,
                   expires_at=expires_at or expiry_from(now, stack.ttl_delta), created_by=created_by or {})


def plan(stack, cat, *, cluster: Cluster | None = None, progress=None, workers: int | None = None,
         lay: Layout | None = None, attempts: bool = False, refresh_images: bool = False) -> Plan:
    """Run the program under mocks and return every resource it registers, with costs.

    A large stack is split by pools over ``workers`` processes (default: the CPUs this
    process may use); each runs the same program for its pools, and the network resources
    the shards share are kept once. ``lay``: the layout to render (default: the stack's own;
    an attempt of failover has pools placed at reservations). ``attempts``: each failover place
    also carries the request its attempt sends (``attempt_request``, one more rendering per place:
    `plan` shows them, `up` has no need). ``refresh_images``: the program as `up --refresh-image` runs it.
    """
    cluster = cluster or cluster_for(stack)
    lay = lay or layout(stack, cat)
    costs = pool_costs(lay, stack, cat)
    pools = {p.name: p for p in stack.pools}
    jobs: list[tuple] = []  # (pool, place, where its request is shown)
    for c in costs:
        if pools[c.pool].failover is not None or pools[c.pool].reservations:
            places = candidates.for_pool(stack, pools[c.pool], cat)
            c.failover = places.to_dict()
            jobs += [(pools[c.pool], place, shown) for place, shown in
                     zip(places.ordered if attempts else [], c.failover["candidates"])]
    for (_, _, shown), request in zip(jobs, _attempt_requests(stack, cat, cluster, [j[:2] for j in jobs], workers)):
        shown["request"] = request
    resources: list[PlannedResource] = []
    outputs: dict = {}
    if lay.pools:
        shards = _shards(lay, workers)
        if len(shards) == 1:
            resources, outputs = _run_mocked(lay, cluster, cat, progress, refresh_images=refresh_images)
        else:
            resources, outputs = _run_sharded(lay, cluster, cat, shards, progress, refresh_images)
    warnings = []
    wide = internet_wide(stack.access.ssh_cidrs)
    if wide and lay.pools:
        warnings.append(f"SSH (port 22) is open to the whole Internet ({', '.join(wide)}) on every cloud node: "
                        "access.ssh_from_internet is true in the stack")
    out = Plan(stack.name, cluster.name, format_expiry(cluster.expires_at), resources, costs, outputs, warnings, lay)
    out.spend = spend.estimate(out, stack, cat)
    return out


def attempt_request(stack, pool, place, cat, cluster: Cluster) -> dict:
    """What the pool's attempt at ``place`` asks its cloud for: ``{type: {input: value}}`` of the
    inputs its cloud's mocks name (``REQUEST``: zones, placement group, scale set mode, the
    reservation ...), read off the program that attempt deploys for the pool (rendered alone, at
    the place, as ``nodes.cloud.failover.place`` does with the whole stack); an input the program leaves
    out is None."""
    moved = candidates.placed(pool, place)
    alone = stack.model_copy(update={"pools": [moved]})
    lay = layout(alone, cat, {pool.name: place} if place.reservation is not None else None)
    resources, _ = _run_mocked(lay, cluster, cat, None, only={pool.name})
    wanted = cloud(place.provider).mocks().REQUEST
    component = resource_name(cluster.name, pool.name)  # each cloud's program names the pool so
    out: dict[str, dict] = {}
    for r in resources:
        if r.parent == component and r.type in wanted:
            out[r.type] = {key: _input(r.inputs, key) for key in wanted[r.type]}
    return out


_ATTEMPTS: tuple | None = None  # what the attempts' workers render: set before forking, or by their initializer


def _attempts_input(*args) -> None:
    global _ATTEMPTS
    _ATTEMPTS = args


def _attempt_worker(i: int) -> dict:
    stack, cat, cluster, jobs = _ATTEMPTS
    pool, place = jobs[i]
    return attempt_request(stack, pool, place, cat, cluster)


def _attempt_requests(stack, cat, cluster: Cluster, jobs: list[tuple], workers: int | None) -> list[dict]:
    """``attempt_request`` of each (pool, place), side by side in ``workers`` processes (default: the CPUs
    this process may use), as the plan's shards are rendered (``_run_sharded``: fork while this process
    has one thread, else spawn)."""
    import multiprocessing as mp
    import threading
    from concurrent.futures import ProcessPoolExecutor

    n = min(_cpus() if workers is None else workers, len(jobs))
    if n <= 1:
        return [attempt_request(stack, pool, place, cat, cluster) for pool, place in jobs]
    forked = threading.active_count() == 1
    _attempts_input(stack, cat, cluster, jobs)
    try:
        with ProcessPoolExecutor(n, mp_context=mp.get_context("fork" if forked else "spawn"),
                                 initializer=None if forked else _attempts_input,
                                 initargs=() if forked else (stack, cat, cluster, jobs)) as ex:
            return list(ex.map(_attempt_worker, range(len(jobs))))
    finally:
        global _ATTEMPTS
        _ATTEMPTS = None


def _input(inputs: dict, key: str):
    """An input by its dotted path (``virtualMachineProfile.priority``), or None."""
    value = inputs
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


# Pulumi's one type for every dynamic resource: a rack host (clouds.baremetal.rack.RackHost), or a
# cloud's reader of what its resources' outputs leave out, which names itself in ``gpufleet_kind``
# (a type of that cloud's package, so its mocks answer it: clouds.azure.pool_vms.ScaleSetNodes)
DYNAMIC_TYPE = "pulumi-python:dynamic:Resource"
READER_KIND = "gpufleet_kind"
SHARD_MIN_NODES = 200  # below this, starting processes costs more than it saves


def _cpus() -> int:
    """The CPUs this process may use."""
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _shards(lay: Layout, workers: int | None) -> list[set[str]]:
    if workers is None:
        workers = _cpus()
    total = sum(p.pool.nodes for p in lay.pools)
    n = max(1, min(workers, len(lay.pools), total // SHARD_MIN_NODES))
    if n == 1:
        return [{p.name for p in lay.pools}]  # one shard: `only` is not used
    bins: list[tuple[int, set[str]]] = [(0, set()) for _ in range(n)]
    for p in sorted(lay.pools, key=lambda p: -p.pool.nodes):  # largest first into the lightest bin
        i = min(range(n), key=lambda k: bins[k][0])
        bins[i] = (bins[i][0] + p.pool.nodes, bins[i][1] | {p.name})
    bins[0] = (bins[0][0], bins[0][1] | {RACKS})
    return [b for _, b in bins if b]


_SHARD_INPUT: tuple | None = None  # set before forking (children read it, nothing pickled) or by spawned ones' initializer


def _shard_worker(only: set[str]):
    lay, cluster, cat, refresh_images = _SHARD_INPUT
    return _run_mocked(lay, cluster, cat, None, only=only, refresh_images=refresh_images)


def _shard_input(lay: Layout, cluster: Cluster, cat, refresh_images: bool = False) -> None:
    global _SHARD_INPUT
    _SHARD_INPUT = (lay, cluster, cat, refresh_images)


def _run_sharded(lay: Layout, cluster: Cluster, cat, shards: list[set[str]], progress, refresh_images: bool = False):
    import multiprocessing as mp

    # fork hands the shards their input without pickling it, but a forked child of a process that
    # has threads can block for ever on a lock one of them held (an earlier in-process plan leaves
    # Pulumi's mock runtime's threads behind: a 10-pool plan after it hung): then spawn and send it
    forked = threading.active_count() == 1
    _shard_input(lay, cluster, cat, refresh_images)
    resources: list[PlannedResource] = []
    seen: set[tuple[str, str]] = set()
    outputs: dict = {}
    try:
        with processes.interrupt_proof_pool(mp.get_context("fork" if forked else "spawn"), len(shards),
                                            initializer=None if forked else _shard_input,
                                            initargs=() if forked else (lay, cluster, cat, refresh_images)) as pool:
            for res, outs in pool.imap(_shard_worker, shards):
                for r in res:
                    if (r.type, r.name) not in seen:
                        seen.add((r.type, r.name))
                        resources.append(r)
                outputs.setdefault("pools", {}).update(outs.get("pools", {}))
                outputs.setdefault("cluster", outs.get("cluster"))
                if progress:
                    progress(len(res))
    finally:
        global _SHARD_INPUT
        _SHARD_INPUT = None
    return resources, outputs


class _Interrupted(Exception):
    """What the mocks answer Pulumi once Ctrl-C was pressed: an ordinary failure its runtime ends on."""


@contextlib.contextmanager
def _interrupt_deferred():
    """Ctrl-C while Pulumi's mock runtime runs the program. Pulumi catches even KeyboardInterrupt
    from the program and waits for every outstanding call before raising it again (pulumi 3.272,
    runtime/stack.py run_pulumi_func), and one raised inside its event loop leaves a call that
    never ends: `plan` hung for ever, or printed asyncio's tracebacks (issue 47, item 3). So here
    Ctrl-C only sets a flag (the yielded callable reads it): the mocks then refuse every further
    resource and lookup with an ordinary error, the program fails at its next resource, and the
    interrupt is raised here, outside the loop. A second Ctrl-C interrupts at once, as before."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield lambda: False  # a pool's worker (SIGINT ignored) or a caller with its own handler
        return
    pressed = threading.Event()

    def on_sigint(signum, frame):
        pressed.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    signal.signal(signal.SIGINT, on_sigint)
    try:
        yield pressed.is_set
    except Exception:
        if pressed.is_set():
            raise KeyboardInterrupt from None
        raise
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if pressed.is_set():
        raise KeyboardInterrupt


def _run_mocked(lay: Layout, cluster: Cluster, cat, progress, only: set[str] | None = None,
                refresh_images: bool = False):
    # the program first: it loads each cloud's SDK through its loader, which names the extra to
    # install when Pulumi or the provider is missing (importing pulumi here first would not)
    program = build(lay, cluster, plan=True, only=only, refresh_images=refresh_images)
    import pulumi
    from pulumi.runtime import mocks as pmocks

    with _interrupt_deferred() as interrupted:
        recorder = _Mocks(cat, progress, interrupted)
        monitor = _Monitor(recorder)
        pmocks.set_mocks(recorder, project="gpufleet", stack=cluster.name, preview=False, monitor=monitor)
        captured: dict = {}
        root = pulumi.runtime.get_root_resource()
        root.outputs.clear()

        @pulumi.runtime.test
        def run():
            program()
            return pulumi.Output.from_input(dict(root.outputs)).apply(lambda v: captured.setdefault("outputs", v))

        run()
    return recorder.resources, captured.get("outputs", {})


class _Monitor:
    """Wraps Pulumi's MockMonitor to remember each resource's parent component and the options that
    decide what an update does to it."""

    def __new__(cls, mocks):
        from pulumi.runtime.mocks import MockMonitor

        class Monitor(MockMonitor):
            def RegisterResource(self, request):
                mocks.parents[(request.type, request.name)] = request.parent
                options = {"replaceOnChanges": sorted(request.replaceOnChanges),
                           "deleteBeforeReplace": request.deleteBeforeReplace,
                           "ignoreChanges": sorted(request.ignoreChanges)}
                mocks.options[(request.type, request.name)] = {k: v for k, v in options.items() if v}
                return super().RegisterResource(request)

        return Monitor(mocks)


class _Mocks:
    """Answers resource registrations and lookups as the clouds would (each cloud's ``mocks``),
    from the catalog; it is also the ``ctx`` those get (``subnets``, ``memo``, ``host``)."""

    def __new__(cls, cat, progress, interrupted):
        from pulumi.runtime import Mocks

        class M(Mocks):
            def __init__(self):
                self.resources: list[PlannedResource] = []
                self.parents: dict = {}
                self.options: dict = {}  # (type, name) -> the update options the program gave it
                self.subnets: dict[str, str] = {}  # subnet id -> CIDR (the clouds' mocks fill it in)
                self.memo: dict = {}  # what a cloud's mocks keep for later resources
                self.regions: dict[str, str] = {}  # provider name -> region

            def new_resource(self, args):
                if interrupted():
                    raise _Interrupted("interrupted")
                typ, name, inputs = args.typ, args.name, dict(args.inputs)
                parent = self.parents.get((typ, name))
                pname = _name_from_urn(parent) if parent else None
                c = _cloud_of(inputs.get(READER_KIND) or typ)
                rid = (c.mocks().ID_PREFIX.get(typ, "") if c else "") + \
                    hashlib.sha1(f"{typ}/{name}".encode()).hexdigest()[:17]
                state = dict(inputs)
                custom = bool(getattr(args, "custom", True))
                # a cloud's dynamic resource is shown as the kind it names (clouds.gcp.pool_vms.BulkInstances),
                # without the pickled provider Pulumi passes it (code, not a setting anyone reviews)
                shown = inputs.get(READER_KIND) or typ if typ == DYNAMIC_TYPE else typ
                listed = {k: v for k, v in inputs.items() if k != "__provider"} if shown != typ else inputs
                self.resources.append(PlannedResource(shown, name, pname, listed, component=not custom,
                                                      provider=typ.startswith("pulumi:providers:"),
                                                      options=self.options.get((typ, name), {})))
                if typ.startswith("pulumi:providers:"):
                    self.regions[name] = inputs.get("region") or inputs.get("location") or ""
                elif c:
                    c.mocks().resource(inputs.get(READER_KIND) or typ, name, inputs, rid, state, self)
                state.setdefault("name", inputs.get("name") or name)
                if progress:
                    progress(1)
                return [rid, state]

            def address(self, subnet_id, index: int):
                """The ``index``-th address a cloud hands out in a subnet the mocks have seen (else None)."""
                cidr = self.subnets.get(subnet_id)
                return host_address(cidr, index) if cidr else None

            def call(self, args):
                if interrupted():
                    raise _Interrupted("interrupted")
                c = _cloud_of(args.token)
                answer = c.mocks().call(args.token, args.args, self.regions.get(_provider_name(args.provider), ""),
                                        cat) if c else None
                return answer or {}

        return M()


def _cloud_of(type_or_token: str):
    """The cloud whose Pulumi package a resource type or function token belongs to (None: Pulumi's own)."""
    return by_pulumi_package(type_or_token.split(":", 1)[0])


def _name_from_urn(urn: str) -> str:
    return urn.rsplit("::", 1)[-1]


def _provider_name(ref: str | None) -> str:
    # a provider reference is "<urn>::<id>"; the urn ends with "::<name>"
    if not ref:
        return ""
    return ref.split("::")[-2] if ref.count("::") >= 2 else ref


def _short(v) -> str:
    if isinstance(v, float) and v.is_integer():
        v = int(v)  # the mock runtime hands numbers over as floats
    s = str(v)
    return s if len(s) <= 60 else s[:57] + "..."

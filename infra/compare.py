"""Offers x workload -> a ranked price/performance report."""

from __future__ import annotations

import dataclasses
import datetime as dt
import fnmatch
from dataclasses import dataclass, field

from gpufleet.catalog import Catalog, Offer, age_in_days, consumption
from gpufleet.errors import InputError
from gpufleet.perf import measured
from gpufleet.perf.llm import DEFAULT_GLOBAL_BATCH
from gpufleet.perf.model import Scenario, error_band, predict
from gpufleet.perf.workloads import Workload
from gpufleet.providers import CLOUDS

# Storage assumptions when the request does not name one (stated in every report).
LOCAL_NVME_MBPS = 2000.0  # dataset staged on the node's local NVMe, per node
NETWORK_DISK_MBPS = 1000.0  # else a network block volume (EBS gp3 / PD / managed disk max)
DEFAULT_EPOCHS = {"cnn": 90.0, "transformer": 1.0}  # 90: the standard ImageNet schedule
CHINCHILLA_TOKENS_PER_PARAM = 20.0  # Hoffmann et al. 2022
# an answer slower than this asks whether more nodes would do (a month: what a training run is given)
LONG_H = 30 * 24.0
MORE_NODES = (2, 4, 8, 16, 32, 64, 128)  # the node counts tried then
MORE_NODES_OFFERS = 6  # for this many instance types, those with the most GPU memory per node


@dataclass
class Request:
    workload: Workload
    epochs: float | None = None
    tokens: float | None = None
    gpus: list[str] = field(default_factory=list)  # canonical GPU names
    min_gpus: int | None = None  # total GPUs in the cluster
    providers: list[str] = field(default_factory=list)
    regions: list[str] = field(default_factory=list)  # names or globs (eu-*, asia-*)
    spot: bool = False
    max_price: float | None = None  # USD per hour for the whole cluster
    nodes: list[int] = field(default_factory=lambda: [1])
    precision: str = "mixed"
    framework: str = "pytorch"  # perf.model.FRAMEWORKS
    batch_per_gpu: int | None = None
    storage: str | None = None  # nvme | network | lustre:<MB/s> | <MB/s>
    layout: str | None = None  # LLMs: a pinned layout ("tp4 pp2 dp8"); None: the one practice would pick
    global_batch: float | None = None  # LLMs: tokens per optimizer step (None: 4M)
    deadline_h: float | None = None  # per instance type, the cheapest node count that trains it within this
    # stack pools: (provider, region, instance, nodes, spot, storage or None)
    only: list[tuple[str, str, str, int, bool, str | None]] | None = None
    # the user's recorded measurements (perf.measured, `gpufleet bench --record`); None: those in their data folder
    measured: list | None = None


@dataclass
class Row:
    provider: str
    region: str
    instance: str
    gpu: str
    gpus_per_node: int
    nodes: int
    market: str
    usd_per_hour: float
    throughput: float
    unit: str
    time_to_train_h: float
    cost_to_train_usd: float
    usd_per_pflop_hour: float
    bottleneck: str
    scaling_efficiency: float
    precision: str
    feasible: bool
    reason: str
    price_parts: list[dict]
    price_as_of: str
    storage: str
    discount: float = 0.0  # the negotiated discount taken off its list prices (config `discounts:`)
    error_band: float = 0.0  # the model's typical relative error for such a prediction (out of fold)
    layout: str = "data parallel"  # how the model is split across the GPUs (LLMs: e.g. "tp8 pp4 dp16")
    runner_up: str = ""  # LLMs: the fastest other layout and how it compares
    tags: list[str] = field(default_factory=list)  # cheapest, fastest, within-error, measured (perf.measured)
    rank: int | None = None  # by cost to train; an offer that cannot run it has none

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["total_gpus"] = self.total_gpus
        if not self.feasible:  # it cannot run the workload: no time, cost or value to train
            d.update(time_to_train_h=None, cost_to_train_usd=None, usd_per_pflop_hour=None)
        return d


@dataclass
class Report:
    workload: str
    unit: str
    samples: float
    sample_label: str
    assumptions: list[str]
    rows: list[Row]
    skipped: list[dict]
    catalog_as_of: str  # the oldest list price shown (each row is dated by its own source)
    catalog_age_days: int
    stale: bool
    max_age_days: int = 90
    left_out: dict[str, str] = field(default_factory=dict)  # stack pools that could not be compared, and why
    catalog_newest: str = ""  # the newest list price shown
    spot_as_of: str | None = None  # the spot snapshot's date, when spot offers are shown (dated apart from list prices)
    spot_age_days: int | None = None
    more_nodes: dict | None = None  # the answer needs more nodes than asked: the cheapest that would do
    # objects of the team's store left out of the measured layer (not of its format): key -> why
    measured_left_out: dict = field(default_factory=dict)

    @property
    def feasible(self) -> list[Row]:
        """The offers that can run the workload, ranked by cost to train."""
        return [r for r in self.rows if r.feasible]

    @property
    def infeasible(self) -> list[Row]:
        return [r for r in self.rows if not r.feasible]

    def to_dict(self) -> dict:
        return {"workload": self.workload, "unit": self.unit, "samples_to_train": self.samples,
                "samples_label": self.sample_label, "assumptions": self.assumptions,
                "catalog_as_of": self.catalog_as_of, "catalog_newest": self.catalog_newest,
                "catalog_age_days": self.catalog_age_days,
                "catalog_stale": self.stale, "catalog_max_age_days": self.max_age_days,
                "spot_as_of": self.spot_as_of, "spot_age_days": self.spot_age_days,
                "offers": [r.to_dict() for r in self.feasible], "infeasible": [r.to_dict() for r in self.infeasible],
                "more_nodes": self.more_nodes, "skipped": self.skipped, "left_out": self.left_out,
                "measured_left_out": self.measured_left_out}


def _storage_for(req: Request, offer: Offer, pool_storage: str | None = None) -> tuple[float, bool, str]:
    s = req.storage or pool_storage
    if s in (None, "auto"):
        if offer.instance.local_nvme_gb > 0:
            return LOCAL_NVME_MBPS, False, f"local NVMe ({LOCAL_NVME_MBPS:.0f} MB/s per node)"
        return NETWORK_DISK_MBPS, False, f"network disk ({NETWORK_DISK_MBPS:.0f} MB/s per node)"
    if s == "nvme":
        return LOCAL_NVME_MBPS, False, f"local NVMe ({LOCAL_NVME_MBPS:.0f} MB/s per node)"
    if s == "network":
        return NETWORK_DISK_MBPS, False, f"network disk ({NETWORK_DISK_MBPS:.0f} MB/s per node)"
    kind, _, num = s.partition(":") if ":" in s else ("shared", "", s)
    try:
        mbps = float(num)
    except ValueError:
        raise InputError(f"--storage {s!r} is not understood",
                         "use nvme, network, lustre:<MB/s>, nfs:<MB/s> or a number of MB/s") from None
    if mbps <= 0:
        raise InputError(f"--storage {s!r}: throughput must be positive")
    return mbps, True, f"{kind} ({mbps:.0f} MB/s shared)"


def _batch_words(req: Request) -> str:
    w = req.workload
    if w.family != "llm":
        return f"precision {req.precision}; per-GPU batch {req.batch_per_gpu or w.batch_per_gpu}"
    tokens = req.global_batch or (None if req.batch_per_gpu else DEFAULT_GLOBAL_BATCH)
    batch = f"{tokens / 2**20:g}M tokens a step" if tokens else f"{req.batch_per_gpu:,} tokens per GPU a step"
    layout = (f"layout {req.layout} as given" if req.layout else "layout: the fastest that fits, or a simpler one "
              "(fewer parallel dimensions) within the model's error of it")
    return f"precision {req.precision}; sequence {w.seq_len:,} tokens; global batch {batch}; {layout}"


def samples_to_train(req: Request) -> tuple[float, str]:
    w = req.workload
    if w.family == "llm":
        if req.epochs:
            raise InputError("an LLM workload is sized in tokens, not epochs", "use --tokens, e.g. --tokens 1e12")
        tokens = req.tokens or CHINCHILLA_TOKENS_PER_PARAM * w.params
        return tokens, f"{tokens:.3g} tokens" + ("" if req.tokens else " (20 per parameter, Chinchilla)")
    if req.tokens:
        raise InputError(f"{w.name} is sized in epochs, not tokens", "use --epochs")
    if not w.dataset_samples:
        raise InputError(f"workload {w.name} has no dataset_samples", "add dataset_samples to its definition")
    epochs = req.epochs or DEFAULT_EPOCHS[w.family]
    return epochs * w.dataset_samples, f"{epochs:g} epochs x {w.dataset_samples:,.0f} samples"


def region_matches(patterns: list[str], region: str) -> bool:
    """A region named, or matched by a glob (eu-*, asia-*), in ``patterns``."""
    return any(region == p or fnmatch.fnmatchcase(region, p) for p in patterns)


def _selected(req: Request, offer: Offer, regions: set[str] | None) -> bool:
    if req.only is not None:
        return any(offer.provider == p and offer.region == r and offer.instance.name == i
                   and (offer.market == ("spot" if s else "ondemand") or offer.market == "owned")
                   for p, r, i, _, s, _st in req.only)
    if req.providers and offer.provider not in req.providers:
        return False
    if regions is not None and offer.provider in CLOUDS and offer.region not in regions:
        return False
    if req.gpus and offer.gpu.name not in req.gpus:
        return False
    if offer.market == "spot" and not req.spot:
        return False
    if req.spot and offer.market == "ondemand":
        return False
    return True


def compare(cat: Catalog, req: Request, today: dt.date | None = None) -> Report:
    if req.measured is None:
        req = dataclasses.replace(req, measured=measured.read())
    samples, label = samples_to_train(req)
    w = req.workload
    skipped: list[dict] = []
    predictions: dict[tuple, object] = {}  # the same machine in many regions is one prediction
    all_offers = cat.offers()
    # the globs matched once against the regions, not once per offer
    regions = {o.region for o in all_offers if region_matches(req.regions, o.region)} if req.regions else None
    offers = [o for o in all_offers if _selected(req, o, regions)]
    unsold = [] if req.only is not None else [o for o in offers if not consumption.sold(
        o.provider, o.instance.name, o.market)]  # a stack's own pools are valid: theirs are bought their way
    if unsold:
        offers = [o for o in offers if consumption.sold(o.provider, o.instance.name, o.market)]
    if req.deadline_h is not None and req.only is None:
        rows = _deadline_rows(req, offers, samples, predictions)
    else:
        rows = _asked_rows(req, offers, samples, predictions, skipped)
    rows.sort(key=lambda r: (not r.feasible, r.cost_to_train_usd, r.time_to_train_h))
    feasible = [r for r in rows if r.feasible]
    for i, r in enumerate(feasible, 1):
        r.rank = i
    if feasible:
        feasible[0].tags.append("cheapest")
        min(feasible, key=lambda r: (r.time_to_train_h, r.cost_to_train_usd)).tags.append("fastest")
        best = feasible[0]
        for r in feasible[1:]:  # its cost is within the two predictions' error of the cheapest: a tie, not a loss
            if r.cost_to_train_usd <= best.cost_to_train_usd * (1 + max(r.error_band, best.error_band)):
                r.tags.append("within-error")
    # the list prices' age: those shown (a spot-only answer: the spot snapshot's, which is dated apart too)
    listed = [r.price_as_of for r in rows if r.market == "ondemand"] or [
        r.price_as_of for r in rows if r.market == "spot"] or [min(p.as_of for p in cat.prices)]
    as_of, newest = min(listed), max(listed)
    age = age_in_days(as_of, today)
    spot_as_of = min((r.price_as_of for r in rows if r.market == "spot"), default=None)
    spot_age = age_in_days(spot_as_of, today) if spot_as_of else None
    assumptions = [
        f"{label}",
        _batch_words(req) + f"; framework {req.framework}"
        + (" (PyTorch unless --framework says otherwise)" if req.framework == "pytorch" else ""),
        "storage: " + (req.storage or f"local NVMe where the node has it ({LOCAL_NVME_MBPS:.0f} MB/s), "
                       f"else a network disk ({NETWORK_DISK_MBPS:.0f} MB/s); datasets that fit in half the "
                       "nodes' RAM are read from storage once"),
        "throughput from gpufleet's calibrated model; its typical error for such predictions is "
        f"±{error_band(w.family, False):.0%} on one GPU, ±{error_band(w.family, True):.0%} on several (out of fold: "
        "each source predicted by a fit without it; gpufleet calibrate); offers tagged within-error cost no more than "
        "that above the cheapest",
        "$/PFLOP-hour: cluster price per hour of one delivered PFLOP/s of training math",
    ]
    assumptions += _measured_words(req, rows, cat, predictions)
    if req.deadline_h is not None:
        assumptions.append(f"deadline {req.deadline_h / 24:g} days: per instance type, the node count of "
                           f"{', '.join(map(str, DEADLINE_NODES))} that trains it in time for the least")
    if spot_as_of:
        assumptions.append(f"spot prices: a snapshot as of {spot_as_of} ({spot_age} days old), "
                           "the lowest zone's price per region; spot prices move hourly and spot or preemptible nodes can "
                           "be preempted at short notice: checkpoint, or add current quotes under `prices:`")
    for (provider, market, how), names in _by_sold(unsold).items():
        assumptions.append(f"not ranked {consumption.WORDS[market]}: {', '.join(names)} ({provider} sells them only "
                           f"{how}; a pool with spot, flex_start or reservations brings them up"
                           + ("" if req.spot else ", and --spot ranks their spot offers") + ")")
    if req.spot and not rows:
        assumptions.append("no spot prices in the catalog for this selection: add quotes under `prices:` in the "
                           "config (market: spot)")
    more = None
    if req.only is None and req.deadline_h is None and (not feasible or min(r.time_to_train_h for r in feasible) > LONG_H):
        more = _more_nodes(req, offers, max(req.nodes), samples, predictions, runs_at_all=not feasible)
    return Report(workload=w.name, unit=f"{w.unit}/s", samples=samples, sample_label=label,
                  assumptions=assumptions, rows=rows, skipped=skipped, catalog_as_of=as_of, catalog_newest=newest,
                  catalog_age_days=age, stale=age > cat.max_age_days, max_age_days=cat.max_age_days,
                  spot_as_of=spot_as_of, spot_age_days=spot_age, more_nodes=more)


def _row(req: Request, offer: Offer, nodes: int, pool_storage: str | None, samples: float, predictions: dict) -> Row:
    """One offer at ``nodes`` nodes for the request: price, predicted speed, time and cost to train.
    ``predictions`` keeps each machine's prediction (the same machine in many regions is one)."""
    w, it = req.workload, offer.instance
    total = it.gpu_count * nodes
    price = offer.usd_per_hour * nodes
    mbps, shared, storage_label = _storage_for(req, offer, pool_storage)
    key = (offer.gpu.name, it.gpu_count, nodes, it.network_gbps, it.vcpus, mbps, shared, it.memory_gib)
    mine = _speed(req, offer.gpu, predictions)
    pr = predictions.get(key)
    if pr is None:
        pr = predictions[key] = predict(Scenario(
            workload=w, gpu=offer.gpu, gpus_per_node=it.gpu_count, nodes=nodes, precision=req.precision,
            batch_per_gpu=req.batch_per_gpu, network_gbps=it.network_gbps, vcpus=it.vcpus, storage_mbps=mbps,
            storage_shared=shared, node_memory_gib=it.memory_gib, framework=req.framework, layout=req.layout,
            global_batch_tokens=req.global_batch, measured_speed=mine.factor if mine and mine.factor else 1.0))
    first_epoch = min(samples, w.dataset_samples or samples)
    hours = (first_epoch / pr.throughput_first_epoch + (samples - first_epoch) / pr.throughput) / 3600.0
    delivered_pflops = pr.throughput * w.train_flops / 1e15
    return Row(
        provider=offer.provider, region=offer.region, instance=it.name, gpu=offer.gpu.name,
        gpus_per_node=it.gpu_count, nodes=nodes, market=offer.market, usd_per_hour=price,
        throughput=pr.throughput, unit=f"{w.unit}/s", time_to_train_h=hours, cost_to_train_usd=hours * price,
        usd_per_pflop_hour=price / delivered_pflops if delivered_pflops > 0 else float("inf"),
        bottleneck=pr.bottleneck, scaling_efficiency=pr.scaling_efficiency, precision=pr.precision,
        feasible=pr.feasible, reason=pr.reason,
        price_parts=[{"what": p.what, "usd_per_hour": p.usd_per_hour, "source": p.source, "as_of": p.as_of,
                      "quote": p.quote} for p in offer.parts],
        discount=offer.discount, price_as_of=offer.as_of, storage=storage_label,
        error_band=error_band(w.family, total > 1), layout=pr.layout, runner_up=pr.runner_up,
        tags=["measured"] if mine and mine.factor else [])


def _speed(req: Request, gpu, predictions: dict) -> measured.Speed | None:
    """The speed ``gpu``'s recorded rows give it on the request's family, worked out once a comparison (each row is
    re-predicted with today's fit); ``predictions`` is the comparison's memo."""
    key = ("measured", gpu.name, req.workload.family)
    if key not in predictions:
        predictions[key] = measured.speed(req.measured or [], gpu, req.workload.family)
    return predictions[key]


def _measured_words(req: Request, rows: list[Row], cat: Catalog, predictions: dict) -> list[str]:
    """The measured layer (what it holds, where from), then what it changed: per GPU shown, the speed its rows give
    it against the model, and the rows left out of it with why."""
    held = measured.layer(req.measured or [])
    out = [held] if held else []
    for gpu in sorted({r.gpu for r in rows}):
        mine = _speed(req, cat.gpu(gpu), predictions)
        if mine is None:
            continue
        if mine.factor:
            last = max(mine.used, key=lambda m: m.when)
            where = ", ".join(filter(None, [last.instance, last.host, last.when[:10],
                                            f"PyTorch {last.versions['torch']}" if last.versions.get("torch") else ""]))
            out.append(f"measured: {gpu} predicted at {mine.factor:.2f}x the model's speed for {req.workload.family} "
                       f"workloads, from {len(mine.used)} row(s) of your `gpufleet bench --record` (single-node, each "
                       f"held to today's model; latest {last.workload}: {where}); rows tagged measured")
        if mine.left_out:
            out.append(f"measured: {gpu} rows not applied: " + "; ".join(
                f"{m.workload} of {m.cluster or m.host or 'unknown'} on {m.when[:10]}: {why}" for m, why in mine.left_out))
    return out


def _by_sold(unsold: list[Offer]) -> dict[tuple[str, str, str], list[str]]:
    """The offers a cloud does not sell that way: (provider, market, how it sells them) -> their types."""
    out: dict[tuple[str, str, str], list[str]] = {}
    for o in unsold:
        names = out.setdefault((o.provider, o.market, consumption.of(o.provider, o.instance.name).words()), [])
        if o.instance.name not in names:
            names.append(o.instance.name)
    return out


def _asked_rows(req: Request, offers: list[Offer], samples: float, predictions: dict, skipped: list[dict]) -> list[Row]:
    """Each offer at each node count asked (a stack's pools: at theirs); with a deadline (and a stack),
    a run that misses it cannot be ranked."""
    rows: list[Row] = []
    for offer in offers:
        runs = [(n, None) for n in req.nodes]
        if req.only is not None:
            runs = [(n, st) for p, r, i, n, _, st in req.only if (p, r, i) == (offer.provider, offer.region, offer.instance.name)]
        for nodes, pool_storage in runs:
            if offer.max_nodes is not None and nodes > offer.max_nodes:
                skipped.append({"offer": offer.key, "nodes": nodes, "reason": f"the site has {offer.max_nodes} nodes"})
                continue
            if req.min_gpus and offer.instance.gpu_count * nodes < req.min_gpus:
                continue
            if req.max_price is not None and offer.usd_per_hour * nodes > req.max_price:
                continue
            row = _row(req, offer, nodes, pool_storage, samples, predictions)
            if req.deadline_h is not None and row.feasible and row.time_to_train_h > req.deadline_h:
                row.feasible = False
                row.reason = f"takes {row.time_to_train_h / 24:.1f} days, past the deadline"
            rows.append(row)
    return rows


DEADLINE_NODES = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # the node counts a deadline search tries


def _deadline_rows(req: Request, offers: list[Offer], samples: float, predictions: dict) -> list[Row]:
    """Per instance type and market, the node count (of DEADLINE_NODES, within the price cap and the
    site's size) whose run finishes by the deadline at the least cost, at that count in every region
    that sells it; a type no count gets there in time is one infeasible row at its fastest count."""
    by_type: dict[tuple, list[Offer]] = {}
    for o in offers:
        by_type.setdefault((o.provider, o.instance.name, o.market), []).append(o)
    out: list[Row] = []
    for group in by_type.values():
        cheapest = min(group, key=lambda o: o.usd_per_hour)
        tried = []
        for n in DEADLINE_NODES:
            if (cheapest.max_nodes is not None and n > cheapest.max_nodes) or (
                    req.max_price is not None and cheapest.usd_per_hour * n > req.max_price):
                break
            if req.min_gpus and cheapest.instance.gpu_count * n < req.min_gpus:
                continue
            tried.append(_row(req, cheapest, n, None, samples, predictions))
        in_time = [r for r in tried if r.feasible and r.time_to_train_h <= req.deadline_h]
        if in_time:
            nodes = min(in_time, key=lambda r: (r.cost_to_train_usd, r.time_to_train_h)).nodes
            out += [_row(req, o, nodes, None, samples, predictions) for o in group]
            continue
        ran = [r for r in tried if r.feasible]
        if not tried:
            continue
        best = min(ran, key=lambda r: r.time_to_train_h) if ran else tried[-1]
        if ran:
            best.feasible, best.bottleneck = False, "deadline"
            best.reason = (f"cannot finish by the deadline: fastest {best.time_to_train_h / 24:.1f} days at "
                           f"{best.nodes} nodes (of {', '.join(str(r.nodes) for r in tried)} tried)")
        out.append(best)
    return out


def _more_nodes(req: Request, offers: list[Offer], asked: int, samples: float, predictions: dict,
                runs_at_all: bool = False) -> dict | None:
    """When no offer can run the workload on the nodes asked, or the best takes longer than a month:
    the cheapest of the instance types with the most GPU memory per node, at the fewest nodes that
    run it within a month; ``runs_at_all`` (nothing ran it as asked): else at the fewest that run it
    at all. None when none does, up to 128 nodes or the price cap."""
    cheapest: dict[tuple, Offer] = {}  # one offer per instance type and market: its cheapest region
    for o in offers:
        k = (o.provider, o.instance.name, o.market)
        if k not in cheapest or o.usd_per_hour < cheapest[k].usd_per_hour:
            cheapest[k] = o
    biggest = sorted(cheapest.values(), key=lambda o: -o.gpu.memory_gb * o.instance.gpu_count)[:MORE_NODES_OFFERS]
    in_time: list[Row] = []
    runs: list[Row] = []  # per offer, the fewest nodes that run it at all
    for o in biggest:
        for n in (n for n in MORE_NODES if n > asked and (o.max_nodes is None or n <= o.max_nodes)):
            if req.max_price is not None and o.usd_per_hour * n > req.max_price:
                break
            r = _row(req, o, n, None, samples, predictions)
            if r.feasible and not any(x.instance == r.instance and x.market == r.market for x in runs):
                runs.append(r)
            if r.feasible and r.time_to_train_h <= LONG_H:
                in_time.append(r)
                break
    found = in_time or (runs if runs_at_all else [])
    if not found:
        return None
    best = min(found, key=lambda r: (r.cost_to_train_usd, r.time_to_train_h))
    return {"nodes": best.nodes, "provider": best.provider, "region": best.region, "instance": best.instance,
            "market": best.market, "time_to_train_h": best.time_to_train_h, "cost_to_train_usd": best.cost_to_train_usd,
            "usd_per_hour": best.usd_per_hour, "layout": best.layout, "within_a_month": bool(in_time)}

"""The catalog's records: GPUs, instance types, prices with their parts, offers, and the
catalog that holds and looks them up (with did-you-mean). Parsing and loading is the package's."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from gpufleet.errors import NotFound

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8")
FABRICS = ("ethernet", "efa", "infiniband-hdr", "infiniband-ndr", "tcpx", "roce")


@dataclass(frozen=True)
class Gpu:
    name: str
    aliases: tuple[str, ...]
    arch: str
    memory_gb: float
    memory_bw_gbs: float
    tflops: dict[str, float]  # precision -> dense peak TFLOPS (only those that exist)
    nvlink_gbs: float
    pcie_gen: int
    tdp_w: float
    source: str
    as_of: str
    nvlink_domain: int = 0  # GPUs one NVLink fabric joins across nodes (GB200 NVL72: 72); 0: the node's own

    def peak_tflops(self, precision: str) -> float:
        """Peak dense TFLOPS at ``precision``, on the format it actually runs in (see below)."""
        return self.tflops[self.effective_precision(precision)]

    def effective_precision(self, precision: str) -> str:
        """The format ``precision`` runs in here, falling back to the next wider one.

        A GPU without fp16 tensor cores (K80) runs fp16 at its fp32 rate; bf16 on a GPU
        without bf16 (V100, T4) runs as fp16; tf32 without tf32 runs as fp32; fp8 without
        fp8 runs as bf16/fp16.
        """
        for p in _FALLBACK[precision]:
            if p in self.tflops:
                return p
        return "fp32"


_FALLBACK = {
    "fp8": ("fp8", "bf16", "fp16", "fp32"),
    "bf16": ("bf16", "fp16", "fp32"),
    "fp16": ("fp16", "bf16", "fp32"),
    "tf32": ("tf32", "fp32"),
    "fp32": ("fp32",),
}


@dataclass(frozen=True)
class InstanceType:
    provider: str
    name: str
    gpu: str
    gpu_count: int
    vcpus: int
    memory_gib: float
    network_gbps: float
    fabric: str
    efa_interfaces: int
    local_nvme_gb: float
    gpu_attach: str  # bundled | separate
    source: str
    as_of: str

    @property
    def base_machine(self) -> str:
        """For separately priced GPUs (GCP N1), the machine type the GPUs attach to."""
        return self.name.split("+", 1)[0]


@dataclass(frozen=True)
class HealthThreshold:
    """What a healthy node of ``gpu_count`` x ``gpu`` shows (health.csv); None: not judged."""

    gpu: str
    gpu_count: int
    nccl_busbw_gbs: float | None
    nccl_bytes: str | None
    copy_gbs: float | None
    ib_rate_gbps: float | None
    source: str
    as_of: str
    # where NVLink SHARP (NVLS) lifts the all-reduce above what the links carry, ``nccl_busbw_gbs`` is
    # that level: a fail only on the instance types whose own checks demand it (``nvls_instances``);
    # elsewhere a node fails below the ring level and warns below the NVLS level
    nccl_ring_busbw_gbs: float | None = None
    ring_source: str | None = None
    nvls_instances: tuple[str, ...] = ()


@dataclass(frozen=True)
class PricePart:
    what: str
    usd_per_hour: float
    source: str
    as_of: str
    quote: bool = False  # the user's own quote (config `prices:`): a price paid, no discount applies to it


@dataclass(frozen=True)
class Price:
    provider: str
    item: str
    region: str
    market: str  # ondemand | spot
    usd_per_hour: float
    source: str
    as_of: str
    parts: tuple[PricePart, ...] = ()  # what the provider bills separately (GCP: vCPUs, RAM, GPUs)
    quote: bool = False  # the user's own quote (config `prices:`)
    zones: tuple[str, ...] = ()  # the zones the source lists this price in (spot: where it was seen)


@dataclass(frozen=True)
class Offer:
    """One priced way to get a node: an instance type in a region and market, or a rack."""

    provider: str
    region: str
    instance: InstanceType
    gpu: Gpu
    market: str
    usd_per_hour: float  # per node, after discounts
    parts: tuple[PricePart, ...]
    discount: float = 0.0
    max_nodes: int | None = None  # an owned rack has a fixed number of nodes
    zones: tuple[str, ...] = ()  # where the price's source lists it (empty: not said)

    @property
    def as_of(self) -> str:
        return min(p.as_of for p in self.parts)

    @property
    def key(self) -> str:
        return offer_key(self.provider, self.region, self.instance.name, self.market)


def offer_key(provider: str, region: str, instance: str, market: str) -> str:
    return f"{provider}/{region}/{instance}/{market}"


@dataclass
class Catalog:
    gpus: dict[str, Gpu]
    instances: dict[tuple[str, str], InstanceType]
    prices: list[Price]
    regions: dict[str, dict[str, str]]  # provider -> region -> geo
    zones: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)  # (provider, region) -> zones
    sites: list = field(default_factory=list)  # on-prem racks (gpufleet.catalog.onprem.Site)
    discounts: dict[str, float] = field(default_factory=dict)
    max_age_days: int = 90  # warn when prices are older (config: catalog_max_age_days)
    # from a catalog refresh: (provider, instance type) -> region -> zones offering it, and what
    # the provider's own instance API said of the type (fetch.InstanceFacts)
    offered: dict[tuple[str, str], dict[str, tuple[str, ...]]] = field(default_factory=dict)
    facts: dict[tuple[str, str], object] = field(default_factory=dict)
    _alias: dict[str, str] = field(default_factory=dict, repr=False)
    _offers: dict[str, Offer] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        for g in self.gpus.values():
            self._alias[g.name.lower()] = g.name
            for a in g.aliases:
                self._alias[a.lower()] = g.name

    # --- lookups with did-you-mean -------------------------------------------------
    def gpu(self, name: str) -> Gpu:
        canon = self._alias.get(name.lower())
        if canon is None:
            raise NotFound("GPU", name, [g.name for g in self.gpus.values()])
        return self.gpus[canon]

    def has_gpu(self, name: str) -> bool:
        return name.lower() in self._alias

    def instance(self, provider: str, name: str) -> InstanceType:
        it = self.instances.get((provider, name))
        if it is None:
            lowered = {n.lower(): n for (p, n) in self.instances if p == provider}
            if name.lower() in lowered:
                return self.instances[(provider, lowered[name.lower()])]
            raise NotFound(f"{provider} instance type", name,
                           [n for (p, n) in self.instances if p == provider])
        return it

    def instance_regions(self, provider: str, name: str) -> list[str]:
        it = self.instance(provider, name)
        items = {it.name} if it.gpu_attach == "bundled" else {it.base_machine}
        return sorted({p.region for p in self.prices if p.provider == provider and p.item in items})

    def check_region(self, provider: str, region: str) -> None:
        if provider not in self.regions:
            return
        if region not in self.regions[provider]:
            raise NotFound(f"{provider} region", region, self.regions[provider])

    def region_zones(self, provider: str, region: str) -> tuple[str, ...]:
        return self.zones.get((provider, region), ())

    def offered_zones(self, provider: str, instance: str, region: str) -> tuple[str, ...] | None:
        """The zones of ``region`` offering ``instance`` as the provider's API last said (empty:
        not offered there, or offered without zones), or None when no refresh has asked."""
        by_region = self.offered.get((provider, instance))
        return None if by_region is None else by_region.get(region, ())

    def offer(self, provider: str, region: str, instance: str, market: str) -> Offer | None:
        """The priced offer for one instance type in a region and market, or None."""
        if self._offers is None:
            self._offers = {o.key: o for o in _build_offers(self)}
        return self._offers.get(offer_key(provider, region, instance, market))

    # --- offers --------------------------------------------------------------------
    def offers(self) -> list[Offer]:
        """Every priced (instance, region, market) plus every on-prem site."""
        return list(_build_offers(self))

    def reset_offers(self) -> None:
        """Forget the offers built so far (after prices, discounts or sites changed)."""
        self._offers = None

    def age_days(self, today: dt.date | None = None) -> int:
        return age_in_days(min(p.as_of for p in self.prices), today)


def age_in_days(as_of: str, today: dt.date | None = None) -> int:
    """Days since an ``as_of`` stamp (YYYY-MM or YYYY-MM-DD; a month counts from its 1st)."""
    today = today or dt.date.today()
    parts = [int(x) for x in as_of.split("-")]
    day = dt.date(parts[0], parts[1], parts[2] if len(parts) > 2 else 1)
    return max(0, (today - day).days)


def _build_offers(cat: Catalog):
    by_item: dict[tuple[str, str, str, str], Price] = {}
    for p in cat.prices:
        by_item[(p.provider, p.item, p.region, p.market)] = p  # later rows (overrides) win
    for (provider, _), it in cat.instances.items():
        gpu = cat.gpus[it.gpu]
        disc = cat.discounts.get(provider, 0.0)
        keys = {(r, m) for (pp, item, r, m) in by_item
                if pp == provider and item == (it.name if it.gpu_attach == "bundled" else it.base_machine)}
        for region, market in sorted(keys):
            if it.gpu_attach == "bundled":
                p = by_item[(provider, it.name, region, market)]
                parts = p.parts or (PricePart(it.name, p.usd_per_hour, p.source, p.as_of, p.quote),)
                zones = p.zones
            else:
                m = by_item[(provider, it.base_machine, region, market)]
                g = by_item.get((provider, f"gpu:{it.gpu}", region, market))
                if g is None:
                    continue  # machine priced but not its GPU in this region/market
                zones = tuple(z for z in m.zones if z in g.zones) if g.zones else m.zones
                parts = (m.parts or (PricePart(it.base_machine, m.usd_per_hour, m.source, m.as_of, m.quote),)) + (
                    PricePart(f"{it.gpu_count}x {it.gpu}", g.usd_per_hour * it.gpu_count, g.source, g.as_of,
                              g.quote),)
            # a negotiated discount is off list prices; a quote is already what is paid
            total = sum(x.usd_per_hour * (1.0 if x.quote else 1.0 - disc) for x in parts)
            listed = any(not x.quote for x in parts)
            yield Offer(provider, region, it, gpu, market, total, parts, disc if listed else 0.0, zones=zones)
    for site in cat.sites:
        yield site.offer(cat)

"""Owned racks priced like cloud offers: $/node-hour from capex, power and utilization.

    capex/h  = purchase_usd_per_node / (depreciation_years * 8760)
    power/h  = power_kw_per_node * pue * usd_per_kwh
    ops/h    = ops_usd_per_node_year / 8760
    $/node-h = (capex/h + power/h + ops/h) / utilization

Dividing by utilization charges the idle hours to the hours that do useful work, so a
rack that sits idle half the time costs twice as much per useful hour.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.catalog.model import InstanceType, Offer, PricePart

HOURS_PER_YEAR = 8760.0

# Per-node bandwidth a rack's fabric gives, in Gbps. InfiniBand and RoCE follow the HGX
# reference design of one NIC per GPU (HDR 200 Gb/s, NDR 400 Gb/s, RoCE 100 Gb/s each).
_PER_GPU_NIC = {"infiniband-hdr": 200, "infiniband-ndr": 400, "roce": 100}
_PER_NODE = {"10gbe": 10, "25gbe": 25, "100gbe": 100}


def fabric_gbps(interconnect: str | None, gpus_per_node: int) -> float:
    if interconnect in _PER_GPU_NIC:
        return float(_PER_GPU_NIC[interconnect] * gpus_per_node)
    return float(_PER_NODE.get(interconnect or "", 100))


def fabric_name(interconnect: str | None) -> str:
    return interconnect if interconnect in _PER_GPU_NIC else "ethernet"


@dataclass(frozen=True)
class Site:
    name: str
    gpu: str
    gpus_per_node: int
    nodes: int
    purchase_usd_per_node: float
    depreciation_years: float
    utilization: float
    power_kw_per_node: float
    usd_per_kwh: float
    pue: float
    ops_usd_per_node_year: float = 0.0
    vcpus: int = 64
    memory_gib: float = 512
    network_gbps: float = 100
    fabric: str = "ethernet"
    local_nvme_gb: float = 0
    source: str = "user site costs"
    as_of: str = ""

    def hourly_parts(self) -> list[tuple[str, float]]:
        u = self.utilization
        return [
            ("capex", self.purchase_usd_per_node / (self.depreciation_years * HOURS_PER_YEAR) / u),
            ("power", self.power_kw_per_node * self.pue * self.usd_per_kwh / u),
            ("ops", self.ops_usd_per_node_year / HOURS_PER_YEAR / u),
        ]

    def usd_per_node_hour(self) -> float:
        return sum(v for _, v in self.hourly_parts())

    def usd_per_gpu_hour(self) -> float:
        return self.usd_per_node_hour() / self.gpus_per_node

    def offer(self, cat) -> Offer:
        gpu = cat.gpu(self.gpu)
        it = InstanceType(
            provider="baremetal", name=f"{self.name}-node", gpu=gpu.name, gpu_count=self.gpus_per_node,
            vcpus=self.vcpus, memory_gib=self.memory_gib, network_gbps=self.network_gbps,
            fabric=self.fabric, efa_interfaces=0, local_nvme_gb=self.local_nvme_gb,
            gpu_attach="bundled", source=self.source, as_of=self.as_of,
        )
        parts = tuple(PricePart(what, v, self.source, self.as_of) for what, v in self.hourly_parts() if v > 0)
        return Offer("baremetal", self.name, it, gpu, "owned", self.usd_per_node_hour(), parts,
                     max_nodes=self.nodes)


def site_from_pool(pool, cat, source: str) -> Site:
    """The priced site for a stack's bare-metal pool that carries ``site_costs``."""
    return Site(name=pool.site, gpu=cat.gpu(pool.gpu).name, gpus_per_node=pool.gpus_per_node, nodes=pool.nodes,
                source=source, as_of="", network_gbps=fabric_gbps(pool.interconnect, pool.gpus_per_node),
                fabric=fabric_name(pool.interconnect), **pool.site_costs.model_dump())

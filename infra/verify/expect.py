"""What a healthy node of a pool shows, as the node-side checks read it (``gpufleet.nodecheck``).

From the catalog: the GPU model, its count per node (the instance type's, or the rack pool's),
memory size, TDP, PCIe generation and NVLink; the thresholds of ``health.csv`` (NCCL bus
bandwidth, copy bandwidth, InfiniBand rate) with their source. From the stack: the driver
branch and CUDA version (when the pool's formulas install them), the fabric, the mounts.

Fatal XIDs: ``nodecheck.faults.FATAL_XIDS`` (the alert rules use the same list); any other XID warns.
"""

from __future__ import annotations

from gpufleet import catalog
from gpufleet.clouds import provider
from gpufleet.nodecheck.faults import FATAL_XIDS

LEVELS = ("quick", "full")
IB_RATE = {"infiniband-ndr": 400, "infiniband-hdr": 200}  # Gb/s per port (4x NDR / 4x HDR)
# GPUDirect-TCPX on GCP a3-highgpu: the NCCL plugin the fabric state installs and the receive
# data path daemon it runs (cloud.google.com/compute/docs/gpus/gpudirect; salt/fabric)
TCPX = {"files": ["/var/lib/tcpx/lib64/libnccl-net.so", "/run/tcpx"], "processes": ["tcpgpudmarxd"]}
# boards whose NVLink goes through NVSwitches (fabric manager needed): 8-GPU HGX A100/H100/H200/B200
# boards (NVLink 600 GB/s and up); V100 SXM2 boards (300 GB/s) are a hybrid cube mesh without them
NVSWITCH_MIN_NVLINK_GBS = 600
# what every GPU node must have been able to check: a node missing these is not proven healthy
REQUIRED_GPU = ("gpu.count", "gpu.driver", "health.ecc", "health.xid", "links.pcie")
NCCL_MIN_BYTES = "1G"  # the table runs from here up to the threshold's size, doubling


def _nccl_levels(row, instance_type: str | None) -> dict:
    """The all-reduce's thresholds for what this node is: the NVLink SHARP level fails only where the
    instance type's own checks demand it (Azure's ND H100/H200 v5); elsewhere NVLS may be off or absent,
    so the node fails below the ring level and warns below the NVLS level."""
    if row is None:
        return {"min_busbw_gbs": None, "source": None}
    source = f"{row.source} ({row.as_of})"
    if row.nccl_ring_busbw_gbs is None or instance_type in row.nvls_instances:
        return {"min_busbw_gbs": row.nccl_busbw_gbs, "source": source}
    return {"min_busbw_gbs": row.nccl_ring_busbw_gbs, "source": row.ring_source,
            "warn_below_gbs": row.nccl_busbw_gbs, "warn_source": source}


def for_pool(stack, pool, cat, *, node: str = "") -> dict:
    """The expectations of one node of ``pool`` (``node``: its name in the report)."""
    gpu_name, count = _gpu_of(pool, cat)
    exp: dict = {"node": node, "gpus": {"count": 0}, "fatal_xids": list(FATAL_XIDS), "required": []}
    states = pool.salt.states

    def installs(formula: str) -> bool:
        return states is None or formula in states

    fabric = _fabric(pool, cat)
    if gpu_name and count:
        g = cat.gpu(gpu_name)
        exp["gpus"] = {"count": count, "model": g.name, "family": g.name.split("-")[0], "memory_gb": g.memory_gb,
                       "tdp_w": g.tdp_w, "pcie_gen": g.pcie_gen, "nvlink": g.nvlink_gbs > 0 and count > 1,
                       "nvswitch": count >= 8 and g.nvlink_gbs >= NVSWITCH_MIN_NVLINK_GBS}
        exp["required"] = list(REQUIRED_GPU)
        sw = stack.software
        if installs("nvidia_driver"):
            exp["driver"] = sw.driver
        if installs("cuda"):
            exp["cuda"] = sw.cuda
        exp["ecc"] = {"retired_pages_max": 62}  # V100-class: azure_gpu_ecc.nhc's "retirement table full"
        if sw.monitoring and installs("monitoring"):
            exp["dcgm_level"], exp["dcgm_level_full"] = 1, 2
        health = catalog.health()
        row = health.get((g.name, count))
        copy_row = row or next((h for (name, _), h in health.items() if name == g.name and h.copy_gbs), None)
        if count > 1:
            exp["nccl"] = {"bytes": (row.nccl_bytes if row else None) or "8G", "min_bytes": NCCL_MIN_BYTES,
                           **_nccl_levels(row, pool.instance_type), "retries": 1}
        exp["copy"] = {"min_gbs": copy_row.copy_gbs if copy_row else None,
                       "source": f"{copy_row.source} ({copy_row.as_of})" if copy_row else None}
        if installs("verify_tools"):
            exp["required"] += ["bw.nccl"] if count > 1 else []
        if fabric.startswith("infiniband"):
            rate = (row.ib_rate_gbps if row and row.ib_rate_gbps else None) or IB_RATE[fabric]
            ports = count if provider(pool.provider).ib_port_per_gpu else 1
            exp["ib"] = {"ports": ports, "rate_gbps": int(rate)}
            exp["required"].append("links.ib")
    if fabric == "efa" and pool.instance_type:
        exp["efa"] = cat.instance(pool.provider, pool.instance_type).efa_interfaces
    if fabric in ("tcpx", "gpudirect-tcpx"):
        exp["tcpx"] = TCPX
    # `gpufleet: {live: false}` (hosts without an init system) writes mounts to fstab without mounting them
    live = (pool.salt.pillar.get("gpufleet") or {}).get("live", True)
    exp["mounts"] = [_mount(s, pool) for s in pool.storage] if live else []
    return exp


def _gpu_of(pool, cat) -> tuple[str | None, int]:
    if pool.instance_type and not pool.on_rack:
        it = cat.instance(pool.provider, pool.instance_type)
        return it.gpu, it.gpu_count
    return pool.gpu, pool.gpus_per_node or 0


def _fabric(pool, cat) -> str:
    if pool.interconnect:
        return pool.interconnect
    if pool.instance_type and not pool.on_rack:
        return cat.instance(pool.provider, pool.instance_type).fabric
    return "ethernet"


def _mount(s, pool) -> dict:
    """A mount and the read rate one node should see: its share of what the stack asked the file
    system for when every node reads at once (the file says aggregate MB/s per TiB)."""
    total = s.read_mbps()
    nodes = pool.nodes or len(pool.hosts) or 1
    return {"path": s.mount, "fstype": {"lustre": "lustre", "nfs": "nfs"}.get(s.type),
            "min_read_mbs": round(total / nodes) if total else None}

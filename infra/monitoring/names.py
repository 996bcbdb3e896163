"""The metric names gpufleet's alert rules and dashboards may use, each with its type and source.

A rule or panel naming anything else names a series that does not exist (tests check every
expression against ``known``). DCGM's come from the counters file the nodes' DCGM exporter is
given (salt/monitoring/files/gpufleet-counters.csv), the rest are declared here.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache

from gpufleet.paths import states_dir

COUNTERS = "monitoring/files/gpufleet-counters.csv"  # under the Salt state tree

# what dcgm-exporter puts on each GPU's series besides the target's own labels (a sample of its
# exposition: gpu, UUID, pci_bus_id, device, modelName, Hostname, DCGM_FI_DRIVER_VERSION; dcgm-exporter
# 4.x on a bare host, NVIDIA/dcgm-exporter README and test fixtures, read 2026-11-27)
DCGM_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION")
TARGET_LABELS = ("cluster", "pool", "node")  # on every node target (package docstring)
# the exporter's own fields' labels besides those: DCGM_EXP_XID_ERRORS_COUNT's xid and window (dcgm-exporter
# 4.2.3-4.1.3 internal/pkg/collector/xid_collector.go, expcollector.go and const.go; read 2026-11-27)
DCGM_EXP_LABELS = {"DCGM_EXP_XID_ERRORS_COUNT": ("xid", "window_size_in_ms")}
# DCGM's power and thermal violation counters count NANOseconds the clocks were held down (DCGM v4.2.3
# dcgmlib/dcgm_fields.h: "Power Violation time in ns", "Thermal Violation time in ns"; nvml.h
# nvmlViolationTime_t.violationTime "in Nanoseconds"; dcgm-exporter's own help said "us" until its e61056b,
# 2025-12-04; read 2026-11-27): rate(...) / VIOLATION_NS_PER_S is the share of the time held back
VIOLATION_NS_PER_S = 1e9


@dataclass(frozen=True)
class Metric:
    name: str
    type: str  # gauge | counter | info (a gauge of 1 whose labels are the point)
    help: str
    labels: tuple[str, ...] = ()  # its own, besides the target's
    source: str = "gpufleet"


def _gf(name: str, type_: str, help_: str, labels: tuple[str, ...] = (), source: str = "gpufleet node agent"):
    return Metric(name, type_, help_, labels, source)


# the node's own file (node_exporter's textfile collector), written by its agent after each watch
NODE = (
    _gf("gpufleet_node_info", "info", "The node's instance type, cloud (or rack) and GPU model.",
        ("instance_type", "provider", "gpu_model")),
    _gf("gpufleet_node_price_usd_per_hour", "gauge", "What the node costs an hour (US$), from the plan."),
    _gf("gpufleet_node_gpus", "gauge", "GPUs the node has."),
    _gf("gpufleet_node_health", "gauge", "1 for the node's health state (ok, gating, faulty, interrupted, maintenance), else 0.",
        ("state",)),
    _gf("gpufleet_node_last_fault_info", "info", "The node's last fault: its code (GF-...) and the check.",
        ("code", "check")),
    _gf("gpufleet_node_last_fault_timestamp_seconds", "gauge", "When the node's last fault was seen (Unix time)."),
)

# the monitor host's file (the cluster's money and its scheduler), written by its collector
CLUSTER = (
    _gf("gpufleet_cluster_spend_usd", "gauge", "What the cluster has cost this month, UTC (US$, estimated from its prices).",
        source="gpufleet cluster collector"),
    _gf("gpufleet_cluster_budget_usd", "gauge", "The budget the cluster falls under (US$ a month); absent: none.",
        ("budget",), source="gpufleet cluster collector"),
    _gf("gpufleet_slurm_nodes", "gauge", "Slurm nodes by state.", ("state",), source="gpufleet cluster collector"),
    _gf("gpufleet_slurm_node_state_info", "info", "Each Slurm node's state and, where drained, the reason.",
        ("slurm_node", "state", "reason"), source="gpufleet cluster collector"),
    _gf("gpufleet_slurm_jobs", "gauge", "Slurm jobs by state.", ("state",), source="gpufleet cluster collector"),
    _gf("gpufleet_slurm_jobs_pending", "gauge", "Pending Slurm jobs by the reason they wait.", ("reason",),
        source="gpufleet cluster collector"),
)

# node_exporter's (prometheus-node-exporter 1.5, Debian 12) and Prometheus's own that rules and panels use
_NE = "node_exporter 1.5"
EXPORTER = (
    Metric("up", "gauge", "1 if Prometheus's last scrape of the target worked.", (), "Prometheus"),
    Metric("ALERTS", "gauge", "The alerts pending or firing.", ("alertname", "alertstate"), "Prometheus"),
    Metric("node_textfile_mtime_seconds", "gauge", "When each textfile was last written.", ("file",), _NE),
    Metric("node_textfile_scrape_error", "gauge", "1 if a textfile could not be read.", (), _NE),
    Metric("node_cpu_seconds_total", "counter", "CPU time by mode.", ("cpu", "mode"), _NE),
    Metric("node_memory_MemAvailable_bytes", "gauge", "Memory available.", (), _NE),
    Metric("node_load1", "gauge", "1-minute load average.", (), _NE),
    Metric("node_boot_time_seconds", "gauge", "When the node booted.", (), _NE),
    # its infiniband collector (collector/infiniband_linux.go at node_exporter v1.5.0, the descriptions map; labels
    # device and port), for the IB alert and the node dashboard's InfiniBand panels (read 2026-11-27)
    *(Metric(f"node_infiniband_{n}", "counter", h, ("device", "port"), _NE) for n, h in (
        ("port_data_received_bytes_total", "Data octets received on all links."),
        ("port_data_transmitted_bytes_total", "Data octets transmitted on all links."),
        ("port_errors_received_total", "Packets containing an error received on the port."),
        ("link_downed_total", "Times the link failed to recover from an error state and went down."),
        ("symbol_error_total", "Minor link errors detected on one or more physical lanes."))),
)


@cache
def dcgm() -> tuple[Metric, ...]:
    """The DCGM fields the nodes' exporter publishes, read from the counters file it is given."""
    out = []
    with open(states_dir() / COUNTERS, newline="") as f:
        for row in csv.reader(f):
            if not row or row[0].lstrip().startswith("#"):
                continue
            field, type_, help_ = (c.strip() for c in (row[0], row[1], ",".join(row[2:])))
            out.append(Metric(field, type_, help_, DCGM_LABELS + DCGM_EXP_LABELS.get(field, ()), "DCGM exporter"))
    return tuple(out)


def catalogue() -> dict[str, Metric]:
    """Every metric a rule or panel may name, by name."""
    return {m.name: m for m in (*dcgm(), *NODE, *CLUSTER, *EXPORTER)}


def known(name: str) -> bool:
    return name in catalogue()

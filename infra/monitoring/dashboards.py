"""gpufleet's Grafana dashboards, built as code with Grafana's own grafana-foundation-sdk (README, "Monitoring").

Three dashboards: the fleet (GPUs busy and idle per pool, what it costs an hour and so far, what idle GPUs
cost, health, drained nodes), one node (a ``node`` variable: its GPUs' utilisation, memory, power, clocks,
temperatures, XID/ECC/row-remap counters, NVLink and InfiniBand), and Slurm (nodes and jobs by state, why
jobs wait, drained nodes and why). Every query names only metrics of the catalogue (``names``) and joins
series ``on(node)`` (the package's rule); tests parse each one.

The SDK is optional (``pip install 'gpufleet[dashboards]'``) and imported only in :func:`sdk`. Its versions
are ``EPOCH!GRAFANA_VERSION`` (PyPI, 2026-01): the newest epoch is Grafana 10.1's, so an unpinned install
gets older types, not newer; pyproject pins the Grafana 11.6 build. Panels read the Prometheus data source
named by the ``datasource`` variable, so the same JSON works in a team's own Grafana (any Prometheus data
source they pick) and in the one the monitor host provisions (``provisioning``).
"""

from __future__ import annotations

import json
from types import SimpleNamespace

from gpufleet.errors import ExtraMissing
from gpufleet.monitoring import names

EXTRA = "dashboards"
TAGS = ["gpufleet"]
REFRESH = "1m"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}  # the variable every panel reads through
# units are Grafana's ids (packages/grafana-data/src/valueFormats/categories.ts, read 2026-11-27): mbytes is
# mebibytes (DCGM's framebuffer is in MiB), rotmhz MHz, percentunit a 0-1 share, currencyUSD dollars
BUSY_UTIL_PERCENT = 5  # a GPU under this utilisation is idle (the idle-cost panels)
DRAINED = 'state=~"drain.*"'  # Slurm's drain, drained and draining states (sinfo %T), the collector's label


def sdk() -> SimpleNamespace:
    """The SDK's builders and encoder, or ExtraMissing naming the extra to install."""
    try:
        from grafana_foundation_sdk.builders import dashboard, prometheus, stat, table, timeseries
        from grafana_foundation_sdk.cog.encoder import JSONEncoder
        from grafana_foundation_sdk.models.dashboard import DataSourceRef, VariableRefresh, VariableSort
        from grafana_foundation_sdk.models.prometheus import PromQueryFormat
    except ImportError:
        raise ExtraMissing("gpufleet's Grafana dashboards", "grafana-foundation-sdk", EXTRA) from None
    return SimpleNamespace(dashboard=dashboard, prometheus=prometheus, stat=stat, table=table, timeseries=timeseries,
                           JSONEncoder=JSONEncoder, DataSourceRef=DataSourceRef, VariableRefresh=VariableRefresh,
                           VariableSort=VariableSort, PromQueryFormat=PromQueryFormat)


class _Panels:
    """Panel builders bound to the SDK, each reading the ``datasource`` variable."""

    def __init__(self, g: SimpleNamespace):
        self.g = g
        self.ds = g.DataSourceRef(type_val=DATASOURCE["type"], uid=DATASOURCE["uid"])

    def query(self, expr: str, legend: str = "", *, table: bool = False):
        q = self.g.prometheus.Dataquery().expr(expr).datasource(self.ds)
        if legend:
            q = q.legend_format(legend)
        return q.instant().format(self.g.PromQueryFormat.TABLE) if table else q.range()

    def stat(self, title: str, expr: str, unit: str, *, w: int = 4, desc: str = ""):
        p = self.g.stat.Panel().title(title).unit(unit).span(w).height(4).datasource(self.ds)
        return p.description(desc).with_target(self.query(expr)) if desc else p.with_target(self.query(expr))

    def series(self, title: str, queries: list[tuple[str, str]], unit: str, *, w: int = 12, desc: str = ""):
        p = (self.g.timeseries.Panel().title(title).unit(unit).span(w).height(8).datasource(self.ds)
             .line_width(1).fill_opacity(10))
        for expr, legend in queries:
            p = p.with_target(self.query(expr, legend))
        return p.description(desc) if desc else p

    def table(self, title: str, expr: str, *, w: int = 12, desc: str = ""):
        p = self.g.table.Panel().title(title).span(w).height(8).datasource(self.ds).with_target(
            self.query(expr, table=True))
        return p.description(desc) if desc else p


def _board(g: SimpleNamespace, uid: str, title: str, variables=()):
    d = (g.dashboard.Dashboard(title).uid(uid).tags(TAGS).refresh(REFRESH).time("now-6h", "now")
         .timezone("browser").readonly())
    d = d.with_variable(g.dashboard.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
    for v in variables:
        d = d.with_variable(v)
    return d


def fleet(g: SimpleNamespace):
    """The fleet: GPUs at work and idle per pool, money, health, drained nodes."""
    P = _Panels(g)
    idle = f"DCGM_FI_DEV_GPU_UTIL < {BUSY_UTIL_PERCENT}"
    per_gpu_price = "gpufleet_node_price_usd_per_hour / on(node) gpufleet_node_gpus"
    idle_cost = f"count by (node, pool) ({idle}) * on(node) group_left() ({per_gpu_price})"
    return (_board(g, "gpufleet-fleet", "gpufleet / fleet")
            .with_row(g.dashboard.Row("GPUs and money"))
            .with_panel(P.stat("GPUs", "count(DCGM_FI_DEV_GPU_UTIL)", "none"))
            .with_panel(P.stat("GPUs idle", f"count({idle}) or vector(0)", "none",
                               desc=f"GPUs under {BUSY_UTIL_PERCENT}% utilisation"))
            .with_panel(P.stat("$/h", "sum(gpufleet_node_price_usd_per_hour)", "currencyUSD",
                               desc="what the nodes cost an hour, at the plan's prices"))
            .with_panel(P.stat("$/h of idle GPUs", f"sum({idle_cost}) or vector(0)", "currencyUSD",
                               desc="each idle GPU's share of its node's price"))
            .with_panel(P.stat("$ so far", "sum(gpufleet_cluster_spend_usd)", "currencyUSD",
                               desc=names.catalogue()["gpufleet_cluster_spend_usd"].help))  # this month's
            .with_panel(P.stat("Drained nodes", f"count(gpufleet_slurm_node_state_info{{{DRAINED}}}) or vector(0)",
                               "none"))
            .with_panel(P.series("GPUs busy by pool",
                                 [(f"count by (pool) (DCGM_FI_DEV_GPU_UTIL >= {BUSY_UTIL_PERCENT})", "{{pool}}")], "none"))
            .with_panel(P.series("GPUs idle by pool", [(f"count by (pool) ({idle})", "{{pool}}")], "none"))
            .with_panel(P.series("$/h by pool", [("sum by (pool) (gpufleet_node_price_usd_per_hour)", "{{pool}}")],
                                 "currencyUSD"))
            .with_panel(P.series("$/h of idle GPUs by pool", [(f"sum by (pool) ({idle_cost})", "{{pool}}")],
                                 "currencyUSD"))
            .with_row(g.dashboard.Row("Health"))
            .with_panel(P.series("Nodes by health state", [("sum by (state) (gpufleet_node_health)", "{{state}}")],
                                 "none", desc="the node watch's verdict: ok, gating, faulty, interrupted, maintenance"))
            .with_panel(P.table("Nodes not healthy, and their last fault",
                                'gpufleet_node_health{state!="ok"} == 1',
                                desc="gpufleet_node_last_fault_info on the node dashboard says which check"))
            .with_panel(P.table("Drained nodes (Slurm)", f"gpufleet_slurm_node_state_info{{{DRAINED}}}"))
            .with_panel(P.table("Targets down", "up == 0")))


def node(g: SimpleNamespace):
    """One node (the ``node`` variable): its GPUs, their error counters, its links."""
    P = _Panels(g)
    n = 'node="$node"'
    var = (g.dashboard.QueryVariable("node").label("Node").datasource(P.ds)
           .query("label_values(node_boot_time_seconds, node)")
           .refresh(g.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(g.VariableSort.ALPHABETICAL_ASC))
    gpu = "GPU {{gpu}}"
    rate = "[$__rate_interval]"
    ns = names.VIOLATION_NS_PER_S  # the violation counters count nanoseconds
    return (_board(g, "gpufleet-node", "gpufleet / node", [var])
            .with_row(g.dashboard.Row("GPUs"))
            .with_panel(P.series("GPU utilisation", [(f"DCGM_FI_DEV_GPU_UTIL{{{n}}}", gpu)], "percent", w=8))
            .with_panel(P.series("GPU memory used", [(f"DCGM_FI_DEV_FB_USED{{{n}}}", gpu)], "mbytes", w=8))  # MiB
            .with_panel(P.series("Power", [(f"DCGM_FI_DEV_POWER_USAGE{{{n}}}", gpu)], "watt", w=8))
            .with_panel(P.series("SM and memory clocks", [(f"DCGM_FI_DEV_SM_CLOCK{{{n}}}", "SM {{gpu}}"),
                                                          (f"DCGM_FI_DEV_MEM_CLOCK{{{n}}}", "memory {{gpu}}")],
                                 "rotmhz", w=8))
            .with_panel(P.series("Temperature", [(f"DCGM_FI_DEV_GPU_TEMP{{{n}}}", gpu),
                                                 (f"DCGM_FI_DEV_MEMORY_TEMP{{{n}}}", "memory {{gpu}}")], "celsius", w=8))
            .with_panel(P.series("Throttled (power, thermal)",
                                 [(f"rate(DCGM_FI_DEV_POWER_VIOLATION{{{n}}}{rate}) / {ns:g}", "power {{gpu}}"),
                                  (f"rate(DCGM_FI_DEV_THERMAL_VIOLATION{{{n}}}{rate}) / {ns:g}", "thermal {{gpu}}")],
                                 "percentunit", w=8, desc="share of the time the GPU's clocks were held down"))
            .with_row(g.dashboard.Row("Errors"))
            .with_panel(P.series("Last XID", [(f"DCGM_FI_DEV_XID_ERRORS{{{n}}}", gpu)], "none", w=8,
                                 desc="the value of the GPU's last XID error (0: none since the driver loaded)"))
            .with_panel(P.series("ECC errors (volatile)",
                                 [(f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{n}}}", "double-bit {{gpu}}"),
                                  (f"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{{{n}}}", "single-bit {{gpu}}")], "none", w=8))
            .with_panel(P.series("Row remaps and retired pages",
                                 [(f"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{{{n}}}", "uncorrectable {{gpu}}"),
                                  (f"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS{{{n}}}", "correctable {{gpu}}"),
                                  (f"DCGM_FI_DEV_ROW_REMAP_FAILURE{{{n}}}", "remap failed {{gpu}}"),
                                  (f"DCGM_FI_DEV_RETIRED_PENDING{{{n}}}", "retirement pending {{gpu}}")], "none", w=8))
            .with_row(g.dashboard.Row("Links"))
            .with_panel(P.series("NVLink errors /s",
                                 [(f"sum by (gpu) (rate(DCGM_FI_DEV_NVLINK_{k}_ERROR_COUNT_TOTAL{{{n}}}{rate}))",
                                   f"{label} {{{{gpu}}}}")
                                  for k, label in (("CRC_FLIT", "CRC flit"), ("CRC_DATA", "CRC data"),
                                                   ("REPLAY", "replay"), ("RECOVERY", "recovery"))], "none", w=8))
            .with_panel(P.series("NVLink bandwidth", [(f"rate(DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{{{n}}}{rate})", gpu)],
                                 "none", w=8))
            .with_panel(P.series("InfiniBand traffic",
                                 [(f"rate(node_infiniband_port_data_received_bytes_total{{{n}}}{rate})",
                                   "in {{device}}:{{port}}"),
                                  (f"rate(node_infiniband_port_data_transmitted_bytes_total{{{n}}}{rate})",
                                   "out {{device}}:{{port}}")], "Bps", w=8))
            .with_panel(P.series("InfiniBand errors",
                                 [(f"increase(node_infiniband_{k}{{{n}}}{rate})", f"{label} {{{{device}}}}:{{{{port}}}}")
                                  for k, label in (("port_errors_received_total", "receive errors"),
                                                   ("link_downed_total", "link downed"),
                                                   ("symbol_error_total", "symbol errors"))], "none", w=12))
            .with_panel(P.table("gpufleet's view: health and last fault",
                                f'gpufleet_node_health{{{n}}} == 1 or gpufleet_node_last_fault_info{{{n}}}', w=12)))


def slurm(g: SimpleNamespace):
    """Slurm as the monitor host's collector reads it (sinfo, squeue)."""
    P = _Panels(g)
    return (_board(g, "gpufleet-slurm", "gpufleet / Slurm")
            .with_panel(P.series("Nodes by state", [("sum by (state) (gpufleet_slurm_nodes)", "{{state}}")], "none"))
            .with_panel(P.series("Jobs by state", [("sum by (state) (gpufleet_slurm_jobs)", "{{state}}")], "none"))
            .with_panel(P.series("Pending jobs by reason", [("sum by (reason) (gpufleet_slurm_jobs_pending)",
                                                            "{{reason}}")], "none"))
            .with_panel(P.table("Drained nodes and why", f"gpufleet_slurm_node_state_info{{{DRAINED}}}")))


BOARDS = (fleet, node, slurm)


def build() -> dict[str, dict]:
    """Each dashboard's JSON (as Grafana imports it), by uid."""
    g = sdk()
    out = {}
    for make in BOARDS:
        d = json.loads(g.JSONEncoder(sort_keys=True).encode(make(g).build()))
        out[d["uid"]] = d
    return out


def encode(dashboard: dict) -> str:
    """The file's text: sorted keys, two-space indents, a newline at the end (the same bytes each time)."""
    return json.dumps(dashboard, sort_keys=True, indent=2) + "\n"

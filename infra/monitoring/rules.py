"""The alert rules Prometheus evaluates for a stack (README, "Alerts"): one YAML text of rule groups,
``render_rules(stack, cluster)``, its thresholds from the stack (``monitoring:``, each pool's health interval).

Every rule joins ``on(node)`` (the package's docstring), names only metrics of ``names.catalogue()`` and
says, in its ``summary``, the node and the fault. Its ``severity``: ``critical`` a node that cannot do its
work (a person acts now), ``warning`` one that works worse or costs money for nothing.
Each is unit-tested with ``promtool test rules`` (tests/monitoring/rules/, Prometheus 2.42 syntax).
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from gpufleet.monitoring import collector, names
from gpufleet.nodecheck.faults import FATAL_XIDS
from gpufleet.spec import Monitoring

# XID 79, "GPU has fallen off the bus" (docs.nvidia.com/deploy/xid-errors, read 2026-11-27): its own alert
FELL_OFF_BUS_XID = 79
# DCGM_FI_DEV_XID_ERRORS is the value of the GPU's last XID (a gauge, dcgm-exporter's counters file), so a later XID
# hides a fatal one; DCGM_EXP_XID_ERRORS_COUNT{xid} counts each XID seen in the exporter's window (5 minutes by
# default, --xid-count-window-size; dcgm-exporter 4.2.3-4.1.3 internal/pkg/collector/xid_collector.go and
# expcollector.go, pkg/cmd/app.go; read 2026-11-27). The alert holds FATAL_XID_HOLD after the fault was counted,
# long enough to be seen; the node's watch keeps it drained until it is reset (NodeDrainedByWatch)
FATAL_XID_HOLD = "1h"
# a GPU this hot for GPU_HOT_FOR is worth a look before it throttles: our threshold, a few degrees under the
# slowdown temperature data-center GPUs report (`nvidia-smi -q -d TEMPERATURE`, "GPU Slowdown Temp"); that it
# does throttle is GpuThermalThrottled's
GPU_HOT_C = 85
GPU_HOT_FOR = "5m"
# DCGM_FI_DEV_THERMAL_VIOLATION counts nanoseconds the GPU was held back for heat (names.VIOLATION_NS_PER_S):
# its rate over that is the share of time throttled; above THROTTLED_SHARE for THROTTLED_FOR is a cooling fault
THROTTLED_SHARE = 0.1
THROTTLED_FOR = "10m"
# a GPU below IDLE_UTIL_PCT busy for a whole hour is idle (issue 53: "GPUs idle for an hour")
IDLE_UTIL_PCT = 5
IDLE_FOR = "1h"
BUDGET_SHARE = 0.8  # spend past this share of a budget
ERRORS_WINDOW = "10m"  # NVLink and InfiniBand error counters that rose in this window
NODE_DOWN_FOR = "2m"  # a target that failed its scrapes this long
# the longest boot gate (dcgm3, `dcgmi diag -r 3`) takes about half an hour (clouds/node_watch.py): a node still
# gating after GATE_STUCK_FOR is stuck
GATE_STUCK_FOR = "1h"
STALE_INTERVALS = 3  # a textfile older than this many of its writer's intervals is stale (the watch's own rule)
NODE_FILE = "gpufleet.prom"  # the node's own textfile (node watch)
CLUSTER_FILE = "gpufleet_cluster.prom"  # the monitor host's (cluster collector)


@dataclass(frozen=True)
class Rule:
    name: str
    expr: str
    severity: str  # critical | warning
    summary: str  # names the node ({{ $labels.node }}) and the fault
    for_: str = "0s"

    def to_dict(self) -> dict:
        return {"alert": self.name, "expr": self.expr, "for": self.for_, "labels": {"severity": self.severity},
                "annotations": {"summary": self.summary}}


def _fatal_xid(fatal) -> str:
    """A GPU with a fatal XID in the last FATAL_XID_HOLD, labelled ``xid``: from the exporter's per-XID count (the
    XIDs of its window, dcgm-exporter's own window label dropped), else from the last-XID gauge, which a later
    harmless XID overwrites (each fatal value given its ``xid`` label, so that both say the same series)."""
    count = (f'max without (window_size_in_ms) (max_over_time(DCGM_EXP_XID_ERRORS_COUNT{{xid=~"{"|".join(map(str, fatal))}"}}'
             f"[{FATAL_XID_HOLD}])) > 0")
    last = [f'label_replace(DCGM_FI_DEV_XID_ERRORS == {x}, "xid", "{x}", "", "")' for x in fatal]
    return " or ".join([count, *last])


def written_every(stack, pool) -> int | None:
    """How often a node of ``pool`` writes its metrics file (seconds): a cloud node's watch every ``health.interval``;
    a rack host's Slurm health check every ``slurm.health_check_interval`` (compute hosts only); None: no writer."""
    if not pool.on_rack:
        return pool.health.interval
    if stack.slurm and stack.slurm.health_check_interval and pool.role == "compute":
        return stack.slurm.health_check_interval
    return None


def _stale(stack, cluster: str) -> str:
    """Each writer's file older than STALE_INTERVALS of its runs (pools written as often share a matcher), the
    cluster collector's every collector.INTERVAL_S; a file that is not there at all (node_exporter exports the mtime
    only of files it read: collector/textfile.go at v1.5.0): a node of a writing pool whose node_exporter answers
    without it, or no collector file in the cluster; and a textfile node_exporter could not read (its error says
    not which: gpufleet's or another writer's in the same directory). ``cluster``: the name Prometheus labels every
    target with (scrape.scrape_config), which `up --cluster NAME` may make another than the stack's. The age
    compares the node's clock (the file's mtime) with Prometheus's: clocks more than a few intervals apart hide or
    invent staleness (README)."""
    by_interval: dict[int, list[str]] = {}
    for p in stack.pools:
        every = written_every(stack, p)
        if every:
            by_interval.setdefault(every, []).append(p.name)
    node_file, cluster_file = ('file=~".*/' + f.replace(".", "\\\\.") + '"' for f in (NODE_FILE, CLUSTER_FILE))
    age = "time() - node_textfile_mtime_seconds{{{file}{more}}} > {limit}"
    parts = [age.format(file=node_file, more=f', pool=~"{"|".join(sorted(pools))}"', limit=STALE_INTERVALS * interval)
             for interval, pools in sorted(by_interval.items())]
    parts.append(age.format(file=cluster_file, more="", limit=STALE_INTERVALS * collector.INTERVAL_S))
    # missing on a node up longer than its writer's stale limit (a node just booted has not written it yet)
    missing = ('label_replace(max by (cluster, pool, node) (up{{job="node", pool=~"{pools}"}}) == 1 unless on(node) '
               'node_textfile_mtime_seconds{{{file}}} and on(node) time() - node_boot_time_seconds > {limit}, "file", '
               '"{name} (missing)", "", "")')
    parts += [missing.format(pools="|".join(sorted(pools)), file=node_file, limit=STALE_INTERVALS * interval,
                             name=NODE_FILE) for interval, pools in sorted(by_interval.items())]
    parts.append(f'label_replace(absent(node_textfile_mtime_seconds{{cluster="{cluster}", {cluster_file}}}), "file", '
                 f'"{CLUSTER_FILE} (missing on the monitor host)", "", "")')
    parts.append('label_replace(node_textfile_scrape_error == 1, "file", "a textfile (node_exporter could not read one: '
                 "gpufleet's or another writer's)\", \"\", \"\")")
    return " or ".join(f"({p})" for p in parts)


def rules(stack, cluster: str) -> list[Rule]:
    idle_usd = (stack.monitoring or Monitoring()).idle_alert_usd_per_hour
    fatal = [x for x in FATAL_XIDS if x != FELL_OFF_BUS_XID]
    return [
        Rule("GpuXidFatal", _fatal_xid(fatal), "critical",
             "{{ $labels.node }}: fatal XID {{ $labels.xid }} on GPU {{ $labels.gpu }} (reset the GPU or reboot)"),
        # fewer GPUs report than the node has; when none reports, count() says nothing, so a node with GPUs and
        # no GPU series while its DCGM exporter answers is its own term (a down exporter is NodeDown's)
        Rule("GpuFellOffBus",
             f"DCGM_FI_DEV_XID_ERRORS == {FELL_OFF_BUS_XID} or (count by (cluster, pool, node) "
             "(DCGM_FI_DEV_GPU_TEMP) < on(node) group_left() gpufleet_node_gpus) or ((sum without (job, instance) "
             '(gpufleet_node_gpus > 0) unless on(node) DCGM_FI_DEV_GPU_TEMP) and on(node) up{job="dcgm"} == 1)',
             "critical",
             "{{ $labels.node }}: a GPU fell off the bus (XID 79, or fewer GPUs report than the node has)"),
        Rule("GpuEccUncorrectable", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL > 0", "critical",
             "{{ $labels.node }}: {{ $value }} uncorrectable ECC errors on GPU {{ $labels.gpu }} since the driver "
             "loaded"),
        Rule("GpuRowRemapFailed", "DCGM_FI_DEV_ROW_REMAP_FAILURE > 0", "critical",
             "{{ $labels.node }}: row remapping failed on GPU {{ $labels.gpu }} (no spare rows left: RMA)"),
        Rule("GpuRetirementPending", "DCGM_FI_DEV_RETIRED_PENDING > 0", "warning",
             "{{ $labels.node }}: GPU {{ $labels.gpu }} has pages pending retirement (reset the GPU to apply)"),
        Rule("GpuNvlinkErrors",
             f"increase(DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL[{ERRORS_WINDOW}]) > 0 or "
             f"increase(DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL[{ERRORS_WINDOW}]) > 0", "warning",
             f"{{{{ $labels.node }}}}: NVLink errors rising on GPU {{{{ $labels.gpu }}}} in the last {ERRORS_WINDOW}"),
        Rule("InfinibandErrors",
             f"increase(node_infiniband_port_errors_received_total[{ERRORS_WINDOW}]) > 0 or "
             f"increase(node_infiniband_link_downed_total[{ERRORS_WINDOW}]) > 0", "warning",
             f"{{{{ $labels.node }}}}: InfiniBand errors or link drops on {{{{ $labels.device }}}} port "
             f"{{{{ $labels.port }}}} in the last {ERRORS_WINDOW}"),
        Rule("GpuHot", f"DCGM_FI_DEV_GPU_TEMP > {GPU_HOT_C}", "warning",
             f"{{{{ $labels.node }}}}: GPU {{{{ $labels.gpu }}}} at {{{{ $value }}}} C, over {GPU_HOT_C} C for "
             f"{GPU_HOT_FOR}", GPU_HOT_FOR),
        Rule("GpuThermalThrottled",
             f"rate(DCGM_FI_DEV_THERMAL_VIOLATION[5m]) / {names.VIOLATION_NS_PER_S:g} > {THROTTLED_SHARE}", "warning",
             "{{ $labels.node }}: GPU {{ $labels.gpu }} held back for heat {{ $value | humanizePercentage }} of "
             "the time", THROTTLED_FOR),
        Rule("NodeDown", 'up{node!=""} == 0', "critical",
             "{{ $labels.node }}: its {{ $labels.job }} exporter does not answer ({{ $labels.instance }})",
             NODE_DOWN_FOR),
        Rule("NodeDrainedByWatch", 'gpufleet_node_health{state=~"faulty|interrupted"} == 1', "critical",
             "{{ $labels.node }}: drained by its health watch ({{ $labels.state }}; `gpufleet status` names the "
             "fault)"),
        Rule("NodeGateStuck", 'gpufleet_node_health{state="gating"} == 1', "warning",
             f"{{{{ $labels.node }}}}: still in its boot gate after {GATE_STUCK_FOR} (drained until it passes)",
             GATE_STUCK_FOR),
        # each GPU idle over the whole hour (its busiest sample under the line, and a series an hour old), not a
        # count of GPUs idle at each instant held for an hour (GPUs taking turns would be counted); the value: what
        # the idle GPUs cost an hour (the node's price shared over its GPUs)
        Rule("GpusIdleOnExpensivePool",
             f"count by (cluster, pool, node) ((max_over_time(DCGM_FI_DEV_GPU_UTIL[{IDLE_FOR}]) < {IDLE_UTIL_PCT}) and "
             f"DCGM_FI_DEV_GPU_UTIL offset {IDLE_FOR}) * on(node) group_left() "
             f"(gpufleet_node_price_usd_per_hour / gpufleet_node_gpus) and on(node) "
             f"gpufleet_node_price_usd_per_hour >= {idle_usd!r}", "warning",
             f"{{{{ $labels.node }}}}: GPUs idle for {IDLE_FOR} on pool {{{{ $labels.pool }}}}, "
             f"{{{{ $value | printf \"%.2f\" }}}} $/h spent on them"),
        # this cluster's spend alone: a budget may cover other clusters (fleet/budgets.py standings() sums them from
        # the registry), which the monitor host cannot read, so the summary says whose share it is; a budget of 0
        # has no share to say (x/0 is +Inf)
        Rule("BudgetPast80Percent",
             f"gpufleet_cluster_spend_usd / ignoring(budget) group_right() (gpufleet_cluster_budget_usd > 0) > "
             f"{BUDGET_SHARE:g}", "warning",
             "cluster {{ $labels.cluster }} alone has spent {{ $value | humanizePercentage }} of budget "
             "{{ $labels.budget }} this month (other clusters under it not counted: `gpufleet budget` has the whole; "
             "from {{ $labels.node }})"),
        Rule("GpufleetMetricsStale", _stale(stack, cluster), "warning",
             "{{ $labels.node }}: metrics file stale, missing or unreadable: {{ $labels.file }}"),
    ]


def render_rules(stack, cluster: str) -> str:
    """The stack's alert rules for its cluster ``cluster`` as Prometheus's rule file (one group) takes them."""
    doc = {"groups": [{"name": "gpufleet", "rules": [r.to_dict() for r in rules(stack, cluster)]}]}
    return yaml.safe_dump(doc, sort_keys=False, width=1_000, allow_unicode=True)

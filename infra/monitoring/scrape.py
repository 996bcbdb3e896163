"""The monitor host's Prometheus and Alertmanager files for a stack (the ``monitoring.server`` formula
installs them from the pillar; tests check them with ``promtool check config``).

Prometheus scrapes two jobs, ``node`` (node_exporter, which carries gpufleet's own textfile metrics)
and ``dcgm`` (NVIDIA's DCGM exporter), on every node of the pools given. Each provider says how its
nodes are found (``Provider.scrape_discovery``): a rack's hosts are written out, a cloud's are listed
by root on the monitor's node and read from files (``discovery``, clouds/node_targets.py), so nodes
that heal replaced or `up` added appear without a hand edit. Every target gets the labels ``cluster``,
``pool`` and ``node`` (the join rule, package doc).
File format: Prometheus 2.42's configuration and Alertmanager 0.25's (prometheus.io/docs/prometheus/
2.42/configuration/configuration/, prometheus.io/docs/alerting/0.25/configuration/, read 2026-11-27).
"""

from __future__ import annotations

import yaml

from gpufleet.clouds import provider
from gpufleet.monitoring.ports import parameters, ports

JOBS = {"node": "node_exporter", "dcgm": "dcgm_exporter"}  # job name -> the exporter's port in ``ports()``
HEADER = "# managed by gpufleet (monitoring.server): rendered from the stack, edits are overwritten\n"
SCRAPE_TIMEOUT_S = 10  # Prometheus's default, which may not exceed the scrape interval


def rule_files() -> str:
    """Where the monitor host keeps the stack's alert rules (a glob, as ``rule_files`` takes it)."""
    return f"{parameters()['server']['conf_dir']}/rules/*.yml"


def scrape_config(job: str, cluster: str, pools: list) -> dict:
    """One job's scrape config: every provider's targets of ``pools`` and their relabelling."""
    port = ports()[JOBS[job]]
    out: dict = {"job_name": job}
    # one Prometheus serves one cluster: every target is of it
    relabel: list = [{"target_label": "cluster", "replacement": cluster}]
    by_provider: dict[str, list] = {}
    for p in pools:
        by_provider.setdefault(p.provider, []).append(p)
    for name, group in sorted(by_provider.items()):
        targets, more = provider(name).scrape_discovery(cluster, group, port)
        for key, items in targets.items():  # the clouds' nodes share one file_sd file: named once
            out.setdefault(key, []).extend(i for i in items if i not in out[key])
        relabel += more
    out["relabel_configs"] = relabel
    return out


def discovery(cluster: str, monitor, pools: list) -> dict | None:
    """What root on a cloud monitor's node lists and writes for Prometheus (clouds/node_targets.py; the pool document
    carries it): the nodes of ``pools`` on the monitor's own cloud, whose identity lists no other cloud's, on both
    exporters' ports. None for a monitor on a rack, whose targets are written out."""
    mine = [p for p in pools if p.provider == monitor.provider]
    if monitor.on_rack or not mine:
        return None
    return {"cluster": cluster, "pools": sorted(p.name for p in mine), "ports": [ports()[JOBS[j]] for j in JOBS],
            monitor.provider: provider(monitor.provider).monitor_discovery(cluster, monitor, mine)}


def render_prometheus(stack, *, cluster: str, pools: list, monitor=None) -> str:
    """prometheus.yml: the stack's interval, its rules, the local Alertmanager, ``pools``' nodes; and the
    ``monitor`` pool's in the node job whatever its role: its node_exporter serves the cluster collector's
    file (spend, budgets, Slurm), also where its nodes run no exporters of their own (Slurm's controller)."""
    m = stack.monitoring
    jobs = {"node": pools + ([monitor] if monitor is not None and monitor.name not in {p.name for p in pools} else []),
            "dcgm": pools}
    every = f"{m.scrape_interval}s"
    doc = {
        "global": {"scrape_interval": every, "evaluation_interval": every,
                   "scrape_timeout": f"{min(SCRAPE_TIMEOUT_S, m.scrape_interval)}s"},
        "rule_files": [rule_files()],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{ports()['alertmanager']}"]}]}]},
        "scrape_configs": [scrape_config(job, cluster, jobs[job]) for job in JOBS if jobs[job]],
    }
    return HEADER + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


def render_alertmanager(stack) -> str:
    """alertmanager.yml: one receiver, the stack's webhook (resolved alerts too), or none (alerts are
    shown in Alertmanager and Prometheus only)."""
    receiver: dict = {"name": "gpufleet"}
    if stack.monitoring.alert_webhook:
        receiver["webhook_configs"] = [{"url": stack.monitoring.alert_webhook, "send_resolved": True}]
    doc = {"route": {"receiver": "gpufleet", "group_by": ["alertname", "cluster", "pool", "node"],
                     "group_wait": "30s", "group_interval": "5m", "repeat_interval": "4h"},
           "receivers": [receiver]}
    return HEADER + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)

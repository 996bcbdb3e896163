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


def _places(pool) -> list[tuple[str, str]]:
    """Every (cloud, region) a cloud pool's nodes may run in: its own place and its failover's."""
    f = pool.failover
    clouds = [pool.provider, *(f.providers if f else ())]
    return [(pool.provider, r) for r in (pool.region, *(f.regions if f else ())) if r] + \
        [(c, "") for c in clouds[1:]]


def unreached(monitor, pools: list) -> list[tuple[object, str]]:
    """(pool, why) for each cloud pool of ``pools`` whose nodes the monitor cannot list and reach: Prometheus would
    wait on a file_sd file that never names them (no series, so no "node down"), or scrape addresses that never
    answer (every node "down"). A monitor lists its own cloud's nodes with its own identity, and reaches them where
    its network does: the whole cloud where the cloud's network is global, else its own region. A rack's hosts are
    written out (``scrape_discovery``): reaching them is the rack's own."""
    out = []
    for p in pools:
        if p.on_rack or p is monitor:
            continue
        if monitor.on_rack:
            out.append((p, f"the monitor ({monitor.name}) is on a rack, which lists no cloud's nodes"))
            continue
        for cloud, region in _places(p):
            if cloud != monitor.provider:
                out.append((p, f"its nodes may run on {cloud}, and the monitor ({monitor.name}, on {monitor.provider}) "
                               "lists only its own cloud's nodes"))
                break
            if not provider(cloud).network_global and region != monitor.region:
                out.append((p, f"its nodes may run in {cloud} {region}, whose network the monitor ({monitor.name}, in "
                               f"{monitor.region}) does not reach"))
                break
    return out


def discovery(cluster: str, monitor, pools: list, networks: list[str]) -> dict | None:
    """What root on a cloud monitor's node lists and writes for Prometheus (clouds/node_targets.py; the pool document
    carries it): the nodes of ``pools`` it reaches (``unreached``; the stack refuses the others) on both exporters'
    ports, and its own pool's on node_exporter's (render_prometheus scrapes it whatever its role); addresses private
    or inside the cluster's ``networks`` (network.cidr, which may be any block the spec takes). None for a monitor on
    a rack, whose targets are written out."""
    if monitor.on_rack:
        return None
    gone = {id(p) for p, _ in unreached(monitor, pools)}
    mine = [p for p in pools if not p.on_rack and id(p) not in gone]
    listed = mine + ([monitor] if monitor.name not in {p.name for p in mine} else [])
    names = sorted(p.name for p in listed)
    d = {"cluster": cluster, "pools": names, "ports": [ports()[JOBS[j]] for j in JOBS], "networks": list(networks),
         monitor.provider: provider(monitor.provider).monitor_discovery(cluster, monitor, listed)}
    exporters = sorted(p.name for p in mine)
    if exporters != names:  # the monitor itself runs no DCGM exporter: its node is no dcgm target
        d["port_pools"] = {str(ports()[JOBS["dcgm"]]): exporters}
    return d


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


# the Slack message's text and link (rev53d #2). Alertmanager 0.25's template/default.tmpl leaves `slack.default.
# text` empty, so a message named the alert and its labels only, never what the rules' summary says; and its title
# link (and the fallback's) is {{ .ExternalURL }}/#/alerts..., http://<the monitor's hostname>:9093, while the
# monitor's Alertmanager listens on its loopback only: a link no reader opens. So: each alert's summary (and its
# description where one is set), no title link (notify/slack/slack.go 0.25: title_link is omitempty), a fallback of
# the title alone. Checked by posting an alert to the real Alertmanager 0.25 (test_scrape).
SLACK_MESSAGE = {
    "title_link": "",
    "text": '{{ range .Alerts }}{{ .Annotations.summary }}{{ if .Annotations.description }}\n'
            '{{ .Annotations.description }}{{ end }}\n{{ end }}',
    "fallback": '{{ template "slack.default.title" . }}',
}


def render_alertmanager(stack) -> str:
    """alertmanager.yml: one receiver, the stack's webhook (resolved alerts too), or none (alerts are
    shown in Alertmanager and Prometheus only). A Slack incoming webhook gets Alertmanager's Slack notifier, which
    posts the message Slack takes; its api_url is a secret Alertmanager does not serve back (slack_config,
    prometheus.io/docs/alerting/0.25/configuration/#slack_config, read 2026-11-28; in 0.23 too)."""
    m = stack.monitoring
    receiver: dict = {"name": "gpufleet"}
    if m.alert_to_slack:
        receiver["slack_configs"] = [{"api_url": m.alert_webhook, "send_resolved": True, **SLACK_MESSAGE}]
    elif m.alert_webhook:
        receiver["webhook_configs"] = [{"url": m.alert_webhook, "send_resolved": True}]
    doc = {"route": {"receiver": "gpufleet", "group_by": ["alertname", "cluster", "pool", "node"],
                     "group_wait": "30s", "group_interval": "5m", "repeat_interval": "4h"},
           "receivers": [receiver]}
    return HEADER + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)

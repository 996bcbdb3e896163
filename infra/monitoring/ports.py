"""The monitoring formula's defaults (salt/monitoring/parameters/defaults.yaml), read once: its ``ports``
(node_exporter, DCGM exporter, Prometheus, Alertmanager, Grafana), declared there once, and the paths the
monitor host uses."""

from __future__ import annotations

from functools import cache

import yaml

from gpufleet.paths import states_dir

DEFAULTS = "monitoring/parameters/defaults.yaml"  # under the Salt state tree


@cache
def parameters() -> dict:
    return yaml.safe_load((states_dir() / DEFAULTS).read_text())


LOCAL = "127.0.0.1"  # where `gpufleet dashboard` serves the monitor's pages on the reader's machine
MONITOR = ("prometheus", "alertmanager", "grafana")  # what the monitor host serves (the nodes: the exporters)


def monitor_ports() -> list[int]:
    """The monitor host's own ports, which answer inside the cluster's network only (each cloud's rules)."""
    return [ports()[name] for name in MONITOR]


def ports() -> dict[str, int]:
    """node_exporter, dcgm_exporter, prometheus, alertmanager, grafana -> port."""
    return dict(parameters()["ports"])


def local_url(service: str) -> str:
    """``service``'s page where `gpufleet dashboard CLUSTER --port <its port>` forwards it on the reader's machine."""
    return f"http://{LOCAL}:{ports()[service]}/"

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


def ports() -> dict[str, int]:
    """node_exporter, dcgm_exporter, prometheus, alertmanager, grafana -> port."""
    return dict(parameters()["ports"])

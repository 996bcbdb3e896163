"""The monitoring stack's ports (node_exporter, DCGM exporter, Prometheus, Alertmanager, Grafana), declared
once in the formula's defaults (salt/monitoring/parameters/defaults.yaml, ``ports``) and read from there."""

from __future__ import annotations

from functools import cache

import yaml

from gpufleet.paths import states_dir

DEFAULTS = "monitoring/parameters/defaults.yaml"  # under the Salt state tree


@cache
def ports() -> dict[str, int]:
    with open(states_dir() / DEFAULTS) as f:
        return dict(yaml.safe_load(f)["ports"])

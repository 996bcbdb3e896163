"""The cluster collector's settings: what ``monitoring.collector`` (salt/monitoring/collector.sls) gives the monitor
host's ``gpufleet-cluster-metrics`` (salt/monitoring/files/), as the pillar's ``monitoring:collector``.

Spend is estimated on the host, each run, from the cluster's hourly price and when it came up (its hours this
calendar month, as `gpufleet budget` counts them); budgets are the monthly amounts of those the cluster falls under.
"""

from __future__ import annotations

from collections.abc import Iterable

INTERVAL_S = 60  # the collector's timer period; the stale-metrics alert allows rules.STALE_INTERVALS of them


def settings(cluster: str, *, usd_per_hour: float | None, since: str | None, budgets: Iterable[tuple[str, float]],
             slurm: bool) -> dict:
    """The pillar's ``monitoring:collector``: ``usd_per_hour`` (fleet/budgets.py's per_hour of the cluster's record;
    None: unpriced, no spend is said), ``since`` (its created_at, ISO 8601 UTC with a Z), ``budgets`` as (name, US$
    a month), ``slurm``: the monitor host is Slurm's controller (or may ask it)."""
    return {"interval": INTERVAL_S, "settings": {
        "cluster": cluster, "usd_per_hour": usd_per_hour, "since": since, "slurm": slurm,
        "budgets": [{"name": name, "usd_per_month": float(usd)} for name, usd in budgets]}}

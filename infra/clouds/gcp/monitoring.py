"""How Prometheus on the monitor host finds a GCP pool's nodes: Compute Engine service discovery by
the cluster's labels, so a node heal replaced or `up` added is scraped without a hand edit.

``gce_sd_configs`` as Prometheus 2.42 reads them (prometheus.io/docs/prometheus/2.42/configuration/
configuration/#gce_sd_config, read 2026-11-27): ``project``, ``zone`` (one per config), ``filter``
(instances.list's filter), ``port``; each label is ``__meta_gce_label_<name>`` with ``-`` as ``_``.
The monitor host's identity needs ``DISCOVERY_PERMISSIONS`` (instances.list, the call it makes).
"""

from __future__ import annotations

from gpufleet import catalog
from gpufleet.clouds.gcp import credentials
from gpufleet.clouds.gcp.tags import label_value
from gpufleet.errors import CredentialsError

DISCOVERY_PERMISSIONS = ("compute.instances.list",)


def scrape_discovery(cluster: str, pools: list, port: int) -> tuple[dict, list]:
    project = credentials.project()
    if not project:
        raise CredentialsError("gcp", "gcp: no project is set (Prometheus's discovery lists the cluster's instances "
                               "in it)", "set GOOGLE_CLOUD_PROJECT=my-project")
    zones = sorted({z for p in pools for z in _zones(p)})
    pools_filter = " OR ".join(f'labels.gpufleet-pool="{label_value(p.name)}"' for p in sorted(pools, key=lambda p: p.name))
    flt = f'labels.gpufleet-cluster="{label_value(cluster)}" AND ({pools_filter})'
    configs = [{"project": project, "zone": z, "port": port, "filter": flt} for z in zones]
    relabel = [{"source_labels": ["__meta_gce_label_gpufleet_pool"], "regex": "(.+)", "target_label": "pool"},
               {"source_labels": ["__meta_gce_instance_name"], "regex": "(.+)", "target_label": "node"}]
    return {"gce_sd_configs": configs}, relabel


def _zones(pool) -> tuple[str, ...]:
    """Where the pool's nodes may be: its zone, else every zone of its region; and where failover may
    move it (one gce_sd_config lists one zone)."""
    f = pool.failover
    if pool.zone and not (f and (f.zones or f.regions)):
        return (pool.zone,)
    cat = catalog.load()
    regions = (pool.region, *(f.regions if f else ()))
    return tuple(z for r in regions if r for z in cat.region_zones("gcp", r))

"""How the monitor finds a GCP pool's nodes: root on the monitor's node lists them (instances.aggregatedList on the
cluster's label, clouds/node_targets.py) with the monitor VM's service account, and writes them for Prometheus's
file_sd, so a node heal replaced or `scale` added is scraped without a hand edit. Prometheus's own gce_sd would need
the metadata server's token, which the node's guard keeps from its user (node_targets says why).

The service account needs ``DISCOVERY_PERMISSIONS`` (aggregatedList checks compute.instances.list on the project:
cloud.google.com/compute/docs/reference/rest/v1/instances/aggregatedList, "Authorization", read 2026-11-27): the
monitor pool's account gets them through a custom role of that one permission (components.GpuNodePool).
"""

from __future__ import annotations

from gpufleet.clouds import node_targets
from gpufleet.clouds.gcp import credentials
from gpufleet.clouds.gcp.tags import label_value
from gpufleet.errors import CredentialsError

DISCOVERY_PERMISSIONS = ("compute.instances.list",)


def scrape_discovery(cluster: str, pools: list, port: int) -> tuple[dict, list]:
    return node_targets.file_sd(port), []


def monitor_discovery(cluster: str, monitor, pools: list) -> dict:
    """What node_targets.gcp_nodes lists: the project's instances labelled with the cluster, each pool by its label."""
    project = credentials.project()
    if not project:
        raise CredentialsError("gcp", "gcp: no project is set (the monitor lists the cluster's instances in it)",
                               "set GOOGLE_CLOUD_PROJECT=my-project")
    return {"project": project, "cluster_label": label_value(cluster), "pools": {label_value(p.name): p.name for p in pools}}

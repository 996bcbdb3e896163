"""How the monitor finds an Azure pool's nodes: root on the monitor's node lists each pool's scale set's network
interfaces (clouds/node_targets.py) with the monitor pool's managed identity, and writes them for Prometheus's
file_sd, so a node heal replaced or `scale` added is scraped without a hand edit. Prometheus's own azure_sd would need
the identity's token, which the node's guard keeps from its user (node_targets says why).

The identity needs ``DISCOVERY_ACTIONS`` on the cluster's resource groups (the REST call "Network Interfaces - List
Virtual Machine Scale Set Network Interfaces", api-version 2018-10-01, reads them; the action is listed under
Microsoft.Compute in "Azure resource provider operations", read 2026-11-27): the monitor pool's identity gets a
custom role of that one action (components.GpuNodePool).
"""

from __future__ import annotations

from gpufleet.clouds import node_targets
from gpufleet.clouds.azure import credentials
from gpufleet.clouds.azure.access import group_name
from gpufleet.clouds.pools import resource_name
from gpufleet.errors import CredentialsError

DISCOVERY_ACTIONS = ("Microsoft.Compute/virtualMachineScaleSets/networkInterfaces/read",)


def scrape_discovery(cluster: str, pools: list, port: int) -> tuple[dict, list]:
    return node_targets.file_sd(port), []


def monitor_discovery(cluster: str, monitor, pools: list) -> dict:
    """What node_targets.azure_nodes lists: each pool's scale set (components.GpuNodePool's name) in the monitor's
    region, whose resource group the monitor's role is given (another region's VNet is not the monitor's network)."""
    sub = credentials.subscription()
    if not sub:
        raise CredentialsError("azure", "azure: no subscription is selected (the monitor lists the cluster's VMs in it)",
                               "set ARM_SUBSCRIPTION_ID")
    return {"subscription": sub, "scale_sets": [
        {"group": group_name(cluster, p.region), "name": resource_name(cluster, p.name, limit=64), "pool": p.name}
        for p in sorted(pools, key=lambda p: p.name) if p.region == monitor.region]}

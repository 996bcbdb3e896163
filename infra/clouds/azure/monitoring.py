"""How Prometheus on the monitor host finds an Azure pool's nodes: Azure service discovery in the
cluster's resource group, each pool's scale set by its name, so a node heal replaced or `up` added is
scraped without a hand edit.

``azure_sd_configs`` as Prometheus 2.42 reads them (prometheus.io/docs/prometheus/2.42/configuration/
configuration/#azure_sd_config, read 2026-11-27): ``subscription_id``, ``resource_group``,
``authentication_method: ManagedIdentity``, ``port``; a scale set's VM has ``__meta_azure_machine_scale_set``.
The same page names what the identity reads: ``DISCOVERY_ACTIONS``.
"""

from __future__ import annotations

import re

from gpufleet.clouds.azure import credentials
from gpufleet.clouds.azure.access import group_name
from gpufleet.clouds.pools import resource_name
from gpufleet.errors import CredentialsError

DISCOVERY_ACTIONS = ("Microsoft.Compute/virtualMachines/read", "Microsoft.Network/networkInterfaces/read",
                     "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/read",
                     "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/networkInterfaces/read")


def scrape_discovery(cluster: str, pools: list, port: int) -> tuple[dict, list]:
    sub = credentials.subscription()
    if not sub:
        raise CredentialsError("azure", "azure: no subscription is selected (Prometheus's discovery lists the "
                               "cluster's VMs in it)", "set ARM_SUBSCRIPTION_ID")
    regions = sorted({p.region for p in pools if p.region})
    configs = [{"subscription_id": sub, "resource_group": group_name(cluster, r),
                "authentication_method": "ManagedIdentity", "port": port} for r in regions]
    sets = {resource_name(cluster, p.name, limit=64): p.name for p in pools}  # components.GpuNodePool's name
    relabel = [{"source_labels": ["__meta_azure_machine_scale_set"], "regex": re.escape(vmss), "target_label": "pool",
                "replacement": pool} for vmss, pool in sorted(sets.items())]
    relabel += [{"source_labels": ["__meta_azure_machine_name"], "regex": "(.+)", "target_label": "node"},
                # another VM of the group (a Bastion's, a user's) is not a node; a target of no Azure config passes
                {"source_labels": ["__meta_azure_machine_id", "__meta_azure_machine_scale_set"], "action": "keep",
                 "regex": ";|[^;]+;(" + "|".join(re.escape(s) for s in sorted(sets)) + ")"}]
    return {"azure_sd_configs": configs}, relabel

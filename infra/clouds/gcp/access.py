"""Reaching a GCP node without port 22 open to the world: SSH through IAP TCP forwarding.

OpenSSH runs ``gcloud compute start-iap-tunnel`` as its ProxyCommand, relaying the connection
over its standard input and output (``--listen-on-stdin``, the mode ``gcloud compute ssh
--tunnel-through-iap`` itself runs it in). The command and its arguments (INSTANCE_NAME
INSTANCE_PORT, ``--zone``, ``--project``) are gcloud's reference
(https://cloud.google.com/sdk/gcloud/reference/compute/start-iap-tunnel, read 2026-11)::

    ProxyCommand gcloud compute start-iap-tunnel <instance> %p --listen-on-stdin --project=<project> --zone=<zone>

The instance is the VM's name, ``<cluster>-<pool>-<index>`` as ``components.GpuNodePool`` names
its bulkInsert VMs (flex-start VMs are named by their group, which the registry does not record:
their `ssh-config` entry names the bulk name and will not resolve). The project is the one `up`
used: ``GOOGLE_CLOUD_PROJECT`` (and the other variables ``credentials.project`` reads); without
one, gcloud's own configured project.

What it takes ("Using IAP for TCP forwarding", https://cloud.google.com/iap/docs/using-tcp-forwarding,
read 2026-11): a firewall rule admitting TCP 22 from IAP's range 35.235.240.0/20 to the VMs
(``components.ClusterNetwork`` creates it, to the cluster's network tag only, when ``access.via``
is ``cloud``), and, for the person connecting, ``roles/iap.tunnelResourceAccessor`` (IAP-secured
Tunnel User) on the project or the VMs, plus the gcloud CLI.
"""

from __future__ import annotations

from gpufleet.clouds.base import SshRoute, Tool
from gpufleet.clouds.gcp import credentials
from gpufleet.clouds.gcp.rules import gcp_name

SOURCE = "https://cloud.google.com/sdk/gcloud/reference/compute/start-iap-tunnel"
IAP_RANGE = "35.235.240.0/20"  # the addresses IAP's TCP forwarding connects from (using-tcp-forwarding)
ROLE = "roles/iap.tunnelResourceAccessor"  # what the person connecting needs
TOOLS = (Tool("gcloud", "install the Google Cloud CLI: https://cloud.google.com/sdk/docs/install, then "
              "`gcloud auth login`; you need " + ROLE),)


def instance_name(cluster: str, pool: str, idx: int) -> str:
    """The VM's name, as the pool's bulkInsert named it."""
    return gcp_name(cluster, pool, str(idx))


def proxy_command(instance: str, zone: str, project: str | None) -> str:
    """gcloud's IAP tunnel on standard input and output (``%p``: the port)."""
    return (f"gcloud compute start-iap-tunnel {instance} %p --listen-on-stdin"
            + (f" --project={project}" if project else "") + f" --zone={zone}")


def ssh_route(node, *, cluster: str, stack) -> SshRoute:
    name = instance_name(cluster, node.pool, node.idx)
    return SshRoute("GCP IAP TCP forwarding",
                    {"HostName": name, "Port": "22",
                     "ProxyCommand": proxy_command(name, node.zone or node.location, credentials.project())},
                    TOOLS, SOURCE)

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

Every word is shell-quoted (``base.command_line``), and what comes from the registry (in team mode
the team's store: the zone, the VM's id) or the environment (the project) is checked against its
format first. The VM's host key is filed under ``compute.<instance id>`` (``HostKeyAlias``), as
gcloud itself files it in ``google_compute_known_hosts``: a VM name recurs when a cluster is
brought up again under its name, its id never does.
"""

from __future__ import annotations

import re

from gpufleet.clouds.base import PORT, SshRoute, Tool, command_line
from gpufleet.clouds.gcp import credentials
from gpufleet.clouds.gcp.rules import gcp_name
from gpufleet.errors import InputError
from gpufleet.netnames import matching

SOURCE = "https://cloud.google.com/sdk/gcloud/reference/compute/start-iap-tunnel"
IAP_RANGE = "35.235.240.0/20"  # the addresses IAP's TCP forwarding connects from (using-tcp-forwarding)
ROLE = "roles/iap.tunnelResourceAccessor"  # what the person connecting needs
TOOLS = (Tool("gcloud", "install the Google Cloud CLI: https://cloud.google.com/sdk/docs/install, then "
              "`gcloud auth login`; you need " + ROLE),)


def instance_name(cluster: str, pool: str, idx: int) -> str:
    """The VM's name, as the pool's bulkInsert named it."""
    return gcp_name(cluster, pool, str(idx))


# formats (Compute Engine "Naming resources", "Regions and zones", Resource Manager "Creating and
# managing projects", 2026): a VM name is an RFC 1035 label; a zone is region-letter
# (us-central1-a); a project id 6-30 lowercase letters, digits and hyphens, maybe domain-scoped
# (example.com:my-project); an instance id is a number
VM_NAME = re.compile(r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?")
ZONE = re.compile(r"[a-z]+-[a-z]+[0-9]+-[a-z]")
PROJECT = re.compile(r"(?:[a-z0-9][-a-z0-9.]*[a-z0-9]:)?[a-z][-a-z0-9]{4,28}[a-z0-9]")
INSTANCE_ID = re.compile(r"[0-9]{1,20}")


def proxy_command(instance: str, zone: str, project: str | None) -> str:
    """gcloud's IAP tunnel on standard input and output (``%p``: the port)."""
    return command_line("gcloud", "compute", "start-iap-tunnel", instance, PORT, "--listen-on-stdin",
                        *([f"--project={project}"] if project else []), f"--zone={zone}")


def host_key_alias(node, *, cluster: str) -> str | None:
    """The name the VM's host key is filed under: ``compute.<instance id>``, as gcloud files it."""
    where = f"the registry's record of {cluster} node {node.pool}-{node.idx}"
    if node.node_id is None:
        return None
    return "compute." + matching(node.node_id, INSTANCE_ID, "instance id", "a Compute Engine instance id (a number)",
                                 where)


def ssh_route(node, *, cluster: str, stack) -> SshRoute:
    where = f"the registry's record of {cluster} node {node.pool}-{node.idx}"
    name = matching(instance_name(cluster, node.pool, node.idx), VM_NAME, "VM name", "a Compute Engine name", where)
    zone = matching(node.zone or node.location, ZONE, "zone", "a Compute Engine zone (us-central1-a)", where)
    project = credentials.project()
    if project is not None and not PROJECT.fullmatch(project):
        raise InputError(f"the project {project[:80]!r} (GOOGLE_CLOUD_PROJECT or the variables gcloud reads) is not a "
                         "Google Cloud project id", "set GOOGLE_CLOUD_PROJECT=my-project")
    options = {"HostName": name, "Port": "22", "ProxyCommand": proxy_command(name, zone, project)}
    alias = host_key_alias(node, cluster=cluster)
    if alias:
        options["HostKeyAlias"] = alias
    return SshRoute("GCP IAP TCP forwarding", options, TOOLS, SOURCE)

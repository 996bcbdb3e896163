"""The team's own racks as a provider: machines that exist, reached over SSH (``ssh``), known by
their facts (``facts``), configured and drained host by host (``hosts``), and known to a Pulumi
stack that also has cloud pools as dynamic resources (``rack``).

Racks have no API and no tags: they are validated like the clouds' pools, and the rest of
gpufleet reaches them through ``hosts``."""

from __future__ import annotations

from gpufleet.clouds.baremetal import access, monitoring
from gpufleet.spec import Problem


class Baremetal:
    name = "baremetal"
    lustre_flavor = "onprem"
    time_servers = ()  # the site's own, already configured
    ib_port_per_gpu = False  # one InfiniBand port per node unless the site says more
    # the fabrics a rack may have; none needs a particular machine type
    interconnects = {"infiniband-hdr": None, "infiniband-ndr": None, "roce": None,
                     "10gbe": None, "25gbe": None, "100gbe": None}

    scrape_discovery = staticmethod(monitoring.scrape_discovery)  # the hosts the stack lists
    def monitor_discovery(self, cluster: str, monitor, pools: list) -> dict:
        return {}  # a rack's hosts are written out (scrape_discovery): nothing for a node to list

    def check_pool(self, stack, pool, instance) -> list[Problem]:
        return []  # the stack model checks a rack pool's shape; its hosts are checked when reached

    def ssh_route(self, node, *, cluster: str, stack):
        return access.ssh_route(node, cluster=cluster, stack=stack)  # directly, with the site's known hosts

    def host_key_alias(self, node, *, cluster: str) -> None:
        return None  # a host's key is its site's known_hosts file's, by address and port


PROVIDER = Baremetal()

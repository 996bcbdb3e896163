"""Reaching a rack host: directly, at the address, port and user the stack gives it, checking its
host key against the same known_hosts file of its site that gpufleet's own SSH uses (so a host
`up` trusted is trusted, and a changed key is refused, by OpenSSH too)."""

from __future__ import annotations

import re

from gpufleet import netnames
from gpufleet.clouds.baremetal.hosts import rack_targets
from gpufleet.clouds.base import SshRoute
from gpufleet.paths import known_hosts_path

# a site as a recorded node names it (its location), before it becomes a file name under gpufleet's data
# folder: no folder separator, no leading dot
SITE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def ssh_route(node, *, cluster: str, stack) -> SshRoute:
    target = next((t for t in (rack_targets(stack) if stack is not None else [])
                   if (t.pool, t.idx) == (node.pool, node.idx)), None)
    if target is None:  # no stack: what the registry recorded (address:port), pinned to this machine's site file
        where = f"the registry's record of {cluster} node {node.pool}-{node.idx}"
        host, port = netnames.endpoint(node.ssh_endpoint, node.private_ip, where)
        site = netnames.matching(node.location, SITE, "site", "a site name (letters, digits, . _ -)", where)
        return SshRoute("direct", {"HostName": host, "Port": port, "User": "root",
                                   "UserKnownHostsFile": str(known_hosts_path(site)), "StrictHostKeyChecking": "yes"})
    opts = {"HostName": target.address, "Port": str(target.port), "User": target.user}
    if target.key:
        opts["IdentityFile"] = str(target.key)
    opts.update(UserKnownHostsFile=str(target.known_hosts), StrictHostKeyChecking="yes")
    return SshRoute("direct", opts)

"""Reaching a rack host: directly, at the address, port and user the stack gives it, checking its
host key against the same known_hosts file of its site that gpufleet's own SSH uses (so a host
`up` trusted is trusted, and a changed key is refused, by OpenSSH too)."""

from __future__ import annotations

from gpufleet import netnames
from gpufleet.clouds.baremetal.hosts import rack_targets
from gpufleet.clouds.base import SshRoute


def ssh_route(node, *, cluster: str, stack) -> SshRoute:
    target = next((t for t in (rack_targets(stack) if stack is not None else [])
                   if (t.pool, t.idx) == (node.pool, node.idx)), None)
    if target is None:  # the stack file is gone: what the registry recorded (address:port)
        host, port = netnames.endpoint(node.ssh_endpoint, node.private_ip, f"the registry's record of {cluster} node "
                              f"{node.pool}-{node.idx}")
        return SshRoute("direct", {"HostName": host, "Port": port, "User": "root"})
    opts = {"HostName": target.address, "Port": str(target.port), "User": target.user}
    if target.key:
        opts["IdentityFile"] = str(target.key)
    opts.update(UserKnownHostsFile=str(target.known_hosts), StrictHostKeyChecking="yes")
    return SshRoute("direct", opts)

"""Reaching an Azure node without port 22 open to the world: SSH through Azure Bastion's native
client support.

Azure documents two forms ("Connect to a VM using Bastion and a Linux native client",
https://learn.microsoft.com/azure/bastion/connect-vm-native-client-linux, read 2026-11)::

    az network bastion ssh --name <bastion> --resource-group <group> --target-resource-id <VM or VMSS instance id> \
        --auth-type ssh-key --username <user> --ssh-key <file>
    az network bastion tunnel --name <bastion> --resource-group <group> --target-resource-id <id> \
        --resource-port 22 --port <local port>

Neither fits OpenSSH's ProxyCommand, which talks to the node over its standard input and output:
``bastion ssh`` runs ssh itself (no scp, rsync or VS Code, and file transfer is unsupported
there), and ``bastion tunnel`` listens on a local port until it is stopped. So the ProxyCommand
is this module (``python -m gpufleet.clouds.azure.access ...``): it starts ``az network bastion
tunnel`` on a free local port, waits for it to listen, relays standard input and output to it
and stops it when ssh is done. Every use of the alias (ssh, scp, rsync, VS Code) gets its own
tunnel, and none outlives its connection.

What it takes: a Bastion of the Standard SKU with native client support (``enableTunneling``)
in an ``AzureBastionSubnet`` with its public IP (``components.ClusterNetwork`` creates them when
``access.via`` is ``cloud``); for the person connecting, the Azure CLI with its ``bastion``
extension (``az extension add --name bastion``), ``az login``, and Reader on the Bastion, the
VM scale set and its NIC ("Configure Bastion for native client connections",
https://learn.microsoft.com/azure/bastion/native-client, read 2026-11).

The relay's words are shell-quoted (``base.command_line``); the VM's ARM id, its region and its
private address come from the registry (in team mode the team's store) and are checked first.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import threading
import time

from gpufleet import netnames
from gpufleet.clouds.base import SshRoute, Tool, command_line
from gpufleet.clouds.pools import resource_name

SOURCE = "https://learn.microsoft.com/azure/bastion/connect-vm-native-client-linux"
TOOLS = (Tool("az", "install the Azure CLI (https://learn.microsoft.com/cli/azure/install-azure-cli), then "
              "`az extension add --name bastion` and `az login`"),)
SUBNET = "AzureBastionSubnet"  # the name Azure requires of a Bastion's subnet
WAIT_S = 60.0  # how long the tunnel may take to listen


def bastion_name(cluster: str, region: str) -> str:
    return resource_name(cluster, region, "bastion", limit=80)


def group_name(cluster: str, region: str) -> str:
    """The cluster's resource group in a region (``components.ClusterNetwork``'s), which holds its Bastion."""
    return resource_name("gpufleet", cluster, region, limit=90)


def _part(resource_id: str, key: str) -> str | None:
    parts = resource_id.split("/")
    lowered = [p.lower() for p in parts]
    return parts[lowered.index(key) + 1] if key in lowered and lowered.index(key) + 1 < len(parts) else None


def tunnel_args(*, bastion: str, group: str, target: str, subscription: str | None) -> list[str]:
    """``az network bastion tunnel``'s arguments, all but the local ``--port``."""
    return ["az", "network", "bastion", "tunnel", "--name", bastion, "--resource-group", group,
            "--target-resource-id", target, "--resource-port", "22",
            *(["--subscription", subscription] if subscription else [])]


# formats (ARM "Resource naming rules", 2026): a scale set VM's ARM id is a path of names of letters,
# digits, - _ . ( ) ending in virtualMachines/<instance id>; a region is lowercase letters and digits
VM_ID = re.compile(r"[A-Za-z0-9_.()/-]+/virtualMachines/[A-Za-z0-9_-]+", re.IGNORECASE)
REGION = re.compile(r"[a-z0-9]+")
# a VM's vmId ("Azure VM unique ID": pulumi-azure-native 3.29 compute.get_virtual_machine_scale_set_vm; IMDS
# compute.vmId on the VM): a GUID
VM_UID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def host_key_alias(node, *, cluster: str) -> str | None:
    """The name a VM's host key is filed under: its vmId, which Azure gives it alone (its ARM id,
    .../virtualMachines/0, and its private address come back with the next cluster of the name);
    None for a node recorded before gpufleet recorded it."""
    where = f"the registry's record of {cluster} node {node.pool}-{node.idx}"
    return netnames.matching(node.vm_uid, VM_UID, "vmId", "an Azure VM's unique id (a GUID)", where) if getattr(
        node, "vm_uid", None) else None


def proxy_command(*, bastion: str, group: str, target: str, subscription: str | None) -> str:
    """This module as OpenSSH's ProxyCommand, for one node (OpenSSH runs it through the shell)."""
    args = tunnel_args(bastion=bastion, group=group, target=target, subscription=subscription)[4:]
    return command_line(sys.executable, "-m", "gpufleet.clouds.azure.access", *args)


def ssh_route(node, *, cluster: str, stack) -> SshRoute:
    """The Bastion of the node's region, in the node's resource group (the cluster's, per region)."""
    where = f"the registry's record of {cluster} node {node.pool}-{node.idx}"
    target = netnames.matching(node.node_id, VM_ID, "VM id", "a scale set VM's ARM id", where) if node.node_id else ""
    netnames.matching(node.location, REGION, "region", "an Azure region (eastus)", where)
    if node.private_ip:
        netnames.address(node.private_ip, "private address", where)
    alias = host_key_alias(node, cluster=cluster)
    return SshRoute("Azure Bastion (native client tunnel)",
                    {"HostName": node.private_ip or target, "Port": "22", **({"HostKeyAlias": alias} if alias else {}),
                     "ProxyCommand": proxy_command(
                         bastion=bastion_name(cluster, node.location), group=group_name(cluster, node.location),
                         target=target, subscription=_part(target, "subscriptions"))},
                    TOOLS, SOURCE)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


def _pump(read, write) -> None:
    """Copy until the reading side closes (or either side fails)."""
    try:
        while chunk := read():
            write(chunk)
    except OSError:
        pass


def relay(tunnel: list[str], *, wait_s: float = WAIT_S, stdin: int = 0, stdout: int = 1) -> int:
    """Start ``tunnel`` (``az network bastion tunnel ...``) on a free local port, relay ``stdin`` and
    ``stdout`` (file descriptors) to it until either side closes, then stop it. Its own output goes
    to standard error, which ssh shows: standard output is the SSH connection."""
    port = free_port()
    proc = subprocess.Popen([*tunnel, "--port", str(port)], stdin=subprocess.DEVNULL, stdout=sys.stderr.fileno())
    try:
        deadline = time.monotonic() + wait_s
        while True:
            if proc.poll() is not None:
                sys.stderr.write(f"gpufleet: `{shlex.join(tunnel)}` exited ({proc.returncode}) before it listened\n")
                return 255
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=1)
                break
            except OSError:
                if time.monotonic() > deadline:
                    sys.stderr.write(f"gpufleet: the Bastion tunnel did not listen on port {port} in {wait_s:g} s\n")
                    return 255
                time.sleep(0.2)
        sock.settimeout(None)

        def up():  # ssh's bytes to the node; its end of input closes our sending side
            _pump(lambda: os.read(stdin, 65536), sock.sendall)
            try:
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass

        threading.Thread(target=up, daemon=True).start()
        _pump(lambda: sock.recv(65536), lambda b: _write_all(stdout, b))  # the node's bytes to ssh
        sock.close()
        return 0
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()


def main(argv: list[str]) -> int:
    return relay(["az", "network", "bastion", "tunnel", *argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

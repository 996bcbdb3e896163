"""The address plan of a stack: non-overlapping subnets carved from its network block."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from gpufleet.clouds import cloud
from gpufleet.errors import InputError
from gpufleet.providers import CLOUDS


@dataclass
class Subnet:
    cidr: str
    purpose: str  # "public" (NAT, public nodes) or a pool name


@dataclass
class AddressPlan:
    """Subnets carved from the stack's network block: one public per cloud region, one per pool.

    Carving runs over the whole stack in file order, so every subnet is unique across
    regions and providers (GCP networks are global; unique ranges keep peering possible).
    """

    cidr: str
    subnets: dict[tuple[str, str, str], Subnet] = field(default_factory=dict)  # (provider, region, purpose)

    def get(self, provider: str, region: str, purpose: str) -> str:
        return self.subnets[(provider, region, purpose)].cidr


def plan_addresses(cidr: str, needs: list[tuple[str, str, str, int]]) -> AddressPlan:
    """``needs``: (provider, region, purpose, addresses) in order; returns non-overlapping subnets.

    Each subnet is the smallest power-of-two block holding twice the addresses (room to
    replace nodes and for file-system interfaces) plus the five every cloud reserves, and
    at least a /24; a small one (``addresses`` <= 16, e.g. the NAT subnet) gets a /28.
    Raises InputError when the block is too small.
    """
    net = ipaddress.ip_network(cidr)
    plan = AddressPlan(cidr)
    # allocate biggest first so alignment wastes nothing, then report in the given order
    order = sorted(range(len(needs)), key=lambda i: -needs[i][3])
    cursor = int(net.network_address)
    end = int(net.broadcast_address) + 1
    taken: dict[int, str] = {}
    for i in order:
        n = needs[i][3]
        want = n + 5 if n <= 11 and needs[i][2] == "public" else max(256, 2 * n + 5)
        prefix = min(28, 32 - max(4, (want - 1).bit_length()))
        size = 1 << (32 - prefix)
        start = (cursor + size - 1) // size * size
        if start + size > end:
            raise InputError(f"network.cidr {cidr} is too small for the subnets this stack needs",
                             f"{needs[i][2]} in {needs[i][1]} needs {want} addresses; use a larger block, e.g. /16")
        taken[i] = str(ipaddress.ip_network((start, prefix)))
        cursor = start + size
    for i, (provider, region, purpose, _) in enumerate(needs):
        plan.subnets[(provider, region, purpose)] = Subnet(taken[i], purpose)
    return plan


def host_address(cidr: str, index: int) -> str:
    """The ``index``-th usable address of a subnet after the cloud-reserved first four."""
    net = ipaddress.ip_network(cidr)
    return str(net.network_address + 4 + index)


def address_needs(stack) -> tuple[list[tuple[str, str, str, int]], list[tuple[str, str]]]:
    """The subnets the stack's cloud pools need, in file order ((provider, region, purpose,
    addresses)), and its (provider, region)s in file order."""
    needs: list[tuple[str, str, str, int]] = []
    regions: list[tuple[str, str]] = []
    for p in (p for p in stack.pools if p.provider in CLOUDS):
        c = cloud(p.provider)
        if (p.provider, p.region) not in regions:
            regions.append((p.provider, p.region))
            needs += [(p.provider, p.region, purpose, n) for purpose, n in c.region_subnets(p.region)]
        if not p.subnet:
            needs.append((p.provider, p.region, p.name, p.nodes))
        needs += [(p.provider, p.region, purpose, n) for purpose, n in c.pool_subnets(p)]
    return needs, regions

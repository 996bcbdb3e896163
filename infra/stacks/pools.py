"""A stack's pools as the offers `compare` ranks (``Request.only``), and those it cannot price.

Kept out of :mod:`gpufleet.compare` because resolving a pool's instance type needs the stack
spec (pydantic), which a comparison of the catalog does not: `compare` stays fast without it.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet import spec
from gpufleet.catalog import Catalog
from gpufleet.catalog.onprem import site_from_pool


@dataclass
class StackPools:
    """A stack's pools as ``Request.only``, and those that cannot be compared, with why."""

    only: list[tuple[str, str, str, int, bool, str | None]]
    left_out: dict[str, str]  # pool -> why (no price in its market and region, a rack without site_costs)


def stack_pools(stack, cat: Catalog, source: str) -> StackPools:
    """Each pool of a (validated) stack as the offer it runs on; racks with ``site_costs`` become
    sites of ``cat``. A pool that has no price where it runs is left out, and said so."""
    out = StackPools([], {})
    for p in stack.pools:
        if p.on_rack:
            if p.site_costs is None:
                out.left_out[p.name] = "a rack without site_costs has no price (give purchase price, power, utilization)"
                continue
            cat.sites.append(site_from_pool(p, cat, f"site_costs in {source}"))
            out.only.append((p.provider, p.site, f"{p.site}-node", p.nodes, False, pool_storage(p)))
            continue
        it = spec.resolve_instance(p, cat)
        market = "spot" if p.spot else "ondemand"
        if cat.offer(p.provider, p.region, it.name, market) is None:
            out.left_out[p.name] = (f"no {market} price for {it.name} in {p.region} in the catalog"
                                    + ("; add a quote under `prices:` in your config" if p.spot else ""))
            continue
        out.only.append((p.provider, p.region, it.name, p.nodes, p.spot, pool_storage(p)))
    return out


def pool_storage(pool) -> str | None:
    """A pool's shared storage as a ``Request.storage`` value, when the stack gives its throughput."""
    for st in pool.storage:
        mbps = st.read_mbps()
        if mbps:
            return f"{st.type}:{mbps:g}"
    return None

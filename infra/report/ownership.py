"""Owning a rack vs renting: the numbers the platform talks in our sources work out by hand.

A rack's hourly cost is fixed (capex, power and operations, :mod:`gpufleet.catalog.onprem`);
its price per useful hour is that divided by the utilisation. So a training run that costs
``owned_cost`` at utilisation ``u0`` costs ``owned_cost * u0 / u`` at utilisation ``u``, and
owning is cheaper than renting an offer whose run costs ``rented_cost`` once

    u >= owned_cost * u0 / rented_cost        (the break-even utilisation)

Above 1 (100%) owning never beats that offer. Pure functions, no I/O.
"""

from __future__ import annotations

import dataclasses

from gpufleet.catalog.onprem import HOURS_PER_YEAR, Site

HOURS_PER_MONTH = HOURS_PER_YEAR / 12  # 730


def at_utilization(site: Site, utilization: float) -> Site:
    """The same rack used ``utilization`` of the time (0 < u <= 1)."""
    if not 0 < utilization <= 1:
        raise ValueError(f"utilization {utilization!r} is not in (0, 1]")
    return dataclasses.replace(site, utilization=utilization)


def usd_per_gpu_hour(site: Site, utilization: float | None = None) -> float:
    """What one useful GPU-hour of the rack costs at ``utilization`` (default: the site's own)."""
    return at_utilization(site, utilization or site.utilization).usd_per_gpu_hour()


def owned_usd_per_month(site: Site, nodes: int) -> float:
    """What ``nodes`` of the rack cost a month, used or not (capex, power and operations)."""
    return at_utilization(site, 1.0).usd_per_node_hour() * nodes * HOURS_PER_MONTH


def break_even_utilization(owned_cost: float, owned_utilization: float, rented_cost: float) -> float:
    """The utilisation at which a run on the rack (``owned_cost`` at ``owned_utilization``) costs
    what the same run costs rented (``rented_cost``); above 1, owning never beats that offer."""
    if owned_cost <= 0 or rented_cost <= 0 or not 0 < owned_utilization <= 1:
        raise ValueError("costs must be positive and the utilization in (0, 1]")
    return owned_cost * owned_utilization / rented_cost


def rented_usd_per_month(utilization: float, owned_hours_per_run: float, rented_cost_per_run: float) -> float:
    """Renting the work a rack does in a month at ``utilization``: the runs it would finish
    (``utilization * hours in a month / owned_hours_per_run``), each at ``rented_cost_per_run``."""
    return utilization * HOURS_PER_MONTH / owned_hours_per_run * rented_cost_per_run

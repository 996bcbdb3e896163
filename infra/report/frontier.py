"""The Pareto frontier of cost-to-train vs time-to-train, and the three picks on it.

Pure functions over anything with ``cost_to_train_usd`` and ``time_to_train_h``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")
PICKS = ("cheapest", "fastest", "trade-off")


def frontier(points: Sequence[T]) -> list[T]:
    """The points no other point beats on both cost and time (ties on both keep the first),
    fastest first: each one is cheaper than every faster one."""
    out: list[T] = []
    best_cost = math.inf
    for p in sorted(points, key=lambda p: (p.time_to_train_h, p.cost_to_train_usd)):
        if p.cost_to_train_usd < best_cost:
            out.append(p)
            best_cost = p.cost_to_train_usd
    return out


def trade_off(front: Sequence[T]) -> T:
    """The frontier point nearest the ideal one (the cheapest cost and the fastest time at once)
    on logarithmic scales: each doubling of cost weighs as much as each doubling of time."""
    if not front:
        raise ValueError("an empty frontier has no trade-off")
    c0 = min(p.cost_to_train_usd for p in front)
    t0 = min(p.time_to_train_h for p in front)

    def distance(p) -> float:
        return math.hypot(math.log(p.cost_to_train_usd / c0), math.log(p.time_to_train_h / t0))

    return min(front, key=lambda p: (distance(p), p.cost_to_train_usd, p.time_to_train_h))


def picks(points: Sequence[T]) -> dict[str, T]:
    """cheapest, fastest and the best trade-off (all three on the frontier); {} for no points."""
    if not points:
        return {}
    front = frontier(points)
    return {"cheapest": min(front, key=lambda p: (p.cost_to_train_usd, p.time_to_train_h)),
            "fastest": min(front, key=lambda p: (p.time_to_train_h, p.cost_to_train_usd)),
            "trade-off": trade_off(front)}

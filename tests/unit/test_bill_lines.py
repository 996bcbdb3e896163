"""The lines of a cluster's bill are named once: what `up` predicts (engine.spend, from each cloud's
``spend`` module) and what each cloud's bill is read as (clouds/<cloud>/billing.py) use the declared
names, so that `gpufleet cost` can set the bill against the prediction line by line."""

import importlib
from collections.abc import Mapping

import pytest

from gpufleet.clouds import bill_lines
from gpufleet.providers import CLOUDS

# what each cloud's ``line_of`` takes: a charge none of its patterns knows
UNKNOWN = {"aws": ("NoSuchUsageType",), "gcp": ("No Such Service", "no such SKU"), "azure": ("No Such Category",)}


def _named(provider: str) -> set[str]:
    """Every line name a cloud's billing gives: its table's (read from the table, whatever its
    shape: a mapping's values or each entry's last item) and what an unknown charge becomes."""
    m = importlib.import_module(f"gpufleet.clouds.{provider}.billing")
    table = m.LINES
    names = set(table.values()) if isinstance(table, Mapping) else {entry[-1] for entry in table}
    return names | {m.line_of(*UNKNOWN[provider])}


@pytest.mark.parametrize("provider", CLOUDS)
def test_every_cloud_bills_only_declared_lines(provider):
    undeclared = _named(provider) - set(bill_lines.BILLED)
    assert not undeclared, f"{provider}'s billing names lines no one declared: {sorted(undeclared)}"


def test_a_line_only_a_bill_has_is_compared_with_predicted_lines():
    """`network` (a bill keeping NAT and addresses together) is set against the predicted lines it adds
    up; every other billed line but `other` is a predicted one, and a billed or planned line that is
    not declared cannot be made."""
    from gpufleet.clouds.base import Billed, Usage

    assert set(bill_lines.NETWORK_PARTS) <= set(bill_lines.PREDICTED)
    assert set(bill_lines.BILLED) - set(bill_lines.PREDICTED) == {bill_lines.NETWORK, bill_lines.OTHER}
    with pytest.raises(ValueError, match="networking"):
        Billed("azure", "c", "networking", 1.0, "2026-11-01")
    with pytest.raises(ValueError, match="egress"):
        Usage("-", "egress", "transfer:internet-out", "gb", "us-east-1", 1.0, "egress")

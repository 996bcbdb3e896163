"""Every kind of node conforms to the NodeKind protocol: one signature per verb, so that the operations
loop over ``nodes.KINDS`` and never branch on a kind (as SkyPilot checks each cloud's provisioner
module against its interface, sky/provision/__init__.py)."""

import types

import pytest

from gpufleet import nodes
from gpufleet.nodes import kind


@pytest.mark.parametrize("k", nodes.KINDS, ids=lambda k: k.__name__)
def test_each_kind_has_exactly_the_protocols_signatures(k):
    assert kind.conformance(k) == []


def test_a_kind_that_departs_from_a_signature_is_told_where():
    """The check is not vacuous: a verb with another signature, a missing verb, a missing constant."""
    odd = types.ModuleType("odd")
    for verb in kind.VERBS:
        setattr(odd, verb, getattr(nodes.KINDS[0], verb))
    odd.NAME, odd.CREATES = "odd nodes", False
    assert kind.conformance(odd) == []
    odd.verify = lambda run, chosen, level: []
    del odd.drain
    odd.CREATES = None
    assert kind.conformance(odd) == ["odd.CREATES is not a bool", "odd.verify(run, chosen, level) is not "
                                     "verify(run: 'Run', level: 'str', node: 'str | None' = None) -> 'list[NodeVerdict]'",
                                     "odd has no drain()"]

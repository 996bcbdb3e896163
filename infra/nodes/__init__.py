"""Kinds of node: the machines a stack's pools become, each reached and configured its own way.

``racks`` (machines that exist, reached over SSH) and ``cloud`` (nodes Pulumi creates, which
configure themselves from the stack's bucket) conform to one protocol (``kind.NodeKind``: one
signature per verb, each handed the operation's typed ``run.Run``), so that `up`, `configure`,
`verify`, `down` and `status` loop over the kinds a stack uses instead of branching on them:
``owns``, ``reach``, ``who``, ``create``, ``configure``, ``verify``, ``drain``, ``scheduler``,
``health`` and ``repair`` (`heal`).
Each kind owns its whole pipeline (``cloud/``: the bucket channel and failover; ``racks/``:
salt-ssh and the checks over SSH).

A pool (and a node of it) is of the first kind in ``KINDS`` that owns it, so that a kind more
particular than another (a Slurm partition, simulated hosts) is one module here and one line in
``KINDS``, before the kind whose pools it takes.
"""

from __future__ import annotations

from gpufleet.nodes import cloud, racks
from gpufleet.nodes.cloud import state_tree as state_tree  # golden images bake what the self-configuring nodes apply

KINDS = (cloud, racks)  # in the order `up` takes them: the clouds' checks before anyone is reached over SSH


def owner(item):
    """The kind of a pool or of a recorded node: the first in ``KINDS`` that owns it (None: no kind does)."""
    return next((k for k in KINDS if k.owns(item)), None)


def used(stack) -> list:
    """The kinds whose pools the stack has, in ``KINDS`` order."""
    owners = {owner(p) for p in stack.pools}
    return [k for k in KINDS if k in owners]


def holding(record) -> list:
    """The kinds a cluster's record involves, in ``KINDS`` order: those owning a recorded node, and every
    kind that creates its machines (what it made may outlive the nodes recorded: `down` sweeps for it)."""
    owners = {owner(n) for n in record.nodes}
    return [k for k in KINDS if k in owners or k.CREATES]


def listing_order(kinds) -> list:
    """The kinds in the order their nodes' outcomes are listed (tables, `--json`): the machines that
    exist (rack hosts) before the nodes created."""
    return sorted(kinds, key=lambda k: k.CREATES)

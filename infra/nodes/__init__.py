"""Kinds of node: the machines a stack's pools become, each reached and configured its own way.

``racks`` (machines that exist, reached over SSH) and ``cloud`` (nodes Pulumi creates, which
configure themselves from the stack's bucket) offer the same functions, so that `up`,
`configure`, `verify` and `down` loop over the kinds a stack uses instead of branching on
providers:

- ``owns(pool)``: whether a pool is of this kind;
- ``reach(run)``: before anything is created, what must be there (credentials, the Pulumi CLI
  and quotas; the rack hosts, their facts and the software check): it raises to stop;
- ``who(run)``: who brings them up, per provider (the clouds' principals, as ``reach`` learned them;
  on racks the OS user), recorded as the cluster's creator;
- ``create(run)``: the kind's nodes (Pulumi's up; racks exist already), as registry nodes;
- ``configure(run)`` and ``verify(run, ...)``: Salt, then the checks, one report per node;
- ``drain(run, record)``: take the nodes out of service (destroy and sweep; drain the hosts).

A Slurm partition would be a third module here and one line in ``KINDS``.
"""

from __future__ import annotations

from gpufleet.nodes import cloud, racks

KINDS = (cloud, racks)  # in the order `up` takes them: the clouds' checks before anyone is reached over SSH


def used(stack) -> list:
    """The kinds whose pools the stack has, in ``KINDS`` order."""
    return [k for k in KINDS if any(k.owns(p) for p in stack.pools)]

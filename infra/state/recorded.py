"""The registry's record of a cluster an operation works on, or bad input that says it is not up."""

from __future__ import annotations

from gpufleet.errors import InputError, did_you_mean
from gpufleet.state.registry import ClusterRecord, Registry


def recorded(reg: Registry, name: str, *, otherwise: str = "`gpufleet up STACK` brings it up") -> ClusterRecord:
    """``name``'s record. A name the registry does not know is bad input naming the registry, a
    near miss, the clusters it knows (`gpufleet status` lists them), and ``otherwise``: what to do
    if it really is not up."""
    rec = reg.get(name)
    if rec is not None:
        return rec
    known = [c.name for c in reg.list()]
    near = did_you_mean(name, known)
    hint = (f"did you mean {near!r}? " if near else "") + (
        f"`gpufleet status` lists the {len(known)} recorded; " if known else "no cluster is recorded as up; ") + otherwise
    raise InputError(f"no cluster {name!r} in the registry ({reg.path})", hint)



def stack_file_for(rec: ClusterRecord, passing: str) -> str:
    """The stack file to read for ``rec`` (``ClusterRecord.own_stack_file``), or InputError saying to pass
    it (``passing``: how the command takes one)."""
    if rec.own_stack_file is None:
        raise InputError(rec.stack_hint(passing) if rec.store else f"cluster {rec.name} has no recorded stack file",
                         f"pass the stack file: {passing}")
    return rec.own_stack_file

"""The NodeKind protocol: what every kind of node offers, one signature per verb, so that `up`,
`configure`, `verify`, `down` and `status` loop over the kinds a stack uses and never branch on one.

A kind is a module of ``gpufleet.nodes`` listed in ``nodes.KINDS``; everything an operation hands
it, and everything it leaves for the next step, is in the ``Run`` (``nodes.run``). ``conformance``
holds each kind to these signatures (a test runs it on every member of ``KINDS``), as SkyPilot
holds each cloud's provisioner to its interface (sky/provision/__init__.py, ``_route_to_cloud_impl``).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Protocol

from gpufleet.errors import GpufleetError, LeftoverError
from gpufleet.nodes.health import NodeHealth, Repaired
from gpufleet.nodes.outcome import NodeOutcome
from gpufleet.nodes.run import Run
from gpufleet.state.registry import Node
from gpufleet.verify.report import NodeVerdict


@dataclass
class Reached:
    """What a kind's ``reach`` read on the way (what it keeps for later steps is in the Run)."""

    quotas: list = field(default_factory=list)  # clouds.base.QuotaLine, checked before anything is created


@dataclass
class Drained:
    """What a kind's part of a teardown did; ``done`` when nothing of it is left."""

    reports: list[NodeOutcome] = field(default_factory=list)  # one per node drained one by one (rack hosts)
    progress: object = None  # engine.automation.Progress of Pulumi's destroy
    emptied: int = 0  # objects deleted from the stack's buckets before the destroy
    swept: list = field(default_factory=list)  # clouds.inventory.Outcome: what the tag sweep deleted
    left: list = field(default_factory=list)  # clouds.resources.Resource still tagged after the sweep
    unread: dict = field(default_factory=dict)  # "aws/us-west-2" -> why it could not be checked
    error: object = None  # errors.DeployError: Pulumi's destroy failed (and its retry after the sweep)

    @property
    def gone(self) -> bool:
        """Nothing of the kind's resources is left (its nodes may still be draining)."""
        return self.error is None and not self.left and not self.unread

    @property
    def done(self) -> bool:
        return self.gone and all(r.ok for r in self.reports)


@dataclass
class Benched:
    """One node's answer to `gpufleet bench` (the node script's JSON, ``gpufleet.nodebench``), or why there is none."""

    node: str  # pool-idx
    pool: str
    address: str
    answer: dict | None = None
    error: str | None = None
    hint: str | None = None


def leftover_error(cluster: str, left, unread, outcomes=()) -> GpufleetError:
    """What is left, each with why its deletion failed (when it was tried)."""
    why = {o.resource.key: o for o in outcomes}
    parts = []
    if left:
        parts.append(f"{len(left)} resource(s) tagged gpufleet:cluster={cluster} are still there: "
                     + ", ".join(f"{r.where} {r.label()}" for r in left[:8]) + (" ..." if len(left) > 8 else ""))
    if unread:
        parts.append("could not check " + ", ".join(f"{k} ({v})" for k, v in unread.items()))
    return LeftoverError("; ".join(parts), f"the cluster stays in the registry; fix the cause and run "
                         f"`gpufleet down {cluster}` again (it deletes only what is left)",
                         resources=[{**r.to_dict(), "status": why[r.key].status if r.key in why else "not tried",
                                     "message": why[r.key].message if r.key in why else None} for r in left],
                         unread=unread)


class NodeKind(Protocol):
    NAME: str  # what the kind's nodes are called in messages ("cloud nodes", "rack hosts")
    CREATES: bool  # its nodes exist only once `up` has created them

    def owns(self, pool) -> bool:
        """Whether a pool (or a recorded node: both have a ``provider``) is of this kind."""

    def reach(self, run: Run) -> Reached:
        """Before anything is created or recorded, what must be there (credentials, quotas, hosts that
        answer and fit the stack): it raises to stop."""

    def who(self, run: Run) -> dict[str, str]:
        """Who brings the nodes up, per provider (recorded as the cluster's creator)."""

    def replaced(self, run: Run) -> list:
        """The running nodes an update (``run.existing``) would replace, shown before anything is asked."""

    def create(self, run: Run) -> list[Node]:
        """The kind's nodes, created when they must be, as registry nodes."""

    def configure(self, run: Run) -> list[NodeOutcome]:
        """Apply the stack's states on ``run.nodes`` of this kind: one outcome per node."""

    def verify(self, run: Run, level: str, node: str | None = None) -> list[NodeVerdict]:
        """The checks at ``level`` on the kind's nodes (``node``: only that one; none when it is not
        of this kind); after `up`'s configuration (``run.configured``), on the nodes that configured."""

    def bench(self, run: Run, plan: dict, python: str, launch=None) -> list[Benched]:
        """Run the training-step benchmark ``plan`` (``fleet.bench.plan``) with ``python`` on each of the kind's
        nodes of the stack, alone or on several GPUs (``launch``: ``nodebench.launch.Launch``; a job of
        ``launch.nodes`` nodes runs on the first that many): one answer per node, in order; a node that could not
        run it says why."""

    def drain(self, run: Run) -> Drained:
        """Take the kind's nodes of ``run.record`` out of service; nothing raises: what is left is said."""

    def scheduler(self, run: Run) -> dict | None:
        """Slurm's view from the controller, when one of the kind's nodes is the controller."""

    def health(self, run: Run) -> list[NodeHealth]:
        """Each of the kind's nodes in ``run.record``, as its own watch last reported it (`heal`); what
        could not be read is ``unknown`` with why, never unhealthy. Nothing raises for one node."""

    def repair(self, run: Run, node: NodeHealth, action: str) -> Repaired:
        """Do ``action`` (drain | isolate | replace; release | keep: an elastic pool's idle node given back to be
        removed, or taken back) for one of its nodes, as `heal` decided; a kind that cannot (a rack host is never
        replaced) says so in the result."""


VERBS = ("owns", "reach", "who", "replaced", "create", "configure", "verify", "bench", "drain", "scheduler", "health",
         "repair")
CONSTANTS = {"NAME": str, "CREATES": bool}


def _signature(fn) -> inspect.Signature:
    sig = inspect.signature(fn)
    return sig.replace(parameters=[p for p in sig.parameters.values() if p.name != "self"])


def conformance(kind) -> list[str]:
    """Where the module ``kind`` departs from the NodeKind protocol (empty: it conforms)."""
    out = [f"{kind.__name__}.{c} is not a {t.__name__}" for c, t in CONSTANTS.items()
           if not isinstance(getattr(kind, c, None), t)]
    for verb in VERBS:
        fn = getattr(kind, verb, None)
        if not callable(fn):
            out.append(f"{kind.__name__} has no {verb}()")
        elif _signature(fn) != _signature(getattr(NodeKind, verb)):
            out.append(f"{kind.__name__}.{verb}{_signature(fn)} is not {verb}{_signature(getattr(NodeKind, verb))}")
    return out

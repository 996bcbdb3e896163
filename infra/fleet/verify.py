"""`gpufleet verify`: prove every node of a cluster is a healthy GPU node (``gpufleet.nodecheck``
runs on each; ``gpufleet.verify`` says what each should show and collects the verdicts).

Rack hosts: over SSH, as configuration. Cloud nodes: through their bucket, as configuration:
a request in ``pools/<pool>/verify.json`` that their agent picks up within a minute, its
verdict in their status. A node that fails is marked ``unhealthy`` in the registry.
"""

from __future__ import annotations

from gpufleet import nodes as kinds
from gpufleet.errors import InputError, NotFound
from gpufleet.fleet import team
from gpufleet.nodes.run import Run, Seams
from gpufleet.state.recorded import recorded
from gpufleet.state.registry import Registry
from gpufleet.verify import expect
from gpufleet.verify.report import NodeVerdict, record


def verify(stack, cat, *, cluster: str | None = None, registry: Registry | None = None, node: str | None = None,
           level: str = "quick", trust_new_hosts: bool = False, progress=None, wait_s: float | None = None,
           stores: dict | None = None, outputs: dict | None = None, pulumi_command=None,
           prompt=None) -> list[NodeVerdict]:
    """Every node's verdict (``node``: only that one, by its name ``pool-idx`` or address)."""
    if level not in expect.LEVELS:
        raise InputError(f"unknown level {level!r}", "use --level quick or --level full")
    reg = registry or team.registry()
    name = cluster or stack.name
    rec = recorded(reg, name)
    run = Run(stack, cat, name, reg, Seams(pulumi_command, stores=stores, wait_s=wait_s), trust_new_hosts=trust_new_hosts,
              progress=progress, prompt=prompt, record=rec, backend=rec.backend, outputs=outputs)
    # a node no kind has is verified by none: nothing ran
    verdicts = [v for k in kinds.used(stack) for v in k.verify(run, level, node)]
    if node and not verdicts:
        known = [f"{n.pool}-{n.idx}" for n in rec.nodes]
        raise NotFound("node", node, known, f" in cluster {name!r}", listed_by=f"gpufleet status {name}")
    record(reg, name, verdicts)
    return verdicts

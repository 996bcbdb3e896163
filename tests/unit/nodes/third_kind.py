"""A kind of node the operations have never heard of, for the test that puts one in ``nodes.KINDS``:
the pools on rack sites, whose machines answer from memory instead of over SSH. It says what each
verb was asked (``CALLS``) and holds to the NodeKind protocol like the shipped kinds."""

from __future__ import annotations

from pathlib import Path

from gpufleet.clouds.baremetal.hosts import HostReport, HostTarget
from gpufleet.nodes.health import NodeHealth, Repaired
from gpufleet.nodes.kind import Benched, Drained, Reached
from gpufleet.nodes.outcome import NodeOutcome
from gpufleet.nodes.racks import outcome
from gpufleet.nodes.run import Run
from gpufleet.state.registry import Node
from gpufleet.verify.report import NodeVerdict

NAME = "simulated hosts"
CREATES = False
CALLS: list[str] = []


def owns(pool) -> bool:
    return pool.provider == "baremetal"


def _targets(run: Run, node: str | None = None) -> list[HostTarget]:
    return [HostTarget(p.name, i, h.address, h.port, "sim", None, p.site, Path("known_hosts"))
            for p in run.stack.pools if owns(p) for i, h in enumerate(p.hosts)
            if node in (None, f"{p.name}-{i}", h.address)]


def reach(run: Run) -> Reached:
    CALLS.append("reach to destroy" if run.tearing_down else "reach")
    return Reached()


def who(run: Run) -> dict[str, str]:
    return {p.provider: "sim@example.com" for p in run.stack.pools if owns(p)}


def replaced(run: Run) -> list:
    return []


def create(run: Run) -> list[Node]:
    CALLS.append("create")
    return [Node(pool=t.pool, idx=t.idx, provider="baremetal", location=t.site, machine="sim", node_id=t.address,
                 private_ip=t.address, ssh_endpoint=f"{t.address}:{t.port}", usd_per_hour=run.prices.get(t.pool))
            for t in _targets(run)]


def configure(run: Run) -> list[NodeOutcome]:
    CALLS.append("configure")
    return [outcome(HostReport(t, "configured")) for t in _targets(run)]


def verify(run: Run, level: str, node: str | None = None) -> list[NodeVerdict]:
    CALLS.append(f"verify {level}")
    return [NodeVerdict(t.id, t.pool, t.address, "pass") for t in _targets(run, node)]


def bench(run: Run, plan: dict, python: str, launch=None) -> list[Benched]:
    CALLS.append("bench")
    return [Benched(t.id, t.pool, t.address, error="a simulated node trains nothing") for t in _targets(run, None)]


def drain(run: Run) -> Drained:
    CALLS.append("drain")
    mine = [n for n in run.record.nodes if owns(n)]
    return Drained(reports=[outcome(HostReport(HostTarget(n.pool, n.idx, n.private_ip, 22, "sim", None, n.location,
                                                          Path("known_hosts")), "drained")) for n in mine])


def scheduler(run: Run) -> dict | None:
    CALLS.append("scheduler")
    return None


def health(run: Run) -> list[NodeHealth]:
    CALLS.append("health")
    return [NodeHealth(t.id, t.pool, NAME, "ok", t.address, t.address, replaceable=False) for t in _targets(run)]


def repair(run: Run, node: NodeHealth, action: str) -> Repaired:
    CALLS.append(f"repair {node.node} {action}")
    return Repaired(node.node, action, action != "replace", "simulated")

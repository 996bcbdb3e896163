"""`gpufleet verify`: prove every node of a cluster is a healthy GPU node (``gpufleet.nodecheck``
runs on each; ``gpufleet.verify`` says what each should show and collects the verdicts).

Rack hosts: over SSH, as configuration. Cloud nodes: through their bucket, as configuration:
a request in ``pools/<pool>/verify.json`` that their agent picks up within a minute, its
verdict in their status. A node that fails is marked ``unhealthy`` in the registry.
"""

from __future__ import annotations

from gpufleet.clouds.baremetal import hosts as racks
from gpufleet.configure import cloudnodes
from gpufleet.engine import automation
from gpufleet.errors import InputError, NotFound
from gpufleet.fleet.recorded import recorded
from gpufleet.providers import CLOUDS
from gpufleet.state.registry import Registry
from gpufleet.verify import bundle, expect, rack
from gpufleet.verify.report import NodeVerdict, apply_report, record


def verify(stack, cat, *, cluster: str | None = None, registry: Registry | None = None, node: str | None = None,
           level: str = "quick", trust_new_hosts: bool = False, progress=None, wait_s: float = cloudnodes.WAIT_S,
           stores: dict | None = None, outputs: dict | None = None, pulumi_command=None,
           prompt=None) -> list[NodeVerdict]:
    """Every node's verdict (``node``: only that one, by its name ``pool-idx`` or address)."""
    if level not in expect.LEVELS:
        raise InputError(f"unknown level {level!r}", "use --level quick or --level full")
    reg = registry or Registry()
    name = cluster or stack.name
    rec = recorded(reg, name)
    pools = {p.name: p for p in stack.pools}
    targets = [t for t in racks.rack_targets(stack) if node in (None, t.id, t.address)]
    cloud_nodes = [n for n in rec.nodes if n.provider in CLOUDS and n.pool in pools
                   and node in (None, f"{n.pool}-{n.idx}", n.private_ip, n.node_id)]
    if node and not targets and not cloud_nodes:
        known = [t.id for t in racks.rack_targets(stack)] + [f"{n.pool}-{n.idx}" for n in rec.nodes]
        raise NotFound("node", node, known, f" in cluster {name!r}", listed_by=f"gpufleet status {name}")
    verdicts: list[NodeVerdict] = []
    if targets:
        verdicts += _on_racks(stack, cat, targets, level, trust_new_hosts, progress)
    if cloud_nodes:
        if outputs is None:
            outputs = automation.outputs(name, pulumi_command=pulumi_command, prompt=prompt, backend=rec.backend)
        exps = {p: expect.for_pool(stack, pools[p], cat) for p in {n.pool for n in cloud_nodes}}
        answers = cloudnodes.verify_pools(outputs, cloud_nodes, exps, level=level, timeout_s=wait_s,
                                          progress=progress, stores=stores)
        verdicts += [cloud_verdict(t, got, wait_s) for t, got in answers]
    record(reg, name, verdicts)
    return verdicts


def cloud_verdict(target, report: dict | None, wait_s: float) -> NodeVerdict:
    """A cloud node's verdict from the report in its status (None: it did not answer)."""
    v = NodeVerdict(target.id, target.pool, target.address)
    if report is None:
        v.verdict, v.error = "timeout", f"no verification report after {wait_s:.0f}s"
        v.hint = "the node's agent runs every minute: see /var/log/gpufleet/node.log on it"
    else:
        apply_report(v, report)
    return v


def cloud_config(stack, cat, *, verify: bool = True) -> dict:
    """What `up` and `configure` add to the cloud pools' configuration: the verify bundle in the
    tree (so `gpufleet verify` can run it later) and, unless ``verify`` is off, each pool's
    expectations for the quick verification its nodes run after applying."""
    data, _ = bundle.build()
    pools = {p.name: expect.for_pool(stack, p, cat) for p in stack.pools if p.provider in CLOUDS} if verify else None
    return {"extra": {cloudnodes.VERIFY_BUNDLE: data}, "verify": pools}


def configured_verdicts(reports: list, *, asked: bool) -> list[NodeVerdict]:
    """The verdicts cloud nodes reported with their configuration (``asked``: `up` asked for them)."""
    out = []
    for r in reports:
        if not asked or not r.ok:
            continue
        v = NodeVerdict(r.target.id, r.target.pool, r.target.address)
        if r.verify:
            apply_report(v, r.verify)
        elif r.state == "current":
            continue  # nothing applied this time, so nothing verified: `gpufleet verify` does it on demand
        else:
            v.error = "the node sent no verification report"
        out.append(v)
    return out


def verify_racks(stack, cat, reports: list, *, trust_new_hosts: bool = False, progress=None) -> list[NodeVerdict]:
    """The quick verification of the rack hosts that configured (``reports``: their HostReports)."""
    targets = [r.target for r in reports if r.ok]
    return _on_racks(stack, cat, targets, "quick", trust_new_hosts, progress) if targets else []


def _on_racks(stack, cat, targets, level: str, trust_new_hosts: bool, progress) -> list[NodeVerdict]:
    pools = {p.name: p for p in stack.pools}
    exps = {t.id: expect.for_pool(stack, pools[t.pool], cat, node=t.id) for t in targets}
    return rack.verify_hosts(targets, exps, level=level, trust_new=trust_new_hosts, progress=progress)

"""`up` and `down` end to end: validate, plan, check, confirm, deploy, record.

Nothing is created before the stack is valid, its program renders under mocks, the
credentials of every provider it uses are present and the Pulumi CLI is installed; then the
caller's ``confirm`` sees the plan and its cost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpufleet.engine import automation, credentials
from gpufleet.engine.plan import Plan, cluster_for, plan
from gpufleet.engine.program import build, layout
from gpufleet.errors import GpufleetError, InputError
from gpufleet.lifecycle.registry import ClusterRecord, Node, Registry, nodes_from_outputs
from gpufleet.providers import CLOUDS
from gpufleet.providers.common import parse_expiry


class Aborted(GpufleetError):
    """The user declined at the confirmation prompt; nothing was changed."""


@dataclass
class UpOutcome:
    plan: Plan
    record: ClusterRecord
    progress: automation.Progress | None


def bring_up(stack, cat, *, confirm: Callable[[Plan], bool], cluster: str | None = None,
             registry: Registry | None = None, pulumi_command=None,
             on_progress: Callable[[automation.Progress], None] | None = None,
             prompt: Callable[[], str] | None = None) -> UpOutcome:
    reg = registry or Registry()
    name = cluster or stack.name
    existing = reg.get(name)
    if existing and existing.stack != stack.name:
        raise InputError(f"cluster {name!r} is already up from stack {existing.stack!r} ({existing.stack_file})",
                         "choose another name with --cluster")
    # an update keeps the cluster's expiry; `down` and a new `up` start a new lease
    cl = cluster_for(stack, name, expires_at=parse_expiry(existing.expires_at) if existing else None)
    the_plan = plan(stack, cat, cluster=cl)
    clouds = sorted({p.provider for p in stack.pools if p.provider in CLOUDS})
    cmd = _ready(clouds, bool(clouds), pulumi_command)
    if not confirm(the_plan):
        raise Aborted("nothing was created", "run again and answer yes, or pass --yes")

    nodes: list[Node] = []
    progress = None
    backend = automation.backend_url() if clouds else None
    from gpufleet.providers.common import format_expiry

    record = dict(name=name, stack=stack.name, stack_file=stack.source, owner=stack.owner,
                  expires_at=format_expiry(cl.expires_at), backend=backend)
    if clouds:
        program = build(layout(stack, cat), cl, gcp_project=credentials.gcp_project() if "gcp" in clouds else None,
                        azure_subscription=credentials.azure_subscription() if "azure" in clouds else None)
        progress = automation.Progress(total=len(the_plan.cloud_resources), on_change=on_progress)
        try:
            result = automation.up(name, program, pulumi_command=cmd, progress=progress, prompt=prompt,
                                   providers=clouds, backend=backend)
        except GpufleetError:
            # some resources may exist: keep the cluster known (with the nodes it had) so that
            # `down` and `status` find it
            reg.record(**record, nodes=existing.nodes if existing else [], state="failed")
            raise
        nodes = nodes_from_outputs(result.outputs)
    nodes += rack_nodes(stack, the_plan)
    rec = reg.record(**record, nodes=nodes, state="up")
    return UpOutcome(the_plan, rec, progress)


def _ready(clouds: list[str], needs_pulumi: bool, pulumi_command):
    """Credentials for every cloud and a Pulumi CLI, checked before anyone is asked anything."""
    if not needs_pulumi:
        return None
    credentials.require(clouds)
    return pulumi_command or automation.find_pulumi()


def rack_nodes(stack, the_plan: Plan) -> list[Node]:
    """Bare-metal hosts as registry nodes; the machines exist, nothing is created for them."""
    price = {c.pool: c.usd_per_node_hour for c in the_plan.pools}
    out = []
    for p in stack.pools:
        if p.provider != "baremetal":
            continue
        for i, h in enumerate(p.hosts):
            out.append(Node(pool=p.name, idx=i, provider="baremetal", location=p.site, machine=f"{p.gpus_per_node}x {p.gpu}",
                            node_id=h.address, private_ip=h.address, ssh_endpoint=f"{h.address}:{h.port}",
                            usd_per_hour=price.get(p.name)))
    return out


def tear_down(name: str, *, confirm: Callable[[ClusterRecord], bool], registry: Registry | None = None,
              pulumi_command=None, on_progress: Callable[[automation.Progress], None] | None = None,
              prompt: Callable[[], str] | None = None) -> tuple[ClusterRecord, automation.Progress | None]:
    """Destroy a cluster's cloud resources; it leaves the registry only once that succeeded."""
    reg = registry or Registry()
    rec = reg.get(name)
    if rec is None:
        from gpufleet.errors import did_you_mean

        known = [c.name for c in reg.list()]
        s = did_you_mean(name, known)
        raise InputError(f"no cluster {name!r} in the registry ({reg.path})",
                         f"did you mean {s!r}?" if s else (f"known clusters: {', '.join(known)}" if known else
                                                            "no cluster is recorded as up"))
    clouds = sorted({n.provider for n in rec.nodes if n.provider in CLOUDS})
    needs_pulumi = bool(clouds) or rec.backend is not None  # a failed `up` may have left resources
    cmd = _ready(clouds, needs_pulumi, pulumi_command)
    if not confirm(rec):
        raise Aborted("nothing was destroyed", "run again and answer yes, or pass --yes")
    progress = None
    if needs_pulumi:
        progress = automation.Progress(total=None, on_change=on_progress)
        automation.destroy(name, pulumi_command=cmd, progress=progress, prompt=prompt, providers=clouds,
                           backend=rec.backend)
    reg.remove(name)
    return rec, progress

"""`gpufleet up`: validate, plan, check, confirm, deploy, record, configure the nodes: the
cloud nodes configure themselves from the stack's bucket (``configure.cloudnodes``; `up`
publishes and waits), the rack hosts over SSH (``configure.nodes``).

Nothing is created before the stack is valid, its program renders under mocks, the
credentials of every provider it uses are present, the Pulumi CLI is installed and the
quotas leave room; then the caller's ``confirm`` sees the plan and its cost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gpufleet.clouds import cloud, inventory
from gpufleet.clouds.baremetal import hosts as racks
from gpufleet.clouds.tags import format_expiry, parse_expiry
from gpufleet.configure import cloudnodes, saltrun
from gpufleet.configure import nodes as configuration
from gpufleet.engine import automation
from gpufleet.engine.plan import Plan, cluster_for, plan
from gpufleet.engine.program import build, layout
from gpufleet.errors import AllHostsFailed, GpufleetError, InputError
from gpufleet.fleet import check as quota_check
from gpufleet.fleet import verify as verification
from gpufleet.providers import CLOUDS
from gpufleet.state.registry import ClusterRecord, Node, Registry, nodes_from_outputs


class Aborted(GpufleetError):
    """The user declined at the confirmation prompt; nothing was changed."""


@dataclass
class UpOutcome:
    plan: Plan
    record: ClusterRecord
    progress: automation.Progress | None
    hosts: list = field(default_factory=list)  # clouds.baremetal.hosts.HostReport, one per configured host
    quotas: list = field(default_factory=list)  # clouds.base.QuotaLine, checked before anything was created
    nodes: list = field(default_factory=list)  # configure.cloudnodes.NodeReport, one per cloud node
    verdicts: list = field(default_factory=list)  # verify.report.NodeVerdict, one per node verified

    @property
    def configured(self) -> list:
        """Every node's configuration outcome, rack hosts and cloud nodes alike."""
        return self.hosts + self.nodes


def bring_up(stack, cat, *, confirm: Callable[[Plan], bool], cluster: str | None = None,
             registry: Registry | None = None, pulumi_command=None,
             on_progress: Callable[[automation.Progress], None] | None = None,
             prompt: Callable[[], str] | None = None, configure: bool = True, trust_new_hosts: bool = False,
             reconfigure: bool = False, on_host_progress=None, runner_factory=None, check: bool = True,
             cloud_api=None, wait_s: float = cloudnodes.WAIT_S, stores: dict | None = None,
             verify: bool = True) -> UpOutcome:
    """Create the cloud pools (Pulumi), record the cluster, then configure the rack hosts (SSH + Salt).

    Before anything is created: credentials, the Pulumi CLI, the quotas (``check``; a short
    quota is a QuotaError) and the rack hosts. The cluster is recorded as ``creating``
    before Pulumi starts, so `status`, `down` and `reap` know it even if this process dies.
    Configuration problems of single hosts do not undo anything: each host's outcome is in
    ``UpOutcome.hosts`` and in the registry; the caller decides the exit code. Cloud nodes
    configure themselves: `up` publishes their pools' configuration and waits up to ``wait_s``
    for their statuses (``UpOutcome.nodes``); ``configure=False`` leaves them waiting for
    `gpufleet configure`. Every node that configured then runs the quick verification
    (``verify``), its verdict in ``UpOutcome.verdicts`` and, when it fails, in the registry.
    """
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
    cmd = ready(clouds, bool(clouds), pulumi_command)
    quota_lines = []
    if clouds and check:
        opened = open_apis(clouds, {p.provider: [p.region] for p in stack.pools if p.provider in clouds}, given=cloud_api)
        quota_lines, _ = quota_check.check(quota_check.needs(stack, cat, existing), opened)
        quota_check.refuse_if_short(quota_lines)
    gathered = None
    targets = []
    if configure and any(p.provider == "baremetal" for p in stack.pools):
        if runner_factory is None:
            saltrun.find_salt_ssh()  # a missing Salt stops here, before anything is created or recorded
            saltrun.states_dir()
        # the racks exist already: reach them and check their OS against the software before anything
        # is created or recorded (a misfit is bad input, exit 2)
        targets = racks.rack_targets(stack)
        gathered = racks.gather(targets, trust_new=trust_new_hosts, progress=on_host_progress)
        if not any(r.facts for r in gathered.values()):
            raise AllHostsFailed(list(gathered.values()), "reached")  # nothing is created or recorded
        configuration.check_hosts(stack, gathered)
    if not confirm(the_plan):
        raise Aborted("nothing was created", "run again and answer yes, or pass --yes")

    nodes: list[Node] = []
    progress = None
    backend = automation.backend_url() if clouds else None
    record = dict(name=name, stack=stack.name, stack_file=stack.source, owner=stack.owner,
                  expires_at=format_expiry(cl.expires_at), backend=backend,
                  locations=sorted({(p.provider, p.region) for p in stack.pools if p.provider in CLOUDS}))
    if clouds:
        reg.record(**record, nodes=existing.nodes if existing else [], state="updating" if existing else "creating")
        program = build(layout(stack, cat), cl, trust_new_hosts=trust_new_hosts)
        progress = automation.Progress(total=len(the_plan.cloud_resources), on_change=on_progress)
        try:
            result = automation.up(name, program, pulumi_command=cmd, progress=progress, prompt=prompt,
                                   backend=backend)
        except GpufleetError:
            # some resources may exist: keep the cluster known (with the nodes it had) so that
            # `down` and `status` find it
            reg.record(**record, nodes=existing.nodes if existing else [], state="failed")
            raise
        nodes = nodes_from_outputs(result.outputs)
    nodes += rack_nodes(stack, the_plan)
    rec = reg.record(**record, nodes=nodes, state="up")
    cloud_reports = []
    if clouds and configure:
        cloud_reports = cloudnodes.configure_pools(stack, cat, name, result.outputs, nodes, registry=reg,
                                                   timeout_s=wait_s, progress=on_host_progress, stores=stores,
                                                   **verification.cloud_config(stack, cat, verify=verify))
    hosts = []
    if targets:
        hosts = configuration.configure(stack, name, targets, registry=reg, trust_new=trust_new_hosts,
                                        force=reconfigure, progress=on_host_progress, runner_factory=runner_factory,
                                        gathered=gathered)
        if not clouds and not any(h.ok for h in hosts):  # a rack of which no host works is not up
            reg.set_state(name, "failed")
            rec = reg.get(name)
    verdicts = verification.configured_verdicts(cloud_reports, asked=verify)
    if verify and hosts:
        verdicts += verification.verify_racks(stack, cat, hosts, trust_new_hosts=trust_new_hosts,
                                              progress=on_host_progress)
    verification.record(reg, name, verdicts)
    return UpOutcome(the_plan, rec, progress, hosts, quota_lines, cloud_reports, verdicts)


def open_apis(providers: list[str], regions: dict[str, list[str]], given=None) -> inventory.Clouds:
    """The clouds' APIs to ask (credentials required), limited to ``regions``; ``given``: already open."""
    if given is not None:
        return given
    return inventory.open_clouds(providers, required=True, regions=regions)


def ready(clouds: list[str], needs_pulumi: bool, pulumi_command):
    """Credentials for every cloud and a Pulumi CLI, checked before anyone is asked anything."""
    if not needs_pulumi:
        return None
    for p in clouds:
        cloud(p).credentials()
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

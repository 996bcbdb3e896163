"""One operation's run over a stack's nodes: what every kind is handed, and what each leaves for the
next step, in typed fields (instead of a long list of parameters threaded through each kind)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gpufleet.state.registry import ClusterRecord, Node, Registry


@dataclass
class Seams:
    """What tests put in the place of the real programs and stores (None: the real one)."""

    pulumi_command: object = None  # the Pulumi CLI (engine.automation)
    runner_factory: Callable | None = None  # the racks' salt-ssh runner
    cloud_api: object = None  # clouds.inventory.Clouds already open
    stores: dict | None = None  # the cluster's buckets, by pool
    wait_s: float | None = None  # how long the cloud nodes are waited for (None: nodes.cloud.channel.WAIT_S)


@dataclass
class Run:
    stack: object  # spec.Stack, validated (None for a `down` of cloud nodes alone)
    cat: object  # catalog.Catalog
    cluster: str
    registry: Registry | None
    seams: Seams = field(default_factory=Seams)
    trust_new_hosts: bool = False
    force: bool = False  # apply the states again on nodes already configured the same way
    progress: Callable | None = None  # (phase, done, total, message) for per-node work
    on_progress: Callable | None = None  # engine.automation.Progress of Pulumi's runs, as they change
    prompt: Callable[[], str] | None = None  # the Pulumi passphrase, asked when needed
    # what the operation asks of the kinds
    tearing_down: bool = False  # `down`: ``reach`` checks what destroying and draining need
    load_stack: Callable | None = None  # path -> spec.Stack (fleet's loader), for a stack file `up` recorded
    configuring: bool = True  # `up` configures the nodes (without it, the racks need not be reached)
    verifying: bool = True  # the nodes run the quick verification after applying
    check_quotas: bool = True
    # the monitor host's cluster collector settings (monitoring.collector.settings), from the operation that knows
    # the cluster's price and budgets; None: the stack runs no Prometheus
    monitor: dict | None = None
    refresh_images: bool = False  # look up again what image names pin (`up --refresh-image`)
    failover: bool = True  # pools with a failover block land in the first of their places that holds them
    max_attempts: int | None = None  # failover's limits (None: its defaults)
    failover_budget_s: float | None = None
    on_attempt: Callable | None = None  # each failover attempt (or skip), as it happens
    places: dict = field(default_factory=dict)  # pool -> clouds.candidates.Candidates: where it may land
    skipped: list = field(default_factory=list)  # the places ruled out before any attempt (failover.Attempt)
    elsewhere: set[str] = field(default_factory=set)  # pools that may land in other places (capacity failover)
    replacing: list = field(default_factory=list)  # running nodes this `up` replaces (nodes.cloud.Replaced)
    recording: dict = field(default_factory=dict)  # the cluster's record as `up` writes it (a kind adds its part)
    landed: object = None  # engine.spend.Spend: the bill predicted where failover placed the pools
    layout: object = None  # engine.program.Layout, computed once by the plan
    placed: object = None  # engine.plan.Cluster: the cluster `up` deploys (its name, tags, expiry)
    resources: int | None = None  # how many cloud resources the plan creates (Pulumi's progress total)
    prices: dict[str, float | None] = field(default_factory=dict)  # $ per node-hour by pool, from the plan
    on_failure: Callable[[], None] | None = None  # before a failed create raises, when some resources may exist
    existing: ClusterRecord | None = None  # the cluster's record before this `up` (an update)
    record: ClusterRecord | None = None  # the cluster's record (`configure`, `verify`, `down`, `status`)
    backend: str | None = None  # where the cluster's Pulumi state is (None: it has none)
    api: object = None  # clouds.inventory.Clouds open for `down`'s sweep (None: no cloud to ask)
    on_sweep: Callable | None = None  # (done, total, message) of `down`'s sweep
    clean: bool = False  # `down` undoes the states on the rack hosts too
    local: bool = False  # `status --local`: no cloud is asked
    nodes: list[Node] = field(default_factory=list)  # the cluster's nodes: created by this `up`, or recorded
    configured: dict[str, list] | None = None  # kind NAME -> the NodeOutcomes of this `up`'s configuration
    # what the kinds found on the way, for the steps after
    identity: dict[str, str] = field(default_factory=dict)  # provider -> the caller's principal there
    gathered: dict | None = None  # the rack hosts' facts (clouds.baremetal.hosts.gather)
    deployed: object = None  # engine.automation.Progress of the last Pulumi `up`
    outputs: dict | None = None  # the cluster's Pulumi outputs
    # `heal`: partition -> the nodes its pending jobs wait for, from Slurm's fresh view as a kind read it (None: no
    # fresh view), for the elastic pools
    slurm_waiting: dict[str, int] | None = None

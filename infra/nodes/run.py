"""One operation's run over a stack's nodes: what every kind is handed, and what it leaves for
the next step (instead of a long list of parameters threaded through each kind)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gpufleet.configure import cloudnodes
from gpufleet.state.registry import Registry


@dataclass
class Run:
    stack: object  # spec.Stack, validated
    cat: object  # catalog.Catalog
    cluster: str
    registry: Registry
    trust_new_hosts: bool = False
    force: bool = False  # apply the states again on nodes already configured the same way
    progress: Callable | None = None  # (phase, done, total, message) for per-node work
    # the cloud kind's: the Pulumi CLI (a stand-in in tests), its passphrase prompt, its progress,
    # the clouds' APIs already open, the buckets (tests), how long to wait for the nodes
    pulumi_command: object = None
    prompt: Callable[[], str] | None = None
    on_progress: Callable | None = None
    cloud_api: object = None
    stores: dict | None = None
    wait_s: float = cloudnodes.WAIT_S
    check_quotas: bool = True
    runner_factory: Callable | None = None  # the racks' salt-ssh runner (a stand-in in tests)
    layout: object = None  # engine.program.Layout, computed once by the plan
    existing: object = None  # state.registry.ClusterRecord of an update
    refresh_images: bool = False  # the cloud kind's: look up again what image names pin (`up --refresh-image`)
    found: dict = field(default_factory=dict)  # kind -> what its ``reach`` found, for ``create``/``configure``

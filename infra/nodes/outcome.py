"""What happened to one node when a kind configured or drained it: the one report shape that `up`,
`configure` and `down` hand to the CLI, whichever kind made it (DESIGN.md, "How nodes become GPU nodes").

Each kind keeps its own working report while it works (a rack host's ``clouds.baremetal.hosts.HostReport``
with its Salt runs, a cloud node's ``nodes.cloud.channel.NodeReport`` from its status) and turns it into
this at its boundary (``racks.outcome``, ``cloud.outcome``). A field a kind has nothing for is left empty.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class NodeOutcome:
    target: object  # the kind's own target of the node: ``id`` (pool-idx), ``pool``, ``idx``, ``address``
    kind: str  # the NAME of the kind that made it ("rack hosts", "cloud nodes")
    state: str  # configured | current | skipped | drained | failed | timeout | unreachable | host-key | auth ...
    ok: bool
    address: str  # where the node is, as a table shows it
    system: str | None = None  # the OS it runs ("Ubuntu 22.04"), None when its facts are unknown
    gpus: int = 0
    facts: dict | None = None  # the node's facts as its kind read them
    applied: bool = False  # the states were applied in earnest (else ``changed`` says nothing)
    changed: int = 0  # states that changed something
    states: int | None = None  # states applied in all, where the kind counts them
    rehearsed: int | None = None  # states rehearsed (test=True), None when none was
    failed: list[dict] = field(default_factory=list)  # {"state", "comment"} of each state that failed
    seconds: float | None = None  # how long the node took to apply, where it says
    error: str | None = None
    hint: str | None = None
    look: str | None = None  # where to look on the node for why it failed (its log), said under the table
    warnings: list[str] = field(default_factory=list)
    verify: dict | None = None  # the verification report the node sent with its configuration
    detail: dict = field(default_factory=dict)  # the kind's own account of the node, as `--json` gives it

    def to_dict(self) -> dict:
        return dict(self.detail)

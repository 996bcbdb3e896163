"""`gpufleet scale CLUSTER POOL N`: an elastic pool (``nodes: {min, max}``) made N nodes big, outside Pulumi's state.

Growing asks the pool's cloud for N - current more nodes through the pool's own request (its API's ``add_nodes``:
AWS an instant fleet from the pool's fleet request, Azure the scale set's capacity) and records them in the
registry as `heal` records a replacement (``Registry.resize``): the next `up`, `status`, `configure`, `verify`
and `ssh-config` see them, and a later `up` neither re-creates nor deletes them. A refusal (capacity, quota)
changes nothing and is reported.

Shrinking removes nodes that are out of service first and never a node that runs jobs: with Slurm, only nodes
Slurm itself shows drained with no job left, in the controller's fresh view (the one `heal` reads); an idle node
is named, to be drained first (a cloud node is not reached from here, and a job may start on an idle node
between Slurm's view and its termination). Without Slurm gpufleet runs no jobs: broken nodes first, then the
newest. The nodes are terminated by their ids (their tags checked by the cloud API), never by making the pool
anew. ``choose`` is the whole judgement, pure.

Each change runs under the cluster's lease (team mode) and each action is an event in `gpufleet log`.
"""

from __future__ import annotations

import datetime as dt
import socket
from dataclasses import dataclass, field

from gpufleet import clouds
from gpufleet import nodes as kinds
from gpufleet.clouds.node_watch import RELEASE
from gpufleet.errors import CapacityError, GpufleetError, InputError, QuotaError
from gpufleet.fleet import team
from gpufleet.nodes import cloud as cloud_nodes
from gpufleet.nodes import health as hl
from gpufleet.nodes.cloud import apis as cloud_apis
from gpufleet.nodes.health import NodeHealth
from gpufleet.nodes.run import Run, Seams
from gpufleet.state import events, leases
from gpufleet.state.recorded import recorded
from gpufleet.state.registry import Node, Registry
from gpufleet.state.shared import SharedStore


@dataclass
class Scaled:
    cluster: str
    pool: str
    before: int
    wanted: int
    dry_run: bool
    added: list[str] = field(default_factory=list)  # node ids (with --dry-run: none)
    removed: list[str] = field(default_factory=list)  # node names (pool-idx) and ids
    would: list[str] = field(default_factory=list)  # what is done (or, with --dry-run, would be), in words
    kept: list[str] = field(default_factory=list)  # nodes not removed, each with why
    refused: str | None = None  # the cloud's refusal of more nodes: nothing changed
    failed: str | None = None  # `heal`'s: why a change it asked for failed (nothing recorded)
    unjoined: list[str] = field(default_factory=list)  # added nodes whose Slurm slot could not be kept: `configure`
    events: int = 0

    @property
    def after(self) -> int:
        return self.before + len(self.added) - len(self.removed)

    @property
    def short(self) -> bool:
        """The pool is not N nodes big, for a refusal or nodes that could not be removed (exit 1)."""
        return not self.dry_run and self.after != self.wanted

    def to_dict(self) -> dict:
        return {"cluster": self.cluster, "pool": self.pool, "before": self.before, "wanted": self.wanted,
                "after": self.after if not self.dry_run else self.before, "dry_run": self.dry_run, "added": self.added,
                "removed": self.removed, "would": self.would, "kept": self.kept, "refused": self.refused,
                "failed": self.failed, "unjoined": self.unjoined, "events": self.events}


def bounds(pool, count: int) -> None:
    """InputError (exit 2) unless ``pool`` is elastic and ``count`` within its bounds."""
    if pool.size is None:
        raise InputError(f"pool {pool.name} is fixed (nodes: {pool.nodes}): only an elastic pool is scaled",
                         f"give it bounds in the stack file, e.g. nodes: {{min: {pool.nodes}, max: {pool.nodes * 2}}}, "
                         "and `gpufleet up`")
    if not pool.size.min <= count <= pool.size.max:
        raise InputError(f"pool {pool.name} may have {pool.size.min} to {pool.size.max} nodes, not {count}",
                         f"a number from {pool.size.min} to {pool.size.max}, or change nodes: {{min, max}} in the "
                         "stack file and `gpufleet up`")


def choose(health: list[NodeHealth], count: int, slurm: bool) -> tuple[list[NodeHealth], list[tuple[NodeHealth, str]]]:
    """Which ``count`` of a pool's nodes to remove, and the others that may not go, each with why. With Slurm: only
    nodes its view shows drained with no job (``jobs == "none"`` and ``drained``); without: every node may go, broken
    ones first, then the newest. Never a node whose jobs are running or not known."""
    if slurm:
        free = [h for h in health if h.drained is True and h.jobs == "none"]
    else:
        free = sorted(health, key=lambda h: (h.state not in hl.BROKEN, -slot_index(h)))
    chosen = free[:count]
    held = []
    for h in health:
        if h in chosen:
            continue
        if h in free:
            why = "not needed"
        elif h.jobs == "running":
            why = "runs jobs (Slurm)"
        elif h.jobs is None:
            why = f"whether it runs jobs is not known ({h.why or 'Slurm says nothing fresh of it'})"
        else:
            why = ("idle, not drained: drain it in Slurm first (scontrol update NodeName=... State=DRAIN "
                   f"Reason='{RELEASE}')")
        held.append((h, why))
    return chosen, held


def slot_index(h: NodeHealth) -> int:
    """A node's index in its pool (``<pool>-<idx>``), 0 when its name has none."""
    return int(h.node.rpartition("-")[2]) if h.node.rpartition("-")[2].isdigit() else 0


def scale(stack, cat, *, pool: str, count: int, cluster: str | None = None, registry: Registry | None = None,
          dry_run: bool = False, store: SharedStore | None = None, seams: Seams | None = None,
          outputs: dict | None = None, now: dt.datetime | None = None) -> Scaled:
    """Make ``pool`` of the cluster ``count`` nodes big (``dry_run``: say how, change and write nothing)."""
    spec_pool = next((p for p in stack.pools if p.name == pool), None)
    if spec_pool is None:
        raise InputError(f"stack {stack.name} has no pool {pool!r}", f"one of {', '.join(p.name for p in stack.pools)}")
    bounds(spec_pool, count)
    reg = registry or team.registry()
    name = cluster or stack.name
    rec = recorded(reg, name)
    if rec.state != "up":
        raise GpufleetError(f"cluster {name} is {rec.state}, not up: its pools are not scaled",
                            "wait for the `up` or `down` under way, or run `gpufleet up`")
    shared = None if store is not None else team.current()
    store = store or shared or team.log_store(create=not dry_run)
    run = Run(stack, cat, name, reg, seams or Seams(), record=rec, backend=rec.backend, outputs=outputs)
    with team.held(store, name, shared is not None, "scale", dry_run):
        rec = recorded(reg, name)  # as it is now that the lease is held
        run.record = rec
        mine = [n for n in rec.nodes if n.pool == pool]
        out = Scaled(name, pool, len(mine), count, dry_run)
        if count > len(mine):
            grow(run, spec_pool, mine, count - len(mine), out, store, now)
        elif count < len(mine):
            _shrink(run, spec_pool, mine, len(mine) - count, out, store, now)
        return out


def pool_api(run: Run, provider: str, region: str):
    """The pool's cloud API (a test's stand-in in ``seams.cloud_api``), which must resize pools."""
    api = cloud_apis.pool_api(run, provider, region)
    if not hasattr(api, "add_nodes") or not hasattr(api, "remove_nodes"):
        raise GpufleetError(f"{provider}: gpufleet cannot add nodes to a pool or remove them there yet",
                            "change the pool's size in the stack file and `gpufleet up` (which makes the pool anew)")
    return api


def _where(spec_pool, mine: list[Node]) -> tuple[str, str]:
    return (mine[0].provider, mine[0].location) if mine else (spec_pool.provider, spec_pool.region)


def _market(spec_pool, provider: str) -> str | None:
    """The market a spot pool's new nodes are asked on: its own, never the one of the node whose request is copied
    (on AWS/GCP a node heal refilled from the spot_fallback carries an on-demand request). None: the pool's own
    request as it is (an on-demand pool's, or one whose request fixes its market: base.Cloud.market_per_node)."""
    return "spot" if spec_pool.spot and clouds.cloud(provider).market_per_node else None


def _fallback(spec_pool, provider: str) -> str | None:
    """The market a spot pool's growth asks when spot is refused: its spot_fallback (issue 51 step 4, as heal's
    replacement does, nodes/cloud/heal.py _replace), where the cloud's request can take another market."""
    if _market(spec_pool, provider) != "spot" or not spec_pool.failover:
        return None
    return spec_pool.failover.spot_fallback


def grow(run: Run, spec_pool, mine: list[Node], more: int, out: Scaled, store, now, on_launch=None,
         evidence: str | None = None) -> None:
    """``more`` nodes for the pool (``mine``: its recorded nodes), recorded, each an event (``evidence``: why they
    were asked, a person's `scale` when None); a refusal in ``out.refused`` (nothing changed); another failure raised
    (nothing recorded). ``on_launch`` is told each node the moment the cloud made it, before anything else can fail
    (heal keeps it in its memory)."""
    provider, region = _where(spec_pool, mine)
    evidence = evidence or _asked(spec_pool, len(mine) + more)
    out.would.append(f"add {more} node(s) to pool {spec_pool.name} through its own request ({provider} {region})")
    if out.dry_run:
        return
    api = pool_api(run, provider, region)
    leases.ensure_held()
    launched: list[str] = []

    def launch(node_id: str) -> None:
        launched.append(node_id)
        if on_launch is not None:
            on_launch(node_id)
    said = ""  # how the market came to be, when it is not the pool's own
    try:
        try:
            got = api.add_nodes(region, cluster=run.cluster, pool=spec_pool.name, count=more,
                                market=_market(spec_pool, provider), on_launch=launch)
        except (CapacityError, QuotaError) as e:  # nothing launched is left: the spot_fallback, where there is one
            fallback = _fallback(spec_pool, provider)
            if fallback is None:
                raise
            said = f" on the pool's spot_fallback ({fallback}: spot was refused: {e.message})"
            got = api.add_nodes(region, cluster=run.cluster, pool=spec_pool.name, count=more, market=fallback,
                                on_launch=launch)
    except (CapacityError, QuotaError) as e:
        out.refused = (f"spot was refused, then {_fallback(spec_pool, provider)}: " if said else "") + e.message
        event(store, run.cluster, spec_pool.name, "add", f"refused: {out.refused}", done=False, refused=True, now=now,
              evidence=evidence)
        out.events += 1
        return
    except GpufleetError as e:
        said = f"{e.message}" + (f" (launched first: {', '.join(launched)}; tagged for the cluster, `gpufleet "
                                 "registry rebuild` records them)" if launched else "")
        event(store, run.cluster, spec_pool.name, "add", f"failed: {said}", done=False, now=now, evidence=evidence)
        raise GpufleetError(f"scale: {said}"[:600], e.hint) from None
    first = mine[0] if mine else None
    added = []
    for idx, g in zip(free_slots(mine, len(got)), got):
        added.append((Node(pool=spec_pool.name, idx=idx, provider=provider, location=region,
                           machine=first.machine if first else spec_pool.instance_type or "", zone=g.get("zone"),
                           node_id=g["id"], private_ip=g.get("private_ip"), ssh_endpoint=None,
                           usd_per_hour=first.usd_per_hour if first else None, vm_uid=g.get("vm_uid")), g.get("fleet_id")))
    run.record = run.registry.resize(run.cluster, added=added)
    for n, fleet in added:
        out.added.append(n.node_id)
        # with Slurm, its slot (declared in slurm.conf up to the pool's max), kept where its agent reads it, as a
        # replacement's is: it joins Slurm with no `configure`. An elastic pool is a cloud pool (spec refuses racks)
        joined, joins = cloud_nodes.give_slot(run, n) if run.stack.slurm else (True, "")
        if not joined:
            out.unjoined.append(f"{spec_pool.name}-{n.idx}")
        event(store, run.cluster, spec_pool.name, "add", f"{spec_pool.name}-{n.idx} ({n.node_id}) added through the "
               f"pool's request (fleet {fleet}){said}{joins}", done=True, node=f"{spec_pool.name}-{n.idx}", now=now,
              evidence=evidence)
        out.events += 1


def _asked(spec_pool, count: int) -> str:
    """A person's `gpufleet scale`, as a scale event's evidence (the event names who)."""
    return f"asked by `gpufleet scale`: pool {spec_pool.name} to {count} node(s)"


def free_slots(mine: list[Node], count: int) -> list[int]:
    """The ``count`` lowest indexes no node of the pool (``mine``) holds: a removed node's slot is the next added
    node's, so that an elastic pool's nodes stay within the slots slurm.conf declares (0 to max - 1)."""
    taken = {n.idx for n in mine}
    return [i for i in range(len(taken) + count) if i not in taken][:count]


def _shrink(run: Run, spec_pool, mine: list[Node], fewer: int, out: Scaled, store, now) -> None:
    health = [h for kind in kinds.used(run.stack) for h in kind.health(run) if h.pool == spec_pool.name]
    chosen, held = choose(health, fewer, bool(run.stack.slurm))
    out.kept = [f"{h.node}: {why}" for h, why in held if why != "not needed"]
    if not chosen:
        out.would.append(f"remove none of pool {spec_pool.name}'s nodes: none may go now")
        return
    remove(run, spec_pool, mine, chosen, out, store, now)


def remove(run: Run, spec_pool, mine: list[Node], chosen: list[NodeHealth], out: Scaled, store, now,
           evidence: dict[str, str] | None = None) -> None:
    """``chosen`` of the pool's nodes terminated by id (their tags checked by the cloud), the registry told, each
    an event (``evidence``: node -> why it went, a person's `scale` when not named); a failure raised with nothing
    recorded."""
    out.would.append(f"remove {', '.join(h.node for h in chosen)} from pool {spec_pool.name} (by id, tags checked)")
    if out.dry_run:
        return
    by_id = {n.node_id: n for n in mine}
    going = [by_id[h.node_id] for h in chosen if h.node_id in by_id]
    why = {f"{n.pool}-{n.idx}": (evidence or {}).get(f"{n.pool}-{n.idx}") or _asked(spec_pool, len(mine) - len(going))
           for n in going}
    provider, region = _where(spec_pool, mine)
    api = pool_api(run, provider, region)
    leases.ensure_held()
    try:
        api.remove_nodes(region, cluster=run.cluster, pool=spec_pool.name, node_ids=[n.node_id for n in going])
    except GpufleetError as e:
        event(store, run.cluster, spec_pool.name, "remove", f"failed: {e.message}", done=False, now=now,
              evidence="; ".join(f"{n}: {w}" for n, w in why.items()))
        raise
    run.record = run.registry.resize(run.cluster, removed=going)
    left = cloud_nodes.forget_slots(run, going) if run.stack.slurm else ""  # their slots: free for the next nodes
    for n in going:
        out.removed.append(n.node_id)
        event(store, run.cluster, spec_pool.name, "remove", f"{spec_pool.name}-{n.idx} ({n.node_id}) terminated{left}",
              done=True, node=f"{spec_pool.name}-{n.idx}", now=now, evidence=why[f"{spec_pool.name}-{n.idx}"])
        out.events += 1


# each scale event's code, as a fault's is (issue 51 step 6: every action an event "with the fault code and the
# evidence"): nodes added or taken back for jobs, nodes given back or removed
CODES = {"add": "GF-SCALE-UP", "resume": "GF-SCALE-UP", "drain": "GF-SCALE-DOWN", "remove": "GF-SCALE-DOWN"}


def event(store: SharedStore, cluster: str, pool: str, action: str, said: str, *, done: bool, refused: bool = False,
          node: str | None = None, now: dt.datetime | None = None, evidence: str | None = None) -> None:
    """One event in the log (``gpufleet log``): a node added or removed, or a refusal, with its code and what
    led to it (``evidence``: the jobs waiting, the node idle since when, the person's `gpufleet scale`)."""
    events.record(store, {"who": team.who(), "host": socket.gethostname(), "command": f"scale {action}",
                          "cluster": cluster, "outcome": f"scale {action} {pool}: {said}"[:300], "exit_code": 0,
                          "action": f"scale-{action}", "pool": pool, "node": node, "done": done, "refused": refused,
                          "code": CODES[action], "evidence": (evidence or "")[:300] or None},
                  now=now)


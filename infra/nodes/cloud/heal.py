"""A cloud node's health, read from the status its agent keeps in the pool's bucket, and its repair.

``health`` lists each bucket's ``status/`` once and reads the statuses (``channel``), each taken for the
node its key names (``channel.vouched``): its ``health`` part as the node agent wrote it
(``nodes.health.reported``). A bucket that cannot be read, a node without a status, a report that is
missing, malformed or stale: ``unknown``, which `heal` never acts on.

Out of service and jobs: with Slurm, only as the controller's agent last put Slurm's view in its status
(``clouds.scheduler.node_states``), trusted only while that view's own time is fresh
(SLURM_VIEW_MAX_AGE_S); a node's own ``drained`` claim is never taken for it (a job may have started since
the view, and on GCP and Azure any node of a pool can write its peers' statuses). A node is found there by
the host name its facts give, in Slurm's case. Without Slurm, gpufleet runs no jobs and sees none: a
faulty or interrupted node has marked itself failed (its agent does, the contract says), so it is out of
service with no job gpufleet could wait for; its word may terminate it only where its bucket lets no
other node write its status (``base.Cloud.own_status_only``), else it is isolated.

A cloud node cannot be reached from here (it is private): its agent drains its Slurm node itself, so
``drain`` is left to it; ``isolate`` leaves it drained and named; ``replace`` asks the node's cloud
for a new node through the pool's own request, then terminates the old one (the cloud API's
``replace_node``; a cloud that has none yet, ``base.Cloud.replaces_nodes`` false, and a flex-start pool, whose
VMs its group makes, have their nodes isolated). A spot pool's replacement asks spot first; refused, the pool's
``failover.spot_fallback`` where the cloud's request can change market (``base.Cloud.market_per_node``).
"""

from __future__ import annotations

import datetime as dt
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from gpufleet.clouds import cloud
from gpufleet.clouds import scheduler as slurm_view
from gpufleet.clouds.node_watch import MARK
from gpufleet.errors import CapacityError, GpufleetError, QuotaError, ReplacementUnfinished, SuccessorGone, UntrustedValue
from gpufleet.nodes import health as hl
from gpufleet.nodes.cloud import channel
from gpufleet.nodes.cloud.apis import pool_api
from gpufleet.nodes.health import NodeHealth, Repaired
from gpufleet.nodes.run import Run
from gpufleet.state.registry import Node

# statuses asked for ahead of the one judged: what is held of their bodies at any time, however many nodes, and
# enough to keep channel.READERS readers busy (a window, not batches: no reader waits for a batch's slowest)
AHEAD = 4 * channel.READERS
# How old Slurm's view in the controller's status may be and still say a node is drained: three of the
# controller agent's runs (its timer, OnUnitInactiveSec=60, re-reads Slurm and re-stamps the view's ``at``)
SLURM_VIEW_MAX_AGE_S = 180


@dataclass
class Said:
    """What `heal` takes of one status to judge its node (the body is dropped once read; this, once judged)."""

    key: str
    report: dict | None  # nodes.health.reported's; None: unreadable (``why``)
    why: str | None
    hostname: str | None  # Slurm's name for it, from its checked facts
    slurm: str | None = None  # a controller's: Slurm's answer its agent put in its status
    slurm_at: str | None = None  # when its agent last read that answer


def said(key: str, status: dict, now: dt.datetime, controller: bool, interval: int | None = None) -> Said:
    try:
        rep, why = hl.reported(status, now, interval), None
    except hl.Unreadable as e:
        rep, why = None, f"{key}: {e}"
    try:
        host = (channel.checked_facts(status.get("facts"), key) or {}).get("hostname")
    except UntrustedValue:
        host = None
    view = status.get("scheduler") if controller else None
    out = view["out"] if isinstance(view, dict) and isinstance(view.get("out"), str) else None
    # Slurm's NodeName is the host name as the VM says it, case kept (an Azure scale set VM's is upper case)
    return Said(key, rep, why, host if isinstance(host, str) else None, out, view.get("at") if out else None)


def status_keys(store, names) -> dict[str, dict]:
    """pool -> {node key: the key of the node's status in ``store``} for the pools ``names`` (a tuple of keys, in the
    listing's order, where several name one node: the last its body vouches for is taken). Ids only: what `heal`
    holds per node until it reads the node's status."""
    listing, _ = store.list("status/")
    keys: dict[str, dict] = {name: {} for name in names}
    for key, _etag in listing:
        owner = channel.status_owner(key)
        if owner is not None and owner[0] in keys:
            had = keys[owner[0]].get(owner[1])
            keys[owner[0]][owner[1]] = key if had is None else (*_each(had), key)
    return keys


def _each(keys) -> tuple:
    return (keys,) if isinstance(keys, str) else keys


def _read(ex, store, wanted) -> Iterator[tuple[tuple, dict | None]]:
    """((tag, key), its status or None) for each (tag, key) of the iterable ``wanted``, in its order, read by ``ex``'s
    threads AHEAD at most at once: those and the one the caller judges are all that is held of the bodies."""
    ahead: deque = deque()
    for tagged in wanted:
        if len(ahead) == AHEAD:
            yield _result(ahead.popleft())
        ahead.append((tagged, ex.submit(channel.read_status, store, tagged[1])))
    while ahead:
        yield _result(ahead.popleft())


def _result(reading: tuple) -> tuple[tuple, dict | None]:
    return reading[0], reading[1].result()  # the future dropped with it: its body is the caller's alone


def slurm_states(views: dict, now: dt.datetime, free_slots: set[str]) -> tuple[dict[str, str], dict[str, str],
                                                                               dict[str, int]] | None:
    """Slurm's state of each node (by host name), each drained node's reason and the nodes each partition's pending
    jobs wait for (``scheduler.waiting``, ``free_slots`` the slots no node holds), as the controller's agent last put
    them in its status (``views``: each controller status's Said, in the listing's order); None when it says nothing
    trustworthy: no controller status, an error, or a view whose own time is not within
    SLURM_VIEW_MAX_AGE_S of now (the controller's health report is re-uploaded by its watch with the
    view it holds, so its freshness says nothing of the view's)."""
    for s in views.values():
        if s.slurm is None or s.slurm.startswith("error: "):
            continue
        try:
            age = (now - hl.parse_time(s.slurm_at)).total_seconds()
        except hl.Unreadable:
            return None
        fresh = abs(age) <= SLURM_VIEW_MAX_AGE_S
        return (slurm_view.node_states(s.slurm), slurm_view.parse("", s.slurm)["drained"],
                slurm_view.waiting(s.slurm, free_slots)) if fresh else None
    return None


def _unheld_slots(run: Run) -> set[str]:
    """The elastic pools' slots no recorded node holds (``<pool>-<idx>``, idx below max: configure.slurm
    _free_slots declares them)."""
    held = {f"{n.pool}-{n.idx}" for n in run.record.nodes}
    return {f"{p.name}-{i}" for p in run.stack.pools if p.size is not None and p.role == "compute"
            for i in range(p.size.max)} - held


def _jobs(nh: NodeHealth, s: Said, slurm: bool, states: tuple | None, own_status_only: bool) -> None:
    rep = s.report
    if not slurm:  # no scheduler: the node marked itself failed; gpufleet runs no job there to wait for
        nh.drained, nh.jobs = rep["drained"] or rep["state"] in hl.BROKEN, "none"
        nh.vouched = own_status_only
        return
    # Slurm's word only: drained (DRAIN, no job left) or draining (jobs run); not known without a fresh view
    nodes, reasons, _ = states or ({}, {}, {})
    # a compute node is its slot in Slurm (configure.slurm.SLOT_STATE); the controller, and a node of a cluster
    # configured before slots, its host name
    name = nh.node if nh.node in nodes else (s.hostname or "")
    nh.drained, nh.jobs = hl.from_slurm(nodes.get(name))
    # where a peer could have written its status, its fault is taken only if Slurm was drained for gpufleet's own
    # reason (its watch drains with "gpufleet: GF-..."), not a person's
    nh.drain_reason = reasons.get(name)
    nh.vouched = own_status_only or (nh.drain_reason or "").startswith(MARK)


def health(run: Run, owns, outputs, name: str) -> list[NodeHealth]:
    """Each recorded cloud node of the stack's pools, as its status says (``owns``, ``outputs``, ``name``:
    the kind's). Each bucket's ``status/`` is listed once (``status_keys``: ids only); the controllers' statuses are
    read first (Slurm's view is in them), then each node's in the registry's order, AHEAD at most at once: of a status
    only its node's NodeHealth is kept, so memory grows with the nodes by that and the keys alone."""
    pools = {p.name: p for p in run.stack.pools if owns(p)}
    nodes = [n for n in run.record.nodes if owns(n) and n.pool in pools]
    if not nodes:
        return []
    now = dt.datetime.now(dt.timezone.utc)

    def blank(n: Node, why: str | None) -> NodeHealth:
        return NodeHealth(f"{n.pool}-{n.idx}", n.pool, name, hl.UNKNOWN, n.private_ip, n.node_id, why=why,
                          reserved=bool(pools[n.pool].reservations),
                          # a flex-start pool's VMs are its managed instance group's (clouds.gcp.flexstart), not made
                          # by the request a replacement asks again
                          replaceable=cloud(n.provider).replaces_nodes and not pools[n.pool].flex_start)

    try:
        outs = outputs(run)
    except GpufleetError as e:
        return [blank(n, f"the stack's outputs could not be read: {e.message}") for n in nodes]
    out: list = [None] * len(nodes)  # each node's once its status is read; the others' below
    buckets = channel.pool_buckets(outs, pools)
    served = {n for _, names in buckets.values() for n in names}
    unread = dict.fromkeys(set(pools) - served, "the stack's outputs name no bucket for its pool")
    controllers = {p.name for p in pools.values() if p.role == "controller"}
    listed, views = [], {}  # views: each controller's status (every one its pool's bucket lists), by its owner

    def judged(i: int, s: Said) -> None:
        n = nodes[i]
        out[i] = nh = blank(n, s.why)
        if s.report is not None:
            rep = s.report
            nh.state, nh.faults, nh.checked_at, nh.notice = rep["state"], rep["faults"], rep["checked_at"], rep["notice"]
            _jobs(nh, s, bool(run.stack.slurm), states, cloud(n.provider).own_status_only)

    with ThreadPoolExecutor(max_workers=channel.READERS) as ex:
        for bucket, (ref, names) in buckets.items():
            try:
                store = (run.seams.stores or {}).get(bucket) or cloud(ref["cloud"]).objects(ref)
                keys = status_keys(store, names)
                ctl = (((pool, node), key) for pool in names if pool in controllers
                       for node, each in keys[pool].items() for key in _each(each))
                for (owner, key), status in _read(ex, store, ctl):
                    if status is not None and channel.vouched(key, status) is not None:
                        views[owner] = said(key, status, now, True, pools[owner[0]].health.interval)
                listed.append((bucket, names, store, keys))
            except GpufleetError as e:
                unread.update(dict.fromkeys(names, f"its bucket {bucket} could not be read: {e.message}"))
        states = slurm_states(views, now, _unheld_slots(run)) if run.stack.slurm else None
        run.slurm_waiting = states[2] if states is not None else None
        for bucket, names, store, keys in listed:
            wanted = ((i, key) for i, n in enumerate(nodes) if n.pool in names and n.pool not in controllers
                      and n.node_id for key in _each(keys[n.pool].get(channel.node_key(n.node_id), ())))
            try:
                for (i, key), status in _read(ex, store, wanted):
                    if status is not None and channel.vouched(key, status) is not None:
                        judged(i, said(key, status, now, False, pools[nodes[i].pool].health.interval))
            except GpufleetError as e:
                unread.update(dict.fromkeys(names, f"its bucket {bucket} could not be read: {e.message}"))
    for i, n in enumerate(nodes):
        if n.pool in unread:
            out[i] = blank(n, unread[n.pool])
        elif n.pool in controllers and n.node_id and (n.pool, channel.node_key(n.node_id)) in views:
            judged(i, views[(n.pool, channel.node_key(n.node_id))])
        elif out[i] is None:
            out[i] = blank(n, "it has no status in its pool's bucket")
    _gone(run, [(n, nh) for n, nh in zip(nodes, out) if nh.state == hl.UNKNOWN and nh.replaceable and n.node_id])
    return out


def _gone(run: Run, unknown: list) -> None:
    """Of the nodes whose status says nothing, those whose VM the cloud itself says is gone (its API; the VM's
    own tags or its tagged scale set checked: ``gone_nodes``) are ``gone``: no VM, no job, and the pool's rules
    replace it (a reclaimed spot VM is not unknown forever). A cloud that cannot say leaves them unknown."""
    asked: dict = {}
    for n, nh in unknown:
        asked.setdefault((n.provider, n.location, n.pool), []).append((n, nh))
    for (provider, region, pool), group in asked.items():
        try:
            gone = pool_api(run, provider, region).gone_nodes(region, cluster=run.cluster, pool=pool,
                                                          node_ids=[n.node_id for n, _ in group])
        except GpufleetError:
            continue
        for n, nh in group:
            if n.node_id in gone:
                why = f"{provider} says its VM {n.node_id} is terminated or deleted"
                nh.state, nh.why, nh.drained, nh.jobs = hl.GONE, why, True, "none"
                nh.faults = [{"code": "GF-VM-GONE", "check": "cloud", "evidence": why[:hl.EVIDENCE_MAX]}]


def repair(run: Run, node: NodeHealth, action: str, outputs=None) -> Repaired:
    """Drain (left to its agent), isolate (left drained and named) or replace one cloud node (``outputs``: the
    kind's, where the pool's bucket is named: the new node's Slurm slot is kept there)."""
    if action == "drain":
        return Repaired(node.node, action, False, "its agent drains its Slurm node itself (a cloud node is not "
                        "reached from here): waiting for its next watch")
    if action == "isolate":
        return Repaired(node.node, action, True, "left drained, named in `gpufleet status`")
    if action in ("release", "keep"):
        return _give_back(run, node, outputs, action == "release")
    return _replace(run, node, outputs)


def _give_back(run: Run, node: NodeHealth, outputs, on: bool) -> Repaired:
    """An idle node of an elastic pool given back (``on``) or taken back, through its slot in its pool's bucket
    (``channel.release_slot``): its agent reads it each run and its watch drains it for node_watch.SCALE_DOWN (a job
    on it ends first), or resumes it. The same route as a fault's drain: the node's own agent (it is not reached
    from here)."""
    action = "release" if on else "keep"
    (rec,) = [n for n in run.record.nodes if f"{n.pool}-{n.idx}" == node.node]
    try:
        channel.release_slot(pool_store(run, rec.pool, outputs),
                             channel.NodeTarget(rec.pool, rec.idx, rec.node_id, rec.private_ip, vm_uid=rec.vm_uid), on)
    except GpufleetError as e:
        return Repaired(node.node, action, False, f"its slot could not be written: {e.message}")
    return Repaired(node.node, action, True, "given back: its agent drains it in Slurm for GF-SCALE-DOWN" if on else
                    "taken back: its agent resumes it in Slurm")


def _replace(run: Run, node: NodeHealth, outputs=None) -> Repaired:
    (rec,) = [n for n in run.record.nodes if f"{n.pool}-{n.idx}" == node.node]
    region = rec.location
    try:
        api = pool_api(run, rec.provider, region)
    except GpufleetError as e:
        return Repaired(node.node, "replace", False, f"{rec.provider} could not be opened: {e.message}")
    launched = []  # what this call launched: said to heal's memory at once (``on_launch``), before anything else

    def on_launch(new_id: str) -> None:
        launched.append(new_id)
        if node.on_launch is not None:
            node.on_launch(new_id)

    spec = next(p for p in run.stack.pools if p.name == rec.pool)
    market = None if node.launched else "spot" if spec.spot else "on-demand"  # a finish asks no market
    # the first ask: a spot pool's own market, whatever the VM it replaces was (one its spot_fallback made on-demand
    # is replaced on spot first again); another pool's own request as it is (a reservation-bound one keeps its model)
    first = "spot" if market == "spot" else None
    fallback = spec.failover.spot_fallback if spec.spot and spec.failover and not node.launched else None
    said = ""  # how the market came to be, when it is not the pool's own
    # the pool's request as `up` kept it in its stack output, where its cloud keeps none (GCP): asked when no VM of
    # the pool is left to read it from
    kept = ((run.outputs or {}).get("pools") or {}).get(rec.pool, {}).get("request")
    extra = {"request": kept} if kept else {}
    try:  # ``launched``: a replacement an earlier pass launched is finished, nothing launched again
        try:
            got = api.replace_node(region, cluster=run.cluster, pool=rec.pool, node_id=rec.node_id,
                                   release_first=node.reserved, launched=node.launched, on_launch=on_launch,
                                   market=first, **extra)
        except (CapacityError, QuotaError) as e:  # spot first; refused, the pool's spot_fallback where it has one
            if fallback is None or not cloud(rec.provider).market_per_node:
                said = "" if fallback is None else (f"the pool's spot_fallback ({fallback}) cannot be asked on "
                                                    f"{rec.provider}: its request makes {market} nodes only; ")
                raise
            said, market = f" (the pool's spot_fallback: spot was refused: {e.message})", fallback
            try:
                got = api.replace_node(region, cluster=run.cluster, pool=rec.pool, node_id=rec.node_id,
                                       release_first=node.reserved, on_launch=on_launch, market=fallback, **extra)
            except (CapacityError, QuotaError, ReplacementUnfinished):
                raise
            except GpufleetError as fault:  # spot was refused, its fallback wrong: both asked again after a backoff,
                # never every pass
                return Repaired(node.node, "replace", False, f"spot was refused, then {fallback} failed: "
                                f"{fault.message}"[:400], refused=True, market=market)
    except (CapacityError, QuotaError) as e:
        why = f"spot was refused, then {fallback}: {e.message}" if market == fallback else said + e.message
        return Repaired(node.node, "replace", False, why[:400], refused=True, market=market)
    except SuccessorGone as e:  # its launch was counted: heal's memory forgets it, a later pass asks anew
        return Repaired(node.node, "replace", False, e.message, forgotten=True)
    except GpufleetError as e:  # ReplacementUnfinished among them: what it launched is in heal's memory
        return Repaired(node.node, "replace", False, e.message, launched=(launched or [None])[0])
    new = Node(pool=rec.pool, idx=rec.idx, provider=rec.provider, location=rec.location, machine=rec.machine,
               zone=got.get("zone") or rec.zone, node_id=got["id"], private_ip=got.get("private_ip"),
               ssh_endpoint=f"{got['private_ip']}:22" if got.get("private_ip") else None,
               usd_per_hour=rec.usd_per_hour, vm_uid=got.get("vm_uid"))
    joins = give_slot(run, new, outputs)[1] if run.stack.slurm and outputs is not None else ""
    if run.stack.slurm and outputs is not None:  # the old node's slot: its VM is gone
        joins += forget_slots(run, [rec], outputs)
    detail = f"{rec.node_id} terminated, {got['id']} asked for through the pool's request (fleet {got.get('fleet_id')})"
    return Repaired(node.node, "replace", True, (detail + (f", on {market}{said}" if market else "") + joins)[:400],
                    new=new, market=market,
                    launched=None if node.launched else (launched or [got["id"]])[0],  # a finish was counted before
                    fleet=got.get("fleet_id"))


def pool_store(run: Run, pool: str, outputs):
    """The bucket of ``pool`` (a test's stand-in in ``seams.stores``), where its nodes' slots are kept."""
    pools = {p.name: p for p in run.stack.pools}
    ref = next((v[0] for v in channel.pool_buckets(outputs(run), pools).values() if pool in v[1]), None)
    if ref is None:
        raise GpufleetError(f"the stack's outputs name no bucket for pool {pool}")
    return (run.seams.stores or {}).get(ref["name"]) or cloud(ref["cloud"]).objects(ref)


def forget_slots(run: Run, gone: list[Node], outputs) -> str:
    """The Slurm slots kept for nodes that are gone (``channel.forget_slots``); what to tell when they could not be
    deleted (they name ids no VM has; the next removal or replacement tries its own)."""
    try:
        for pool in sorted({n.pool for n in gone}):
            channel.forget_slots(pool_store(run, pool, outputs), pool, [n.node_id for n in gone if n.pool == pool])
    except GpufleetError as e:
        return f"; the slot of {', '.join(n.node_id for n in gone)} is still kept ({e.message})"
    return ""


def give_slot(run: Run, new: Node, outputs) -> tuple[bool, str]:
    """The new node's Slurm slot, ``<pool>-<idx>`` (a replacement's is its predecessor's; an added node's one of its
    elastic pool's free slots, which slurm.conf declares up to max: configure.slurm), kept under its id in its pool's
    bucket (``channel.assign_slots``): its agent starts slurmd as that slot, which slurm.conf names already, so it
    joins Slurm with no `configure` (it registers drained; its passing gate resumes it). (Whether it joins so, what to
    tell of it.)"""
    if next(p for p in run.stack.pools if p.name == new.pool).role != "compute":
        return False, "; a controller's replacement joins Slurm once `gpufleet configure` names it in slurm.conf"
    try:
        channel.assign_slots(pool_store(run, new.pool, outputs),
                             [channel.NodeTarget(new.pool, new.idx, new.node_id, new.private_ip, vm_uid=new.vm_uid)])
    except GpufleetError as e:
        return False, (f"; its Slurm slot {new.pool}-{new.idx} could not be kept for it ({e.message}): it joins Slurm "
                       "once `gpufleet configure` runs")
    return True, f"; it joins Slurm as {new.pool}-{new.idx} (drained until its gate passes)"

"""A cloud node's health, read from the status its agent keeps in the pool's bucket, and its repair.

``health`` lists each bucket's ``status/`` once and reads the statuses (``channel``), each taken for the
node its key names (``channel.vouched``): its ``health`` part as the node agent wrote it
(``nodes.health.reported``). A bucket that cannot be read, a node without a status, a report that is
missing, malformed or stale: ``unknown``, which `heal` never acts on.

Out of service and jobs: with Slurm, as the controller's agent last put Slurm's view in its status
(``clouds.scheduler.node_states``), trusted only while the controller's own report is fresh (the agent
writes both on each run); a node is found there by the host name its facts give. Without Slurm,
gpufleet runs no jobs and sees none: a faulty or interrupted node has marked itself failed (its agent
does, the contract says), so it is out of service with no job gpufleet could wait for.

A cloud node cannot be reached from here (it is private): its agent drains its Slurm node itself, so
``drain`` is left to it; ``isolate`` leaves it drained and named; ``replace`` asks the node's cloud
for a new node through the pool's own request, then terminates the old one (the cloud API's
``replace_node``; a cloud that has none yet, ``base.Cloud.replaces_nodes`` false, has its nodes isolated).
"""

from __future__ import annotations

import datetime as dt
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from gpufleet.clouds import cloud, inventory
from gpufleet.clouds import scheduler as slurm_view
from gpufleet.errors import CapacityError, GpufleetError, QuotaError, UntrustedValue
from gpufleet.nodes import health as hl
from gpufleet.nodes.cloud import channel
from gpufleet.nodes.health import NodeHealth, Repaired
from gpufleet.nodes.run import Run
from gpufleet.state.registry import Node

BATCH = 256  # statuses read at once: what is held of their bodies at any time, however many nodes


@dataclass
class Said:
    """What `heal` keeps of one status (its body is dropped once read: memory stays small per node)."""

    key: str
    report: dict | None  # nodes.health.reported's; None: unreadable (``why``)
    why: str | None
    hostname: str | None  # Slurm's name for it, from its checked facts
    slurm: str | None = None  # a controller's: Slurm's answer its agent put in its status


def said(key: str, status: dict, now: dt.datetime, controller: bool) -> Said:
    try:
        rep, why = hl.reported(status, now), None
    except hl.Unreadable as e:
        rep, why = None, f"{key}: {e}"
    try:
        host = (channel.checked_facts(status.get("facts"), key) or {}).get("hostname")
    except UntrustedValue:
        host = None
    view = status.get("scheduler") if controller else None
    out = view["out"] if isinstance(view, dict) and isinstance(view.get("out"), str) else None
    return Said(key, rep, why, host.lower() if isinstance(host, str) else None, out)


def read_statuses(run: Run, pools: dict, outputs, now: dt.datetime) -> tuple[dict, dict[str, str]]:
    """({(pool, node key): Said}, {pool: why its bucket could not be read}): each bucket's ``status/``
    listed once, its statuses read BATCH at a time, each kept for the node its key names (``channel.vouched``)."""
    found: dict = {}
    buckets = channel.pool_buckets(outputs, pools)
    served = {n for _, names in buckets.values() for n in names}
    unread = dict.fromkeys(set(pools) - served, "the stack's outputs name no bucket for its pool")
    controllers = {p.name for p in pools.values() if p.role == "controller"}
    for bucket, (ref, names) in buckets.items():
        try:
            store = (run.seams.stores or {}).get(bucket) or cloud(ref["cloud"]).objects(ref)
            listing, _ = store.list("status/")
            keys = [k for k, _ in listing if (channel.status_owner(k) or ("",))[0] in names]
            with ThreadPoolExecutor(max_workers=channel.READERS) as ex:
                for i in range(0, len(keys), BATCH):
                    part = keys[i:i + BATCH]
                    for key, status in zip(part, ex.map(channel.read_status, [store] * len(part), part)):
                        owner = channel.vouched(key, status) if status is not None else None
                        if owner is not None:
                            found[owner] = said(key, status, now, owner[0] in controllers)
        except GpufleetError as e:
            unread.update(dict.fromkeys(names, f"its bucket {bucket} could not be read: {e.message}"))
    return found, unread


def slurm_states(found: dict) -> dict[str, str] | None:
    """Slurm's state of each node (by host name) as the controller's agent last put it; None when it
    says nothing trustworthy: no controller status, an error, or the controller's own report unreadable
    or stale (its agent writes Slurm's view on the same run, and changes its time only when it changes)."""
    for s in found.values():
        if s.slurm is None or s.slurm.startswith("error: "):
            continue
        return slurm_view.node_states(s.slurm) if s.report is not None else None
    return None


def _jobs(nh: NodeHealth, s: Said, slurm: bool, states: dict | None) -> None:
    rep = s.report
    if not slurm:  # no scheduler: the node marked itself failed; gpufleet runs no job there to wait for
        nh.drained, nh.jobs = rep["drained"] or rep["state"] in hl.BROKEN, "none"
        return
    if states is None:
        nh.drained = True if rep["drained"] else None
        return
    drained, nh.jobs = hl.from_slurm(states.get(s.hostname or ""))
    nh.drained = True if rep["drained"] else drained


def health(run: Run, owns, outputs, name: str) -> list[NodeHealth]:
    """Each recorded cloud node of the stack's pools, as its status says (``owns``, ``outputs``, ``name``:
    the kind's)."""
    pools = {p.name: p for p in run.stack.pools if owns(p)}
    nodes = [n for n in run.record.nodes if owns(n) and n.pool in pools]
    if not nodes:
        return []
    now = dt.datetime.now(dt.timezone.utc)
    out = [NodeHealth(f"{n.pool}-{n.idx}", n.pool, name, hl.UNKNOWN, n.private_ip, n.node_id,
                      reserved=bool(pools[n.pool].reservations), replaceable=cloud(n.provider).replaces_nodes)
           for n in nodes]
    try:
        outs = outputs(run)
    except GpufleetError as e:
        for nh in out:
            nh.why = f"the stack's outputs could not be read: {e.message}"
        return out
    found, unread = read_statuses(run, pools, outs, now)
    states = slurm_states(found) if run.stack.slurm else None
    for n, nh in zip(nodes, out):
        s = found.get((n.pool, channel.node_key(n.node_id))) if n.node_id else None
        if n.pool in unread:
            nh.why = unread[n.pool]
        elif s is None:
            nh.why = "it has no status in its pool's bucket"
        elif s.report is None:
            nh.why = s.why
        else:
            rep = s.report
            nh.state, nh.faults, nh.checked_at, nh.notice = rep["state"], rep["faults"], rep["checked_at"], rep["notice"]
            _jobs(nh, s, bool(run.stack.slurm), states)
    return out


def repair(run: Run, node: NodeHealth, action: str) -> Repaired:
    """Drain (left to its agent), isolate (left drained and named) or replace one cloud node."""
    if action == "drain":
        return Repaired(node.node, action, False, "its agent drains its Slurm node itself (a cloud node is not "
                        "reached from here): waiting for its next watch")
    if action == "isolate":
        return Repaired(node.node, action, True, "left drained, named in `gpufleet status`")
    return _replace(run, node)


def _replace(run: Run, node: NodeHealth) -> Repaired:
    (rec,) = [n for n in run.record.nodes if f"{n.pool}-{n.idx}" == node.node]
    region = rec.location
    try:
        opened = inventory.open_clouds([rec.provider], required=True, regions={rec.provider: [region]}) \
            if run.seams.cloud_api is None else run.seams.cloud_api
        api = opened[rec.provider]
    except GpufleetError as e:
        return Repaired(node.node, "replace", False, f"{rec.provider} could not be opened: {e.message}")
    try:
        got = api.replace_node(region, cluster=run.cluster, pool=rec.pool, node_id=rec.node_id, release_first=node.reserved)
    except (CapacityError, QuotaError) as e:
        return Repaired(node.node, "replace", False, e.message, refused=True)
    except GpufleetError as e:
        return Repaired(node.node, "replace", False, e.message)
    new = Node(pool=rec.pool, idx=rec.idx, provider=rec.provider, location=rec.location, machine=rec.machine,
               zone=got.get("zone") or rec.zone, node_id=got["id"], private_ip=got.get("private_ip"),
               ssh_endpoint=f"{got['private_ip']}:22" if got.get("private_ip") else None,
               usd_per_hour=rec.usd_per_hour, vm_uid=got.get("vm_uid"))
    return Repaired(node.node, "replace", True, f"{rec.node_id} terminated, {got['id']} asked for through the "
                    f"pool's request (fleet {got.get('fleet_id')})", new=new,
                    fleet=got.get("fleet_id"))

"""`gpufleet status`: the registry's clusters merged with what the clouds report by tag, and the
golden images the clouds hold (``held_images``: they bill for storage with no cluster up).

The registry says what gpufleet meant to run; the clouds' tags say what runs. Costs come
from what runs: each priced resource's hourly price from its creation (or the cluster's)
until now. Pools on clouds that were not asked (no credentials) and rack hosts are costed
from the registry's launch prices instead, and the row says so.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from gpufleet import nodes
from gpufleet.clouds import held_images, inventory
from gpufleet.clouds.resources import Resource, price
from gpufleet.clouds.tags import CREATED_BY, TAG_PREFIX, format_expiry, names, principal_key, time_or_none
from gpufleet.errors import GpufleetError, NotFound
from gpufleet.fleet import budgets, dashboard, heal, team
from gpufleet.nodes.health import BROKEN
from gpufleet.nodes.run import Run
from gpufleet.providers import CLOUDS
from gpufleet.stacks import stack_of
from gpufleet.state import caller
from gpufleet.state.registry import ClusterRecord, Registry


@dataclass
class ClusterStatus:
    name: str
    state: str  # the registry's state, or "orphan" for a cluster only the tags know
    stack: str | None
    owner: str | None
    created_at: dt.datetime | None
    expires_at: dt.datetime | None
    nodes_recorded: int
    nodes_found: int | None  # VMs the clouds report; None when no cloud of the cluster was asked
    usd_per_hour: float
    cost_so_far: float
    where: list[str] = field(default_factory=list)
    resources: list[Resource] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    cost_by_provider: dict[str, float] = field(default_factory=dict)  # cost_so_far split by where it is billed
    created_by: dict[str, str] = field(default_factory=dict)  # provider -> who brought it up there
    scheduler: dict | None = None  # Slurm's view from the controller (nodes and jobs per state), when it runs
    health: dict | None = None  # what `heal` last found and did (fleet.heal.summary), when it ran
    monitor: dict | None = None  # its monitor host's address and whether Prometheus answers (fleet.dashboard.probe)

    def to_dict(self) -> dict:
        return {"cluster": self.name, "state": self.state, "stack": self.stack, "owner": self.owner,
                "created_by": self.created_by,
                "created_at": format_expiry(self.created_at) if self.created_at else None,
                "expires_at": format_expiry(self.expires_at) if self.expires_at else None,
                "nodes_recorded": self.nodes_recorded, "nodes_found": self.nodes_found,
                "usd_per_hour": round(self.usd_per_hour, 4), "cost_so_far_usd": round(self.cost_so_far, 2),
                "cost_by_provider_usd": {p: round(c, 2) for p, c in self.cost_by_provider.items()},
                "where": self.where, "notes": self.notes, "resources": [r.to_dict() for r in self.resources],
                "scheduler": self.scheduler, "health": self.health, "monitor": self.monitor}



def _hours(now: dt.datetime, since: dt.datetime | None) -> float:
    return max(0.0, (now - since).total_seconds() / 3600) if since else 0.0


def vms(resources: list[Resource]) -> int:
    return sum(r.count for r in resources if r.kind in ("instance", "scale-set"))


def _cost_by_provider(res: list[Resource], now: dt.datetime, created: dt.datetime | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in res:
        out[r.provider] = out.get(r.provider, 0.0) + (r.usd_per_hour or 0.0) * _hours(now, r.created_at or created)
    return out


def build(records: list[ClusterRecord], resources: list[Resource], *, checked: set[str],
          now: dt.datetime, unasked: dict[str, str] | None = None) -> list[ClusterStatus]:
    """One row per registry cluster, then one per cluster only the clouds' tags know (orphans).
    ``unasked``: why each cloud not in ``checked`` was not read ("not asked (--local)")."""
    by_cluster: dict[str, list[Resource]] = {}
    for r in resources:
        by_cluster.setdefault(r.cluster, []).append(r)
    out = []
    for rec in records:
        res = by_cluster.pop(rec.name, [])
        created = time_or_none(rec.created_at)
        asked = [p for p in rec.clouds if p in checked]
        not_asked = [p for p in rec.clouds if p not in checked]
        per_hour = sum(r.usd_per_hour or 0.0 for r in res)
        by_provider = _cost_by_provider(res, now, created)
        from_registry = [n for n in rec.nodes if n.provider not in CLOUDS or n.provider in not_asked]
        for n in from_registry:
            per_hour += n.usd_per_hour or 0.0
            by_provider[n.provider] = by_provider.get(n.provider, 0.0) + (n.usd_per_hour or 0.0) * _hours(
                now, time_or_none(n.launched_at) or created)
        cost = sum(by_provider.values())
        cloud_nodes = [n for n in rec.nodes if n.provider in asked]
        st = ClusterStatus(rec.name, rec.state, rec.stack, rec.owner, created, time_or_none(rec.expires_at), len(rec.nodes),
                           vms(res) + (len(rec.nodes) - len(cloud_nodes)) if asked else None, per_hour, cost,
                           _where(res, rec), res, cost_by_provider=by_provider,
                           created_by={**_creators(res), **rec.created_by})
        if asked and vms(res) != len(cloud_nodes):
            st.notes.append(f"the registry has {len(cloud_nodes)} cloud node(s), the clouds report {vms(res)}")
        for p in not_asked:
            st.notes.append(f"{p} {(unasked or {}).get(p, 'not asked')}: costed from the registry")
        if rec.nodes and any(n.provider not in CLOUDS for n in rec.nodes):
            st.notes.append("rack hosts costed from the stack's site costs")
        unpriced = [r for r in res if r.usd_per_hour is None and r.kind in ("instance", "scale-set")]
        if unpriced:
            st.notes.append(f"{len(unpriced)} VM(s) not priced: {unpriced[0].price_note}")
        out.append(st)
    for name, res in sorted(by_cluster.items()):
        tags = res[0].tags
        times = [r.created_at for r in res if r.created_at]
        expiries = [t for t in (time_or_none(r.tags.get(TAG_PREFIX + "expires-at")) for r in res) if t]
        created = min(times) if times else None
        by_provider = _cost_by_provider(res, now, created)
        st = ClusterStatus(name, "orphan", tags.get(TAG_PREFIX + "stack"), tags.get(TAG_PREFIX + "owner"), created,
                           min(expiries) if expiries else None, 0, vms(res), sum(r.usd_per_hour or 0.0 for r in res),
                           sum(by_provider.values()), _where(res, None), res,
                           ["tagged for a cluster the registry does not know: `gpufleet reap` removes it"],
                           cost_by_provider=by_provider, created_by=_creators(res))
        out.append(st)
    return out


def _creators(res: list[Resource]) -> dict[str, str]:
    """Who created the cluster on each cloud, as its resources' ``gpufleet:created-by`` tags say."""
    return {r.provider: r.tags[CREATED_BY] for r in res if r.tags.get(CREATED_BY)}


def mine(rows: list[ClusterStatus], me: set[str]) -> list[ClusterStatus]:
    """The clusters one of ``me`` (the caller's principals) created."""
    keys = {principal_key(m) for m in me}
    return [r for r in rows if any(principal_key(v) in keys for v in r.created_by.values())]


def owned_by(rows: list[ClusterStatus], who: str) -> list[ClusterStatus]:
    """The clusters whose stack owner or creator names ``who`` (a part of it, in any case: `alice`
    finds ``arn:aws:sts::1:assumed-role/Admin/alice@example.com``)."""
    return [r for r in rows if any(names(v, who) for v in (r.owner or "", *r.created_by.values()))]


def _where(res: list[Resource], rec: ClusterRecord | None) -> list[str]:
    places = {f"{r.provider}/{r.region}" for r in res}
    if rec is not None:
        places |= {f"{p}/{r}" for p, regions in rec.clouds.items() for r in regions}
        places |= {f"{n.provider}/{n.location}" for n in rec.nodes if n.provider not in CLOUDS}
    return sorted(places)


@dataclass
class Report:
    """What `status` found: one row per cluster, which clouds were asked, what could not be read."""

    rows: list[ClusterStatus]
    registry: str
    clouds: inventory.Clouds = field(default_factory=inventory.Clouds)
    unread: dict[str, str] = field(default_factory=dict)  # what should have been read and was not: exit 1
    images: list = field(default_factory=list)  # held_images.Held: the golden images the clouds asked hold
    me: list[str] = field(default_factory=list)  # the caller's principals `--mine` matched against
    budgets: list = field(default_factory=list)  # budgets.Standing: each budget this month

    @property
    def checked(self) -> list[str]:
        return sorted(self.clouds.open)

    def to_dict(self) -> dict:
        return {"clusters": [r.to_dict() for r in self.rows], "checked": self.checked,
                "skipped": self.clouds.skipped, "unread": self.unread, "registry": self.registry,
                "images": [h.to_dict() for h in self.images], **({"me": self.me} if self.me else {}),
                "budgets": [b.to_dict() for b in self.budgets]}


def run(target: str | None, cat, *, providers: list[str] | None = None, regions: list[str] | None = None,
        local: bool = False, registry: Registry | None = None, on_region=None, now: dt.datetime | None = None,
        only_mine: bool = False, owner: str | None = None, budget_list: list | None = None) -> Report:
    """Every cluster (or those of a stack file or cluster name), merged with what the clouds report:
    ``providers`` must open (credentials), the others are asked when they can be; ``local`` asks none.
    ``only_mine``: only those the caller created (as each cloud asked knows them, and the OS user for
    racks); ``owner``: only those whose owner or creator names it."""
    reg = registry or team.registry()
    records, name, given = _clusters(target, reg, cat)
    report = Report([], str(reg.path))
    resources: list[Resource] = []
    if not local:
        where = regions
        if not where and name is not None and records:  # known clusters: only where they run
            where = {}
            for rec in records:
                for p, rs in rec.clouds.items():
                    where[p] = list(dict.fromkeys([*where.get(p, []), *rs]))
        wanted = providers or (sorted(where) if isinstance(where, dict) else None)
        if wanted != []:  # [] = the clusters asked for have no cloud pools
            report.clouds = inventory.open_clouds(wanted, required=bool(providers), regions=where)
            one = records[0].name if len(records) == 1 else (name if not records else None)
            resources, places = inventory.collect(report.clouds, cluster=one if name else None,
                                                  on_region=on_region)
            held, image_places = held_images.held(report.clouds)
            report.unread = report.clouds.unread({**places, **image_places})
            stack = {r.stack for r in records} | {name} if name else None  # a stack's or cluster's: its stack's images
            report.images = held_images.judge([i for i in held if stack is None or i.tags.get(TAG_PREFIX + "stack")
                                               in stack], now or dt.datetime.now(dt.timezone.utc))
            if name and len(records) > 1:
                keep = {r.name for r in records}
                resources = [r for r in resources if r.cluster in keep]
            price(resources, cat)
    report.rows = build(records, resources, checked=set(report.clouds.open),
                        now=now or dt.datetime.now(dt.timezone.utc), unasked=_unasked(report.clouds, local))
    for row in report.rows:  # what the last verification found (`gpufleet verify`, or `up`'s)
        bad = [f"{pool}-{idx} ({h['detail']})" for (pool, idx), h in sorted(reg.hosts(row.name).items())
               if h["state"] == "unhealthy"]
        if bad:
            row.notes.append(f"{len(bad)} node(s) unhealthy: " + "; ".join(bad[:5]) + ("; ..." if len(bad) > 5 else ""))
    log = team.log_store(create=False)
    for row in report.rows:  # what the last `heal` passes found and did
        row.health = heal.summary(log, row.name)
        _health_notes(row)
    by_name = {r.name: r for r in records}
    for row in report.rows:
        row.scheduler = _scheduler(row, by_name.get(row.name), cat, given=given, local=local)
        _monitor(row, by_name.get(row.name), reg, cat, stack_file=target if given is not None else None, local=local)
    if name is not None and not report.rows:
        raise NotFound("cluster", name, [c.name for c in reg.list()], " in the registry or the clouds' tags",
                       listed_by="gpufleet status")
    report.budgets = budgets.standings(budgets.configured() if budget_list is None else budget_list, reg.list(),
                                       now or dt.datetime.now(dt.timezone.utc))
    report.unread.update({f"{reg.shared.url}/{k}": why for k, why in reg.unreadable.items()})  # left out, named
    if only_mine:
        report.me = sorted({caller.local(), *(i["principal"] for i in report.clouds.identity.values())})
        report.rows = mine(report.rows, set(report.me))
    if owner:
        report.rows = owned_by(report.rows, owner)
    return report


def _health_notes(row: ClusterStatus) -> None:
    """The nodes `heal` left out of service (isolated, or waiting for a replacement), each named with its
    fault, and the cluster's replacements."""
    if not row.health:
        return
    for pool, v in sorted(row.health["pools"].items()):
        if v.get("health"):
            row.notes.append(f"pool {pool} at the last heal pass ({v.get('checked_at')}): "
                             + ", ".join(f"{n} {s}" for s, n in v["health"].items()))
    out = [f"{n} {v.get('done') or 'faulty'} [{v.get('last_fault')}]" for n, v in row.health["nodes"].items()
           if v.get("health") in BROKEN and v.get("done") != "replace"]
    if out:
        row.notes.append(f"{len(out)} node(s) out of service (heal): " + "; ".join(out[:5]) + ("; ..." if len(out) > 5
                                                                                              else ""))
    if row.health["replacements"]:
        row.notes.append(f"{row.health['replacements']} node(s) replaced by heal")


def _monitor(row: ClusterStatus, rec: ClusterRecord | None, reg: Registry, cat, *, stack_file, local: bool) -> None:
    """The monitor host of a cluster with nodes whose stack runs Prometheus: its address and whether
    Prometheus answers through the cluster's ssh route (not asked with --local), in the row and its notes."""
    if rec is None or not rec.nodes or rec.state in ("down", "reaped"):
        return
    row.monitor = dashboard.probe(rec.name, registry=reg, cat=cat, stack_file=stack_file, ask=not local)
    if row.monitor:
        row.notes.append(f"monitor {row.monitor['address'] or '?'}: Prometheus {row.monitor['prometheus']}")


def _unasked(clouds: inventory.Clouds, local: bool) -> dict[str, str]:
    """Why each cloud that was not read was not, in the words of a row's note."""
    if local:
        return dict.fromkeys(CLOUDS, "not asked (--local)")
    return {**dict.fromkeys(CLOUDS, "not asked (not among --provider)" if clouds.asked else "not asked"),
            **{p: f"not asked ({why})" for p, why in clouds.skipped.items()},
            **{p: f"could not be read ({why})" for p, why in clouds.failed.items()}}


def _scheduler(row: ClusterStatus, rec: ClusterRecord | None, cat, *, given=None, local: bool = False) -> dict | None:
    """Slurm's view of a running cluster whose stack has it, from whichever kind of node holds its
    controller: the stack ``given`` (`status STACK`) or the file `up` recorded when this machine recorded
    it alone (a team store's record names one only as a hint); a stack file that is gone or no longer
    loads is said in the row."""
    if rec is None:
        return None
    if given is not None and given.name == rec.stack:
        return _asked(row, given, rec, local)
    if rec.store is not None and rec.stack_file:
        row.notes.append("the scheduler was not asked: the stack file the team store names is read only when passed "
                         f"(gpufleet status {rec.stack_file!r})")
        return None
    if not rec.own_stack_file:
        return None
    try:
        st = stack_of(rec.own_stack_file, cat)
    except GpufleetError as e:
        row.notes.append(f"its stack file does not load ({e.message}): the scheduler was not asked")
        return None
    return _asked(row, st, rec, local)


def _asked(row: ClusterStatus, st, rec: ClusterRecord, local: bool) -> dict | None:
    if st is None or not st.slurm:
        return None
    run = Run(st, None, rec.name, None, record=rec, local=local)
    view = next((v for k in nodes.used(st) if (v := k.scheduler(run)) is not None), None)
    if view and view.get("error"):
        row.notes.append(f"Slurm's controller {view['controller']} could not be asked: {view['error']}")
    return view


def _clusters(target: str | None, reg: Registry, cat) -> tuple[list[ClusterRecord], str | None, object]:
    """Registry clusters for a stack file or cluster name (all without one), the name asked for, and
    the stack when a stack file was given."""
    if target is None:
        return reg.list(), None, None
    st = stack_of(target, cat)
    if st is not None:
        return [c for c in reg.list() if c.stack == st.name], st.name, st
    rec = reg.get(target)
    return ([rec] if rec else []), target, None

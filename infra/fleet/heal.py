"""`gpufleet heal`: each node's health, as its kind reads it, turned into a drain, an isolation or a
replacement under the pool's ``health`` rules, each action an event in the log.

``decide`` is the whole judgement, pure (as `reap`'s ``select``): a node whose health is unknown (an
unreadable status, a store or API error, a stale report) is never acted on; a faulty or interrupted node
is drained first; it is replaced only when its pool says ``on_fault: replace``, once it is drained and
its jobs have ended (jobs not known: not replaced), while the pool is under ``max_replacements`` in the
last hour, not on reserved capacity unless ``replace_reserved``, and not within a capacity refusal's
backoff; otherwise it is isolated (left drained and named). A kind that cannot make a node (a rack)
isolates.

What one pass leaves for the next is small and in the log's store (``heal/<cluster>.json``): per pool,
the capacity refusals in a row and when to ask again; per node that faulted, its last fault and what was
done, so an isolated node is named in `status` and an event is written once, not on every pass. The
replacements of the last hour are counted from the event log. Cron-safe: each pass takes the cluster's
lease in team mode (alone, this machine's lock of it) and gives it back, so `up` and `down` are not kept waiting by a
watch. A pass never writes that memory over another's: a write whose precondition loses stops the pass (fencing).
"""

from __future__ import annotations

import datetime as dt
import json
import shlex
import socket
from collections import Counter
from dataclasses import dataclass, field

from gpufleet import nodes as kinds
from gpufleet.clouds.node_watch import GIVEN_BACK, MARK, SCALE_DOWN
from gpufleet.errors import GpufleetError
from gpufleet.fleet import scale as scaling
from gpufleet.fleet import team
from gpufleet.nodes import health as hl
from gpufleet.nodes.health import NodeHealth
from gpufleet.nodes.run import Run, Seams
from gpufleet.state import events, leases
from gpufleet.state.recorded import recorded
from gpufleet.state.registry import Registry
from gpufleet.state.shared import BadObject, SharedStore, json_object

ACTIONS = ("drain", "isolate", "replace")  # what a kind is asked to do
BACKOFF_S = 300  # the first wait after a capacity refusal; doubled for each refusal in a row
BACKOFF_MAX_S = 6 * 3600
WINDOW = dt.timedelta(hours=1)  # max_replacements is per pool per hour
# how long a scale-up's launched but unrecorded node holds its pool's growth when its cloud never says it is gone: EC2
# lists a terminated instance "about an hour" (terminating-instances, read 2026-11), after which its id is neither
# alive nor gone to the API (aws/replace.py gone_nodes); a living one is recorded by `gpufleet registry rebuild` long
# before, and one forgotten still carries the cluster's tags (`gpufleet reap` and rebuild find it)
UNRECORDED_MAX = dt.timedelta(hours=3)


@dataclass(slots=True)  # one per node in a pass: no dict each
class Decision:
    node: str
    pool: str
    action: str  # none | skip | report | drain | isolate | replace | wait
    why: str
    code: str | None = None
    evidence: str | None = None

    def to_dict(self) -> dict:
        return {"node": self.node, "pool": self.pool, "action": self.action, "why": self.why, "code": self.code,
                "evidence": self.evidence}


def decide(h: NodeHealth, rules, *, replaced_last_hour: int, retry_at: dt.datetime | None, now: dt.datetime,
           isolated: bool = False, given_back: bool = False) -> Decision:
    """What to do for one node under its pool's ``rules`` (spec.Health). ``replaced_last_hour``: the pool's
    replacements in the last hour; ``retry_at``: when the pool may ask for capacity again (a refusal's
    backoff); ``isolated``: it was isolated already (nothing more to do); ``given_back``: the node is on its way out
    of an elastic pool (given_back()): drained if it is not, then removed by the pool's sizing, never replaced nor
    isolated (a VM launched for a node being given back; one kept drained and paid for)."""
    d = Decision(h.node, h.pool, "none", "healthy" if h.state == "ok" else h.state, h.code, h.evidence)
    if h.state == hl.UNKNOWN:
        d.action, d.why = "skip", f"health unknown ({h.why or 'not read'}): nothing is done on a guess"
        return d
    if h.state not in hl.BROKEN:
        return d
    if rules.on_fault == "none":
        d.action, d.why = "report", "the pool's on_fault is none: reported only"
        return d
    if h.drained is not True:
        d.action, d.why = "drain", "out of service first" + (" (its drain state is not known)" if h.drained is None else "")
        return d
    if given_back:
        d.action, d.why = "none", "given back: removed once Slurm shows it drained with no job, never replaced"
        return d
    held = _held(h, rules, replaced_last_hour, retry_at, now)
    if held is None:
        d.action, d.why = "replace", ("drained, no job left, under the pool's limits" if not h.launched else
                                      f"drained, no job left: finishing the replacement that launched {h.launched}")
    elif held[0] == "wait":
        d.action, d.why = held
    elif isolated:
        d.action, d.why = "none", "isolated already"
    else:
        d.action, d.why = held
    return d


def given_back(pool: dict, h: NodeHealth) -> bool:
    """Whether a node of an elastic pool is on its way out: heal gave it back (its memory of the pool, ``pool``, says
    so: the node's fault may have replaced its GF-SCALE-DOWN drain since, as Slurm keeps one reason a node) or Slurm's
    drain reason says so (a person's `gpufleet: release`, which the node's watch and health program keep)."""
    return f"given:{h.node}" in pool or (h.drain_reason or "").startswith(GIVEN_BACK)


def _held(h: NodeHealth, rules, replaced: int, retry_at, now) -> tuple[str, str] | None:
    """Why a drained broken node is not replaced now: ("isolate", why) for good, ("wait", why) for now;
    None: replace it."""
    if rules.on_fault != "replace":
        return "isolate", "the pool's on_fault is isolate"
    if not h.replaceable:
        return "isolate", ("no new node can be made in its place (a rack host, a flex-start pool's VM, which its "
                           "group makes, or a cloud whose replacement is not built)")
    if not h.vouched:
        return "isolate", ("its status, which any node of its pool can write, is its only witness (Slurm does not "
                           "say it is drained): isolated, never terminated on that word alone")
    if h.reserved and not rules.replace_reserved:
        return "isolate", "on reserved capacity (replace_reserved is false): isolated, its slot kept"
    if h.jobs != "none":
        return "wait", ("its jobs are still running" if h.jobs == "running" else
                        "whether jobs run on it is not known: never replaced on a guess")
    if h.launched:  # its successor was launched (and counted) by an earlier pass: finished, nothing launched
        return None
    if replaced >= rules.max_replacements:
        return "wait", f"the pool had {replaced} replacement(s) in the last hour (max_replacements {rules.max_replacements})"
    if retry_at is not None and now < retry_at:
        return "wait", f"the cloud refused capacity: asked again after {retry_at.strftime('%Y-%m-%dT%H:%M:%SZ')}"
    return None


def backoff(refusals: int) -> dt.timedelta:
    """How long a pool waits after ``refusals`` capacity refusals in a row (doubling, capped)."""
    return dt.timedelta(seconds=min(BACKOFF_MAX_S, BACKOFF_S * 2 ** max(0, refusals - 1)))


# --- what one pass leaves for the next --------------------------------------------------------

def state_key(cluster: str) -> str:
    return f"heal/{cluster}.json"


def read_state(store: SharedStore | None, cluster: str) -> tuple[dict, str | None]:
    """`heal`'s memory of the cluster ({"pools": {...}, "nodes": {...}}) and its version (None: none yet).
    Whoever can write the store can write it: what is not of its shape is dropped (a pass learns it again)."""
    got = store.read(state_key(cluster)) if store is not None else None
    if got is None:
        return {"pools": {}, "nodes": {}}, None
    try:
        doc = json_object(store.url, state_key(cluster), got[0])
    except BadObject:
        return {"pools": {}, "nodes": {}}, got[1]
    return {part: {k: _kept(v) for k, v in doc[part].items() if isinstance(v, dict)}
            if isinstance(doc.get(part), dict) else {} for part in ("pools", "nodes")}, got[1]


def _kept(entry: dict) -> dict:
    """One pool's or node's entry, its counts numbers and its words strings (anything else dropped)."""
    out = {}
    for k, v in entry.items():
        if k in ("replaced", "refusals") and isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 10**9:
            out[k] = v
        elif k == "health" and isinstance(v, dict):  # a pool's: nodes per state
            out[k] = {s: n for s, n in v.items() if isinstance(s, str) and isinstance(n, int)}
        elif k == "unrecorded" and isinstance(v, list):  # a pool's: ids a scale-up launched, not yet in the registry
            out[k] = [i[:300] for i in v if isinstance(i, str)]
        elif k not in ("replaced", "refusals") and isinstance(v, str):
            out[k] = v[:300]
    return out


def write_state(store: SharedStore, cluster: str, state: dict, version: str | None) -> str:
    """heal's memory written at ``version`` (None: none there yet); its new version. Another writer's memory is never
    written over (REVIEW.md, Time: a holder that lost the cluster must not go on): when the store's precondition
    loses, or the object read back is not this write (another landed after it), the pass that took the cluster after
    this one holds it now, and this pass stops (LeaseLost, exit 4) with nothing more written."""
    body = json.dumps(state, sort_keys=True).encode()
    landed = store.create(state_key(cluster), body) if version is None else \
        store.replace(state_key(cluster), body, version)
    got = store.read(state_key(cluster)) if landed else None
    if got is None or got[0] != body:
        raise leases.LeaseLost(f"cluster {cluster}: heal's memory ({store.url}/{state_key(cluster)}) changed under this "
                               "pass: another pass holds the cluster now; this one stopped, writing nothing over it",
                               f"`gpufleet log {cluster}` says what each pass did; the next pass goes on from there")
    return got[1]


def _time(value) -> dt.datetime | None:
    try:
        return hl.parse_time(value)
    except hl.Unreadable:
        return None


def _stamp(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


# --- one pass ------------------------------------------------------------------------------------

@dataclass
class Healed:
    cluster: str
    dry_run: bool
    # every node's health and decision: the pass's report (`heal --json` prints each node); with the registry's record
    # (run.record), what a pass holds per node: a status document is dropped once its node is judged (nodes.cloud.heal)
    nodes: list[NodeHealth] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    repaired: list = field(default_factory=list)  # nodes.health.Repaired of each action asked for
    replacements: dict[str, int] = field(default_factory=dict)  # pool -> replaced in all (heal's count)
    events: int = 0
    left: str | None = None  # why the pass left the cluster alone (an `up` or `down` is under way)
    # with Slurm, after `heal` added nodes to an elastic pool whose slots could not be kept for them (each joins as a
    # slot slurm.conf declares up to the pool's max otherwise): the command that gives them one
    configure: str | None = None
    scaled: list = field(default_factory=list)  # fleet.scale.Scaled of each elastic pool this pass resized (or would)

    @property
    def unknown(self) -> list[Decision]:
        return [d for d in self.decisions if d.action == "skip"]

    @property
    def trouble(self) -> bool:
        """An action that did not happen for another reason than a capacity refusal (retried later)."""
        return any(not r.done and not r.refused and r.action != "drain" for r in self.repaired) or \
            any(x.failed for x in self.scaled)

    def to_dict(self) -> dict:
        by = {d.node: d for d in self.decisions}
        return {"cluster": self.cluster, "dry_run": self.dry_run,
                "nodes": [{**h.to_dict(), "decision": by[h.node].to_dict()} for h in self.nodes],
                "repaired": [r.to_dict() for r in self.repaired], "replacements": self.replacements,
                "unknown": len(self.unknown), "events": self.events, "left_alone": self.left,
                "configure": self.configure, "scaled": [x.to_dict() for x in self.scaled]}


def recent_replacements(store: SharedStore | None, cluster: str, now: dt.datetime) -> dict[str, int]:
    """pool -> the replacements the log has for it in the last hour."""
    out: dict[str, int] = {}
    for e in events.read(store, cluster, now - WINDOW) if store is not None else []:
        # each launch counts once: the event of the pass that launched the node (done or not); one that only
        # finished an earlier launch says launched None; an older event, without the key, counts when done
        launch = isinstance(e.get("launched"), str) or ("launched" not in e and e.get("done") is True)
        if e.get("action") == "replace" and launch and isinstance(e.get("pool"), str):
            at = _time(e.get("at", "").replace("+00:00", "Z"))
            if at is None or now - at <= WINDOW:
                out[e["pool"]] = out.get(e["pool"], 0) + 1
    return out


def heal(stack, cat, *, cluster: str | None = None, registry: Registry | None = None, dry_run: bool = False,
         store: SharedStore | None = None, seams: Seams | None = None, outputs: dict | None = None,
         now: dt.datetime | None = None, trust_new_hosts: bool = False) -> Healed:
    """One pass over the cluster's nodes: read, decide, act (``dry_run``: decide only, nothing changed or
    written), each action an event."""
    reg = registry or team.registry()
    name = cluster or stack.name
    rec = recorded(reg, name)
    if rec.state != "up":  # an `up` or `down` is changing it (alone there is no lease to say so), or it failed
        return Healed(name, dry_run, left=f"the cluster is {rec.state}, not up: its nodes are not healed until an "
                                          "`up` brings it up")
    shared = None if store is not None else team.current()
    store = store or shared or team.log_store(create=not dry_run)  # a dry run makes no folder: None when none
    now = now or dt.datetime.now(dt.timezone.utc)
    run = Run(stack, cat, name, reg, seams or Seams(), trust_new_hosts=trust_new_hosts, record=rec,
              backend=rec.backend, outputs=outputs)
    del rec  # run.record from here, which each replacement's record takes the place of: this one is not kept beside
    with team.held(store, name, shared is not None, "heal", dry_run):
        return _pass(run, store, now, dry_run)


def _pass(run: Run, store: SharedStore | None, now: dt.datetime, dry_run: bool) -> Healed:
    state, version = read_state(store, run.cluster)
    saved = [version]  # the memory's version, as a launch's own write leaves it
    unkept: list[str] = []  # launches heal's memory could not keep: the pass stops, naming them
    out = Healed(run.cluster, dry_run, replacements={p: v.get("replaced", 0) for p, v in state["pools"].items()})
    replaced = recent_replacements(store, run.cluster, now)
    rules = {p.name: p.health for p in run.stack.pools}
    read = [(kind, kind.health(run)) for kind in kinds.used(run.stack)]  # every node's health before any action
    seen: dict[str, Counter] = {}  # pool -> its nodes per health state, as this pass saw them: O(pools), for `status`
    for k, h in ((k, h) for k, healths in read for h in healths):
        seen.setdefault(h.pool, Counter())[h.state] += 1
        pool = state["pools"].setdefault(h.pool, {})
        mine = state["nodes"].get(h.node, {})
        h.launched = mine.get("launched")
        d = decide(h, rules[h.pool], replaced_last_hour=replaced.get(h.pool, 0), retry_at=_time(pool.get("retry_at")),
                   now=now, isolated=mine.get("done") == "isolate" and mine.get("code") == h.code,
                   given_back=given_back(pool, h))
        if d.action == "none" and _back(mine, h):
            d = Decision(h.node, h.pool, "resume", f"back in service after {mine['last_fault']}"
                         + (f" ({mine['evidence']})" if mine.get("evidence") else ""), mine["last_fault"],
                         f"its watch found it healthy at {h.checked_at or 'its last look'}, and it is not drained")
        out.nodes.append(h)
        out.decisions.append(d)
        if dry_run:
            continue
        r = None
        if d.action in ACTIONS:
            leases.ensure_held()  # a pass that lost its lease does nothing more
            h.on_launch = _on_launch(store, run.cluster, state, h, saved, unkept)
            r = k.repair(run, h, d.action)
            out.repaired.append(r)
            _after(run, state, h, d, r, now, replaced, out)
        if _news(mine, d, r):
            _event(store, run.cluster, d, r, now)
            out.events += 1
        _stop_if_unkept(run.cluster, unkept)
        _remember(state, h, d, r, now)
    for p in run.stack.pools if run.stack.slurm else []:
        if p.size is not None:
            _elastic(run, p, [h for h in out.nodes if h.pool == p.name],
                     {h.node: k for k, healths in read for h in healths}, state, out, store, now, saved, unkept)
    for name, states in seen.items():
        state["pools"][name]["health"] = dict(sorted(states.items()))
        state["pools"][name]["checked_at"] = _stamp(now)
    if not dry_run:
        leases.ensure_held()  # a pass whose lease was given up writes nothing over its new holder's
        write_state(store, run.cluster, state, saved[0])
    return out


def _elastic(run: Run, p, health: list[NodeHealth], kinds_of: dict, state: dict, out: Healed, store, now: dt.datetime,
             saved: list, unkept: list) -> None:
    """An elastic pool with Slurm, as Slurm's fresh view shows it (none: nothing is done, nothing timed): one node
    more per node its partition's jobs wait for (``scheduler.waiting``), once they have waited
    ``health.scale_up_after`` (timed from the first pass that saw them), up to max, and only while every node of the
    pool is in Slurm's view (a node added last time joins as its slot once its agent has configured it: asking again
    before would add nodes for the same jobs); a refusal is backed off as a replacement's is. With no job waiting, a
    node Slurm shows idle (no job, not drained) for ``health.scale_down_after`` is given back, down to min: its kind
    (``kinds_of``: node -> kind) has it drained for node_watch.SCALE_DOWN (a cloud node by its own agent, through its
    slot), and a later pass whose fresh view shows it drained with no job removes it; jobs that come first take it
    back. A node drained for gpufleet's other reasons (a person's `gpufleet: release`) is removed once drained with no
    job for ``scale_down_after``; a person's other drain never. What one pass remembers is in the pool's entry of
    heal's memory; a node the cloud launched is written there at once (``unrecorded``, until the registry has it): it
    counts against max, and while one is unrecorded heal only names it, never launches again (a failure after a launch
    is not a refusal: asking again would pay for the same nodes twice)."""
    waiting = None if run.slurm_waiting is None else run.slurm_waiting.get(p.name, 0)
    if waiting is None:
        return
    pool = state["pools"].setdefault(p.name, {})
    mine = [n for n in run.record.nodes if n.pool == p.name]
    sized = scaling.Scaled(run.cluster, p.name, len(mine), len(mine), out.dry_run)
    unrecorded = [i for i in pool.get("unrecorded", []) if i not in {n.node_id for n in mine}]
    unrecorded = _not_gone(run, p, unrecorded, pool, sized, now)
    pool["unrecorded"] = unrecorded
    if not unrecorded:
        pool.pop("unrecorded")
        pool.pop("unrecorded_since", None)
    since = _time(pool.get("waiting_since")) or now
    if waiting:
        pool["waiting_since"] = _stamp(since)
    else:
        pool.pop("waiting_since", None)
    names = {f"{n.pool}-{n.idx}" for n in mine}
    given = {k.removeprefix("given:"): v for k, v in pool.items() if k.startswith("given:") and
             k.removeprefix("given:") in names}  # the nodes this pool gave back, not removed yet
    # a node given back that reported a fault since is removed as the others are (decide never replaces it)
    drained = [h for h in health if (h.state == "ok" or h.state in hl.BROKEN and given_back(pool, h))
               and h.drained is True and h.jobs == "none"]
    # only gpufleet's drains (node_watch.MARK, RELEASE the one README gives a person): a person's other drain
    # (a node kept to look at) is never removed
    free = {h.node: h for h in drained if (h.drain_reason or "").startswith(MARK) or h.node in given}
    idle = {h.node: h for h in health if h.state == "ok" and h.drained is False and h.jobs == "none"}
    back = [n for n in given if any(h.node == n and h.state == "ok" for h in health)]  # a broken one is not taken back
    timed = {part: {k.removeprefix(f"{part}:"): v for k, v in pool.items() if k.startswith(f"{part}:")}
             for part in ("free", "idle")}
    for k in [k for k in pool if k.startswith(("free:", "idle:", "given:"))]:
        del pool[k]
    pool.update({f"free:{n}": timed["free"].get(n, _stamp(now)) for n in free})
    pool.update({f"idle:{n}": timed["idle"].get(n, _stamp(now)) for n in idle if n not in given})
    pool.update({f"given:{n}": at for n, at in given.items()})
    retry = _time(pool.get("retry_at"))
    if unrecorded:
        sized.kept.append(f"launched but not recorded: {', '.join(unrecorded)}; `gpufleet registry rebuild` "
                          "records them (heal adds no node to the pool before)")
    elif waiting and back:  # the nodes given back serve the jobs first: taken back, nothing launched this pass
        for n in sorted(back):
            h = next((h for h in health if h.node == n), None)
            if h is not None and _give_back(run, p, h, kinds_of[n], "keep", sized, store, now,
                                            f"{waiting} node(s) wanted by jobs of partition {p.name} (Slurm's view)"):
                pool.pop(f"given:{n}", None)
        sized.kept.append(f"jobs wait: {', '.join(sorted(back))} given back, taken back first")
    elif waiting and len(mine) < p.size.max and (now - since).total_seconds() >= p.health.scale_up_after:
        if any(h.jobs is None for h in health):
            sized.kept.append("jobs wait, but a node of the pool is not in Slurm's view yet (a new node joins as its "
                              "slot once its agent has configured it)")
        elif retry is not None and now < retry:
            sized.kept.append(f"jobs wait; the last scale-up was refused or failed: asked again after {_stamp(retry)}")
        else:
            sized.wanted = len(mine) + min(p.size.max - len(mine), waiting)
            try:
                scaling.grow(run, p, mine, sized.wanted - len(mine), sized, store, now,
                             on_launch=_on_grow(store, run.cluster, state, pool, saved, now, p.name, unkept),
                             evidence=f"{waiting} node(s) wanted by jobs of partition {p.name} waiting since "
                                      f"{_stamp(since)} (Slurm's view)")
            except GpufleetError as e:  # what was launched is in heal's memory (above): the rest of the pass goes on
                sized.failed = e.message
            _stop_if_unkept(run.cluster, unkept)
            if sized.refused:  # nothing launched is left (a cloud's all or nothing): nothing to record
                pool.pop("unrecorded", None)
                pool.pop("unrecorded_since", None)
            if sized.refused or sized.failed:
                pool["refusals"] = pool.get("refusals", 0) + 1
                pool["retry_at"] = _stamp(now + backoff(pool["refusals"]))
            elif sized.added:
                pool["waiting_since"] = _stamp(now)  # the next scale-up waits for the delay again
                pool.pop("refusals", None)
                pool.pop("retry_at", None)
            if sized.unjoined:  # each added node joins as its slot; one whose slot could not be kept needs this
                out.configure = f"gpufleet configure {shlex.quote(run.record.stack_file or 'STACK')} --cluster {run.cluster}"
    elif not waiting:
        _shrink(run, p, mine, health, kinds_of, pool, free, idle, given, sized, store, now)
        sized.kept += [f"{h.node}: drained by a person ({h.drain_reason or 'no reason'}), kept" for h in drained
                       if h.node not in free]
    if sized.would or sized.kept or sized.failed:
        out.scaled.append(sized)
        out.events += sized.events


def _shrink(run: Run, p, mine: list, health: list[NodeHealth], kinds_of: dict, pool: dict, free: dict, idle: dict,
            given: dict, sized, store, now: dt.datetime) -> None:
    """No job waits: the nodes given back that Slurm shows drained with no job (and those a person gave back, drained
    for ``scale_down_after``) removed, then idle nodes given back, down to min counting those still going."""
    def waited(part: str, n: str) -> bool:
        return (now - (_time(pool.get(f"{part}:{n}")) or now)).total_seconds() >= p.health.scale_down_after

    room = len(mine) - p.size.min
    ready = [h for n, h in free.items() if (h.drain_reason or "").startswith(SCALE_DOWN) or n in given
             or waited("free", n)]
    chosen = ready[:max(0, room)]
    if chosen:
        sized.wanted = len(mine) - len(chosen)
        why = {h.node: f"drained ({h.drain_reason}) with no job in Slurm's view since {pool.get(f'free:{h.node}')}"
               for h in chosen}
        try:
            scaling.remove(run, p, mine, chosen, sized, store, now, evidence=why)
        except GpufleetError as e:
            sized.failed = e.message
    gone = [h.node for h in chosen] if sized.removed else []
    for n in gone:
        pool.pop(f"given:{n}", None)
        pool.pop(f"free:{n}", None)
    going = [k for k in pool if k.startswith("given:")]  # given back, not removed yet: each goes in its turn
    room -= len(gone) + len(going)
    for n in [n for n in given if n in idle]:  # given back, idle again (its slot rewritten since, by `configure`)
        _give_back(run, p, idle[n], kinds_of[n], "release", sized, store, now,
                   f"given back at {given[n]}, idle again in Slurm's view")
    # a node on reserved capacity is never given back unless replace_reserved, as a faulty one is never released
    # (README, "What never happens"): a Capacity Block is paid up front and an ODCR is billed whether an instance uses
    # it or not ("Capacity Reservation pricing and billing", EC2 User Guide, read 2026-11-28), so giving it back saves
    # nothing and throws away a gated node the next burst must launch and gate again
    kept_reserved = {n for n, h in idle.items() if h.reserved and not p.health.replace_reserved}
    long_idle = sorted((h for n, h in idle.items() if n not in given and n not in kept_reserved and waited("idle", n)),
                       key=scaling.slot_index, reverse=True)  # the newest slots go first
    for h in long_idle[:max(0, room)]:
        if _give_back(run, p, h, kinds_of[h.node], "release", sized, store, now,
                      f"idle (no job, not drained) in Slurm's view since {pool.get(f'idle:{h.node}')}"):
            pool[f"given:{h.node}"] = _stamp(now)
            pool.pop(f"idle:{h.node}", None)
    sized.kept += [f"{h.node}: idle since {pool[f'idle:{h.node}']}" + (
        "; on reserved capacity (replace_reserved is false): never given back" if h.node in kept_reserved else
        "; given back once idle for health.scale_down_after" if len(mine) > p.size.min else "; the pool is at min")
        for h in idle.values() if f"idle:{h.node}" in pool]


def _give_back(run: Run, p, h: NodeHealth, kind, action: str, sized, store, now: dt.datetime, evidence: str) -> bool:
    """One idle node given back (``release``: drained for SCALE_DOWN, then removed) or taken back (``keep``) through
    its kind, as a fault's drain goes; an event either way, with ``evidence`` (why). Whether it was done (a dry run:
    said, not done)."""
    words = ("give back" if action == "release" else "take back") + f" {h.node} (idle: Slurm shows no job on it)"
    sized.would.append(words)
    if sized.dry_run:
        return False
    r = kind.repair(run, h, action)
    scaling.event(store, run.cluster, p.name, "drain" if action == "release" else "resume",
                  f"{h.node}: {r.detail}" + (f" [{SCALE_DOWN}]" if action == "release" else ""), done=r.done,
                  node=h.node, now=now, evidence=evidence)
    sized.events += 1
    if not r.done:
        sized.kept.append(f"{h.node}: not given back: {r.detail}" if action == "release" else
                          f"{h.node}: not taken back: {r.detail}")
    return r.done


def _not_gone(run: Run, p, unrecorded: list[str], pool: dict, sized, now: dt.datetime) -> list[str]:
    """Of a pool's launched but unrecorded ids, those that may still live: the ones its cloud says are terminated
    (``gone_nodes``, as a node whose status says nothing is judged) leave heal's memory, and all of them once they
    have been there UNRECORDED_MAX (the cloud lists a terminated VM for a while only); each said in ``sized.kept``."""
    if not unrecorded:
        return unrecorded
    try:
        gone = scaling.pool_api(run, p.provider, p.region).gone_nodes(p.region, cluster=run.cluster, pool=p.name,
                                                                  node_ids=unrecorded)
    except GpufleetError:
        gone = set()
    if gone:
        sized.kept.append(f"launched but gone before it was recorded: {', '.join(sorted(gone))} ({p.provider} says "
                          "terminated): forgotten")
    left = [i for i in unrecorded if i not in gone]
    since = _time(pool.get("unrecorded_since"))
    if left and since is not None and now - since >= UNRECORDED_MAX:
        sized.kept.append(f"launched but not recorded for {UNRECORDED_MAX}: {', '.join(left)}: forgotten, the pool "
                          "may grow again (one still running carries the cluster's tags: `gpufleet registry rebuild` "
                          "records it, `gpufleet reap` finds it)")
        return []
    return left


def _on_grow(store: SharedStore, cluster: str, state: dict, pool: dict, saved: list, now: dt.datetime, name: str,
             unkept: list):
    """What a cloud calls the moment a scale-up's node exists: written to heal's memory at once, as _on_launch does
    (since when: UNRECORDED_MAX)."""
    def launched(new_id: str) -> None:
        pool.setdefault("unrecorded", []).append(new_id[:300])
        pool.setdefault("unrecorded_since", _stamp(now))
        _kept_or_said(store, cluster, state, saved, new_id, f"added to pool {name}", unkept)
    return launched


def _save(store: SharedStore, cluster: str, state: dict, saved: list) -> None:
    """heal's memory written now, mid-pass; ``saved`` keeps the version the pass's own last write left (never
    another writer's: write_state raises when its write lost)."""
    saved[0] = write_state(store, cluster, state, saved[0])


def _kept_or_said(store: SharedStore, cluster: str, state: dict, saved: list, new_id: str, what: str,
                  unkept: list) -> None:
    """A launch written to heal's memory at once; one that could not be (the memory changed under this pass) is
    added to ``unkept`` (``what`` it was launched for) for the pass's error, then the error raised, so its cloud
    goes no further (the old node is not terminated)."""
    try:
        _save(store, cluster, state, saved)
    except GpufleetError:
        unkept.append(f"{new_id} ({what})")
        raise


def _stop_if_unkept(cluster: str, unkept: list) -> None:
    """A pass that launched a node its memory could not keep stops here, naming it (the event written before keeps it
    in `gpufleet log` too): it is paid for, and no pass knows it (the one that holds the cluster now may launch
    again)."""
    if unkept:
        raise leases.LeaseLost(
            f"cluster {cluster}: heal's memory changed under this pass (another pass holds the cluster now): "
            f"launched and not kept in it: {', '.join(unkept)}; this pass stopped",
            f"each carries the cluster's tags: `gpufleet registry rebuild` records it, `gpufleet reap` finds it; if "
            f"another pass launched for the same node since (`gpufleet log {cluster}`), terminate one")


def _on_launch(store: SharedStore, cluster: str, state: dict, h: NodeHealth, saved: list, unkept: list):
    """What a cloud calls the moment a replacement's new node exists: the node is in heal's memory (the store)
    before the cloud is asked anything more, so a failure or a killed pass after it never launches another."""
    def launched(new_id: str) -> None:
        state["nodes"].setdefault(h.node, {})["launched"] = new_id[:300]
        _kept_or_said(store, cluster, state, saved, new_id, f"in place of {h.node}", unkept)
    return launched


def _after(run: Run, state: dict, h: NodeHealth, d: Decision, r, now: dt.datetime, replaced: dict, out: Healed) -> None:
    """A replacement's consequences: the registry's node, the pool's counts, a refusal's backoff."""
    pool = state["pools"][h.pool]
    if d.action != "replace":
        return
    if r.launched and not r.done:  # launched, not finished: counted now (the next pass finishes it)
        replaced[h.pool] = replaced.get(h.pool, 0) + 1
    if r.done and r.new is not None:
        (old,) = [n for n in run.record.nodes if (n.pool, n.idx) == (r.new.pool, r.new.idx)]
        # outside Pulumi's state: the registry keeps the replacement, so the next `up` keeps the new node
        run.record = run.registry.replace_node(run.cluster, old, r.new, r.fleet)
        replaced[h.pool] = replaced.get(h.pool, 0) + (1 if r.launched else 0)  # a finish was counted at its launch
        pool["replaced"] = pool.get("replaced", 0) + 1
        out.replacements[h.pool] = pool["replaced"]
        pool.pop("refusals", None)
        pool.pop("retry_at", None)
    elif r.refused:
        pool["refusals"] = pool.get("refusals", 0) + 1
        pool["retry_at"] = _stamp(now + backoff(pool["refusals"]))
        pool["why"] = r.detail[:300]


def _back(mine: dict, h: NodeHealth) -> bool:
    """Whether a node heal's memory has out of service for a fault (not replaced: a new node then) is back: it reads
    healthy and not drained (its watch resumed it, or a person did) and no "resume" was said since the fault (issue 51
    step 6: resume is an event with the fault code and the evidence)."""
    return (h.state == "ok" and h.drained is False and bool(mine.get("last_fault")) and "resumed" not in mine
            and mine.get("done") != "replace")


def _news(mine: dict, d: Decision, r) -> bool:
    """Whether this pass's word on a node is new (an event each time something is done or changes)."""
    if d.action == "none":
        return False
    if d.action == "replace" or (r is not None and r.refused):
        return True
    return (mine.get("action"), mine.get("code"), mine.get("why")) != (d.action, d.code, d.why)


def _remember(state: dict, h: NodeHealth, d: Decision, r, now: dt.datetime) -> None:
    mine = state["nodes"].setdefault(h.node, {})
    if d.action == "replace" and r is not None and r.done:
        state["nodes"][h.node] = {"last_fault": d.code, "evidence": d.evidence, "at": _stamp(now), "done": "replace"}
        return
    if h.state in hl.BROKEN:
        mine.update(last_fault=d.code, evidence=d.evidence, at=_stamp(now))
        mine.pop("resumed", None)
    if d.action == "resume":  # said once; its isolation is over (the same fault again is news)
        mine["resumed"] = _stamp(now)
        mine.pop("done", None)
    if r is not None and r.done:
        mine["done"] = d.action
    if r is not None and r.forgotten:  # its launched successor is gone: the next pass replaces the node anew
        mine.pop("launched", None)
    mine.update(health=h.state, action=d.action, code=d.code, why=d.why)
    if h.state == "ok" and not mine.get("last_fault"):
        state["nodes"].pop(h.node, None)  # nothing to remember of a node that never faulted


def _event(store: SharedStore, cluster: str, d: Decision, r, now: dt.datetime) -> None:
    """One event in the log: the action, the node, the fault code and the evidence (``gpufleet log``)."""
    done = r.done if r is not None else None
    said = r.detail if r is not None else d.why
    outcome = (f"{d.action} {d.node}" + (f" [{d.code}]" if d.code else "") + f": {said}")[:300]
    events.record(store, {"who": team.who(), "host": socket.gethostname(), "command": f"heal {d.action}",
                          "cluster": cluster, "outcome": outcome, "exit_code": 0, "action": d.action, "node": d.node,
                          "pool": d.pool, "code": d.code, "evidence": d.evidence, "why": d.why, "done": done,
                          "refused": bool(r is not None and r.refused),
                          "launched": r.launched if r is not None else None,
                          "market": r.market if r is not None else None}, now=now)


def summary(store: SharedStore | None, cluster: str) -> dict | None:
    """What `status` shows of the last passes: per pool the replacements so far (and a refusal's retry
    time), per node that faulted its health then, last fault and what was done; None when heal never ran."""
    if store is None:
        return None
    state, version = read_state(store, cluster)
    if version is None:
        return None
    pools = state["pools"]
    nodes = {n: {k: v.get(k) for k in ("health", "last_fault", "evidence", "done", "at")}
             for n, v in sorted(state["nodes"].items())}
    return {"replacements": sum(v.get("replaced", 0) for v in pools.values()),
            "pools": {p: {k: v.get(k) for k in ("health", "checked_at", "replaced", "refusals", "retry_at")}
                      for p, v in pools.items()},
            "nodes": nodes}

"""Cloud nodes configure themselves (``clouds/node_agent.py``); this side publishes what they
apply and waits for what they report.

``publish`` puts the Salt tree into the stack's bucket as one archive named by its SHA-256, and
each pool's ``pools/<pool>/current.json``: the formulas (and which to rehearse on a node without
a GPU), the pillar (built by the same code as a rack host's) and the tree's hash; their digest
is the pool's *generation*. ``wait`` lists ``status/`` once per poll (a page holds 1,000
objects), reads only the statuses that changed since the last poll, and ends when every
expected node has reported on its pool's current generation, or at the deadline.

A status speaks for the node its object key names, never for the one its body names: the key is
what the cloud let its writer write (``status/<pool>/<writer>.json``). AWS holds each node to its
own key (``${aws:userid}``, role id:instance id); GCS IAM conditions and Azure ABAC conditions hold
a pool's nodes to the pool's prefix only (neither can name the calling VM), so there a node could
write a status under a neighbour's name in its own pool, never in another pool (the controller's).
A body that disagrees with its key, and facts that are not of their format (host name, address,
counts), are refused before they reach slurm.conf or the registry.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet import netnames
from gpufleet.clouds import cloud, node_agent
from gpufleet.clouds import scheduler as slurm_view
from gpufleet.clouds.node_agent import safe_key
from gpufleet.configure import NODE_STATES, saltrun
from gpufleet.configure import pillar as pillarmod
from gpufleet.configure.slurm import active_expectations, health_expectations
from gpufleet.configure.slurm import has_facts as slurm_ready
from gpufleet.errors import GpufleetError, UntrustedValue
from gpufleet.state import leases
from gpufleet.verify import expect

READERS = 16  # status objects read at once
WAIT_S = 1800  # default: a fresh GPU node takes 10-20 minutes for driver, CUDA and frameworks
POLL_S = 5.0


VERIFY_BUNDLE = "_gpufleet/verify.pyz"  # where the node-side checks sit in the tree (the agent runs them)
WATCH = node_agent.WATCH  # where the node's watch sits in the tree (the agent installs it beside itself)


def watch_module() -> bytes:
    """The node's watch (clouds/node_watch.py), as the tree carries it."""
    return Path(node_agent.__file__).with_name("node_watch.py").read_bytes()


def targets_module() -> bytes:
    """The monitor's lister of scrape targets (clouds/node_targets.py), as the tree carries it."""
    return Path(node_agent.__file__).with_name("node_targets.py").read_bytes()


def tree_archive(root: Path | None = None, extra: dict[str, bytes] | None = None) -> tuple[bytes, str]:
    """The Salt tree as a reproducible .tar.gz (sorted, no owners or times) and its SHA-256, with the
    node's watch, which every node installs from it; ``extra``: more files by their path in the tree
    (the verify bundle)."""
    root = root or saltrun.states_dir()
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for name, body in sorted({WATCH: watch_module(), node_agent.TARGETS: targets_module(), **(extra or {})}.items()):
            parts = name.split("/")[:-1]
            for i in range(len(parts)):
                d = tarfile.TarInfo("/".join(parts[:i + 1]))
                d.type, d.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(d)
            f = tarfile.TarInfo(name)
            f.size, f.mode = len(body), 0o644
            tar.addfile(f, io.BytesIO(body))
        for p in sorted(root.rglob("*")):
            if "__pycache__" in p.parts or not (p.is_file() or p.is_dir()):
                continue
            info = tar.gettarinfo(str(p), arcname=str(p.relative_to(root)))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            info.mode = 0o755 if p.is_dir() else 0o644
            if p.is_file():
                with p.open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    data = buf.getvalue()
    return data, hashlib.sha256(data).hexdigest()


def pool_document(stack, pool, *, cluster: str, cat, tree: str, forced: str | None = None,
                  verify: dict | None = None, scheduler: dict | None = None,
                  usd_per_node_hour: float | None = None, collector: dict | None = None) -> dict:
    """A pool's ``current.json``: what its nodes apply, and its generation (``forced``: a stamp that
    makes a new generation of the same configuration, so every node applies it again; ``verify``:
    the expectations of the quick verification each node runs after applying; ``scheduler``: the
    pool's ``slurm`` pillar, without which a stack's Slurm is left out: its files need every node's
    facts, which the nodes report on applying the rest). Its ``health``: what the node's watch runs by
    (the pool's gate and interval, and the checks' expectations as Slurm's health check has them; how often the
    active checks run and what they add: DCGM's diagnostic, the all-reduce) and what its metrics say the node is
    (``node``: instance type, cloud, GPUs, ``usd_per_node_hour`` from the plan)."""
    gpu, count = pillarmod.gpu_of(pool, cat)
    pil = pillarmod.build(stack, pool, cluster=cluster, gpu=gpu, gpu_count=count, collector=collector)
    states = pil["gpufleet"]["states"]
    if scheduler is None:
        states = [s for s in states if s != "slurm"]
    else:
        pil["slurm"] = pillarmod.merge(scheduler, pil.get("slurm") or {})
    real, rehearse = pillarmod.split_for_host(states, has_gpu=False)
    full = expect.for_pool(stack, pool, cat)
    doc = {"tree": tree, "states": states, "without_gpu": {"apply": real, "rehearse": rehearse}, "pillar": pil,
           "node_states": [s for s in states if s in NODE_STATES],  # all a node from a current image applies
           "health": {"gate": pool.health.gate, "interval": pool.health.interval, "active_every": pool.health.active_every,
                      "expect": health_expectations(full), "active_expect": active_expectations(full),
                      "node": {"instance_type": pool.instance_type, "provider": pool.provider, "gpu_model": gpu,
                               "gpus": count, "usd_per_hour": usd_per_node_hour}}}
    server = pil["monitoring"].get("server") or {}
    if server.get("discovery"):  # the monitor's agent lists the cluster's nodes for Prometheus (clouds/node_targets.py)
        doc["discovery"] = server["discovery"]
    if forced:
        doc["forced"] = forced
    if verify:
        doc["verify"] = verify
    if scheduler and scheduler.get("role") == "controller":  # the agent puts Slurm's answer in its status
        doc["probe"] = slurm_view.PROBE
    doc["generation"] = hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return doc


def slot_key(pool: str, node_id: str) -> str:
    """Where a node's Slurm slot is kept in its pool's bucket: under ``pools/`` (what only `up`, `configure`
    and `heal` write; a node reads it), named by the node's own id as the agent keys its status."""
    return f"pools/{pool}/slots/{node_key(node_id)}.json"


def assign_slots(store, targets: list[NodeTarget]) -> None:
    """Each node's Slurm name, its slot ``<pool>-<idx>`` (configure.slurm.SLOT_STATE), where its agent reads it:
    a node takes the slot kept under its own instance id, which `up` and `heal` read from the cloud, never from a
    node. Written again unchanged costs nothing: a node re-applies only when its slot changes."""
    for t in targets:
        leases.ensure_held()
        store.put(slot_key(t.pool, t.node_id), json.dumps(_slot(t), sort_keys=True).encode())


def _slot(t: NodeTarget, release: bool = False) -> dict:
    """A node's slot document: its id, its Slurm name, and its VM's unique id where its id may come again (an Azure
    scale set made anew numbers its VMs from 0 again: the agent takes no slot made for another VM, node_agent
    slot_said), and heal's word to give it back."""
    return {"node_id": t.node_id, "slurm_name": t.id, **({"vm_uid": t.vm_uid} if t.vm_uid else {}),
            **({"release": True} if release else {})}


def forget_slots(store, pool: str, node_ids: list[str]) -> None:
    """The slots kept for nodes that are gone (removed, replaced): what is kept stays O(pools), and a VM that comes
    later with the same id (an Azure scale set made anew numbers its VMs from 0 again) finds no slot of another's."""
    for node_id in node_ids:
        leases.ensure_held()
        store.remove(slot_key(pool, node_id))


def release_slot(store, target: NodeTarget, on: bool) -> None:
    """`heal`'s word to an idle node of an elastic pool, in its slot (``on``: give yourself back; off: stay): its agent
    reads the slot each run (node_agent.slot_said) and its watch drains it for node_watch.SCALE_DOWN, or resumes it."""
    leases.ensure_held()
    store.put(slot_key(target.pool, target.node_id), json.dumps(_slot(target, on), sort_keys=True).encode())


def publish(store, documents: dict[str, dict], archive: bytes, tree: str) -> None:
    """The tree (once per content) and each pool's document; the nodes' timers pick them up (and run Salt:
    a command that lost the cluster's lease publishes nothing more, checked before each document, since an
    upload of the tree may take a while and another may hold the cluster by then)."""
    leases.ensure_held()
    if not store.exists(f"tree/{tree}.tar.gz"):
        store.put(f"tree/{tree}.tar.gz", archive)
    for pool, doc in documents.items():
        leases.ensure_held()
        store.put(f"pools/{pool}/current.json", json.dumps(doc, sort_keys=True).encode())


@dataclass
class NodeTarget:
    """A cloud node as the reports name it."""

    pool: str
    idx: int
    node_id: str
    address: str | None
    port: int = 22
    vm_uid: str | None = None  # the VM's own unique id where its id may come again (Azure's vmId): in its slot

    @property
    def id(self) -> str:
        return f"{self.pool}-{self.idx}"


@dataclass
class NodeReport:
    """What one cloud node said (or did not say) about applying its pool's generation."""

    target: NodeTarget
    state: str = "pending"  # configured | current | failed | timeout | pending
    changed: int = 0
    failed: list[dict] = field(default_factory=list)  # {"state", "comment"}
    rehearsed: list[str] = field(default_factory=list)
    seconds: float | None = None
    facts: dict | None = None
    log: str | None = None
    error: str | None = None
    hint: str | None = None
    generation: str | None = None
    warnings: list[str] = field(default_factory=list)
    verify: dict | None = None  # the node's verification report (nodecheck's), when it ran one

    @property
    def ok(self) -> bool:
        return self.state in ("configured", "current")

    def to_dict(self) -> dict:
        t = self.target
        return {"host": t.id, "pool": t.pool, "node_id": t.node_id, "address": t.address, "port": t.port,
                "state": self.state, "ok": self.ok, "changed": self.changed, "failed": self.failed,
                "rehearsed": self.rehearsed, "seconds": self.seconds, "facts": self.facts, "log": self.log,
                "error": self.error, "hint": self.hint, "generation": self.generation, "warnings": self.warnings,
                "verify": self.verify}


@dataclass
class WaitStats:
    polls: int = 0
    lists: int = 0  # list requests (pages)
    reads: int = 0  # status objects read
    seconds: float = 0.0


Progress = Callable[[str, int, int, str], None]  # (phase, done, total, message), as for rack hosts
# ([(pool, address, facts, slot)], the munge key the nodes hold already) -> each pool's slurm pillar
Scheduler = Callable[[list[tuple[str, "str | None", dict, str]], "bytes | None"], dict[str, dict]]


def node_key(node_id) -> str:
    """A node id as the clouds compare it, in the form the agent names its status object by
    (``node_agent.safe_key``): ARM ids are case-insensitive, and Azure's List API gives a scale set
    VM's id with its resource group upper-cased (azure-cli#7262) where the VM's metadata service
    says it as created. AWS and GCP ids have no letters whose case differs."""
    return safe_key(str(node_id)).lower()


def status_owner(key: str) -> tuple[str, str] | None:
    """(pool, node key) of the node that wrote the status object ``key``, from the key alone:
    ``status/<pool>/<writer>.json``, whose writer is the node's id (GCP, Azure) or its
    ``aws:userid``, ``<role id>:<instance id>`` (AWS): the node is what follows the last colon.
    None for a key of another shape."""
    parts = key.split("/")
    if len(parts) != 3 or parts[0] != "status" or not parts[2].endswith(".json") or not parts[1]:
        return None
    node = parts[2][:-len(".json")].rpartition(":")[2]
    return (parts[1], node.lower()) if node else None


def vouched(key: str, status: dict) -> tuple[str, str] | None:
    """(pool, node key) a status speaks for: its key's, when its body says the same node and pool;
    None when the key is not a status's or the body claims another node or pool."""
    owner = status_owner(key)
    if owner is None or status.get("pool") != owner[0] or node_key(status.get("node_id")) != owner[1]:
        return None
    return owner


def checked_facts(facts, source: str) -> dict | None:
    """A node's facts, refused (UntrustedValue) unless what reaches slurm.conf and the registry is of
    its format: the short host name (Slurm's NodeName) one RFC 1123 label, the address an IP
    literal, CPUs, GPUs and memory numbers."""
    if facts is None:
        return None
    if not isinstance(facts, dict):
        raise UntrustedValue("facts", facts, "an object", source)
    if facts.get("hostname") is not None:
        netnames.label(facts["hostname"], "host name", source)
    if facts.get("address") is not None:
        netnames.address(facts["address"], "address", source)
    for k, kind in (("cpus", int), ("gpu_count", int), ("mem_gib", (int, float))):
        v = facts.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, kind) or v < 0):
            raise UntrustedValue(k, v, "a number of at least 0", source)
    return facts


def wait(store, targets: list[NodeTarget], generations: dict[str, str], *, timeout_s: float = WAIT_S,
         poll_s: float = POLL_S, progress: Progress | None = None, unchanged: frozenset[str] = frozenset(),
         clock=time.monotonic, sleep=time.sleep, stats: WaitStats | None = None) -> list[NodeReport]:
    """Poll the status prefix until every target reported on its pool's generation or the time is up.

    A status of an older generation (the node has not picked the new one up yet) keeps the node
    pending; a node that never answers is reported ``timeout`` with where to look. In the
    ``unchanged`` pools (the generation the nodes already had), a node that reported ok on it
    is ``current``: it applied nothing this time.
    """
    stats = stats or WaitStats()
    reports = {node_key(t.node_id): NodeReport(t) for t in targets}
    seen: dict[str, str] = {}  # status key -> etag last read
    start = clock()
    done = 0
    while True:
        stats.polls += 1
        for key, status in changed_statuses(store, seen, stats):
            r = _report_of(reports, key, status)
            if r is not None:
                _apply_status(r, status, generations[r.target.pool], r.target.pool in unchanged, key)
        finished = [r for r in reports.values() if r.state != "pending"]
        if progress and len(finished) != done:
            bad = sum(1 for r in finished if not r.ok)
            progress("nodes", len(finished), len(reports),
                     f"{len(finished) - bad} configured, {bad} failed, {len(reports) - len(finished)} pending "
                     f"({clock() - start:.0f}s)")
        done = len(finished)
        if done == len(reports) or clock() - start >= timeout_s:
            break
        leases.ensure_held()  # a command that lost its lease waits no longer
        sleep(poll_s)
    stats.seconds = clock() - start
    for r in reports.values():
        if r.state == "pending" and r.error:  # it was still retrying a failure
            r.state = "failed"
        elif r.state == "pending":
            r.state = "timeout"
            r.error = f"no status on generation {generations[r.target.pool]} after {timeout_s:.0f}s"
            r.hint = ("the node may still be installing, or never ran its bootstrap: see "
                      "/var/log/gpufleet/bootstrap.log and node.log on it, or the cloud's serial console")
    return [reports[node_key(t.node_id)] for t in targets]


def _report_of(reports: dict[str, NodeReport], key: str, status: dict) -> NodeReport | None:
    """The report of the node the status object ``key`` belongs to, when it is one waited for in the
    pool the key names and the body agrees with its key; a body that claims another node or pool is
    ignored, said as a warning on the node whose key it is."""
    owner = status_owner(key)
    r = reports.get(owner[1]) if owner else None
    if r is None or r.target.pool != owner[0]:
        return None
    if vouched(key, status) is None:
        claim = f"node {status.get('node_id')!r} of pool {status.get('pool')!r}"
        warning = f"{key} claims to be {claim}: ignored (a status speaks for the node its key names)"
        if warning not in r.warnings:
            r.warnings.append(warning)
        return None
    return r


def changed_statuses(store, seen: dict[str, str], stats: WaitStats | None = None) -> list[tuple[str, dict]]:
    """(key, body) of the statuses that changed since the last poll (``seen``: key -> etag read): one
    listing of the prefix, then only those objects, read in parallel (a poll after many nodes
    finished reads many)."""
    listing, pages = store.list("status/")
    changed = [(key, etag) for key, etag in listing if seen.get(key) != etag]
    if stats is not None:
        stats.lists += pages
        stats.reads += len(changed)
    with ThreadPoolExecutor(max_workers=READERS) as ex:
        bodies = list(ex.map(read_status, [store] * len(changed), [k for k, _ in changed]))
    for key, etag in changed:
        seen[key] = etag
    return [(key, b) for (key, _), b in zip(changed, bodies) if b is not None]


def read_status(store, key: str) -> dict | None:
    try:
        body = json.loads(store.get(key))
    except ValueError:
        return None  # not one of ours (or cut short): read again only if it changes
    return body if isinstance(body, dict) else None


def _apply_status(r: NodeReport, status: dict, generation: str, unchanged: bool, key: str) -> None:
    if "ok" not in status:
        return  # the node's watch alone has spoken (clouds/node_watch.py): its configuration is still under way
    if status.get("generation") not in (generation, None):
        return  # an older generation's report: still pending on this one
    r.generation = status.get("generation")
    r.error = r.hint = None  # a newer status replaces what an earlier attempt said
    try:
        r.facts = checked_facts(status.get("facts"), key)
    except UntrustedValue as e:  # nothing of it reaches slurm.conf or the registry
        r.facts, r.state, r.error, r.hint = None, "failed", e.message, e.hint
        return
    r.changed = 0 if unchanged else int(status.get("changed") or 0)
    r.failed = list(status.get("failed") or [])
    r.rehearsed = list(status.get("rehearsed") or [])
    r.seconds, r.log = status.get("seconds"), status.get("log")
    r.verify = status.get("verify")
    if status.get("ok") and r.generation == generation:
        r.state = "current" if unchanged else "configured"
    elif not status.get("ok"):
        first = r.failed[0] if r.failed else {"state": "?", "comment": "no reason given"}
        r.error = f"{first['state']}: {first['comment']}" + (f" (and {len(r.failed) - 1} more)" if len(r.failed) > 1
                                                              else "")
        r.hint = f"see {r.log or '/var/log/gpufleet/node.log'} on the node; fix, then `gpufleet configure`"
        if status.get("reboot_pending"):  # applied; the run after the reboot finishes
            r.error = "rebooting to load the NVIDIA driver (nouveau was bound)"
            return
        if status.get("retrying"):  # the node's timer tries again within a minute: not final yet
            r.error = f"attempt {status.get('attempt')} of {status.get('attempts')} failed: {r.error}"
            return
        r.state = "failed"


def record(registry, cluster: str, reports: list[NodeReport]) -> None:
    """Each node's outcome in the registry, as for rack hosts (``host_status``), all in one write."""
    registry.set_hosts(cluster, {
        (r.target.pool, r.target.idx): {"address": r.target.address or r.target.node_id, "state": r.state,
                                        "digest": r.generation, "facts": r.facts,
                                        "detail": r.error or json.dumps({"changed": r.changed,
                                                                         "rehearsed": len(r.rehearsed)})}
        for r in reports if r.state != "current"})


def configure_pools(stack, cat, cluster: str, outputs: dict, nodes: list, *, registry=None,
                    timeout_s: float = WAIT_S, poll_s: float = POLL_S, progress: Progress | None = None,
                    stores: dict | None = None, stats: WaitStats | None = None, force: bool = False,
                    verify: dict[str, dict] | None = None, extra: dict[str, bytes] | None = None,
                    scheduler: Scheduler | None = None, collector: dict | None = None) -> list[NodeReport]:
    """Publish each cloud pool's configuration to its stack bucket and wait for its nodes.

    ``outputs``: the Pulumi program's (``pools.<pool>.bucket`` names each pool's bucket);
    ``nodes``: the registry's rows for them. ``stores``: bucket name -> an ``ObjectStore`` to use
    instead of the cloud's own (tests). Each bucket is waited for in its own thread. ``verify``:
    per pool, the expectations of the quick verification its nodes run after applying (the
    bundle that runs it comes in ``extra``, at ``VERIFY_BUNDLE``).

    ``scheduler`` (a stack with Slurm): each pool's ``slurm`` pillar from its nodes' facts. Slurm's
    files list every node as it is (host name, CPUs, memory, GPUs), which only the nodes can say:
    unless every node's status already says it (an earlier run), a first round applies all but
    Slurm, and a second, with the files rendered from its facts, applies Slurm (and verifies).
    """
    pools = {p.name: p for p in stack.pools}
    archive, tree = tree_archive(extra=extra)
    buckets = pool_buckets(outputs, pools)
    opened = {b: (stores or {}).get(b) or cloud(ref["cloud"]).objects(ref) for b, (ref, _) in buckets.items()}
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) if force else None
    targets = [NodeTarget(n.pool, n.idx, n.node_id, n.private_ip, vm_uid=getattr(n, "vm_uid", None)) for n in nodes
               if n.pool in pools and n.node_id]

    def round_of(document, wanted: list[NodeTarget]) -> list[NodeReport]:
        def one(bucket: str) -> list[NodeReport]:
            store, names = opened[bucket], buckets[bucket][1]
            docs = {n: document(n) for n in names}
            before = {n: json.loads(store.get(f"pools/{n}/current.json")).get("generation")
                      for n in names if store.exists(f"pools/{n}/current.json")}
            publish(store, docs, archive, tree)
            unchanged = frozenset(n for n in names if before.get(n) == docs[n]["generation"])
            return wait(store, [t for t in wanted if t.pool in docs], {n: d["generation"] for n, d in docs.items()},
                        timeout_s=timeout_s, poll_s=poll_s, progress=progress, unchanged=unchanged, stats=stats)

        with ThreadPoolExecutor(max_workers=max(1, len(buckets))) as ex:
            return [r for part in ex.map(one, list(buckets)) for r in part]

    prices = {n.pool: n.usd_per_hour for n in nodes if getattr(n, "usd_per_hour", None) is not None}  # the plan's

    def document(name: str, scheduler_pillars: dict | None = None, checks: bool = True) -> dict:
        return pool_document(stack, pools[name], cluster=cluster, cat=cat, tree=tree, forced=stamp,
                             verify=(verify or {}).get(name) if checks else None,
                             scheduler=(scheduler_pillars or {}).get(name), usd_per_node_hour=prices.get(name),
                             collector=collector)

    if not buckets:
        return []
    if scheduler is None:
        reports = round_of(document, targets)
    else:
        first: list[NodeReport] = []
        published = _published_key(opened, buckets)  # read before a first round replaces the documents
        facts = _known_facts(opened.values(), targets)
        if len(facts) < len(targets):
            first = round_of(lambda n: document(n, checks=False), targets)
            facts = {node_key(r.target.node_id): r.facts for r in first if r.ok and slurm_ready(r.facts)}
        ready, clashes = slurm_members(stack, [t for t in targets if node_key(t.node_id) in facts], facts)
        try:
            pillars = scheduler([(t.pool, _address(t), facts[node_key(t.node_id)], t.id) for t in ready], published)
        except GpufleetError:  # no controller: what the first round did is all there is to record
            if registry is not None:
                record(registry, cluster, first)
            raise
        compute = {p.name for p in stack.pools if p.role == "compute"}
        for bucket, (_, names) in buckets.items():  # each node's slot before the documents that start its slurmd
            assign_slots(opened[bucket], [t for t in ready if t.pool in names and t.pool in compute])
        second = {node_key(r.target.node_id): r for r in round_of(lambda n: document(n, pillars), ready)}
        by_node = {node_key(r.target.node_id): r for r in first}
        reports = [second.get(node_key(t.node_id)) or by_node.get(node_key(t.node_id)) or NodeReport(t)
                   for t in targets]
        for r in reports:
            if node_key(r.target.node_id) in clashes:
                r.state, r.error = "failed", clashes[node_key(r.target.node_id)]
                r.hint = "give each node a host name of its own (its image's or cloud-init's), then `gpufleet configure`"
    if registry is not None:
        record(registry, cluster, reports)
    return reports


def slurm_members(stack, ready: list[NodeTarget], facts: dict[str, dict]) -> tuple[list[NodeTarget], dict[str, str]]:
    """(the nodes Slurm may list, node key -> why one is left out): each at the address the cloud recorded
    for it (a node without one is left out: what its status says is no node's word for its address),
    each host name one node's. slurmctld
    keeps the first NodeName line of a name and ignores the others ("reconfiguration for node %s,
    ignoring!"), so a name two nodes' statuses claim would hand one node's jobs to the other: it is
    nobody's, but the controller's (a compute node cannot take the controller's name). Host names
    compare as DNS does, without case."""
    controllers = {p.name for p in stack.pools if p.role == "controller"}
    claims: dict[str, list[NodeTarget]] = {}
    for t in ready:
        claims.setdefault(facts[node_key(t.node_id)]["hostname"].lower(), []).append(t)
    out = {node_key(t.node_id): f"{t.id}: the cloud recorded no address for it: left out of slurm.conf"
           for t in ready if not t.address}
    for name, who in claims.items():
        if len(who) > 1:
            keep = [t for t in who if t.pool in controllers][:1]
            for t in who:
                if t not in keep:
                    others = ", ".join(o.id for o in who if o is not t)
                    out[node_key(t.node_id)] = (f"{t.id}: its status says host name {name!r}, which {others} say(s) "
                                                "too: left out of slurm.conf (a Slurm node name is one node's)")
    return [t for t in ready if node_key(t.node_id) not in out], out


def _address(t: NodeTarget) -> str | None:
    """The address the registry recorded for a node (the team's store may hold it), checked."""
    return netnames.address(t.address, "address", f"the registry's record of {t.id}") if t.address else None


def _published_key(opened: dict, buckets: dict) -> bytes | None:
    """The munge key the pools' documents carry already (whoever ran `up` before): the nodes' key."""
    for bucket, (_, names) in buckets.items():
        for n in names:
            if opened[bucket].exists(f"pools/{n}/current.json"):
                doc = json.loads(opened[bucket].get(f"pools/{n}/current.json"))
                key = ((doc.get("pillar") or {}).get("slurm") or {}).get("munge_key")
                if key:
                    return bytes.fromhex(key)
    return None


def _known_facts(stores, targets: list[NodeTarget]) -> dict[str, dict]:
    """node key -> the facts its last status gave, for the targets whose status says all Slurm needs."""
    wanted = {(t.pool, node_key(t.node_id)) for t in targets}
    out = {}
    for store in stores:
        for key, status in changed_statuses(store, {}):
            owner = vouched(key, status)
            if owner not in wanted:
                continue
            try:
                facts = checked_facts(status.get("facts"), key)
            except UntrustedValue:
                continue  # not known: the first round reads it again, and says why it is refused
            if slurm_ready(facts):
                out[owner[1]] = facts
    return out


def pool_buckets(outputs: dict, pools) -> dict[str, tuple[dict, list[str]]]:
    """bucket name -> (its reference, the pools it serves), from the program's outputs."""
    buckets: dict[str, tuple[dict, list[str]]] = {}
    for name, exp in (outputs.get("pools") or {}).items():
        if exp.get("bucket") and name in pools:
            buckets.setdefault(exp["bucket"]["name"], (exp["bucket"], []))[1].append(name)
    return buckets


def scheduler_view(store, pool: str, controller: str) -> dict | None:
    """Slurm's view as the controller's agent last put it in its status (``pool``: the controller's);
    None when no status has it yet."""
    listing, _ = store.list(f"status/{pool}/")
    for key, _ in listing:
        status = read_status(store, key) or {}
        said = status.get("scheduler") if vouched(key, status) else None
        if said and said["out"].startswith("error: "):
            return {"controller": controller, "error": said["out"][len("error: "):], "as_of": said.get("at")}
        if said:
            return {**slurm_view.parse(controller, said["out"]), "as_of": said.get("at")}
    return None


def verify_pools(outputs: dict, nodes: list, expectations: dict[str, dict], *, level: str, timeout_s: float = WAIT_S,
                 poll_s: float = POLL_S, progress: Progress | None = None, stores: dict | None = None,
                 clock=time.monotonic, sleep=time.sleep) -> list[tuple[NodeTarget, dict | None]]:
    """Ask each pool's nodes to run their checks (``pools/<pool>/verify.json``: a request id, the
    level, the expectations) and collect each node's report from its status (None: no answer by
    the deadline). The bundle they run is the one in their current tree."""
    request = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{level}"
    buckets = pool_buckets(outputs, expectations)
    answers: dict[str, dict] = {}
    targets = [NodeTarget(n.pool, n.idx, n.node_id, n.private_ip) for n in nodes if n.node_id]
    for bucket, (ref, names) in buckets.items():
        store = (stores or {}).get(bucket) or cloud(ref["cloud"]).objects(ref)
        for n in names:
            store.put(f"pools/{n}/verify.json", json.dumps({"request": request, "level": level,
                                                             "expect": expectations[n]}).encode())
        mine = [t for t in targets if t.pool in names]
        start, seen = clock(), {}
        while True:
            for key, status in changed_statuses(store, seen):
                got = status.get("verify") or {}
                owner = vouched(key, status)
                if owner is not None and got.get("request") == request:
                    answers[owner] = got
            if progress:
                progress("verify", sum((t.pool, node_key(t.node_id)) in answers for t in mine), len(mine),
                         f"{clock() - start:.0f}s")
            if all((t.pool, node_key(t.node_id)) in answers for t in mine) or clock() - start >= timeout_s:
                break
            sleep(poll_s)
    return [(t, answers.get((t.pool, node_key(t.node_id)))) for t in targets]

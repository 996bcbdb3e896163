"""Configure a cluster's hosts: verify and reach them, gather facts, check, apply Salt, record.

Each host goes its own way: one that cannot be reached, whose host key changed, or whose
states fail is reported with its reason while the others complete. Each host's outcome is
written to the registry on its own (one transaction per host), so a rerun skips the hosts
already configured with the same pillar, formulas and state tree, and picks up the rest.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.baremetal import facts as factsmod
from gpufleet.baremetal import ssh
from gpufleet.configure import pillar as pillarmod
from gpufleet.configure import software
from gpufleet.errors import GpufleetError, InputError


@dataclass
class HostTarget:
    pool: str
    idx: int
    address: str
    port: int
    user: str
    key: str | None
    site: str
    known_hosts: Path
    provider: str = "baremetal"

    @property
    def id(self) -> str:
        return f"{self.pool}-{self.idx}"

    @property
    def ssh(self) -> ssh.Target:
        return ssh.Target(self.address, self.port, self.user, self.key)

    def roster_host(self, pillar: dict):
        from gpufleet.configure.saltrun import RosterHost

        return RosterHost(self.id, self.address, self.port, self.user, self.key, str(self.known_hosts), pillar)


@dataclass
class HostReport:
    target: HostTarget
    state: str = "pending"  # configured | failed | unreachable | host-key | auth | skipped | drained
    facts: factsmod.Facts | None = None
    runs: list = field(default_factory=list)  # saltrun.StateRun
    error: str | None = None
    hint: str | None = None
    warnings: list[str] = field(default_factory=list)
    digest: str | None = None

    @property
    def ok(self) -> bool:
        return self.state in ("configured", "skipped", "drained")

    @property
    def changed(self) -> int:
        return sum(len(r.changed) for r in self.runs if not r.test)

    @property
    def rehearsed(self) -> int:
        return sum(r.states for r in self.runs if r.test)

    def to_dict(self) -> dict:
        t = self.target
        return {"host": t.id, "pool": t.pool, "address": t.address, "port": t.port, "state": self.state, "ok": self.ok,
                "changed": self.changed, "error": self.error, "hint": self.hint, "warnings": self.warnings,
                "facts": self.facts.to_dict() if self.facts else None, "runs": [r.to_dict() for r in self.runs]}


class PartialFailure(GpufleetError):
    """Some hosts failed; the others completed. Exit code 3; a rerun retries the failed ones."""

    exit_code = 3

    def __init__(self, reports: list[HostReport], action: str = "configured"):
        bad = [r for r in reports if not r.ok]
        hints = list(dict.fromkeys(r.hint for r in bad if r.hint))
        listed = "; ".join(f"{r.target.id} ({r.state})" for r in bad[:10])
        more = f"; and {len(bad) - 10} more" if len(bad) > 10 else ""
        super().__init__(f"{len(bad)} of {len(reports)} host(s) not {action}: {listed}{more}",
                         "; ".join(hints[:3] + ["then run the same command again: hosts already done are skipped"]))
        self.reports = reports

    def to_dict(self) -> dict:
        return {**super().to_dict(), "hosts": [r.to_dict() for r in self.reports]}


def rack_targets(stack) -> list[HostTarget]:
    """The bare-metal hosts of a stack, each with its site's known_hosts file."""
    out = []
    for pool in stack.pools:
        if pool.provider != "baremetal":
            continue
        kh = Path(pool.known_hosts).expanduser() if pool.known_hosts else ssh.known_hosts_path(pool.site)
        if pool.known_hosts and not kh.is_absolute() and stack.source:
            kh = Path(stack.source).parent / kh
        for i, h in enumerate(pool.hosts):
            key = h.key
            if key and not Path(key).expanduser().is_absolute() and stack.source:
                key = str(Path(stack.source).parent / key)
            out.append(HostTarget(pool.name, i, h.address, h.port, h.user, key, pool.site, kh))
    return out


Progress = Callable[[str, int, int, str], None]  # (phase, done, total, message)


def _on_each_host(targets: list[HostTarget], work, *, phase: str, trust_new: bool, workers: int,
                  progress: Progress | None) -> list[ssh.HostOutcome]:
    """Connect to every host in parallel (verifying its key against its site's file) and run
    ``work(session)`` there; one outcome per target, in order."""
    stores: dict[Path, ssh.KnownHosts] = {}
    for t in targets:
        stores.setdefault(t.known_hosts, ssh.KnownHosts(t.known_hosts, trust_new))
    done = [0]

    def one(t: HostTarget):
        with ssh.connect(t.ssh, stores[t.known_hosts]) as s:
            return work(s)

    def finished(o: ssh.HostOutcome) -> None:
        done[0] += 1
        if progress:
            progress(phase, done[0], len(targets), o.host)

    return ssh.fan_out(targets, one, name=lambda t: t.id, workers=workers, on_done=finished)


def gather(targets: list[HostTarget], *, trust_new: bool = False, workers: int = 32,
           progress: Progress | None = None) -> dict[str, HostReport]:
    """Connect to every host (verifying its key) and gather its facts, in parallel."""
    reports = {t.id: HostReport(t) for t in targets}
    outcomes = _on_each_host(targets, factsmod.gather, phase="facts", trust_new=trust_new, workers=workers,
                             progress=progress)
    for t, o in zip(targets, outcomes):
        r = reports[t.id]
        if o.ok:
            r.facts = o.value
        else:
            r.state = {"unreachable": "unreachable", "host-key-unknown": "host-key", "host-key-changed": "host-key",
                       "auth": "auth"}.get(o.error.kind, "failed")
            r.error, r.hint = o.error.message, o.error.hint
    return reports


def check_hosts(stack, reports: dict[str, HostReport]) -> None:
    """Driver/CUDA/OS against each reachable host's facts; any incompatibility stops everything (exit 2)."""
    sw = stack.software
    pools = {p.name: p for p in stack.pools}
    problems = []
    for r in reports.values():
        if r.facts is None:
            continue
        pool = pools[r.target.pool]
        f = r.facts
        gpu_names = {g["name"] for g in f.gpus}
        if pool.gpu and not f.gpus:
            r.warnings.append(f"the pool says {pool.gpus_per_node}x {pool.gpu}, the host shows no NVIDIA GPU: "
                              "GPU states are rehearsed (test=True), not installed")
        elif pool.gpus_per_node and len(f.gpus) != pool.gpus_per_node:
            r.warnings.append(f"the pool says {pool.gpus_per_node} GPU(s), the host has {len(f.gpus)} ({', '.join(gpu_names)})")
        states = pillarmod.formulas(stack, pool)
        if not any(s in states for s in ("nvidia_driver", "cuda", "nccl")):
            continue
        for prob in software.check(driver=sw.driver, cuda=sw.cuda, osfinger=f.osfinger, gpu=pool.gpu,
                                   open_modules=sw.open_kernel_modules):
            if prob.warning:
                r.warnings.append(prob.message)
            elif (prob.key, prob.message) not in {(k, m) for _, k, m, _ in problems}:
                problems.append((r.target.id, prob.key, prob.message, prob.hint))
        if ("lustre_client" in states and f.os_family == "Debian" and pool.provider == "baremetal"
                and not (pool.salt.pillar.get("lustre_client") or {}).get("repo")):
            problems.append((r.target.id, "pools.salt.pillar.lustre_client.repo",
                             f"no public Lustre client repository for {f.osfinger}",
                             "Whamcloud publishes Ubuntu clients without an apt index: set lustre_client: {repo: "
                             "'<your mirror> <suite> main'} in the pool's salt pillar"))
    if problems:
        lines = [f"{host}: {key}: {msg}" + (f" ({hint})" if hint else "") for host, key, msg, hint in problems]
        raise InputError("the stack's software does not fit these hosts (nothing was changed):\n  " + "\n  ".join(lines),
                         "change the stack's software block, or the hosts' OS")


def configure(stack, cluster: str, targets: list[HostTarget], *, registry=None, trust_new: bool = False,
              force: bool = False, workers: int = 32, progress: Progress | None = None,
              runner_factory=None, gathered: dict[str, HostReport] | None = None) -> list[HostReport]:
    """Gather facts (unless ``gathered`` and checked already), check, apply the formulas (GPU ones
    rehearsed on GPU-less hosts), record each host."""
    from gpufleet.configure import saltrun

    if gathered is None:
        reports = gather(targets, trust_new=trust_new, workers=workers, progress=progress)
        check_hosts(stack, reports)
    else:
        reports = gathered
    pools = {p.name: p for p in stack.pools}
    tree = saltrun.tree_hash()
    known = registry.hosts(cluster) if registry else {}
    plan: dict[str, tuple[list[str], list[str], dict]] = {}
    for r in reports.values():
        if r.facts is None:
            continue
        t, pool = r.target, pools[r.target.pool]
        has_gpu = bool(r.facts.gpus)
        sm_host = pool.subnet_manager == "host" and t.idx == 0
        pil = pillarmod.build(stack, pool, cluster=cluster, gpu=pool.gpu, has_gpu=has_gpu,
                              nvswitches=r.facts.nvswitches, subnet_manager_host=sm_host)
        states = pil["gpufleet"]["states"]
        real, rehearse = pillarmod.split_for_host(states, has_gpu)
        r.digest = pillarmod.digest(pil, real + rehearse, tree, r.facts.identity)
        prev = known.get((t.pool, t.idx))
        if not force and prev and prev["state"] == "configured" and prev["digest"] == r.digest:
            r.state = "skipped"
            continue
        plan[t.id] = (real, rehearse, pil)
    if plan:
        roster = [reports[i].target.roster_host(p) for i, (_, _, p) in plan.items()]
        runner = (runner_factory or saltrun.SaltSsh)(cluster, roster)
        groups: dict[tuple[tuple[str, ...], bool], list[str]] = {}
        for hid, (real, rehearse, _) in plan.items():
            groups.setdefault((tuple(real), False), []).append(hid)
            if rehearse:
                groups.setdefault((tuple(rehearse), True), []).append(hid)
        runs_total = sum(len(g) for g in groups.values())
        runs_done = [0]

        def host_done(run) -> None:
            runs_done[0] += 1
            if progress:
                what = "rehearsed" if run.test else ("failed" if not run.ok else f"{len(run.changed)} changed")
                progress("salt", runs_done[0], runs_total, f"{run.host} {what}")

        if progress:
            progress("salt", 0, runs_total, f"applying states on {len(plan)} host(s)")
        # salt-ssh runs a group's hosts in parallel; groups of one phase hold different hosts and run at
        # once, the rehearsal (test=True) phase after the real one: two salt-ssh runs on one host at the
        # same time would unpack Salt's thin bundle over each other
        for test_phase in (False, True):
            phase = {k: v for k, v in groups.items() if k[1] == test_phase}
            if not phase:
                continue
            with ThreadPoolExecutor(max_workers=len(phase)) as ex:
                futures = [ex.submit(runner.apply, ids, list(states), test=test, on_host=host_done)
                           for (states, test), ids in phase.items()]
                for fut in futures:
                    for hid, run in fut.result().items():
                        reports[hid].runs.append(run)
        for hid in plan:
            r = reports[hid]
            bad = [x for x in r.runs if not x.ok]
            r.state = "failed" if bad else "configured"
            if bad:
                r.error = "; ".join(x.problem for x in bad)
                r.hint = "fix the failed states (or the host) shown above"
    if registry:
        for r in reports.values():
            if r.state == "skipped":
                continue
            t = r.target
            detail = r.error or json.dumps({"changed": r.changed, "rehearsed": r.rehearsed})
            registry.set_host(cluster, t.pool, t.idx, address=t.address, state=r.state, digest=r.digest,
                              facts=r.facts.to_dict() if r.facts else None, detail=detail)
    return [reports[t.id] for t in targets]


DRAIN_SCRIPT = r"""
set -e
mkdir -p /etc/gpufleet
printf 'cluster=%s\ndrained_at=%s\n' {cluster} "$(date -u +%Y-%m-%dT%H:%M:%SZ)" > /etc/gpufleet/drained
if command -v scontrol >/dev/null 2>&1; then
  scontrol update nodename="$(hostname -s)" state=drain reason="gpufleet down {cluster}" || true
fi
echo drained
"""


def drain(cluster: str, targets: list[HostTarget], *, clean_states: dict[str, list[str]] | None = None,
          trust_new: bool = False, workers: int = 32, progress: Progress | None = None,
          runner_factory=None, pillars: dict[str, dict] | None = None) -> list[HostReport]:
    """Take hosts out of service: mark them drained (and drain them in Slurm when it runs there).

    With ``clean_states`` (host id -> formulas) each formula's ``clean`` state runs afterwards,
    undoing what gpufleet installed. Nothing here erases data or reinstalls a machine.
    """
    import shlex

    script = DRAIN_SCRIPT.replace("{cluster}", shlex.quote(cluster))
    outcomes = _on_each_host(targets, lambda s: s.run(script, check=True, sudo=True).stdout.strip(), phase="drain",
                             trust_new=trust_new, workers=workers, progress=progress)
    reports = []
    for t, o in zip(targets, outcomes):
        r = HostReport(t, state="drained" if o.ok else ("host-key" if o.error.kind.startswith("host-key") else
                                                        "unreachable" if o.error.kind == "unreachable" else "failed"))
        if not o.ok:
            r.error, r.hint = o.error.message, o.error.hint
        reports.append(r)
    if clean_states:
        from gpufleet.configure import saltrun

        ok = [r for r in reports if r.ok and clean_states.get(r.target.id)]
        if ok:
            roster = [r.target.roster_host((pillars or {}).get(r.target.id, {})) for r in ok]
            runner = (runner_factory or saltrun.SaltSsh)(cluster, roster)
            groups: dict[tuple[str, ...], list[str]] = {}
            for r in ok:
                groups.setdefault(tuple(clean_states[r.target.id]), []).append(r.target.id)
            by_id = {r.target.id: r for r in ok}
            for states, ids in groups.items():
                for hid, run in runner.clean(ids, list(states)).items():
                    by_id[hid].runs.append(run)
                    if not run.ok:
                        by_id[hid].state = "failed"
                        by_id[hid].error = run.problem
    return reports


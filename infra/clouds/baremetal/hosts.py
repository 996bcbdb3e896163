"""A rack's hosts: who they are, reaching every one in parallel, their facts, draining them.

Each host goes its own way: one that cannot be reached or whose host key changed is reported
with its reason while the others complete. The Salt configuration of the hosts builds on this
(``gpufleet.nodes.racks.salt``); so does the Pulumi dynamic resource of a mixed stack (``rack``).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.clouds import scheduler
from gpufleet.clouds.baremetal import facts as factsmod
from gpufleet.clouds.baremetal import ssh
from gpufleet.paths import known_hosts_path


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


def rack_targets(stack) -> list[HostTarget]:
    """The bare-metal hosts of a stack, each with its site's known_hosts file."""
    out = []
    for pool in stack.pools:
        if pool.provider != "baremetal":
            continue
        kh = Path(pool.known_hosts).expanduser() if pool.known_hosts else known_hosts_path(pool.site)
        if pool.known_hosts and not kh.is_absolute() and stack.source:
            kh = Path(stack.source).parent / kh
        for i, h in enumerate(pool.hosts):
            key = h.key
            if key and not Path(key).expanduser().is_absolute() and stack.source:
                key = str(Path(stack.source).parent / key)
            out.append(HostTarget(pool.name, i, h.address, h.port, h.user, key, pool.site, kh))
    return out


Progress = Callable[[str, int, int, str], None]  # (phase, done, total, message)


def on_each_host(targets: list[HostTarget], work, *, phase: str, trust_new: bool, workers: int,
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
    outcomes = on_each_host(targets, factsmod.gather, phase="facts", trust_new=trust_new, workers=workers,
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


def scheduler_view(target: HostTarget, *, trust_new: bool = False) -> dict:
    """What Slurm's controller on ``target`` says (``clouds.scheduler``); ``error`` when it could not be asked."""
    (outcome,) = on_each_host([target], lambda s: s.run(scheduler.PROBE, timeout=30), phase="scheduler",
                              trust_new=trust_new, workers=1, progress=None)
    if not outcome.ok:
        return {"controller": target.id, "error": outcome.error.message}
    answer = outcome.value
    if answer.rc != 0:
        return {"controller": target.id, "error": f"sinfo/squeue failed: {(answer.stderr or answer.stdout).strip()[-200:]}"}
    return scheduler.parse(target.id, answer.stdout)


def slurm_states(targets: list[HostTarget], *, trust_new: bool = False, workers: int = 32) -> list:
    """Each host's own node as Slurm says it (``scheduler.OWN_PROBE``): per target, (state, reason),
    None when Slurm does not know the host, or the error (a str) when it could not be asked."""
    outcomes = on_each_host(targets, lambda s: s.run(scheduler.OWN_PROBE, timeout=30), phase="health",
                            trust_new=trust_new, workers=workers, progress=None)
    out: list = []
    for o in outcomes:
        if not o.ok:
            out.append(o.error.message)
        elif o.value.rc != 0:
            out.append(f"sinfo failed: {(o.value.stderr or o.value.stdout).strip()[-200:]}")
        else:
            out.append(scheduler.own_state(o.value.stdout))
    return out


def drain_in_slurm(target: HostTarget, reason: str, *, trust_new: bool = False) -> str | None:
    """Drain the host's own Slurm node with ``reason`` (gpufleet's words and a checked fault code);
    None when done, else why not."""
    command = f"scontrol update nodename=\"$(hostname -s)\" state=drain reason={shlex.quote(reason)}"
    (o,) = on_each_host([target], lambda s: s.run(command, timeout=30, sudo=True), phase="drain",
                        trust_new=trust_new, workers=1, progress=None)
    if not o.ok:
        return o.error.message
    return None if o.value.rc == 0 else f"scontrol failed: {(o.value.stderr or o.value.stdout).strip()[-200:]}"


DRAIN_SCRIPT = r"""
set -e
mkdir -p /etc/gpufleet
printf 'cluster=%s\ndrained_at=%s\n' {cluster} "$(date -u +%Y-%m-%dT%H:%M:%SZ)" > /etc/gpufleet/drained
if command -v scontrol >/dev/null 2>&1; then
  scontrol update nodename="$(hostname -s)" state=drain reason="gpufleet down {cluster}" || true
fi
echo drained
"""


def mark_drained(cluster: str, targets: list[HostTarget], *, trust_new: bool = False, workers: int = 32,
                 progress: Progress | None = None) -> list[HostReport]:
    """Take hosts out of service: mark them drained (and drain them in Slurm when it runs there).
    Nothing here erases data or reinstalls a machine."""
    script = DRAIN_SCRIPT.replace("{cluster}", shlex.quote(cluster))
    outcomes = on_each_host(targets, lambda s: s.run(script, check=True, sudo=True).stdout.strip(), phase="drain",
                            trust_new=trust_new, workers=workers, progress=progress)
    reports = []
    for t, o in zip(targets, outcomes):
        r = HostReport(t, state="drained" if o.ok else ("host-key" if o.error.kind.startswith("host-key") else
                                                        "unreachable" if o.error.kind == "unreachable" else "failed"))
        if not o.ok:
            r.error, r.hint = o.error.message, o.error.hint
        reports.append(r)
    return reports

"""`gpufleet dashboard export` and `gpufleet dashboard CLUSTER`: gpufleet's Grafana dashboards written out for a
team's own Grafana, and a tunnel to the cluster's own Grafana (or Prometheus) on its monitor host.

The tunnel goes the way `gpufleet ssh` goes (``fleet.ssh``: AWS Session Manager, GCP IAP, Azure Bastion, a
bastion pool, or directly): ``ssh -N -L 127.0.0.1:<free port>:<monitor address>:<port> <monitor host>``.
Prometheus listens on the monitor's cluster-side address only (the formula's ``listen_address``), Grafana on the
monitor's loopback only, so the far end of the forward is that address as seen from the monitor itself, never a
port open outside.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from gpufleet import netnames, stacks
from gpufleet.errors import EXIT_FAILED, GpufleetError, InputError
from gpufleet.fleet import ssh, team
from gpufleet.monitoring import ports, provisioning
from gpufleet.monitoring.ports import LOCAL
from gpufleet.state.recorded import recorded
from gpufleet.state.registry import Registry

OPEN_TIMEOUT_S = 30  # ssh's connection (a cloud route starts a session first), then the forward's port listening
PROBE_TIMEOUT_S = 5  # status's GET /-/ready through the tunnel
READY_PATH = "/-/ready"  # Prometheus's readiness endpoint (prometheus.io/docs/prometheus/latest/management_api)


# --- export ---------------------------------------------------------------------------------------------

def export(out: Path, *, stack_file: str | Path | None = None, cat=None,
           prometheus_url: str | None = None) -> list[Path]:
    """The Grafana files for a team's own Grafana, as the tree Grafana reads under ``out`` (``out/etc/grafana/...``,
    ``out/var/lib/grafana/dashboards/gpufleet/*.json``); with a stack, under its own names (folder, files, data
    source, uids: provisioning.scope), so several clusters' exports share one Grafana. ``prometheus_url``: the data
    source's (default: Prometheus's port on this machine, where
    `gpufleet dashboard CLUSTER --prometheus --port 9090` forwards it). Nothing is written before every file is
    made (a bad stack or URL: exit 2, nothing created)."""
    stack = stacks.load(stack_file, cat).name if stack_file is not None else None
    files = provisioning.grafana_files(prometheus_url or ports.local_url("prometheus").rstrip("/"), stack)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} is a file, not a folder", "name a folder (it is made when missing)")
    written = []
    for path, text in files.items():
        target = out / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        written.append(target)
    return written


# --- the monitor host and the tunnel ---------------------------------------------------------------------

@dataclass
class Monitor:
    """Where a cluster's Prometheus (and Grafana, when the stack asks for it) runs, and how ssh reaches it."""

    cfg: ssh.SshConfig
    entry: ssh.Entry  # the monitor host as a Host of the cluster's ssh config
    address: str  # its cluster-side address, which Prometheus and Grafana listen on
    grafana: bool

    def to_dict(self) -> dict:
        return {"host": self.entry.alias, "address": self.address, "route": self.entry.route.route,
                "grafana": self.grafana}


class NoMonitor(InputError):
    """The cluster's stack runs no Prometheus (no ``monitoring: {prometheus: true}``). Exit code 2."""

    def __init__(self, cluster: str):
        super().__init__(f"cluster {cluster} has no monitor host: its stack runs no Prometheus",
                         "add `monitoring: {prometheus: true}` to the stack (and `grafana: true` for dashboards), "
                         "then `gpufleet up` it again")


def monitor(name: str, *, registry: Registry | None = None, cat=None,
            stack_file: str | Path | None = None) -> Monitor:
    reg = registry or team.registry()
    cfg = ssh.config(name, registry=reg, cat=cat, stack_file=stack_file)
    if not cfg.monitor:
        raise NoMonitor(name)
    pool = cfg.monitor["pool"]
    entry = next((e for e in cfg.entries if e.pool == pool and e.idx == 0), None)
    node = next((n for n in recorded(reg, name).nodes if n.pool == pool and n.idx == 0), None)
    if entry is None or node is None or not node.private_ip:
        raise GpufleetError(f"cluster {name}'s monitor host (the first node of pool {pool}) is not in the registry",
                            f"`gpufleet status {name}` shows what `up` recorded; run `gpufleet up` again")
    where = f"the registry's record of {name} node {pool}-0"
    return Monitor(cfg, entry, netnames.address(node.private_ip, "private address", where), cfg.monitor["grafana"])


def free_port() -> int:
    """A TCP port nothing listens on at 127.0.0.1 now (ssh is told to fail if it is taken by the time it binds)."""
    with socket.socket() as s:
        s.bind((LOCAL, 0))
        return s.getsockname()[1]


@dataclass
class Tunnel:
    """``argv`` forwards ``LOCAL:local_port`` to ``service`` on the monitor host."""

    monitor: Monitor
    service: str  # grafana | prometheus
    local_port: int
    remote_port: int
    argv: list[str]
    note: str = ""

    @property
    def url(self) -> str:
        return f"http://{LOCAL}:{self.local_port}/"

    def to_dict(self) -> dict:
        return {"cluster": self.monitor.cfg.cluster, "service": self.service, "url": self.url,
                "monitor": self.monitor.to_dict(), "remote_port": self.remote_port, "argv": self.argv,
                "note": self.note or None}


def tunnel(name: str, *, prometheus: bool = False, port: int | None = None, registry: Registry | None = None,
           cat=None, stack_file: str | Path | None = None, which=None, remote_port: int | None = None) -> Tunnel:
    """The ssh command line of the tunnel to the cluster's Grafana (Prometheus with ``prometheus``, or where
    the stack runs no Grafana), its config written and the route's programs checked."""
    m = monitor(name, registry=registry, cat=cat, stack_file=stack_file)
    service = "grafana" if m.grafana and not prometheus else "prometheus"
    note = "" if prometheus or m.grafana else (
        "the stack runs no Grafana (monitoring.grafana: false): this is Prometheus's own page")
    needed = [m.entry] + [e for e in m.cfg.entries if e.alias == m.entry.options.get("ProxyJump")]
    ssh.check_tools(m.cfg, needed, which=which)
    ssh.write(m.cfg)
    # Prometheus listens on the monitor's cluster address, Grafana on its loopback (monitoring.grafana): the far end
    # of the forward is resolved on the monitor itself
    far = LOCAL if service == "grafana" else f"[{m.address}]" if ":" in m.address else m.address
    remote = remote_port or ports.ports()[service]
    local = port or free_port()
    argv = ["ssh", "-F", str(m.cfg.path), "-N", "-o", "ExitOnForwardFailure=yes", "-o", "BatchMode=yes",
            "-L", f"{LOCAL}:{local}:{far}:{remote}", m.entry.alias]
    return Tunnel(m, service, local, remote, argv, note)


class TunnelFailed(GpufleetError):
    """ssh could not open the tunnel, or it closed. Exit code 1."""

    exit_code = EXIT_FAILED


@dataclass
class Open:
    """A running tunnel: its ssh process and the file its messages go to."""

    t: Tunnel
    proc: subprocess.Popen
    log: Path

    def said(self) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "; ".join(line for line in text.splitlines() if line.strip())[-600:] or "nothing"

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.unlink(missing_ok=True)


def start(t: Tunnel, timeout: float = OPEN_TIMEOUT_S) -> Open:
    """ssh started and its forward listening, or TunnelFailed with what ssh said (the process ended)."""
    fd, name = tempfile.mkstemp(prefix="gpufleet-tunnel.", suffix=".log")
    with os.fdopen(fd, "w") as log:
        proc = subprocess.Popen(t.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
    opened = Open(t, proc, Path(name))
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            said = opened.said()
            opened.close()
            raise TunnelFailed(f"ssh could not open the tunnel to {t.monitor.entry.alias} (exit {proc.returncode}): "
                               f"{said}", f"`gpufleet ssh {t.monitor.cfg.cluster} {t.monitor.entry.alias}` shows "
                               "whether the host can be reached")
        try:
            socket.create_connection((LOCAL, t.local_port), timeout=1).close()
            return opened
        except OSError:
            pass
        if time.monotonic() > deadline:
            opened.close()
            raise TunnelFailed(f"ssh did not open the tunnel to {t.monitor.entry.alias} in {timeout:.0f} s",
                               "run it again; -vv shows what ssh does")
        time.sleep(0.1)


def hold(opened: Open, tell=None) -> None:
    """``tell()`` (the URL said), then until Ctrl-C (the tunnel closed, and that is the end the person asked for) or
    ssh ends by itself (TunnelFailed: the connection dropped). The URL is said inside the wait for Ctrl-C: a person (or
    a test, on a loaded machine) may press it the moment the URL shows, before a wait begun after it."""
    try:
        if tell is not None:
            tell()
        opened.proc.wait()
    except KeyboardInterrupt:
        opened.close()
        return
    said = opened.said()
    opened.close()
    raise TunnelFailed(f"the tunnel to {opened.t.monitor.entry.alias} closed (ssh exit {opened.proc.returncode}): "
                       f"{said}", "run it again")


# --- status's line ---------------------------------------------------------------------------------------

def probe(name: str, *, registry: Registry | None = None, cat=None, stack_file: str | Path | None = None,
          which=None, remote_port: int | None = None, ask: bool = True) -> dict | None:
    """The monitor's address and whether its Prometheus answers ``GET /-/ready`` through the cluster's route
    ("ready", "not ready (HTTP n)", or "unknown (why)": never an exception); None when the cluster has none.
    ``ask``: False says the address only (`status --local`)."""
    reg = registry or team.registry()
    try:  # a cluster whose stack or record cannot be read has no monitor to speak of here (status says why)
        if not ssh.access_of(name, registry=reg, cat=cat, stack_file=stack_file).monitor:
            return None
    except GpufleetError:
        return None
    try:
        m = monitor(name, registry=reg, cat=cat, stack_file=stack_file)
    except GpufleetError as e:
        return {"address": None, "prometheus": f"unknown ({e.message})"}
    out = {"address": m.address, "host": m.entry.alias, "prometheus": "not asked (--local)"}
    if not ask:
        return out
    try:
        opened = start(tunnel(name, prometheus=True, registry=reg, cat=cat, stack_file=stack_file, which=which,
                              remote_port=remote_port), timeout=PROBE_TIMEOUT_S * 3)
    except GpufleetError as e:
        return {**out, "prometheus": f"unknown ({e.message})"}
    try:
        # no proxy: the tunnel's local end is the way (the default opener would take http_proxy from the
        # environment, and 127.0.0.1 is not in no_proxy unless a person puts it there)
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with direct.open(f"{opened.t.url.rstrip('/')}{READY_PATH}", timeout=PROBE_TIMEOUT_S) as r:
            out["prometheus"] = "ready" if r.status == 200 else f"not ready (HTTP {r.status})"
    except urllib.error.HTTPError as e:
        out["prometheus"] = f"not ready (HTTP {e.code})"
    except (OSError, ValueError) as e:  # refused, reset, timed out through the tunnel
        out["prometheus"] = f"unknown ({e})"
    finally:
        opened.close()
    return out

"""Apply the Salt states with salt-ssh (agentless), from Salt's own virtualenv.

Salt and Pulumi cannot share a virtualenv (their ``packaging`` pins conflict), so gpufleet
never imports Salt: it writes a small salt-ssh configuration per cluster (master config,
roster, per-host pillar) under ``$XDG_DATA_HOME/gpufleet/salt/<cluster>/`` and runs the
``salt-ssh`` of that virtualenv as a subprocess, reading its JSON output.

Host keys: every roster entry makes OpenSSH check the site's known_hosts file
(``StrictHostKeyChecking=yes``), the same file gpufleet's paramiko connections verified.

Secrets: a host's pillar holds the cluster's munge key (and the controller's, the accounting
password), so the configuration folder is 0700 and its files 0600 whatever the umask, a host's
pillar is on disk only while salt-ssh runs for it, and salt-ssh runs under umask 077 (its cache,
logs and the state tarball it builds with the pillar inside are the operator's alone). On the host,
Salt keeps its thin directory 0700 itself (``ssh_py_shim.py``, umask 077) and removes the tarball.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.clouds.bootstrap import SALT_VERSION  # the one Salt: on cloud nodes, in salt-ssh's virtualenv
from gpufleet.errors import ToolMissing
from gpufleet.paths import make_private_dir, salt_run_dir, salt_venv_dir, states_dir, write_private
from gpufleet.state import leases

SALT_SSH_UMASK = 0o077  # what salt-ssh writes here (cache, logs, the tarball with the pillar) is the operator's


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def tree_hash(root: Path | None = None) -> str:
    """A digest of every file in the state tree (a changed state means a host needs configuring again)."""
    root = root or states_dir()
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


def find_salt_ssh() -> Path:
    """The salt-ssh to run: ``$GPUFLEET_SALT_SSH``, a checkout's ``.salt-venv`` (`make salt`), the
    virtualenv `gpufleet setup salt` made (the pinned Salt), else one on PATH."""
    env = os.environ.get("GPUFLEET_SALT_SSH")
    if env:
        if os.path.isfile(env) and os.access(env, os.X_OK):
            return Path(env)
        raise ToolMissing(f"GPUFLEET_SALT_SSH is {env}, which is not an executable salt-ssh",
                          "point it at the salt-ssh of Salt's virtualenv, or unset it")
    candidates = [repo_root() / ".salt-venv" / "bin" / "salt-ssh", salt_venv_dir() / "bin" / "salt-ssh"]
    which = shutil.which("salt-ssh")
    if which:
        candidates.append(Path(which))
    for c in candidates:
        if c.exists() and os.access(c, os.X_OK):
            return c
    raise ToolMissing(
        "salt-ssh is not installed: rack hosts are configured with it",
        f"`gpufleet setup salt` installs Salt {SALT_VERSION} in a virtualenv of its own ({salt_venv_dir()}); "
        "or set GPUFLEET_SALT_SSH to a salt-ssh (in a clone, `make salt` makes .salt-venv)")


@dataclass
class RosterHost:
    id: str  # minion id: <pool>-<index>
    address: str
    port: int
    user: str
    key: str | None
    known_hosts: str
    pillar: dict

    @classmethod
    def of(cls, target, pillar: dict) -> "RosterHost":
        """A rack host (``clouds.baremetal.hosts.HostTarget``) with its pillar."""
        return cls(target.id, target.address, target.port, target.user, target.key, str(target.known_hosts), pillar)


@dataclass
class StateRun:
    """One host's result of one salt-ssh state run."""

    host: str
    test: bool
    states: int = 0
    changed: list[str] = field(default_factory=list)  # state ids that changed (or would, under test)
    failed: list[dict] = field(default_factory=list)  # [{id, comment}]
    error: str | None = None  # the run did not produce state results at all
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and not self.failed

    @property
    def problem(self) -> str:
        """Why the run is not ok: its error, or the failed states with their comments."""
        return self.error or ", ".join(f"{f['id']}: {f['comment']}" for f in self.failed)

    def to_dict(self) -> dict:
        return {"host": self.host, "test": self.test, "ok": self.ok, "states": self.states, "changed": self.changed,
                "failed": self.failed, "error": self.error, "seconds": round(self.seconds, 1)}


class SaltSsh:
    """A salt-ssh configuration for one cluster."""

    def __init__(self, cluster: str, hosts: list[RosterHost], *, salt_ssh: Path | None = None,
                 states: Path | None = None, max_procs: int = 32, timeout: int = 3600):
        self.cluster = cluster
        self.hosts = {h.id: h for h in hosts}
        self.salt_ssh = salt_ssh or find_salt_ssh()
        self.states = states or states_dir()
        self.dir = salt_run_dir(cluster)
        self.max_procs = max_procs
        self.timeout = timeout
        self._write()

    def _write(self) -> None:
        d = self.dir
        make_private_dir(d)
        make_private_dir(d / "pillar")
        self._key(d / "pki" / "ssh" / "salt-ssh.rsa")
        master = {
            "root_dir": str(d), "cachedir": str(d / "cache"), "pki_dir": str(d / "pki"),
            "log_file": str(d / "salt-ssh.log"), "log_level_logfile": "warning",
            "file_roots": {"base": [str(self.states)]}, "pillar_roots": {"base": [str(d / "pillar")]},
            "roster_file": str(d / "roster"), "ssh_log_file": str(d / "ssh.log"),
            "ssh_minion_opts": {"log_level": "warning"},
            "state_output": "full", "state_verbose": True,
        }
        write_private(d / "master", json.dumps(master, indent=2))
        roster = {}
        for h in self.hosts.values():
            roster[h.id] = {
                "host": h.address, "port": h.port, "user": h.user, "sudo": h.user != "root",
                "tty": h.user != "root", "timeout": 30,
                # a path without pyenv shims or user tools: salt-ssh's remote shim needs a system python3
                "set_path": "/usr/sbin:/usr/bin:/sbin:/bin",
                # kept between runs (no re-upload of Salt each time); one per cluster, and runs of a
                # cluster never overlap on a host (see _locked), so two salt-ssh never unpack into one dir
                "thin_dir": f"/var/tmp/.gpufleet-salt-{SALT_VERSION}-{self.cluster}",
                "ssh_options": ["StrictHostKeyChecking=yes", f"UserKnownHostsFile={h.known_hosts}",
                                "BatchMode=yes"],
            }
            if h.key:
                roster[h.id]["priv"] = os.path.expanduser(h.key)
        write_private(d / "roster", json.dumps(roster, indent=2))
        top = {"base": {h.id: [_sls_name(h.id)] for h in self.hosts.values()}}
        write_private(d / "pillar" / "top.sls", json.dumps(top, indent=2))

    @staticmethod
    def _key(path: Path) -> None:
        """salt-ssh's own key, made once here: every salt-ssh run makes it when it finds none (salt/client/
        ssh/__init__.py SSH.__init__ -> shell.gen_key, Salt 3008.3), and of two runs started at once on a
        fresh cluster (groups of hosts with different formulas) the second's ssh-keygen asks "Overwrite
        (y/n)?" on stdout, in front of its host's result, which is then lost. Same command as Salt's."""
        if path.is_file():
            return
        make_private_dir(path.parent.parent)
        make_private_dir(path.parent)
        try:
            subprocess.run(["ssh-keygen", "-P", "", "-f", str(path), "-t", "rsa", "-q"], check=True,
                           stdin=subprocess.DEVNULL, capture_output=True, umask=0o077)
        except FileNotFoundError:
            raise ToolMissing("ssh-keygen is not installed (salt-ssh needs OpenSSH's client tools)",
                              "install openssh-client") from None

    def _pillar(self, host_id: str) -> Path:
        return self.dir / "pillar" / f"{_sls_name(host_id)}.sls"

    def apply(self, host_ids: list[str], states: list[str], *, test: bool = False,
              on_host=None) -> dict[str, StateRun]:
        """``state.apply`` of ``states`` on the hosts, in parallel; one result per host.

        salt-ssh prints each host's return on one line as soon as that host is done
        (``--out-indent -1``); ``on_host(run)`` is called for each, for progress.
        """
        if not host_ids or not states:
            return {}
        leases.ensure_held()  # a command that lost the cluster's lease starts no further Salt run (and stops this one)
        cmd = [str(self.salt_ssh), "-c", str(self.dir), "--roster-file", str(self.dir / "roster"), "--out", "json",
               "--out-indent", "-1", "--no-color", "--max-procs", str(self.max_procs), "-L", ",".join(host_ids),
               "state.apply", ",".join(states)]
        if test:
            cmd.append("test=True")
        with self._locked(host_ids):
            try:  # each host's pillar is on disk while salt-ssh runs for it, and no longer
                for h in host_ids:
                    write_private(self._pillar(h), pillar_sls(self.hosts[h].pillar))
                return self._apply(cmd, host_ids, test, on_host)
            finally:
                for h in host_ids:
                    self._pillar(h).unlink(missing_ok=True)

    @contextlib.contextmanager
    def _locked(self, host_ids: list[str]):
        """Hold a lock per host (in a fixed order): no two salt-ssh runs on one host at once, across
        gpufleet processes, while runs on different hosts go ahead in parallel."""
        make_private_dir(self.dir / "locks")
        with contextlib.ExitStack() as stack:
            for h in sorted(host_ids):
                f = stack.enter_context(open(self.dir / "locks" / h, "w"))
                fcntl.flock(f, fcntl.LOCK_EX)
            yield

    def _apply(self, cmd: list[str], host_ids: list[str], test: bool, on_host) -> dict[str, StateRun]:
        """Run salt-ssh, in a process group of its own (it and the ssh it starts, one per host): the whole
        group is ended when the run outlasts ``timeout``, or at once when the command loses the cluster's
        lease (``leases.stopping``: another may hold the cluster now), which is then the run's outcome."""
        start = time.monotonic()
        lines: list[str] = []
        with leases.stopping(lambda: _end_group(proc)):
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONWARNINGS": "ignore"},
                                    process_group=0, umask=SALT_SSH_UMASK)
            leases.CHILDREN.add(proc)
            err: list[str] = []
            reader = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
            reader.start()
            timer = threading.Timer(self.timeout, _end_group, (proc, True))
            timer.start()
            try:
                if leases.lost():  # lost as it started, before the stop could reach it
                    _end_group(proc)
                for line in proc.stdout:
                    lines.append(line)
                    doc = _json_line(line)
                    if on_host and doc:
                        for hid in doc:
                            if hid in host_ids:
                                on_host(parse_output(line, "", [hid], test, time.monotonic() - start)[hid])
                proc.wait()
            finally:
                timer.cancel()
                if proc.poll() is None:  # left by an exception (Ctrl-C): not left running behind gpufleet
                    _end_group(proc)
                    try:
                        proc.wait(5)
                    except subprocess.TimeoutExpired:
                        _end_group(proc, True)
                        proc.wait()
                leases.CHILDREN.discard(proc)
        leases.ensure_held()  # stopped because the lease was lost: that is what happened
        reader.join(5)
        took = time.monotonic() - start
        if took >= self.timeout:
            return {h: StateRun(h, test, error=f"salt-ssh did not finish in {self.timeout}s", seconds=took)
                    for h in host_ids}
        return parse_output("".join(lines), "".join(err), host_ids, test, took)

    def clean(self, host_ids: list[str], states: list[str]) -> dict[str, StateRun]:
        """Apply each formula's ``clean`` state (undo what gpufleet installed)."""
        return self.apply(host_ids, [f"{s.split('.')[0]}.clean" for s in dict.fromkeys(states)])


def _end_group(proc: subprocess.Popen, kill: bool = False) -> None:
    """End salt-ssh and the ssh processes it started (its process group): SIGTERM, or SIGKILL."""
    try:
        os.killpg(proc.pid, signal.SIGKILL if kill else signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass  # it has ended


def pillar_sls(pillar: dict) -> str:
    """A pillar file Salt reads as JSON alone: without the shebang its default renderer (jinja|yaml)
    runs Jinja over the values first, and a Prometheus rule's ``{{ $labels.node }}`` breaks the whole
    pillar ("Pillar render error"; Salt's renderers documentation, "Shebang": ``#!json``)."""
    return "#!json\n" + json.dumps(pillar, indent=2, sort_keys=True)


def _sls_name(host_id: str) -> str:
    return "host_" + host_id.replace("-", "_").replace(".", "_")


def _json_line(line: str) -> dict | None:
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        doc = json.loads(line)
    except json.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


def parse_output(stdout: str, stderr: str, host_ids: list[str], test: bool, seconds: float) -> dict[str, StateRun]:
    """salt-ssh ``--out json`` output (one document, or one line per host with ``--out-indent -1``),
    one StateRun per host; a host with no return is an error."""
    data: dict = {}
    try:
        whole = json.loads(stdout) if stdout.strip() else {}
        data = whole if isinstance(whole, dict) else {}
    except json.JSONDecodeError:
        for line in stdout.splitlines():
            data.update(_json_line(line) or {})
    out: dict[str, StateRun] = {}
    for h in host_ids:
        run = StateRun(h, test, seconds=seconds)
        ret = data.get(h)
        if ret is None:
            run.error = "no result from salt-ssh" + (f": {stderr.strip()[-400:]}" if stderr.strip() else "")
        elif isinstance(ret, dict) and ret and all(isinstance(v, dict) and "result" in v for v in ret.values()):
            run.states = len(ret)
            for sid, r in sorted(ret.items(), key=lambda kv: kv[1].get("__run_num__", 0)):
                name = r.get("__id__") or sid
                if r.get("result") is False:
                    ch = r.get("changes") or {}
                    detail = ch.get("stderr") or ch.get("stdout") if isinstance(ch, dict) else ""
                    run.failed.append({"id": name, "comment": _comment(r.get("comment")) +
                                       (f": {str(detail).strip()[-400:]}" if detail else "")})
                elif r.get("changes") or (test and r.get("result") is None):
                    run.changed.append(name)
        else:
            run.error = _ssh_error(ret)
        out[h] = run
    return out


def _comment(c) -> str:
    if isinstance(c, list):
        c = "; ".join(map(str, c))
    return str(c or "").strip()[-600:]


def _ssh_error(ret) -> str:
    """The reason a host returned no state results (compile error, SSH failure, ...)."""
    if isinstance(ret, list):
        return "; ".join(map(str, ret))[-600:]
    if isinstance(ret, str):
        return ret.strip()[-600:]
    if isinstance(ret, dict):
        for key in ("stderr", "_error", "stdout"):
            if ret.get(key):
                text = str(ret[key]).strip()
                if "Host key verification failed" in text or "REMOTE HOST IDENTIFICATION HAS CHANGED" in text:
                    return "host key verification failed (OpenSSH): " + text.splitlines()[-1]
                return text[-600:]
        return json.dumps(ret)[-600:]
    return f"unexpected result: {ret!r}"[:600]


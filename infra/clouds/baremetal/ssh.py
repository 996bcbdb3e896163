"""SSH to rack hosts with paramiko: verified host keys, timeouts, retries, parallel fan-out.

Host keys live in one known_hosts file per site (``$XDG_DATA_HOME/gpufleet/known_hosts/<site>``
unless the caller names one). A host that is not in the file is refused unless the caller
asked for trust on first use; a host whose key differs from the recorded one is always
refused, loudly, with the fingerprints and how to clear the entry.

paramiko is imported when a connection is made, not when gpufleet is imported.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shlex
import socket
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.errors import GpufleetError
from gpufleet.paths import make_dir


class HostError(GpufleetError):
    """Something went wrong with one host; the others carry on."""

    kind = "error"

    def __init__(self, host: str, message: str, hint: str | None = None):
        super().__init__(f"{host}: {message}", hint)
        self.host = host

    def to_dict(self) -> dict:
        return {**super().to_dict(), "host": self.host, "kind": self.kind}


class Unreachable(HostError):
    kind = "unreachable"


class AuthFailed(HostError):
    kind = "auth"


class HostKeyUnknown(HostError):
    kind = "host-key-unknown"


class HostKeyChanged(HostError):
    kind = "host-key-changed"


class CommandFailed(HostError):
    kind = "command"


def fingerprint(key) -> str:
    """OpenSSH's SHA256 fingerprint of a paramiko key (as ``ssh-keygen -l`` prints it)."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def host_entry(address: str, port: int) -> str:
    """The name known_hosts files use: ``host`` on port 22, ``[host]:port`` otherwise."""
    return address if port == 22 else f"[{address}]:{port}"


_file_locks: dict[str, threading.Lock] = {}
_file_locks_guard = threading.Lock()


def _lock_for(path: Path) -> threading.Lock:
    with _file_locks_guard:
        return _file_locks.setdefault(str(path), threading.Lock())


class KnownHosts:
    """One site's known_hosts file, shared by the threads that connect to its hosts."""

    def __init__(self, path: Path, trust_new: bool = False):
        self.path = Path(path)
        self.trust_new = trust_new
        self.added: list[str] = []

    def _load(self):
        import paramiko

        keys = paramiko.HostKeys()
        if self.path.exists():
            keys.load(str(self.path))
        return keys

    def check(self, address: str, port: int, key) -> None:
        """Accept ``key`` for the host, record it (trust on first use), or raise."""
        name = host_entry(address, port)
        with _lock_for(self.path):
            keys = self._load()
            known = keys.lookup(name)
            if known is not None and key.get_name() in known:
                recorded = known[key.get_name()]
                if recorded.asbytes() == key.asbytes():
                    return
                raise HostKeyChanged(
                    name, f"HOST KEY CHANGED: the {key.get_name()} key is now {fingerprint(key)}, "
                          f"{self.path} records {fingerprint(recorded)}. Someone may be intercepting the "
                          f"connection, or the host was reinstalled. Nothing was run on it.",
                    f"if the change is expected, check the new fingerprint on the host's console "
                    f"(ssh-keygen -lf /etc/ssh/ssh_host_{key.get_name().split('-')[-1]}_key.pub) and remove the old "
                    f"entry: ssh-keygen -R '{name}' -f {self.path}")
            if known is not None:
                # the host is known under other key types: a new type is a change too
                raise HostKeyChanged(
                    name, f"HOST KEY CHANGED: the host offers a {key.get_name()} key ({fingerprint(key)}) but "
                          f"{self.path} records only {', '.join(known.keys())}. Nothing was run on it.",
                    f"check the host, then remove the old entry: ssh-keygen -R '{name}' -f {self.path}")
            if not self.trust_new:
                raise HostKeyUnknown(
                    name, f"host key {fingerprint(key)} ({key.get_name()}) is not in {self.path}",
                    "check the fingerprint on the host, then run again with --trust-new-hosts to record it, or add "
                    f"it yourself: ssh-keyscan -p {port} {address} >> {self.path}")
            make_dir(self.path.parent, "XDG_DATA_HOME (or the pool's known_hosts)")
            keys.add(name, key.get_name(), key)
            tmp = self.path.with_suffix(".tmp")
            keys.save(str(tmp))
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.path)
            self.added.append(f"{name} {fingerprint(key)}")


@dataclass
class Target:
    """Where and how to reach one host."""

    address: str
    port: int = 22
    user: str = "root"
    key: str | None = None  # private key file; None: the SSH agent and ~/.ssh keys

    @property
    def name(self) -> str:
        return host_entry(self.address, self.port)


@dataclass
class Result:
    stdout: str
    stderr: str
    rc: int


class Session:
    """An open, verified SSH connection to one host."""

    def __init__(self, target: Target, client, host_key: str = ""):
        self.target = target
        self._client = client
        self.host_key = host_key  # fingerprint of the verified host key

    def run(self, command: str, *, timeout: float = 120, check: bool = False, sudo: bool = False,
            stdin: bytes | None = None) -> Result:
        if sudo and self.target.user != "root":
            command = "sudo -n sh -c " + shlex.quote(command)
        inp, out, err = self._client.exec_command(command, timeout=timeout)
        if stdin is not None:
            inp.write(stdin)
            inp.channel.shutdown_write()
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
        rc = out.channel.recv_exit_status()
        if check and rc != 0:
            raise CommandFailed(self.target.name, f"`{command}` exited {rc}: {stderr.strip()[-300:]}")
        return Result(stdout, stderr, rc)

    def close(self) -> None:
        self._client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def connect(target: Target, known: KnownHosts, *, timeout: float = 10, retries: int = 2,
            backoff: float = 1.0) -> Session:
    """Open a session; the host key is checked before authentication is attempted.

    Network errors are retried ``retries`` times with exponential backoff; a host key problem or
    an authentication failure is not (retrying cannot fix it).
    """
    import paramiko

    last: Exception | None = None
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(backoff * 2 ** (attempt - 1))
        sock = None
        transport = None
        try:
            sock = socket.create_connection((target.address, target.port), timeout=timeout)
            transport = paramiko.Transport(sock)
            transport.banner_timeout = timeout
            transport.auth_timeout = timeout
            transport.start_client(timeout=timeout)
            server_key = transport.get_remote_server_key()
            known.check(target.address, target.port, server_key)
            _authenticate(transport, target)
            client = paramiko.SSHClient()
            client._transport = transport  # a verified, authenticated transport
            return Session(target, client, fingerprint(server_key))
        except HostError:
            _close(transport, sock)
            raise
        except paramiko.AuthenticationException as e:
            _close(transport, sock)
            raise AuthFailed(target.name, f"authentication as {target.user} failed ({e})",
                             f"check that {target.key or 'your SSH agent key'} is in ~{target.user}/.ssh/authorized_keys "
                             "on the host") from None
        except (OSError, EOFError, paramiko.SSHException) as e:
            _close(transport, sock)
            last = e
    reason = str(last) or type(last).__name__
    raise Unreachable(target.name, f"cannot connect after {retries + 1} attempt(s): {reason}",
                      "check that the host is up, sshd runs and the port is right; rerun to retry only the hosts that failed")


def _close(transport, sock) -> None:
    try:
        if transport is not None:
            transport.close()
        elif sock is not None:
            sock.close()
    except Exception:
        pass


def _authenticate(transport, target: Target) -> None:
    import paramiko

    if target.key:
        path = os.path.expanduser(target.key)
        if not os.path.exists(path):
            raise AuthFailed(target.name, f"private key {path} does not exist", "fix `key:` for this host in the stack file")
        pkey = _load_key(path)
        transport.auth_publickey(target.user, pkey)
        return
    agent = paramiko.Agent()
    for k in agent.get_keys():
        try:
            transport.auth_publickey(target.user, k)
            return
        except paramiko.AuthenticationException:
            continue
    for name in ("id_ed25519", "id_ecdsa", "id_rsa"):
        path = Path.home() / ".ssh" / name
        if path.exists():
            try:
                transport.auth_publickey(target.user, _load_key(str(path)))
                return
            except paramiko.AuthenticationException:
                continue
    raise paramiko.AuthenticationException("no key was accepted (agent and ~/.ssh tried)")


def _load_key(path: str):
    import paramiko

    for cls in (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey):
        try:
            return cls.from_private_key_file(path)
        except paramiko.SSHException:
            continue
    raise paramiko.AuthenticationException(f"cannot read the private key {path}")


@dataclass
class HostOutcome:
    """What happened on one host: a value, or the error that stopped it there."""

    host: str
    value: Any = None
    error: HostError | None = None
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None


def fan_out(items: Iterable, fn: Callable[[Any], Any], *, name: Callable[[Any], str], workers: int = 16,
            on_done: Callable[[HostOutcome], None] | None = None) -> list[HostOutcome]:
    """Run ``fn`` for each item in parallel; one host's failure never stops the others.

    Results come back in the order of ``items``. Errors that are not ``HostError`` are wrapped
    so that a bug on one host is reported against that host instead of aborting the run.
    """
    items = list(items)
    results: list[HostOutcome | None] = [None] * len(items)

    def one(i: int) -> None:
        start = time.monotonic()
        h = name(items[i])
        try:
            out = HostOutcome(h, value=fn(items[i]))
        except HostError as e:
            out = HostOutcome(h, error=e)
        except GpufleetError as e:
            out = HostOutcome(h, error=HostError(h, e.message, e.hint))
        except Exception as e:  # a host must not take the others down
            out = HostOutcome(h, error=HostError(h, f"{type(e).__name__}: {e}"))
        out.seconds = time.monotonic() - start
        results[i] = out
        if on_done:
            on_done(out)

    if not items:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(items)))) as pool:
        list(pool.map(one, range(len(items))))
    return [r for r in results if r is not None]

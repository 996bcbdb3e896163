"""What Packer does on a builder over SSH, in Python, so a template's provisioners can run against
real programs here (no Packer 1.10+ can be had on these machines).

The builder is a private mount namespace with an empty tmpfs on ``/tmp`` (a fresh machine's
``/tmp``: the template's absolute paths are used as written); each SSH session is one
``sh -c COMMAND`` in it, as sshd runs an exec request through the user's shell. The uploads speak
the scp protocol to OpenSSH's own sink (``scp -t``), record by record, as packer-plugin-sdk's SSH
communicator does at the versions the pinned plugins build with (go.mod: amazon v1.3.3 and azure
v2.2.0 use v0.5.4, commit 2750448; googlecompute v1.2.2 uses v0.6.1, commit d037325; the file
sdk-internals/communicator/ssh/communicator.go is the same in both):
``scpUploadSession`` runs ``scp -vt DIR`` and sends one ``C`` record; ``scpUploadDirSession`` runs
``scp -rvt DST`` and sends the folder's entries, inside a ``D ... E`` pair of its own name unless
the source ends in ``/``; ``scpUploadDirProtocol`` sends ``E`` without reading its answer).
The provisioners are Packer's own (hashicorp/packer v1.16.0, provisioner/file/provisioner.go:
a folder goes through ``UploadDir(dst, src)``; provisioner/shell/provisioner.go: the inline lines
under ``#!/bin/sh -e`` uploaded to ``/tmp/script_N.sh``, ``chmod 0755`` it, run
``chmod +x PATH; VARS PATH``, then removed).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path


class ScpError(Exception):
    """The sink's answer to a record was an error (a status byte of 1 or 2 and its message)."""


class Builder:
    """A fresh machine's ``/tmp`` (a mount namespace of its own) that runs SSH sessions' commands."""

    def __init__(self):
        self._holder = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c",
             "mount -t tmpfs -o mode=1777 tmpfs /tmp && echo ready && exec cat"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if self._holder.stdout.readline() != b"ready\n":
            self._holder.kill()
            raise OSError(f"no mount namespace here: {self._holder.stderr.read().decode().strip()}")

    def start(self, command: str) -> subprocess.Popen:
        """One session: ``command`` through the login shell, its stdin and stdout piped."""
        return subprocess.Popen(["nsenter", f"--mount=/proc/{self._holder.pid}/ns/mnt", "--", "sh", "-c", command],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/")

    def run(self, command: str) -> subprocess.CompletedProcess:
        p = self.start(command)
        out, err = p.communicate()
        return subprocess.CompletedProcess(command, p.returncode, out.decode(), err.decode())

    def close(self) -> None:
        self._holder.stdin.close()
        self._holder.wait()

    # --- the communicator's scp (scpSession and its callers) ---------------------------------------
    def _scp_session(self, command: str, send) -> None:
        p = self.start(command)
        try:
            send(p.stdin, p.stdout)
        except EOFError:  # scpSession ignores io.EOF: the sink ended early; its exit status says why
            pass
        p.stdin.close()
        err = p.stderr.read().decode()
        if p.wait() != 0:
            raise ScpError(f"{command} exited {p.returncode}: {err.strip()[-300:]}")

    def upload(self, path: str, data: bytes) -> None:
        """``comm.Upload(path, ...)`` without a file's info: mode 0644 (scpUploadSession)."""
        target_dir = os.path.dirname(path).replace(" ", "\\ ")
        self._scp_session("scp -vt " + target_dir, lambda w, r: _upload_file(os.path.basename(path), data, 0o644, w, r))

    def upload_dir(self, dst: str, src: str) -> None:
        """``comm.UploadDir(dst, src, nil)`` (scpUploadDirSession)."""

        def send(w, r):
            if not src.endswith("/"):
                _upload_dir_protocol(os.path.basename(src), w, r, lambda: _upload_dir(src, w, r),
                                     Path(src).stat().st_mode)
            else:  # a trailing slash: only the folder's contents
                _upload_dir(src, w, r)

        self._scp_session("scp -rvt " + dst, send)

    # --- the provisioners --------------------------------------------------------------------------
    def shell(self, inline: list[str], env: dict[str, str], number: int = 1234) -> subprocess.CompletedProcess:
        """Packer's shell provisioner with ``inline`` and its default shebang, paths and command."""
        script = f"/tmp/script_{number}.sh"
        self.upload(script, ("#!/bin/sh -e\n" + "".join(f"{c}\n" for c in inline)).encode())
        self.run(f"chmod 0755 {script}")
        variables = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
        done = self.run(f"chmod +x {script}; {variables} {script}")
        self.run(f"rm -f {script}")
        return done

    def file(self, source: str, destination: str) -> None:
        """Packer's file provisioner uploading ``source`` (a folder here)."""
        if not os.path.isdir(source):
            raise ValueError(f"{source}: only a folder's upload is rendered here")
        self.upload_dir(destination, source)


def _status(r) -> None:
    """checkSCPStatus: one byte, 0 or an error followed by its message."""
    code = r.read(1)
    if not code:
        raise EOFError
    if code != b"\0":
        raise ScpError(r.readline().decode().strip())


def _send(w, data: bytes) -> None:
    w.write(data)
    w.flush()


def _upload_file(name: str, data: bytes, mode: int, w, r) -> None:
    """scpUploadFile: ``C<mode> <size> <name>``, the bytes, a zero byte; each answered."""
    _send(w, f"C{mode:04o} {len(data)} {name}\n".encode())
    _status(r)
    _send(w, data + b"\0")
    _status(r)


def _upload_dir_protocol(name: str, w, r, entries, mode: int) -> None:
    """scpUploadDirProtocol: ``D<mode> 0 <name>``, its entries, ``E`` (whose answer it does not read)."""
    _send(w, f"D{mode & 0o777:04o} 0 {name}\n".encode())
    _status(r)
    entries()
    _send(w, b"E\n")


def _upload_dir(root: str, w, r) -> None:
    """scpUploadDir: each entry of ``root`` in directory order, a folder as its own D ... E."""
    for entry in os.scandir(root):
        if not entry.is_dir():
            _upload_file(entry.name, Path(entry.path).read_bytes(), entry.stat().st_mode & 0o777, w, r)
        else:
            _upload_dir_protocol(entry.name, w, r, lambda p=entry.path: _upload_dir(p, w, r), entry.stat().st_mode)

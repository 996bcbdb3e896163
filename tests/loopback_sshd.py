"""A real OpenSSH ``sshd`` on 127.0.0.1 for a test: its own host key and authorized key, nothing of
the machine's own configuration. sshd wants its privilege separation folder (/run/sshd, built into
Debian's sshd); where the machine has none, sshd runs in a mount namespace of its own with an empty
tmpfs on /run that holds one, so the test changes nothing outside its folder (root only)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
USABLE = SSHD is not None and shutil.which("ssh-keygen") is not None and os.geteuid() == 0 and (
    os.path.isdir("/run/sshd") or shutil.which("unshare") is not None)


def keygen(path: Path) -> str:
    """An ed25519 key pair at ``path`` (no passphrase); its public key."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)], check=True)
    return Path(f"{path}.pub").read_text().strip()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(folder: Path, authorized: str):
    """``sshd`` on 127.0.0.1 (yields (port, its host public key)); any user whose key is ``authorized``
    logs in."""
    folder.mkdir(parents=True, exist_ok=True)
    host_pub = keygen(folder / "host_key")
    (folder / "authorized_keys").write_text(authorized + "\n")
    port = _free_port()
    (folder / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {folder / 'host_key'}\n"
        f"AuthorizedKeysFile {folder / 'authorized_keys'}\nStrictModes no\nUsePAM no\nPidFile none\n"
        "PermitRootLogin prohibit-password\n")
    sshd = [SSHD, "-D", "-e", "-f", str(folder / "sshd_config")]
    if not os.path.isdir("/run/sshd"):
        sshd = ["unshare", "-m", "sh", "-c", 'mount -t tmpfs none /run && mkdir /run/sshd && exec "$@"', "sshd", *sshd]
    with open(folder / "sshd.log", "w") as log:
        proc = subprocess.Popen(sshd, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("sshd did not start: " + (folder / "sshd.log").read_text()[-2000:])
            time.sleep(0.1)
        yield port, host_pub
    finally:
        proc.terminate()
        proc.wait(timeout=30)

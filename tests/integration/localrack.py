"""The local test rack (tests/rack/rack.py) as the end-to-end modules use it: four fresh hosts,
a command on one of them over SSH, and the rack taken down after the module."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, require

RACK = [sys.executable, str(ROOT / "tests" / "rack" / "rack.py")]
STATE = Path(os.environ.get("GPUFLEET_RACK_DIR", "/var/tmp/gpufleet-rack"))
KEY = STATE / "id_ed25519"
HOSTS = 4


def fresh_hosts(salt_tool: str) -> list[dict]:
    """The rack's hosts, up, each with a fresh root file system (the first apply really installs).
    Without root, the rack's tools or Salt's virtualenv (``salt_tool`` in it) the test skips, and
    fails under CI=true."""
    require(sys.platform == "linux" and os.geteuid() == 0, "the test rack needs root on Linux")
    for tool in ("ip", "debootstrap", "sshd", "unshare"):
        require(shutil.which(tool) is not None or Path(f"/usr/sbin/{tool}").exists(), f"{tool} is not installed")
    require((ROOT / ".salt-venv" / "bin" / salt_tool).exists(), "Salt's virtualenv .salt-venv is missing")
    up = subprocess.run(RACK + ["up", "--hosts", str(HOSTS)], capture_output=True, text=True, timeout=1200)
    assert up.returncode == 0, up.stderr
    for i in range(1, HOSTS + 1):
        subprocess.run(RACK + ["reset", str(i)], check=True, capture_output=True, timeout=300)
    return json.loads(up.stdout)


def down() -> None:
    """Stop the hosts' sshd daemons (the debootstrap cache stays for the next run), unless
    GPUFLEET_KEEP_RACK=1 keeps them for a look."""
    if os.environ.get("GPUFLEET_KEEP_RACK") != "1":
        subprocess.run(RACK + ["down"], capture_output=True, timeout=300)


def on_host(i: int, command: str, stdin: str | bytes | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    """``command`` as root on host ``i`` (text in and out, bytes when ``stdin`` is bytes)."""
    return subprocess.run(["ssh", "-i", str(KEY), "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                           "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", f"root@10.77.0.{10 + i}", command],
                          input=stdin, capture_output=True, text=not isinstance(stdin, bytes), timeout=timeout)

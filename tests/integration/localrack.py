"""The local test rack (tests/rack/rack.py) as the end-to-end modules use it: four fresh hosts,
a command on one of them over SSH, and the rack taken down after the module."""

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from tests.conftest import ROOT, gpufleet_exe, require

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


def rack_env(tmp_path_factory, hosts: list[dict]) -> dict:
    """What a module's commands run with: a data home of its own (its registry), wide tables."""
    data = tmp_path_factory.mktemp("xdg-data")
    env = {**os.environ, "XDG_DATA_HOME": str(data), "COLUMNS": "200"}
    env.pop("GPUFLEET_REGISTRY", None)
    return {"env": env, "data": data, "hosts": hosts}


def rack_module(tmp_path_factory):
    """A module's rack fixture: four fresh hosts for the module (its environment yielded), taken down
    after it. (A conftest.py here would shadow tests/conftest.py, which the unit tests import by name.)"""
    hosts = fresh_hosts("salt-ssh")
    yield rack_env(tmp_path_factory, hosts)
    down()


def gpufleet(rack: dict, *args, timeout=1200):
    """The installed `gpufleet --json ARGS` as a user runs it: (exit code, the JSON it printed, stderr)."""
    r = subprocess.run([gpufleet_exe(), "--json", *args], capture_output=True, text=True, env=rack["env"],
                       timeout=timeout, stdin=subprocess.DEVNULL)
    try:
        doc = json.loads(r.stdout)
    except json.JSONDecodeError:
        doc = None
    return r.returncode, doc, r.stderr


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


STANDIN_HOME = "/opt/gpufleet-standin"
STANDIN_TOOLS = ("nvidia-smi", "dcgmi", "nvbandwidth", "journalctl", "systemctl")


def install_standins(i: int, changes: dict[str, str], captures: str = "l4x1", tools=STANDIN_TOOLS) -> None:
    """The stand-in tools (tests/verify_standin.py) on host ``i``, replaying the captures of
    tests/data/verify/``captures`` (the 1x L4's unless told; ``changes``: capture file -> other text),
    first on root's PATH (/usr/local/sbin); ``tools``: which of them (all unless told)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(ROOT / "tests" / "verify_standin.py", "standin.py")
        tar.add(ROOT / "tests" / "data" / "verify" / captures, "captures")
        for name, text in changes.items():
            info = tarfile.TarInfo(f"captures/{name}")
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    links = " && ".join(f"ln -sf {STANDIN_HOME}/standin.py /usr/local/sbin/{t}" for t in tools)
    r = on_host(i, f"rm -rf {STANDIN_HOME} && mkdir -p {STANDIN_HOME} && tar -x -C {STANDIN_HOME} && "
                   f"chmod +x {STANDIN_HOME}/standin.py && {links}", stdin=buf.getvalue())
    assert r.returncode == 0, r.stderr


def remove_standins(i: int) -> None:
    on_host(i, f"rm -rf {STANDIN_HOME} " + " ".join(f"/usr/local/sbin/{t}" for t in STANDIN_TOOLS))

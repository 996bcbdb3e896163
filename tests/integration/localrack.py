"""The local test rack (tests/rack/rack.py) as the end-to-end modules use it: four fresh hosts,
a command on one of them over SSH, and the rack taken down after the module.

The machine holds two racks side by side (rack.py's GPUFLEET_RACK_ID): a module names its rack in its
xdist group (``group(n)``: "rackN"), so that the modules of one rack run one after the other in one
xdist worker while the other rack's modules run in another. A worker drives one rack at a time: the
module's fixture makes it the process's ``active()`` rack, whose addresses, key and folders every
helper here takes."""

import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT, gpufleet_exe, require

RACK_PY = ROOT / "tests" / "rack" / "rack.py"
RACK = [sys.executable, str(RACK_PY)]
HOSTS = 4
_spec = importlib.util.spec_from_file_location("gpufleet_test_rack", RACK_PY)
rackpy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rackpy)


@dataclass(frozen=True)
class Rack:
    """One of the machine's racks, by its id (tests/rack/rack.py layout)."""

    id: int

    @property
    def layout(self):
        return rackpy.layout(self.id)

    @property
    def state(self) -> Path:
        return self.layout.state

    @property
    def key(self) -> Path:
        return self.state / "id_ed25519"

    @property
    def gateway(self) -> str:
        """This machine's address on the rack's bridge (the hosts' default route, the site's servers)."""
        return f"{self.layout.subnet}.1"

    def address(self, i: int) -> str:
        return f"{self.layout.subnet}.{10 + i}"

    def etc(self, i: int) -> Path:
        """Host ``i``'s /etc as this machine sees it."""
        return self.state / f"h{i}" / "root" / "etc"

    def run(self, *args: str, timeout: int = 300, check: bool = True) -> subprocess.CompletedProcess:
        """rack.py ARGS on this rack (``check``: it must succeed)."""
        r = subprocess.run(RACK + list(args), capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, "GPUFLEET_RACK_ID": str(self.id)})
        assert r.returncode == 0 or not check, f"rack.py {' '.join(args)}: {r.stderr}"
        return r

    def stack(self, path: Path, into: Path) -> Path:
        """The stack file ``path``, written for rack 0 (the README's rack), rewritten for this rack in
        folder ``into``: its hosts' addresses, its key, its bridge's address."""
        if self.id == 0:
            return path
        zero = Rack(0)
        swap = {zero.address(i): self.address(i) for i in range(1, HOSTS + 1)}
        swap |= {zero.gateway: self.gateway, str(zero.key): str(self.key)}
        text = re.sub("|".join(re.escape(k) + r"\b" for k in sorted(swap, key=len, reverse=True)),
                      lambda m: swap[m.group(0)], path.read_text())
        out = into / path.name
        out.write_text(text)
        return out


_active = Rack(rackpy.rack_id_from_env())  # outside a module's fixture (the bench scripts): GPUFLEET_RACK_ID's


def active() -> Rack:
    """The rack this process drives now."""
    return _active


def use(rack_id: int) -> Rack:
    global _active
    _active = Rack(rack_id)
    return _active


def group(rack_id: int):
    """The xdist group of rack ``rack_id``'s modules, which names the rack they run on."""
    return pytest.mark.xdist_group(f"rack{rack_id}")


def rack_of(request) -> int:
    """The rack the requesting module's xdist group names (``group``)."""
    mark = request.node.get_closest_marker("xdist_group")
    found = re.fullmatch(r"rack(\d+)", mark.args[0] if mark else "")
    assert found, f"{request.node.nodeid}: a rack module is marked localrack.group(N)"
    return int(found.group(1))


def fresh_hosts(salt_tool: str) -> list[dict]:
    """The rack's hosts, up, each with a fresh root file system (the first apply really installs).
    Without root, the rack's tools or Salt's virtualenv (``salt_tool`` in it) the test skips, and
    fails under CI=true."""
    require(sys.platform == "linux" and os.geteuid() == 0, "the test rack needs root on Linux")
    for tool in ("ip", "debootstrap", "sshd", "unshare"):
        require(shutil.which(tool) is not None or Path(f"/usr/sbin/{tool}").exists(), f"{tool} is not installed")
    require((ROOT / ".salt-venv" / "bin" / salt_tool).exists(), "Salt's virtualenv .salt-venv is missing")
    up = active().run("up", "--hosts", str(HOSTS), timeout=1200)
    active().run("reset", *(str(i) for i in range(1, HOSTS + 1)))
    return json.loads(up.stdout)


def rack_env(tmp_path_factory, hosts: list[dict], stack: Path | None = None) -> dict:
    """What a module's commands run with: a data home of its own (its registry), wide tables, and its
    stack file (``stack``, written for rack 0) as "stack", for the rack it got."""
    data = tmp_path_factory.mktemp("xdg-data")
    env = {**os.environ, "XDG_DATA_HOME": str(data), "COLUMNS": "200"}
    env.pop("GPUFLEET_REGISTRY", None)
    out = {"env": env, "data": data, "hosts": hosts}
    if stack is not None:
        out["stack"] = str(active().stack(stack, tmp_path_factory.mktemp("stack")))
    return out


def rack_module(request, tmp_path_factory, stack: Path | None = None):
    """A module's rack fixture: four fresh hosts of the rack its group names (its environment yielded),
    taken down after it. (A conftest.py here would shadow tests/conftest.py, which the unit tests import
    by name.)"""
    use(rack_of(request))
    hosts = fresh_hosts("salt-ssh")
    yield rack_env(tmp_path_factory, hosts, stack)
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
        active().run("down", check=False)


def on_host(i: int, command: str, stdin: str | bytes | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    """``command`` as root on host ``i`` (text in and out, bytes when ``stdin`` is bytes)."""
    return subprocess.run(["ssh", "-i", str(active().key), "-o", "StrictHostKeyChecking=no", "-o",
                           "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes",
                           f"root@{active().address(i)}", command],
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

"""`gpufleet setup salt`: the pinned Salt in a virtualenv of gpufleet's own (``paths.salt_venv_dir()``),
where ``configure.saltrun.find_salt_ssh`` finds the salt-ssh that configures rack hosts.

No pip extra can carry Salt: salt 3008.3 pins ``packaging==24.0`` and Pulumi 3.27x needs
``packaging>=26`` (DESIGN.md, pitfalls), so it cannot live in gpufleet's environment. This makes
the environment a clone's `make salt` makes, for a user who installed the wheel.
"""

from __future__ import annotations

import collections
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from gpufleet.configure.saltrun import SALT_VERSION
from gpufleet.errors import GpufleetError
from gpufleet.paths import make_dir, salt_venv_dir

AGAIN = "then run `gpufleet setup salt` again"
YOURSELF = f"or install Salt {SALT_VERSION} yourself and set GPUFLEET_SALT_SSH to its salt-ssh"


@dataclass
class SaltSetup:
    salt_ssh: Path
    version: str
    installed: bool  # False: the pinned Salt was there already

    def to_dict(self) -> dict:
        return {**asdict(self), "salt_ssh": str(self.salt_ssh)}


def install(on_step: Callable[[str], None] = lambda step: None,
            on_line: Callable[[str], None] = lambda line: None) -> SaltSetup:
    """Make the virtualenv and install salt==SALT_VERSION into it, unless that Salt is there already.
    ``on_step`` hears each step, ``on_line`` each line pip prints. A failure says pip's reason and
    leaves no half-made virtualenv behind."""
    venv = salt_venv_dir()
    exe = venv / "bin" / "salt-ssh"
    if _version(exe) == SALT_VERSION:
        return SaltSetup(exe, SALT_VERSION, installed=False)
    make_dir(venv.parent)
    try:
        on_step(f"making a virtualenv for Salt in {venv}")
        # the Python running gpufleet (3.11+): salt 3008.3 asks for 3.8 or newer
        _run([sys.executable, "-m", "venv", "--clear", str(venv)], "could not make a virtualenv for Salt",
             f"install your Python's venv module (Debian: the python3-venv package), {AGAIN}", on_line)
        on_step(f"installing salt=={SALT_VERSION} with pip (a few minutes)")
        _run([str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar",
              "off", f"salt=={SALT_VERSION}"], f"pip could not install salt=={SALT_VERSION}",
             f"check the network and the package index pip uses (PIP_INDEX_URL, pip.conf), {AGAIN}; {YOURSELF}",
             on_line)
        found = _version(exe)
        if found != SALT_VERSION:
            raise GpufleetError(f"the salt-ssh installed in {venv} does not run as Salt {SALT_VERSION} "
                                f"(it says {found or 'nothing'})", f"{AGAIN}; {YOURSELF}")
    except BaseException:
        shutil.rmtree(venv, ignore_errors=True)  # find_salt_ssh must never find half of one
        raise
    return SaltSetup(exe, SALT_VERSION, installed=True)


def _run(argv: list[str], failed: str, hint: str, on_line: Callable[[str], None]) -> None:
    """Run ``argv``, each line of its output to ``on_line``; a failure is ``failed``: the reason it printed."""
    tail: collections.deque[str] = collections.deque(maxlen=40)
    try:
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              text=True, errors="replace") as proc:
            for line in proc.stdout:
                line = line.rstrip()
                if line:
                    tail.append(line)
                    on_line(line)
    except OSError as e:
        raise GpufleetError(f"{failed}: {argv[0]}: {e.strerror or e}", hint) from None
    if proc.returncode != 0:
        raise GpufleetError(f"{failed}: {_reason(list(tail))}", hint)


def _reason(lines: list[str]) -> str:
    """What a failed pip or venv said it was stopped by: its ERROR lines, else its last line."""
    errors = [x.removeprefix("ERROR: ").strip() for x in lines if x.startswith("ERROR:")]
    return "; ".join(errors) if errors else (lines[-1].strip() if lines else "it printed nothing")


def _version(exe: Path) -> str | None:
    """The version ``salt-ssh --version`` says (``salt-ssh 3008.3 (Chlorine)``), or None where none runs."""
    if not exe.is_file():
        return None
    try:
        out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=120,
                             stdin=subprocess.DEVNULL).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out[1] if len(out) >= 2 and out[0] == "salt-ssh" else None

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "stacks" / "examples").glob("*.yaml"))


@pytest.fixture(autouse=True)
def _isolated_config(tmp_path, monkeypatch):
    """No test reads the developer's own ~/.config/gpufleet."""
    monkeypatch.delenv("GPUFLEET_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    yield


@pytest.fixture
def cat():
    from gpufleet import catalog

    return catalog.load(use_config=False)


def gpufleet_exe() -> str:
    exe = Path(sys.executable).parent / "gpufleet"
    return str(exe) if exe.exists() else shutil.which("gpufleet")


@pytest.fixture
def write(tmp_path):
    def _w(name: str, text: str) -> str:
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        return str(p)

    return _w


def require(ok: bool, why: str) -> None:
    """Skip a test whose tool is missing here; in CI (CI=true) a missing tool is a failure."""
    import os

    if ok:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{why} (CI must install it: see Makefile `test`)")
    pytest.skip(why)


def salt_call() -> Path:
    exe = ROOT / ".salt-venv" / "bin" / "salt-call"
    require(exe.exists(), "Salt's virtualenv .salt-venv is missing (`make salt`)")
    return exe

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


@pytest.fixture(scope="session")
def moto_server():
    """moto's HTTP server (plus what it lacks, see fakes/aws.py) for the whole session."""
    import importlib.util

    require(importlib.util.find_spec("moto") is not None, "moto is not installed (test extra)")
    from fakes.aws import Server

    srv = Server().start()
    yield srv
    srv.stop()


@pytest.fixture
def aws(moto_server, monkeypatch, tmp_path):
    """boto3 pointed at a fresh moto (AWS_ENDPOINT_URL) with test credentials; no ~/.aws."""
    moto_server.reset()
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server.url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-creds"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    # deletion retries: quick in tests (the defaults wait minutes for real clouds)
    monkeypatch.setenv("GPUFLEET_DELETE_BACKOFF", "0.05")
    monkeypatch.setenv("GPUFLEET_DELETE_WAIT", "5")
    return moto_server

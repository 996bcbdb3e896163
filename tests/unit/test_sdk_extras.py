"""With one cloud's extra installed (the others' SDKs hidden, tests/tools/only_extra.py), every
command ends with a clear message: a cloud whose SDK is missing is skipped with the extra to
install when nobody named it, and is bad input (exit 2) when somebody did. Never a traceback."""

import json
import subprocess
import sys

import pytest

from conftest import ROOT

ONLY_EXTRA = ROOT / "tests" / "tools" / "only_extra.py"
STACKS = {"aws": "aws-training", "gcp": "gcp-a3", "azure": "azure-nd"}


def run(extra: str, *args: str, env=None) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, str(ONLY_EXTRA), extra, *args], capture_output=True, text=True, timeout=120,
                       cwd=ROOT, env=env)
    assert "Traceback" not in r.stdout + r.stderr, r.stderr
    return r


@pytest.fixture
def env(aws, monkeypatch, tmp_path):
    """AWS credentials for moto's server; none for GCP and Azure."""
    import os

    # Azure's price API needs no SDK: point it at a port nothing listens on, never at the Internet
    monkeypatch.setenv("GPUFLEET_AZURE_PRICES_ENDPOINT", "http://127.0.0.1:9/api/retail/prices")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return dict(os.environ)


@pytest.mark.slow
@pytest.mark.parametrize("extra", ["aws", "gcp", "azure"])
def test_a_missing_cloud_sdk_is_skipped_unless_asked_for(extra, env):
    others = [c for c in STACKS if c != extra]
    mine = run(extra, "plan", f"stacks/examples/{STACKS[extra]}.yaml", env=env)
    assert mine.returncode == 0, mine.stderr  # the installed extra is enough for its own cloud
    for other in others:
        install = f"pip install 'gpufleet[{other}]'"
        r = run(extra, "plan", f"stacks/examples/{STACKS[other]}.yaml", env=env)
        assert r.returncode == 2 and install in r.stderr
        # Azure's prices need no SDK (its Retail Prices API is plain REST): only its capabilities do
        refresh = [] if other == "azure" else [["catalog", "refresh", "-p", other]]
        for asked in (["reap", "-p", other], ["status", "-p", other], ["check", "-p", other], *refresh):
            r = run(extra, *asked, env=env)
            assert r.returncode == 2 and install in r.stderr, (asked, r.stderr)
    # with the aws extra AWS is read (moto) and the others are skipped: exit 0; with another extra
    # AWS is skipped too (no SDK) and GCP/Azure have no credentials: nothing could be read, exit 1
    one_region = ["-r", "us-east-1"] if extra == "aws" else []  # moto's 30-odd regions take a while
    for cmd in (["reap", *one_region], ["status", *one_region], ["check"]):
        r = run(extra, "--json", *cmd, env=env)
        skipped = json.loads(r.stdout)["skipped"]
        assert r.returncode == (0 if extra == "aws" else 1), (cmd, r.stdout)
        assert all(f"pip install 'gpufleet[{o}]'" in skipped[o] for o in others), (cmd, r.stdout)
    r = run(extra, "--json", "catalog", "refresh", env=env)
    results = {x["provider"]: x for x in json.loads(r.stdout)["results"]}
    missing = [o for o in others if o != "azure"]
    assert all(results[o]["status"] == "skipped" and f"gpufleet[{o}]" in results[o]["message"] for o in missing)


@pytest.mark.slow
def test_without_any_extra_a_cloud_stack_names_the_extra_to_install(tmp_path):
    """`pip install gpufleet` (what `make demo` installs): Pulumi and every cloud SDK missing. Planning,
    bringing up or taking down a cloud stack is bad input naming its extra, not an internal error; a
    rack stack still plans."""
    import os

    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"), GPUFLEET_REGISTRY=str(tmp_path / "registry.db"))
    for cloud, stack in STACKS.items():
        for cmd in (["plan"], ["up", "--yes"]):
            r = run("none", *cmd, f"stacks/examples/{stack}.yaml", env=env)
            assert r.returncode == 2 and f"pip install 'gpufleet[{cloud}]'" in r.stderr, (cmd, r.stderr)
    mixed = run("none", "plan", "stacks/examples/mixed.yaml", env=env)
    assert mixed.returncode == 2 and "pip install 'gpufleet[" in mixed.stderr, mixed.stderr
    rack = run("none", "plan", "stacks/examples/baremetal-rack.yaml", env=env)
    assert rack.returncode == 0, rack.stderr

"""salt-ssh for a wheel user (issue 47, item 14): no extra can carry Salt (its `packaging` pin conflicts
with Pulumi's, DESIGN.md pitfalls), so `gpufleet setup salt` installs the pinned Salt into a virtualenv
of gpufleet's own, where find_salt_ssh() looks; a rack `up` without it stops first, naming the command."""

import json
import os
import subprocess

import pytest

from gpufleet import paths
from gpufleet.configure import saltrun
from gpufleet.errors import ToolMissing

from conftest import EXAMPLES, cli, gpufleet_exe

RACK = next(p for p in EXAMPLES if p.name == "local-rack.yaml")


def _exe(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def nowhere(monkeypatch, tmp_path):
    """No salt-ssh anywhere: no checkout's .salt-venv, none on PATH, an empty data folder."""
    monkeypatch.delenv("GPUFLEET_SALT_SSH", raising=False)
    monkeypatch.setattr(saltrun, "repo_root", lambda: tmp_path / "checkout")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    return tmp_path


def test_salt_ssh_is_looked_for_in_gpufleets_own_virtualenv_before_path(nowhere, monkeypatch):
    on_path = _exe(nowhere / "bin" / "salt-ssh")
    assert saltrun.find_salt_ssh() == on_path
    own = _exe(paths.salt_venv_dir() / "bin" / "salt-ssh")
    assert saltrun.find_salt_ssh() == own  # the pinned one gpufleet installed, not whatever Salt PATH has
    checkout = _exe(nowhere / "checkout" / ".salt-venv" / "bin" / "salt-ssh")
    assert saltrun.find_salt_ssh() == checkout  # a clone's `make salt`
    named = _exe(nowhere / "mine" / "salt-ssh")
    monkeypatch.setenv("GPUFLEET_SALT_SSH", str(named))
    assert saltrun.find_salt_ssh() == named


def test_no_salt_ssh_names_the_command_that_installs_it(nowhere):
    with pytest.raises(ToolMissing) as e:
        saltrun.find_salt_ssh()
    assert "salt-ssh is not installed" in e.value.message
    assert "gpufleet setup salt" in e.value.hint and str(paths.salt_venv_dir()) in e.value.hint
    assert "GPUFLEET_SALT_SSH" in e.value.hint and saltrun.SALT_VERSION in e.value.hint


def test_a_rack_up_without_salt_stops_before_anything_naming_the_command(nowhere):
    r = cli("up", str(RACK), "--yes")
    assert r.exit_code == 2 and "salt-ssh is not installed" in r.output and "gpufleet setup salt" in r.output, r.output
    assert "Traceback" not in r.output
    from gpufleet.state.registry import Registry

    data = paths.data_dir()
    assert Registry(data / "registry.db").list() == []  # no cluster recorded, no host asked, no salt-ssh set up
    assert not (data / "known_hosts").exists() and not (data / "salt").exists()


def _setup_salt(data, **env):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return subprocess.run([gpufleet_exe(), "--json", "setup", "salt"], capture_output=True, text=True, timeout=1200,
                          stdin=subprocess.DEVNULL, env={**clean, "XDG_DATA_HOME": str(data), **env})


def test_setup_salt_says_why_pip_failed_and_leaves_no_half_made_virtualenv(tmp_path):
    # no package index to reach: pip's own settings, no config file, no retries (pip's docs, "Configuration")
    r = _setup_salt(tmp_path, PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_RETRIES="0")
    assert r.returncode == 1, r.stderr[-2000:]
    err = json.loads(r.stdout)
    assert err["message"].startswith(f"pip could not install salt=={saltrun.SALT_VERSION}") and "Traceback" not in r.stderr
    assert "PIP_INDEX_URL" in err["hint"] and "GPUFLEET_SALT_SSH" in err["hint"]
    assert not (tmp_path / "gpufleet" / "salt-venv").exists()


@pytest.mark.slow
def test_setup_salt_installs_the_pinned_salt_where_find_salt_ssh_looks(tmp_path, nowhere, monkeypatch):
    # installs salt from the package index pip is set up with (PyPI): a few minutes
    data = tmp_path / "data"
    r = _setup_salt(data)
    assert r.returncode == 0, r.stderr[-3000:]
    done = json.loads(r.stdout)
    assert done["installed"] is True and done["version"] == saltrun.SALT_VERSION
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    exe = saltrun.find_salt_ssh()
    assert exe == paths.salt_venv_dir() / "bin" / "salt-ssh" and str(exe) == done["salt_ssh"]
    v = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=120)
    assert v.stdout.split()[:2] == ["salt-ssh", saltrun.SALT_VERSION], v.stdout + v.stderr
    again = _setup_salt(data)  # there already: nothing installed again
    assert again.returncode == 0 and json.loads(again.stdout)["installed"] is False, again.stderr[-2000:]

"""Every file a user can point gpufleet at (the refreshed prices and rates, the config, a workload
library, a stack, a public key, a cloud CLI's profile) is read only when it is a regular file under
its cap: a device, a pipe, /dev/stdin or a huge file is refused at once with its path, exit 2,
never a read that does not end or fills the memory (issue 47, item 4).

Each command runs in a process of its own, with its memory limited: a read that never ends fails
the test on its timeout instead of hanging it, and one that would fill the machine fails there."""

import os
import resource
import subprocess
import sys

import pytest

from gpufleet import userfiles

from conftest import ROOT

AWS = str(ROOT / "stacks" / "examples" / "aws-training.yaml")


def _limited():
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def _run(*args, **env):
    r = subprocess.run([sys.executable, "-m", "gpufleet.cli", *args], capture_output=True, text=True, timeout=60,
                       preexec_fn=_limited, stdin=subprocess.PIPE, env={**os.environ, "COLUMNS": "300", **env})
    return r.returncode, r.stdout + r.stderr


def _fifo(tmp_path):
    p = tmp_path / "pipe"
    os.mkfifo(p)
    return str(p)


@pytest.mark.parametrize("variable,path,command", [
    ("GPUFLEET_PRICES", "/dev/urandom", ["compare", "resnet50"]),  # the issue's: it never returned
    ("GPUFLEET_RATES", "/dev/zero", ["plan", AWS]),  # the issue's: 21 GB, then the OOM killer
    ("GPUFLEET_CONFIG", "/dev/zero", ["compare", "resnet50"]),
    ("GPUFLEET_PRICES", "/dev/stdin", ["compare", "resnet50"]),  # a pipe no one writes to
    ("GPUFLEET_RATES", "fifo", ["plan", AWS]),
])
def test_a_variable_naming_a_device_or_a_pipe_is_refused_at_once(tmp_path, variable, path, command):
    path = _fifo(tmp_path) if path == "fifo" else path
    rc, out = _run(*command, **{variable: path})
    assert rc == 2 and "Traceback" not in out and "internal error" not in out, out
    way_out = "give the path of a YAML file" if variable == "GPUFLEET_CONFIG" else f"point {variable} at"
    assert f"{path}: this is a" in out and "not a file" in out and way_out in out, out


@pytest.mark.parametrize("option", ["--workload-file", "--stack"])
def test_a_named_file_that_is_stdin_or_a_pipe_is_refused(tmp_path, option):
    for path in ("/dev/stdin", _fifo(tmp_path)):
        rc, out = _run("compare", "resnet50", option, path)
        assert rc == 2 and f"{path}: this is a" in out and "not a file" in out and "save it to a file first" in out, out


def test_a_prices_file_over_its_cap_is_refused_naming_the_cap(tmp_path):
    big = tmp_path / "prices.json"
    with open(big, "wb") as f:  # sparse: no disk, but its size says what it is
        f.truncate(userfiles.TABLE_BYTES + 1)
    rc, out = _run("compare", "resnet50", GPUFLEET_PRICES=str(big))
    assert rc == 2 and f"{big}: the file is 256.0 MB; at most 256 MB of" in out and "Traceback" not in out, out


def test_a_public_key_that_is_a_device_is_refused_at_its_line(tmp_path):
    stack = tmp_path / "s.yaml"
    stack.write_text(open(AWS).read().replace("public_key: keys/example.pub", "public_key: /dev/zero"))
    rc, out = _run("validate", str(stack))
    assert rc == 2 and f"{stack}:8: access.public_key: /dev/zero: this is a device, not a file" in out, out


def test_an_azure_cli_profile_that_is_a_device_is_refused(tmp_path):
    (tmp_path / "azure").mkdir()
    (tmp_path / "azure" / "azureProfile.json").symlink_to("/dev/zero")
    rc, out = _run("status", "-p", "azure", AZURE_CONFIG_DIR=str(tmp_path / "azure"))
    assert rc == 2 and "azureProfile.json: this is a device, not a file" in out and "Traceback" not in out, out


def test_the_reader_takes_a_regular_file_whole_and_stops_past_its_cap(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"x" * 100)
    assert userfiles.read_bytes(p, "a test file", 100) == b"x" * 100
    with pytest.raises(userfiles.FileRefused, match="at most 0 MB of a test file"):
        userfiles.read_bytes(p, "a test file", 99)
    with pytest.raises(FileNotFoundError):
        userfiles.read_bytes(tmp_path / "missing", "a test file", 100)
    with pytest.raises(userfiles.FileRefused, match="this is a directory, not a file"):
        userfiles.read_bytes(tmp_path, "a test file", 100)


def test_a_gcp_key_that_is_a_device_is_refused_before_google_auth_reads_it():
    rc, out = _run("status", "-p", "gcp", GOOGLE_APPLICATION_CREDENTIALS="/dev/zero", GOOGLE_CLOUD_PROJECT="p")
    assert rc == 2 and "/dev/zero: this is a device, not a file" in out and "GOOGLE_APPLICATION_CREDENTIALS" in out, out

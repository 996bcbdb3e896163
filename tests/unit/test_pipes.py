"""A closed pipe ends the command quietly, as git, ls and grep do (issue 29, item 3)."""

import subprocess

import pytest

from conftest import gpufleet_exe

PIPE_BYTES = 64 * 1024  # what a Linux pipe holds: an output that fits is written whole before the reader closes
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "COLUMNS": "100"}


# the Markdown table by region: one row per offer (since issue 29) is 14 KB, which a busy machine
# wrote whole into the pipe before the reader closed it, and the command ended 0 (seen in CI)
@pytest.mark.parametrize("args", [["compare", "resnet50", "--markdown", "--top", "0", "--by-region"],
                                  ["compare", "resnet50", "--csv"], ["--json", "catalog", "instances"],
                                  ["--json", "compare", "resnet50"]])
def test_a_reader_that_stops_early_ends_the_command_quietly(args):
    whole = subprocess.run([gpufleet_exe(), *args], capture_output=True, env=ENV, timeout=60).stdout
    assert len(whole) > PIPE_BYTES  # else the command may finish before the pipe is closed
    p = subprocess.Popen([gpufleet_exe(), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    # `| head -c 10`: read a little, then close the pipe (each output is larger than a pipe holds, 64 KiB,
    # so the command is still writing then)
    p.stdout.read(10)
    p.stdout.close()
    err = p.stderr.read().decode()
    rc = p.wait(timeout=60)
    assert err == "", err
    assert rc == 141  # 128 + SIGPIPE, what a shell reports for `git log | head`

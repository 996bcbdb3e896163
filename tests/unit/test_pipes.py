"""A closed pipe ends the command quietly, as git, ls and grep do (issue 29, item 3)."""

import subprocess

import pytest

from conftest import gpufleet_exe


@pytest.mark.parametrize("args", [["compare", "resnet50", "--markdown", "--top", "0"], ["compare", "resnet50", "--csv"],
                                  ["--json", "catalog", "instances"], ["--json", "compare", "resnet50"]])
def test_a_reader_that_stops_early_ends_the_command_quietly(args):
    p = subprocess.Popen([gpufleet_exe(), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "COLUMNS": "100"})
    # `| head -c 10`: read a little, then close the pipe (each output is larger than a pipe holds, 64 KiB,
    # so the command is still writing then)
    p.stdout.read(10)
    p.stdout.close()
    err = p.stderr.read().decode()
    rc = p.wait(timeout=60)
    assert err == "", err
    assert rc == 141  # 128 + SIGPIPE, what a shell reports for `git log | head`

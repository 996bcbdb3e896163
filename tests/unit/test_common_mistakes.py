"""Common mistakes are said with their cause and exit 1 or 2, never as "internal error" (issue 47,
item 7): an AWS profile that is not there, an access key without its secret, an AWS credentials
file that does not parse, `image plan --out` where no folder can be, a date in the config that is
no day, a GPUFLEET_PACKER that is not there. The AWS cases run botocore's own credential chain."""

import builtins
import errno
import io
import os
from pathlib import Path

import pytest

from conftest import ROOT, cli

AWS = str(ROOT / "stacks" / "examples" / "aws-training.yaml")


def _no_bug(r) -> None:
    assert "internal error" not in r.output and "a bug in gpufleet" not in r.output and "Traceback" not in r.output, \
        r.output


def test_an_aws_profile_that_is_not_there_is_named_with_the_way_out(monkeypatch):
    monkeypatch.setenv("AWS_PROFILE", "nosuch")
    r = cli("up", AWS, "--yes")
    _no_bug(r)
    assert r.exit_code == 2 and "aws: the profile 'nosuch' (AWS_PROFILE) is not configured" in r.output, r.output
    assert "aws configure list-profiles" in r.output, r.output


def test_an_access_key_without_its_secret_names_what_is_missing(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
    r = cli("check", AWS)
    _no_bug(r)
    assert r.exit_code == 2 and "aws: AWS_ACCESS_KEY_ID is set without AWS_SECRET_ACCESS_KEY" in r.output, r.output


def test_an_aws_credentials_file_that_does_not_parse_is_named(tmp_path, monkeypatch):
    bad = tmp_path / "credentials"
    bad.write_text("garbage[[[\nfoo\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(bad))
    r = cli("status", "-p", "aws")
    _no_bug(r)
    assert r.exit_code == 2 and f"aws: {bad} cannot be parsed" in r.output and "aws configure" in r.output, r.output


@pytest.mark.parametrize("command", [["image", "plan"], ["image", "plan", "--container"]])
def test_image_plan_out_where_no_folder_can_be_is_bad_input_and_writes_nothing(tmp_path, command):
    afile = tmp_path / "existing"
    afile.write_text("mine\n")
    for out, blocker in ((afile, afile), (Path("/dev/full/x"), Path("/dev/full"))):
        r = cli(*command, AWS, "--out", str(out))
        _no_bug(r)
        assert r.exit_code == 2 and f"{blocker} is" in r.output and "--out" in r.output, r.output
    assert afile.read_text() == "mine\n"


@pytest.mark.parametrize("fault", [errno.EROFS, errno.ENOSPC])
def test_image_plan_out_on_a_read_only_or_full_disk_is_work_not_done(tmp_path, monkeypatch, fault):
    """What a read-only mount or a full one gives to every write under ``out`` (simulated: a test
    may not mount, and root may write anywhere else)."""
    out = tmp_path / "out"
    real_open = builtins.open

    def refusing(file, mode="r", *a, **k):
        if str(file).startswith(str(out)) and set(mode) & set("wax+"):
            raise OSError(fault, os.strerror(fault), str(file))
        return real_open(file, mode, *a, **k)

    monkeypatch.setattr(builtins, "open", refusing)
    monkeypatch.setattr(io, "open", refusing)  # pathlib's write_text and write_bytes
    r = cli("image", "plan", AWS, "--out", str(out))
    _no_bug(r)
    assert r.exit_code == 1 and os.strerror(fault) in r.output and str(out) in r.output, r.output


def test_a_config_date_that_is_no_day_is_said_at_its_line(tmp_path, monkeypatch):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("prices:\n  - {provider: aws, instance_type: p4d.24xlarge, region: us-east-1, usd_per_hour: 20,\n"
                   "     source: mine, as_of: 2030-13-45}\n")
    monkeypatch.setenv("GPUFLEET_CONFIG", str(cfg))
    r = cli("compare", "resnet50")
    _no_bug(r)
    assert r.exit_code == 2 and f"{cfg}:3: prices[0].as_of: '2030-13-45' is not a date" in r.output, r.output


def test_a_packer_that_is_not_there_is_named(monkeypatch):
    monkeypatch.setenv("GPUFLEET_PACKER", "/nonexistent/packer")
    r = cli("image", "build", AWS)
    _no_bug(r)
    assert r.exit_code == 2 and "/nonexistent/packer (GPUFLEET_PACKER) cannot be run: No such file" in r.output, \
        r.output

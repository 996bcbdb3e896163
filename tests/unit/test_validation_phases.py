"""One run reports every problem it can (schema, cross-pool, catalog, software), each with its
file:line and key, and none that only follows from another; a stack path that is no file, or
YAML nested too deep, is refused at once in gpufleet's own words, whatever the PyYAML version."""

import os
import re
import resource
import subprocess
import sys

import pytest

from gpufleet import stacks
from gpufleet.errors import SpecError, SpecErrors

from conftest import cli

POOL = "  - {name: a, provider: aws, region: us-east-1, instance_type: p4d.24xlarge}\n"


def problems(write, text: str) -> list[SpecError]:
    with pytest.raises((SpecError, SpecErrors)) as e:
        stacks.load(write("stack.yaml", text))
    return getattr(e.value, "errors", [e.value])


def test_framework_versions_must_be_releases_gpufleet_knows(write):
    path = write("s.yaml", "name: s\nowner: o\nsoftware:\n  frameworks:\n    pytorch: '9.9'\n    tensorflow: abc\n"
                           f"pools:\n{POOL}")
    for cmd in ("validate", "plan"):
        r = cli(cmd, path)
        assert r.exit_code == 2, r.output
        assert f"{path}:5: software.frameworks.pytorch: PyTorch 9.9 is not a release gpufleet knows" in r.output
        assert "the nearest is 2.15.0; releases gpufleet knows: 2.4.0, 2.4.1" in r.output
        assert f"{path}:6: software.frameworks.tensorflow: 'abc' is not a TensorFlow version" in r.output
        assert "2.17.0" in r.output
    ok = write("ok.yaml", f"name: s\nowner: o\nsoftware: {{frameworks: {{pytorch: 2.7, jax: 0.5.0}}}}\npools:\n{POOL}")
    assert cli("validate", ok).exit_code == 0  # 2.7 is 2.7.0, as pip reads it


def test_schema_catalog_and_software_problems_come_in_one_run(write):
    errs = problems(write, """name: s
owner: o
software: {frameworks: {pytorch: '9.9'}}
pools:
  - name: a
    provider: aws
    region: us-east-1
    instance_type: p4d.24xlarge
    nodez: 2
  - name: b
    provider: aws
    region: us-east-1
    instance_type: p4d.24xlarg
""")
    assert [(e.line, e.key) for e in errs] == [(3, "software.frameworks.pytorch"), (9, "pools[0].nodez"),
                                              (13, "pools[1].instance_type")]
    assert "did you mean 'nodes'" in errs[1].hint and "p4d.24xlarge" in errs[2].hint


def test_cross_pool_problems_come_with_schema_problems_at_their_line(write):
    errs = problems(write, f"name: s\nowner: o\nsoftware: {{cuda: 12.x}}\npools:\n{POOL}{POOL}")
    assert [(e.line, e.key) for e in errs] == [(3, "software.cuda"), (6, "pools[1].name")]
    assert "two pools are named 'a'" in errs[1].problem


def test_a_part_that_failed_the_schema_gets_no_follow_on_problems(write):
    # pool a: an unknown key and an unknown instance type; access fails, so the Azure pool's "needs a
    # public key" would be nonsense; software fails, so its frameworks are not judged either; pool c
    # passed the schema, so its region is
    errs = problems(write, "name: s\nowner: o\naccess: {public_key: 'ssh-ed25519 AAAA k', user: Root}\n"
                           "software: {cuda: 12.x, frameworks: {pytorch: '9.9'}}\npools:\n"
                           "  - {name: a, provider: aws, region: us-east-1, instance_type: p4d.24xlarg, nodez: 2}\n"
                           "  - {name: b, provider: azure, region: eastus, instance_type: Standard_ND96asr_v4}\n"
                           "  - {name: c, provider: aws, region: us-east-l, instance_type: p4d.24xlarge}\n")
    assert [(e.line, e.key) for e in errs] == [(3, "access.user"), (4, "software.cuda"), (6, "pools[0].nodez"),
                                              (8, "pools[2].region")]


def test_yaml_nested_too_deep_by_indentation_is_refused_in_gpufleets_words(write):
    text = "name: s\n" + "".join("  " * i + f"k{i}:\n" for i in range(2000)) + "  " * 2000 + "v\n"
    path = write("deep.yaml", text)
    r = cli("validate", path)
    assert r.exit_code == 2 and re.search(rf"{re.escape(path)}:\d+: nested more than 64 levels deep", r.output), r.output


def _no_file(tmp_path, kind: str) -> str:
    p = tmp_path / f"{kind}.yaml"
    if kind == "loop":
        p.symlink_to(p.name)
    elif kind == "fifo":
        os.mkfifo(p)
    elif kind == "device":
        p.symlink_to("/dev/zero")
    else:
        p.mkdir()
    return str(p)


def _limited():
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # reading /dev/zero whole fails here, not the machine


@pytest.mark.parametrize("kind,needle,hint", [
    ("loop", "the path is a loop of symbolic links", "ls -l"),
    ("fifo", "this is a named pipe, not a file", "save it to a file first"),
    ("device", "this is a device, not a file", "give the path of a YAML file"),
    ("directory", "this is a directory, not a file", "give the path of a YAML file"),
])
@pytest.mark.parametrize("command", [["validate"], ["plan"], ["compare", "resnet50", "--stack"], ["up", "--yes"]])
def test_a_stack_path_that_is_no_file_is_refused_at_once(tmp_path, kind, needle, hint, command):
    path = _no_file(tmp_path, kind)
    # a process of its own: a read that never ends fails the test instead of hanging it
    r = subprocess.run([sys.executable, "-m", "gpufleet.cli", *command, path], capture_output=True, text=True,
                       timeout=60, preexec_fn=_limited, env={**os.environ, "COLUMNS": "300"})
    out = r.stdout + r.stderr
    assert r.returncode == 2 and f"{path}: {needle}" in out and hint in out and "Traceback" not in out, out



def test_a_link_loop_without_a_suffix_is_taken_for_the_stack_file_it_was_meant_to_be(tmp_path):
    p = tmp_path / "stack"
    p.symlink_to(p.name)
    r = cli("status", str(p))
    assert r.exit_code == 2 and f"{p}: the path is a loop of symbolic links" in r.output, r.output

"""`gpufleet examples`: the example stacks ship with gpufleet, so that a wheel user can list them,
print one and copy them (issue 47, item 14). The installed wheel doing the same from a folder outside
the tree is tests/test_wheel_install.py."""

import json

import pytest
import yaml

from conftest import EXAMPLES, ROOT, cli

KEYS = ROOT / "stacks" / "examples" / "keys"


def test_the_listing_names_every_example_with_its_providers_and_its_own_header():
    r = cli("--json", "examples")
    assert r.exit_code == 0, r.output
    listed = {e["name"]: e for e in json.loads(r.stdout)["examples"]}
    assert sorted(listed) == sorted(p.stem for p in EXAMPLES)
    for p in EXAMPLES:
        pools = yaml.safe_load(p.read_text())["pools"]
        assert set(listed[p.stem]["providers"]) == {x["provider"] for x in pools}, p.stem
    # the first sentence of each file's header comment, on one line (mixed.yaml's spans two lines)
    assert listed["aws-training"]["description"] == "Two p4d.24xlarge nodes (16x A100 40GB) with EFA and FSx for Lustre."
    assert listed["mixed"]["description"].startswith("A mixed fleet: on-demand A100s on AWS, spot L4s on GCP")
    assert listed["mixed"]["description"].endswith("and an owned rack.")
    assert listed["mixed"]["providers"] == ["aws", "gcp", "azure", "baremetal"]  # in the order the pools come
    assert listed["baremetal-rack"]["description"].endswith("with a Lustre file system.")  # not its second sentence
    table = cli("examples")
    assert table.exit_code == 0 and all(p.stem in table.stdout for p in EXAMPLES), table.output
    assert "gpufleet examples --copy" in table.stdout  # the way to take them


def test_one_example_prints_as_it_is_and_says_what_it_names_beside_it():
    r = cli("examples", "aws-training")
    assert r.exit_code == 0, r.output
    assert r.stdout == (ROOT / "stacks" / "examples" / "aws-training.yaml").read_text()
    # stdout is the stack alone (`> my.yaml`); the throw-away key it names is said on stderr
    assert "keys/example.pub" in r.stderr and "--copy" in r.stderr
    quiet = cli("examples", "baremetal-rack")
    assert quiet.exit_code == 0 and quiet.stderr == ""


def test_an_unknown_example_is_bad_input_with_the_near_name():
    r = cli("examples", "aws-trainig")
    assert r.exit_code == 2 and "unknown example stack 'aws-trainig'" in r.output and "aws-training" in r.output


def test_copy_makes_the_folder_and_every_copy_validates_there(tmp_path):
    dest = tmp_path / "new" / "stacks"
    r = cli("examples", "--copy", str(dest))
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in dest.glob("*.yaml")) == sorted(p.name for p in EXAMPLES)
    assert (dest / "keys" / "example.pub").read_text() == (KEYS / "example.pub").read_text()
    v = cli("validate", *[str(dest / p.name) for p in EXAMPLES])
    assert v.exit_code == 0, v.output
    again = cli("--json", "examples", "--copy", str(dest))  # the same files again: nothing to refuse
    assert again.exit_code == 0 and json.loads(again.stdout)["copied"] == [], again.output


def test_copy_of_one_example_takes_the_key_it_names(tmp_path):
    r = cli("--json", "examples", "gcp-a3", "--copy", str(tmp_path))
    assert r.exit_code == 0, r.output
    assert sorted(json.loads(r.stdout)["copied"]) == ["gcp-a3.yaml", "keys/example.pub"]
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == \
        ["gcp-a3.yaml", "keys/example.pub"]
    assert cli("validate", str(tmp_path / "gcp-a3.yaml")).exit_code == 0


def test_copy_refuses_to_overwrite_a_changed_file_and_writes_nothing(tmp_path):
    assert cli("examples", "--copy", str(tmp_path)).exit_code == 0
    mine = tmp_path / "aws-training.yaml"
    mine.write_text("name: mine\n")
    (tmp_path / "gcp-a3.yaml").unlink()
    r = cli("examples", "--copy", str(tmp_path))
    assert r.exit_code == 2 and str(mine) in r.output and "--force" in r.output and "Traceback" not in r.output
    assert mine.read_text() == "name: mine\n" and not (tmp_path / "gcp-a3.yaml").exists()  # nothing written
    forced = cli("examples", "--copy", str(tmp_path), "--force")
    assert forced.exit_code == 0, forced.output
    assert mine.read_text() == (ROOT / "stacks" / "examples" / "aws-training.yaml").read_text()
    assert (tmp_path / "gcp-a3.yaml").exists()


@pytest.mark.parametrize("blocker", ["file", "keys-file", "folder"])
def test_copy_into_a_file_or_onto_a_folder_is_bad_input(tmp_path, blocker):
    if blocker == "file":
        (tmp_path / "f").write_text("x")
        dest, named = tmp_path / "f" / "sub", tmp_path / "f"
    elif blocker == "keys-file":  # where the key's folder goes
        (tmp_path / "keys").write_text("x")
        dest, named = tmp_path, tmp_path / "keys"
    else:
        dest = tmp_path
        (tmp_path / "mixed.yaml").mkdir()
        named = tmp_path / "mixed.yaml"
    r = cli("examples", "--copy", str(dest))
    assert r.exit_code == 2 and str(named) in r.output and "Traceback" not in r.output, r.output
    assert [p.name for p in tmp_path.glob("*.yaml")] == (["mixed.yaml"] if blocker == "folder" else [])  # nothing written


def test_no_private_key_ships_with_the_examples():
    shipped = [p for p in (ROOT / "stacks" / "examples").rglob("*") if p.is_file()]
    assert shipped and not [p for p in shipped if "PRIVATE KEY" in p.read_text()]


def test_a_missing_stack_file_points_at_the_shipped_examples(tmp_path):
    r = cli("validate", str(tmp_path / "stacks" / "examples" / "aws-training.yaml"))
    assert r.exit_code == 2 and "file not found" in r.output
    assert "gpufleet examples --copy" in r.output and "live in stacks/examples" not in r.output

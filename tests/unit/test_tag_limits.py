"""Every value that becomes a tag or a label is checked against the rules of each cloud the stack
uses, by the clouds' own documents, and refused at its file:line before anything is planned (issue
47, item 11): a 1 MB owner went into the AWS gpufleet:owner tag. GCP's labels are checked as the
transform writes them (lowercased, escaped), not as the stack says them."""

import pytest

from conftest import ROOT, cli

EXAMPLES = ROOT / "stacks" / "examples"


def _stack(tmp_path, example: str, owner: str, name: str | None = None):
    text = (EXAMPLES / example).read_text()
    before = next(line for line in text.splitlines() if line.startswith("owner:"))
    text = text.replace(before, f"owner: {owner!r}" if "'" not in owner else f'owner: "{owner}"')
    if name:
        text = text.replace(next(line for line in text.splitlines() if line.startswith("name:")), f"name: {name}")
    path = tmp_path / example
    path.write_text(text)
    (tmp_path / "keys").mkdir(exist_ok=True)
    (tmp_path / "keys" / "example.pub").write_text((EXAMPLES / "keys" / "example.pub").read_text())
    return path


@pytest.mark.parametrize("command", ["validate", "plan"])
def test_a_megabyte_owner_is_refused_at_its_line_not_tagged(tmp_path, command):
    path = _stack(tmp_path, "aws-training.yaml", "x" * 1_000_000)
    r = cli(command, str(path))
    assert r.exit_code == 2, r.output[:600]
    assert f"{path}:3: owner: aws tag values take at most 256 characters: gpufleet:owner would be 1,000,000" in r.output, \
        r.output[:600]


@pytest.mark.parametrize("example,owner,said", [
    ("aws-training.yaml", "Jane Doe <jane@example.com>", "aws tags take letters, digits, spaces and _ . : / = + - @: "
                                                         "gpufleet:owner has '<', '>'"),
    ("aws-training.yaml", "aws:admin", "aws tag values may not begin with 'aws:'"),
    ("gcp-a3.yaml", "a.very.long.name.of.a.research.group@department.example-university.edu",
     "gcp labels take at most 63 characters: gpufleet-owner would be 73 "
     "(a_very_long_name_of_a_research_group_at_department_example-university_edu)"),
    ("azure-nd.yaml", "o" * 300, "azure tags take at most 256 characters: gpufleet:owner would be 300"),
])
def test_each_clouds_own_rule_is_said_with_the_stack_key(tmp_path, example, owner, said):
    path = _stack(tmp_path, example, owner)
    r = cli("validate", str(path))
    assert r.exit_code == 2 and f"{path}:3: owner: {said}" in r.output, r.output[:800]


@pytest.mark.parametrize("example", ["gcp-a3.yaml", "azure-nd.yaml"])
def test_an_owner_one_cloud_refuses_is_taken_where_the_others_allow_it(tmp_path, example):
    path = _stack(tmp_path, example, "Jane Doe <jane@example.com>")  # AWS refuses < and >; GCP escapes them
    r = cli("validate", str(path))
    assert r.exit_code == 0, r.output


def test_a_cluster_name_that_cannot_be_a_tag_or_a_name_is_refused():
    r = cli("plan", str(EXAMPLES / "aws-training.yaml"), "--cluster", "UPPER_bad@name")
    assert r.exit_code == 2 and "--cluster 'UPPER_bad@name' is not a valid cluster name" in r.output, r.output


def test_an_image_whose_gcp_label_would_be_cut_is_refused(tmp_path):
    path = _stack(tmp_path, "gcp-a3.yaml", "research@example.com", name="a-rather-long-stack-name-for-the-image")
    r = cli("image", "plan", str(path), "--out", str(tmp_path / "out"))
    assert r.exit_code == 2 and "gcp labels take at most 63 characters: gpufleet-image would be" in r.output, r.output
    assert not (tmp_path / "out").exists()

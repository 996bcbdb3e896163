"""The pillar files gpufleet hands Salt (salt-ssh's, configure.saltrun; a cloud node's, the node agent's)
reach a state verbatim: a value with ``{{ ... }}`` in it (a Prometheus alert rule's annotation) lands in
the managed file as written. Without ``#!json`` Salt's default renderer runs Jinja over the pillar
first and the whole pillar fails to render. Real salt-call --local (.salt-venv)."""

import json
import subprocess

import pytest

from gpufleet.clouds import node_agent
from gpufleet.configure import saltrun
from tests.conftest import salt_call

RULE = 'groups:\n- name: g\n  rules:\n  - alert: A\n    expr: up == 0\n    annotations: {summary: "{{ $labels.node }} down"}\n'


@pytest.mark.parametrize("writer", [saltrun.pillar_sls, node_agent.pillar_sls], ids=["salt-ssh", "node-agent"])
def test_a_pillar_value_with_jinja_braces_lands_as_written(writer, tmp_path):
    exe = salt_call()
    (tmp_path / "tree").mkdir()
    out = tmp_path / "rules.yml"
    (tmp_path / "tree" / "t.sls").write_text(f"t:\n  file.managed:\n    - name: {out}\n"
                                             "    - contents_pillar: monitoring:server:rules\n")
    (tmp_path / "pillar").mkdir()
    (tmp_path / "pillar" / "top.sls").write_text("base:\n  '*': [gpufleet]\n")
    (tmp_path / "pillar" / "gpufleet.sls").write_text(writer({"monitoring": {"server": {"rules": RULE}}}))
    (tmp_path / "minion").write_text(json.dumps({
        "file_client": "local", "file_roots": {"base": [str(tmp_path / "tree")]},
        "pillar_roots": {"base": [str(tmp_path / "pillar")]}, "root_dir": str(tmp_path),
        "cachedir": str(tmp_path / "cache"), "log_file": str(tmp_path / "log")}))
    r = subprocess.run([str(exe), "--local", "-c", str(tmp_path), "--out", "json", "state.apply", "t"],
                       capture_output=True, text=True, timeout=300)
    assert out.exists() and out.read_text() == RULE, r.stdout[-2000:] + r.stderr[-2000:]

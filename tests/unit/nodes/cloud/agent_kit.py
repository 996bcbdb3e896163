"""What the tests of the node agent share: a small state tree, and the agent's metadata rules kept off
the machine running them."""

import textwrap

import pytest

from gpufleet.clouds import node_agent

TREE = {"hello/init.sls": textwrap.dedent("""\
    hello-file-managed:
      file.managed:
        - name: {{ pillar['out'] }}/hello.txt
        - contents: {{ pillar['words'] }}
        - makedirs: True
    """), "broken/init.sls": "broken-cmd-run:\n  cmd.run:\n    - name: exit 3\n",
        "mount/init.sls": textwrap.dedent("""\
    mount-file-managed:
      file.managed:
        - name: {{ pillar['out'] }}/mount.txt
        - contents: mounted
        - makedirs: True
    """)}


@pytest.fixture(autouse=True)
def metadata_rules_elsewhere(monkeypatch):
    """The agent's metadata rules (tests/unit/test_metadata_guard.py applies them for real, in a network
    namespace of its own) are not made on the machine running these tests: iptables is `true` here."""
    monkeypatch.setattr(node_agent, "IPTABLES", ("true",))

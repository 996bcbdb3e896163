"""The user data that makes a cloud node configure itself: a short shell script carrying the
node agent (``node_agent.py`` with its comments and docstrings cut, xz + base85) and its configuration, no secrets.

It runs once from cloud-init (AWS ``user_data``, GCP ``startup-script``, Azure ``customData``):
installs the agent, a systemd timer that runs it every minute (so a new generation uploaded
by `gpufleet configure` is picked up, and a reboot is harmless), and runs it once at once.
AWS refuses user data over 16 KB (EC2 User Guide, "Run commands when you launch an EC2
instance with user data", 2026), the tightest of the three: ``render`` checks it.
"""

from __future__ import annotations

import ast
import base64
import io
import json
import lzma
import re
import tokenize
from pathlib import Path

USER_DATA_LIMIT = 16 * 1024
AGENT = Path(__file__).with_name("node_agent.py")
SALT_VERSION = "3008.3"  # what .salt-venv runs: the formulas are tested with it
SALT_VENV = "/opt/gpufleet/salt"
LOG = "/var/log/gpufleet/node.log"
# what a configuration value may hold: no credentials ever go into user data (the node's
# identity reads the bucket), so keys that look like one are refused outright
_SECRET_KEY = re.compile(r"secret|password|token$|access_key|sas|credential", re.I)


class BootstrapError(ValueError):
    """User data that a cloud would refuse, or that would carry a secret."""


AGENT_DOC = "gpufleet's node agent: what it does is in gpufleet/clouds/node_agent.py of the gpufleet package."


def agent_source() -> bytes:
    """The agent as nodes get it: its comments and docstrings (why the code is as it is, and how the
    agent and `up` talk through the bucket: for gpufleet's readers) cut, the module's to a line
    naming where it is, since every byte of user data counts (AWS refuses more than 16 KB). The code
    is the same, token for token, on the same lines: a traceback from a node names the checkout's
    line numbers."""
    return code_only(AGENT.read_text(), AGENT_DOC).encode()


def code_only(src: str, module_doc: str) -> str:
    """``src`` with each comment (as Python's tokenizer finds them: never a ``#`` inside a string) cut
    from its line and each docstring emptied (the module's: ``module_doc``), every line kept."""
    lines = src.splitlines(keepends=True)
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            lines[row - 1] = lines[row - 1][:col].rstrip() + "\n"
    tree = ast.parse(src)
    docs = [node.body[0] for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and ast.get_docstring(node, clean=False) is not None]
    for doc in sorted(docs, key=lambda d: d.lineno, reverse=True):
        first, last = lines[doc.lineno - 1], lines[doc.end_lineno - 1]
        text = module_doc if doc is tree.body[0] else ""
        lines[doc.lineno - 1:doc.end_lineno] = [first[:doc.col_offset] + '"""' + text + "\n" * (
            doc.end_lineno - doc.lineno) + '"""' + last[doc.end_col_offset:]]
    return "".join(lines)


def agent_payload() -> str:
    """The agent's source, xz-compressed (the same source gives the same user data) in base85 (RFC 1924's
    alphabet: no quote or backslash; 6% shorter than base64), which the node's python3 decodes (its lzma module is
    in the standard library of the python3 of Debian, Ubuntu and EL). xz, not gzip: 482 bytes less of the 16 KB
    AWS allows, measured 2026-11-27 on this agent (gzip -9 10,581 bytes, xz -9e 10,196)."""
    return base64.b85encode(lzma.compress(agent_source(), format=lzma.FORMAT_XZ,
                                          preset=9 | lzma.PRESET_EXTREME)).decode()


def config(cloud: str, *, cluster: str, pool: str, bucket: str, region: str | None = None,
           account: str | None = None, identity: str | None = None, endpoint: str | None = None,
           token_url: str | None = None, pip_args: list[str] | None = None, metadata: str = "root",
           ec2_endpoint: str | None = None) -> dict:
    """The agent's configuration: where its pool's bucket is and how to reach it (``endpoint`` and
    ``token_url`` replace the cloud's own only for tests and S3-compatible stores; ``ec2_endpoint``
    EC2's, which the monitor's lister asks, for tests and private endpoints), and who on the node
    may reach the cloud's metadata service (``metadata``: root, or all-users; spec.Access.metadata)."""
    cfg = {"cloud": cloud, "cluster": cluster, "pool": pool, "bucket": bucket, "region": region, "account": account,
           "identity": identity, "endpoint": endpoint, "ec2_endpoint": ec2_endpoint, "token_url": token_url,
           "log": LOG, "metadata": metadata,
           "salt": {"version": SALT_VERSION, "venv": SALT_VENV, "pip_args": pip_args or []}}
    return {k: v for k, v in cfg.items() if v is not None}


def render(cfg: dict, *, pre: str = "") -> str:
    """The bootstrap script for one pool's nodes. ``pre``: shell lines run first (AWS: mounting FSx)."""
    bad = [k for k in _walk(cfg) if _SECRET_KEY.search(k)]
    if bad:
        raise BootstrapError(f"the node configuration would carry {', '.join(bad)}: user data is readable by anyone "
                             "on the node; the node's cloud identity reads the bucket instead")
    script = f"""#!/bin/bash
# gpufleet: this node configures itself from cluster {cfg['cluster']}'s bucket (pool {cfg['pool']})
set -uo pipefail
mkdir -p /etc/gpufleet /opt/gpufleet /var/lib/gpufleet
mkdir -p -m 0700 /var/log/gpufleet && chmod 0700 /var/log/gpufleet
exec >>/var/log/gpufleet/bootstrap.log 2>&1
{pre.strip()}
cat > /etc/gpufleet/node.json <<'GPUFLEET_CONFIG'
{json.dumps(cfg, sort_keys=True)}
GPUFLEET_CONFIG
python3 -c 'import base64, lzma, sys; sys.stdout.buffer.write(lzma.decompress(base64.b85decode(sys.stdin.read().strip())))' \
  > /opt/gpufleet/node_agent.py <<'GPUFLEET_AGENT'
{agent_payload()}
GPUFLEET_AGENT
# Salt goes into a virtualenv: Ubuntu's python3 needs python3-venv for that
if [ ! -x {SALT_VENV}/bin/salt-call ] && ! python3 -c 'import ensurepip' 2>/dev/null; then
  if command -v apt-get >/dev/null; then apt-get update -q && apt-get install -y -q python3-venv
  else dnf install -y -q python3-pip; fi
fi
if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
  cat > /etc/systemd/system/gpufleet-node.service <<'UNIT'
[Unit]
Description=gpufleet: configure this node from its cluster's bucket
After=network-online.target
Wants=network-online.target
[Service]
Type=oneshot
ExecStart=/bin/sh -c 'exec /usr/bin/python3 /opt/gpufleet/node_agent.py >>{LOG} 2>&1'
UNIT
  cat > /etc/systemd/system/gpufleet-node.timer <<'UNIT'
[Unit]
Description=gpufleet: check for a new configuration every minute
[Timer]
OnBootSec=60
OnUnitInactiveSec=60
[Install]
WantedBy=timers.target
UNIT
  systemctl daemon-reload && systemctl enable gpufleet-node.timer
fi
python3 /opt/gpufleet/node_agent.py >>{LOG} 2>&1
status=$?
if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then systemctl start gpufleet-node.timer; fi
exit $status
"""
    size = len(script.encode())
    if size > USER_DATA_LIMIT:
        raise BootstrapError(f"the bootstrap is {size} bytes: AWS refuses user data over {USER_DATA_LIMIT}")
    return script


def _walk(d: dict, prefix: str = ""):
    for k, v in d.items():
        yield prefix + k
        if isinstance(v, dict):
            yield from _walk(v, prefix + k + ".")

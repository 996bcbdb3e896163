"""The bootstrap each cloud gets (clouds/bootstrap.py): the agent in user data, no secret, the size
limit."""

import ast
import base64
import json
import lzma

import pytest

from gpufleet.clouds import bootstrap


def _code(src: bytes) -> str:
    """The code of ``src`` as Python reads it, each node with its lines and first column (where a docstring
    ends differs), its docstrings emptied."""
    import ast
    import re

    tree = ast.parse(src)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and \
                ast.get_docstring(node, clean=False) is not None:
            node.body[0].value.value = ""
    return re.sub(r", end_col_offset=\d+", "", ast.dump(tree, include_attributes=True))


@pytest.mark.parametrize("cloud,extra", [("aws", {"region": "us-east-1"}), ("gcp", {}),
                                         ("azure", {"account": "gfabc", "identity": "0000-client"})])
def test_each_clouds_bootstrap_fits_carries_the_agent_and_no_secret(cloud, extra):
    cfg = bootstrap.config(cloud, cluster="c" * 40, pool="p" * 40, bucket="gpufleet-c-0123456789", **extra)
    script = bootstrap.render(cfg, pre="echo mounting\n" * 40)
    assert len(script.encode()) <= bootstrap.USER_DATA_LIMIT
    payload = script.split("<<'GPUFLEET_AGENT'\n", 1)[1].split("\nGPUFLEET_AGENT", 1)[0]
    shipped_agent = lzma.decompress(base64.b85decode(payload))
    assert shipped_agent == bootstrap.agent_source()
    # the code is the checkout's, node for node on the same lines and columns: the docstrings are emptied (the
    # module's cut to a line) and the comments cut from their lines
    assert _code(shipped_agent) == _code(bootstrap.AGENT.read_bytes())
    assert len(shipped_agent.split(b'"""', 2)[1].strip()) < 120
    assert b"#" not in shipped_agent.replace(b'"#', b"").replace(b"'#", b"")  # not one comment shipped
    ast.parse(shipped_agent, feature_version=(3, 9))  # as the oldest python3 of the images (Rocky 9's 3.9) reads it
    shipped = json.loads(script.split("<<'GPUFLEET_CONFIG'\n", 1)[1].split("\nGPUFLEET_CONFIG", 1)[0])
    assert shipped == cfg and shipped["salt"]["version"] == bootstrap.SALT_VERSION
    assert "systemctl enable gpufleet-node.timer" in script and "OnUnitInactiveSec=60" in script
    assert script == bootstrap.render(cfg, pre="echo mounting\n" * 40)  # same input, same user data


def test_a_secret_never_goes_into_user_data():
    cfg = bootstrap.config("aws", cluster="c", pool="p", bucket="b", region="us-east-1")
    cfg["aws_secret_access_key"] = "x"
    with pytest.raises(bootstrap.BootstrapError, match="aws_secret_access_key"):
        bootstrap.render(cfg)


def test_user_data_over_16_kb_is_refused():
    cfg = bootstrap.config("aws", cluster="c", pool="p", bucket="b", region="us-east-1")
    with pytest.raises(bootstrap.BootstrapError, match="AWS refuses user data over 16384"):
        bootstrap.render(cfg, pre="echo " + "x" * 8000)

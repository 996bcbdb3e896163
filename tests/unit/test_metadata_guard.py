"""Only root reaches the cloud's metadata service on a node (review O1): the node agent's rules applied
for real, by the agent's own code with the real iptables, in a network namespace of the test's own
where the metadata addresses are local listeners; a process of another user (uid 65534, through
setpriv) is refused there, root is not, DNS on port 53 stays open to everyone, a second run changes
nothing, and a pool that opts out (``metadata: all-users``) gets no rule."""

import itertools
import json
import os
import shutil
import subprocess
import textwrap

import pytest

from gpufleet.clouds import bootstrap, node_agent

PYTHON = "/usr/bin/python3"  # the system's: a user without a home runs it (a virtualenv's may be root's alone)
TOOLS = ("ip", "iptables", "setpriv")
needs_netns = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists(PYTHON) or not all(map(shutil.which, TOOLS)),
                                 reason="needs root, ip, iptables, setpriv and /usr/bin/python3")
NOBODY = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
ADDRESSES = ("169.254.169.254", "168.63.129.16")
_names = itertools.count()

LISTENER = textwrap.dedent("""\
    import socket, sys, threading
    def serve(addr, port):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((addr, port))
        s.listen()
        while True:
            s.accept()[0].close()
    for addr in sys.argv[1:]:
        for port in (80, 53):
            threading.Thread(target=serve, args=(addr, port), daemon=True).start()
    print("listening", flush=True)
    threading.Event().wait()
    """)
CONNECT = textwrap.dedent("""\
    import socket, sys
    try:
        socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()
        print("connected")
    except OSError as e:
        print(type(e).__name__)
    """)
# the agent's own module, its boot unit's mode (`--metadata`), with systemd's folder pointed nowhere: a test
# machine run by systemd keeps its units
AGENT = textwrap.dedent("""\
    import sys
    sys.path.insert(0, sys.argv[1])
    import node_agent
    node_agent.SYSTEMD = "/nonexistent"
    sys.exit(node_agent.main(["node_agent.py", sys.argv[2], "--metadata"]))
    """)


@pytest.fixture
def netns():
    """A network namespace whose loopback holds the metadata addresses, each listening on 80 and 53."""
    name = f"gfmeta{os.getpid()}x{next(_names)}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        for a in ADDRESSES:
            subprocess.run(["ip", "-n", name, "addr", "add", f"{a}/32", "dev", "lo"], check=True)
        listener = subprocess.Popen(["ip", "netns", "exec", name, PYTHON, "-c", LISTENER, *ADDRESSES],
                                    stdout=subprocess.PIPE, text=True)
        try:
            assert listener.stdout.readline().strip() == "listening"
            yield name
        finally:
            listener.kill()
            listener.wait()
    finally:
        subprocess.run(["ip", "netns", "del", name], check=True)


def connect(ns: str, addr: str, port: int, *, as_root: bool) -> str:
    cmd = ["ip", "netns", "exec", ns, *([] if as_root else NOBODY), PYTHON, "-c", CONNECT, addr, str(port)]
    return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=60).stdout.strip()


def guard(ns: str, tmp_path, cloud: str, metadata: str) -> subprocess.CompletedProcess:
    cfg = tmp_path / "node.json"
    cfg.write_text(json.dumps(bootstrap.config(cloud, cluster="c", pool="p", bucket="b", metadata=metadata)))
    return subprocess.run(["ip", "netns", "exec", ns, PYTHON, "-c", AGENT, str(bootstrap.AGENT.parent), str(cfg)],
                          capture_output=True, text=True, timeout=120)


def rules(ns: str, *args: str) -> list[str]:
    return subprocess.run(["ip", "netns", "exec", ns, "iptables", "-S", *args], capture_output=True, text=True,
                          check=True).stdout.splitlines()


@needs_netns
@pytest.mark.parametrize("cloud", ["aws", "gcp", "azure"])
def test_only_root_reaches_the_metadata_service(netns, tmp_path, cloud):
    guarded = node_agent.METADATA[cloud]
    assert connect(netns, "169.254.169.254", 80, as_root=False) == "connected"  # open before the agent runs
    r = guard(netns, tmp_path, cloud, "root")
    assert r.returncode == 0, r.stdout + r.stderr
    for addr in guarded:
        assert connect(netns, addr, 80, as_root=False) == "ConnectionRefusedError", addr
        assert connect(netns, addr, 80, as_root=True) == "connected", addr
        assert connect(netns, addr, 53, as_root=False) == "connected", addr  # DNS (GCP's, Azure's resolver)
    for addr in set(ADDRESSES) - set(guarded):  # AWS and GCP have no WireServer: left as it is
        assert connect(netns, addr, 80, as_root=False) == "connected", addr
    first = rules(netns, "OUTPUT")
    assert first[1:1 + len(guarded)] == [f"-A OUTPUT -d {a}/32 -p tcp -j GPUFLEET-METADATA" for a in guarded], first
    assert guard(netns, tmp_path, cloud, "root").returncode == 0  # the timer's next run: nothing changes
    assert rules(netns, "OUTPUT") == first


@needs_netns
def test_a_pool_that_opts_out_gets_no_rule_and_a_changed_rule_is_put_back(netns, tmp_path):
    assert guard(netns, tmp_path, "azure", "root").returncode == 0
    # someone (root) deletes the owner rule: the next run puts the chain back as it should be
    subprocess.run(["ip", "netns", "exec", netns, "iptables", "-D", "GPUFLEET-METADATA", "-m", "owner",
                    "--uid-owner", "0", "-j", "RETURN"], check=True)
    assert connect(netns, "169.254.169.254", 80, as_root=True) == "ConnectionRefusedError"
    assert guard(netns, tmp_path, "azure", "root").returncode == 0
    assert connect(netns, "169.254.169.254", 80, as_root=True) == "connected"
    assert connect(netns, "169.254.169.254", 80, as_root=False) == "ConnectionRefusedError"
    # access: {metadata: all-users}: every rule of gpufleet's goes, and job users reach the node's role
    assert guard(netns, tmp_path, "azure", "all-users").returncode == 0
    for addr in ADDRESSES:
        assert connect(netns, addr, 80, as_root=False) == "connected", addr
    assert not [r for r in rules(netns) if "GPUFLEET" in r]


def test_the_agent_does_not_read_the_pools_configuration_when_the_rules_fail(tmp_path, monkeypatch):
    """Fail closed: rules that cannot be made (no iptables, a kernel without the owner match) stop the
    run before the pool's configuration (its secrets) is read, and the status says why."""
    monkeypatch.setattr(node_agent, "STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(node_agent, "IPTABLES", ("false",))
    monkeypatch.setenv("GPUFLEET_NODE_ID", "i-1")
    read, written = [], {}

    class Store:
        def __init__(self, cfg):
            pass

        def get(self, key):
            read.append(key)
            raise node_agent.NotThere(key)

        def put(self, key, body):
            written[key] = json.loads(body)

        def writer(self, nid):
            return nid

    monkeypatch.setitem(node_agent.STORES, "aws", Store)
    cfg = bootstrap.config("aws", cluster="c", pool="gpu", bucket="b", region="us-east-1")
    assert node_agent.run(cfg) == 1
    (status,) = written.values()
    assert not read and status["ok"] is False
    assert "only root may reach the metadata service" in status["failed"][0]["comment"], status


def test_every_pool_says_who_reaches_the_metadata_service(cat, tmp_path):
    """The stack's `access.metadata` (root, the default, or all-users) and a pool's own `metadata`
    reach each pool's node configuration, in the user data `plan` renders."""
    from gpufleet import stacks
    from gpufleet.engine import plan as planner

    from conftest import ROOT

    text = (ROOT / "stacks" / "examples" / "aws-training.yaml").read_text().replace(
        "keys/example.pub", str(ROOT / "stacks" / "examples" / "keys" / "example.pub"))
    path = tmp_path / "s.yaml"
    path.write_text(text)
    default = _metadata_of(planner.plan(stacks.load(path, cat), cat, workers=1))
    assert default and set(default.values()) == {"root"}
    first = next(iter(default))
    path.write_text(text.replace(f"  - name: {first}\n", f"  - name: {first}\n    metadata: all-users\n", 1))
    assert _metadata_of(planner.plan(stacks.load(path, cat), cat, workers=1)) == {**default, first: "all-users"}


def _metadata_of(plan) -> dict[str, str]:
    import base64

    out = {}
    for r in plan.cloud_resources:
        if r.type == "aws:ec2/launchTemplate:LaunchTemplate":
            script = base64.b64decode(r.inputs["userData"]).decode()
            cfg = json.loads(script.split("<<'GPUFLEET_CONFIG'\n", 1)[1].split("\nGPUFLEET_CONFIG", 1)[0])
            out[cfg["pool"]] = cfg["metadata"]
    return out

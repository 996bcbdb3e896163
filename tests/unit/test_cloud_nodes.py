"""Cloud nodes configure themselves: the bootstrap each cloud gets, the node agent against moto's
S3 (real SigV4, real STS, real Salt from .salt-venv on a small state tree), and the wait that
reads the statuses back. The end-to-end run on the test rack is tests/integration/test_cloud_nodes_e2e.py."""

import ast
import base64
import datetime as dt
import gzip
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from gpufleet.clouds import bootstrap, node_agent
from gpufleet.nodes.cloud import channel as cloudnodes

from conftest import ROOT

CREDS = {"key": "AKIDEXAMPLE", "secret": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "token": "tok/en="}


@pytest.fixture(autouse=True)
def _metadata_rules_elsewhere(monkeypatch):
    """The agent's metadata rules (tests/unit/test_metadata_guard.py applies them for real, in a network
    namespace of its own) are not made on the machine running these tests: iptables is `true` here."""
    monkeypatch.setattr(node_agent, "IPTABLES", ("true",))


def _signed_alike(signer_class, service: str, region: str, method: str, url: str, body: bytes) -> None:
    """The agent's signature of a request is botocore's (``signer_class``), made at the same moment."""
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    req = AWSRequest(method=method, url=url, data=body, headers={
        "x-amz-content-sha256": node_agent.hashlib.sha256(body).hexdigest(), "x-amz-security-token": CREDS["token"]})
    signer_class(Credentials(CREDS["key"], CREDS["secret"], CREDS["token"]), service, region).add_auth(req)
    now = dt.datetime.strptime(req.context["timestamp"], "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.timezone.utc)
    ours = node_agent.sigv4_headers(method, url, region, service, CREDS, body, now=now)
    assert ours["authorization"] == req.headers["Authorization"], url


def test_sigv4_signature_is_botocores():
    """The agent signs its STS request itself (stdlib only on the node): the same headers as botocore's
    generic signer (S3's own rule for the path: the test after this one)."""
    from botocore.auth import SigV4Auth

    _signed_alike(SigV4Auth, "sts", "us-east-1", "GET",
                  "https://sts.us-east-1.amazonaws.com/?Version=2011-06-15&Action=GetCallerIdentity", b"")


@pytest.mark.parametrize("endpoint", [None, "http://127.0.0.1:5000"])
def test_the_agents_s3_requests_are_signed_as_s3_signs_them(endpoint):
    """S3 signs the request's path as it is sent, encoded once (botocore's S3SigV4Auth does not
    normalise or re-encode it); status keys hold the role session's user id, so a ':' is sent as
    %3A. Signed as %253A, every status PUT of every AWS node was refused (issue 30, item 1)."""
    from botocore.auth import S3SigV4Auth

    store = node_agent.S3({"bucket": "gpufleet-c-0123", "region": "eu-west-1", "endpoint": endpoint})
    for method, key, body in (("PUT", "status/trainers/AROAEXAMPLEID:i-0abc123.json", b'{"ok": true}'),
                              ("GET", "pools/my pool/current.json", b""),
                              ("GET", "tree/a+b=c~d.tar.gz", b"")):
        url = store.url(key)  # exactly what the agent sends
        assert ("%3A" in url) == (":" in key)
        _signed_alike(S3SigV4Auth, "s3", "eu-west-1", method, url, body)


def test_a_signature_checking_s3_accepts_the_agents_status_put(iam_moto, monkeypatch):
    """The node's own path, against a server that checks signatures: an instance role's session
    (its aws:userid is ``AROA...:<session>``, so the status key has a ':'), a security token, and
    a key with a space. Before issue 30's fix every status PUT here was SignatureDoesNotMatch."""
    allow = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})
    iam = iam_moto.client("iam")
    role = iam.create_role(RoleName="node", AssumeRolePolicyDocument=json.dumps({
        "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}]}))
    iam.put_role_policy(RoleName="node", PolicyName="all", PolicyDocument=allow)
    iam_moto.client("s3").create_bucket(Bucket="gpufleet-c-0123")
    session = iam_moto.client("sts").assume_role(RoleArn=role["Role"]["Arn"], RoleSessionName="i-0abc123")["Credentials"]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", session["AccessKeyId"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", session["SecretAccessKey"])
    monkeypatch.setenv("AWS_SESSION_TOKEN", session["SessionToken"])
    store = node_agent.S3({"bucket": "gpufleet-c-0123", "region": "us-east-1", "endpoint": iam_moto.url})
    writer = store.writer("i-0abc123")
    assert writer.startswith("AROA") and writer.endswith(":i-0abc123")
    for k in (f"status/trainers/{writer}.json", "pools/my pool/current.json"):
        store.put(k, b'{"ok": true}')
        assert store.get(k) == b'{"ok": true}'
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")  # the server does check
    with pytest.raises(node_agent.AgentError, match="403"):
        store.put("status/trainers/x.json", b"{}")


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
    shipped_agent = gzip.decompress(base64.b85decode(payload))
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


# --- the agent against moto's S3 ---------------------------------------------------------------

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


@pytest.fixture
def bucket(aws, tmp_path, monkeypatch):
    """A bucket in moto with a small state tree and a pool document, and node credentials from
    sts:AssumeRole with the node's id as the session name (what EC2 does for an instance role)."""
    import boto3

    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="gpufleet-t-1")
    root = tmp_path / "tree"
    for rel, text in TREE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    archive, sha = cloudnodes.tree_archive(root)
    store = cloudnodes.cloud("aws").objects({"cloud": "aws", "name": "gpufleet-t-1", "region": "us-east-1"})
    iam = boto3.client("iam", region_name="us-east-1")
    role = iam.create_role(RoleName="t-nodes", AssumeRolePolicyDocument="{}")["Role"]
    creds = boto3.client("sts", region_name="us-east-1").assume_role(
        RoleArn=role["Arn"], RoleSessionName="i-0node1")["Credentials"]
    node_env = {"AWS_ACCESS_KEY_ID": creds["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": creds["SecretAccessKey"],
                "AWS_SESSION_TOKEN": creds["SessionToken"], "GPUFLEET_NODE_ID": "i-0node1"}
    monkeypatch.setattr(node_agent, "STATE_DIR", str(tmp_path / "node-state"))
    cfg = bootstrap.config("aws", cluster="t", pool="gpu", bucket="gpufleet-t-1", region="us-east-1",
                           endpoint=aws.url)
    cfg["salt"]["venv"] = str(ROOT / ".salt-venv")  # the image's Salt: this machine's
    return {"store": store, "archive": archive, "sha": sha, "cfg": cfg, "env": node_env, "out": tmp_path / "out",
            "role_id": role["RoleId"]}


def _document(b, states, words="hi", tree=None, node_states=None):
    doc = {"tree": tree or b["sha"], "states": states, "without_gpu": {"apply": states, "rehearse": []},
           "pillar": {"out": str(b["out"]), "words": words, "hello": {"words": words}}}
    if node_states is not None:
        doc["node_states"] = node_states
    doc["generation"] = cloudnodes.hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]
    return doc


def _as_node(b, monkeypatch):
    for k, v in b["env"].items():
        monkeypatch.setenv(k, v)


def test_a_node_applies_its_pool_reports_and_then_does_nothing(bucket, monkeypatch):
    b = bucket
    doc = _document(b, ["hello"])
    cloudnodes.publish(b["store"], {"gpu": doc}, b["archive"], b["sha"])
    with monkeypatch.context() as m:
        _as_node(b, m)
        assert node_agent.run(b["cfg"]) == 0
    assert (b["out"] / "hello.txt").read_text() == "hi\n"
    keys, pages = b["store"].list("status/")
    # the key is the caller's aws:userid (role id:instance id): the one the node's policy lets it write
    assert [k for k, _ in keys] == [f"status/gpu/{b['role_id']}:i-0node1.json"] and pages == 1
    target = cloudnodes.NodeTarget("gpu", 0, "i-0node1", "10.64.1.4")
    (r,) = cloudnodes.wait(b["store"], [target], {"gpu": doc["generation"]}, timeout_s=5, poll_s=0.1)
    assert r.state == "configured" and r.changed == 1 and r.facts["kernel"] and r.log == bootstrap.LOG
    with monkeypatch.context() as m:  # the timer's next run: at this generation already, nothing happens
        _as_node(b, m)
        assert node_agent.run(b["cfg"]) == 0
    assert b["store"].list("status/")[0] == keys


# a salt-call that records, while it runs, the modes of the pillar it was given and of the folders
# holding it, and the umask it runs under; then answers as salt-call does when nothing changed
RECORDING_SALT_CALL = """#!{python}
import json, os, sys
work = sys.argv[sys.argv.index("-c") + 1]
state = os.path.dirname(work)
seen = {{p: oct(os.stat(p).st_mode & 0o777) for p in (state, work, work + "/pillar", work + "/pillar/gpufleet.sls")}}
umask = os.umask(0); os.umask(umask)
json.dump({{"modes": seen, "umask": oct(umask), "pillar": open(work + "/pillar/gpufleet.sls").read()}},
          open({record!r}, "w"))
print(json.dumps({{"local": {{}}}}))
"""


def test_the_pillar_is_roots_alone_while_salt_runs_and_gone_after(bucket, monkeypatch, tmp_path):
    """Issue 48 item 1: the pillar holds the munge key. Under the usual umask (022) the agent used
    to leave it 0644 in 0755 folders for good; now it is 0600 in 0700 folders for the run only,
    and Salt still runs under 022 (what it installs, slurm.conf among it, is for every user)."""
    b = bucket
    venv = tmp_path / "salt-venv"
    (venv / "bin").mkdir(parents=True)
    record = tmp_path / "salt-call.json"
    (venv / "bin" / "salt-call").write_text(RECORDING_SALT_CALL.format(python=sys.executable, record=str(record)))
    (venv / "bin" / "salt-call").chmod(0o755)
    cfg = {**b["cfg"], "salt": {**b["cfg"]["salt"], "venv": str(venv)}}
    doc = _document(b, ["hello"], words="munge-key-stand-in")
    cloudnodes.publish(b["store"], {"gpu": doc}, b["archive"], b["sha"])
    umask = os.umask(0o022)
    try:
        with monkeypatch.context() as m:
            _as_node(b, m)
            assert node_agent.run(cfg) == 0
        assert os.umask(0o022) == 0o022  # the agent gives the caller its umask back
    finally:
        os.umask(umask)
    seen = json.loads(record.read_text())
    state = node_agent.STATE_DIR
    assert "munge-key-stand-in" in seen["pillar"]
    assert seen["modes"] == {state: "0o700", f"{state}/salt": "0o700", f"{state}/salt/pillar": "0o700",
                             f"{state}/salt/pillar/gpufleet.sls": "0o600"}
    assert seen["umask"] == "0o22"
    assert not os.path.exists(f"{state}/salt/pillar/gpufleet.sls")  # gone once salt-call is done
    for name in ("status.json", "applied.json"):
        assert oct(os.stat(f"{state}/{name}").st_mode & 0o777) == "0o600", name


def test_a_failing_state_and_a_tampered_tree_are_reported(bucket, monkeypatch):
    b = bucket
    doc = _document(b, ["hello", "broken"])
    cloudnodes.publish(b["store"], {"gpu": doc}, b["archive"], b["sha"])
    target = cloudnodes.NodeTarget("gpu", 0, "i-0node1", "10.64.1.4")
    with monkeypatch.context() as m:
        _as_node(b, m)
        assert node_agent.run(b["cfg"]) == 1
    (r,) = cloudnodes.wait(b["store"], [target], {"gpu": doc["generation"]}, timeout_s=5, poll_s=0.1)
    assert r.state == "failed" and r.failed[0]["state"] == "broken-cmd-run" and "node.log" in r.hint
    # someone replaces the archive in the bucket: the node refuses it and says why
    b["store"].put(f"tree/{b['sha']}.tar.gz", b["archive"][:-10] + b"0123456789")
    doc2 = _document(b, ["hello"], words="again")
    cloudnodes.publish(b["store"], {"gpu": doc2}, b["archive"], b["sha"])  # the tree object exists: kept
    with monkeypatch.context() as m:
        _as_node(b, m)
        assert node_agent.run(b["cfg"]) == 1
    (r,) = cloudnodes.wait(b["store"], [target], {"gpu": doc2["generation"]}, timeout_s=5, poll_s=0.1)
    assert r.state == "failed" and "SHA-256" in r.error and "refused" in r.error
    assert (b["out"] / "hello.txt").read_text() == "hi\n"  # nothing of the tampered tree was applied


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


class _Store:
    """An in-memory ObjectStore: what the wait reads (lists counted by the wait itself)."""

    def __init__(self):
        self.objects, self.gets = {}, 0

    def put(self, key, body):
        self.objects[key] = body

    def get(self, key):
        self.gets += 1
        return self.objects[key]

    def exists(self, key):
        return key in self.objects

    def list(self, prefix):
        keys = sorted(k for k in self.objects if k.startswith(prefix))
        return [(k, str(hash(self.objects[k]))) for k in keys], max(1, -(-len(keys) // 1000))


def test_a_node_verifies_itself_after_applying_and_again_when_asked(bucket, monkeypatch, tmp_path):
    """The tree carries the verify bundle; the pool document the expectations; the agent runs the
    checks after applying (stand-in tools replaying a 1x L4 node: tests/verify_standin.py) and puts
    the report in its status; `gpufleet verify` asks again through pools/<pool>/verify.json."""
    import threading
    from types import SimpleNamespace

    from gpufleet.verify import bundle
    from tests.verify_standin import standins

    b = bucket
    root = tmp_path / "tree2"
    for rel, text in TREE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    archive, sha = cloudnodes.tree_archive(root, extra={cloudnodes.VERIFY_BUNDLE: bundle.build()[0]})
    expect = {"gpus": {"count": 1, "model": "L4", "family": "L4", "memory_gb": 24, "pcie_gen": 4},
              "driver": "570", "fatal_xids": [79], "required": ["gpu.count", "health.xid"]}
    doc = _document(b, ["hello"], tree=sha)
    doc["verify"] = expect
    cloudnodes.publish(b["store"], {"gpu": doc}, archive, sha)
    bin_dir = standins(tmp_path / "tools", ROOT / "tests" / "data" / "verify" / "l4x1")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    with monkeypatch.context() as m:
        _as_node(b, m)
        assert node_agent.run(b["cfg"]) == 0
    (r,) = cloudnodes.wait(b["store"], [cloudnodes.NodeTarget("gpu", 0, "i-0node1", None)], {"gpu": doc["generation"]},
                           timeout_s=5, poll_s=0.1)
    assert r.state == "configured" and r.verify["verdict"] == "pass" and r.verify["request"] == doc["generation"]
    assert {c["check"]: c["status"] for c in r.verify["checks"]}["gpu.count"] == "pass"

    (cap := tmp_path / "tools" / "captures" / "journal.txt").write_text(
        (ROOT / "tests" / "data" / "verify" / "journal-xid79.txt").read_text())
    outputs = {"pools": {"gpu": {"bucket": {"name": "gpufleet-t-1", "cloud": "aws", "region": "us-east-1"}}}}
    node = SimpleNamespace(pool="gpu", idx=0, node_id="i-0node1", private_ip="10.64.1.4")
    got = {}
    asking = threading.Thread(target=lambda: got.update(answers=cloudnodes.verify_pools(
        outputs, [node], {"gpu": expect}, level="quick", timeout_s=300, poll_s=0.1, stores={"gpufleet-t-1": b["store"]})))
    asking.start()
    while not b["store"].exists("pools/gpu/verify.json"):
        time.sleep(0.05)
    with monkeypatch.context() as m:  # the timer's next run: nothing to apply, a verification to run
        _as_node(b, m)
        assert node_agent.run(b["cfg"]) == 1
    asking.join(timeout=300)
    ((target, report),) = got["answers"]
    assert target.node_id == "i-0node1" and report["verdict"] == "fail" and cap.exists()
    assert [f["code"] for f in report["failures"]] == ["GF-XID-FATAL"]
    with monkeypatch.context() as m:  # once per request
        _as_node(b, m)
        assert node_agent.run(b["cfg"]) == 0


def test_the_wait_names_who_never_answered_and_reads_each_status_once():
    store, clock = _Store(), _Clock()
    targets = [cloudnodes.NodeTarget("gpu", i, f"i-{i}", f"10.0.0.{i}") for i in range(3)]
    store.put("status/gpu/AROAROLE:i-0.json", json.dumps({"node_id": "i-0", "pool": "gpu", "ok": True,
                                                          "generation": "g2", "changed": 4}).encode())
    store.put("status/gpu/AROAROLE:i-1.json", json.dumps({"node_id": "i-1", "pool": "gpu", "ok": True,
                                                          "generation": "g1"}).encode())
    stats = cloudnodes.WaitStats()
    reports = cloudnodes.wait(store, targets, {"gpu": "g2"}, timeout_s=60, poll_s=5, clock=clock, sleep=clock.sleep,
                              stats=stats)
    assert [r.state for r in reports] == ["configured", "timeout", "timeout"]  # i-1 is on the old generation
    assert "bootstrap.log" in reports[2].hint and "after 60s" in reports[2].error
    assert stats.polls == 13 and stats.lists == 13 and store.gets == 2  # one list per poll, each status read once


def test_an_unchanged_configuration_reports_no_changes():
    store, clock = _Store(), _Clock()
    store.put("status/gpu/i-0.json", json.dumps({"node_id": "i-0", "pool": "gpu", "ok": True, "generation": "g1",
                                                 "changed": 7}).encode())
    (r,) = cloudnodes.wait(store, [cloudnodes.NodeTarget("gpu", 0, "i-0", None)], {"gpu": "g1"},
                           unchanged=frozenset({"gpu"}), clock=clock, sleep=clock.sleep)
    assert r.state == "current" and r.ok and r.changed == 0



SLURM_STACK = """
name: sl
owner: ops@example.com
access: {public_key: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpufleetTestKeyOnlyNotARealKeyAAAAAAAAAAA t@example.com"}
slurm: {}
pools:
  - {name: ctl, provider: aws, region: us-east-1, instance_type: g4dn.xlarge, image: ubuntu-24.04, role: controller,
     nodes: 1}
  - {name: gpu, provider: aws, region: us-east-1, instance_type: g6.12xlarge, image: ubuntu-24.04, nodes: 2}
"""


class _Nodes:
    """Cloud nodes as their agents answer: each applies its pool's current document once per
    generation and writes a status with its facts; ``applied`` records (node, states, the slurm pillar)."""

    def __init__(self, store, nodes, says: dict[str, dict] | None = None):
        import threading

        self.store, self.nodes, self.applied, self.probes = store, nodes, [], {}
        self.says = says or {}  # node id -> facts it claims instead of its own
        self.done: dict[str, str] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop.wait(0.02):
            for i, n in enumerate(self.nodes):
                key = f"pools/{n.pool}/current.json"
                if not self.store.exists(key):
                    continue
                doc = json.loads(self.store.objects[key])
                if self.done.get(n.node_id) == doc["generation"]:
                    continue
                self.done[n.node_id] = doc["generation"]
                self.applied.append((n.node_id, doc["states"], doc["pillar"].get("slurm")))
                self.probes[n.node_id] = doc.get("probe")
                facts = {"hostname": f"ip-10-0-0-{i + 10}", "address": f"10.0.0.{i + 10}", "cpus": 48,
                         "cpu_topology": [1, 24, 2], "mem_gib": 186.5, "gpu_count": 0 if n.pool == "ctl" else 4,
                         **self.says.get(n.node_id, {})}
                self.store.put(f"status/{n.pool}/{n.node_id}.json", json.dumps(
                    {"node_id": n.node_id, "pool": n.pool, "ok": True, "generation": doc["generation"],
                     "facts": facts}).encode())


def test_slurm_on_cloud_pools_is_rendered_from_what_the_nodes_say_in_a_second_round(tmp_path, monkeypatch):
    """A first round applies all but Slurm and brings each node's facts; the second carries one
    slurm.conf rendered from them (the nodes' own names, addresses, CPUs, memory and GPUs) to every
    pool. Once the statuses say all that, a later configure is one round."""
    from types import SimpleNamespace

    from gpufleet import catalog
    from gpufleet.configure import slurm
    from gpufleet.fleet import stacks

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    cat = catalog.load(use_config=False)
    (tmp_path / "sl.yaml").write_text(SLURM_STACK)
    st = stacks.load(tmp_path / "sl.yaml", cat)
    store = _Store()
    ref = {"name": "b", "cloud": "aws", "region": "us-east-1"}
    outputs = {"pools": {"ctl": {"bucket": ref}, "gpu": {"bucket": ref}}}
    nodes = [SimpleNamespace(pool="ctl", idx=0, node_id="i-c", private_ip="10.0.0.10"),
             *(SimpleNamespace(pool="gpu", idx=i, node_id=f"i-g{i}", private_ip=f"10.0.0.{11 + i}") for i in range(2))]
    agents = _Nodes(store, nodes)
    agents.thread.start()

    keys = []

    def configure():
        def pillars(facts, published):
            keys.append(published)
            return slurm.pool_pillars(st, "sl", cat, facts, expectations={}, bundle=b"PK", key=published or b"k" * 32)
        return cloudnodes.configure_pools(st, cat, "sl", outputs, nodes, stores={"b": store}, timeout_s=300,
                                          poll_s=0.05, scheduler=pillars)

    try:
        reports = configure()
        assert [r.state for r in reports] == ["configured"] * 3
        first, second = agents.applied[:3], agents.applied[3:]
        assert all("slurm" not in states and pil is None for _, states, pil in first)
        assert sorted(n for n, _, _ in second) == ["i-c", "i-g0", "i-g1"]
        assert all(states[-1] == "slurm" and pil for _, states, pil in second)
        pillars = {n: pil for n, _, pil in second}
        conf = pillars["i-g0"]["files"]["slurm.conf"]
        assert len({p["files"]["slurm.conf"] for p in pillars.values()}) == 1
        assert "SlurmctldHost=ip-10-0-0-10(10.0.0.10)" in conf
        assert ("NodeName=ip-10-0-0-11 NodeAddr=10.0.0.11 CPUs=48 Sockets=1 CoresPerSocket=24 ThreadsPerCore=2 "
                "RealMemory=181427 Gres=gpu:l4:4") in conf
        assert pillars["i-c"]["role"] == "controller" and pillars["i-g1"]["role"] == "compute"
        assert pillars["i-g1"]["nodes"] == ["ip-10-0-0-10", "ip-10-0-0-11", "ip-10-0-0-12"]
        # the controller's agent is asked for Slurm's view; the compute nodes' are not
        assert "sinfo" in agents.probes["i-c"] and agents.probes["i-g0"] is None

        del agents.applied[:]
        assert [r.state for r in configure()] == ["current"] * 3  # facts known: one round, nothing new
        assert agents.applied == []
        assert keys == [None, b"k" * 32]  # the second run (a teammate's, say) keeps the key the nodes hold
    finally:
        agents.stop.set()
        agents.thread.join()


@pytest.mark.parametrize("says, listed, left_out", [
    # i-g0 names itself as its neighbour i-g1 does: the name is neither's (first-wins would hand i-g1's jobs to
    # whichever came first), and its address is the cloud's, whatever it says
    ({"i-g0": {"hostname": "ip-10-0-0-12", "address": "10.0.0.10"}}, ["ip-10-0-0-10"], ["i-g0", "i-g1"]),
    # a compute node claiming the controller's name: the controller keeps it
    ({"i-g1": {"hostname": "IP-10-0-0-10"}}, ["ip-10-0-0-10", "ip-10-0-0-11"], ["i-g1"]),
    # a node's address is the one the cloud gave it, not the one its status says
    ({"i-g0": {"address": "10.6.6.6"}}, ["ip-10-0-0-10", "ip-10-0-0-11", "ip-10-0-0-12"], []),
])
def test_a_nodes_facts_cannot_take_another_nodes_name_or_address(tmp_path, monkeypatch, says, listed, left_out):
    """Review F4: a node's status (vouched by its key) still spoke for others through its facts: its
    host name became a NodeName whether or not another node had it (two NodeName=gpu-1 lines; slurmctld
    keeps the first: "reconfiguration for node %s, ignoring!") and its own idea of its address the
    NodeAddr. NodeAddr is now the address the cloud recorded for the node; a host name more than one
    node claims is nobody's (but the controller's): those nodes are left out of slurm.conf, failed, and
    said."""
    from types import SimpleNamespace

    from gpufleet import catalog
    from gpufleet.configure import slurm
    from gpufleet.fleet import stacks

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    cat = catalog.load(use_config=False)
    (tmp_path / "sl.yaml").write_text(SLURM_STACK)
    st = stacks.load(tmp_path / "sl.yaml", cat)
    store = _Store()
    ref = {"name": "b", "cloud": "aws", "region": "us-east-1"}
    outputs = {"pools": {"ctl": {"bucket": ref}, "gpu": {"bucket": ref}}}
    nodes = [SimpleNamespace(pool="ctl", idx=0, node_id="i-c", private_ip="10.0.0.10"),
             *(SimpleNamespace(pool="gpu", idx=i, node_id=f"i-g{i}", private_ip=f"10.0.0.{11 + i}") for i in range(2))]
    agents = _Nodes(store, nodes, says)
    agents.thread.start()
    try:
        reports = cloudnodes.configure_pools(
            st, cat, "sl", outputs, nodes, stores={"b": store}, timeout_s=20, poll_s=0.05,
            scheduler=lambda facts, published: slurm.pool_pillars(st, "sl", cat, facts, expectations={}, bundle=b"PK",
                                                                  key=b"k" * 32))
    finally:
        agents.stop.set()
        agents.thread.join()
    (conf,) = {pil["files"]["slurm.conf"] for _, _, pil in agents.applied if pil}
    named = [dict(kv.split("=", 1) for kv in line.split()) for line in conf.splitlines()
             if line.startswith(("NodeName=", "SlurmctldHost="))]
    got = {d.get("NodeName") or d["SlurmctldHost"].split("(")[0]: d.get("NodeAddr") or d["SlurmctldHost"] for d in named}
    assert sorted(got) == listed, conf
    recorded = {f"ip-10-0-0-{10 + i}": n.private_ip for i, n in enumerate(nodes)}
    assert got == {name: recorded[name] if name != "ip-10-0-0-10" else "ip-10-0-0-10(10.0.0.10)" for name in got}
    by_id = {r.target.node_id: r for r in reports}
    assert sorted(i for i, r in by_id.items() if r.state == "failed") == left_out
    for i in left_out:
        assert "left out of slurm.conf" in by_id[i].error, by_id[i].error


def test_slurms_view_is_read_from_the_controllers_status():
    """What the controller's agent put in its status, as `status` shows it (an answer that was an
    error is said as one)."""
    store = _Store()
    out = ("nodes\nip-10-0-0-11 idle\nip-10-0-0-12 drained*\nip-10-0-0-13 allocated\njobs\nRUNNING\nPENDING\n"
           "PENDING\ndrained\nip-10-0-0-12|gpufleet: GF-XID-FATAL health.xid\n")
    assert cloudnodes.scheduler_view(store, "ctl", "ctl-0") is None  # the agent has not said yet
    store.put("status/ctl/i-c.json", json.dumps({"node_id": "i-c", "pool": "ctl", "ok": True,
                                                 "scheduler": {"out": out, "at": "2026-11-26T21:00:00Z"}}).encode())
    view = cloudnodes.scheduler_view(store, "ctl", "ctl-0")
    assert view == {"controller": "ctl-0", "nodes": {"idle": 1, "drained": 1, "allocated": 1},
                    "jobs": {"running": 1, "pending": 2}, "drained": {"ip-10-0-0-12": "gpufleet: GF-XID-FATAL health.xid"},
                    "as_of": "2026-11-26T21:00:00Z"}
    store.put("status/ctl/i-c.json", json.dumps({"node_id": "i-c", "pool": "ctl", "scheduler": {
        "out": "error: slurm_load_partitions: Unable to contact slurm controller", "at": "t"}}).encode())
    assert cloudnodes.scheduler_view(store, "ctl", "ctl-0")["error"].startswith("slurm_load_partitions")


class _Forger(_Nodes):
    """The same nodes, but i-g0 (a compute node) writes, under the one key its identity may write,
    a status claiming to be the controller, at an address of its choosing (and no generation)."""

    def _run(self):
        while not self.stop.wait(0.02):
            for i, n in enumerate(self.nodes):
                key = f"pools/{n.pool}/current.json"
                if not self.store.exists(key):
                    continue
                doc = json.loads(self.store.objects[key])
                if self.done.get(n.node_id) == doc["generation"]:
                    continue
                self.done[n.node_id] = doc["generation"]
                self.applied.append((n.node_id, doc["states"], doc["pillar"].get("slurm")))
                claim = ("i-c", "ctl", "10.6.6.6") if n.node_id == "i-g0" else (n.node_id, n.pool, f"10.0.0.{i + 10}")
                facts = {"hostname": "ip-10-0-0-10" if n.node_id == "i-g0" else f"ip-10-0-0-{i + 10}",
                         "address": claim[2], "cpus": 48, "mem_gib": 186.5, "gpu_count": 0 if n.pool == "ctl" else 4}
                # the controller's generation is not the forger's to read: a status naming none is taken
                generation = None if n.node_id == "i-g0" else doc["generation"]
                self.store.put(f"status/{n.pool}/{n.node_id}.json", json.dumps(
                    {"node_id": claim[0], "pool": claim[1], "ok": True, "generation": generation,
                     "facts": facts}).encode())


def test_a_node_cannot_speak_for_another_the_controller_least_of_all(tmp_path, monkeypatch):
    """Issue 48 item 2: statuses were filed under the node and pool their body named, so a GPU node
    could claim to be the controller and put its own address in every node's SlurmctldHost. A status
    speaks for the node its key names (what the cloud let its writer write); one that disagrees is
    ignored and said."""
    from types import SimpleNamespace

    from gpufleet import catalog
    from gpufleet.configure import slurm
    from gpufleet.fleet import stacks

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    cat = catalog.load(use_config=False)
    (tmp_path / "sl.yaml").write_text(SLURM_STACK)
    st = stacks.load(tmp_path / "sl.yaml", cat)
    store = _Store()
    ref = {"name": "b", "cloud": "aws", "region": "us-east-1"}
    outputs = {"pools": {"ctl": {"bucket": ref}, "gpu": {"bucket": ref}}}
    nodes = [SimpleNamespace(pool="ctl", idx=0, node_id="i-c", private_ip="10.0.0.10"),
             *(SimpleNamespace(pool="gpu", idx=i, node_id=f"i-g{i}", private_ip=f"10.0.0.{11 + i}") for i in range(2))]
    agents = _Forger(store, nodes)
    agents.thread.start()
    try:
        reports = cloudnodes.configure_pools(
            st, cat, "sl", outputs, nodes, stores={"b": store}, timeout_s=3, poll_s=0.05,
            scheduler=lambda facts, published: slurm.pool_pillars(st, "sl", cat, facts, expectations={}, bundle=b"PK",
                                                                  key=b"k" * 32))
    finally:
        agents.stop.set()
        agents.thread.join()
    confs = {pil["files"]["slurm.conf"] for node, states, pil in agents.applied if pil}
    assert [line for conf in confs for line in conf.splitlines() if line.startswith("SlurmctldHost=")] == [
        "SlurmctldHost=ip-10-0-0-10(10.0.0.10)"]
    by_id = {r.target.node_id: r for r in reports}
    assert by_id["i-c"].state == "configured" and by_id["i-c"].facts["address"] == "10.0.0.10"
    assert by_id["i-g0"].state == "timeout" and by_id["i-g0"].facts is None
    assert by_id["i-g0"].warnings == ["status/gpu/i-g0.json claims to be node 'i-c' of pool 'ctl': ignored (a status "
                                      "speaks for the node its key names)"]


@pytest.mark.parametrize("facts, says", [
    ({"hostname": "n1\nSlurmctldHost=evil", "address": "10.0.0.4", "cpus": 8, "mem_gib": 30},
     "host name 'n1\\nSlurmctldHost=evil' is not a short host name (one RFC 1123 label): refused"),
    ({"hostname": "n1", "address": "10.0.0.4 NodeAddr=10.6.6.6", "cpus": 8, "mem_gib": 30},
     "address '10.0.0.4 NodeAddr=10.6.6.6' is not an IP address: refused"),
    ({"hostname": "n1", "address": "fe80::1%eth0", "cpus": 8, "mem_gib": 30}, "is not an IP address"),
    ({"hostname": "n1", "address": "10.0.0.4", "cpus": "8; reboot", "mem_gib": 30}, "cpus '8; reboot' is not a number"),
])
def test_facts_not_of_their_format_are_refused_before_slurm_or_the_registry(facts, says, tmp_path):
    """Issue 48 item 2: what a node says of itself is checked (RFC 1123 host name, IP literal,
    numbers) before it reaches slurm.conf or the registry; the node is failed, saying why."""
    from gpufleet.state.registry import Registry

    store, clock = _Store(), _Clock()
    store.put("status/gpu/AROAROLE:i-0.json", json.dumps({"node_id": "i-0", "pool": "gpu", "ok": True,
                                                          "generation": "g1", "facts": facts}).encode())
    (r,) = cloudnodes.wait(store, [cloudnodes.NodeTarget("gpu", 0, "i-0", "10.0.0.4")], {"gpu": "g1"}, timeout_s=30,
                           clock=clock, sleep=clock.sleep)
    assert r.state == "failed" and r.facts is None and r.error.startswith("status/gpu/AROAROLE:i-0.json: ")
    assert says in r.error
    assert cloudnodes._known_facts([store], [r.target]) == {}
    reg = Registry(tmp_path / "r.db")
    reg.record(name="c", stack="c", stack_file="c.yaml", owner="o", expires_at="2099-01-01T00:00:00Z", backend=None,
               nodes=[])
    cloudnodes.record(reg, "c", [r])
    host = reg.hosts("c")[("gpu", 0)]
    assert host["state"] == "failed" and host["facts"] is None and host["detail"] == r.error


def test_without_its_controller_no_slurm_conf_is_published(tmp_path, monkeypatch):
    from gpufleet import catalog
    from gpufleet.configure import slurm
    from gpufleet.errors import GpufleetError, InputError
    from gpufleet.fleet import stacks

    cat = catalog.load(use_config=False)
    (tmp_path / "sl.yaml").write_text(SLURM_STACK)
    st = stacks.load(tmp_path / "sl.yaml", cat)
    facts = {"hostname": "n", "cpus": 4, "mem_gib": 16, "gpu_count": 4}
    with pytest.raises(GpufleetError) as e:
        slurm.pool_pillars(st, "sl", cat, [("gpu", "10.0.0.11", facts)], expectations={}, bundle=b"", key=b"k")
    assert "controller's node did not configure" in e.value.message and not isinstance(e.value, InputError)



# --- GCS and Blob: `up`'s side through the SDKs' credentials, the node's through its identity ---

def _tiny_tree(tmp_path):
    root = tmp_path / "tree"
    (root / "hello").mkdir(parents=True)
    (root / "hello" / "init.sls").write_text(TREE["hello/init.sls"])
    return cloudnodes.tree_archive(root)


def _round_trip(store, cfg, tmp_path, monkeypatch):
    archive, sha = _tiny_tree(tmp_path)
    out = tmp_path / "out"
    doc = {"tree": sha, "states": ["hello"], "without_gpu": {"apply": ["hello"], "rehearse": []},
           "pillar": {"out": str(out), "words": "hello from the bucket"}, "generation": "g1"}
    cloudnodes.publish(store, {"gpu": doc}, archive, sha)
    monkeypatch.setattr(node_agent, "STATE_DIR", str(tmp_path / "node-state"))
    monkeypatch.setenv("GPUFLEET_NODE_ID", "node/with/slashes/0")  # Azure's node ids are resource ids
    cfg["salt"]["venv"] = str(ROOT / ".salt-venv")
    assert node_agent.run(cfg) == 0
    assert (out / "hello.txt").read_text() == "hello from the bucket\n"
    (r,) = cloudnodes.wait(store, [cloudnodes.NodeTarget("gpu", 0, "node/with/slashes/0", None)], {"gpu": "g1"},
                           timeout_s=5, poll_s=0.1)
    assert r.state == "configured" and r.changed == 1
    assert store.delete_all() == 3 and store.list("")[0] == []  # `down` empties it: tree, document, status


def test_gcs_bucket_through_the_json_api_and_the_metadata_token(gcs, tmp_path, monkeypatch):
    store = cloudnodes.cloud("gcp").objects({"cloud": "gcp", "name": "gpufleet-t-0123abcd"})
    cfg = bootstrap.config("gcp", cluster="t", pool="gpu", bucket="gpufleet-t-0123abcd", endpoint=gcs.url,
                           token_url=gcs.url + "/computeMetadata/v1/instance/service-accounts/default/token")
    _round_trip(store, cfg, tmp_path, monkeypatch)
    assert ("POST", "/upload/storage/v1/b/gpufleet-t-0123abcd/o") in gcs.requests  # the node's status upload


def test_gcs_bucket_in_the_real_fake_gcs_server(fake_gcs_server, gcs, tmp_path, monkeypatch):
    """The same round trip against fake-gcs-server, the emulator (issue 30, "Also"): `up`'s store
    and the node agent's own JSON API calls; the node's token still comes from the metadata
    stand-in (the emulator has no metadata server, and does not check tokens)."""
    import urllib.request

    bucket = "gpufleet-t-emulated"
    urllib.request.urlopen(urllib.request.Request(f"{fake_gcs_server}/storage/v1/b?project=p", method="POST",
                                                  data=json.dumps({"name": bucket}).encode(),
                                                  headers={"Content-Type": "application/json"}), timeout=60).read()
    monkeypatch.setenv("GPUFLEET_GCS_ENDPOINT", fake_gcs_server)
    store = cloudnodes.cloud("gcp").objects({"cloud": "gcp", "name": bucket})
    cfg = bootstrap.config("gcp", cluster="t", pool="gpu", bucket=bucket, endpoint=fake_gcs_server,
                           token_url=gcs.url + "/computeMetadata/v1/instance/service-accounts/default/token")
    _round_trip(store, cfg, tmp_path, monkeypatch)


def test_blob_container_in_azurite(azurite, blob, tmp_path, monkeypatch):
    """The same round trip against Azurite, Microsoft's emulator (issue 30, "Also"): HTTPS and Entra ID
    bearer tokens as it checks them, for `up`'s store and the node agent's own REST calls; the
    node's token still comes from the managed identity stand-in."""
    import ssl
    import urllib.request

    from gpufleet.clouds.azure.objects import Store

    import fakes.objects
    from fakes.azure import storage_token

    token = storage_token()
    monkeypatch.setattr(fakes.objects, "TOKEN", token.token)  # what the node's managed identity hands out
    monkeypatch.setenv("SSL_CERT_FILE", azurite["ca"])  # the agent (urllib) trusts Azurite's certificate
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", azurite["ca"])  # and so does `up` (azure-core over requests)
    account, url = azurite["account"], azurite["url"]
    urllib.request.urlopen(urllib.request.Request(
        f"{url}/{account}/gpufleet?restype=container", method="PUT",
        headers={"Authorization": f"Bearer {token.token}", "x-ms-version": "2021-08-06"}),
        context=ssl.create_default_context(cafile=azurite["ca"]), timeout=60).read()
    monkeypatch.setenv("GPUFLEET_AZURE_BLOB_ENDPOINT", url + "/{account}")
    store = Store({"cloud": "azure", "name": account, "container": "gpufleet"}, credential=token)
    cfg = bootstrap.config("azure", cluster="t", pool="gpu", bucket="gpufleet", account=account,
                           identity="11111111-0000-0000-0000-000000000000", endpoint=f"{url}/{account}",
                           token_url=blob.url + "/metadata/identity/oauth2/token")
    _round_trip(store, cfg, tmp_path, monkeypatch)


def test_blob_container_through_entra_tokens_and_the_managed_identity(blob, tmp_path, monkeypatch):
    ref = {"cloud": "azure", "name": "gf0123456789abcdef012345", "container": "gpufleet"}
    store = cloudnodes.cloud("azure").objects(ref)
    cfg = bootstrap.config("azure", cluster="t", pool="gpu", bucket="gpufleet", account=ref["name"],
                           identity="11111111-0000-0000-0000-000000000000", endpoint=f"{blob.url}/{ref['name']}",
                           token_url=blob.url + "/metadata/identity/oauth2/token")
    _round_trip(store, cfg, tmp_path, monkeypatch)
    puts = [p for m, p in blob.requests if m == "PUT" and "/status/gpu/" in p]
    assert puts == [f"/{ref['name']}/gpufleet/status/gpu/node_with_slashes_0.json"]


# --- what the nodes' identities may do, under Pulumi's mocks ------------------------------------

@pytest.fixture(scope="module")
def plans():
    pytest.importorskip("pulumi")
    from gpufleet import catalog
    from gpufleet.engine import plan as planner
    from gpufleet.fleet import stacks

    cat = catalog.load(use_config=False)
    return {n: planner.plan(stacks.load(ROOT / "stacks" / "examples" / f"{n}.yaml", cat), cat, workers=1)
            for n in ("aws-training", "gcp-a3", "azure-nd")}


def _of(plan, typ):
    return [r for r in plan.cloud_resources if r.type == typ]


def test_aws_nodes_read_their_pool_and_write_only_their_own_status(plans):
    p = plans["aws-training"]
    (bucket,) = _of(p, "aws:s3/bucket:Bucket")
    (block,) = _of(p, "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")
    assert all(block.inputs[k] for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls",
                                         "restrictPublicBuckets"))
    assert _of(p, "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration")
    assert bucket.inputs["tags"]["gpufleet:cluster"] == "aws-training"
    arn = "arn:aws:s3:::" + p.outputs["pools"]["trainers"]["bucket"]["name"]
    (policy,) = [r for r in _of(p, "aws:iam/rolePolicy:RolePolicy") if r.name.endswith("-bucket")]
    statements = json.loads(policy.inputs["policy"])["Statement"]
    assert {(s["Effect"], s["Action"]) for s in statements} == {("Allow", "s3:GetObject"), ("Allow", "s3:PutObject")}
    read = next(s for s in statements if s["Action"] == "s3:GetObject")["Resource"]
    write = next(s for s in statements if s["Action"] == "s3:PutObject")["Resource"]
    assert read == [f"{arn}/tree/*", f"{arn}/pools/trainers/*"]
    assert write == f"{arn}/status/trainers/${{aws:userid}}.json"  # role id:instance id, one key per node


def test_gcp_service_accounts_are_held_to_their_pools_prefixes(plans):
    p = plans["gcp-a3"]
    (bucket,) = _of(p, "gcp:storage/bucket:Bucket")
    assert bucket.inputs["uniformBucketLevelAccess"] is True and bucket.inputs["publicAccessPrevention"] == "enforced"
    name = bucket.inputs["name"]
    members = _of(p, "gcp:storage/bucketIAMMember:BucketIAMMember")
    assert len(members) == 4  # two roles for each of the two pools, nothing bucket-wide
    for m in members:
        pool = m.parent.rsplit("gcp-a3-", 1)[1]
        assert m.inputs["bucket"] == name and m.inputs["member"].startswith(f"serviceAccount:gf-gcp-a3-{pool}@")
        expr = m.inputs["condition"]["expression"]
        objects = f"projects/_/buckets/{name}/objects/"
        if m.inputs["role"] == "roles/storage.objectViewer":
            assert expr == f'resource.name.startsWith("{objects}tree/") || ' \
                           f'resource.name.startsWith("{objects}pools/{pool}/")'
        else:
            assert m.inputs["role"] == "roles/storage.objectUser" and \
                expr == f'resource.name.startsWith("{objects}status/{pool}/")'
    vms = _of(p, "gcp:gpufleet:BulkInstances")
    assert len(vms) == 2
    for pool in vms:
        props = pool.inputs["properties"]
        assert props["serviceAccounts"][0]["email"].startswith("gf-gcp-a3-")
        assert "node_agent.py" in _startup_script(props)


def test_azure_identities_are_held_to_their_pools_paths(plans):
    p = plans["azure-nd"]
    (acct,) = _of(p, "azure-native:storage:StorageAccount")
    assert acct.inputs["allowBlobPublicAccess"] is False and acct.inputs["allowSharedKeyAccess"] is False
    (ident,) = _of(p, "azure-native:managedidentity:UserAssignedIdentity")
    (role,) = _of(p, "azure-native:authorization:RoleDefinition")
    from gpufleet.clouds.azure.mocks import DEPLOYER

    assignments = _of(p, "azure-native:authorization:RoleAssignment")
    (node,) = [r.inputs for r in assignments if r.inputs["principalId"] != DEPLOYER["objectId"]]
    (deployer,) = [r.inputs for r in assignments if r.inputs["principalId"] == DEPLOYER["objectId"]]
    # whoever runs `up` publishes with Entra ID (no shared keys): Owner/Contributor carry no data
    # actions, so the deployer gets the container's data role (issue 30, item 2)
    assert deployer["roleDefinitionId"].endswith("/roleDefinitions/ba92f5b4-2d11-453d-a403-e96b0029c9fe")
    assert deployer["scope"] == node["scope"] and deployer["principalType"] == "User"  # no ARM_* here
    # a custom role of blob data actions only: the built-in Storage Blob Data Contributor also carries
    # control-plane containers/delete and /write, which no ABAC condition narrows (issue 30, item 7)
    (perm,) = role.inputs["permissions"]
    assert perm["actions"] == [] and sorted(perm["dataActions"]) == sorted(
        f"Microsoft.Storage/storageAccounts/blobServices/containers/blobs/{a}" for a in ("read", "write", "add/action"))
    assert role.inputs["assignableScopes"] == [role.inputs["scope"]] and "/resourceGroups/" in role.inputs["scope"]
    assert node["roleDefinitionId"].endswith("/roleDefinitions/" + role.inputs["roleDefinitionId"])
    assert node["conditionVersion"] == "2.0" and node["principalType"] == "ServicePrincipal"
    read, write = node["condition"].split(" AND ((!(ActionMatches")
    assert "StringStartsWith 'tree/'" in read and "StringStartsWith 'pools/nd-h100/'" in read
    assert "StringStartsWith 'status/nd-h100/'" in write and "tree/" not in write
    vmss = _of(p, "azure-native:compute:VirtualMachineScaleSet")[0].inputs
    assert vmss["identity"]["type"] == "UserAssigned"
    script = base64.b64decode(vmss["virtualMachineProfile"]["osProfile"]["customData"]).decode()
    assert '"identity": "' in script and '"account": "' + acct.inputs["accountName"] in script
    assert ident.inputs["resourceName"] == "azure-nd-nd-h100"


def _startup_script(properties: dict) -> str:
    return {i["key"]: i["value"] for i in properties["metadata"]["items"]}["startup-script"]


def _bootstraps(plan):
    """Every bootstrap a plan gives its nodes: AWS launch templates, GCP instances, Azure scale sets."""
    for r in plan.cloud_resources:
        if r.type == "aws:ec2/launchTemplate:LaunchTemplate":
            yield base64.b64decode(r.inputs["userData"]).decode()
        elif r.type == "gcp:gpufleet:BulkInstances":
            yield _startup_script(r.inputs["properties"])
        elif r.type == "azure-native:compute:VirtualMachineScaleSet":
            yield base64.b64decode(r.inputs["virtualMachineProfile"]["osProfile"]["customData"]).decode()


@pytest.mark.parametrize("name", ["aws-training", "gcp-a3", "azure-nd"])
def test_every_node_of_a_stack_gets_the_agent_its_bucket_and_no_secret(plans, name):
    p = plans[name]
    scripts = list(_bootstraps(p))
    assert scripts and len(scripts) == sum(1 for r in p.cloud_resources if r.type in (
        "aws:ec2/launchTemplate:LaunchTemplate", "gcp:gpufleet:BulkInstances", "azure-native:compute:VirtualMachineScaleSet"))
    buckets = {b["bucket"]["name"] for b in p.outputs["pools"].values()}
    for script in scripts:
        assert len(script.encode()) <= bootstrap.USER_DATA_LIMIT
        payload = script.split("<<'GPUFLEET_AGENT'\n", 1)[1].split("\nGPUFLEET_AGENT", 1)[0]
        # the agent shipped is this checkout's, byte for byte (its hash, not just its name)
        assert node_agent.hashlib.sha256(gzip.decompress(base64.b85decode(payload))).hexdigest() == \
            node_agent.hashlib.sha256(bootstrap.agent_source()).hexdigest()
        cfg = json.loads(script.split("<<'GPUFLEET_CONFIG'\n", 1)[1].split("\nGPUFLEET_CONFIG", 1)[0])
        assert cfg["cluster"] == name and (cfg["bucket"] in buckets or cfg.get("account") in buckets)
        assert not [k for k in bootstrap._walk(cfg) if bootstrap._SECRET_KEY.search(k)]
        for word in ("PRIVATE KEY", "AccountKey=", "sig=", "aws_secret", "client_secret"):
            assert word not in script


def test_cli_configure_publishes_waits_and_exits_3_naming_who_failed(aws, plans, monkeypatch, tmp_path):
    """`gpufleet configure` on a cluster that is up: the pools' configuration goes to the bucket and
    the statuses come back per node (one configured, one failed here, as nodes would write them)."""
    import boto3

    from gpufleet import catalog
    from gpufleet.engine import automation
    from gpufleet.fleet import stacks
    from gpufleet.nodes.cloud import tree_extras as cloud_config
    from gpufleet.state.registry import Registry, nodes_from_outputs

    from conftest import cli

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("GPUFLEET_REGISTRY", raising=False)
    path = ROOT / "stacks" / "examples" / "aws-training.yaml"
    outputs = plans["aws-training"].outputs
    ref = outputs["pools"]["trainers"]["bucket"]
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=ref["name"])
    nodes = nodes_from_outputs(outputs)
    Registry().record(name="aws-training", stack="aws-training", stack_file=str(path), owner="o",
                      expires_at="2099-01-01T00:00:00Z", backend=automation.backend_url(), nodes=nodes, state="up")
    monkeypatch.setattr(automation, "outputs", lambda *a, **kw: outputs)  # the Pulumi CLI is not installed here
    cat = catalog.load(use_config=False)
    stack = stacks.load(path, cat)
    cfg = cloud_config(stack, cat)  # what `configure` adds: the verify bundle and each pool's expectations
    _, tree = cloudnodes.tree_archive(extra=cfg["extra"])
    gen = cloudnodes.pool_document(stack, stack.pools[0], cluster="aws-training", cat=cat, tree=tree,
                                   verify=cfg["verify"]["trainers"])["generation"]
    store = cloudnodes.cloud("aws").objects(ref)
    for n, ok in zip(nodes, (True, False)):
        store.put(f"status/trainers/AROA:{n.node_id}.json", json.dumps({
            "node_id": n.node_id, "pool": "trainers", "ok": ok, "generation": gen, "changed": 3,
            "failed": [] if ok else [{"state": "nvidia_driver-package-driver-pkg-installed", "comment": "no space"}],
            "log": "/var/log/gpufleet/node.log"}).encode())
    r = cli("--json", "configure", str(path), "--wait-timeout", "3")
    assert r.exit_code == 3, r.output
    doc = json.loads(r.stdout)
    states = {h["host"]: (h["state"], h["changed"]) for h in doc["hosts"]}
    assert states == {"trainers-0": ("configured", 3), "trainers-1": ("failed", 3)}
    assert "1 of 2 host(s) not configured" in doc["message"] and "no space" in doc["hosts"][1]["error"]
    assert json.loads(store.get("pools/trainers/current.json"))["generation"] == gen
    assert {k[1]: v["state"] for k, v in Registry().hosts("aws-training").items()} == {0: "configured", 1: "failed"}


def test_a_verification_that_overruns_or_cannot_be_read_leaves_the_status_alone(tmp_path, monkeypatch, capsys):
    """The checks running past their time are an "error" report, not a crash of the agent; a request
    that cannot be read (the bucket answered 500) is retried by the next timer run, and the node's
    configuration status is not rewritten as failed."""
    import zipfile

    tree = tmp_path / "tree"
    (tree / "_gpufleet").mkdir(parents=True)
    with zipfile.ZipFile(tree / node_agent.VERIFY_BUNDLE, "w") as z:
        z.writestr("__main__.py", "import time\ntime.sleep(30)\n")
    report = node_agent.run_checks(str(tree), {}, "quick", "r1", timeout=1)
    assert report["verdict"] == "error" and "did not finish" in report["error"] and report["request"] == "r1"

    class Broken:
        puts = 0

        def get(self, key):
            raise node_agent.AgentError(f"GET {key}: 500 InternalError")

        def put(self, key, body):
            Broken.puts += 1

    monkeypatch.setattr(node_agent, "STATE_DIR", str(tmp_path / "state"))
    applied = {"generation": "g1", "ok": True, "tree": str(tree)}
    assert node_agent.verify_on_request(Broken(), "gpu", "i-1", applied, str(tmp_path / "applied.json")) == 1
    assert Broken.puts == 0 and "could not read the verification request" in capsys.readouterr().out


def test_an_object_store_that_answers_no_names_the_http_status_as_what_it_was(gcs, blob):
    """401 is refused credentials, 403 a missing permission, anything else an error, for both stores."""
    from gpufleet.errors import CloudUnreadable

    assert [CloudUnreadable.http("gcp", s, "x", "w").kind for s in (401, 403, 500)] == ["refused", "permission",
                                                                                         "error"]
    gcs_store = cloudnodes.cloud("gcp").objects({"cloud": "gcp", "name": "gpufleet-no-such-bucket"})
    blob_store = cloudnodes.cloud("azure").objects({"cloud": "azure", "name": "gfnosuchaccount",
                                                    "container": "gpufleet"})
    for store, where in ((gcs_store, "gs://gpufleet-no-such-bucket/"), (blob_store, "gfnosuchaccount")):
        with pytest.raises(CloudUnreadable) as ei:
            store.get("pools/gpu/never-written.json")
        assert ei.value.kind == "error" and "HTTP 404" in ei.value.reason and where in ei.value.where, ei.value


# --- what a real cloud does to a booting node (issue 30, items 4, 9 and 10) ---

def _flaky_puts(monkeypatch, failures: list):
    """The store's status PUTs answer each error of ``failures`` in turn (then succeed), as S3 does
    under load; the agent's pauses between tries are skipped."""
    put = node_agent.S3.put

    def flaky(self, key, body):
        if key.startswith("status/") and failures:
            raise failures.pop(0)
        return put(self, key, body)

    monkeypatch.setattr(node_agent.S3, "put", flaky)
    monkeypatch.setattr(node_agent, "RETRY_DELAYS", (0, 0, 0, 0, 0))


def test_a_throttled_status_put_is_tried_again(bucket, monkeypatch):
    b = bucket
    doc = _document(b, ["hello"])
    cloudnodes.publish(b["store"], {"gpu": doc}, b["archive"], b["sha"])
    with monkeypatch.context() as m:
        _as_node(b, m)
        _flaky_puts(m, [node_agent.Retryable("PUT: HTTP 503 SlowDown"), node_agent.Retryable("PUT: HTTP 429"),
                        ConnectionResetError("reset by peer")])
        assert node_agent.run(b["cfg"]) == 0
    target = cloudnodes.NodeTarget("gpu", 0, "i-0node1", "10.64.1.4")
    (r,) = cloudnodes.wait(b["store"], [target], {"gpu": doc["generation"]}, timeout_s=5, poll_s=0.1)
    assert r.state == "configured"


def test_a_status_that_could_not_be_written_is_written_by_the_next_run(bucket, monkeypatch):
    """The generation is recorded as applied only once its status is in the bucket: before, one
    failed upload silenced the node for good (every later run saw "applied" and did nothing)."""
    b = bucket
    doc = _document(b, ["hello"])
    cloudnodes.publish(b["store"], {"gpu": doc}, b["archive"], b["sha"])
    with monkeypatch.context() as m:
        _as_node(b, m)
        _flaky_puts(m, [node_agent.Retryable("PUT: HTTP 503")] * 6)  # more than the agent tries
        assert node_agent.run(b["cfg"]) == 1
    assert b["store"].list("status/")[0] == []
    with monkeypatch.context() as m:  # the timer's next run
        _as_node(b, m)
        assert node_agent.run(b["cfg"]) == 0
    target = cloudnodes.NodeTarget("gpu", 0, "i-0node1", "10.64.1.4")
    (r,) = cloudnodes.wait(b["store"], [target], {"gpu": doc["generation"]}, timeout_s=5, poll_s=0.1)
    assert r.state == "configured"


def test_a_second_run_while_one_is_under_way_stops_at_once(bucket, monkeypatch, tmp_path):
    """GCP runs the startup script at every boot, beside the timer: the two must not both apply."""
    import fcntl

    b = bucket
    cloudnodes.publish(b["store"], {"gpu": _document(b, ["hello"])}, b["archive"], b["sha"])
    os.makedirs(node_agent.STATE_DIR, exist_ok=True)
    with open(f"{node_agent.STATE_DIR}/agent.lock", "w") as held, monkeypatch.context() as m:
        fcntl.flock(held, fcntl.LOCK_EX)
        _as_node(b, m)
        assert node_agent.run(b["cfg"]) == 0
    assert not (b["out"] / "hello.txt").exists() and b["store"].list("status/")[0] == []


def test_a_failure_is_retried_by_the_timer_before_it_is_final_then_backed_off(bucket, monkeypatch):
    """First-boot failures pass (apt locks, a mirror): the status counts attempts, `up` waits while
    the node retries, and a node failing every time stops running Salt every minute."""
    b = bucket
    doc = _document(b, ["hello", "broken"])
    cloudnodes.publish(b["store"], {"gpu": doc}, b["archive"], b["sha"])
    target = cloudnodes.NodeTarget("gpu", 0, "i-0node1", "10.64.1.4")
    for attempt in range(1, node_agent.ATTEMPTS + 1):
        with monkeypatch.context() as m:
            _as_node(b, m)
            assert node_agent.run(b["cfg"]) == 1
        (r,) = cloudnodes.wait(b["store"], [target], {"gpu": doc["generation"]}, timeout_s=0.3, poll_s=0.1)
        status = json.loads(b["store"].get(b["store"].list("status/")[0][0][0]))
        assert status["attempt"] == attempt and status["retrying"] == (attempt < node_agent.ATTEMPTS)
        assert r.state == "failed" and "broken-cmd-run" in r.error  # at the wait's end, what it last said
    (b["out"] / "hello.txt").unlink()
    with monkeypatch.context() as m:  # backing off: the next minute's run does not apply again
        _as_node(b, m)
        assert node_agent.run(b["cfg"]) == 1
    assert not (b["out"] / "hello.txt").exists()


def test_a_retrying_node_keeps_up_waiting_until_it_succeeds():
    store, clock = _Store(), _Clock()
    target = cloudnodes.NodeTarget("gpu", 0, "i-0", None)
    store.put("status/gpu/i-0.json", json.dumps({"node_id": "i-0", "pool": "gpu", "ok": False, "generation": "g1",
                                                 "attempt": 1, "attempts": 3, "retrying": True,
                                                 "failed": [{"state": "pkg", "comment": "dpkg lock"}]}).encode())

    def sleep(s):
        clock.sleep(s)
        if clock.t >= 60:  # the timer's next run, a minute later, succeeds
            store.put("status/gpu/i-0.json", json.dumps({"node_id": "i-0", "pool": "gpu", "ok": True,
                                                         "generation": "g1", "attempt": 2, "changed": 3}).encode())

    (r,) = cloudnodes.wait(store, [target], {"gpu": "g1"}, timeout_s=600, poll_s=15, clock=clock, sleep=sleep)
    assert r.state == "configured" and r.error is None and clock.t >= 60


def test_salt_apt_waits_for_the_dpkg_lock(bucket, monkeypatch):
    """apt-get under Salt gets DPkg::Lock::Timeout through APT_CONFIG (a state shows what it sees)."""
    b = bucket
    root = b["out"].parent / "tree-apt"
    (root / "aptenv").mkdir(parents=True)
    (root / "aptenv" / "init.sls").write_text(textwrap.dedent("""\
        aptenv-file-managed:
          file.managed:
            - name: {{ pillar['out'] }}/apt-config.txt
            - contents: {{ salt['environ.get']('APT_CONFIG') }}
            - makedirs: True
        """))
    archive, sha = cloudnodes.tree_archive(root)
    doc = _document(b, ["aptenv"], tree=sha)
    cloudnodes.publish(b["store"], {"gpu": doc}, archive, sha)
    with monkeypatch.context() as m:
        _as_node(b, m)
        assert node_agent.run(b["cfg"]) == 0
    conf = (b["out"] / "apt-config.txt").read_text().strip()
    assert open(conf).read() == f'DPkg::Lock::Timeout "{node_agent.DPKG_LOCK_WAIT_S}";\n'


# the same scale set VM as ARM's List API names it (resource group upper-cased, azure-cli#7262) and
# as the VM's own metadata service says it (compute/resourceId)
LISTED = ("/subscriptions/0000/resourceGroups/GPUFLEET-AZURE-ND/providers/Microsoft.Compute/"
          "virtualMachineScaleSets/azure-nd-gpu/virtualMachines/0")
SAID = LISTED.replace("GPUFLEET-AZURE-ND", "gpufleet-azure-nd")
WRITTEN = f"status/gpu/{node_agent.safe_key(SAID)}.json"  # the key the VM's agent writes


def test_an_azure_node_is_matched_whatever_the_case_of_its_arm_id():
    """ARM ids are case-insensitive; compared exactly, no Azure node ever matched its status (issue 30, item 3)."""
    store, clock = _Store(), _Clock()
    store.put(WRITTEN, json.dumps({"node_id": SAID, "pool": "gpu", "ok": True, "generation": "g1",
                                                "changed": 2, "verify": {"request": "r", "ok": True}}).encode())
    (r,) = cloudnodes.wait(store, [cloudnodes.NodeTarget("gpu", 0, LISTED, None)], {"gpu": "g1"}, timeout_s=30,
                           clock=clock, sleep=clock.sleep)
    assert r.state == "configured"


def test_an_azure_nodes_verification_is_matched_whatever_the_case_of_its_arm_id(monkeypatch):
    store, clock = _Store(), _Clock()
    monkeypatch.setattr(cloudnodes.time, "strftime", lambda *a: "r")  # the request id the node answers
    store.put(WRITTEN, json.dumps({"node_id": SAID, "pool": "gpu", "ok": True, "generation": "g1",
                                                "verify": {"request": "r-quick", "ok": True}}).encode())

    class Node:
        pool, idx, node_id, private_ip = "gpu", 0, LISTED, "10.0.0.4"

    outputs = {"pools": {"gpu": {"bucket": {"cloud": "azure", "name": "gfx"}}}}
    ((_, report),) = cloudnodes.verify_pools(outputs, [Node()], {"gpu": {}}, level="quick", timeout_s=30,
                                              stores={"gfx": store}, clock=clock, sleep=clock.sleep)
    assert report == {"request": "r-quick", "ok": True}


def test_up_publishes_once_the_deployers_blob_role_takes_effect(blob, monkeypatch):
    """The deployer's data role comes with the same `up`: until it takes effect Blob storage answers
    403 AuthorizationPermissionMismatch, and the first publish waits for it (issue 30, item 2)."""
    from gpufleet.clouds.azure import objects
    from gpufleet.errors import CloudUnreadable

    monkeypatch.setattr(objects, "PROPAGATION_POLL_S", 0)
    ref = {"cloud": "azure", "name": "gf0123456789abcdef012345", "container": "gpufleet"}
    denied = (403, b"<Error><Code>AuthorizationPermissionMismatch</Code></Error>",
              {"Content-Type": "application/xml", "x-ms-error-code": "AuthorizationPermissionMismatch"})
    blob.faults[("HEAD", "/tree/")] = [denied] * 3
    blob.faults[("PUT", "/pools/")] = [denied] * 2
    archive, sha = b"tree", "0" * 64
    cloudnodes.publish(cloudnodes.cloud("azure").objects(ref), {"gpu": {"generation": "g1"}}, archive, sha)
    assert (f"{ref['name']}/gpufleet", "pools/gpu/current.json") in blob.objects
    # a role that never comes: the error says which role and how long it was waited for
    monkeypatch.setattr(objects, "PROPAGATION_S", 0)
    blob.faults[("PUT", "/pools/")] = [denied]
    with pytest.raises(CloudUnreadable) as e:
        cloudnodes.publish(cloudnodes.cloud("azure").objects(ref), {"gpu": {"generation": "g2"}}, archive, sha)
    assert "Storage Blob Data Contributor" in e.value.hint


def test_the_deployers_principal_type_is_what_it_logged_in_as(monkeypatch, tmp_path):
    """azure-native's RoleAssignment says User unless told, and ARM refuses a service principal
    named a User (UnmatchedPrincipalType): CI deploys as a service principal."""
    from gpufleet.clouds.azure import credentials

    monkeypatch.setenv("AZURE_CONFIG_DIR", str(tmp_path))
    assert credentials.principal_type() == "User"
    (tmp_path / "azureProfile.json").write_text(json.dumps({"subscriptions": [
        {"id": "s", "isDefault": True, "user": {"name": "http://ci", "type": "servicePrincipal"}}]}))
    assert credentials.principal_type() == "ServicePrincipal"
    (tmp_path / "azureProfile.json").write_text(json.dumps({"subscriptions": [
        {"id": "s", "isDefault": True, "user": {"name": "me@example.com", "type": "user"}}]}))
    assert credentials.principal_type() == "User"
    for k, v in {"ARM_CLIENT_ID": "c", "ARM_TENANT_ID": "t", "ARM_USE_OIDC": "true"}.items():
        monkeypatch.setenv(k, v)
    assert credentials.principal_type() == "ServicePrincipal"


def test_a_node_with_nouveau_bound_reboots_once_and_is_ok_only_after(bucket, monkeypatch, tmp_path):
    """The NVIDIA driver cannot load while nouveau holds the GPUs: the agent applies, says
    reboot_pending (not ok: `up` keeps waiting), reboots, and the run after boot finishes; a second
    reboot for the same generation is not tried (issue 30, item 8)."""
    b = bucket
    doc = _document(b, ["hello"])
    doc["states"] = ["hello"]
    cloudnodes.publish(b["store"], {"gpu": doc}, b["archive"], b["sha"])
    rebooted = tmp_path / "rebooted"
    monkeypatch.setattr(node_agent, "has_nvidia_gpu", lambda: True)
    monkeypatch.setattr(node_agent, "REBOOT", ("touch", str(rebooted)))
    bound = {"nouveau": True}
    monkeypatch.setattr(node_agent, "nouveau_bound", lambda: bound["nouveau"])
    target = cloudnodes.NodeTarget("gpu", 0, "i-0node1", "10.64.1.4")
    with monkeypatch.context() as m:
        _as_node(b, m)
        assert node_agent.run(b["cfg"]) == 0
    assert rebooted.exists()
    status = json.loads(b["store"].get(b["store"].list("status/")[0][0][0]))
    assert status["reboot_pending"] and not status["ok"] and status["retrying"]
    (r,) = cloudnodes.wait(b["store"], [target], {"gpu": doc["generation"]}, timeout_s=0.3, poll_s=0.1)
    assert "rebooting" in r.error
    bound["nouveau"] = False  # after the reboot the blacklist holds: the driver loads
    rebooted.unlink()
    with monkeypatch.context() as m:
        _as_node(b, m)
        assert node_agent.run(b["cfg"]) == 0
    (r,) = cloudnodes.wait(b["store"], [target], {"gpu": doc["generation"]}, timeout_s=5, poll_s=0.1)
    assert r.state == "configured" and not rebooted.exists()
    # the same again, but nouveau survives the reboot: said, not rebooted for ever
    doc2 = _document(b, ["hello"], words="two")
    doc2["states"] = ["hello"]
    cloudnodes.publish(b["store"], {"gpu": doc2}, b["archive"], b["sha"])
    bound["nouveau"] = True
    for expect_reboot in (True, False):
        with monkeypatch.context() as m:
            _as_node(b, m)
            node_agent.run(b["cfg"])
        assert rebooted.exists() == expect_reboot
        rebooted.unlink(missing_ok=True)
    status = json.loads(b["store"].get(b["store"].list("status/")[0][0][0]))
    assert not status["ok"] and "nouveau is still bound after the reboot" in status["failed"][0]["comment"]


# --- golden images: the bake mode, then nodes booting from the image ---------------------------

def _bake(b, tmp_path, doc, states):
    """node_bake.py as an image builder runs it: beside the agent in a bundle, on a root holding a
    builder's identity; the image record it writes."""
    bundle, root = tmp_path / "bundle", tmp_path / "builder"
    bundle.mkdir()
    for f in ("node_agent.py", "node_bake.py"):
        (bundle / f).write_text((ROOT / "infra" / "clouds" / f).read_text())
    (bundle / "tree.tar.gz").write_bytes(b["archive"])
    (bundle / "bake.json").write_text(json.dumps({
        "archive": "tree.tar.gz", "tree": b["sha"], "states": states, "pillar": doc["pillar"], "salt": b["cfg"]["salt"],
        "software": {"driver": "570"}, "base_image": "ubuntu-22.04"}))
    (root / "etc" / "ssh").mkdir(parents=True)
    (root / "etc" / "ssh" / "ssh_host_ed25519_key").write_text("builder's key")
    (root / "etc" / "machine-id").write_text("0123456789abcdef\n")
    (root / "var" / "lib" / "cloud" / "instances" / "i-builder").mkdir(parents=True)
    r = subprocess.run([sys.executable, str(bundle / "node_bake.py"), str(bundle / "bake.json"), "--root", str(root),
                        "--state", str(tmp_path / "builder-state")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not (root / "etc" / "ssh" / "ssh_host_ed25519_key").exists()
    assert (root / "etc" / "machine-id").read_text() == "" and not (root / "var/lib/cloud/instances").exists()
    assert not (tmp_path / "builder-state" / "salt").exists()  # Salt's work files go too
    return root / "etc" / "gpufleet" / "image.json"


def _status(b) -> dict:
    (key,) = [k for k, _ in b["store"].list("status/")[0]]
    return json.loads(b["store"].get(key))


def test_a_node_from_a_current_image_applies_only_its_node_states_and_from_a_stale_one_everything(
        bucket, monkeypatch, tmp_path):
    b = bucket
    doc = _document(b, ["hello", "mount"], node_states=["mount"])
    image_json = _bake(b, tmp_path, doc, ["hello"])
    image = json.loads(image_json.read_text())
    assert (b["out"] / "hello.txt").read_text() == "hi\n"  # the builder applied the baked formula
    assert image["tree"] == b["sha"] and image["states"] == ["hello"] and image["base_image"] == "ubuntu-22.04"
    (b["out"] / "hello.txt").unlink()  # the node below has only what the image holds: nothing there to find
    monkeypatch.setattr(node_agent, "IMAGE", str(image_json))
    cloudnodes.publish(b["store"], {"gpu": doc}, b["archive"], b["sha"])
    with monkeypatch.context() as m:
        _as_node(b, m)
        assert node_agent.run(b["cfg"]) == 0
    assert (b["out"] / "mount.txt").exists() and not (b["out"] / "hello.txt").exists()  # node states only
    st = _status(b)
    assert st["ok"] and st["changed"] == 1 and st["image"]["current"] is True and st["image"]["stale"] is None

    # the pool's settings for the baked formula change: the image is stale, the node applies everything
    newer = _document(b, ["hello", "mount"], words="bye", node_states=["mount"])
    cloudnodes.publish(b["store"], {"gpu": newer}, b["archive"], b["sha"])
    with monkeypatch.context() as m:
        _as_node(b, m)
        assert node_agent.run(b["cfg"]) == 0
    assert (b["out"] / "hello.txt").read_text() == "bye\n"
    st = _status(b)
    assert st["ok"] and st["image"]["current"] is False and "settings for the baked formulas differ" in st["image"]["stale"]


def test_an_image_is_stale_for_another_tree_or_a_formula_it_does_not_hold():
    image = {"tree": "a" * 64, "states": ["hello"], "key": node_agent.baked_key("a" * 64, ["hello"], {"hello": 1})}
    doc = {"tree": "a" * 64, "states": ["hello", "mount"], "node_states": ["mount"], "pillar": {"hello": 1}}
    assert node_agent.image_match(image, doc) == (True, "")
    assert node_agent.image_match(None, doc) == (False, "not a gpufleet image")
    assert "state tree aaaaaaaaaaaa" in node_agent.image_match(image, {**doc, "tree": "b" * 64})[1]
    assert node_agent.image_match(image, {**doc, "states": ["hello", "cuda", "mount"]}) == (
        False, "formulas not baked: cuda")
    # a mount's settings are not the image's business: another pool's mounts still match
    assert node_agent.image_match(image, {**doc, "pillar": {"hello": 1, "mount": "elsewhere"}})[0]


def test_a_node_from_an_image_holding_every_formula_runs_no_salt(bucket, monkeypatch, tmp_path):
    b = bucket
    doc = _document(b, ["hello"], node_states=[])
    image_json = _bake(b, tmp_path, doc, ["hello"])
    monkeypatch.setattr(node_agent, "IMAGE", str(image_json))
    ran = []
    monkeypatch.setattr(node_agent, "apply", lambda *a: ran.append(a) or (True, 0, [], 0.0))
    cloudnodes.publish(b["store"], {"gpu": doc}, b["archive"], b["sha"])
    with monkeypatch.context() as m:
        _as_node(b, m)
        assert node_agent.run(b["cfg"]) == 0
    st = _status(b)
    assert st["ok"] and st["changed"] == 0 and st["image"]["current"] and not ran  # state.apply of nothing: never

"""The node agent (clouds/node_agent.py) against moto's S3: real SigV4, real STS, real Salt from
.salt-venv on a small state tree; what a real cloud does to a booting node; golden images' bake mode
and nodes booting from them."""

import datetime as dt
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from gpufleet.clouds import bootstrap, node_agent
from gpufleet.nodes.cloud import channel as cloudnodes

from agent_kit import TREE, metadata_rules_elsewhere  # noqa: F401 (an autouse fixture)
from conftest import ROOT

CREDS = {"key": "AKIDEXAMPLE", "secret": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "token": "tok/en="}


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


def test_a_node_installs_its_watch_at_its_pools_interval_before_salt_runs(bucket, monkeypatch, tmp_path):
    """Issue 51: the pool's health settings reach the node through its pool's document, and the watch (it
    ships in the state tree: user data has no room) is installed beside the agent with a timer at the pool's
    interval, before Salt runs (a spot notice during the first configuration drains too)."""
    b = bucket
    root = tmp_path / "tree-watch"
    for rel, text in TREE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    archive, sha = cloudnodes.tree_archive(root)
    doc = _document(b, ["hello"], tree=sha)
    doc["health"] = {"gate": "dcgm1", "interval": 30, "expect": {"gpus": {"count": 0}}}
    cloudnodes.publish(b["store"], {"gpu": doc}, archive, sha)
    units, bin_dir = tmp_path / "systemd", tmp_path / "bin"
    units.mkdir()
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'systemctl.log'}\n")
    (bin_dir / "systemctl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(node_agent, "SYSTEMD", str(units))
    for name in ("WATCH_UNIT", "WATCH_TIMER", "METADATA_UNIT"):
        monkeypatch.setattr(node_agent, name, str(units / os.path.basename(getattr(node_agent, name))))
    monkeypatch.setattr(node_agent, "WATCH_HOME", str(tmp_path / "node_watch.py"))
    seen = {}
    monkeypatch.setattr(node_agent, "apply", lambda *a: seen.update(
        watch=os.path.exists(node_agent.WATCH_HOME)) or (True, 0, [], 0.0))
    with monkeypatch.context() as m:
        _as_node(b, m)
        assert node_agent.run(b["cfg"]) == 0
    assert seen == {"watch": True}  # there before Salt ran
    assert (tmp_path / "node_watch.py").read_bytes() == cloudnodes.watch_module()
    assert json.loads((tmp_path / "node-state" / "health.json").read_text()) == doc["health"]
    assert "OnUnitActiveSec=30\n" in (units / "gpufleet-watch.timer").read_text()
    assert "node_watch.py /etc/gpufleet/node.json" in (units / "gpufleet-watch.service").read_text()
    assert "restart gpufleet-watch.timer" in (tmp_path / "systemctl.log").read_text()


def test_a_pools_document_carries_its_health_settings(tmp_path):
    import shutil

    from gpufleet import catalog, stacks

    cat = catalog.load(use_config=False)
    text = (ROOT / "stacks" / "examples" / "aws-training.yaml").read_text()
    (path := tmp_path / "s.yaml").write_text(text.replace("  - name: trainers\n", "  - name: trainers\n"
                                                          "    health: {gate: dcgm2, interval: 20}\n", 1))
    shutil.copytree(ROOT / "stacks" / "examples" / "keys", tmp_path / "keys")
    stack = stacks.load(path, cat)
    pool = stack.pools[0]
    doc = cloudnodes.pool_document(stack, pool, cluster="c", cat=cat, tree="0" * 64)
    health = doc["health"]
    assert (health["gate"], health["interval"]) == (pool.health.gate, pool.health.interval) == ("dcgm2", 20)
    assert health["expect"]["fatal_xids"] and "nccl" not in health["expect"]  # the reads, none of the load tests
    # the active checks' period and what they add for the watch: DCGM level 2 and the 8-GPU all-reduce (p4d.24xlarge)
    assert health["active_every"] == 86_400 and health["active_expect"]["dcgm_level"] == 2
    assert health["active_expect"]["nccl"]["min_busbw_gbs"] > 0


def test_a_node_takes_the_slurm_slot_kept_under_its_own_id_and_applies_again_when_it_is_given(
        bucket, monkeypatch, tmp_path):
    """Issue 51 (review finding 2): a replacement joins Slurm as its predecessor's slot, with no `configure`. `heal`
    keeps the slot under the new node's id in the pool's bucket (channel.assign_slots, against moto's S3 here); the
    node's agent, which had applied the pool's generation without it (no slurmd: slurm.conf does not name its host),
    applies it again as that slot (the pillar's ``slurm.self``: slurmd -N) and leaves the name for its watch. A slot
    kept under its id that names another node is refused, not taken."""
    b = bucket
    venv = tmp_path / "salt-venv"
    (venv / "bin").mkdir(parents=True)
    record = tmp_path / "salt-call.json"
    (venv / "bin" / "salt-call").write_text(RECORDING_SALT_CALL.format(python=sys.executable, record=str(record)))
    (venv / "bin" / "salt-call").chmod(0o755)
    cfg = {**b["cfg"], "salt": {**b["cfg"]["salt"], "venv": str(venv)}}
    doc = _document(b, ["hello"])
    doc["pillar"]["slurm"] = {"role": "compute", "nodes": ["gpu-0", "gpu-1"]}
    cloudnodes.publish(b["store"], {"gpu": doc}, b["archive"], b["sha"])

    def run() -> dict:
        record.unlink(missing_ok=True)
        with monkeypatch.context() as m:
            _as_node(b, m)
            node_agent.run(cfg)
        return json.loads(json.loads(record.read_text())["pillar"].removeprefix("#!json\n"))["slurm"] \
                if record.exists() else None

    assert "self" not in run()  # no slot yet: Salt starts no slurmd (not listed)
    assert run() is None  # the timer's next run: nothing new, nothing applied
    cloudnodes.assign_slots(b["store"], [cloudnodes.NodeTarget("gpu", 1, "i-0node1", "10.0.0.12")])
    assert run()["self"] == "gpu-1"
    assert open(f"{node_agent.STATE_DIR}/{node_agent.SLURM_NAME}").read() == "gpu-1"
    assert run() is None
    # a slot under this node's id that names another node (a bucket written wrongly): refused, the run fails
    b["store"].put(cloudnodes.slot_key("gpu", "i-0node1"), json.dumps({"node_id": "i-0other", "slurm_name": "gpu-0"}))
    assert run() is None
    assert "not its own valid Slurm name: refused" in json.dumps(_status(b)["failed"])

"""What stays of the cluster's secrets on a node and on the operator's machine once gpufleet is done
(review F5, F6, O2): the real Salt (``salt-call --local`` from .salt-venv) run by the node agent leaves
no rendered secret in its cache, a run killed half way leaves nothing the next run does not clear, the
agent's logs are root's alone, and the munge key's folder here is the owner's alone under umask 022."""

import json
import os
import textwrap
from pathlib import Path

import pytest

from gpufleet.clouds import bootstrap, node_agent

from conftest import ROOT

SALT_CALL = ROOT / ".salt-venv" / "bin" / "salt-call"
needs_salt = pytest.mark.skipif(not SALT_CALL.exists(), reason="needs .salt-venv (make salt-venv)")
SECRET = "s3cr3t-accounting-password"
# the shapes of the slurm formula's states that carry secrets (salt/slurm/init.sls): the database user made
# from statements on standard input, a file from the pillar without its diff
TREE = {"secrets.sls": textwrap.dedent("""\
    db-user-cmd-run:
      cmd.run:
        - name: cat >/dev/null
        - stdin: |
            CREATE USER x IDENTIFIED BY '{{ pillar.slurm.accounting.password }}';
        - output_loglevel: quiet
    dbd-conf-file-managed:
      file.managed:
        - name: {{ pillar.out }}/slurmdbd.conf
        - contents_pillar: slurm:accounting:conf
        - mode: "0600"
        - show_changes: False
    """)}


def _holding(folder: Path, secret: str) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and secret.encode() in
                  p.read_bytes())


@needs_salt
def test_no_rendered_secret_stays_in_salts_cache_after_a_run(tmp_path, monkeypatch):
    """Review F5: Salt's cache (the agent's cachedir) kept the rendered highstate with the accounting
    password in it (highstate.cache.p) after the pillar file was removed; the agent now clears it."""
    tree = tmp_path / "tree"
    tree.mkdir()
    for rel, text in TREE.items():
        (tree / rel).write_text(text)
    out = tmp_path / "out"
    out.mkdir()
    work = tmp_path / "state" / "salt"
    monkeypatch.setattr(node_agent, "STATE_DIR", str(tmp_path / "state"))
    pillar = {"out": str(out), "slurm": {"accounting": {"password": SECRET, "conf": f"StoragePass={SECRET}\n"}}}
    ok, changed, failed, _ = node_agent.apply(str(SALT_CALL), str(tree), pillar, ["secrets"], False, str(work))
    assert ok and changed == 2, failed
    assert (out / "slurmdbd.conf").read_text() == f"StoragePass={SECRET}\n"  # where the formula puts it, and only there
    assert _holding(tmp_path / "state", SECRET) == [], "a secret stayed in the agent's folder"


def test_what_a_killed_run_left_is_cleared_by_the_next_one(tmp_path, monkeypatch):
    """Review F5: a run killed while salt-call ran (SIGKILL, a reboot) never got to remove the pillar
    or the cache; the next run of the agent clears them before anything else."""
    monkeypatch.setattr(node_agent, "STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(node_agent, "IPTABLES", ("true",))  # test_metadata_guard.py applies the rules for real
    work = tmp_path / "state" / "salt"
    (work / "pillar").mkdir(parents=True)
    (work / "pillar" / "gpufleet.sls").write_text(json.dumps({"slurm": {"munge_key": SECRET}}))
    (work / "cache").mkdir()
    (work / "cache" / "highstate.cache.p").write_text(SECRET)
    cfg = _agent_config(tmp_path)
    _no_bucket(monkeypatch)
    assert node_agent.run(cfg) == 1  # no configuration in the bucket: nothing applied
    assert _holding(tmp_path / "state", SECRET) == []


def test_the_agents_logs_are_roots_alone(tmp_path, monkeypatch):
    """Review O2: /var/log/gpufleet was 0755 and node.log 0644 (cloud-init's and systemd's umask 022):
    a job user read every failed state's comment the agent logs. Each run now holds the folder to 0700
    and its logs to 0600, whatever made them; the bootstrap makes the folder 0700 before its first line."""
    monkeypatch.setattr(node_agent, "STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(node_agent, "IPTABLES", ("true",))
    logs = tmp_path / "log"
    logs.mkdir(mode=0o755)
    logs.chmod(0o755)
    for name in ("node.log", "bootstrap.log"):
        (logs / name).write_text("")
        (logs / name).chmod(0o644)
    cfg = {**_agent_config(tmp_path), "log": str(logs / "node.log")}
    _no_bucket(monkeypatch)
    node_agent.run(cfg)
    assert oct(logs.stat().st_mode & 0o777) == "0o700"
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in logs.iterdir()} == {"node.log": "0o600",
                                                                             "bootstrap.log": "0o600"}
    script = bootstrap.render(bootstrap.config("aws", cluster="c", pool="p", bucket="b", region="us-east-1"))
    first = script.index("/var/log/gpufleet")
    assert "mkdir -p -m 0700 /var/log/gpufleet" in script[first - 40:first + 20], script[:400]


def test_the_munge_keys_folder_is_the_owners_alone_whatever_the_umask(tmp_path, monkeypatch):
    """Review F6: the folder holding munge.key was made with the umask's mode (0755 under 022), an older
    gpufleet's left as it was; it is now 0700 (README: a secret is 0600 in a 0700 folder)."""
    from gpufleet.configure import slurm
    from gpufleet.paths import salt_run_dir

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    older = salt_run_dir("c2")  # an older gpufleet made the folder and the key
    older.mkdir(parents=True, mode=0o755)
    older.chmod(0o755)
    (older / "munge.key").write_bytes(b"k" * slurm.MUNGE_KEY_BYTES)
    (older / "munge.key").chmod(0o600)
    umask = os.umask(0o022)
    try:
        slurm.munge_key("c1")
        slurm.munge_key("c2")
    finally:
        os.umask(umask)
    for cluster in ("c1", "c2"):
        folder = salt_run_dir(cluster)
        assert oct(folder.stat().st_mode & 0o777) == "0o700", cluster
        assert oct((folder / "munge.key").stat().st_mode & 0o777) == "0o600", cluster


def _agent_config(tmp_path) -> dict:
    return bootstrap.config("aws", cluster="c", pool="gpu", bucket="b", region="us-east-1") | {"wait_s": 0}


def _no_bucket(monkeypatch):
    """A bucket that has nothing yet and takes the status: the run stops before Salt."""

    class Store:
        def __init__(self, cfg):
            pass

        def get(self, key):
            raise node_agent.NotThere(key)

        def put(self, key, body):
            pass

        def writer(self, nid):
            return nid

    monkeypatch.setitem(node_agent.STORES, "aws", Store)
    monkeypatch.setenv("GPUFLEET_NODE_ID", "i-1")


@needs_salt
def test_every_slurm_state_that_carries_a_secret_keeps_it_out_of_its_comment_and_output(tmp_path, cat):
    """Review O2: a failed state's comment goes into node.log and the node's status in the bucket, and
    its output into Salt's return. Rendered by the real Salt for a controller with accounting, every
    state of the slurm formula that carries the munge key or the database password (its value, or a
    pillar path to it) hides it: a file's diff (show_changes: False), a command's output (hide_output,
    output_loglevel: quiet) and never in a command line, which is what a failed cmd.run's comment says."""
    from gpufleet import stacks
    from gpufleet.configure import slurm
    from tests.saltrender import OSES, render
    from tests.unit.test_slurm import STACK

    path = tmp_path / "acct.yaml"
    path.write_text(STACK.replace("slurm: {health_check_interval: 120}", "slurm: {accounting: true}"))
    st = stacks.load(path, cat)
    ctl = slurm.node("ctl0", "10.0.0.5", st.pools[0], cpus=4, mem_gib=16, gpus=0, gpu=None)
    pil = slurm.pillars(st, "train", ctl, [], {"ctl-0": ("controller", {}, 0)}, bundle=b"PK", key=b"k" * 32)["ctl-0"]
    secrets = [pil["accounting"]["password"], pil["munge_key"]]
    states = render(SALT_CALL, tmp_path / "render", {**OSES["Debian-12"], "host": "ctl0"},
                    {"gpufleet": {"live": False}, "slurm": pil}, ["slurm"])
    carrying = {}
    for sid, body in states.items():
        for fun, args in ((k, v) for k, v in body.items() if not k.startswith("__")):
            text = json.dumps(args)
            if any(s in text for s in secrets) or "slurm:munge_key" in text or "slurm:accounting" in text:
                carrying[sid] = (fun, {k: v for d in args if isinstance(d, dict) for k, v in d.items()})
    assert set(carrying) >= {"slurm-munge-key-file-managed", "slurm-database-user-cmd-run",
                             "slurm-dbd-config-file-managed"}, sorted(carrying)
    for sid, (fun, kw) in carrying.items():
        if fun == "file":
            assert kw.get("show_changes") is False, sid
        else:
            assert fun == "cmd" and kw.get("hide_output") is True and kw.get("output_loglevel") == "quiet", sid
            for word in ("name", "unless", "onlyif"):
                assert not any(s in json.dumps(kw.get(word, "")) for s in secrets), (sid, word)

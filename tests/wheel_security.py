"""The security checks of issue 48 against the INSTALLED wheel (run by tests/test_wheel_install.py with
the wheel's virtualenv, from a folder outside the source tree, so only the installed package imports):

1. secrets on disk: the node agent's pillar and SaltSsh's configuration are 0600 in 0700 folders under
   umask 022, and the pillars are gone once Salt is done;
2. a node cannot speak for another: a status that claims another node is ignored;
3. quoting: a registry record with a shell command in it is refused by `gpufleet ssh-config` (exit 1,
   nothing written), and a sound one is shell-quoted as the real `ssh -G` reads it;
4. trust: a record in the team's store cannot choose the known_hosts file or the key `gpufleet ssh-config`
   writes (review F1): the real `ssh -G` reads this machine's known_hosts file of the host's site;
5. the metadata service: the user data a pool's nodes get carries an agent whose rules let only root
   reach the cloud's metadata addresses (TCP but DNS), by default (review O1).

Usage: python wheel_security.py WORKDIR (prints "ok" and exits 0 when every check holds).
"""

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import gpufleet
from gpufleet.clouds import node_agent
from gpufleet.configure import saltrun
from gpufleet.nodes.cloud import channel as cloudnodes
from gpufleet.state.registry import Node, Registry

RECORDER = """#!{python}
import json, os, sys
conf = sys.argv[sys.argv.index("-c") + 1]
seen = {{}}
for root, dirs, files in os.walk(conf):
    for n in dirs + files:
        p = os.path.join(root, n)
        seen[os.path.relpath(p, conf)] = oct(os.stat(p).st_mode & 0o777)
seen["."] = oct(os.stat(conf).st_mode & 0o777)
json.dump(seen, open({record!r}, "w"))
hosts = sys.argv[sys.argv.index("-L") + 1].split(",") if "-L" in sys.argv else []
print(json.dumps({{"local": {{}}}} if not hosts else {{h: {{"t_|-a_|-a_|-nop": {{"result": True, "changes": {{}}}}}}
                                                  for h in hosts}}))
"""


def mode(p) -> str:
    return oct(os.stat(p).st_mode & 0o777)


def recorder(path: Path, record: Path) -> Path:
    path.write_text(RECORDER.format(python=sys.executable, record=str(record)))
    path.chmod(0o755)
    return path


def secrets_on_disk(work: Path) -> None:
    os.umask(0o022)
    node_agent.STATE_DIR = str(work / "node")
    record = work / "salt-call.json"
    salt_call = recorder(work / "salt-call", record)
    salt_work = f"{node_agent.STATE_DIR}/salt"
    os.makedirs(node_agent.STATE_DIR)
    ok, _, failed, _ = node_agent.apply(str(salt_call), str(work), {"slurm": {"munge_key": "ab" * 32}}, ["x"], False,
                                        salt_work)
    assert ok, failed
    seen = json.loads(record.read_text())
    assert seen["."] == "0o700" and seen["pillar"] == "0o700" and seen["pillar/gpufleet.sls"] == "0o600", seen
    assert not os.path.exists(f"{salt_work}/pillar/gpufleet.sls"), "the agent left the pillar on disk"

    os.environ["XDG_DATA_HOME"] = str(work / "data")
    record = work / "salt-ssh.json"
    host = saltrun.RosterHost("rack-0", "192.0.2.1", 22, "root", None, str(work / "kh"),
                              {"slurm": {"munge_key": "ab" * 32}})
    runner = saltrun.SaltSsh("c1", [host], salt_ssh=recorder(work / "salt-ssh", record), states=work)
    (run,) = runner.apply(["rack-0"], ["node_base"]).values()
    assert run.ok, run.problem
    seen = json.loads(record.read_text())
    assert seen["."] == "0o700" and seen["pillar/host_rack_0.sls"] == "0o600" and seen["roster"] == "0o600", seen
    assert not (runner.dir / "pillar" / "host_rack_0.sls").exists(), "SaltSsh left the pillar on disk"


class Store:
    def __init__(self):
        self.objects = {}

    def get(self, key):
        return self.objects[key]

    def list(self, prefix):
        return [(k, str(hash(v))) for k, v in sorted(self.objects.items()) if k.startswith(prefix)], 1


def forged_status_refused() -> None:
    store = Store()
    ctl, gpu = cloudnodes.NodeTarget("ctl", 0, "i-c", "10.0.0.10"), cloudnodes.NodeTarget("gpu", 0, "i-g", "10.0.0.11")
    facts = {"hostname": "ctl", "address": "10.6.6.6", "cpus": 4, "mem_gib": 15}
    store.objects["status/ctl/AROA:i-c.json"] = json.dumps({"node_id": "i-c", "pool": "ctl", "ok": True, "generation": "g",
                                                            "facts": {**facts, "address": "10.0.0.10"}}).encode()
    store.objects["status/gpu/AROA:i-g.json"] = json.dumps({"node_id": "i-c", "pool": "ctl", "ok": True,
                                                            "generation": None, "facts": facts}).encode()
    t = [0.0]
    reports = cloudnodes.wait(store, [ctl, gpu], {"ctl": "g", "gpu": "g"}, timeout_s=10, poll_s=5, clock=lambda: t[0],
                              sleep=lambda s: t.__setitem__(0, t[0] + s))
    assert reports[0].facts["address"] == "10.0.0.10", reports[0].facts
    assert reports[1].state == "timeout" and "claims to be node 'i-c'" in reports[1].warnings[0], reports[1]


def quoting(work: Path) -> None:
    bin_ = work / "bin"
    bin_.mkdir()
    for tool in ("aws", "session-manager-plugin"):
        (bin_ / tool).write_text("#!/bin/sh\nexit 1\n")
        (bin_ / tool).chmod(0o755)
    env = {**os.environ, "GPUFLEET_REGISTRY": str(work / "r.db"), "XDG_DATA_HOME": str(work / "data"),
           "PATH": f"{bin_}:{os.environ['PATH']}"}
    touched = work / "X"

    def record(location: str) -> None:
        Registry(work / "r.db").record(
            name="c", stack="c", stack_file="", owner="o", expires_at="2099-01-01T00:00:00Z", backend=None,
            nodes=[Node(pool="gpu", idx=0, provider="aws", location=location, machine="g5.xlarge",
                        node_id="i-0123456789abcdef0", private_ip="10.0.0.4")])

    gpufleet_exe = str(Path(sys.executable).parent / "gpufleet")
    record(f"us-east-1; touch {touched}; true")
    out = work / "c.config"
    r = subprocess.run([gpufleet_exe, "ssh-config", "c", "--out", str(out)], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 1 and "region 'us-east-1; touch" in r.stderr and "refused" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not out.exists() and not touched.exists()
    record("us-east-1")
    r = subprocess.run([gpufleet_exe, "ssh-config", "c", "--out", str(out)], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert mode(out) == "0o600"
    ssh = shutil.which("ssh")
    if ssh:  # what the real OpenSSH client reads of it
        got = subprocess.run([ssh, "-G", "-F", str(out), "c-gpu-0"], capture_output=True, text=True, check=True).stdout
        assert ("proxycommand sh -c 'aws ssm start-session --target %h --document-name AWS-StartSSHSession "
                "--parameters portNumber=%p --region us-east-1'") in got, got
        assert "hostkeyalias i-0123456789abcdef0" in got


def store_record_cannot_choose_keys(work: Path) -> None:
    from gpufleet.state.shared import DirectoryStore

    team = work / "team"
    team.mkdir()
    (team / "team.json").write_text('{"by": "t", "at": "2026-01-01T00:00:00+00:00"}')  # what `team init` writes
    evil, victim_key = team / "evil_known_hosts", work / "victim_key"
    evil.write_text("[127.0.0.1]:2299 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAttackersOwnHostKeyAttackersOwnHostKey0\n")
    Registry(work / "attacker.db", shared=DirectoryStore(f"file://{team}")).record(
        name="kh", stack="kh", stack_file=str(team / "lab.yaml"), owner="o", expires_at="2099-01-01T00:00:00Z",
        backend=None, nodes=[Node(pool="rack", idx=0, provider="baremetal", location="lab", machine="x",
                                  node_id="127.0.0.1", private_ip="127.0.0.1", ssh_endpoint="127.0.0.1:2299")],
        access={"via": "direct", "user": "ops", "pools": ["rack"], "login_pools": [], "racks": {"rack-0": {
            "HostName": "127.0.0.1", "Port": "2299", "User": "root", "IdentityFile": str(victim_key),
            "UserKnownHostsFile": str(evil)}}})
    env = {**os.environ, "GPUFLEET_TEAM": f"file://{team}", "GPUFLEET_REGISTRY": str(work / "victim.db"),
           "XDG_DATA_HOME": str(work / "victim-data")}
    out = work / "kh.config"
    r = subprocess.run([str(Path(sys.executable).parent / "gpufleet"), "ssh-config", "kh", "--out", str(out)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    ssh = shutil.which("ssh")
    if ssh:
        got = subprocess.run([ssh, "-G", "-F", str(out), "kh-rack-0"], capture_output=True, text=True,
                             check=True).stdout
        assert f"userknownhostsfile {work / 'victim-data' / 'gpufleet' / 'known_hosts' / 'lab'}\n" in got, got
        assert str(evil) not in got and str(victim_key) not in got and "stricthostkeychecking true" in got, got
    else:
        assert str(evil) not in out.read_text() and str(victim_key) not in out.read_text()


def metadata_closed_to_job_users() -> None:
    import base64
    import lzma

    from gpufleet.clouds import bootstrap

    for cloud, addresses in (("aws", ["169.254.169.254"]), ("gcp", ["169.254.169.254"]),
                             ("azure", ["169.254.169.254", "168.63.129.16"])):
        script = bootstrap.render(bootstrap.config(cloud, cluster="c", pool="p", bucket="b"))
        cfg = json.loads(script.split("<<'GPUFLEET_CONFIG'\n", 1)[1].split("\nGPUFLEET_CONFIG", 1)[0])
        assert cfg["metadata"] == "root", cfg
        payload = script.split("<<'GPUFLEET_AGENT'\n", 1)[1].split("\nGPUFLEET_AGENT", 1)[0]
        shipped = {}
        exec(compile(lzma.decompress(base64.b85decode(payload)), "node_agent.py", "exec"), shipped)
        chain, jumps = shipped["metadata_rules"](cloud)
        assert jumps == [f"-d {a}/32 -p tcp -j GPUFLEET-METADATA" for a in addresses], jumps
        assert chain == ["-A GPUFLEET-METADATA -p tcp -m tcp --dport 53 -j RETURN",
                         "-A GPUFLEET-METADATA -m owner --uid-owner 0 -j RETURN",
                         "-A GPUFLEET-METADATA -p tcp -j REJECT --reject-with icmp-port-unreachable"], chain
        assert "--metadata" in shipped["METADATA_UNIT_TEXT"] and "Before=network-pre.target" in \
            shipped["METADATA_UNIT_TEXT"]


def main(work: Path) -> int:
    assert "site-packages" in gpufleet.__file__, f"not the installed wheel: {gpufleet.__file__}"
    assert stat.S_ISDIR(os.stat(work).st_mode)
    secrets_on_disk(work)
    forged_status_refused()
    quoting(work)
    store_record_cannot_choose_keys(work)
    metadata_closed_to_job_users()
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))

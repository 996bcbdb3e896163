"""What a cluster's record in the registry may say about reaching its rack hosts, proven with the real
OpenSSH client (``ssh -G`` and ``ssh`` into a real ``sshd`` on 127.0.0.1, tests/loopback_sshd.py).

A record that came from the team's store is written by whoever can write the store: it may name the
hosts (checked against their formats), never a file of this machine. The known_hosts file that pins
their keys is this machine's own file of the host's site, the key is the operator's own ssh config,
and a stack file the store names is read only when the operator passes it (``--stack``)."""

import json
import os
import shutil
import subprocess

import pytest

from gpufleet.fleet import ssh as op
from gpufleet.state.registry import Node, Registry
from gpufleet.state.shared import DirectoryStore

import loopback_sshd

SSH = shutil.which("ssh")
needs_sshd = pytest.mark.skipif(SSH is None or not loopback_sshd.USABLE,
                                reason="needs the OpenSSH client and server, as root")


def everything(cmd):
    return "/usr/bin/" + cmd


def resolved(path, alias: str) -> dict[str, str]:
    """What the real OpenSSH client makes of ``alias`` with this config (``ssh -G``)."""
    out = subprocess.run([SSH, "-G", "-F", str(path), alias], capture_output=True, text=True, check=True).stdout
    return {k: v for k, _, v in (line.partition(" ") for line in out.splitlines())}


def _rack_node(address: str, port: int, site: str = "lab") -> Node:
    return Node(pool="rack", idx=0, provider="baremetal", location=site, machine="4x A100-80GB", node_id=address,
                private_ip=address, ssh_endpoint=f"{address}:{port}")


@pytest.fixture
def team(tmp_path):
    (tmp_path / "team").mkdir()
    return DirectoryStore(f"file://{tmp_path / 'team'}")


@pytest.fixture
def attacker(tmp_path):
    """An sshd whose host key the attacker holds, which lets the victim's key in (it logs what it is
    sent), and the victim's key pair on the victim's machine."""
    victim_key = tmp_path / "home" / ".ssh" / "id_lab"
    victim_key.parent.mkdir(parents=True)
    with loopback_sshd.serve(tmp_path / "evil-sshd", loopback_sshd.keygen(victim_key)) as (port, host_pub):
        yield port, host_pub, victim_key


def _connects(tmp_path, cfg_path, alias: str) -> subprocess.CompletedProcess:
    """``ssh -F CONFIG ALIAS echo CONNECTED`` as the victim runs it (their own home, no agent)."""
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home")}
    return subprocess.run([SSH, "-F", str(cfg_path), "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", alias,
                           "echo", "CONNECTED"], capture_output=True, text=True, env=env, timeout=60)


@needs_sshd
def test_a_store_record_cannot_choose_the_known_hosts_file_or_the_key(tmp_path, team, attacker, monkeypatch):
    """Review F1: a record in the team's store named the victim's key and a known_hosts file of the
    attacker's (in the store's own folder); `ssh-config` wrote both and the victim's ssh logged in to
    the attacker's host. Now the key and known_hosts a store record names are ignored: the site's own
    known_hosts file of this machine pins the host, and it does not know the attacker's key."""
    port, host_pub, victim_key = attacker
    evil = tmp_path / "team" / "clusters" / "evil_known_hosts"
    evil.parent.mkdir(parents=True, exist_ok=True)
    evil.write_text(f"[127.0.0.1]:{port} {host_pub}\n")
    Registry(tmp_path / "attacker.db", shared=team).record(
        name="kh", stack="kh", stack_file="/nonexistent/lab.yaml", owner="o", expires_at="2099-01-01T00:00:00Z",
        backend=None, nodes=[_rack_node("127.0.0.1", port)], access={
            "via": "direct", "user": "ops", "pools": ["rack"], "login_pools": [], "racks": {"rack-0": {
                "HostName": "127.0.0.1", "Port": str(port), "User": "root", "IdentityFile": str(victim_key),
                "UserKnownHostsFile": str(evil)}}})
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    victim = Registry(tmp_path / "victim.db", shared=team)
    cfg = op.ssh_config("kh", registry=victim, path=tmp_path / "kh.conf", which=everything)
    got = resolved(cfg.path, "kh-rack-0")
    assert got["userknownhostsfile"] == str(tmp_path / "data" / "gpufleet" / "known_hosts" / "lab"), got
    assert str(victim_key) not in got["identityfile"] and got["stricthostkeychecking"] == "true"
    r = _connects(tmp_path, cfg.path, "kh-rack-0")
    assert "CONNECTED" not in r.stdout and r.returncode != 0, r.stdout + r.stderr
    assert "Host key verification failed" in r.stderr, r.stderr


STACK = """\
name: lab
owner: ops@example.com
access: {{user: ops, via: direct}}
pools:
  - name: rack
    provider: baremetal
    site: lab
    gpu: A100-80GB
    gpus_per_node: 4
    known_hosts: {known_hosts}
    hosts:
      - {{address: 127.0.0.1, port: {port}, user: root, key: {key}}}
"""


@needs_sshd
def test_a_stack_file_the_store_names_is_read_only_when_passed(tmp_path, team, attacker, monkeypatch, cat):
    """Review F1, by the stack file: the store's record named a stack file the attacker wrote into the
    store's folder (its known_hosts theirs, its key the victim's), and ssh-config loaded it because it
    existed. A stack file a store record names is now only a hint: without --stack the record's checked
    route and this machine's known_hosts are used; with --stack the operator chose the file."""
    port, host_pub, victim_key = attacker
    clusters = tmp_path / "team" / "clusters"
    clusters.mkdir(parents=True, exist_ok=True)
    (clusters / "evil_known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub}\n")
    (clusters / "lab.yaml").write_text(STACK.format(known_hosts="evil_known_hosts", port=port, key=victim_key))
    Registry(tmp_path / "attacker.db", shared=team).record(
        name="lab", stack="lab", stack_file=str(clusters / "lab.yaml"), owner="o", expires_at="2099-01-01T00:00:00Z",
        backend=None, nodes=[_rack_node("127.0.0.1", port)], access={})
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    victim = Registry(tmp_path / "victim.db", shared=team)
    cfg = op.ssh_config("lab", registry=victim, cat=cat, path=tmp_path / "lab.conf", which=everything)
    got = resolved(cfg.path, "lab-rack-0")
    assert got["userknownhostsfile"] == str(tmp_path / "data" / "gpufleet" / "known_hosts" / "lab"), got
    assert any("--stack" in n and str(clusters / "lab.yaml") in n for n in cfg.notes), cfg.notes
    r = _connects(tmp_path, cfg.path, "lab-rack-0")
    assert "CONNECTED" not in r.stdout and "Host key verification failed" in r.stderr, r.stdout + r.stderr
    # the operator's own copy of the stack, passed on purpose, is read
    mine = tmp_path / "mine.yaml"
    (tmp_path / "my_known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub}\n")
    mine.write_text(STACK.format(known_hosts=tmp_path / "my_known_hosts", port=port, key=victim_key))
    cfg = op.ssh_config("lab", registry=victim, cat=cat, path=tmp_path / "lab.conf", which=everything,
                        stack_file=mine)
    assert "CONNECTED" in _connects(tmp_path, cfg.path, "lab-rack-0").stdout


def test_down_verify_and_status_never_read_a_stack_file_the_store_names(tmp_path, team, monkeypatch, cat):
    """Review F1: `down` (racks.stack_of), `verify CLUSTER` and `status` loaded the stack file a store's
    record named whenever it existed here; each now reads it only when passed, and says how."""
    from gpufleet import stacks

    from conftest import cli

    planted = tmp_path / "team" / "lab.yaml"  # beside the store's objects, where its writers can put files
    planted.write_text(STACK.format(known_hosts="evil_known_hosts", port=2222, key="/home/victim/.ssh/id_lab"))
    (tmp_path / "team" / "team.json").write_text('{"by": "t", "at": "2026-01-01T00:00:00+00:00"}')
    monkeypatch.setenv("GPUFLEET_TEAM", team.url)
    monkeypatch.setenv("GPUFLEET_REGISTRY", str(tmp_path / "victim.db"))
    Registry(tmp_path / "attacker.db", shared=team).record(
        name="lab", stack="lab", stack_file=str(planted), owner="o", expires_at="2099-01-01T00:00:00Z",
        backend=None, nodes=[_rack_node("192.0.2.31", 2222)], access={})
    loaded = []
    real_load = stacks.load
    monkeypatch.setattr(stacks, "load", lambda path, *a, **k: (loaded.append(str(path)), real_load(path, *a, **k))[1])

    res = cli("down", "lab", "--yes")
    assert res.exit_code == 2 and "gpufleet down STACK" in res.output and "Traceback" not in res.output, res.output
    res = cli("verify", "lab")
    assert res.exit_code == 2 and "gpufleet verify STACK --cluster lab" in res.output, res.output
    res = cli("--json", "status", "lab", "--local")
    assert res.exit_code == 0, res.output
    (row,) = json.loads(res.stdout)["clusters"]
    assert row["scheduler"] is None and any("not asked" in n and "gpufleet status" in n for n in row["notes"]), row
    assert str(planted) not in loaded, loaded


# ---------------------------------------------------------------- values OpenSSH itself would refuse

def _own_record(tmp_path, rack: dict) -> Registry:
    """A registry this machine wrote alone (its paths are the operator's own) with two rack hosts."""
    reg = Registry(tmp_path / "own.db")
    nodes = [_rack_node("192.0.2.21", 22), Node(pool="rack", idx=1, provider="baremetal", location="lab",
                                                machine="x", node_id="192.0.2.22", private_ip="192.0.2.22",
                                                ssh_endpoint="192.0.2.22:22")]
    reg.record(name="lab", stack="lab", stack_file="", owner="o", expires_at="2099-01-01T00:00:00Z", backend=None,
               nodes=nodes, access={"via": "direct", "user": "ops", "pools": ["rack"], "login_pools": [], "racks": {
                   "rack-0": {"HostName": "192.0.2.21", "Port": "22", "User": "admin", **rack},
                   "rack-1": {"HostName": "192.0.2.22", "Port": "22", "User": "admin"}}})
    return reg


@pytest.mark.skipif(SSH is None, reason="the OpenSSH client is not installed")
@pytest.mark.parametrize("path", ["/home/alice/bob's/key", "#k", "=/keys/k", "/keys/back\\slash", '/keys/a "quoted" one',
                                  "/keys/50%", "/keys/with space"])
def test_a_path_ssh_parses_specially_is_written_so_ssh_reads_it_whole(tmp_path, path):
    """Review F2: OpenSSH splits every line of an Included file, whichever host it is for (readconf.c,
    argv_split): a ' opened a quote that never closed (`invalid quotes`: every host failed), a leading #
    was a comment (`Missing argument`), a leading = was taken as the separator. Paths are now written in
    double quotes with \\ and " escaped (and % as %%): the real ssh reads each one back whole, and the
    other host still resolves."""
    cfg = op.config("lab", registry=_own_record(tmp_path, {"IdentityFile": path}), path=tmp_path / "lab.conf")
    op.write(cfg)
    assert resolved(cfg.path, "lab-rack-0")["identityfile"] == path.replace("%", "%%")  # -G shows it unexpanded
    assert resolved(cfg.path, "lab-rack-1")["hostname"] == "192.0.2.22"


@pytest.mark.parametrize("field,value,says", [("Port", "0", "a TCP port"), ("Port", "65536", "a TCP port"),
                                              ("IdentityFile", "${NOPE}/k", "no ${")])
def test_a_recorded_value_ssh_would_refuse_is_refused_before_anything_is_written(tmp_path, field, value, says):
    """Review F2: `Port 0` made ssh stop at the file (`Bad port '0'`, every host with it once Included); a
    ${VAR} in a path is expanded by ssh from the environment at connection time, and has no escape."""
    from gpufleet.errors import UntrustedValue

    with pytest.raises(UntrustedValue, match="racks.rack-0" if field == "Port" else field) as e:
        op.config("lab", registry=_own_record(tmp_path, {field: value}), path=tmp_path / "lab.conf")
    assert says in str(e.value), str(e.value)
    assert not (tmp_path / "lab.conf").exists()


def test_a_stack_key_or_known_hosts_path_salt_ssh_would_split_is_refused_at_validate_time(tmp_path, cat):
    """Review F2: `key: keys/ops'_ed25519` validated, then broke the ssh config (`invalid quotes`) and
    salt-ssh, which pastes `-o IdentityFile=PATH` into a line it splits as a shell does (Salt 3008
    salt/client/ssh/shell.py: _key_opts, _split_cmd's shlex.split), and passes it to ssh, which expands %
    in it. The stack's key and known_hosts now take a path without whitespace, quotes, \\, % or $."""
    from gpufleet import stacks
    from gpufleet.errors import SpecErrors

    for key, known in (("keys/ops'_ed25519", "kh"), ("keys/ops key", "kh"), ("keys/k", "kh%d"),
                       ("keys/k", "$HOME/kh")):
        (tmp_path / "lab.yaml").write_text(STACK.format(known_hosts=json.dumps(known), port=22, key=json.dumps(key)))
        with pytest.raises(SpecErrors) as e:
            stacks.load(tmp_path / "lab.yaml", cat)
        said = str(e.value)
        assert ("hosts[0].key" if key != "keys/k" else "known_hosts") in said and "lab.yaml:" in said, said


@pytest.mark.skipif(SSH is None, reason="the OpenSSH client is not installed")
def test_a_config_ssh_refuses_is_never_installed(tmp_path, monkeypatch):
    """The written file is read by the real `ssh -G` before it replaces the old one: whatever it refuses
    (a value no check here foresaw) is an error with ssh's own words, and the old file stays."""
    from gpufleet.errors import GpufleetError

    cfg = op.config("lab", registry=_own_record(tmp_path, {}), path=tmp_path / "lab.conf")
    op.write(cfg)
    before = cfg.path.read_text()
    monkeypatch.setattr(op.SshConfig, "text", lambda self: before + "Host other\n    Port 0\n")
    with pytest.raises(GpufleetError, match="Bad port '0'") as e:
        op.write(cfg)
    assert e.value.exit_code == 1 and cfg.path.read_text() == before


@pytest.mark.parametrize("change", [
    {"racks": {"rack-0": {"HostName": "192.0.2.21", "IdentityFile": ["a", "b"]}}},
    {"racks": {"rack-0": {"HostName": "192.0.2.21", "Port": [22]}}},
    {"racks": {"rack-0": "192.0.2.21"}},
    {"racks": ["rack-0"]},
    {"pools": "rack"},
    {"user": ["ops"]},
])
def test_a_record_of_the_wrong_type_is_refused_not_written_as_pythons_repr(tmp_path, change):
    """Review F7: a record's IdentityFile ["a", "b"] was accepted and written as "['a', 'b']"; each
    value of the access record is now checked for its type too."""
    from gpufleet.errors import UntrustedValue

    reg = _own_record(tmp_path, {})
    rec = reg.get("lab")
    reg.record(name="lab", stack="lab", stack_file="", owner="o", expires_at="2099-01-01T00:00:00Z", backend=None,
               nodes=rec.nodes, access={**rec.access, **change})
    with pytest.raises(UntrustedValue):
        op.config("lab", registry=reg, path=tmp_path / "lab.conf")
    assert not (tmp_path / "lab.conf").exists()


def test_an_azure_vms_unique_id_travels_through_the_store_in_a_record_older_gpufleet_reads(tmp_path, team):
    """Review F3: the vmId `up` records (what an Azure VM's host key is filed under) reaches a teammate's
    machine; each node in the store's object keeps the fields a gpufleet of before reads (it refuses a
    node with a key it does not know), the ids beside them."""
    from gpufleet.state.registry import Node as RegistryNode

    vm = ("/subscriptions/0000/resourceGroups/gpufleet-c-eastus/providers/Microsoft.Compute/virtualMachineScaleSets/"
          "c-nd/virtualMachines/0")
    uid = "3f2b8a9e-4c1d-4e7a-9b0c-123456789abc"
    node = RegistryNode(pool="nd", idx=0, provider="azure", location="eastus", machine="Standard_ND96isr_H100_v5",
                        node_id=vm, private_ip="10.64.1.4", vm_uid=uid)
    Registry(tmp_path / "a.db", shared=team).record(name="c", stack="c", stack_file="", owner="o",
                                                    expires_at="2099-01-01T00:00:00Z", backend=None, nodes=[node])
    doc = json.loads(team.read("clusters/c.json")[0])
    assert doc["vm_uids"] == {"nd/0": uid}
    assert set(doc["nodes"][0]) == {"pool", "idx", "provider", "location", "machine", "zone", "node_id", "private_ip",
                                    "ssh_endpoint", "usd_per_hour", "launched_at"}  # as before vm_uid
    (theirs,) = Registry(tmp_path / "b.db", shared=team).get("c").nodes
    assert theirs.vm_uid == uid
    cfg = op.config("c", registry=Registry(tmp_path / "b.db", shared=team), path=tmp_path / "c.conf")
    assert cfg.entries[0].options["HostKeyAlias"] == uid

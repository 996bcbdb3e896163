"""`gpufleet ssh-config` and `gpufleet ssh`: each cloud's private route in the form its documentation
gives, racks directly, a bastion pool by ProxyJump; proven with the real OpenSSH client (``ssh -G``
parses and resolves the file; ``ssh`` itself runs each ProxyCommand, whose program is a stand-in
that records the arguments OpenSSH expanded), the Azure relay against a stand-in ``az``, the missing
tools and bad input.

The cluster is the mixed example (AWS, GCP, Azure and a rack) as `plan` predicts it, recorded in a
registry the way `up` records it (``state.registry.nodes_from_outputs``)."""

import json
import os
import shlex
import shutil
import subprocess
import sys
import textwrap

import pytest

from gpufleet import stacks
from gpufleet.clouds.azure import access as azure_access
from gpufleet.engine import plan as planner
from gpufleet.errors import UntrustedValue
from gpufleet.fleet import ssh as op
from gpufleet.state.registry import Node, Registry, nodes_from_outputs

from conftest import ROOT, cli

pytest.importorskip("pulumi")
SSH = shutil.which("ssh")
needs_ssh = pytest.mark.skipif(SSH is None, reason="the OpenSSH client is not installed")
MIXED = ROOT / "stacks" / "examples" / "mixed.yaml"
ALL = ("ssh", "aws", "session-manager-plugin", "gcloud", "az")


@pytest.fixture(scope="module")
def predicted(tmp_path_factory):
    """The mixed example's nodes as `plan` predicts them (ids, addresses, zones)."""
    from gpufleet import catalog

    cat = catalog.load(use_config=False)
    st = stacks.load(MIXED, cat)
    return nodes_from_outputs(planner.plan(st, cat, workers=1).outputs)


def _record(reg: Registry, name: str, stack_file, nodes) -> None:
    reg.record(name=name, stack=name, stack_file=str(stack_file), owner="o", expires_at="2099-01-01T00:00:00Z",
               backend=None, nodes=nodes)


def _rack_nodes():
    return [Node(pool="rack", idx=i, provider="baremetal", location="lab", machine="4x A100-80GB",
                 node_id=a, private_ip=a, ssh_endpoint=f"{a}:22") for i, a in enumerate(["192.0.2.21", "192.0.2.22"])]


@pytest.fixture
def mixed(tmp_path, predicted, monkeypatch, cat):
    monkeypatch.setenv("GPUFLEET_REGISTRY", str(tmp_path / "registry.db"))
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "ml-prod")
    reg = Registry(tmp_path / "registry.db")
    _record(reg, "mixed-fleet", MIXED, predicted + _rack_nodes())
    return reg


def _stack_file(tmp_path, access: str, extra_pool: str = "") -> str:
    text = MIXED.read_text().replace("access:\n  public_key: keys/example.pub\n  ssh_cidrs: [198.51.100.0/24]\n",
                                     f"access:\n  public_key: {ROOT}/stacks/examples/keys/example.pub\n{access}")
    text = text.replace("pools:\n", "pools:\n" + extra_pool, 1)
    path = tmp_path / "stack.yaml"
    path.write_text(text)
    return path


def parse(text: str) -> dict[str, dict[str, str]]:
    """An OpenSSH config as {Host line: {keyword: value}} (our own reading; ``ssh -G`` is the real one)."""
    out, cur = {}, None
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, _, value = line.strip().partition(" ")
        if key == "Host":
            cur = out.setdefault(value, {})
        else:
            cur[key] = value
    return out


def resolved(path, alias: str) -> dict[str, str]:
    """What the real OpenSSH client makes of ``alias`` with this config: ``ssh -G`` (keywords lowercase)."""
    out = subprocess.run([SSH, "-G", "-F", str(path), alias], capture_output=True, text=True, check=True).stdout
    return {k: v for k, _, v in (line.partition(" ") for line in out.splitlines())}


def everything(_cmd):
    return "/usr/bin/" + _cmd


# ---------------------------------------------------------------- the documented forms, per cloud


def test_each_cloud_gets_its_documented_proxy_command_and_racks_go_directly(mixed, cat, tmp_path):
    cfg = op.ssh_config("mixed-fleet", registry=mixed, cat=cat, which=everything)
    assert cfg.path == tmp_path / "xdg-data" / "gpufleet" / "ssh" / "mixed-fleet.config"
    hosts = parse(cfg.path.read_text())
    (aws_id,) = [e.options["HostName"] for e in cfg.entries if e.pool == "aws-a100"]
    assert aws_id.startswith("i-")
    # AWS: Systems Manager's page word for word (each word shell-quoted), plus the node's region;
    # the host key filed under the instance id
    assert hosts["mixed-fleet-aws-a100-0 mixed-fleet-login"] == {
        "HostName": aws_id, "Port": "22", "User": "ubuntu", "HostKeyAlias": aws_id,
        "ProxyCommand": "sh -c 'aws ssm start-session --target %h --document-name AWS-StartSSHSession "
                        "--parameters portNumber=%p --region us-west-2'"}
    # GCP: gcloud's start-iap-tunnel on stdin, the VM's bulkInsert name, the project up used, its zone;
    # the host key filed under compute.<instance id>, as gcloud files it
    gcp = hosts["mixed-fleet-gcp-l4-2"]
    zone, gcp_id = next((n.zone, n.node_id) for n in mixed.get("mixed-fleet").nodes if (n.pool, n.idx) == ("gcp-l4", 2))
    assert gcp == {"HostName": "mixed-fleet-gcp-l4-2", "Port": "22", "User": "ubuntu", "HostKeyAlias": f"compute.{gcp_id}",
                   "ProxyCommand": f"gcloud compute start-iap-tunnel mixed-fleet-gcp-l4-2 %p --listen-on-stdin "
                                   f"--project=ml-prod --zone={zone}"}
    # Azure: the relay around `az network bastion tunnel`, to the scale set instance, via the region's Bastion
    az = hosts["mixed-fleet-azure-t4-1"]
    vm = next(n.node_id for n in mixed.get("mixed-fleet").nodes if (n.pool, n.idx) == ("azure-t4", 1))
    words = shlex.split(az["ProxyCommand"])
    assert words[:3] == [sys.executable, "-m", "gpufleet.clouds.azure.access"]
    assert words[3:] == ["--name", "mixed-fleet-eastus-bastion", "--resource-group", "gpufleet-mixed-fleet-eastus",
                         "--target-resource-id", vm, "--resource-port", "22"]  # the mocks' ids name no subscription
    # a rack host: its own address, port, user and key, checked against the site's known_hosts
    rack = hosts["mixed-fleet-rack-1"]
    assert rack == {"HostName": "192.0.2.22", "Port": "22", "User": "root",
                    "UserKnownHostsFile": f'"{tmp_path / "xdg-data" / "gpufleet" / "known_hosts" / "lab"}"',  # always quoted
                    "StrictHostKeyChecking": "yes"}
    assert cfg.include_line() == f"Include {cfg.path}"  # the test's data folder is outside HOME


@needs_ssh
def test_the_real_openssh_client_parses_and_resolves_every_host(mixed, cat):
    cfg = op.ssh_config("mixed-fleet", registry=mixed, cat=cat, which=everything)
    for e in cfg.entries:
        got = resolved(cfg.path, e.alias)
        assert got["hostname"] == e.options["HostName"].lower(), e.alias  # ssh -G lowercases host names
        assert got["port"] == e.options["Port"] and got["user"] == e.options["User"]
        if "ProxyCommand" in e.options:  # ssh -G shows it as written (tokens expanded only when it runs)
            assert got["proxycommand"] == e.options["ProxyCommand"]
    login = resolved(cfg.path, "mixed-fleet-login")
    assert login["hostname"] == resolved(cfg.path, "mixed-fleet-aws-a100-0")["hostname"]


def _stand_in(folder, name: str, body: str = "") -> None:
    """A program on PATH that records its arguments (one JSON line) and exits 1."""
    path = folder / name
    path.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                    f"open(os.environ['RECORD'], 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n{body}\nsys.exit(1)\n")
    path.chmod(0o755)


@needs_ssh
def test_openssh_runs_each_proxy_command_with_the_documented_arguments(mixed, cat, tmp_path, monkeypatch):
    """The real ssh expands %h and %p and runs the ProxyCommand through the shell: the stand-ins for
    aws and gcloud see exactly the arguments their documentation gives."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for name in ("aws", "gcloud"):
        _stand_in(bin_, name)
    record = tmp_path / "argv.jsonl"
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "RECORD": str(record)}
    cfg = op.ssh_config("mixed-fleet", registry=mixed, cat=cat, which=everything)
    aws_id = next(e.options["HostName"] for e in cfg.entries if e.pool == "aws-a100")
    zone = next(n.zone for n in mixed.get("mixed-fleet").nodes if n.pool == "gcp-l4")
    for alias in ("mixed-fleet-login", "mixed-fleet-gcp-l4-0"):
        subprocess.run([SSH, "-F", str(cfg.path), "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", alias, "true"],
                       env=env, capture_output=True, timeout=60)
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    assert calls == [
        ["ssm", "start-session", "--target", aws_id, "--document-name", "AWS-StartSSHSession",
         "--parameters", "portNumber=22", "--region", "us-west-2"],
        ["compute", "start-iap-tunnel", "mixed-fleet-gcp-l4-0", "22", "--listen-on-stdin", "--project=ml-prod",
         f"--zone={zone}"]]


def _hostile(predicted, pool: str, **fields):
    """The mixed example's nodes with one node of ``pool`` recorded as someone else wrote it."""
    import dataclasses

    return [dataclasses.replace(n, **fields) if (n.pool, n.idx) == (pool, 0) else n for n in predicted]


HOSTILE = [  # (pool, the registry's record of its first node, the field refused, the stack's access block)
    ("aws-a100", {"location": "us-west-2; touch {x}; true"}, "region", ""),
    ("aws-a100", {"node_id": "i-0123456789abcdef0\n    ProxyCommand touch {x}"}, "instance id", ""),
    ("aws-a100", {"location": "us-west-2%n"}, "region", ""),
    ("gcp-l4", {"zone": "us-central1-a; touch {x}"}, "zone", ""),
    ("azure-t4", {"private_ip": "10.64.2.4\n    ProxyCommand touch {x}"}, "private address", ""),
    ("azure-t4", {"node_id": "/s/virtualMachines/0 `touch {x}`"}, "VM id", ""),
    ("gcp-l4", {"ssh_endpoint": "10.64.1.4\n    ProxyCommand touch {x}:22"}, "address", "  via: direct\n"),
    ("rack", {"ssh_endpoint": "192.0.2.21\n    ProxyCommand touch {x}:22"}, "address", "GONE"),
]


@needs_ssh
@pytest.mark.parametrize("pool, record, field, access", HOSTILE)
def test_a_hostile_registry_record_is_refused_and_never_runs(predicted, monkeypatch, cat, tmp_path, pool, record,
                                                             field, access):
    """Issue 48 item 3: in team mode the registry's records come from the team's store. Pasted
    into the config unquoted, `location = "us-east-1; touch X; true"` ran `touch` under the real
    ssh (so did a newline that adds a ProxyCommand line, and a zone, an address or an ARM id).
    Now each is refused at write time, naming the node and the field, and nothing is written;
    were it written, the real ssh is run on it here to show what would have run."""
    x = tmp_path / "X"
    monkeypatch.setenv("GPUFLEET_REGISTRY", str(tmp_path / "r.db"))
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "ml-prod")
    stack = "/nowhere/stack.yaml" if access == "GONE" else _stack_file(tmp_path, access)
    nodes = _hostile(predicted + _rack_nodes(), pool, **{k: v.format(x=x) for k, v in record.items()})
    _record(Registry(tmp_path / "r.db"), "mixed-fleet", stack, nodes)
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for name in ("aws", "gcloud", "az"):
        _stand_in(bin_, name)
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "RECORD": str(tmp_path / "argv.jsonl")}
    out = tmp_path / "ssh.config"
    try:
        cfg = op.ssh_config("mixed-fleet", registry=Registry(tmp_path / "r.db"), cat=cat, which=everything, path=out)
    except UntrustedValue as e:
        refused = e
    else:
        refused = None
        subprocess.run([SSH, "-F", str(cfg.path), "-o", "BatchMode=yes", "-o", "ConnectTimeout=3",
                        f"mixed-fleet-{pool}-0", "true"], env=env, capture_output=True, timeout=60)
    assert not x.exists(), "a value from the registry ran as a shell command"
    assert refused is not None and not out.exists()
    assert refused.message.startswith(f"the registry's record of mixed-fleet node {pool}-0: {field} ")
    assert refused.message.endswith(": refused") and refused.exit_code == 1


@needs_ssh
def test_the_written_config_keeps_paths_with_spaces_and_percent_whole(mixed, cat, tmp_path, monkeypatch):
    """Local paths (a rack's key, its known_hosts) may hold a space or a %: quoted and escaped, the
    real ssh reads them back whole; a value that is not one word is refused, never split."""
    home = tmp_path / "my home %d"
    monkeypatch.setenv("XDG_DATA_HOME", str(home))
    cfg = op.ssh_config("mixed-fleet", registry=mixed, cat=cat, which=everything)
    assert resolved(cfg.path, "mixed-fleet-rack-1")["userknownhostsfile"] == str(
        home / "gpufleet" / "known_hosts" / "lab")
    assert resolved(cfg.path, "mixed-fleet-gcp-l4-1")["hostkeyalias"].startswith("compute.")
    with pytest.raises(UntrustedValue, match="User 'ubuntu root' is not one word"):
        op.config_value("User", "ubuntu root", "here")


# a stand-in `az`: `network bastion tunnel ... --port N` listens on N and echoes what it is sent
ECHO_AZ = textwrap.dedent("""\
    import socket
    args = sys.argv[1:]
    port = int(args[args.index("--port") + 1])
    srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port)); srv.listen(1)
    conn, _ = srv.accept()
    while data := conn.recv(65536):
        conn.sendall(data.upper())
    conn.close()
    """)


def test_the_azure_relay_starts_the_tunnel_relays_and_stops_it(tmp_path):
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    _stand_in(bin_, "az", ECHO_AZ)
    record = tmp_path / "argv.jsonl"
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "RECORD": str(record)}
    cmd = azure_access.proxy_command(bastion="b", group="rg", target="/subscriptions/s/x", subscription="s")
    res = subprocess.run(cmd, shell=True, input=b"ssh-2.0 hello\n", capture_output=True, env=env, timeout=60)
    assert res.stdout == b"SSH-2.0 HELLO\n", res.stderr
    (argv,) = [json.loads(line) for line in record.read_text().splitlines()]
    assert argv[:-1] == ["network", "bastion", "tunnel", "--name", "b", "--resource-group", "rg",
                         "--target-resource-id", "/subscriptions/s/x", "--resource-port", "22", "--subscription", "s",
                         "--port"]
    assert res.returncode == 0


def test_the_azure_relay_says_when_the_tunnel_fails(tmp_path):
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    _stand_in(bin_, "az", "sys.stderr.write('ERROR: bastion not found\\n')")
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "RECORD": str(tmp_path / "r")}
    cmd = azure_access.proxy_command(bastion="b", group="rg", target="t", subscription=None)
    res = subprocess.run(cmd, shell=True, input=b"", capture_output=True, env=env, timeout=60)
    assert res.returncode == 255 and b"bastion not found" in res.stderr and b"exited (1)" in res.stderr
    assert res.stdout == b""  # nothing but the connection ever goes to ssh


# ---------------------------------------------------------------- bastion pool, direct


BASTION_POOL = """\
  - name: jump
    provider: aws
    region: us-west-2
    instance_type: p4d.24xlarge
    nodes: 1
    public_ip: true
"""


@needs_ssh
def test_a_bastion_pool_is_the_proxy_jump_of_every_other_cloud_node(tmp_path, predicted, monkeypatch, cat):
    path = _stack_file(tmp_path, "  ssh_cidrs: [198.51.100.0/24]\n  via: bastion\n  bastion_pool: jump\n",
                       BASTION_POOL)
    monkeypatch.setenv("GPUFLEET_REGISTRY", str(tmp_path / "r.db"))
    reg = Registry(tmp_path / "r.db")
    jump = Node(pool="jump", idx=0, provider="aws", location="us-west-2", machine="p4d.24xlarge",
                node_id="i-0123456789abcdef0", private_ip="10.64.9.4", ssh_endpoint="198.51.100.77:22")
    _record(reg, "mixed-fleet", path, [jump] + predicted + _rack_nodes())
    cfg = op.ssh_config("mixed-fleet", registry=reg, cat=cat, which=lambda c: None if c in ALL[1:] else "/x")
    hosts = parse(cfg.path.read_text())
    assert hosts["mixed-fleet-jump-0 mixed-fleet-login"] == {"HostName": "198.51.100.77", "Port": "22",
                                                             "HostKeyAlias": "i-0123456789abcdef0", "User": "ubuntu"}
    gcp = next(n for n in predicted if (n.pool, n.idx) == ("gcp-l4", 3))
    assert hosts["mixed-fleet-gcp-l4-3"] == {"HostName": gcp.private_ip, "Port": "22",
                                             "HostKeyAlias": f"compute.{gcp.node_id}",
                                             "ProxyJump": "mixed-fleet-jump-0", "User": "ubuntu"}
    assert "ProxyJump" not in hosts["mixed-fleet-rack-0"]  # racks: directly
    got = resolved(cfg.path, "mixed-fleet-gcp-l4-3")
    assert got["proxyjump"] == "mixed-fleet-jump-0" and got["hostname"] == gcp.private_ip
    assert resolved(cfg.path, "mixed-fleet-jump-0")["hostname"] == "198.51.100.77"


def test_via_direct_goes_to_the_nodes_addresses_and_needs_no_cloud_tool(tmp_path, predicted, monkeypatch, cat):
    path = _stack_file(tmp_path, "  ssh_cidrs: [198.51.100.0/24]\n  via: direct\n  user: ops\n")
    monkeypatch.setenv("GPUFLEET_REGISTRY", str(tmp_path / "r.db"))
    reg = Registry(tmp_path / "r.db")
    _record(reg, "mixed-fleet", path, predicted)
    cfg = op.ssh_config("mixed-fleet", registry=reg, cat=cat, which=lambda c: "/x" if c == "ssh" else None)
    for e in cfg.entries:
        n = next(n for n in predicted if (n.pool, n.idx) == (e.pool, e.idx))
        alias = {"aws": n.node_id, "gcp": f"compute.{n.node_id}", "azure": n.vm_uid}[n.provider]
        assert e.options == {"HostName": n.private_ip, "Port": "22", "HostKeyAlias": alias, "User": "ops"}


# ---------------------------------------------------------------- gpufleet ssh


def test_ssh_builds_the_command_into_the_login_node_or_the_one_named(mixed, cat):
    conn = op.connection("mixed-fleet", None, ["nvidia-smi", "-L"], registry=mixed, cat=cat, which=everything)
    assert conn.argv == ["ssh", "-F", str(conn.cfg.path), "mixed-fleet-aws-a100-0", "nvidia-smi", "-L"]
    assert conn.cfg.path.exists() and oct(conn.cfg.path.stat().st_mode & 0o777) == "0o600"
    for name in ("gcp-l4-1", "mixed-fleet-gcp-l4-1"):
        assert op.connection("mixed-fleet", name, registry=mixed, cat=cat, which=everything).argv[3:] == [
            "mixed-fleet-gcp-l4-1"]
    seen = []
    op.run(conn, exec_=lambda prog, argv: seen.append((prog, argv)))
    assert seen == [("ssh", conn.argv)]


def test_ssh_needs_only_the_tools_of_the_node_it_goes_to(mixed, cat):
    # gcloud alone is enough for a GCP node, whatever the other nodes would need
    conn = op.connection("mixed-fleet", "gcp-l4-0", registry=mixed, cat=cat,
                         which=lambda c: "/x" if c in ("ssh", "gcloud") else None)
    assert conn.entry.alias == "mixed-fleet-gcp-l4-0"


def test_the_cli_passes_what_follows_dashes_as_the_remote_command(mixed, monkeypatch):
    monkeypatch.setattr(shutil, "which", everything)
    res = cli("ssh", "mixed-fleet", "rack-0", "--json", "--", "ls", "-la", "/tmp")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["argv"][3:] == ["mixed-fleet-rack-0", "ls", "-la", "/tmp"] and doc["route"] == "direct"
    res = cli("ssh", "mixed-fleet", "--json", "--", "hostname")  # no NODE: the command is not taken for one
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["argv"][3:] == ["mixed-fleet-aws-a100-0", "hostname"]
    seen = []
    monkeypatch.setattr(os, "execvp", lambda prog, argv: seen.append(argv))
    assert cli("ssh", "mixed-fleet", "gcp-l4-0").exit_code == 0 and seen[0][3:] == ["mixed-fleet-gcp-l4-0"]


def test_the_cli_writes_the_config_and_prints_the_include_line(mixed, monkeypatch, tmp_path):
    monkeypatch.setattr(shutil, "which", everything)
    out = tmp_path / "out.config"
    res = cli("ssh-config", "mixed-fleet", "--out", str(out))
    assert res.exit_code == 0, res.output
    assert f"Include {out}" in res.stdout and "ssh mixed-fleet-login" in res.stdout and out.exists()
    doc = json.loads(cli("ssh-config", "mixed-fleet", "--out", str(out), "--json").stdout)
    assert doc["include"] == f"Include {out}" and doc["login"] == "mixed-fleet-aws-a100-0"
    assert {h["route"] for h in doc["hosts"]} == {"AWS Systems Manager Session Manager", "GCP IAP TCP forwarding",
                                                 "Azure Bastion (native client tunnel)", "direct"}


# ---------------------------------------------------------------- missing tools (1), bad input (2)


@pytest.mark.parametrize("missing, node, says", [
    ("aws", "aws-a100-0", "AWS Systems Manager Session Manager needs `aws`"),
    ("session-manager-plugin", "aws-a100-0", "needs `session-manager-plugin`"),
    ("gcloud", "gcp-l4-0", "GCP IAP TCP forwarding needs `gcloud`"),
    ("az", "azure-t4-0", "Azure Bastion (native client tunnel) needs `az`"),
    ("ssh", "rack-0", "ssh needs `ssh`"),
])
def test_a_missing_tool_is_exit_1_naming_it_and_how_to_install_it(mixed, monkeypatch, missing, node, says):
    monkeypatch.setattr(shutil, "which", lambda c: None if c == missing else "/x")
    res = cli("ssh", "mixed-fleet", node)
    assert res.exit_code == 1, res.output
    assert says in res.stderr and "install" in res.stderr
    assert cli("ssh-config", "mixed-fleet").exit_code == 1


def test_bad_input_is_exit_2_with_a_suggestion(mixed, monkeypatch):
    monkeypatch.setattr(shutil, "which", everything)
    res = cli("ssh", "mixed-flet")
    assert res.exit_code == 2 and "no cluster 'mixed-flet'" in res.stderr and "did you mean 'mixed-fleet'" in res.stderr
    res = cli("ssh", "mixed-fleet", "gcp-l4-9")
    assert res.exit_code == 2 and "no node 'gcp-l4-9'" in res.stderr and "did you mean" in res.stderr
    assert cli("ssh-config", "nope").exit_code == 2


def test_the_stack_refuses_a_bastion_route_it_cannot_take(tmp_path, cat):
    from gpufleet.errors import SpecErrors

    cases = [("  via: bastion\n  ssh_cidrs: [198.51.100.0/24]\n", "via: bastion needs bastion_pool"),
             ("  bastion_pool: aws-a100\n", "used only with via: bastion"),
             ("  via: bastion\n  bastion_pool: aws-a100\n", "needs ssh_cidrs"),
             ("  via: bastion\n  bastion_pool: jum\n  ssh_cidrs: [198.51.100.0/24]\n", "no pool 'jum'"),
             ("  via: bastion\n  bastion_pool: aws-a100\n  ssh_cidrs: [198.51.100.0/24]\n", "no public address"),
             ("  via: vpn\n", "via")]
    for access, says in cases:
        with pytest.raises((SpecErrors, Exception)) as e:
            stacks.load(_stack_file(tmp_path, access), cat)
        assert says in str(e.value), (access, str(e.value))


# ---------------------------------------------------------------- from another folder, another machine

RACK_STACK = """\
name: lab
owner: ops@example.com
access: {user: ops, via: direct}
pools:
  - name: rack
    provider: baremetal
    site: dc9
    gpu: A100-80GB
    gpus_per_node: 4
    known_hosts: keys/lab_known_hosts
    hosts:
      - {address: 192.0.2.31, port: 2222, user: admin, key: keys/lab_ed25519}
"""


def _rack_up(tmp_path, cat, monkeypatch):
    """`up` of a one-host rack stack, run from the stack's folder with the path typed relative."""
    from gpufleet.fleet import up as fleet_up

    (tmp_path / "proj" / "keys").mkdir(parents=True)
    (tmp_path / "proj" / "lab.yaml").write_text(RACK_STACK)
    monkeypatch.chdir(tmp_path / "proj")
    reg = Registry(tmp_path / "r.db")
    fleet_up.bring_up(stacks.load("lab.yaml", cat), cat, fleet_up.UpOptions(registry=reg, configure=False),
                      confirm=lambda p: True)
    return reg


@needs_ssh
def test_from_another_folder_ssh_keeps_the_stacks_route_key_and_pinned_host_keys(tmp_path, cat, monkeypatch):
    """Issue 48 item 11: the registry kept the stack path as typed (`lab.yaml`): from another
    folder ssh-config lost the access block and the rack's key and known_hosts pinning. `up` now
    records the path from anywhere and what ssh needs of the stack."""
    reg = _rack_up(tmp_path, cat, monkeypatch)
    rec = reg.get("lab")
    assert rec.stack_file == str(tmp_path / "proj" / "lab.yaml")
    monkeypatch.chdir(tmp_path)  # another folder
    (tmp_path / "proj" / "lab.yaml").rename(tmp_path / "lab-moved.yaml")  # and the stack file gone from where it was
    cfg = op.ssh_config("lab", registry=reg, cat=cat, which=everything)
    got = resolved(cfg.path, "lab-rack-0")
    assert (got["hostname"], got["port"], got["user"]) == ("192.0.2.31", "2222", "admin")
    assert got["identityfile"] == str(tmp_path / "proj" / "keys" / "lab_ed25519")
    assert got["userknownhostsfile"] == str(tmp_path / "proj" / "keys" / "lab_known_hosts")
    assert got["stricthostkeychecking"] == "true"
    assert any("as `up` recorded them" in n for n in cfg.notes)


def test_a_teammates_machine_reads_the_access_from_the_teams_store(tmp_path, cat, monkeypatch):
    """The record travels with the cluster's object in the team's store; a record that would turn
    host keys off is held to StrictHostKeyChecking yes, the known_hosts file it names is this machine's
    file of the host's site, and an option it may not carry is refused."""
    import json as _json

    from gpufleet.state.shared import DirectoryStore

    (tmp_path / "team").mkdir()  # a store folder is made by whoever sets the team up, never by gpufleet
    store = DirectoryStore(f"file://{tmp_path / 'team'}")
    mine = Registry(tmp_path / "mine.db", shared=store)
    mine.record(name="lab", stack="lab", stack_file="/home/alice/lab.yaml", owner="o", expires_at="2099-01-01T00:00:00Z",
                backend=None, nodes=_rack_nodes(), access={
                    "via": "direct", "user": "ops", "pools": ["rack"], "login_pools": [], "racks": {
                        "rack-0": {"HostName": "192.0.2.21", "Port": "2222", "User": "admin",
                                   "UserKnownHostsFile": "/home/alice/kh", "StrictHostKeyChecking": "no"}}})
    theirs = Registry(tmp_path / "theirs.db", shared=store)  # another machine: the store's copy
    cfg = op.config("lab", registry=theirs, cat=cat)
    (rack0,) = [e for e in cfg.entries if e.alias == "lab-rack-0"]
    # the known_hosts file Alice's machine recorded is no file of this one: the site's own file here pins the host
    assert rack0.options == {"HostName": "192.0.2.21", "Port": "2222", "User": "admin",
                             "UserKnownHostsFile": os.path.join(os.environ["XDG_DATA_HOME"], "gpufleet", "known_hosts",
                                                                "lab"), "StrictHostKeyChecking": "yes"}
    doc = _json.loads(store.read("clusters/lab.json")[0])
    doc["access"]["racks"]["rack-0"]["ProxyCommand"] = "touch X"
    store.replace("clusters/lab.json", _json.dumps(doc).encode(), store.read("clusters/lab.json")[1])
    with pytest.raises(UntrustedValue, match="racks.rack-0"):
        op.config("lab", registry=Registry(tmp_path / "third.db", shared=store), cat=cat)


def test_the_cli_takes_the_stack_from_stack(tmp_path, cat, monkeypatch):
    """`--stack FILE` reads the access block and rack hosts from a copy of the stack."""
    monkeypatch.setattr(shutil, "which", everything)
    reg = _rack_up(tmp_path, cat, monkeypatch)
    monkeypatch.setenv("GPUFLEET_REGISTRY", str(reg.path))
    monkeypatch.chdir(tmp_path)
    copy = tmp_path / "copy.yaml"
    copy.write_text(RACK_STACK.replace("port: 2222", "port: 2200"))
    res = cli("--json", "ssh-config", "lab", "--stack", str(copy), "--out", str(tmp_path / "c"))
    assert res.exit_code == 0, res.output
    (host,) = json.loads(res.stdout)["hosts"]
    assert host["options"]["Port"] == "2200" and host["options"]["IdentityFile"] == str(tmp_path / "keys" /
                                                                                        "lab_ed25519")
    res = cli("--json", "ssh", "lab", "--stack", str(copy), "--", "true")
    assert res.exit_code == 0 and json.loads(res.stdout)["options"]["Port"] == "2200", res.output


@needs_ssh
@pytest.mark.parametrize("access", ["", "  ssh_cidrs: [198.51.100.0/24]\n  via: direct\n",
                                    "  ssh_cidrs: [198.51.100.0/24]\n  via: bastion\n  bastion_pool: jump\n"])
def test_every_cloud_vms_host_key_is_filed_under_its_own_unique_id_on_every_route(tmp_path, predicted, monkeypatch,
                                                                                  cat, access):
    """Review F3: Azure's host keys (every route), and AWS's and GCP's under via: direct or bastion, were
    filed under the VM's private address, which the next cluster's VMs get again: its new key met the
    old one ("REMOTE HOST IDENTIFICATION HAS CHANGED"), or a VM inherited another's trust. Each cloud VM's
    key is now filed under the id its cloud never gives another VM, on every route, as the real ssh -G
    reads the file: the EC2 instance id, compute.<instance id> as gcloud files it, and Azure's vmId
    (the scale set VM's `vmId`, pulumi-azure-native 3.29 compute.get_virtual_machine_scale_set_vm:
    "Azure VM unique ID"; IMDS compute.vmId on the VM)."""
    path = _stack_file(tmp_path, access, BASTION_POOL if "bastion" in access else "")
    monkeypatch.setenv("GPUFLEET_REGISTRY", str(tmp_path / "r.db"))
    reg = Registry(tmp_path / "r.db")
    jump = Node(pool="jump", idx=0, provider="aws", location="us-west-2", machine="p4d.24xlarge",
                node_id="i-0123456789abcdef0", private_ip="10.64.9.4", ssh_endpoint="198.51.100.77:22")
    nodes = ([jump] if "bastion" in access else []) + predicted
    _record(reg, "mixed-fleet", path, nodes)
    cfg = op.ssh_config("mixed-fleet", registry=reg, cat=cat, which=everything)
    want = {"aws": lambda n: n.node_id, "gcp": lambda n: f"compute.{n.node_id}", "azure": lambda n: n.vm_uid}
    aliases = []
    for n in nodes:
        got = resolved(cfg.path, f"mixed-fleet-{n.pool}-{n.idx}").get("hostkeyalias")
        assert got and got == want[n.provider](n), (access, n.provider, n.pool, n.idx, got)
        aliases.append(got)
    assert len(set(aliases)) == len(aliases)
    assert any(n.provider == "azure" for n in nodes) and all(n.vm_uid for n in nodes if n.provider == "azure")

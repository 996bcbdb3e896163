"""End to end on the local test rack: real sshd hosts in network namespaces, real salt-ssh.

`tests/rack/rack.py` makes four Debian hosts (see its docstring); each test drives the
installed `gpufleet` command as a user would. Needs root, iproute2, debootstrap and
openssh-server (the Makefile's `test` target installs them); elsewhere these tests skip, and
under CI=true they fail instead.
"""

import shutil
import subprocess

import pytest

from tests.conftest import ROOT
from tests.integration import localrack
from tests.integration.localrack import active, gpufleet, install_standins, on_host, remove_standins

STACK = ROOT / "stacks" / "examples" / "local-rack.yaml"
CLUSTER = "e2e-rack"

pytestmark = [pytest.mark.slow, localrack.group(1)]


@pytest.fixture(scope="module")
def rack(request, tmp_path_factory):
    yield from localrack.rack_module(request, tmp_path_factory, STACK)


def by_host(doc) -> dict:
    return {h["host"]: h for h in doc["hosts"]}


def registry_hosts(rack) -> dict:
    from gpufleet.state.registry import Registry

    return Registry(rack["data"] / "gpufleet" / "registry.db").hosts(CLUSTER)


def test_up_configures_the_rack_and_a_second_run_changes_nothing(rack):
    rc, doc, err = gpufleet(rack, "up", "--no-verify", rack["stack"], "--cluster", CLUSTER, "--yes", "--trust-new-hosts")
    assert rc == 0, err[-3000:]
    hosts = by_host(doc)
    assert sorted(hosts) == ["rack-0", "rack-1", "rack-2", "rack-3"]
    for h in hosts.values():
        assert h["state"] == "configured", h
        assert h["facts"]["osfinger"] == "Debian-12" and h["facts"]["gpus"] == []
        real = [r for r in h["runs"] if not r["test"]]
        rehearsal = [r for r in h["runs"] if r["test"]]
        assert real[0]["states"] >= 15 and len(real[0]["changed"]) >= 10, real
        # no GPU: the driver, CUDA, NCCL, container and DCGM states are rendered and run with test=True
        assert rehearsal[0]["states"] >= 12 and rehearsal[0]["ok"]
        assert any("no NVIDIA GPU" in w for w in h["warnings"])
    for i in range(1, 5):
        check = on_host(i, "cat /etc/sysctl.d/90-gpufleet.conf /etc/security/limits.d/90-gpufleet-memlock.conf && "
                           "dpkg -s chrony iperf3 nfs-common prometheus-node-exporter >/dev/null && "
                           f"grep -E '^{active().gateway}:/srv/rack[[:space:]]+/shared[[:space:]]+nfs' /etc/fstab && "
                           "/opt/gpufleet/envs/jax/bin/python -c 'import jax; print(\"jax\", jax.__version__)' && "
                           "test ! -e /etc/apt/sources.list.d/gpufleet-cuda.list")
        assert check.returncode == 0, check.stderr
        assert "vm.max_map_count = 1048576" in check.stdout and "memlock    unlimited" in check.stdout
        assert "jax 0.4.38" in check.stdout
    again = registry_hosts(rack)
    assert {v["state"] for v in again.values()} == {"configured"} and all(v["digest"] for v in again.values())

    rc, doc, err = gpufleet(rack, "up", "--no-verify", rack["stack"], "--cluster", CLUSTER, "--yes", "--reconfigure")
    assert rc == 0, err[-3000:]
    for h in by_host(doc).values():
        assert h["state"] == "configured" and h["changed"] == 0, h
        assert all(r["ok"] and not r["changed"] for r in h["runs"] if not r["test"])

    rc, doc, err = gpufleet(rack, "up", "--no-verify", rack["stack"], "--cluster", CLUSTER, "--yes")
    assert rc == 0 and {h["state"] for h in doc["hosts"]} == {"skipped"}


def test_verify_proves_each_host_or_says_why_not(rack):
    """Host 1 healthy (stand-ins replaying a 1x L4 node), host 2 the same with an XID 79 in its kernel
    log, host 3 without the tools, host 4 too (asked for alone, it is not proven either)."""
    # `up` ends with the quick verification (the hosts are configured already: nothing else to do);
    # none has a GPU's tools, so none is proven healthy
    rc, doc, err = gpufleet(rack, "up", rack["stack"], "--cluster", CLUSTER, "--yes")
    assert rc == 1 and doc["ok"] is False, err[-3000:]
    assert {h["state"] for h in doc["hosts"]} == {"skipped"}
    assert {v["node"]: v["verdict"] for v in doc["verified"]} == {f"rack-{i}": "incomplete" for i in range(4)}
    assert "4 of 4 node(s) not verified healthy" in doc["message"]
    xid = (ROOT / "tests" / "data" / "verify" / "journal-xid79.txt").read_text()
    try:  # (installed after `up`: the stand-ins would make the facts show a GPU, and `up` configure for one)
        install_standins(1, {})
        install_standins(2, {"journal.txt": xid})
        rc, doc, err = gpufleet(rack, "verify", rack["stack"], "--cluster", CLUSTER)
        assert rc == 1, err[-3000:]
        nodes = {n["node"]: n for n in doc["nodes"]}
        assert nodes["rack-0"]["verdict"] == "pass" and nodes["rack-0"]["failures"] == []
        assert [(f["check"], f["code"]) for f in nodes["rack-1"]["failures"]] == [("health.xid", "GF-XID-FATAL")]
        assert nodes["rack-2"]["verdict"] == "incomplete" and "gpu.count" in nodes["rack-2"]["unchecked"]
        checks = {c["check"]: c for c in nodes["rack-2"]["measurements"]}
        assert checks["gpu.count"]["status"] == "skip" and checks["gpu.count"]["detail"] == "nvidia-smi is not installed"
        states = registry_hosts(rack)
        assert states[("rack", 1)]["state"] == "unhealthy" and "GF-XID-FATAL" in states[("rack", 1)]["detail"]
        assert states[("rack", 0)]["state"] == "configured"
        rc, doc, err = gpufleet(rack, "status", CLUSTER, "--local")
        assert rc == 0 and any("3 node(s) unhealthy: rack-1 (failed: GF-XID-FATAL); rack-2 (not proven" in n
                               for n in doc["clusters"][0]["notes"]), doc
        # the healthy one alone: exit 0; the one with the XID, once its log is clean again, is healthy again
        rc, doc, err = gpufleet(rack, "verify", rack["stack"], "--cluster", CLUSTER, "--node", "rack-0")
        assert rc == 0 and [n["node"] for n in doc["nodes"]] == ["rack-0"], err[-2000:]
        install_standins(2, {})
        rc, doc, err = gpufleet(rack, "verify", "--node", active().address(2), CLUSTER)
        assert rc == 0, err[-2000:]
        assert registry_hosts(rack)[("rack", 1)]["state"] == "configured"
    finally:
        remove_standins(1)
        remove_standins(2)


def test_faults_are_reported_per_host_and_a_rerun_picks_up(rack):
    root4 = active().etc(4)
    active().run("stop-sshd", "2")
    active().run("rekey", "3")
    shutil.move(root4 / "modprobe.d", root4 / "modprobe.d.saved")  # a move across the overlay's layers
    (root4 / "modprobe.d").write_text("not a directory\n")
    try:
        rc, doc, err = gpufleet(rack, "up", "--no-verify", rack["stack"], "--cluster", CLUSTER, "--yes", "--reconfigure")
        assert rc == 3, err[-2000:]
        assert doc["error"] == "PartialFailure" and "3 of 4 node(s) not configured" in doc["message"]
        hosts = by_host(doc)
        assert hosts["rack-0"]["state"] == "configured" and hosts["rack-0"]["changed"] == 0
        assert hosts["rack-1"]["state"] == "unreachable" and "cannot connect" in hosts["rack-1"]["error"]
        assert hosts["rack-2"]["state"] == "host-key" and "HOST KEY CHANGED" in hosts["rack-2"]["error"]
        assert "ssh-keygen -R" in hosts["rack-2"]["hint"]
        assert hosts["rack-3"]["state"] == "failed"
        failed = [f["id"] for r in hosts["rack-3"]["runs"] for f in r["failed"]]
        assert "node_base-config-nouveau-file-managed" in failed
        # the other states of that host still ran
        assert any(r["states"] > 10 for r in hosts["rack-3"]["runs"] if not r["test"])
        rec = registry_hosts(rack)
        assert {k[1]: v["state"] for k, v in rec.items()} == {0: "configured", 1: "unreachable", 2: "host-key",
                                                              3: "failed"}
        assert rec[("rack", 1)]["digest"] is not None or rec[("rack", 1)]["facts"] is None
    finally:
        active().run("start-sshd", "2")
        (root4 / "modprobe.d").unlink()
        shutil.move(root4 / "modprobe.d.saved", root4 / "modprobe.d")

    # the changed key must be cleared by a person, as the hint says; then the rerun does the rest
    kh = rack["data"] / "gpufleet" / "known_hosts" / "local"
    subprocess.run(["ssh-keygen", "-R", active().address(3), "-f", str(kh)], check=True, capture_output=True)
    rc, doc, err = gpufleet(rack, "up", "--no-verify", rack["stack"], "--cluster", CLUSTER, "--yes", "--trust-new-hosts")
    assert rc == 0, err[-2000:]
    states = {h["host"]: h["state"] for h in doc["hosts"]}
    assert states == {"rack-0": "skipped", "rack-1": "configured", "rack-2": "configured", "rack-3": "configured"}


def test_down_drains_every_host_and_cleans_only_when_asked(rack):
    active().run("stop-sshd", "2")
    try:
        rc, doc, err = gpufleet(rack, "down", rack["stack"], "--cluster", CLUSTER, "--yes")
        assert rc == 3 and "1 of 4 node(s) not drained" in doc["message"], err[-2000:]
        assert by_host(doc)["rack-1"]["state"] == "unreachable"
    finally:
        active().run("start-sshd", "2")
    assert on_host(1, "grep -q cluster=e2e-rack /etc/gpufleet/drained").returncode == 0
    # the cluster stays known until every host is drained
    assert registry_hosts(rack)[("rack", 0)]["state"] == "drained"

    rc, doc, err = gpufleet(rack, "down", rack["stack"], "--cluster", CLUSTER, "--yes", "--clean")
    assert rc == 0, err[-2000:]
    assert [h["host"] for h in doc["hosts"]] == ["rack-1"]  # the others were drained already
    cleaned = on_host(2, "test -e /etc/sysctl.d/90-gpufleet.conf; echo sysctl=$?; test -e /opt/gpufleet/envs; "
                         "echo envs=$?; grep -c /shared /etc/fstab; cat /etc/gpufleet/drained")
    assert "sysctl=1" in cleaned.stdout and "envs=1" in cleaned.stdout and "\n0\n" in cleaned.stdout
    kept = on_host(1, "test -e /etc/sysctl.d/90-gpufleet.conf && test -e /opt/gpufleet/envs/jax && echo kept")
    assert "kept" in kept.stdout  # no --clean for it: nothing of it was undone
    assert registry_hosts(rack) == {}
    rc, doc, err = gpufleet(rack, "down", CLUSTER, "--yes")
    assert rc == 2 and "no cluster" in doc["message"]


def test_rack_hosts_as_pulumi_dynamic_resources(rack):
    """A mixed stack's rack hosts go through the same gather/drain code inside Pulumi's dynamic provider."""
    pytest.importorskip("pulumi")
    from gpufleet.clouds.baremetal.rack import RackHostProvider

    props = {"cluster": "dyn", "pool": "rack", "idx": 0, "address": active().address(1), "port": 22, "user": "root",
             "key": str(active().key), "site": "local", "known_hosts": str(rack["data"] / "dyn_known_hosts"),
             "trust_new": False, "facts": None}
    prov = RackHostProvider()
    with pytest.raises(Exception, match="not in .*dyn_known_hosts"):
        prov.create(props)  # unknown host key and no trust on first use: refused
    created = prov.create({**props, "trust_new": True})
    assert created.id == f"local/{active().address(1)}:22"
    assert created.outs["facts"]["osfinger"] == "Debian-12" and created.outs["facts"]["hostname"] == "h1"
    assert prov.diff(created.id, created.outs, {**created.outs, "address": active().address(2)}).replaces == ["address"]
    assert not prov.diff(created.id, created.outs, dict(created.outs)).changes
    prov.delete(created.id, created.outs)
    assert on_host(1, "grep -q cluster=dyn /etc/gpufleet/drained").returncode == 0

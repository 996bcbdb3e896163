"""`gpufleet dashboard export` and `gpufleet dashboard CLUSTER` (issue 53 items 4 and 5), and `status`'s monitor.

The tunnel is tried for real: OpenSSH's ssh into a real sshd on 127.0.0.1 (tests/loopback_sshd.py), the
rack cluster's monitor host, forwarding to a small HTTP server that stands in for Prometheus (its
``/-/ready`` answers as Prometheus's does: 200, "Prometheus Server is Ready."). The stand-in listens on the
monitor's own address (127.53.0.1, a loopback address of its own) at Prometheus's port as the formula's
defaults declare it, so the command runs with nothing of it replaced."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from gpufleet.fleet import dashboard
from gpufleet.monitoring import ports, provisioning
from gpufleet.state.registry import Node, Registry

import loopback_sshd
from conftest import ROOT, cli

needs_sshd = pytest.mark.skipif(not loopback_sshd.USABLE, reason="needs the OpenSSH client and server, as root")
MONITOR_ADDRESS = "127.53.0.1"
# one Prometheus stand-in at that address answers some tests and must not answer another's "no answer": the module's
# tests run one at a time (one xdist worker)
pytestmark = pytest.mark.xdist_group("monitor-address")
RACK = """name: lab
owner: ops@example.com
access: {{user: root, via: direct}}
{monitoring}pools:
  - name: rack
    provider: baremetal
    site: loop
    gpu: A100-80GB
    gpus_per_node: 1
    known_hosts: known_hosts
    hosts:
      - {{address: 127.0.0.1, port: {port}, user: root, key: id_lab}}
"""
WITH_MONITOR = "monitoring: {prometheus: true, host: rack}\n"


class _Ready(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        ok = self.path == "/-/ready"
        body = b"Prometheus Server is Ready.\n" if ok else b"404 page not found\n"
        self.send_response(200 if ok else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def prometheus():
    """The stand-in on the monitor's address and Prometheus's port; skipped where that port is taken."""
    try:
        server = ThreadingHTTPServer((MONITOR_ADDRESS, ports.ports()["prometheus"]), _Ready)
    except OSError as e:
        pytest.skip(f"{MONITOR_ADDRESS}:{ports.ports()['prometheus']} cannot be served here: {e}")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def _cluster(tmp_path, monkeypatch, port: int, monitoring: str = WITH_MONITOR, host_pub: str | None = None):
    monkeypatch.setenv("GPUFLEET_REGISTRY", str(tmp_path / "registry.db"))
    stack = tmp_path / "lab.yaml"
    stack.write_text(RACK.format(monitoring=monitoring, port=port))
    if host_pub:
        (tmp_path / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub}\n")
    Registry(tmp_path / "registry.db").record(
        name="lab", stack="lab", stack_file=str(stack), owner="o", expires_at="2099-01-01T00:00:00Z", backend=None,
        nodes=[Node(pool="rack", idx=0, provider="baremetal", location="loop", machine="1x A100-80GB",
                    node_id="127.0.0.1", private_ip=MONITOR_ADDRESS, ssh_endpoint=f"127.0.0.1:{port}")])
    return stack


@pytest.fixture
def lab(tmp_path, monkeypatch):
    """A one-host rack cluster `lab` whose host (an sshd on 127.0.0.1) is its monitor."""
    authorized = loopback_sshd.keygen(tmp_path / "id_lab")
    with loopback_sshd.serve(tmp_path / "sshd", authorized) as (port, host_pub):
        yield _cluster(tmp_path, monkeypatch, port, host_pub=host_pub)


# --- export ---------------------------------------------------------------------------------------------

def test_export_writes_the_monitor_hosts_grafana_tree_under_out(tmp_path):
    pytest.importorskip("grafana_foundation_sdk")
    r = cli("--json", "dashboard", "export", "--out", str(tmp_path / "out"))
    assert r.exit_code == 0, r.output
    files = json.loads(r.stdout)["files"]
    assert sorted(os.path.relpath(f, tmp_path / "out") for f in files) == sorted(
        p.lstrip("/") for p in provisioning.grafana_files("http://127.0.0.1:9090"))
    ds = yaml.safe_load((tmp_path / "out" / provisioning.DATASOURCES.lstrip("/")).read_text())["datasources"][0]
    assert ds["url"] == f"http://127.0.0.1:{ports.ports()['prometheus']}"
    # not the default data source: a team's Grafana that already provisions one refuses to start on a second
    # (Grafana's provisioning, pkg/services/provisioning/datasources/config_reader.go validateDefaultUniqueness:
    # "Only one datasource per organization can be marked as default"; read by rev53, 2026-11-27)
    assert ds["isDefault"] is False
    fleet = json.loads((tmp_path / "out" / provisioning.DASHBOARDS_DIR.lstrip("/") / "gpufleet-fleet.json").read_text())
    assert fleet["uid"] == "gpufleet-fleet" and fleet["panels"]


def test_export_of_a_stack_names_the_folder_after_it_and_a_bad_stack_creates_nothing(tmp_path):
    pytest.importorskip("grafana_foundation_sdk")
    stack = tmp_path / "lab.yaml"
    stack.write_text(RACK.format(monitoring=WITH_MONITOR, port=22))
    r = cli("dashboard", "export", str(stack), "--out", str(tmp_path / "out"))
    assert r.exit_code == 0, r.output
    prov = yaml.safe_load((tmp_path / "out" / provisioning.scope("lab").providers.lstrip("/")).read_text())["providers"][0]
    assert prov["folder"] == "gpufleet lab"
    stack.write_text(RACK.format(monitoring="monitoring: {prometheus: true, host: nowhere}\n", port=22))
    r = cli("dashboard", "export", str(stack), "--out", str(tmp_path / "bad"))
    assert r.exit_code == 2 and "monitoring.host" in r.output and "Traceback" not in r.output, r.output
    assert not (tmp_path / "bad").exists()


def test_export_without_the_sdk_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "grafana_foundation_sdk", None)
    monkeypatch.setitem(sys.modules, "grafana_foundation_sdk.builders", None)
    r = cli("dashboard", "export", "--out", str(tmp_path / "out"))
    assert r.exit_code == 2 and "gpufleet[dashboards]" in r.output, r.output
    assert not (tmp_path / "out").exists()


# --- the tunnel -----------------------------------------------------------------------------------------

@needs_sshd
def test_the_tunnel_reaches_prometheus_on_the_monitors_address(lab, prometheus):
    t = dashboard.tunnel("lab", prometheus=True)
    assert t.argv[-1] == "lab-rack-0" and f"127.0.0.1:{t.local_port}:{MONITOR_ADDRESS}:9090" in t.argv
    opened = dashboard.start(t)
    try:
        with urllib.request.urlopen(t.url + "-/ready", timeout=10) as r:
            assert r.status == 200 and r.read() == b"Prometheus Server is Ready.\n"
    finally:
        opened.close()
    with pytest.raises(OSError):  # closed with it
        socket.create_connection(("127.0.0.1", t.local_port), timeout=2).close()


@needs_sshd
def test_the_command_prints_the_url_and_runs_until_ctrl_c(lab, prometheus, tmp_path):
    """The installed entry point, as a person runs it: the URL printed, the page served, Ctrl-C ends it with 0."""
    port = dashboard.free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gpufleet.cli", "dashboard", "lab", "--prometheus", "--port",
                             str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "COLUMNS": "200"})
    try:
        first = proc.stdout.readline()
        assert f"http://127.0.0.1:{port}/" in first, first + proc.stderr.read() if proc.poll() is not None else first
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=10) as r:
            assert r.status == 200
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and "Traceback" not in err, err


def test_a_cluster_without_a_monitor_is_exit_2_saying_how_to_get_one(tmp_path, monkeypatch):
    _cluster(tmp_path, monkeypatch, 22, monitoring="")
    r = cli("dashboard", "lab")
    assert r.exit_code == 2 and "has no monitor host" in r.output and "prometheus: true" in r.output, r.output


def test_an_unknown_cluster_is_exit_2(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUFLEET_REGISTRY", str(tmp_path / "registry.db"))
    r = cli("dashboard", "nosuch")
    assert r.exit_code == 2 and "nosuch" in r.output and "Traceback" not in r.output, r.output


@needs_sshd
def test_ssh_that_cannot_connect_is_exit_1_with_what_ssh_said(tmp_path, monkeypatch):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    _cluster(tmp_path, monkeypatch, closed)
    r = cli("dashboard", "lab", "--prometheus")
    assert r.exit_code == 1 and "could not open the tunnel" in r.output and "refused" in r.output, r.output


def test_json_says_the_tunnel_without_opening_it(tmp_path, monkeypatch):
    """--json prints what would run (the URL, ssh's command line) for a program to start; a monitor
    without Grafana gives Prometheus's page, and says so."""
    _cluster(tmp_path, monkeypatch, 2222)
    r = cli("--json", "dashboard", "lab", "--port", "18080")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["url"] == "http://127.0.0.1:18080/" and doc["service"] == "prometheus" and "no Grafana" in doc["note"]
    assert doc["argv"][:2] == ["ssh", "-F"] and f"127.0.0.1:18080:{MONITOR_ADDRESS}:9090" in doc["argv"]
    assert doc["monitor"] == {"host": "lab-rack-0", "address": MONITOR_ADDRESS, "route": "direct", "grafana": False}


def test_grafana_is_the_default_where_the_record_says_the_monitor_runs_it(tmp_path, monkeypatch):
    """The monitor's Grafana listens on its loopback only (monitoring.grafana: anonymous access off, but a login page
    is no place for the whole cluster network): the forward's far end is 127.0.0.1 as the monitor sees it."""
    _cluster(tmp_path, monkeypatch, 2222)
    reg = Registry(tmp_path / "registry.db")
    rec = reg.get("lab")
    reg.record(name="lab", stack="lab", stack_file=str(tmp_path / "gone.yaml"), owner="o",
               expires_at="2099-01-01T00:00:00Z", backend=None, nodes=rec.nodes,
               access={"via": "direct", "user": "root", "pools": ["rack"], "monitor": {"pool": "rack", "grafana": True}})
    doc = json.loads(cli("--json", "dashboard", "lab").stdout)
    assert doc["service"] == "grafana" and doc["argv"][-2].endswith(f":127.0.0.1:{ports.ports()['grafana']}")
    doc = json.loads(cli("--json", "dashboard", "lab", "--prometheus").stdout)
    assert doc["service"] == "prometheus" and doc["argv"][-2].endswith(":9090")


# --- status ---------------------------------------------------------------------------------------------

@needs_sshd
def test_status_shows_the_monitors_address_and_that_it_answers(lab, prometheus):
    r = cli("--json", "status", "lab")
    assert r.exit_code == 0, r.output
    (row,) = json.loads(r.stdout)["clusters"]
    assert row["monitor"] == {"address": MONITOR_ADDRESS, "host": "lab-rack-0", "prometheus": "ready"}
    r = cli("status", "lab")
    assert f"monitor {MONITOR_ADDRESS}: Prometheus ready" in " ".join(r.stdout.split()), r.stdout


@needs_sshd
def test_status_probes_through_the_tunnel_not_a_proxy_from_the_environment(lab, prometheus, monkeypatch):
    """urllib's default opener takes http_proxy from the environment (CPython's ProxyHandler; 127.0.0.1 is not in
    no_proxy by default): a proxy that does not answer must not make a ready Prometheus "unknown"."""
    for var in ("http_proxy", "HTTP_PROXY"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")  # discard: nothing listens
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    (row,) = json.loads(cli("--json", "status", "lab").stdout)["clusters"]
    assert row["monitor"]["prometheus"] == "ready", row


@needs_sshd
def test_status_says_unknown_when_prometheus_does_not_answer(lab):
    """Nothing listens at the monitor's Prometheus port: ssh's forward cannot connect, the GET fails."""
    (row,) = json.loads(cli("--json", "status", "lab").stdout)["clusters"]
    assert row["monitor"]["address"] == MONITOR_ADDRESS and row["monitor"]["prometheus"].startswith("unknown"), row


def test_status_of_a_cluster_without_a_monitor_has_none(tmp_path, monkeypatch):
    _cluster(tmp_path, monkeypatch, 2222, monitoring="")
    (row,) = json.loads(cli("--json", "status", "lab", "--local").stdout)["clusters"]
    assert row["monitor"] is None


# --- the registry's record of the monitor ----------------------------------------------------------------

def test_up_records_the_monitor_so_the_tunnel_needs_no_stack_file(tmp_path, monkeypatch):
    """`up` records what ssh needs of the stack (fleet.ssh.access_record), the monitor's pool now among it: from
    another machine or with the stack file gone, `dashboard` still finds the monitor host."""
    from gpufleet import catalog, stacks
    from gpufleet.fleet import ssh

    stack = _cluster(tmp_path, monkeypatch, 2222)
    reg = Registry(tmp_path / "registry.db")
    rec = reg.get("lab")
    access = ssh.access_record(stacks.load(stack, catalog.load(use_config=False)), "lab", rec.nodes)
    assert access["monitor"] == {"pool": "rack", "grafana": False}
    reg.record(name="lab", stack="lab", stack_file=str(tmp_path / "gone.yaml"), owner="o",
               expires_at="2099-01-01T00:00:00Z", backend=None, nodes=rec.nodes, access=access)
    doc = json.loads(cli("--json", "dashboard", "lab").stdout)
    assert doc["service"] == "prometheus" and doc["monitor"]["address"] == MONITOR_ADDRESS


@pytest.mark.parametrize("monitor", [{"pool": "rack; touch x"}, {"pool": "rack", "grafana": "yes"}, ["rack"]])
def test_a_hostile_record_of_the_monitor_is_refused(tmp_path, monkeypatch, monitor):
    """The record may come from the team's store, written by whoever can write it."""
    _cluster(tmp_path, monkeypatch, 2222)
    reg = Registry(tmp_path / "registry.db")
    rec = reg.get("lab")
    reg.record(name="lab", stack="lab", stack_file=str(tmp_path / "gone.yaml"), owner="o",
               expires_at="2099-01-01T00:00:00Z", backend=None, nodes=rec.nodes,
               access={"via": "direct", "user": "root", "pools": ["rack"], "monitor": monitor})
    r = cli("dashboard", "lab")
    assert r.exit_code != 0 and "access.monitor" in r.output and "Traceback" not in r.output, r.output

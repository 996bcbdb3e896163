"""The monitor host's files (gpufleet.monitoring.scrape through the pillar): every example stack that
asks for Prometheus gets a prometheus.yml that Prometheus's own checker accepts (promtool 2.42,
Debian's `prometheus`) and an alertmanager.yml amtool accepts where it is installed; every node of the
scraped pools is a target of both exporters with the labels cluster, pool and node; Prometheus goes on
the monitor pool's first node only, listening on its address."""

import json
import shutil
import subprocess

import pytest
import yaml
from test_alert_rules import RACK

from gpufleet import catalog, stacks
from gpufleet.configure import pillar
from gpufleet.monitoring import scrape
from tests.conftest import ROOT, require

EXAMPLES = sorted((ROOT / "stacks" / "examples").glob("*.yaml"))


@pytest.fixture(scope="module")
def cat():
    return catalog.load(use_config=False)


@pytest.fixture
def accounts(monkeypatch):
    """The project and subscription a GCP or Azure node's discovery lists its cluster's machines in."""
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "example-project")
    monkeypatch.setenv("ARM_SUBSCRIPTION_ID", "00000000-0000-0000-0000-000000000001")


def _checked(tool: str, kind: list[str], text: str, tmp_path, name: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    r = subprocess.run([tool, *kind, str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, (name, r.stdout + r.stderr, text)


def test_every_example_monitor_renders_files_the_programs_accept(cat, accounts, tmp_path):
    require(shutil.which("promtool") is not None, "promtool is not installed (Debian's prometheus: `make sysdeps`)")
    monitored = []
    for f in EXAMPLES:
        st = stacks.load(f, cat)
        if st.monitor_pool() is None:
            continue
        monitored.append(f.stem)
        srv = pillar.monitor_pillar(st, "c1")
        _checked("promtool", ["check", "config"], srv["prometheus_yml"], tmp_path, f"{f.stem}-prometheus.yml")
        if shutil.which("amtool"):
            _checked("amtool", ["check-config"], srv["alertmanager_yml"], tmp_path, f"{f.stem}-alertmanager.yml")
    assert "baremetal-rack" in monitored, monitored


def _targets(prom: str, job: str) -> dict[str, dict]:
    (cfg,) = [c for c in yaml.safe_load(prom)["scrape_configs"] if c["job_name"] == job]
    return {t: g["labels"] for g in cfg.get("static_configs", []) for t in g["targets"]}


def test_every_rack_host_is_a_target_of_both_exporters_with_its_labels(cat):
    st = stacks.load(ROOT / "stacks" / "examples" / "baremetal-rack.yaml", cat)
    prom = pillar.monitor_pillar(st, "rk")["prometheus_yml"]
    ports = scrape.ports()
    for job, port in (("node", ports["node_exporter"]), ("dcgm", ports["dcgm_exporter"])):
        got = _targets(prom, job)
        assert got == {f"10.10.0.{10 + i}:{port}": {"pool": "h100-rack", "node": f"h100-rack-{i - 1}"} for i in range(1, 5)}
    (cfg,) = [c for c in yaml.safe_load(prom)["scrape_configs"] if c["job_name"] == "node"]
    assert {"target_label": "cluster", "replacement": "rk"} in cfg["relabel_configs"]
    assert yaml.safe_load(prom)["global"]["scrape_interval"] == "30s"


CLOUD_AND_RACK = """name: c1
owner: o
monitoring: {prometheus: true, host: mon}
pools:
  - {name: mon, provider: aws, region: us-west-2, instance_type: g5.xlarge, nodes: 1}
  - {name: gpu, provider: aws, region: us-west-2, instance_type: p4d.24xlarge, nodes: 2}
  - {name: rack, provider: baremetal, site: lab, gpu: L4, gpus_per_node: 1, hosts: [{address: 192.0.2.21}]}
"""


def test_cloud_nodes_are_read_from_the_files_root_writes_on_the_monitor(write, cat, accounts):
    """Prometheus asks no cloud (it could not: the metadata service is root's alone): every cloud pool's targets come
    from the file root writes on the monitor's node (clouds/node_targets.py), which lists the monitor's own region's
    pools with its identity; the rack's hosts are written out."""
    st = stacks.load(write("c1.yaml", CLOUD_AND_RACK), cat)
    srv = pillar.monitor_pillar(st, "c1")
    (node,) = [c for c in yaml.safe_load(srv["prometheus_yml"])["scrape_configs"] if c["job_name"] == "node"]
    assert node["file_sd_configs"] == [{"files": ["/etc/prometheus/gpufleet-targets/9100.json"]}]
    assert not {"ec2_sd_configs", "gce_sd_configs", "azure_sd_configs"} & set(node)
    assert {g["labels"]["pool"] for g in node["static_configs"]} == {"rack"}
    assert srv["discovery"] == {"cluster": "c1", "pools": ["gpu", "mon"], "ports": [9100, 9400],
                                "networks": ["10.64.0.0/16"], "aws": {"regions": ["us-west-2"]}}
    assert {r.get("target_label") for r in node["relabel_configs"]} == {"cluster"}


CLOUD_CONTROLLER_MONITOR = """name: c1
owner: o
monitoring: {prometheus: true}
slurm: {health_check_interval: 120}
pools:
  - {name: ctl, provider: aws, region: us-east-1, instance_type: g4dn.12xlarge, role: controller, nodes: 1}
  - {name: gpu, provider: aws, region: us-east-1, instance_type: p4d.24xlarge, nodes: 2}
"""


def test_a_cloud_controller_monitors_own_node_is_listed_for_node_exporter_only(write, cat, tmp_path):
    """render_prometheus puts the monitor's own pool in the node job (its node_exporter serves the cluster
    collector's file) whatever its role; a cloud monitor's targets come from the files root writes, so its own node
    must be listed too (or the job waits on it for ever), and in node_exporter's file alone: Slurm's controller runs
    no DCGM exporter (rev53c, after merge b13552f)."""
    from gpufleet.clouds import node_targets

    st = stacks.load(write("c1.yaml", CLOUD_CONTROLLER_MONITOR), cat)
    srv = pillar.monitor_pillar(st, "c1")
    node_port, dcgm_port = scrape.ports()["node_exporter"], scrape.ports()["dcgm_exporter"]
    (node,) = [c for c in yaml.safe_load(srv["prometheus_yml"])["scrape_configs"] if c["job_name"] == "node"]
    assert node["file_sd_configs"] == [{"files": [f"{node_targets.DIR}/{node_port}.json"]}]
    d = srv["discovery"]
    assert d["pools"] == ["ctl", "gpu"] and d["port_pools"] == {str(dcgm_port): ["gpu"]}
    node_targets.write([("ctl", "i-0c", "10.64.0.4"), ("gpu", "i-0g", "10.64.0.5")], d["ports"], str(tmp_path),
                       d.get("port_pools"))
    listed = {port: [g["labels"]["node"] for g in json.loads((tmp_path / f"{port}.json").read_text())]
              for port in (node_port, dcgm_port)}
    assert listed == {node_port: ["i-0c", "i-0g"], dcgm_port: ["i-0g"]}


def test_prometheus_goes_on_the_monitor_pools_first_node_listening_on_its_address(cat):
    st = stacks.load(ROOT / "stacks" / "examples" / "baremetal-rack.yaml", cat)
    pool = st.pools[0]
    first = pillar.build(st, pool, cluster="rk", index=0)
    other = pillar.build(st, pool, cluster="rk", index=1)
    assert "monitoring.server" in first["gpufleet"]["states"] and "monitoring.server" not in other["gpufleet"]["states"]
    srv = first["monitoring"]["server"]
    assert (srv["listen_address"], srv["retention"], srv["retention_size"]) == ("10.10.0.11", "30d", "100GB")
    assert "server" not in other["monitoring"]


def test_a_webhook_is_alertmanagers_receiver(write, cat):
    st = stacks.load(write("s.yaml", "name: s\nowner: o\nmonitoring: {prometheus: true, host: r, alert_webhook: "
                                     "'https://hooks.example.com/gpu'}\npools:\n  - {name: r, provider: baremetal, "
                                     "site: lab, gpu: L4, gpus_per_node: 1, hosts: [{address: 192.0.2.1}]}\n"), cat)
    am = yaml.safe_load(scrape.render_alertmanager(st))
    assert am["receivers"] == [{"name": "gpufleet", "webhook_configs": [
        {"url": "https://hooks.example.com/gpu", "send_resolved": True}]}]
    assert am["route"]["receiver"] == "gpufleet"


SLACK = "https://hooks.slack.com/services/T0000/B0000/XXXXXXXX"  # the shape of api.slack.com/messaging/webhooks' URL


def _amtool() -> str:
    exe = shutil.which("amtool")
    require(exe is not None, "amtool is not installed (Debian's prometheus-alertmanager: `make sysdeps`)")
    return exe


def test_a_slack_incoming_webhook_gets_alertmanagers_slack_receiver(write, cat, tmp_path):
    """A Slack incoming webhook takes a message (`text`, blocks or attachments; no_text otherwise:
    api.slack.com/messaging/webhooks, read 2026-11-28), not Alertmanager's webhook JSON, so alerts sent there as a
    webhook were never seen (rev53b #14). Alertmanager's own Slack notifier sends that message (slack_config,
    prometheus.io/docs/alerting/0.25/configuration/#slack_config): the stack's URL becomes its api_url, a secret
    Alertmanager does not serve back. Checked by the real amtool (Debian 12's prometheus-alertmanager 0.25)."""
    st = stacks.load(write("s.yaml", "name: s\nowner: o\nmonitoring: {prometheus: true, host: r, alert_webhook: "
                                     f"'{SLACK}'}}\npools:\n  - {{name: r, provider: baremetal, "
                                     "site: lab, gpu: L4, gpus_per_node: 1, hosts: [{address: 192.0.2.1}]}\n"), cat)
    text = scrape.render_alertmanager(st)
    assert yaml.safe_load(text)["receivers"] == [{"name": "gpufleet", "slack_configs": [
        {"api_url": SLACK, "send_resolved": True, **scrape.SLACK_MESSAGE}]}]
    _checked(_amtool(), ["check-config"], text, tmp_path, "alertmanager.yml")


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_slack_message_carries_the_alerts_summary_and_description_and_no_dead_link(write, cat, tmp_path):
    """rev53d #2. The real Alertmanager 0.25 (Debian 12's prometheus-alertmanager 0.25.0-1+b4) runs with the
    alertmanager.yml gpufleet renders for a Slack incoming webhook (api_url pointed at a listener here in place of
    hooks.slack.com, group_wait shortened: nothing else changed); one alert is posted, and what Slack would get is
    read. Its default template (template/default.tmpl) sent an empty text and a title link to
    http://<the monitor's hostname>:9093, where nobody reaches the loopback-only Alertmanager: the rule's summary
    never reached the channel."""
    import http.server
    import threading
    import time
    import urllib.request

    exe = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    require(exe is not None, "Alertmanager is not installed (Debian's prometheus-alertmanager: `make sysdeps`)")
    st = stacks.load(write("s.yaml", "name: s\nowner: o\nmonitoring: {prometheus: true, host: r, alert_webhook: "
                                     f"'{SLACK}'}}\npools:\n  - {{name: r, provider: baremetal, "
                                     "site: lab, gpu: L4, gpus_per_node: 1, hosts: [{address: 192.0.2.1}]}\n"), cat)
    doc = yaml.safe_load(scrape.render_alertmanager(st))
    got: list[bytes] = []

    class Slack(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            got.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    hook = http.server.HTTPServer(("127.0.0.1", 0), Slack)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    (cfg,) = doc["receivers"][0]["slack_configs"]
    cfg["api_url"] = f"http://127.0.0.1:{hook.server_address[1]}/services/T000/B000/XXXXSECRET"
    doc["route"]["group_wait"] = "1s"
    (tmp_path / "am.yml").write_text(yaml.safe_dump(doc))
    port = _free_port()
    am = subprocess.Popen([exe, f"--config.file={tmp_path / 'am.yml'}", f"--storage.path={tmp_path / 'data'}",
                           f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        alert = [{"labels": {"alertname": "GpuXidFatal", "cluster": "lab", "pool": "r", "node": "r-0", "xid": "79"},
                  "annotations": {"summary": "r-0: XID 79 (GPU fell off the bus)",
                                  "description": "drain r-0 and replace it"},
                  "generatorURL": "http://127.0.0.1:9090/graph?g0.expr=x"}]
        deadline = time.monotonic() + 60
        while True:
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{port}/api/v2/alerts", json.dumps(alert).encode(),
                                             {"Content-Type": "application/json"}, method="POST")
                urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=5).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "Alertmanager did not start"
                time.sleep(0.3)
        while not got:
            assert time.monotonic() < deadline, "Alertmanager sent nothing to the Slack listener"
            time.sleep(0.3)
    finally:
        am.terminate()
        am.wait(timeout=30)
        hook.shutdown()
    (sent,) = json.loads(got[0])["attachments"]
    assert sent["text"] == "r-0: XID 79 (GPU fell off the bus)\ndrain r-0 and replace it\n", sent
    assert "title_link" not in sent and f":{port}" not in json.dumps(sent), sent  # Alertmanager's own listener
    assert sent["title"].startswith("[FIRING:1] GpuXidFatal") and sent["fallback"] == sent["title"], sent

def test_the_monitors_alertmanager_has_no_teams_receiver(tmp_path):
    """Why a Teams URL is refused rather than given a receiver: msteams_configs came with Alertmanager 0.26; Debian
    12's 0.25 (and Ubuntu 22.04's 0.23) refuse it, so a config naming it would never land (check_cmd)."""
    path = tmp_path / "am.yml"
    path.write_text("route: {receiver: t}\nreceivers:\n  - name: t\n    msteams_configs:\n"
                    "      - webhook_url: https://contoso.webhook.office.com/webhookb2/a\n")
    r = subprocess.run([_amtool(), "check-config", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "msteams_configs" in r.stdout + r.stderr, r.stdout + r.stderr


# Slurm's controller, the default monitor host (spec.Monitoring.host), runs none of the GPU nodes' exporters
CONTROLLER_MONITOR = RACK  # test_alert_rules' rack: its monitor is Slurm's controller (the default host)


def test_a_controller_monitor_runs_node_exporter_and_is_in_the_node_job(write, cat, tmp_path):
    """The cluster collector writes gpufleet_cluster.prom (spend, budgets, Slurm) on the monitor host: unscraped on
    Slurm's controller, BudgetPast80Percent never fired and GpufleetMetricsStale fired for ever (rev53b #3). Its
    node_exporter joins the node job (not the DCGM one: no GPU), and the file reaches a real Prometheus config."""
    st = stacks.load(write("lab.yaml", CONTROLLER_MONITOR), cat)
    ctl = st.monitor_pool()
    assert "monitoring.node_exporter" in pillar.formulas(st, ctl)
    assert pillar.formulas(st, ctl).index("monitoring.node_exporter") < pillar.formulas(st, ctl).index("monitoring.server")
    prom = pillar.monitor_pillar(st, "lab")["prometheus_yml"]
    node_exporter = scrape.ports()["node_exporter"]
    assert _targets(prom, "node") == {f"10.0.9.{i}:{node_exporter}": {"pool": p, "node": n} for i, p, n in
                                      ((1, "ctl", "ctl-0"), (2, "rack", "rack-0"), (3, "rack", "rack-1"))}
    assert set(_targets(prom, "dcgm")) == {f"10.0.9.{i}:{scrape.ports()['dcgm_exporter']}" for i in (2, 3)}
    if shutil.which("promtool"):
        _checked("promtool", ["check", "config"], prom, tmp_path, "prometheus.yml")


def test_a_gpu_pool_monitor_is_scraped_once(cat):
    st = stacks.load(ROOT / "stacks" / "examples" / "baremetal-rack.yaml", cat)
    assert pillar.formulas(st, st.monitor_pool()).count("monitoring.node_exporter") == 0
    assert len(_targets(pillar.monitor_pillar(st, "rk")["prometheus_yml"], "node")) == 4

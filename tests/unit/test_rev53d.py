"""rev53d: hostile review of merge 97b076d (wt/fix53d): monitoring.grafana, the Slack receiver and its refusals,
reload/--web.external-url. Each test fails on 97b076d; product code untouched (report: the review rev53d.md)."""

import shutil
import subprocess

import pytest

from gpufleet import stacks
from gpufleet.configure import pillar
from gpufleet.errors import GpufleetError
from tests.conftest import require, salt_call
from tests.saltrender import OSES, render

pytest.importorskip("grafana_foundation_sdk")  # monitor_files builds the dashboards with it

STACK = """name: lab
owner: o
monitoring: {prometheus: true, host: r, grafana: true}
pools:
  - {name: r, provider: baremetal, site: lab, gpu: L4, gpus_per_node: 1, hosts: [{address: 10.0.9.1}, {address: 10.0.9.2}]}
"""
GRAFANA_KEY = "B53AE77BADB630A683046005963FA27710458545"  # what grafana.sls pins


@pytest.fixture(scope="module")
def states(tmp_path_factory):
    path = tmp_path_factory.mktemp("stack") / "lab.yaml"
    path.write_text(STACK)
    st = stacks.load(path)
    pil = pillar.build(st, st.pools[0], cluster="lab", index=0)
    return render(salt_call(), tmp_path_factory.mktemp("salt"), OSES["Debian-12"], pil, ["monitoring.server"])


def _arg(state: dict, key: str):
    mod = next(k for k in state if not k.startswith("__"))
    return next((x[key] for x in state[mod] if isinstance(x, dict) and key in x), None)


def _gpg(home, *args: str, data: bytes | None = None) -> bytes:
    return subprocess.run(["gpg", "--homedir", str(home), "--batch", *args], capture_output=True, input=data,
                          timeout=120, check=True).stdout


def _fprs(home) -> list[str]:
    return [line.split(":")[9] for line in _gpg(home, "--with-colons", "--list-keys").decode().splitlines()
            if line.startswith("fpr:")]


# --- 2. MISLEADS: the Slack receiver posts no alert's summary or description, and links to a port nobody reaches ----

SLACK_STACK = """name: lab
owner: o
monitoring: {prometheus: true, host: r, alert_webhook: "https://hooks.slack.com/services/T000/B000/XXXXSECRET"}
pools:
  - {name: r, provider: baremetal, site: lab, gpu: L4, gpus_per_node: 1, hosts: [{address: 10.0.9.1}]}
"""


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_slack_message_carries_the_alerts_description_and_no_dead_link(tmp_path):
    """Run Debian 12's real Alertmanager 0.25 (prometheus-alertmanager 0.25.0-1+b4) with the alertmanager.yml gpufleet
    renders for a Slack incoming webhook (api_url pointed at a local listener in place of hooks.slack.com, group_wait
    shortened: nothing else changed), post one alert with the summary/description our rules carry, and read what
    Slack would get. Alertmanager 0.25 template/default.tmpl: `slack.default.text` is empty and `slack.default.
    titlelink` is `{{ .ExternalURL }}/#/alerts?receiver=...`; ExternalURL, with no --web.external-url, is
    http://<the monitor's hostname>:9093 (cmd/alertmanager/main.go extURL), while server.sls makes Alertmanager
    listen on 127.0.0.1 only: the message names the alert and links to a page no reader can open, and the rule's
    description ("drain the node ...") is never sent."""
    import http.server
    import json
    import threading
    import time
    import urllib.request

    import yaml

    exe = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    require(exe is not None, "Alertmanager is not installed (Debian's prometheus-alertmanager: `make sysdeps`)")
    from gpufleet.monitoring import scrape
    path = tmp_path / "lab.yaml"
    path.write_text(SLACK_STACK)
    doc = yaml.safe_load(scrape.render_alertmanager(stacks.load(path)))
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
    body = json.loads(got[0])
    sent = json.dumps(body)
    dead = [a.get("title_link") for a in body.get("attachments", []) if f":{port}/" in (a.get("title_link") or "")]
    # (the title_link names Alertmanager's own listener, here {port}, on the monitor 127.0.0.1:9093 only)
    assert "drain r-0 and replace it" in sent and not dead, f"Slack got: {sent}"


# --- 3. BREAKS valid configurations: webhook URLs that take Alertmanager's JSON (or Slack's message) are refused ------

WEBHOOKS_THAT_WORK = {
    # an Azure Logic App's "When a HTTP request is received" trigger (learn.microsoft.com/azure/connectors/
    # connectors-native-reqres, read 2026-11-28) takes any JSON body: the usual relay from Alertmanager to Teams/
    # ServiceNow on Azure, i.e. what the refusal's own hint tells the user to put there. spec.CHAT_WEBHOOKS refuses
    # every *.logic.azure.com host as "Microsoft Teams (a Workflows webhook)".
    "logic-app": "https://prod-27.westeurope.logic.azure.com:443/workflows/0a1b2c3d/triggers/manual/paths/invoke"
                 "?api-version=2016-10-01&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig=AbCdEf123",
    # a host that is not Discord's at all: CHAT_WEBHOOKS' "discord.com" has no leading dot, so
    # host.endswith("discord.com") also matches mydiscord.com, notdiscord.com ...
    "lookalike": "https://alerts.mydiscord.com/hooks/gpu",
}


@pytest.mark.parametrize("url", list(WEBHOOKS_THAT_WORK.values()), ids=list(WEBHOOKS_THAT_WORK))
def test_a_webhook_that_takes_alertmanagers_json_is_accepted(tmp_path, url):
    path = tmp_path / "lab.yaml"
    path.write_text(SLACK_STACK.replace("https://hooks.slack.com/services/T000/B000/XXXXSECRET", url))
    try:
        st = stacks.load(path)
    except GpufleetError as e:
        pytest.fail(f"refused: {e}")
    assert st.monitoring.alert_webhook == url


def test_discords_slack_compatible_webhook_gets_the_slack_receiver(tmp_path):
    """Discord's "Execute Slack-Compatible Webhook" (discord.com/developers/docs/resources/webhook, POST
    /webhooks/{id}/{token}/slack, read 2026-11-28) takes exactly what Alertmanager's slack_configs posts; the spec
    refuses every discord.com URL as taking "content or embeds" only."""
    from gpufleet.monitoring import scrape
    url = "https://discord.com/api/webhooks/1234567890/AbCdEfToken/slack"
    path = tmp_path / "lab.yaml"
    path.write_text(SLACK_STACK.replace("https://hooks.slack.com/services/T000/B000/XXXXSECRET", url))
    try:
        st = stacks.load(path)
    except GpufleetError as e:
        pytest.fail(f"refused: {e}")
    assert "slack_configs" in scrape.render_alertmanager(st)

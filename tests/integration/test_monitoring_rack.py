"""Prometheus on the local test rack, end to end (issue 53): `gpufleet up` applies the monitoring formula
with Debian's own prometheus, prometheus-alertmanager and prometheus-node-exporter (host 1 the monitor,
every host a node); each host's DCGM exporter is played by tests/dcgm_exporter_standin.py on :9400 (no
GPU here). Through Prometheus's and Alertmanager's HTTP APIs: every host's node and dcgm targets are up
with their cluster, pool and node labels; a node's gpufleet.prom (written here, as the node agent writes
it: tmp file then rename in the textfile directory) appears with the pool's price from the plan; an XID 79
on one GPU fires the stack's alert in Alertmanager (read on the monitor host: it listens on loopback only), its
link naming where `gpufleet dashboard` serves Prometheus; Prometheus listens on the monitor's cluster address only;
an apply that changes their files reloads both daemons, not restarts them; `down --clean` removes them."""

import io
import json
import tarfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from gpufleet import catalog, stacks
from gpufleet.catalog.onprem import site_from_pool
from gpufleet.monitoring import dashboards, provisioning, scrape
from gpufleet.monitoring.ports import local_url
from tests.conftest import ROOT
from tests.integration import localrack
from tests.integration.localrack import active, gpufleet, on_host

STACK_FILE = ROOT / "tests" / "integration" / "monitoring-rack.yaml"
CLUSTER = "e2e-mon"
MONITOR = 1  # the monitor host
STANDIN = "/opt/gpufleet-dcgm-standin"
# host -> (pool, node): the stack's pools in order, each host its pool's next index
NODES = {1: ("mon", "mon-0"), 2: ("l4", "l4-0"), 3: ("l4", "l4-1"), 4: ("h100", "h100-0")}
GPUS = {"mon": ("NVIDIA L4", 1), "l4": ("NVIDIA L4", 1), "h100": ("NVIDIA H100 80GB HBM3", 8)}

pytestmark = [pytest.mark.slow, localrack.group(1)]


@pytest.fixture(scope="module")
def rack(request, tmp_path_factory):
    yield from localrack.rack_module(request, tmp_path_factory, STACK_FILE)


def _get(port: int, path: str, **query):
    """A JSON answer of the monitor host's Prometheus or Alertmanager, straight (no proxy: the rack's bridge)."""
    url = f"http://{active().address(MONITOR)}:{port}{path}" + ("?" + urllib.parse.urlencode(query) if query else "")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=10) as r:
        return json.load(r)


def _until(what, ok, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = what()
        except OSError as e:  # not listening yet
            got = e
        if (not isinstance(got, OSError) and ok(got)) or time.monotonic() > deadline:
            return got
        time.sleep(2)


def _standin_state(pool: str, **gpu_values) -> str:
    model, gpus = GPUS[pool]
    return json.dumps({"model": model, "gpus": gpus, "values": {"DCGM_FI_DEV_GPU_TEMP": 41},
                       "gpu_values": gpu_values})


def _start_standin(i: int) -> None:
    """The DCGM exporter stand-in on host ``i``, serving the counters file gpufleet gives the exporter."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(ROOT / "tests" / "dcgm_exporter_standin.py", "standin.py")
        tar.add(ROOT / "salt" / "monitoring" / "files" / "gpufleet-counters.csv", "counters.csv")
        body = _standin_state(NODES[i][0]).encode()
        info = tarfile.TarInfo("state.json")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    r = on_host(i, f"rm -rf {STANDIN} && mkdir -p {STANDIN} && tar -x -C {STANDIN} && "
                   f"(setsid nohup python3 {STANDIN}/standin.py --counters {STANDIN}/counters.csv "
                   f"--state {STANDIN}/state.json --port {scrape.ports()['dcgm_exporter']} "
                   f"</dev/null >{STANDIN}/log 2>&1 &)", stdin=buf.getvalue())
    assert r.returncode == 0, r.stderr


def _inject(i: int, **gpu_values) -> None:
    r = on_host(i, f"cat > {STANDIN}/state.json.tmp && mv {STANDIN}/state.json.tmp {STANDIN}/state.json",
                stdin=_standin_state(NODES[i][0], **gpu_values))
    assert r.returncode == 0, r.stderr


def _write_textfile(i: int, price: float) -> None:
    """The node's gpufleet.prom as the contract between the node agent and node_exporter has it (the
    agent's writer is another part of issue 53): in the textfile directory, through a tmp file and a
    rename, no timestamps, a final newline."""
    d = scrape.parameters()["textfile_dir"]
    text = ("# HELP gpufleet_node_price_usd_per_hour What the node costs an hour (US$), from the plan.\n"
            "# TYPE gpufleet_node_price_usd_per_hour gauge\n"
            f"gpufleet_node_price_usd_per_hour {price!r}\n")
    r = on_host(i, f"cat > {d}/gpufleet.prom.$$ && mv {d}/gpufleet.prom.$$ {d}/gpufleet.prom", stdin=text)
    assert r.returncode == 0, r.stderr


def _targets() -> list[dict]:
    return _get(scrape.ports()["prometheus"], "/api/v1/targets")["data"]["activeTargets"]


def _query(q: str) -> list[dict]:
    return _get(scrape.ports()["prometheus"], "/api/v1/query", query=q)["data"]["result"]


def _alerts() -> list[dict]:
    """Alertmanager's GpuXidFatal alerts, asked on the monitor host itself (it listens on 127.0.0.1 only)."""
    url = f"http://127.0.0.1:{scrape.ports()['alertmanager']}/api/v2/alerts?" + urllib.parse.urlencode(
        {"filter": 'alertname="GpuXidFatal"'})
    r = on_host(1, "python3 -c 'import sys, urllib.request; "
                   "sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' " + f"'{url}'")
    if r.returncode != 0:
        raise OSError(r.stderr)  # not listening yet
    return json.loads(r.stdout)


def _runtime() -> dict:
    return _get(scrape.ports()["prometheus"], "/api/v1/status/runtimeinfo")["data"]


def _alertmanager_status() -> dict:
    """Alertmanager's GET /api/v2/status (its uptime: when it started; its configuration), asked on the monitor host."""
    url = f"http://127.0.0.1:{scrape.ports()['alertmanager']}/api/v2/status"
    r = on_host(1, "python3 -c 'import sys, urllib.request; "
                   "sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' " + f"'{url}'")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _changed_files_are_reloaded_not_restarted(rack) -> None:
    """An apply that changes prometheus.yml and alertmanager.yml reloads both daemons (SIGHUP through their init
    scripts here), the same processes with the new files: a restart would replay Prometheus's WAL and reset every
    pending `for:` (rev53b #14)."""
    prom, am = _runtime(), _alertmanager_status()
    hook = "http://127.0.0.1:9/gpufleet-e2e"  # nothing listens there: a receiver that only has to be configured
    path = Path(rack["stack"])
    text = path.read_text()
    assert "scrape_interval: 5}" in text
    path.write_text(text.replace("scrape_interval: 5}", f"scrape_interval: 6, alert_webhook: '{hook}'}}"))
    rc, doc, err = gpufleet(rack, "up", "--no-verify", rack["stack"], "--cluster", CLUSTER, "--yes", "--reconfigure")
    assert rc == 0, [h for h in (doc or {}).get("hosts", []) if h.get("error")] or err[-3000:]
    after = _until(_runtime, lambda d: d["lastConfigTime"] != prom["lastConfigTime"], timeout=30)
    assert after["startTime"] == prom["startTime"] and after["reloadConfigSuccess"], (prom, after)
    config = _get(scrape.ports()["prometheus"], "/api/v1/status/config")["data"]["yaml"]
    assert yaml.safe_load(config)["global"]["scrape_interval"] == "6s", config
    am_after = _alertmanager_status()
    assert am_after["uptime"] == am["uptime"] and hook in am_after["config"]["original"], (am["uptime"], am_after)


def test_prometheus_scrapes_every_node_alerts_an_xid_and_goes_with_clean(rack):
    cat = catalog.load(use_config=False)
    st = stacks.load(STACK_FILE, cat)
    price = {p.name: site_from_pool(p, cat, str(STACK_FILE)).usd_per_node_hour() for p in st.pools}
    for i in NODES:
        _start_standin(i)
    rc, doc, err = gpufleet(rack, "up", "--no-verify", rack["stack"], "--cluster", CLUSTER, "--yes",
                            "--trust-new-hosts")
    assert rc == 0, [h for h in (doc or {}).get("hosts", []) if h.get("error")] or err[-3000:]
    assert {h["state"] for h in doc["hosts"]} == {"configured"}, doc["hosts"]
    for i, (pool, _) in NODES.items():
        _write_textfile(i, price[pool])

    # every host's node_exporter and DCGM exporter, up, with gpufleet's labels
    want = {(job, f"{active().address(i)}:{scrape.ports()[port]}", pool, node, CLUSTER)
            for i, (pool, node) in NODES.items() for job, port in scrape.JOBS.items()}

    def seen(targets):
        return {(t["labels"]["job"], t["labels"]["instance"], t["labels"].get("pool"), t["labels"].get("node"),
                 t["labels"].get("cluster")) for t in targets if t["health"] == "up"}

    targets = _until(_targets, lambda t: seen(t) == want)
    assert not isinstance(targets, OSError) and seen(targets) == want, targets

    # the DCGM exporter's series with its own labels; the textfile's price with the pool's
    temps = _until(lambda: _query("DCGM_FI_DEV_GPU_TEMP"), lambda r: len(r) == 1 + 1 + 1 + 8)
    assert {(r["metric"]["node"], r["metric"]["modelName"]) for r in temps} >= {("h100-0", "NVIDIA H100 80GB HBM3")}
    prices = _until(lambda: _query("gpufleet_node_price_usd_per_hour"), lambda r: len(r) == len(NODES))
    assert {(r["metric"]["pool"], r["metric"]["node"], round(float(r["value"][1]), 6)) for r in prices} == \
        {(pool, node, round(price[pool], 6)) for pool, node in NODES.values()}, prices

    # an XID 79 on h100-0's GPU 5 fires the stack's rule, which reaches Alertmanager
    _inject(4, **{"5": {"DCGM_FI_DEV_XID_ERRORS": 79}})
    alerts = _until(_alerts, lambda a: any(x["labels"].get("node") == "h100-0" for x in a), timeout=90)
    fired = [x for x in alerts if x["labels"].get("node") == "h100-0"]
    assert fired and fired[0]["labels"]["gpu"] == "5" and fired[0]["labels"]["pool"] == "h100" and \
        fired[0]["status"]["state"] == "active", alerts
    assert not any(x["labels"].get("node") != "h100-0" for x in alerts), alerts
    # its link names where `gpufleet dashboard CLUSTER --prometheus --port 9090` serves Prometheus, not the monitor's
    # hostname (--web.external-url; rev53b #14)
    assert fired[0]["generatorURL"].startswith(local_url("prometheus") + "graph?"), fired[0]

    # Prometheus listens on the monitor's cluster address, Alertmanager on loopback, and nowhere else
    listening = on_host(1, "ss -ltnH '( sport = :9090 or sport = :9093 or sport = :9094 )'").stdout
    local = sorted(line.split()[3] for line in listening.splitlines() if line.strip())
    monitor = active().address(MONITOR)
    assert local == sorted([f"{monitor}:9090", "127.0.0.1:9093"]), listening

    _changed_files_are_reloaded_not_restarted(rack)

    rc, doc, err = gpufleet(rack, "down", rack["stack"], "--cluster", CLUSTER, "--yes", "--clean")
    assert rc == 0, [(h["host"], h.get("error")) for h in (doc or {}).get("hosts", [])] or err[-2000:]
    for i in NODES:
        on_host(i, f"pkill -f {STANDIN}/standin.py")
        left = on_host(i, "ss -ltnH '( sport = :9090 or sport = :9093 or sport = :9100 )' | wc -l; "
                          "ls -d /etc/prometheus /etc/gpufleet/monitoring-server "
                          "/etc/default/prometheus-node-exporter 2>/dev/null; "
                          "dpkg -l prometheus prometheus-alertmanager prometheus-node-exporter 2>/dev/null | grep -c '^ii'")
        assert left.stdout.split() == ["0", "0"], (i, left.stdout, left.stderr)


GRAFANA_REPO = ("apt.grafana.com", 443)  # monitoring.grafana's apt repository (salt/monitoring/parameters/defaults.yaml)


def _grafana_api(path: str, auth: bool = True) -> tuple[int, object]:
    """(status, JSON) of the monitor's Grafana (on its loopback), as its admin (the password in its 0600 file)."""
    script = ("import base64, json, sys, urllib.error, urllib.request\n"
              "r = urllib.request.Request('http://127.0.0.1:%d' + sys.argv[1])\n"
              "if sys.argv[2] == '1':\n"
              "    pw = open('/etc/gpufleet/grafana/admin-password').read().strip()\n"
              "    r.add_header('Authorization', 'Basic ' + base64.b64encode(('admin:' + pw).encode()).decode())\n"
              "try:\n    res = urllib.request.urlopen(r, timeout=10); print(res.status); print(res.read().decode())\n"
              "except urllib.error.HTTPError as e:\n    print(e.code); print('null')\n") % scrape.ports()["grafana"]
    r = on_host(MONITOR, f"python3 - '{path}' {int(auth)}", stdin=script)
    if r.returncode != 0:
        raise OSError(r.stderr)
    status, body = r.stdout.split("\n", 1)
    return int(status), json.loads(body)


def test_grafana_on_the_monitor_serves_the_dashboards_to_its_admin_only(rack):
    """monitoring.grafana applied for real: Grafana from its apt repository, its data source (the monitor's
    Prometheus) healthy, gpufleet's dashboards provisioned, nothing for an anonymous visitor. Grafana's packages come
    only from apt.grafana.com, so this runs where the monitor host reaches it."""
    probe = on_host(MONITOR, "python3 -c 'import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), "
                             f"timeout=5)' {GRAFANA_REPO[0]} {GRAFANA_REPO[1]}")
    if probe.returncode != 0:
        pytest.skip(f"blocked here: Grafana's packages come from {GRAFANA_REPO[0]}, which the test rack's monitor "
                    "host cannot reach; monitoring.grafana is checked by rendering it with real Salt "
                    "(tests/unit/monitoring/test_grafana_formula.py), not applied")
    path = Path(rack["stack"])
    path.write_text(path.read_text().replace("host: mon,", "host: mon, grafana: true,"))
    rc, doc, err = gpufleet(rack, "up", "--no-verify", rack["stack"], "--cluster", "e2e-grafana", "--yes",
                            "--trust-new-hosts")
    assert rc == 0, [h for h in (doc or {}).get("hosts", []) if h.get("error")] or err[-3000:]
    try:
        health = _until(lambda: _grafana_api("/api/health", auth=False), lambda r: r[0] == 200)
        assert not isinstance(health, OSError) and health[0] == 200, health
        uid = provisioning.scope(yaml.safe_load(path.read_text())["name"]).datasource_uid
        assert _until(lambda: _grafana_api(f"/api/datasources/uid/{uid}/health"), lambda r: r[0] == 200)[0] == 200
        status, found = _grafana_api("/api/search?type=dash-db")
        assert status == 200 and {d["uid"].rsplit("-", 1)[0] for d in found} >= set(dashboards.build()), found
        assert _grafana_api("/api/search", auth=False)[0] == 401
    finally:
        gpufleet(rack, "down", rack["stack"], "--cluster", "e2e-grafana", "--yes", "--clean")

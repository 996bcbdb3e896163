"""The monitoring formula as real Salt renders it (salt-call --local, grains of each OS): the monitor
host's Prometheus and Alertmanager (monitoring.server) from the pillar gpufleet builds, each file checked
by its program before it lands, Prometheus listening on the host's cluster address and Alertmanager on loopback
only; a host of an OS
without a checked package refused with a message; clean undoing it where its marker is; the nodes'
node_exporter reading the textfile directory and the DCGM exporter given gpufleet's counters file."""

import ipaddress
import json
import re
import subprocess

import pytest

from gpufleet import catalog, stacks
from gpufleet.configure import pillar
from gpufleet.monitoring import scrape
from tests.conftest import ROOT, salt_call
from tests.saltrender import OSES, render

# what `up` and `configure` give the monitor (fleet.budgets.monitor_settings)
COLLECTOR = {"interval": 60, "settings": {"cluster": "rk", "usd_per_hour": 12.5, "since": "2026-11-27T08:00:00Z",
                                          "slurm": False, "budgets": [{"name": "lab", "usd_per_month": 5000.0}]}}
SLS = ["monitoring.server", "monitoring.node_exporter", "monitoring.dcgm", "monitoring.clean"]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    cat = catalog.load(use_config=False)
    st = stacks.load(ROOT / "stacks" / "examples" / "baremetal-rack.yaml", cat)
    pil = pillar.build(st, st.pools[0], cluster="rk", index=0, collector=COLLECTOR)
    base = tmp_path_factory.mktemp("salt")
    exe = salt_call()
    oses = ("Debian-12", "Ubuntu-22.04", "Ubuntu-24.04", "Rocky-9")
    return {os_: render(exe, base / os_, OSES[os_], pil, SLS) for os_ in oses}


def _arg(state: dict, key: str):
    mod = next(k for k in state if not k.startswith("__"))
    return next((x[key] for x in state[mod] if isinstance(x, dict) and key in x), None)


def test_each_file_is_checked_by_its_program_before_it_lands(rendered):
    s = rendered["Debian-12"]
    prom = s["monitoring-server-prometheus-config-file-managed"]
    assert (_arg(prom, "name"), _arg(prom, "check_cmd"), _arg(prom, "contents_pillar")) == (
        "/etc/prometheus/prometheus.yml", "promtool check config", "monitoring:server:prometheus_yml")
    am = s["monitoring-server-alertmanager-config-file-managed"]
    assert (_arg(am, "check_cmd"), _arg(am, "mode")) == ("amtool check-config", "0640")
    assert _arg(s["monitoring-server-packages-pkg-installed"], "pkgs") == ["prometheus", "prometheus-alertmanager"]
    # no rules in the pillar (none shipped by this build): none left behind either
    assert "monitoring-server-rules-file-absent" in s or "monitoring-server-rules-file-managed" in s


def test_the_daemons_listen_on_the_cluster_address_and_restart_on_a_change(rendered):
    s = rendered["Ubuntu-24.04"]
    ports = scrape.ports()
    args = _arg(s["monitoring-server-prometheus-args-file-managed"], "contents")
    assert (f"--web.listen-address=10.10.0.11:{ports['prometheus']}" in args and
            "--storage.tsdb.retention.time=30d" in args and "--storage.tsdb.retention.size=100GB" in args), args
    am = _arg(s["monitoring-server-alertmanager-args-file-managed"], "contents")
    assert f"--web.listen-address=127.0.0.1:{ports['alertmanager']}" in am and "--cluster.listen-address=" in am, am
    watched = json.dumps(_arg(s["monitoring-server-prometheus-service-running"], "watch"))
    assert "monitoring-server-prometheus-args-file-managed" in watched  # a config change reloads (test below)


def test_an_os_without_a_checked_package_is_refused_with_the_way_out(rendered):
    s = rendered["Rocky-9"]
    (fail,) = [k for k in s if k.startswith("monitoring-server-")]
    assert fail == "monitoring-server-unsupported-test-fail_without_changes"
    assert "Debian 12 or Ubuntu" in json.dumps(s[fail])


def test_clean_undoes_the_server_where_it_ran(rendered):
    s = rendered["Debian-12"]
    purged = s["monitoring-server_clean-packages-pkg-purged"]
    assert _arg(purged, "onlyif") == "test -f /etc/gpufleet/monitoring-server"
    assert _arg(purged, "pkgs") == ["prometheus", "prometheus-alertmanager"]


def test_node_exporter_reads_the_textfile_directory_and_dcgm_gets_the_counters_file(rendered):
    s = rendered["Debian-12"]
    args = _arg(s["monitoring-node_exporter-args-file-managed"], "contents")
    assert 'ARGS="--collector.textfile.directory=/var/lib/prometheus/node-exporter' in args
    assert _arg(s["monitoring-node_exporter-textfile-dir-file-directory"], "name") == "/var/lib/prometheus/node-exporter"
    unit = _arg(s["monitoring-dcgm-exporter-unit-file-managed"], "contents")
    csv = "/etc/dcgm-exporter/gpufleet-counters.csv"
    assert f"-v {csv}:{csv}:ro " in unit and unit.split("ExecStart=")[1].split("\n")[0].endswith(f" -f {csv}"), unit
    assert _arg(s["monitoring-dcgm-exporter-counters-file-managed"], "source") == \
        "salt://monitoring/files/gpufleet-counters.csv"


def test_the_monitor_runs_the_cluster_collector_with_the_settings_the_operation_gave(rendered):
    """The cluster's spend, budgets and Slurm reach node_exporter only if monitoring.server installs the collector
    with the settings `up`/`configure` put in the pillar (review of issue 53: nothing installed it)."""
    s = rendered["Debian-12"]
    written = s["monitoring-collector-settings-file-serialize"]
    assert _arg(written, "dataset") == COLLECTOR["settings"]
    assert "OnUnitActiveSec=60" in _arg(s["monitoring-collector-timer-file-managed"], "contents")
    assert "monitoring-collector-clean-files-file-absent" in s  # monitoring.clean takes it away again


def _args(states: dict, sid: str) -> str:
    """The ARGS="..." of a daemon's /etc/default file as monitoring.server writes it."""
    return re.search(r'ARGS="([^"]*)"', _arg(states[sid], "contents")).group(1)


# each OS's Alertmanager and the flags its cmd/alertmanager/main.go declares (prometheus/alertmanager tags v0.23.0,
# v0.25.0, v0.26.0; packages.ubuntu.com jammy-updates 0.23.0-4ubuntu0.3, noble-updates 0.26.0+ds-1ubuntu0.3; Debian 12
# 0.25.0-1+b4; read 2026-11-27): whether --web.listen-address may be given more than once (a kingpin String in 0.23)
AM_LISTEN_REPEATABLE = {"Ubuntu-22.04": False, "Debian-12": True, "Ubuntu-24.04": True}
AM_FLAGS = {"--config.file", "--web.listen-address", "--cluster.listen-address"}


@pytest.mark.parametrize("os_", sorted(AM_LISTEN_REPEATABLE))
def test_alertmanagers_flags_parse_on_each_oss_release(rendered, os_):
    """Ubuntu 22.04 (the default image) ships Alertmanager 0.23, which refuses a second --web.listen-address
    ("flag 'web.listen-address' cannot be repeated", exit 1: the unit restart-loops and the apply fails; rev53b)."""
    args = _args(rendered[os_], "monitoring-server-alertmanager-args-file-managed").split()
    flags = [a.split("=", 1)[0] for a in args]
    assert set(flags) <= AM_FLAGS, flags
    assert AM_LISTEN_REPEATABLE[os_] or flags.count("--web.listen-address") == 1, args


def test_alertmanager_holding_a_webhook_listens_on_loopback_only(rendered):
    """Alertmanager's GET /api/v2/status serves its whole configuration unauthenticated, the webhook URL and its token
    included (a webhook's url is no SecretURL in 0.25; the real 0.25.0-1+b4 served it, rev53b): on the cluster
    address every job and user of the cluster could read the token."""
    for os_ in AM_LISTEN_REPEATABLE:
        args = _args(rendered[os_], "monitoring-server-alertmanager-args-file-managed")
        assert re.findall(r"--web\.listen-address=(\S+)", args) == [f"127.0.0.1:{scrape.ports()['alertmanager']}"], args


def test_an_ipv6_rack_monitor_listens_on_a_bracketed_address(write, tmp_path):
    """A rack host may be addressed by IPv6 (spec._address); written bare, `--web.listen-address=fd00::11:9090`
    makes Prometheus 2.42 refuse to start ("too many colons in address"), which promtool does not check (rev53b #6)."""
    st = stacks.load(write("v6.yaml", "name: v6\nowner: o\nmonitoring: {prometheus: true, host: r}\npools:\n"
                                      "  - {name: r, provider: baremetal, site: lab, gpu: L4, gpus_per_node: 1, "
                                      "hosts: [{address: 'fd00::11'}, {address: 'fd00::12'}]}\n"))
    s = render(salt_call(), tmp_path / "salt", OSES["Debian-12"], pillar.build(st, st.pools[0], cluster="v6", index=0),
               ["monitoring.server"])
    args = _args(s, "monitoring-server-prometheus-args-file-managed")
    assert re.findall(r"--web\.listen-address=(\S+)", args) == [f"[fd00::11]:{scrape.ports()['prometheus']}"], args


def test_the_daemons_flags_land_before_the_packages_start_them(rendered):
    """The packages' postinst starts both daemons at once on /etc/default's shipped ARGS="" (every interface,
    Alertmanager's gossip port too), and a failed check_cmd later means no restart: gpufleet's ARGS are written
    first, and apt keeps them (rev53b #7)."""
    s = rendered["Debian-12"]
    required = json.dumps(_arg(s["monitoring-server-packages-pkg-installed"], "require"))
    for sid in ("monitoring-server-prometheus-args-file-managed", "monitoring-server-alertmanager-args-file-managed"):
        assert sid in required and "pkg" not in json.dumps(_arg(s[sid], "require")), (sid, required)


def _host_ipv4() -> list[str]:
    """This machine's global IPv4 addresses (what Salt's network.ip_addrs sees when the formula renders here)."""
    out = subprocess.run(["ip", "-o", "-4", "addr", "show", "scope", "global"], capture_output=True, text=True,
                         timeout=30).stdout
    return sorted({line.split()[3].split("/")[0] for line in out.splitlines()}, key=ipaddress.ip_address)


@pytest.fixture(scope="module")
def cloud_monitor(tmp_path_factory):
    path = tmp_path_factory.mktemp("stack") / "trainers.yaml"
    path.write_text("name: trainers\nowner: ops\nmonitoring: {prometheus: true, host: gpu}\npools:\n"
                    "  - {name: gpu, provider: aws, region: us-east-1, instance_type: p4d.24xlarge}\n")
    st = stacks.load(path)
    return st, pillar.build(st, st.monitor_pool(), cluster="trainers", index=0)


def test_a_cloud_monitor_listens_on_its_address_inside_the_cluster_network(cloud_monitor, tmp_path):
    """Not the host's first address (Salt sorts every interface's: docker0, IPoIB, GPUDirect NICs), which may be
    outside the cluster's network and change between applies (rev53b #8): the one inside network.cidr."""
    st, pil = cloud_monitor
    assert pil["monitoring"]["server"]["cluster_cidr"] == st.network.cidr
    addrs = _host_ipv4()
    if len(addrs) < 2:
        pytest.skip("this machine has fewer than two global IPv4 addresses to choose between")
    pil = pillar.merge(pil, {"monitoring": {"server": {"cluster_cidr": f"{addrs[-1]}/32"}}})  # the last, not the first
    s = render(salt_call(), tmp_path / "salt", OSES["Debian-12"], pil, ["monitoring.server"])
    args = _args(s, "monitoring-server-prometheus-args-file-managed")
    assert re.findall(r"--web\.listen-address=(\S+)", args) == [f"{addrs[-1]}:{scrape.ports()['prometheus']}"], args


def test_a_cloud_monitor_without_an_address_in_the_cluster_network_fails_with_a_message(cloud_monitor, tmp_path):
    outside = "203.0.113.0/24"  # TEST-NET-3 (RFC 5737)
    if any(ipaddress.ip_address(a) in ipaddress.ip_network(outside) for a in _host_ipv4()):
        pytest.skip(f"this machine has an address in {outside}")
    pil = pillar.merge(cloud_monitor[1], {"monitoring": {"server": {"cluster_cidr": outside}}})
    s = render(salt_call(), tmp_path / "salt", OSES["Debian-12"], pil, ["monitoring.server"])
    (fail,) = [k for k in s if k.startswith("monitoring-server-")]
    assert fail == "monitoring-server-no-cluster-address-test-fail_without_changes"
    assert f"no IPv4 address in the cluster's network {outside}" in json.dumps(s[fail])


@pytest.mark.parametrize("os_", ["Debian-12", "Ubuntu-22.04"])
def test_the_packages_come_without_their_recommends(rendered, os_):
    """Salt's apt install takes Recommends unless told (modules/aptpkg.py): prometheus pulled
    prometheus-node-exporter and, through its collectors, smartd, ipmitool, openipmi and more, which clean left
    behind (rev53b #10)."""
    s = rendered[os_]
    for sid in ("monitoring-server-packages-pkg-installed", "monitoring-node_exporter-package-pkg-installed"):
        assert _arg(s[sid], "install_recommends") is False, (sid, s[sid])


def test_clean_removes_the_rules_folder_it_made_and_the_emptied_config_folder(rendered):
    """monitoring.server makes /etc/prometheus/rules; clean left it, and so /etc/prometheus, which dpkg's purge
    cannot remove while something is in it (rev53b #11)."""
    s = rendered["Debian-12"]
    assert _arg(s["monitoring-server_clean-files-file-absent"], "names") == [
        "/etc/prometheus/rules", "/etc/prometheus/gpufleet-targets", "/etc/gpufleet/monitoring-server"]
    rmdir = s["monitoring-server_clean-conf-dir-cmd-run"]
    assert _arg(rmdir, "name") == "rmdir /etc/prometheus" and "ls -A /etc/prometheus" in _arg(rmdir, "onlyif")
    assert "monitoring-server_clean-files-file-absent" in json.dumps(_arg(rmdir, "require"))


def test_a_changed_collector_unit_is_loaded_by_systemd(rendered):
    """Only the timer had a service state, and Salt daemon-reloads only when that unit's own file changed: a new
    ExecStart in the .service ran the old one until the next reboot (rev53b #12)."""
    s = rendered["Debian-12"]
    reload = s["monitoring-collector-units-cmd-run"]
    assert _arg(reload, "name") == "systemctl daemon-reload"
    assert {"monitoring-collector-service-file-managed", "monitoring-collector-timer-file-managed"} <= {
        x["file"] for x in _arg(reload, "onchanges")}
    assert "monitoring-collector-units-cmd-run" in json.dumps(_arg(s["monitoring-collector-timer-service-running"],
                                                                   "require"))


# what changes which daemon: a file it reads at a reload or one read only at its start (the unit's $ARGS), a package
RELOADED_BY = {"monitoring-server-prometheus-config-file-managed", "monitoring-server-rules-file-managed"}
RESTARTED_BY = {"prometheus": {"monitoring-server-packages-pkg-installed", "monitoring-server-prometheus-args-file-managed"},
                "alertmanager": {"monitoring-server-packages-pkg-installed",
                                 "monitoring-server-alertmanager-args-file-managed"}}


def _watchers(states: dict, name: str) -> dict[str, tuple[bool, set[str]]]:
    """Each service state of the daemon ``name`` -> (whether it reloads, the ids whose changes it acts on)."""
    return {sid: (bool(_arg(st, "reload")), {next(iter(w.values())) for w in _arg(st, "watch") or []})
            for sid, st in states.items() if "service" in st and _arg(st, "name") == name}


@pytest.fixture(scope="module")
def with_rules(tmp_path_factory):
    st = stacks.load(ROOT / "stacks" / "examples" / "baremetal-rack.yaml", catalog.load(use_config=False))
    pil = pillar.build(st, st.pools[0], cluster="rk", index=0, collector=COLLECTOR)
    pil = pillar.merge(pil, {"monitoring": {"server": {"rules": "groups: []\n"}}})  # a rules file to watch
    return render(salt_call(), tmp_path_factory.mktemp("salt"), OSES["Debian-12"], pil, ["monitoring.server"])


def test_a_config_or_rules_change_reloads_prometheus_and_only_its_flags_restart_it(with_rules):
    """Salt's service.running restarts on a watched change unless told `reload: True` (states/service.py mod_watch,
    Salt 3008.3). A restart of Prometheus replays its WAL (minutes on a large TSDB) and resets every pending `for:`,
    so GpusIdleOnExpensivePool's hour started over at each apply. Prometheus reloads on SIGHUP, which its Debian 12
    unit sends (`ExecReload=/bin/kill -HUP $MAINPID`, prometheus 2.42.0+ds-5+deb12u1) and its init script too
    (init-d-script's do_reload_sigusr1: signal 1); only its flags (read at start) and a new package need a restart
    (rev53b #14)."""
    watchers = _watchers(with_rules, "prometheus")
    reloads = set().union(*[w for r, w in watchers.values() if r])
    restarts = set().union(*[w for r, w in watchers.values() if not r])
    assert reloads == RELOADED_BY and restarts == RESTARTED_BY["prometheus"], watchers


def test_an_alertmanager_config_change_reloads_it_through_its_api(with_rules):
    """Alertmanager kept its alert groups in memory only: a restart at each apply dropped them. It reloads on POST
    /-/reload (its 0.25 configuration docs), which works where its Debian init script's reload signals nothing
    (start-stop-daemon --name matched against the kernel's 15-character process name; seen on the test rack);
    its flags and package still restart it (rev53b #14)."""
    watchers = _watchers(with_rules, "prometheus-alertmanager")
    assert {sid: w for sid, (r, w) in watchers.items() if not r} == {
        "monitoring-server-alertmanager-service-running": RESTARTED_BY["alertmanager"]}, watchers
    assert not any(r for r, _ in watchers.values())
    reload = with_rules["monitoring-server-alertmanager-reload-cmd-run"]
    assert _arg(reload, "onchanges") == [{"file": "monitoring-server-alertmanager-config-file-managed"}]
    assert f"http://127.0.0.1:{scrape.ports()['alertmanager']}/-/reload" in _arg(reload, "name")
    assert {"service": "monitoring-server-alertmanager-service-running"} in _arg(reload, "require")


def test_prometheus_links_name_the_url_gpufleet_dashboard_serves(rendered):
    """Without --web.external-url, Prometheus derives its URL from the host's name and listen port (prometheus 2.42
    --help: "If omitted, relevant URL components will be derived automatically"), so an alert's generatorURL, the
    link a receiver shows, named the monitor's hostname: a dead link outside the cluster (rev53b #14). It names what
    `gpufleet dashboard CLUSTER --prometheus --port 9090` serves on the reader's machine, where export's data source
    points too."""
    from gpufleet.fleet import dashboard

    want = f"http://127.0.0.1:{scrape.ports()['prometheus']}/"
    for os_ in AM_LISTEN_REPEATABLE:
        args = _args(rendered[os_], "monitoring-server-prometheus-args-file-managed")
        assert re.findall(r"--web\.external-url=(\S+)", args) == [want], args
    tunnel = dashboard.Tunnel(None, "prometheus", scrape.ports()["prometheus"], scrape.ports()["prometheus"], [])
    assert tunnel.url == want

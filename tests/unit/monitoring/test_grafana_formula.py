"""Grafana on the monitor host (monitoring.grafana: true, issue 53 item 4), as real Salt renders monitoring.server
with the pillar gpufleet builds: Grafana's apt repository behind a key checked by its fingerprint, the package,
grafana.ini on loopback with anonymous access off and its secrets from 0600 files, the monitor's Prometheus and
gpufleet's dashboards provisioned in Grafana's documented format, and clean undoing it where its marker is.

Applied nowhere here: Grafana's packages come from apt.grafana.com, which neither this machine nor the test rack
reaches (tests/integration/test_monitoring_rack.py skips its Grafana test and says so)."""

import configparser
import json
import re
import shutil
import subprocess

import pytest
import yaml

from gpufleet import stacks
from gpufleet.configure import pillar
from gpufleet.monitoring import provisioning, scrape
from tests.conftest import require, salt_call
from tests.saltrender import OSES, render

pytest.importorskip("grafana_foundation_sdk")  # the dashboards are built with it (the `dashboards` extra)

STACK = """name: lab
owner: o
monitoring: {prometheus: true, host: r, grafana: true}
pools:
  - {name: r, provider: baremetal, site: lab, gpu: L4, gpus_per_node: 1, hosts: [{address: 10.0.9.1}, {address: 10.0.9.2}]}
"""
GRAFANA_KEY = "B53AE77BADB630A683046005963FA27710458545"  # apt.grafana.com/gpg.key since 2023-08 (grafana.sls)

# the keys of grafana.ini gpufleet may write: each a key of Grafana's conf/defaults.ini in its section
# (grafana/grafana conf/defaults.ini, main, read 2026-11-28)
INI_KEYS = {"paths": {"provisioning"}, "server": {"http_addr", "http_port"},
            "security": {"admin_user", "admin_password", "secret_key", "disable_gravatar"},
            "auth.anonymous": {"enabled"}, "users": {"allow_sign_up"},
            "analytics": {"reporting_enabled", "check_for_updates", "check_for_plugin_updates"}}
# the keys of a data source and of a dashboards provider in Grafana's provisioning files
# (grafana.com/docs/grafana/latest/administration/provisioning/, "Data sources" and "Dashboards", read 2026-11-28)
DATASOURCE_KEYS = {"name", "type", "access", "orgId", "uid", "url", "user", "database", "basicAuth", "basicAuthUser",
                   "withCredentials", "isDefault", "jsonData", "secureJsonData", "version", "editable"}
PROVIDER_KEYS = {"name", "orgId", "folder", "folderUid", "type", "disableDeletion", "updateIntervalSeconds",
                 "allowUiUpdates", "options"}


@pytest.fixture(scope="module")
def states(tmp_path_factory):
    path = tmp_path_factory.mktemp("stack") / "lab.yaml"
    path.write_text(STACK)
    st = stacks.load(path)
    pil = pillar.build(st, st.pools[0], cluster="lab", index=0)
    return render(salt_call(), tmp_path_factory.mktemp("salt"), OSES["Debian-12"], pil,
                  ["monitoring.server", "monitoring.clean"])


def _arg(state: dict, key: str):
    mod = next(k for k in state if not k.startswith("__"))
    return next((x[key] for x in state[mod] if isinstance(x, dict) and key in x), None)


def _files(states: dict) -> dict[str, str]:
    """The files monitoring.grafana writes from the pillar: path -> contents."""
    return {_arg(s, "name"): _arg(s, "contents") for sid, s in states.items()
            if sid.startswith("monitoring-grafana-provisioning-")}


def test_grafana_true_is_installed_from_its_repository_behind_the_keys_fingerprint(states):
    """`grafana: true` was accepted and dropped, then refused (rev53b #5): a state now installs Grafana, from its own
    apt repository (Debian and Ubuntu have no grafana package), trusting the key only with Grafana's fingerprint."""
    key = states["monitoring-grafana-keyring-cmd-run"]
    script = _arg(key, "name")
    assert "https://apt.grafana.com/gpg.key" in script and f'!= "{GRAFANA_KEY}"' in script and "exit 1" in script
    assert re.search(r"install -m 0644 \"\$t/key\" /etc/apt/keyrings/grafana\.asc", script), script
    assert GRAFANA_KEY in _arg(key, "unless")
    assert _arg(states["monitoring-grafana-repo-file-managed"], "contents") == \
        "deb [signed-by=/etc/apt/keyrings/grafana.asc] https://apt.grafana.com stable main"
    pkg = states["monitoring-grafana-package-pkg-installed"]
    assert _arg(pkg, "name") == "grafana" and {"file": "monitoring-grafana-repo-file-managed"} in _arg(pkg, "require")
    assert {"cmd": "monitoring-grafana-keyring-cmd-run"} in _arg(states["monitoring-grafana-repo-file-managed"],
                                                                 "require")


@pytest.fixture
def home(tmp_path):
    """A gpg home for the keys made here; the gpg-agent that signing starts in it is stopped at the end."""
    path = tmp_path / "gnupg"
    path.mkdir(mode=0o700)
    yield path
    subprocess.run(["gpgconf", "--homedir", str(path), "--kill", "gpg-agent"], capture_output=True, timeout=60)


def _gpg(home, *args: str) -> str:
    return subprocess.run(["gpg", "--homedir", str(home), "--batch", *args], capture_output=True, text=True,
                          timeout=120, check=True).stdout


def test_the_keyring_step_trusts_only_the_key_with_the_fingerprint_it_carries(states, tmp_path, home):
    """The rendered script, run by sh with the real gpg against a key made here (served as a file: URL in place of
    apt.grafana.com): another key stops it with a message and nothing written; the right one lands, and `unless`
    then holds."""
    require(shutil.which("gpg") is not None, "gpg is missing (Debian's gpg package)")
    _gpg(home, "--passphrase", "", "--quick-gen-key", "gpufleet test <t@example.com>", "ed25519", "sign", "never")
    (tmp_path / "served.key").write_text(_gpg(home, "--armor", "--export", "t@example.com"))
    fpr = next(line.split(":")[9] for line in _gpg(home, "--with-colons", "--list-keys").splitlines()
               if line.startswith("fpr:"))
    key = states["monitoring-grafana-keyring-cmd-run"]
    keyring = tmp_path / "keyrings" / "grafana.asc"

    def here(text: str, trusted: str) -> str:
        return (text.replace("https://apt.grafana.com/gpg.key", f"file://{tmp_path}/served.key")
                .replace("/etc/apt/keyrings/grafana.asc", str(keyring)).replace("/etc/apt/keyrings", str(keyring.parent))
                .replace(GRAFANA_KEY, trusted))

    other = subprocess.run(["sh", "-c", here(_arg(key, "name"), GRAFANA_KEY)], capture_output=True, text=True,
                           timeout=120)
    assert other.returncode == 1 and f"does not hold Grafana's key {GRAFANA_KEY} (it holds: {fpr})" in other.stderr, other
    assert not keyring.exists()
    ok = subprocess.run(["sh", "-c", here(_arg(key, "name"), fpr)], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and keyring.read_text().startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----"), ok
    assert subprocess.run(["sh", "-c", here(_arg(key, "unless"), fpr)], timeout=120).returncode == 0


def _keyring_script(states: dict, tmp_path, served, trusted: str):
    """The keyring state's (script, unless) as sh runs them here: the key served from ``served`` (a file: URL in
    place of apt.grafana.com), the keyring under ``tmp_path``, ``trusted`` pinned in place of Grafana's key."""
    keyring = tmp_path / "keyrings" / "grafana.asc"

    def here(text: str) -> str:
        return (text.replace("https://apt.grafana.com/gpg.key", f"file://{served}")
                .replace("/etc/apt/keyrings/grafana.asc", str(keyring)).replace("/etc/apt/keyrings", str(keyring.parent))
                .replace(GRAFANA_KEY, trusted))

    key = states["monitoring-grafana-keyring-cmd-run"]
    return here(_arg(key, "name")), here(_arg(key, "unless")), keyring


def _fprs(home) -> list[str]:
    return [line.split(":")[9] for line in _gpg(home, "--with-colons", "--list-keys").splitlines()
            if line.startswith("fpr:")]


def test_a_second_key_served_beside_grafanas_never_signs_for_the_repository(states, tmp_path, home):
    """rev53d #1. sources.list(5) (apt 2.6, Debian 12): Signed-By names a keyring, and apt's gpgv accepts a signature
    by ANY key in it. A gpg.key holding the pinned key first and another after it (one armored block: `gpg --export
    --armor A B`) passed the first-fingerprint check and landed whole. Now only the pinned key is exported into the
    keyring: real gpgv with it rejects a Release signed by the second key and accepts one signed by the pinned key."""
    require(shutil.which("gpg") is not None and shutil.which("gpgv") is not None, "gpg/gpgv missing (Debian's gpg)")
    _gpg(home, "--passphrase", "", "--quick-gen-key", "trusted <t@example.com>", "ed25519", "sign", "never")
    _gpg(home, "--passphrase", "", "--quick-gen-key", "intruder <i@example.com>", "ed25519", "sign", "never")
    trusted, intruder = _fprs(home)
    served = tmp_path / "served.key"
    served.write_text(_gpg(home, "--armor", "--export", trusted, intruder))
    script, unless, keyring = _keyring_script(states, tmp_path, served, trusted)
    ran = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0 and keyring.exists(), ran
    _gpg(home, "--output", str(tmp_path / "kr.gpg"), "--dearmor", str(keyring))  # apt dearmors a .asc for gpgv
    (tmp_path / "Release").write_text("Origin: Grafana\n")

    def gpgv_accepts(signer: str) -> bool:
        sig = tmp_path / f"Release.{signer}.gpg"
        _gpg(home, "--local-user", signer, "--detach-sign", "--output", str(sig), str(tmp_path / "Release"))
        return subprocess.run(["gpgv", "--keyring", str(tmp_path / "kr.gpg"), str(sig), str(tmp_path / "Release")],
                              capture_output=True, timeout=120).returncode == 0

    assert gpgv_accepts(trusted) and not gpgv_accepts(intruder)
    assert subprocess.run(["sh", "-c", unless], timeout=120).returncode == 0  # the same file again: nothing to do


def test_a_key_whose_expiry_grafana_extended_is_fetched_again(states, tmp_path, home):
    """rev53d #5. Grafana extends its key's expiry under the same fingerprint (963FA27710458545 expired in 2025 and
    `apt update` said `EXPKEYSIG 963FA27710458545 Grafana Labs` until the key was fetched again). An `unless` that
    compared the fingerprint only kept the expired copy for good; the key is now fetched on every apply and the
    installed copy replaced when it differs."""
    require(shutil.which("gpg") is not None, "gpg is missing (Debian's gpg package)")
    _gpg(home, "--passphrase", "", "--quick-gen-key", "grafana stand-in <g@example.com>", "ed25519", "sign", "2d")
    (fpr,) = _fprs(home)
    served = tmp_path / "served.key"
    served.write_text(_gpg(home, "--armor", "--export", fpr))
    script, unless, keyring = _keyring_script(states, tmp_path, served, fpr)
    assert subprocess.run(["sh", "-c", script], timeout=120).returncode == 0 and keyring.exists()
    old = keyring.read_text()
    _gpg(home, "--passphrase", "", "--quick-set-expire", fpr, "2y")  # Grafana extends the expiry
    served.write_text(_gpg(home, "--armor", "--export", fpr))
    assert subprocess.run(["sh", "-c", unless], timeout=120).returncode != 0  # the installed copy is not current
    assert subprocess.run(["sh", "-c", script], timeout=120).returncode == 0 and keyring.read_text() != old
    assert subprocess.run(["sh", "-c", unless], timeout=120).returncode == 0

def test_grafana_listens_on_loopback_with_anonymous_access_off_and_secrets_from_files(states):
    ini_state = states["monitoring-grafana-ini-file-managed"]
    assert (_arg(ini_state, "name"), _arg(ini_state, "mode"), _arg(ini_state, "group")) == (
        "/etc/grafana/grafana.ini", "0640", "grafana")
    ini = configparser.ConfigParser(interpolation=None)
    ini.read_string(_arg(ini_state, "contents"))
    written = {s: set(ini[s]) for s in ini.sections()}
    assert all(written[s] <= INI_KEYS.get(s, set()) for s in written), written
    assert (ini["server"]["http_addr"], ini["server"]["http_port"]) == ("127.0.0.1", str(scrape.ports()["grafana"]))
    assert ini["paths"]["provisioning"] == provisioning.PROVISIONING  # where the formula writes the files
    assert ini["auth.anonymous"]["enabled"] == "false" and ini["users"]["allow_sign_up"] == "false"
    # Grafana's default secret_key is a constant every install shares (conf/defaults.ini): each monitor makes its own
    # outside /etc/grafana, whose files the package's postinst makes 0640 and folders 0755 at each upgrade
    assert ini["security"]["admin_password"] == "$__file{/etc/gpufleet/grafana/admin-password}"
    assert ini["security"]["secret_key"] == "$__file{/etc/gpufleet/grafana/secret-key}"
    folder = states["monitoring-grafana-secrets-dir-file-directory"]
    assert (_arg(folder, "name"), _arg(folder, "user"), _arg(folder, "mode")) == ("/etc/gpufleet/grafana", "grafana",
                                                                                 "0700")
    made = _arg(states["monitoring-grafana-secrets-cmd-run"], "name")
    assert "umask 077" in made and "secrets.token_urlsafe" in made
    held = states["monitoring-grafana-secrets-file-managed"]
    assert (_arg(held, "user"), _arg(held, "mode"), _arg(held, "replace")) == ("grafana", "0600", False)
    assert [list(n)[0] if isinstance(n, dict) else n for n in _arg(held, "names")] == [
        "/etc/gpufleet/grafana/admin-password", "/etc/gpufleet/grafana/secret-key"]
    watched = {next(iter(w.values())) for w in _arg(states["monitoring-grafana-service-running"], "watch")}
    assert {"monitoring-grafana-ini-file-managed", "monitoring-grafana-package-pkg-installed"} <= watched


def test_the_provisioned_files_hold_grafanas_documented_keys_and_the_monitors_prometheus(states):
    """The data source names the monitor's Prometheus where it listens (the rack host's address, written by the
    formula in place of the pillar's placeholder), and is the default: it is this Grafana's only one."""
    files = _files(states)
    sc = provisioning.scope("lab")
    assert set(files) == set(provisioning.monitor_files("lab"))
    (ds,) = yaml.safe_load(files[sc.datasources])["datasources"]
    assert set(ds) <= DATASOURCE_KEYS and ds["url"] == f"http://10.0.9.1:{scrape.ports()['prometheus']}", ds
    assert ds["isDefault"] is True and ds["type"] == "prometheus"
    (prov,) = yaml.safe_load(files[sc.providers])["providers"]
    assert set(prov) <= PROVIDER_KEYS and prov["options"]["path"] == sc.dashboards_dir, prov
    boards = {p: json.loads(t) for p, t in files.items() if p.endswith(".json")}
    assert boards and all(p.startswith(sc.dashboards_dir + "/") and p.endswith(f"/{d['uid']}.json")
                          for p, d in boards.items())
    assert not any("invalid" in t for t in files.values())  # no placeholder left


def test_clean_removes_grafana_where_it_ran(states):
    purged = states["monitoring-server_clean-grafana-pkg-purged"]
    assert _arg(purged, "onlyif") == "test -f /etc/gpufleet/monitoring-grafana" and _arg(purged, "pkgs") == ["grafana"]
    gone = _arg(states["monitoring-server_clean-grafana-files-file-absent"], "names")
    assert {"/etc/apt/sources.list.d/gpufleet-grafana.list", "/etc/apt/keyrings/grafana.asc", "/etc/grafana",
            "/var/lib/grafana", "/etc/gpufleet/grafana", "/etc/gpufleet/monitoring-grafana"} <= set(gone)


def test_no_grafana_is_rendered_where_the_stack_asks_for_none(tmp_path):
    path = tmp_path / "lab.yaml"
    path.write_text(STACK.replace(", grafana: true", ""))
    st = stacks.load(path)
    s = render(salt_call(), tmp_path / "salt", OSES["Debian-12"], pillar.build(st, st.pools[0], cluster="lab", index=0),
               ["monitoring.server"])
    assert not [k for k in s if k.startswith("monitoring-grafana-")]

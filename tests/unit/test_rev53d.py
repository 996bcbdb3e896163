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


# --- 1. SECURITY: the fingerprint check reads the first key only; apt trusts every key of a Signed-By file -------

def test_the_keyring_step_refuses_a_served_file_holding_a_second_key(states, tmp_path):
    """sources.list(5) (apt 2.6, Debian 12): Signed-By names a keyring; apt runs gpgv with that file (dearmored when
    .asc), and gpgv accepts a signature by ANY key in it. grafana.sls takes `awk ... print $10; exit` (the first
    `fpr` line of `gpg --show-keys`) as "the key". A gpg.key that holds Grafana's key first and another key after it
    (one armored block: `gpg --export --armor A B`) passes the check and lands in /etc/apt/keyrings/grafana.asc; a
    repository signed by the second key is then trusted for `grafana` and for any package name it ships. The same
    reading in `unless` keeps such a keyring on every later apply."""
    require(shutil.which("gpg") is not None and shutil.which("gpgv") is not None, "gpg/gpgv missing (Debian's gpg)")
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    _gpg(home, "--passphrase", "", "--quick-gen-key", "trusted <t@example.com>", "ed25519", "sign", "never")
    _gpg(home, "--passphrase", "", "--quick-gen-key", "intruder <i@example.com>", "ed25519", "sign", "never")
    trusted, intruder = _fprs(home)
    served = _gpg(home, "--armor", "--export", trusted, intruder)
    (tmp_path / "served.key").write_bytes(served)
    shown = subprocess.run(["gpg", "--homedir", str(home), "--show-keys", "--with-colons", str(tmp_path / "served.key")],
                           capture_output=True, text=True, check=True).stdout
    assert [ln.split(":")[9] for ln in shown.splitlines() if ln.startswith("fpr:")][0] == trusted  # the setup holds
    keyring = tmp_path / "keyrings" / "grafana.asc"
    script = (_arg(states["monitoring-grafana-keyring-cmd-run"], "name")
              .replace("https://apt.grafana.com/gpg.key", f"file://{tmp_path}/served.key")
              .replace("/etc/apt/keyrings/grafana.asc", str(keyring)).replace("/etc/apt/keyrings", str(keyring.parent))
              .replace(GRAFANA_KEY, trusted))
    ran = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=120)
    if ran.returncode == 0:
        # what apt would then accept: a Release file signed by the intruder's key, verified with the keyring landed
        (tmp_path / "Release").write_text("Origin: not grafana\n")
        _gpg(home, "--local-user", intruder, "--detach-sign", "--output", str(tmp_path / "Release.gpg"),
             str(tmp_path / "Release"))
        (tmp_path / "kr.gpg").write_bytes(_gpg(home, "--dearmor", data=keyring.read_bytes()))
        gpgv = subprocess.run(["gpgv", "--keyring", str(tmp_path / "kr.gpg"), str(tmp_path / "Release.gpg"),
                               str(tmp_path / "Release")], capture_output=True, text=True)
        pytest.fail(f"a gpg.key holding a second key was installed as Grafana's (exit 0); gpgv with it accepts the "
                    f"intruder's signature: exit {gpgv.returncode} {gpgv.stderr.strip()[-160:]!r}")
    assert not keyring.exists()

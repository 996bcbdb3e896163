"""Hostile review rev53b of issue 53's monitor host (monitoring.server, its collector and clean, and the files
gpufleet renders for it), checked against Debian 12's own packages (prometheus 2.42.0+ds-5+deb12u1,
prometheus-alertmanager 0.25.0-1+b4, prometheus-node-exporter 1.5.0-1+b6: their units, /etc/default files and
maintainer scripts), Alertmanager's source (prometheus/alertmanager tags v0.23.0 and v0.25.0), Salt 3008's state
modules and Debian's promtool 2.42. Each test fails on the code it was written against; the review report says what
was run to see each defect. Read 2026-11-27."""

import re

import pytest

from gpufleet import stacks
from gpufleet.configure import pillar
from tests.conftest import salt_call
from tests.saltrender import OSES, render

COLLECTOR = {"interval": 60, "settings": {"cluster": "lab", "usd_per_hour": 12.5, "since": "2026-11-27T08:00:00Z",
                                          "slurm": True, "budgets": [{"name": "lab", "usd_per_month": 5000.0}]}}
SERVER = ["monitoring.server"]

# Slurm's controller is the default monitor host (spec.Monitoring.host = "controller"); a webhook that carries a token
RACK = """name: lab
owner: ops
monitoring: {prometheus: true, alert_webhook: "https://hooks.example.com/services/T000/B000/SECRETTOKEN"}
slurm: {health_check_interval: 120}
pools:
  - {name: ctl, provider: baremetal, site: lab, role: controller, hosts: [{address: 10.0.9.1}]}
  - {name: rack, provider: baremetal, site: lab, gpu: L4, gpus_per_node: 1, hosts: [{address: 10.0.9.2}, {address: 10.0.9.3}]}
"""

# a cloud monitor: its listen address is found on the host (pillar listen_address ""); the cluster's network is
# the stack's network.cidr (spec.Network, default 10.64.0.0/16)
CLOUD = """name: trainers
owner: ops
monitoring: {prometheus: true, host: gpu}
pools:
  - {name: gpu, provider: aws, region: us-east-1, instance_type: p4d.24xlarge}
"""


def _arg(state: dict, key: str):
    mod = next(k for k in state if not k.startswith("__"))
    return next((x[key] for x in state[mod] if isinstance(x, dict) and key in x), None)


def _args(states: dict, sid: str) -> str:
    """The ARGS="..." of a daemon's /etc/default file as monitoring.server writes it."""
    text = _arg(states[sid], "contents")
    return re.search(r'ARGS="([^"]*)"', text).group(1)


@pytest.fixture(scope="module")
def rack(tmp_path_factory):
    path = tmp_path_factory.mktemp("stack") / "lab.yaml"
    path.write_text(RACK)
    st = stacks.load(path)
    return st, pillar.build(st, st.monitor_pool(), cluster="lab", index=0, collector=COLLECTOR)


@pytest.fixture(scope="module")
def rendered(rack, tmp_path_factory):
    base, exe = tmp_path_factory.mktemp("salt"), salt_call()
    return {os_: render(exe, base / os_, OSES[os_], rack[1], SERVER) for os_ in ("Ubuntu-22.04", "Debian-12")}


# --- 13. `dashboard export STACK` names the folder after the stack ("gpufleet <stack>"), as if several clusters could
# sit in one team Grafana; but every export writes the same paths, the same provider name, the same data source name
# and uid ("Prometheus (gpufleet)", gpufleet-prometheus) and the same dashboard uids. Grafana's provisioning matches
# a data source by name (grafana.com/docs/grafana/latest/administration/provisioning/#data-sources): the second
# cluster's export repoints the first's dashboards at the second's Prometheus, and duplicate dashboard uids across
# providers are refused.
def test_two_clusters_exports_can_share_one_grafana():
    pytest.importorskip("grafana_foundation_sdk")
    from gpufleet.monitoring import provisioning

    a = provisioning.grafana_files("http://10.0.0.5:9090", "gpufleet lab")
    b = provisioning.grafana_files("http://10.1.0.5:9090", "gpufleet prod")
    assert not set(a) & set(b), sorted(set(a) & set(b))

"""What the monitor host's Grafana is given (monitoring.grafana: true) and `gpufleet dashboard export` writes:
the Prometheus data source, the dashboards provider and the dashboards, at the paths Grafana's Debian and RPM
packages read (grafana.com/docs/grafana/latest/administration/provisioning, read 2026-11-27)."""

from __future__ import annotations

import json

import pytest
import yaml

from gpufleet.errors import InputError
from gpufleet.monitoring import dashboards, provisioning

pytest.importorskip("grafana_foundation_sdk")


def test_the_files_grafana_reads_and_where():
    files = provisioning.grafana_files("http://10.0.0.5:9090")
    assert set(files) == {"/etc/grafana/provisioning/datasources/gpufleet.yaml",
                          "/etc/grafana/provisioning/dashboards/gpufleet.yaml",
                          "/var/lib/grafana/dashboards/gpufleet/gpufleet-fleet.json",
                          "/var/lib/grafana/dashboards/gpufleet/gpufleet-node.json",
                          "/var/lib/grafana/dashboards/gpufleet/gpufleet-slurm.json"}
    (ds,) = yaml.safe_load(files[provisioning.DATASOURCES])["datasources"]
    assert ds == {"name": "Prometheus (gpufleet)", "uid": "gpufleet-prometheus", "type": "prometheus",
                  "access": "proxy", "url": "http://10.0.0.5:9090", "isDefault": False, "editable": False}
    (prov,) = yaml.safe_load(files[provisioning.PROVIDERS])["providers"]
    assert prov["type"] == "file" and prov["options"]["path"] == provisioning.DASHBOARDS_DIR
    assert prov["folder"] == "gpufleet" and prov["allowUiUpdates"] is False
    built = dashboards.build()
    for uid, d in built.items():
        assert json.loads(files[f"{provisioning.DASHBOARDS_DIR}/{uid}.json"]) == d


@pytest.mark.parametrize("url", ["http://10.0.0.5:9090\n  basicAuth: true", "10.0.0.5:9090", "http://a b:9090",
                                 "http://${GF_SECRET}:9090", "ftp://10.0.0.5"])
def test_a_prometheus_url_that_is_not_one_is_refused(url):
    """The URL lands in YAML Grafana expands $VARS in (provisioning docs, "Use environment variables")."""
    with pytest.raises(InputError, match="Prometheus"):
        provisioning.grafana_files(url)


def test_the_data_source_is_the_default_only_when_asked():
    """The monitor host's own Grafana, whose only data source it is, may ask; an export never does."""
    ds = yaml.safe_load(provisioning.grafana_files("http://10.0.0.5:9090", default=True)[provisioning.DATASOURCES])
    assert ds["datasources"][0]["isDefault"] is True


def test_the_folder_name_is_the_stacks_when_given():
    files = provisioning.grafana_files("http://127.0.0.1:9090", folder="gpufleet lab")
    assert yaml.safe_load(files[provisioning.PROVIDERS])["providers"][0]["folder"] == "gpufleet lab"

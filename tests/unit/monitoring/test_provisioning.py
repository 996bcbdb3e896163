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
        written = json.loads(files[f"{provisioning.DASHBOARDS_DIR}/{uid}.json"])
        (var,) = [v for v in written["templating"]["list"] if v["name"] == "datasource"]
        assert var.pop("current") == {"text": "Prometheus (gpufleet)", "value": "gpufleet-prometheus"}
        assert written == d  # the dashboard as built, its data source variable starting on gpufleet's


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
    files = provisioning.grafana_files("http://127.0.0.1:9090", "lab")
    assert yaml.safe_load(files[provisioning.scope("lab").providers])["providers"][0]["folder"] == "gpufleet lab"


def test_two_clusters_exports_share_one_grafana():
    """Grafana's provisioning matches a data source by name and refuses one dashboard uid from two providers: two
    stacks' exports with the same paths, provider, data source name and uid and dashboard uids made the second
    repoint the first cluster's dashboards at its own Prometheus (rev53b #13). Each stack's are its own, every
    dashboard starts on its own stack's data source, and every uid fits Grafana's 40 characters."""
    a = provisioning.grafana_files("http://10.0.0.5:9090", "lab")
    b = provisioning.grafana_files("http://10.1.0.5:9090", "prod")
    assert not set(a) & set(b), sorted(set(a) & set(b))
    seen = {}
    for stack, files in (("lab", a), ("prod", b)):
        sc = provisioning.scope(stack)
        (ds,) = yaml.safe_load(files[sc.datasources])["datasources"]
        (prov,) = yaml.safe_load(files[sc.providers])["providers"]
        boards = [json.loads(t) for p, t in files.items() if p.endswith(".json")]
        seen[stack] = {ds["name"], ds["uid"], prov["name"], prov["options"]["path"]} | {d["uid"] for d in boards}
        for d in boards:
            (var,) = [v for v in d["templating"]["list"] if v["name"] == "datasource"]
            assert var["current"] == {"text": ds["name"], "value": ds["uid"]}, var
            assert len(d["uid"]) <= provisioning.UID_MAX and d["panels"], d["uid"]
        assert len(ds["uid"]) <= provisioning.UID_MAX
    assert not seen["lab"] & seen["prod"], seen["lab"] & seen["prod"]


def test_a_stack_name_grafana_would_not_take_is_refused():
    with pytest.raises(InputError, match="stack name"):
        provisioning.grafana_files("http://10.0.0.5:9090", "lab/../x")

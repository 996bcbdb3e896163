"""What Grafana is given to show gpufleet's dashboards: its Prometheus data source, a dashboards provider
and the dashboards' JSON, as files at the paths Grafana reads.

The monitor host's formula installs these where the stack asks for Grafana (``monitoring.grafana: true``:
its pillar calls :func:`grafana_files`), and `gpufleet dashboard export` writes the same tree under a
folder for a team's own Grafana. Paths and keys: Grafana's provisioning docs
(grafana.com/docs/grafana/latest/administration/provisioning, read 2026-11-27): the Debian and RPM packages
read ``/etc/grafana/provisioning/{datasources,dashboards}/*.yaml``; a ``file`` provider loads every JSON of
its ``options.path``.
"""

from __future__ import annotations

import re

import yaml

from gpufleet.errors import InputError
from gpufleet.monitoring import dashboards

PROVISIONING = "/etc/grafana/provisioning"
DATASOURCES = f"{PROVISIONING}/datasources/gpufleet.yaml"
PROVIDERS = f"{PROVISIONING}/dashboards/gpufleet.yaml"
DASHBOARDS_DIR = "/var/lib/grafana/dashboards/gpufleet"
DATASOURCE_UID = "gpufleet-prometheus"
FOLDER = "gpufleet"
# an http(s) URL of a host (name, IPv4 or [IPv6]) and port: it is written into YAML in which Grafana
# expands $VAR and ${VAR} from its environment (the docs' "Use environment variables"), so no $ and no space
PROMETHEUS_URL = re.compile(r"https?://(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?(?:/[A-Za-z0-9._~/-]*)?")
FOLDER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._-]{0,62}")


def grafana_files(prometheus_url: str, folder: str = FOLDER, *, default: bool = False) -> dict[str, str]:
    """{absolute path on the Grafana host: its text}: the data source reading ``prometheus_url``, the
    provider of the ``folder`` of dashboards, and each dashboard. The data source is Grafana's default only when
    asked (``default``: a Grafana whose only data source it is): Grafana refuses to start when two provisioned
    data sources of an organisation are default (pkg/services/provisioning/datasources/config_reader.go,
    validateDefaultUniqueness), and a team's own Grafana often provisions one; the dashboards read their
    ``${datasource}`` variable either way."""
    if not PROMETHEUS_URL.fullmatch(prometheus_url):
        raise InputError(f"{prometheus_url!r} is not a Prometheus URL gpufleet writes into Grafana's provisioning",
                         "http(s)://HOST:PORT, e.g. http://10.0.0.5:9090")
    if not FOLDER_NAME.fullmatch(folder):
        raise InputError(f"{folder!r} is not a Grafana folder name gpufleet writes", "letters, digits, space, . _ -")
    datasource = {"name": "Prometheus (gpufleet)", "uid": DATASOURCE_UID, "type": "prometheus", "access": "proxy",
                  "url": prometheus_url, "isDefault": default, "editable": False}
    provider = {"name": "gpufleet", "orgId": 1, "folder": folder, "type": "file", "disableDeletion": True,
                "allowUiUpdates": False, "updateIntervalSeconds": 60, "options": {"path": DASHBOARDS_DIR}}
    files = {DATASOURCES: _yaml({"apiVersion": 1, "datasources": [datasource]}),
             PROVIDERS: _yaml({"apiVersion": 1, "providers": [provider]})}
    for uid, d in dashboards.build().items():
        files[f"{DASHBOARDS_DIR}/{uid}.json"] = dashboards.encode(d)
    return files


def _yaml(doc: dict) -> str:
    return "# written by gpufleet (monitoring.provisioning)\n" + yaml.safe_dump(doc, sort_keys=False)

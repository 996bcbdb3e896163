"""What Grafana is given to show gpufleet's dashboards: its Prometheus data source, a dashboards provider
and the dashboards' JSON, as files at the paths Grafana reads.

`gpufleet dashboard export` writes them under a folder for a team's own Grafana; the monitor host's own Grafana
(``monitoring.grafana: true``) gets them from its formula (``monitor_files``). Paths and keys: Grafana's provisioning docs
(grafana.com/docs/grafana/latest/administration/provisioning, read 2026-11-27): the Debian and RPM packages
read ``/etc/grafana/provisioning/{datasources,dashboards}/*.yaml``; a ``file`` provider loads every JSON of
its ``options.path``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import yaml

from gpufleet.errors import InputError
from gpufleet.monitoring import dashboards, ports

PROVISIONING = "/etc/grafana/provisioning"
FOLDER = "gpufleet"
DATASOURCE_UID = "gpufleet-prometheus"
UID_MAX = 40  # Grafana's limit on a dashboard's and a data source's uid (its docs, "Dashboard JSON model": uid)
# an http(s) URL of a host (name, IPv4 or [IPv6]) and port: it is written into YAML in which Grafana
# expands $VAR and ${VAR} from its environment (the docs' "Use environment variables"), so no $ and no space
PROMETHEUS_URL = re.compile(r"https?://(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?(?:/[A-Za-z0-9._~/-]*)?")
STACK_NAME = re.compile(r"[a-z][a-z0-9-]{0,39}")  # a stack's name (spec._valid_name)


@dataclass(frozen=True)
class Scope:
    """The names one export takes in a Grafana: a stack's own, so that several clusters' exports sit side by side.
    Grafana's provisioning matches a data source by name and refuses a dashboard uid two providers give (its
    provisioning docs): with shared names the second export repointed the first cluster's dashboards."""

    name: str  # the provider's name and the files' stem: gpufleet, or gpufleet-<stack>
    folder: str  # the dashboards' folder in Grafana
    uid_suffix: str  # "", or "-" and 8 hex digits of the stack's name (a uid has at most UID_MAX characters)

    @property
    def datasources(self) -> str:
        return f"{PROVISIONING}/datasources/{self.name}.yaml"

    @property
    def providers(self) -> str:
        return f"{PROVISIONING}/dashboards/{self.name}.yaml"

    @property
    def dashboards_dir(self) -> str:
        return f"/var/lib/grafana/dashboards/{self.name}"

    @property
    def datasource_name(self) -> str:
        return f"Prometheus ({self.name})"

    @property
    def datasource_uid(self) -> str:
        return DATASOURCE_UID + self.uid_suffix


def scope(stack: str | None = None) -> Scope:
    """Every export's names without a stack; a stack's own with one."""
    if stack is None:
        return Scope(FOLDER, FOLDER, "")
    if not STACK_NAME.fullmatch(stack):
        raise InputError(f"{stack!r} is not a stack name gpufleet writes into Grafana's provisioning",
                         "lowercase letters, digits and '-', starting with a letter (max 40)")
    return Scope(f"{FOLDER}-{stack}", f"{FOLDER} {stack}", "-" + hashlib.sha256(stack.encode()).hexdigest()[:8])


UNSCOPED = scope()
DATASOURCES, PROVIDERS, DASHBOARDS_DIR = UNSCOPED.datasources, UNSCOPED.providers, UNSCOPED.dashboards_dir


def grafana_files(prometheus_url: str, stack: str | None = None, *, default: bool = False) -> dict[str, str]:
    """{absolute path on the Grafana host: its text}: the data source reading ``prometheus_url``, the
    provider of the folder of dashboards, and each dashboard, under the names of ``stack`` when given (``scope``);
    each dashboard's ``datasource`` variable starts on this data source. The data source is Grafana's default only when
    asked (``default``: a Grafana whose only data source it is): Grafana refuses to start when two provisioned
    data sources of an organisation are default (pkg/services/provisioning/datasources/config_reader.go,
    validateDefaultUniqueness), and a team's own Grafana often provisions one; the dashboards read their
    ``${datasource}`` variable either way."""
    if not PROMETHEUS_URL.fullmatch(prometheus_url):
        raise InputError(f"{prometheus_url!r} is not a Prometheus URL gpufleet writes into Grafana's provisioning",
                         "http(s)://HOST:PORT, e.g. http://10.0.0.5:9090")
    sc = scope(stack)
    datasource = {"name": sc.datasource_name, "uid": sc.datasource_uid, "type": "prometheus", "access": "proxy",
                  "url": prometheus_url, "isDefault": default, "editable": False}
    provider = {"name": sc.name, "orgId": 1, "folder": sc.folder, "type": "file", "disableDeletion": True,
                "allowUiUpdates": False, "updateIntervalSeconds": 60, "options": {"path": sc.dashboards_dir}}
    files = {sc.datasources: _yaml({"apiVersion": 1, "datasources": [datasource]}),
             sc.providers: _yaml({"apiVersion": 1, "providers": [provider]})}
    for built in dashboards.build().values():
        d = _scoped(built, sc)
        files[f"{sc.dashboards_dir}/{d['uid']}.json"] = dashboards.encode(d)
    return files


def monitor_files(stack: str) -> dict[str, str]:
    """The files of the monitor host's own Grafana, whose only data source is the monitor's Prometheus (so the
    default): that Prometheus listens on the host's cluster address, which a cloud node learns only when it applies,
    so the data source names the formula's placeholder (salt/monitoring/parameters/defaults.yaml,
    grafana.prometheus_placeholder) and monitoring.grafana writes the address in."""
    return grafana_files(ports.parameters()["grafana"]["prometheus_placeholder"], stack, default=True)


def _scoped(dashboard: dict, sc: Scope) -> dict:
    """The dashboard under ``sc``'s uid, its ``datasource`` variable starting on ``sc``'s data source (a variable's
    ``current``: its text and value, the data source's uid; still any Prometheus the user picks)."""
    uid = dashboard["uid"] + sc.uid_suffix
    variables = [dict(v, current={"text": sc.datasource_name, "value": sc.datasource_uid})
                 if v.get("type") == "datasource" and v.get("name") == "datasource" else v
                 for v in dashboard.get("templating", {}).get("list", [])]
    return dict(dashboard, uid=uid, templating=dict(dashboard.get("templating", {}), list=variables))


def _yaml(doc: dict) -> str:
    return "# written by gpufleet (monitoring.provisioning)\n" + yaml.safe_dump(doc, sort_keys=False)

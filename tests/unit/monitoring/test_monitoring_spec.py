"""The stack's ``monitoring:`` block: where Prometheus runs and for how long it keeps series, refused with
its file, line and key when it names what the stack lacks; and the metric catalogue the rules and
dashboards are checked against, read from the counters file the nodes' DCGM exporter is given."""

import pytest

from gpufleet import stacks
from gpufleet.monitoring import names
from tests.unit.test_bad_input import problems

POOLS = ("pools:\n"
         "  - {name: gpu, provider: aws, region: us-east-1, instance_type: p4d.24xlarge}\n")


@pytest.mark.parametrize("block,needle,hint", [
    ("{prometheus: true}", "host controller is Slurm's controller", "host: gpu"),
    ("{prometheus: true, host: gpus}", "'gpus' is not one of the stack's pools", "controller, gpu"),
    ("{prometheus: true, host: gpu, retention: 15 days}", "is not a duration Prometheus takes", "15d"),
    ("{prometheus: true, host: gpu, alert_webhook: 'hooks.example.com'}", "is not an http(s) URL", "https://"),
    ("{prometheus: true, host: gpu, scrape_interval: 1}", "scrape_interval", None),
    # chat services' webhooks reject Alertmanager's webhook JSON (rev53b #14): Teams takes a card, Discord a content
    ("{prometheus: true, host: gpu, alert_webhook: 'https://contoso.webhook.office.com/webhookb2/a@b/IncomingWebhook/c/d'}",
     "Microsoft Teams", "prometheus-msteams"),
    ("{prometheus: true, host: gpu, alert_webhook: "
     "'https://default0a1b.c2.environment.api.powerplatform.com:443/powerautomate/automations/direct/workflows/abc/"
     "triggers/manual/paths/invoke?api-version=1'}",
     "Microsoft Teams", "prometheus-msteams"),
    ("{prometheus: true, host: gpu, alert_webhook: 'https://discord.com/api/webhooks/123/abc'}", "Discord",
     "relay"),
    ("{prometheus: true, host: gpu, alert_webhook: 'https://hooks.slack.com/triggers/T1/2/abc'}",
     "not a Slack incoming webhook", "https://hooks.slack.com/services/"),
    # Prometheus would fill the 200 GB root disk before deleting by size, and the OS with it (rev53b #9)
    ("{prometheus: true, host: gpu, disk_gb: 5000}", "does not fit the monitor's root disk", "disk_gb: 100 or less"),
    ("{prometheus: true, host: gpu, disk_gb: 101}", "pool gpu boots 200 GB", "root_disk_gb on pool gpu (at least 202)"),
])
def test_a_monitor_the_stack_cannot_have_is_refused_with_its_line(write, block, needle, hint):
    (e,) = problems(write, f"name: s\nowner: o\nmonitoring: {block}\n{POOLS}")
    assert needle in e.problem + " " + str(e.key) and e.line == 3
    assert hint is None or hint in (e.hint or "")


@pytest.mark.parametrize("nodes", ["2", "{min: 1, max: 3}"])
def test_a_cloud_monitor_pool_that_may_have_several_nodes_is_refused(write, nodes):
    """Every node of a cloud pool applies its pool's formulas (one document for the pool): a monitor pool of several
    nodes would run a Prometheus on each, each scraping and alerting alone."""
    pools = POOLS.replace("p4d.24xlarge}", f"p4d.24xlarge, nodes: {nodes}}}")
    (e,) = problems(write, f"name: s\nowner: o\nmonitoring: {{prometheus: true, host: gpu}}\n{pools}")
    assert (e.line, str(e.key)) == (3, "monitoring.host") and "more than one node" in e.problem
    assert "nodes: 1" in e.hint


def test_a_monitor_may_keep_half_its_root_disk_of_series(write):
    s = stacks.load(write("stack.yaml", f"name: s\nowner: o\nmonitoring: {{prometheus: true, host: gpu, disk_gb: 100}}"
                                        f"\n{POOLS}"))
    assert s.monitoring.disk_gb == 100


def test_grafana_is_accepted_now_that_a_state_applies_it(write):
    """Refused while no state installed Grafana (rev53b #5); monitoring.grafana applies it now
    (test_grafana_formula)."""
    s = stacks.load(write("stack.yaml", f"name: s\nowner: o\nmonitoring: {{prometheus: true, host: gpu, grafana: true}}"
                                        f"\n{POOLS}"))
    assert s.monitoring.grafana is True


def test_a_pool_may_host_the_monitor_and_the_defaults_hold(write):
    s = stacks.load(write("stack.yaml", f"name: s\nowner: o\nmonitoring: {{prometheus: true, host: gpu}}\n{POOLS}"))
    assert (s.monitoring.host, s.monitoring.retention, s.monitoring.grafana) == ("gpu", "15d", False)


def test_the_catalogue_has_the_fields_the_alerts_need_and_dcgms_own_defaults():
    got = {m.name: m for m in names.dcgm()}
    # the error counters dcgm-exporter's defaults leave out (its etc/default-counters.csv comments them)
    for field in ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
                  "DCGM_FI_DEV_THERMAL_VIOLATION", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_GPU_UTIL"):
        assert field in got
    assert got["DCGM_FI_DEV_XID_ERRORS"].type == "gauge"  # the last XID's value, not a count
    assert {m.type for m in names.catalogue().values()} <= {"gauge", "counter", "info"}
    # DCGM's fields, and the exporter's own per-XID count (DCGM_EXP_, dcgm-exporter internal/pkg/counters/const.go)
    assert all(n.startswith(("DCGM_FI_", "gpufleet_", "node_", "up", "ALERTS")) or n == "DCGM_EXP_XID_ERRORS_COUNT"
               for n in names.catalogue())
    assert got["DCGM_EXP_XID_ERRORS_COUNT"].labels[-2:] == ("xid", "window_size_in_ms")


KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFjtZCMk8DLg9Gw3q44fZDXDQHKWHrf7Wb55hmdcfA0A x"
RACK_MON = "{name: mon, provider: baremetal, site: lab, gpu: L4, gpus_per_node: 1, hosts: [{address: 10.0.9.1}]}"
AWS_MON = "{name: mon, provider: aws, region: us-east-1, instance_type: g5.xlarge, nodes: 1}"
AZ_MON = "{name: mon, provider: azure, region: eastus, instance_type: Standard_NC4as_T4_v3, nodes: 1}"
GCP_MON = "{name: mon, provider: gcp, region: us-central1, instance_type: g2-standard-4, nodes: 1}"


@pytest.mark.parametrize("mon,gpu,why", [
    (AWS_MON, "{name: gpu, provider: gcp, region: us-central1, instance_type: g2-standard-4, nodes: 2}",
     "may run on gcp, and the monitor (mon, on aws) lists only its own cloud's nodes"),
    (RACK_MON, "{name: gpu, provider: aws, region: us-east-1, instance_type: p4d.24xlarge, nodes: 2}",
     "is on a rack, which lists no cloud's nodes"),
    (AWS_MON, "{name: gpu, provider: aws, region: us-west-2, instance_type: p4d.24xlarge, nodes: 2}",
     "may run in aws us-west-2, whose network the monitor (mon, in us-east-1) does not reach"),
    (AZ_MON, "{name: gpu, provider: azure, region: westus2, instance_type: Standard_NC4as_T4_v3, nodes: 2}",
     "may run in azure westus2, whose network the monitor (mon, in eastus) does not reach"),
    (AWS_MON, "{name: gpu, provider: aws, region: us-east-1, instance_type: p4d.24xlarge, nodes: 2, "
              "failover: {regions: [us-west-2]}}", "may run in aws us-west-2"),
], ids=["aws-monitor-gcp-pool", "rack-monitor-aws-pool", "aws-other-region", "azure-other-region",
        "aws-failover-region"])
def test_a_scraped_pool_the_monitor_cannot_list_and_reach_is_refused_at_monitoring_host(write, mon, gpu, why):
    """rev53c findings 1 and 2: prometheus.yml would wait on file_sd files nobody fills with the pool (Prometheus 2.42
    file_sd: a target in no file does not exist, so no series, no ``up == 0``, no "node down"), or scrape another
    region's private addresses (a VPC/VNet is regional; gpufleet joins none), every node "down"."""
    (e,) = problems(write, f"name: s\nowner: o\naccess: {{public_key: \"{KEY}\"}}\nmonitoring: {{prometheus: true, "
                           f"host: mon}}\npools:\n  - {mon}\n  - {gpu}\n")
    assert (e.line, str(e.key)) == (4, "monitoring.host") and "pool gpu is scraped" in e.problem, e
    assert why in e.problem and "put the monitor on the pools' cloud and region" in e.hint


def test_a_gcp_monitor_reaches_another_regions_pool_of_its_global_network(write):
    """A GCP VPC network is global (its regions' subnets route to each other): no refusal there; a rack pool's hosts
    are written out, whatever the monitor's cloud."""
    st = stacks.load(write("s.yaml", "name: s\nowner: o\nmonitoring: {prometheus: true, host: mon}\npools:\n"
                                     f"  - {GCP_MON}\n  - {{name: gpu, provider: gcp, region: europe-west4, "
                                     "instance_type: g2-standard-4, nodes: 2}\n"
                                     f"  - {RACK_MON.replace('mon', 'rack')}\n"))
    assert st.monitor_pool().name == "mon"


def test_the_refusal_of_a_teams_webhook_does_not_print_its_token(write):
    """rev53d #4. A Teams incoming webhook's URL is its only credential (…/IncomingWebhook/<secret>/<guid>: anyone
    holding it posts to the channel; learn.microsoft.com/microsoftteams/platform/webhooks-and-connectors/how-to/
    add-incoming-webhook, read 2026-11-28); the refusal put the whole URL into the message the CLI prints and a CI log
    keeps. It names the scheme and host only."""
    token = "0123456789abcdef0123456789abcdefSECRET"
    url = (f"https://contoso.webhook.office.com/webhookb2/11111111-2222-3333-4444-555555555555@66666666-7777-8888-"
           f"9999-000000000000/IncomingWebhook/{token}/aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee")
    (e,) = problems(write, f"name: s\nowner: o\nmonitoring: {{prometheus: true, host: gpu, alert_webhook: '{url}'}}\n"
                           f"{POOLS}")
    said = f"{e.problem} {e.hint}"
    assert "Microsoft Teams" in said and "https://contoso.webhook.office.com/..." in said and token not in said, said


def test_a_webhook_that_is_no_url_is_refused_without_echoing_it(write):
    """rev53d #4: the older "not an http(s) URL" refusal echoed the value, a Slack URL without its scheme included."""
    (e,) = problems(write, "name: s\nowner: o\nmonitoring: {prometheus: true, host: gpu, alert_webhook: "
                           f"'hooks.slack.com/services/T0/B0/SECRETTOKEN'}}\n{POOLS}")
    assert "is not an http(s) URL" in e.problem and "SECRETTOKEN" not in f"{e.problem} {e.hint}", e


# rev53d #3: URLs that take Alertmanager's webhook JSON (or Slack's message) and were refused
WEBHOOKS_THAT_WORK = {
    # an Azure Logic App's "When a HTTP request is received" trigger (learn.microsoft.com/azure/connectors/
    # connectors-native-reqres, read 2026-11-28) takes any JSON body: the usual relay from Alertmanager to Teams or
    # ServiceNow on Azure, what the refusal's own hint asks for; every *.logic.azure.com host was refused as Teams
    "logic-app": "https://prod-27.westeurope.logic.azure.com:443/workflows/0a1b2c3d/triggers/manual/paths/invoke"
                 "?api-version=2016-10-01&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig=AbCdEf123",
    # not Discord's: the suffix "discord.com" had no leading dot, so host.endswith() matched mydiscord.com too
    "lookalike": "https://alerts.mydiscord.com/hooks/gpu",
}


@pytest.mark.parametrize("url", list(WEBHOOKS_THAT_WORK.values()), ids=list(WEBHOOKS_THAT_WORK))
def test_a_webhook_that_takes_alertmanagers_json_is_accepted(write, url):
    st = stacks.load(write("stack.yaml", f"name: s\nowner: o\nmonitoring: {{prometheus: true, host: gpu, "
                                         f"alert_webhook: '{url}'}}\n{POOLS}"))
    assert st.monitoring.alert_webhook == url and not st.monitoring.alert_to_slack


def test_discords_slack_compatible_webhook_gets_the_slack_receiver(write):
    """Discord's "Execute Slack-Compatible Webhook" (discord.com/developers/docs/resources/webhook, POST
    /webhooks/{id}/{token}/slack, read 2026-11-28) takes what Alertmanager's slack_configs posts; every discord.com
    URL was refused as taking "content or embeds" only (its other URLs still are: the table above)."""
    from gpufleet.monitoring import scrape
    url = "https://discord.com/api/webhooks/1234567890/AbCdEfToken/slack"
    st = stacks.load(write("stack.yaml", f"name: s\nowner: o\nmonitoring: {{prometheus: true, host: gpu, "
                                         f"alert_webhook: '{url}'}}\n{POOLS}"))
    assert st.monitoring.alert_to_slack and "slack_configs" in scrape.render_alertmanager(st)

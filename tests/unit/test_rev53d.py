"""rev53d: hostile review of merge 97b076d (wt/fix53d): monitoring.grafana, the Slack receiver and its refusals,
reload/--web.external-url. Each test fails on 97b076d; product code untouched (report: the review rev53d.md)."""

import pytest

from gpufleet import stacks
from gpufleet.errors import GpufleetError

SLACK_STACK = """name: lab
owner: o
monitoring: {prometheus: true, host: r, alert_webhook: "https://hooks.slack.com/services/T000/B000/XXXXSECRET"}
pools:
  - {name: r, provider: baremetal, site: lab, gpu: L4, gpus_per_node: 1, hosts: [{address: 10.0.9.1}]}
"""


# --- 3. BREAKS valid configurations: webhook URLs that take Alertmanager's JSON (or Slack's message) are refused ------

WEBHOOKS_THAT_WORK = {
    # an Azure Logic App's "When a HTTP request is received" trigger (learn.microsoft.com/azure/connectors/
    # connectors-native-reqres, read 2026-11-28) takes any JSON body: the usual relay from Alertmanager to Teams/
    # ServiceNow on Azure, i.e. what the refusal's own hint tells the user to put there. spec.CHAT_WEBHOOKS refuses
    # every *.logic.azure.com host as "Microsoft Teams (a Workflows webhook)".
    "logic-app": "https://prod-27.westeurope.logic.azure.com:443/workflows/0a1b2c3d/triggers/manual/paths/invoke"
                 "?api-version=2016-10-01&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig=AbCdEf123",
    # a host that is not Discord's at all: CHAT_WEBHOOKS' "discord.com" has no leading dot, so
    # host.endswith("discord.com") also matches mydiscord.com, notdiscord.com ...
    "lookalike": "https://alerts.mydiscord.com/hooks/gpu",
}


@pytest.mark.parametrize("url", list(WEBHOOKS_THAT_WORK.values()), ids=list(WEBHOOKS_THAT_WORK))
def test_a_webhook_that_takes_alertmanagers_json_is_accepted(tmp_path, url):
    path = tmp_path / "lab.yaml"
    path.write_text(SLACK_STACK.replace("https://hooks.slack.com/services/T000/B000/XXXXSECRET", url))
    try:
        st = stacks.load(path)
    except GpufleetError as e:
        pytest.fail(f"refused: {e}")
    assert st.monitoring.alert_webhook == url


def test_discords_slack_compatible_webhook_gets_the_slack_receiver(tmp_path):
    """Discord's "Execute Slack-Compatible Webhook" (discord.com/developers/docs/resources/webhook, POST
    /webhooks/{id}/{token}/slack, read 2026-11-28) takes exactly what Alertmanager's slack_configs posts; the spec
    refuses every discord.com URL as taking "content or embeds" only."""
    from gpufleet.monitoring import scrape
    url = "https://discord.com/api/webhooks/1234567890/AbCdEfToken/slack"
    path = tmp_path / "lab.yaml"
    path.write_text(SLACK_STACK.replace("https://hooks.slack.com/services/T000/B000/XXXXSECRET", url))
    try:
        st = stacks.load(path)
    except GpufleetError as e:
        pytest.fail(f"refused: {e}")
    assert "slack_configs" in scrape.render_alertmanager(st)

"""One report shape for every kind of node (``nodes.outcome.NodeOutcome``): a rack host's and a cloud
node's outcomes go into one list and one table, each row with the cells its kind's own table had, and
`--json` keeps each kind's own document."""

import dataclasses
from pathlib import Path

from gpufleet.cli import output
from gpufleet.cli.tables import render_node_outcomes
from gpufleet.clouds.baremetal.facts import Facts
from gpufleet.clouds.baremetal.hosts import HostReport, HostTarget
from gpufleet.configure.saltrun import StateRun
from gpufleet.fleet.up import UpOutcome
from gpufleet.nodes import cloud, racks
from gpufleet.nodes.cloud.channel import NodeReport, NodeTarget
from gpufleet.nodes.outcome import NodeOutcome


def _host(idx, state="configured", **kw) -> HostReport:
    return HostReport(HostTarget("rack", idx, f"192.0.2.{21 + idx}", 22, "gpuadmin", None, "lab", Path("known_hosts")),
                      state, **kw)


def _outcomes() -> list[NodeOutcome]:
    facts = Facts(os_id="ubuntu", os_version="22.04", os_name="Ubuntu 22.04.4 LTS", gpus=[{"name": "A100"}] * 4)
    hosts = [_host(0, facts=facts, runs=[StateRun("rack-0", False, 148, ["nvidia_driver"] * 12)]),
             _host(1, "skipped", facts=facts, runs=[StateRun("rack-1", True, 90, [])]),
             _host(2, "failed", facts=facts, error="1 state failed", hint="fix the failed states (or the host)",
                   runs=[StateRun("rack-2", False, 10, [], failed=[{"id": "nvidia_driver", "comment": "no DKMS"}])])]
    nodes = [NodeReport(NodeTarget("gpu", 0, "i-0abc", "10.0.0.5"), "configured", 37, rehearsed=["a", "b"],
                        seconds=412.0, facts={"os": "Ubuntu 22.04.4 LTS (jammy)", "gpu_count": 1}),
             NodeReport(NodeTarget("gpu", 1, "i-0def", None), "timeout", error="no status after 1800s",
                        hint="see the node's serial console")]
    return [racks.outcome(h) for h in hosts] + [cloud.outcome(n) for n in nodes], hosts + nodes


def test_both_kinds_render_in_one_table_with_their_own_cells(monkeypatch, capsys):
    drawn = []
    monkeypatch.setattr(output, "table", lambda title, columns, rows, **kw: drawn.append((title, columns, rows)))
    outcomes, _ = _outcomes()
    render_node_outcomes(outcomes, "Configuration")
    # the cells render_hosts and render_cloud_nodes gave these reports before they were one renderer
    assert drawn == [("Configuration", ["host", "address", "state", "system", "salt", "notes"], [
        ["rack-0", "192.0.2.21:22", "configured", "Ubuntu 22.04, 4 GPU", "12 changed of 148", ""],
        ["rack-1", "192.0.2.22:22", "skipped", "Ubuntu 22.04, 4 GPU", "90 rehearsed", ""],
        ["rack-2", "192.0.2.23:22", "failed", "Ubuntu 22.04, 4 GPU", "0 changed of 10", "1 state failed"],
        ["gpu-0", "10.0.0.5", "configured", "Ubuntu 22.04.4 LTS, 1 GPU", "37 changed, 2 rehearsed", "412s"],
        ["gpu-1", "i-0def", "timeout", "-", "-", "no status after 1800s"]])]
    said = capsys.readouterr().err
    # a failed state is said under the table for either kind; where to look, for the cloud node only
    assert "rack-2 nvidia_driver: no DKMS" in said and "gpu-1 see the node's serial console" in said
    assert "fix the failed states" not in said


def test_json_keeps_each_kinds_own_document():
    outcomes, reports = _outcomes()
    assert [o.to_dict() for o in outcomes] == [r.to_dict() for r in reports]
    assert [o.kind for o in outcomes] == [racks.NAME] * 3 + [cloud.NAME] * 2


def test_up_hands_one_list_of_configured_nodes():
    fields = {f.name for f in dataclasses.fields(UpOutcome)}
    assert "configured" in fields and not fields & {"hosts", "nodes"}

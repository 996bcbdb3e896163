"""The operations loop over ``nodes.KINDS`` and never name a kind: a kind they have never heard of
(``third_kind``, one module) added to the list (one line, before the racks, whose bare-metal pools it
takes: a pool is of the first kind that owns it) takes a stack's pools through `plan`, `up`, `verify`,
`status` and `down`, and the racks, still in the list, are never asked anything."""

import json

import pytest

from gpufleet import nodes
from gpufleet.nodes import cloud, kind, racks

import third_kind
from conftest import ROOT, cli

STACK = str(ROOT / "stacks" / "examples" / "local-rack.yaml")


def test_a_kind_the_operations_never_heard_of_goes_through_plan_up_verify_status_and_down(monkeypatch):
    assert kind.conformance(third_kind) == []
    monkeypatch.setattr(nodes, "KINDS", (cloud, third_kind, racks))  # the one line
    for verb in set(kind.VERBS) - {"owns"}:  # the racks own these pools too, but not first: never asked
        monkeypatch.setattr(racks, verb, lambda *a, verb=verb, **k: pytest.fail(f"racks.{verb} was asked"))
    monkeypatch.setattr(third_kind, "CALLS", [])

    assert cli("plan", STACK).exit_code == 0
    up = cli("--json", "up", STACK, "--yes")
    assert up.exit_code == 0, up.output
    doc = json.loads(up.output)
    assert [h["state"] for h in doc["hosts"]] == ["configured"] * 4
    assert doc["cluster"]["created_by"] == {"baremetal": "sim@example.com"}
    checked = cli("--json", "verify", "local-rack", "--node", "rack-2")
    assert checked.exit_code == 0, checked.output
    status = cli("--json", "status", "local-rack")
    assert status.exit_code == 0, status.output
    (row,) = json.loads(status.output)["clusters"]
    assert (row["cluster"], row["state"], row["nodes_recorded"]) == ("local-rack", "up", 4)
    down = cli("down", "local-rack", "--yes")
    assert down.exit_code == 0, down.output
    gone = cli("--json", "status", "local-rack")
    assert gone.exit_code == 2 and json.loads(gone.output)["error"] == "NotFound"  # down took it out of the registry
    assert third_kind.CALLS == ["reach", "create", "configure", "verify quick", "verify quick",
                                "reach to destroy", "drain"]

"""`plan` of every example stack against the plan recorded before (tests/data/plans/<stack>.json).

The snapshots were first recorded with the code as it was before the per-cloud reorganisation,
which had to leave every plan as it was. A change that alters what `up` would create shows here
as a difference, resource by resource. When a change means to alter a plan (a fix in a
component), record the plans again and review the diff in the commit:
``GPUFLEET_RECORD_PLANS=1 pytest tests/unit/test_plan_snapshots.py``.
"""

import datetime as dt
import json
import os

import pytest

from gpufleet import stacks
from gpufleet.engine import plan as planner

from conftest import EXAMPLES, ROOT

SNAPSHOTS = ROOT / "tests" / "data" / "plans"
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)  # the expiry tags depend on it


def _plan(path, cat) -> dict:
    st = stacks.load(path, cat)
    doc = planner.plan(st, cat, cluster=planner.cluster_for(st, now=NOW), workers=1).to_dict()
    # the runtime registers resources in no fixed order
    doc["resources"] = sorted(doc["resources"], key=lambda r: (r["type"], r["name"]))
    return json.loads(json.dumps(doc, default=str))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_the_examples_plan_to_the_recorded_resources(path, cat):
    got = _plan(path, cat)
    snapshot = SNAPSHOTS / f"{path.stem}.json"
    if os.environ.get("GPUFLEET_RECORD_PLANS"):
        snapshot.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(snapshot.read_text())
    assert {k: v for k, v in got.items() if k != "resources"} == {k: v for k, v in want.items() if k != "resources"}
    by_name = {(r["type"], r["name"]): r for r in want["resources"]}
    assert [(r["type"], r["name"]) for r in got["resources"]] == list(by_name), "resources added or removed"
    for r in got["resources"]:
        assert r == by_name[(r["type"], r["name"])], f"{r['type']} {r['name']} changed"

"""Issue 36's speed targets, measured in one run:

1. `gpufleet cost` for 100 clusters over 30 days in under 5 s against recorded payloads: AWS Cost
   Explorer's answer in its documented shape (tests/data/billing/aws_get_cost_and_usage.page1.json's
   groups) for 100 clusters x 6 usage types x 30 days, 18,000 groups in pages of 1,000, played through
   botocore's Stubber (which checks each answer against the service model, as the real client's
   parser reads it), then held against the registry's predictions.
2. `plan` with every line of the bill no more than 20% slower than without: the 1,000-node stack of
   bench_plan.py planned in this process with the bill estimated, and with ``engine.spend.estimate``
   doing nothing (what `plan` did before), best of seven each, taking turns.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "bench"))

COST_TARGET_S = 5.0
PLAN_TARGET = 1.20
USAGE = ("USW2-BoxUsage:p5.48xlarge", "USW2-EBS:VolumeUsage.gp3", "USW2-NatGateway-Hours", "USW2-NatGateway-Bytes",
         "USW2-PublicIPv4:InUseAddress", "USW2-DataTransfer-Out-Bytes")


def cost_seconds(tmp: Path) -> tuple[float, int]:
    import boto3
    from botocore.stub import Stubber

    from gpufleet.clouds.aws import billing
    from gpufleet.fleet import cost
    from gpufleet.state.registry import Node, Registry

    reg = Registry(tmp / "registry.db")
    names = [f"c{i:03d}" for i in range(100)]
    for n in names:
        reg.record(name=n, stack=n, stack_file="s.yaml", owner="ops@example.com", expires_at="2026-12-31T00:00:00Z",
                   backend=None, nodes=[Node("gpu", 0, "aws", "us-west-2", "p5.48xlarge", usd_per_hour=55.04)],
                   locations=[("aws", "us-west-2")], predicted={"usd_per_hour": {"instances": 55.04, "volumes": 0.2},
                                                                "usd_once": {}, "ttl_hours": 744})
    days = [dt.date(2026, 10, 1) + dt.timedelta(days=d) for d in range(30)]
    groups = [(d, {"Keys": [f"gpufleet:cluster${n}", u], "Metrics": {"UnblendedCost": {"Amount": "12.5", "Unit": "USD"}}})
              for d in days for n in names for u in USAGE]
    pages, size = [], 1000
    for i in range(0, len(groups), size):
        by_day: dict = {}
        for d, g in groups[i:i + size]:
            by_day.setdefault(d, []).append(g)
        page = {"GroupDefinitions": [{"Type": "TAG", "Key": "gpufleet:cluster"}, {"Type": "DIMENSION", "Key": "USAGE_TYPE"}],
                "ResultsByTime": [{"TimePeriod": {"Start": d.isoformat(), "End": (d + dt.timedelta(days=1)).isoformat()},
                                   "Total": {}, "Groups": gs, "Estimated": False} for d, gs in by_day.items()],
                "DimensionValueAttributes": []}
        if i + size < len(groups):
            page["NextPageToken"] = f"page-{i // size + 1}"
        pages.append(page)
    ce = boto3.client("ce", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(ce)
    stub.add_response("list_cost_allocation_tags", {"CostAllocationTags": [
        {"TagKey": "gpufleet:cluster", "Type": "UserDefined", "Status": "Active"}]})
    for p in pages:
        stub.add_response("get_cost_and_usage", p)
    stub.activate()
    now = dt.datetime(2026, 10, 31, 6, tzinfo=dt.timezone.utc)
    t0 = time.perf_counter()
    got = cost.run(since=days[0], registry=reg, now=now,
                   billed=lambda p, *a: billing.billed(*a, client=ce))
    took = time.perf_counter() - t0
    assert len(got.rows) == 100 and all(len(r.lines) == 5 for r in got.rows), "every cluster, every line"
    return took, len(groups)


def plan_seconds() -> tuple[float, float]:
    """Best of seven each, the two kinds of plan taking turns so that whatever else loads the machine
    falls on both alike."""
    from bench_plan import stack_text

    from gpufleet import catalog, stacks
    from gpufleet.engine import plan as planner
    from gpufleet.engine import spend

    cat = catalog.load(use_config=False)
    real = spend.estimate
    best = {False: float("inf"), True: float("inf")}
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "bench.yaml"
        path.write_text(stack_text())
        stack = stacks.load(path, cat)
        try:
            for _ in range(7):
                for with_bill in (False, True):
                    spend.estimate = real if with_bill else (lambda plan, stack, cat: spend.Spend([], 0.0))
                    t0 = time.perf_counter()
                    planner.plan(stack, cat, workers=1)
                    best[with_bill] = min(best[with_bill], time.perf_counter() - t0)
        finally:
            spend.estimate = real
    return best[False], best[True]


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        took, n = cost_seconds(Path(d))
    print(json.dumps({"cost_100_clusters_30_days_s": round(took, 3), "groups": n,
                      "cost_ratio_to_target": round(took / COST_TARGET_S, 3)}))
    without, with_bill = plan_seconds()
    ratio = with_bill / without
    print(json.dumps({"plan_1000_nodes_without_bill_s": round(without, 3), "plan_with_every_line_s": round(with_bill, 3),
                      "plan_ratio": round(ratio, 3), "plan_ratio_target": PLAN_TARGET}))
    ok = took < COST_TARGET_S and ratio <= PLAN_TARGET
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

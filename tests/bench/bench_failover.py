"""Capacity failover's own costs, for a 10-pool, 10,000-node stack whose pools may each land in
any zone of two AWS regions, on GCP or on Azure.

Targets (issue 31) on the 2-core development machines: choosing the next place and rendering its
program under 1 s per attempt; the plan under 10 s and 1 GiB; the resources of a pool independent
of its node count. Measured in one process, in one run: the places of every pool (what `plan`
and `up` compute once), one attempt's program rendered under Pulumi's mocks after a refusal
moved one pool (`plan` runs the same program; `up` hands it to Pulumi), and the resources a pool
registers at 2 and at 1,000 nodes (an AWS pool, a GCP pool and a GCP flex-start pool). Each time
is also given as a ratio to the same run's rendering of the stack without failover.
"""

from __future__ import annotations

import resource
import time

POOLS, NODES = 10, 1000
FAILOVER = "{zones: any, regions: [us-west-2], providers: [gcp, azure], instance_types: same-gpu}"


def stack_text(nodes: int = NODES, failover: bool = True) -> str:
    pools = [f"  - {{name: train{i}, provider: aws, region: us-east-1, instance_type: p4d.24xlarge, nodes: {nodes}"
             + (f", failover: {FAILOVER}" if failover else "") + "}" for i in range(POOLS)]
    return ("name: bench-failover\nowner: bench@example.com\nttl: 4h\naccess: {ssh_cidrs: [203.0.113.0/24]}\n"
            "network: {cidr: 10.0.0.0/8}\npools:\n" + "\n".join(pools) + "\n")


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> int:
    from gpufleet import catalog, stacks
    from gpufleet.engine import plan as planner
    from gpufleet.engine.program import layout
    from gpufleet.nodes.cloud import failover

    cat = catalog.load(use_config=False)
    stack = stacks.load("bench.yaml", cat, text=stack_text())
    plain = stacks.load("bench.yaml", cat, text=stack_text(failover=False))
    base, _ = timed(lambda: planner.plan(plain, cat, workers=1))
    choose, places = timed(lambda: failover.places(stack, cat))
    per_pool = choose / POOLS
    current = {name: cs.ordered[0] for name, cs in places.items()}
    current["train0"] = places["train0"].ordered[1]  # the refusal moved one pool to its next place

    def next_place():
        moved = failover.placed(stack, current)
        layout(moved, cat)
        return moved

    step, moved = timed(next_place)
    render, _ = timed(lambda: planner.plan(moved, cat, workers=1))
    planned, result = timed(lambda: planner.plan(stack, cat))
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    small = planner.plan(stacks.load("b.yaml", cat, text=stack_text(nodes=2, failover=False)), cat, workers=1)

    def per_pool_resources(p) -> int:
        return sum(1 for r in p.cloud_resources if (r.parent or "").endswith("-train0") or r.name.startswith(
            "bench-failover-train0"))

    print(f"stack: {POOLS} pools x {NODES} nodes on AWS, each with failover {FAILOVER}")
    print(f"places per pool: {len(places['train0'].ordered)} kept, {len(places['train0'].dropped)} left out")
    print(f"choosing every pool's places: {choose:.3f} s ({per_pool * 1000:.0f} ms a pool)")
    print(f"one attempt: moving a pool to its next place and laying out the program {step * 1000:.1f} ms, "
          f"rendering that program under Pulumi's mocks {render:.2f} s ({(step + render) / base:.2f}x the plan "
          f"without failover, {base:.2f} s); target < 1 s")
    print(f"plan with failover: {planned:.2f} s, peak RSS {peak_mib:.0f} MiB (this process); targets < 10 s, "
          f"< 1024 MiB; {len(result.cloud_resources)} resources")
    print(f"resources of one pool: {per_pool_resources(small)} at 2 nodes, {per_pool_resources(result)} at "
          f"{NODES} nodes")
    for label, extra in (("GCP (bulkInsert)", ""), ("GCP flex-start", ", flex_start: {run_hours: 24}")):
        counts = []
        for n in (2, NODES):
            text = (f"name: bench-gcp\nowner: bench@example.com\npools:\n  - {{name: a3, provider: gcp, region: "
                    f"us-central1, instance_type: a3-highgpu-8g, nodes: {n}{extra}}}\n")
            p = planner.plan(stacks.load("g.yaml", cat, text=text), cat, workers=1)
            counts.append(sum(1 for r in p.cloud_resources if r.parent == "bench-gcp-a3"))
        print(f"resources of one {label} pool: {counts[0]} at 2 nodes, {counts[1]} at {NODES} nodes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

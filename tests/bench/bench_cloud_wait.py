"""`up`'s wait for 1,000 cloud nodes: detection lag and requests, against moto's S3 server.

1,000 status objects are written at random times over a minute (``--spread``), as nodes finish
their configuration, while ``nodes.cloud.channel.wait`` polls the status prefix every 5 s
(its default). Targets: completion is seen within 10 s of the last write, with at most one
list request per poll per 1,000 nodes, and each status read once. Printed as measured in this
run (the machines are shared: the lag is also given as a ratio to the poll interval).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the fakes

from fakes.aws import Server  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--spread", type=float, default=60.0, help="seconds over which the nodes finish")
    ap.add_argument("--poll", type=float, default=5.0)
    args = ap.parse_args(argv)

    import os

    import boto3

    from gpufleet.nodes.cloud import channel as cloudnodes

    srv = Server().start()
    os.environ.update(AWS_ENDPOINT_URL=srv.url, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                      AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true")
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="gpufleet-bench-0")
    store = cloudnodes.cloud("aws").objects({"cloud": "aws", "name": "gpufleet-bench-0", "region": "us-east-1"})
    targets = [cloudnodes.NodeTarget("gpu", i, f"i-{i:017x}", None) for i in range(args.nodes)]
    rng = random.Random(7)
    finish = sorted((rng.uniform(0, args.spread), t) for t in targets)
    last_write = [0.0]
    start = time.monotonic()

    def nodes():
        writer = boto3.client("s3", region_name="us-east-1")
        for at, t in finish:
            time.sleep(max(0.0, start + at - time.monotonic()))
            writer.put_object(Bucket="gpufleet-bench-0", Key=f"status/gpu/AROAEXAMPLE:{t.node_id}.json",
                              Body=json.dumps({"node_id": t.node_id, "pool": "gpu", "ok": True, "generation": "g",
                                               "changed": 12}).encode())
            last_write[0] = time.monotonic()

    threading.Thread(target=nodes, daemon=True).start()
    stats = cloudnodes.WaitStats()
    reports = cloudnodes.wait(store, targets, {"gpu": "g"}, timeout_s=args.spread + 120, poll_s=args.poll, stats=stats)
    seen = time.monotonic()
    srv.stop()
    configured = sum(r.state == "configured" for r in reports)
    lag = seen - last_write[0]
    per_poll = stats.lists / stats.polls
    print(f"nodes                    {args.nodes} (finishing over {args.spread:.0f} s), poll every {args.poll:.0f} s")
    print(f"configured               {configured} of {args.nodes}")
    print(f"detection lag            {lag:.2f} s after the last write  (target <= 10 s; {lag / args.poll:.2f} polls)")
    print(f"polls                    {stats.polls}")
    print(f"list requests            {stats.lists}  ({per_poll:.2f} per poll; target <= "
          f"{-(-args.nodes // 1000)} per poll for {args.nodes} nodes)")
    print(f"status reads             {stats.reads}  ({stats.reads / args.nodes:.2f} per node; target 1.00)")
    ok = configured == args.nodes and lag <= 10 and per_poll <= -(-args.nodes // 1000) and stats.reads == args.nodes
    print("met" if ok else "NOT MET")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

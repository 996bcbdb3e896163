"""What AWS bills for a plan's resources besides the instances, read off the program's inputs: EBS
root volumes (per GB-month, and gp3's IOPS and throughput above the free baseline), FSx for Lustre
(per GB-month at its deployment type and throughput tier), NAT gateways (per hour; the GB they
process are traffic, ``engine.spend``) and public IPv4 addresses (per hour since 2024-02-01:
the NAT gateway's Elastic IP, and each node's own when the pool asks for one).
"""

from __future__ import annotations

from gpufleet.clouds import bill_lines
from gpufleet.clouds.base import Planned, Usage

# gp3's baseline, included in its GB price (aws.amazon.com/ebs/pricing: "3,000 IOPS free and
# 125 MB/s free")
GP3_FREE_IOPS = 3000
GP3_FREE_MBPS = 125


def spend(resources: list[Planned]) -> list[Usage]:
    out: list[Usage] = []
    for r in resources:
        kind = r.type.split(":")[-1]
        if kind == "LaunchTemplate":
            out += _volumes(r)
        elif kind == "LustreFileSystem":
            out.append(_lustre(r))
        elif kind == "NatGateway":
            out.append(Usage(r.pool, bill_lines.NAT, "nat-gateway", "hour", r.region, 1, "NAT gateway"))
        elif kind == "Eip":
            out.append(Usage(r.pool, bill_lines.IPV4, "ipv4", "hour", r.region, 1, "public IPv4 address (Elastic IP)"))
        elif kind == "FleetNodes" and r.inputs.get("public"):
            out.append(Usage(r.pool, bill_lines.IPV4, "ipv4", "hour", r.region, r.nodes,
                             f"public IPv4 address x {r.nodes} node(s)"))
    return out


def _volumes(r: Planned) -> list[Usage]:
    out = []
    for m in r.inputs.get("blockDeviceMappings") or []:
        ebs = m.get("ebs") or {}
        size, kind = float(ebs.get("volumeSize") or 0), ebs.get("volumeType") or "gp3"
        if not size:
            continue
        n = r.nodes
        out.append(Usage(r.pool, bill_lines.VOLUMES, f"ebs:{kind}", "gb-month", r.region, size * n,
                         f"{size:g} GB {kind} root volume x {n} node(s)"))
        iops, mbps = float(ebs.get("iops") or 0), float(ebs.get("throughput") or 0)
        if kind == "gp3" and iops > GP3_FREE_IOPS:
            out.append(Usage(r.pool, bill_lines.VOLUMES, "ebs:gp3-iops", "iops-month", r.region, (iops - GP3_FREE_IOPS) * n,
                             f"{iops - GP3_FREE_IOPS:g} gp3 IOPS above the free 3,000 x {n}"))
        if kind == "gp3" and mbps > GP3_FREE_MBPS:
            out.append(Usage(r.pool, bill_lines.VOLUMES, "ebs:gp3-throughput", "mbps-month", r.region,
                             (mbps - GP3_FREE_MBPS) * n, f"{mbps - GP3_FREE_MBPS:g} MB/s gp3 throughput above the "
                             f"free 125 x {n}"))
    return out


def _lustre(r: Planned) -> Usage:
    deployment = (r.inputs.get("deploymentType") or "PERSISTENT_2").lower().replace("_", "-")
    size = float(r.inputs.get("storageCapacity") or 0)
    tier = r.inputs.get("perUnitStorageThroughput")
    item = f"fsx-lustre:{deployment}" + (f":{int(tier)}" if tier and deployment.startswith("persistent") else "")
    return Usage(r.pool, bill_lines.FILE_SYSTEM, item, "gb-month", r.region, size,
                 f"FSx for Lustre {deployment}, {size:g} GB" + (f" at {int(tier)} MB/s/TiB" if tier else ""))

"""What Google Cloud bills for a plan's resources besides the VMs, read off the program's inputs: each
VM's boot disk (per GiB-month of its type), Filestore and Managed Lustre (per GiB-month at their
tier), Cloud NAT (per VM-hour up to 32 VMs, a flat hourly charge above; its traffic is
``engine.spend``'s) with its external address, and each node's own external address when the pool
asks for one (cloud.google.com/vpc/network-pricing: "Cloud NAT pricing", "IP address pricing").
"""

from __future__ import annotations

from gpufleet.clouds import bill_lines
from gpufleet.clouds.base import Planned, Usage

NAT_VM_CAP = 32  # Cloud NAT charges per VM up to 32 VMs, then a flat rate per gateway


def spend(resources: list[Planned]) -> list[Usage]:
    out: list[Usage] = []
    vms: dict[str, int] = {}  # region -> VMs behind its Cloud NAT
    for r in resources:
        kind = r.type.split(":")[-1]
        if kind == "BulkInstances":
            n = len(r.inputs.get("names") or [])
            vms[r.region] = vms.get(r.region, 0) + n
            out += _disks(r, n)
            if r.inputs.get("public"):
                out.append(Usage(r.pool, bill_lines.IPV4, "ipv4", "hour", r.region, n, f"external IPv4 address x {n} VM(s)"))
        elif r.type == "gcp:compute/instanceTemplate:InstanceTemplate":  # a flex-start pool's: its VMs are the pool's
            vms[r.region] = vms.get(r.region, 0) + r.nodes
            out += _template_disks(r)
        elif r.type == "gcp:filestore/instance:Instance":
            gb = sum(float(s.get("capacityGb") or 0) for s in _list(r.inputs.get("fileShares")))
            tier = (r.inputs.get("tier") or "ZONAL").lower()
            out.append(Usage(r.pool, bill_lines.FILE_SYSTEM, f"filestore:{tier}", "gib-month", r.region, gb,
                             f"Filestore {tier}, {gb:g} GiB"))
        elif r.type == "gcp:lustre/instance:Instance":
            gib, tier = float(r.inputs.get("capacityGib") or 0), r.inputs.get("perUnitStorageThroughput")
            out.append(Usage(r.pool, bill_lines.FILE_SYSTEM, f"managed-lustre:{int(float(tier))}", "gib-month", r.region, gib,
                             f"Managed Lustre, {gib:g} GiB at {int(float(tier))} MB/s/TiB"))
    for r in resources:
        if r.type.split(":")[-1] == "RouterNat":
            n = vms.get(r.region, 0)
            out.append(Usage(r.pool, bill_lines.NAT, "cloud-nat:vm", "hour", r.region, n, f"Cloud NAT for {n} VM(s)")
                       if n <= NAT_VM_CAP else
                       Usage(r.pool, bill_lines.NAT, "cloud-nat:gateway", "hour", r.region, 1, f"Cloud NAT for {n} VMs (flat)"))
            out.append(Usage(r.pool, bill_lines.IPV4, "ipv4", "hour", r.region, 1, "Cloud NAT's external IPv4 address"))
    return out


def _disks(r: Planned, n: int) -> list[Usage]:
    out = []
    for d in (r.inputs.get("properties") or {}).get("disks") or []:
        p = d.get("initializeParams") or {}
        gib, kind = float(p.get("diskSizeGb") or 0), p.get("diskType") or "pd-balanced"
        if gib:
            out.append(Usage(r.pool, bill_lines.VOLUMES, f"pd:{kind}", "gib-month", r.region, gib * n,
                             f"{gib:g} GiB {kind} boot disk x {n} VM(s)"))
    return out


def _template_disks(r: Planned) -> list[Usage]:
    out = []
    for d in _list(r.inputs.get("disks")):
        gib, kind = float(d.get("diskSizeGb") or 0), d.get("diskType") or "pd-balanced"
        if gib:
            out.append(Usage(r.pool, bill_lines.VOLUMES, f"pd:{kind}", "gib-month", r.region, gib * r.nodes,
                             f"{gib:g} GiB {kind} boot disk x {r.nodes} VM(s)"))
    return out


def _list(v) -> list[dict]:
    """A Pulumi input that is one object or a list of them."""
    return v if isinstance(v, list) else [v] if isinstance(v, dict) else []

"""What Azure bills for a plan's resources besides the VMs, read off the program's inputs: each VM's
OS disk (a Premium SSD is billed per disk by the size tier it falls in, learn.microsoft.com/azure/
virtual-machines/disks-types#premium-ssd-size), Azure Managed Lustre (per TiB-hour of its SKU's
throughput tier), NAT gateways (per hour; their traffic is ``engine.spend``'s), Standard public
IP addresses (per hour) and the Bastion `gpufleet ssh` goes through (per hour of its SKU).
"""

from __future__ import annotations

from gpufleet.clouds import bill_lines
from gpufleet.clouds.base import Planned, Usage

# Premium SSD tiers: (largest size in GiB, tier); a disk is billed at the smallest tier that holds it
PREMIUM_TIERS = ((4, "P1"), (8, "P2"), (16, "P3"), (32, "P4"), (64, "P6"), (128, "P10"), (256, "P15"), (512, "P20"),
                 (1024, "P30"), (2048, "P40"), (4096, "P50"), (8192, "P60"), (16384, "P70"), (32767, "P80"))
DISK_KINDS = {"Premium_LRS": "premium-ssd"}


def spend(resources: list[Planned]) -> list[Usage]:
    out: list[Usage] = []
    for r in resources:
        kind = r.type.split(":")[-1]
        if kind == "VirtualMachineScaleSet":
            out += _os_disk(r)
        elif kind == "AmlFilesystem":
            tib = float(r.inputs.get("storageCapacityTiB") or 0)
            sku = ((r.inputs.get("sku") or {}).get("name") or "").lower().removeprefix("amlfs-")
            out.append(Usage(r.pool, bill_lines.FILE_SYSTEM, f"amlfs:{sku}", "tib-hour", r.region, tib,
                             f"Azure Managed Lustre {sku}, {tib:g} TiB"))
        elif kind == "NatGateway":
            out.append(Usage(r.pool, bill_lines.NAT, "nat-gateway", "hour", r.region, 1, "NAT gateway"))
        elif kind == "BastionHost":  # billed by the hour whether or not anyone connects
            sku = ((r.inputs.get("sku") or {}).get("name") or "Standard").lower()
            out.append(Usage(r.pool, bill_lines.BASTION, f"bastion:{sku}", "hour", r.region, 1, f"Azure Bastion {sku}"))
        elif kind == "PublicIPAddress":
            out.append(Usage(r.pool, bill_lines.IPV4, "ipv4", "hour", r.region, 1, "Standard public IPv4 address"))
        elif kind == "ScaleSetNodes" and r.inputs.get("public"):
            out.append(Usage(r.pool, bill_lines.IPV4, "ipv4", "hour", r.region, r.nodes,
                             f"Standard public IPv4 address x {r.nodes} VM(s)"))
    return out


def _os_disk(r: Planned) -> list[Usage]:
    profile = (r.inputs.get("virtualMachineProfile") or {}).get("storageProfile") or {}
    disk = profile.get("osDisk") or {}
    gib = float(disk.get("diskSizeGB") or 0)
    account = (disk.get("managedDisk") or {}).get("storageAccountType") or "Premium_LRS"
    n = int(float((r.inputs.get("sku") or {}).get("capacity") or r.nodes))
    if not gib or account not in DISK_KINDS:
        return []
    tier = next((t for size, t in PREMIUM_TIERS if gib <= size), PREMIUM_TIERS[-1][1])
    return [Usage(r.pool, bill_lines.VOLUMES, f"disk:{DISK_KINDS[account]}:{tier}", "disk-month", r.region, n,
                  f"{gib:g} GiB Premium SSD OS disk ({tier}) x {n} VM(s)")]

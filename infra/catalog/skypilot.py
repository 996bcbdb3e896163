"""Rows of SkyPilot's public catalog, read as source data for the embedded catalog's build.

SkyPilot publishes what the clouds' price and instance APIs say in ``skypilot-org/skypilot-catalog``
(``catalogs/v7/<cloud>/vms.csv``, Apache-2.0 data): one row per instance type and availability
zone (Azure: per region) with its on-demand ``Price`` and ``SpotPrice``. Column order differs by
cloud, so rows are read by column name. GCP prices a machine's vCPUs and memory in its row and the
GPUs in rows of their own (an empty ``InstanceType``, the ``AcceleratorName`` and count).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.errors import CatalogError

# SkyPilot's accelerator names -> the GPU table's
GPU_NAMES = {"A100": "A100-40GB", "A100-80GB": "A100-80GB", "H100-MEGA": "H100", "H100-SXM": "H100",
             "H200-SXM": "H200"}


@dataclass
class Listing:
    """One item in one region: its on-demand price, the lowest zone's spot price, and the zones."""

    item: str
    region: str
    vcpus: float | None
    memory_gib: float | None
    gpu: str | None  # the GPU table's name, mapped from SkyPilot's
    gpu_count: int | None
    ondemand: set[float] = field(default_factory=set)
    spot: dict[str, float] = field(default_factory=dict)  # zone -> spot price
    zones: set[str] = field(default_factory=set)
    rows: int = 0


def _num(raw: str | None) -> float | None:
    raw = (raw or "").strip()
    return float(raw) if raw else None


def read(paths: list[Path]) -> dict[tuple[str, str], Listing]:
    """(item, region) -> Listing from SkyPilot ``vms.csv`` files (whole files or extracts of them).
    A GCP GPU row's item is ``gpu:<SkyPilot's accelerator name>:<count>``: GCP prices "H100" and
    "H100-MEGA" (A3 Mega's) apart."""
    out: dict[tuple[str, str], Listing] = {}
    for path in paths:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = {"InstanceType", "AcceleratorName", "AcceleratorCount", "Price", "SpotPrice", "Region"} - set(
                reader.fieldnames or ())
            if missing:
                raise CatalogError(f"{path}: not a SkyPilot vms.csv: no column {', '.join(sorted(missing))}")
            for row in reader:
                try:
                    _add(out, row)
                except ValueError as e:
                    raise CatalogError(f"{path}:{reader.line_num}: {e}") from None
    return out


def _add(out: dict, row: dict) -> None:
    accel = (row.get("AcceleratorName") or "").strip() or None
    count = _num(row.get("AcceleratorCount"))
    item = row["InstanceType"].strip()
    if not item:
        if accel is None or count is None:
            raise ValueError("a row with neither an instance type nor an accelerator")
        item = f"gpu:{accel}:{count:g}"
    region = row["Region"].strip()
    zone = (row.get("AvailabilityZone") or "").strip()
    lst = out.get((item, region))
    if lst is None:
        lst = out[(item, region)] = Listing(item, region, _num(row.get("vCPUs")), _num(row.get("MemoryGiB")),
                                            GPU_NAMES.get(accel, accel) if accel else None,
                                            int(count) if count else None)
    lst.rows += 1
    if zone:
        lst.zones.add(zone)
    price, spot = _num(row.get("Price")), _num(row.get("SpotPrice"))
    if price is not None:
        lst.ondemand.add(price)
    if spot is not None:
        # the same zone listed twice (SkyPilot repeats a few rows): keep its lower spot price
        key = zone or region
        lst.spot[key] = min(spot, lst.spot.get(key, spot))

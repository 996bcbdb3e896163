"""Price lists for the fetchers, in the providers' documented formats, at any size.

No provider API can be reached from here, so these are not recordings: they are generated,
deterministically, in the formats the real APIs answer (see fakes/gcp.py ``sku``,
fakes/azure_prices.py ``item``, fakes/aws.py ``product``), around the catalog's own instance
types and regions, with the noise a real answer carries (other machine families, commitments,
Windows and low-priority meters, regions the catalog does not list). ``scale`` multiplies the
noise: the tests use small lists, ``tests/bench/bench_refresh.py`` full-size ones (tens of
thousands of SKUs, as the Compute Engine catalog has).

Prices are made-up figures of the right magnitude (a core cents an hour, a GiB a fraction of
a cent, a GPU a few dollars), not list prices.
"""

from __future__ import annotations

import zlib

# GCP's accelerator type and billing description for each catalog GPU (names as GCP writes them)
GCP_GPUS = {"T4": ("nvidia-tesla-t4", "Nvidia Tesla T4", 0.35), "V100": ("nvidia-tesla-v100", "Nvidia Tesla V100", 2.48),
            "P100": ("nvidia-tesla-p100", "Nvidia Tesla P100", 1.46), "P4": ("nvidia-tesla-p4", "Nvidia Tesla P4", 0.60),
            "L4": ("nvidia-l4", "Nvidia L4", 0.56), "A100-40GB": ("nvidia-tesla-a100", "Nvidia Tesla A100", 2.93),
            "A100-80GB": ("nvidia-a100-80gb", "Nvidia Tesla A100 80GB", 3.93),
            "H100": ("nvidia-h100-80gb", "Nvidia H100 80GB", 9.80), "H200": ("nvidia-h200-141gb", "Nvidia H200 141GB", 10.9),
            "B200": ("nvidia-b200", "Nvidia B200", 11.3)}
GCP_FAMILIES = {"N1": (0.031611, 0.004237), "A2": (0.031611, 0.004237), "A3": (0.025, 0.0021), "A4": (0.025, 0.0021),
                "G2": (0.024988, 0.002927),
                "N2": (0.031611, 0.004237), "E2": (0.021811, 0.002923), "C2": (0.03398, 0.00455), "C3": (0.03465, 0.00464),
                "M1": (0.0348, 0.0051), "N2D": (0.027502, 0.003686), "T2D": (0.027502, 0.003686), "C2D": (0.029563, 0.003959)}
GCP_USAGE = {"OnDemand": ("", 1.0), "Preemptible": ("Spot Preemptible ", 0.35), "Commit1Yr": ("Commitment v1: ", 0.63),
             "Commit3Yr": ("Commitment v1: ", 0.45)}
GEO = {"us": "Americas", "eu": "EMEA", "asia": "APAC", "au": "APAC", "sa": "Americas", "me": "EMEA", "ca": "Americas"}


def _factor(*key) -> float:
    """A region's price level, 1.00-1.29, the same on every run."""
    return 1.0 + (zlib.crc32("/".join(key).encode()) % 30) / 100


def gcp_world(fake, cat, *, scale: int = 1, not_offered: dict[str, set[str]] | None = None) -> None:
    """Machine types, accelerator types and SKUs for the catalog's GCP machines in ``fake``.

    ``not_offered``: machine type -> regions whose zones lack it (their SKUs are priced anyway,
    as the real catalog prices a family in regions where not every machine of it exists)."""
    not_offered = not_offered or {"a3-highgpu-8g": {"asia-east1", "us-west1"}}
    regions = sorted(cat.regions["gcp"])
    gpus_used = set()
    for (p, _), it in sorted(cat.instances.items()):
        if p != "gcp":
            continue
        base = it.base_machine
        accel = [] if it.gpu_attach == "separate" else [
            {"guestAcceleratorType": GCP_GPUS[it.gpu][0], "guestAcceleratorCount": it.gpu_count}]
        gpus_used.add(it.gpu)
        for region in regions:
            if region in not_offered.get(base, ()):
                continue
            for zone in cat.region_zones("gcp", region)[:2]:
                fake.add("machineTypes", f"zones/{zone}", base, guestCpus=it.vcpus, memoryMb=int(it.memory_gib * 1024),
                         accelerators=accel, description=f"{it.vcpus} vCPUs", maximumPersistentDisks=128)
    for gpu in sorted(gpus_used):
        for region in regions:
            for zone in cat.region_zones("gcp", region)[:2]:
                fake.add("acceleratorTypes", f"zones/{zone}", GCP_GPUS[gpu][0], description=f"NVIDIA {gpu}",
                         maximumCardsPerInstance=8 if gpu != "T4" else 4)
    fake.skus += gcp_skus(regions, scale=scale)


def gcp_skus(regions: list[str], *, scale: int = 1) -> list[dict]:
    """Compute Engine SKUs: cores and RAM of a dozen families, GPUs, every usage type, in
    ``regions`` and ``scale`` x 10 more, plus storage and network SKUs gpufleet must skip."""
    from fakes.gcp import sku

    out = []
    extra = [f"{geo}-x{i}" for i in range(10 * scale) for geo in ("us", "europe", "asia")][:10 * scale]
    for region in list(regions) + extra:
        geo = GEO.get(region.split("-")[0].replace("europe", "eu"), "Americas")
        f = _factor("gcp", region)
        for usage, (prefix, k) in GCP_USAGE.items():
            where = f"running in {geo}" if usage.startswith(("On", "Pre")) else f"in {geo} for {usage[6]} Year"
            for fam, (core, ram) in GCP_FAMILIES.items():
                pre = "Predefined " if fam in ("N1", "N2", "E2") else ""
                if usage.startswith("Commit"):
                    out += [sku(f"{prefix}{fam} Cpu {where}", region, core * f * k, usage=usage),
                            sku(f"{prefix}{fam} Ram {where}", region, ram * f * k, unit="GiBy.h", usage=usage)]
                    continue
                out += [sku(f"{prefix}{fam} {pre}Instance Core {where}", region, core * f * k, usage=usage),
                        sku(f"{prefix}{fam} {pre}Instance Ram {where}", region, ram * f * k, unit="GiBy.h", usage=usage)]
                if fam != "A3":
                    out.append(sku(f"{prefix}{fam} Custom Instance Core {where}", region, core * 1.05 * f * k, usage=usage))
            for _gpu, (_accel, desc, usd) in GCP_GPUS.items():
                g = f"{desc} GPU {'attached to Spot Preemptible VMs ' if usage == 'Preemptible' else ''}{where}"
                out.append(sku(f"{prefix if usage.startswith('Commit') else ''}{g}", region, usd * f * k, usage=usage))
        out += [sku(f"Storage PD Capacity in {region}", region, 0.04, unit="GiBy.mo", group="PDStandard"),
                sku(f"SSD backed Local Storage in {region}", region, 0.08, unit="GiBy.mo", group="LocalSSD"),
                sku(f"Network Internet Egress from {region} to Americas", region, 0.12, unit="GiBy",
                    group="PremiumInternetEgress")]
    return out


def azure_items(cat, *, scale: int = 1, regions: list[str] | None = None) -> list[dict]:
    """Retail Prices items of the catalog's Azure sizes in its regions (and ``scale`` x 8 more):
    Linux and Windows, pay-as-you-go, Spot, Low Priority, DevTest and reservations."""
    from fakes.azure_prices import item

    regions = regions or sorted(cat.regions["azure"]) + [f"xregion{i}" for i in range(8 * scale)]
    out = []
    for (p, name), it in sorted(cat.instances.items()):
        if p != "azure":
            continue
        for region in regions:
            usd = round(3.1 * it.gpu_count * _factor("azure", region, name), 4)
            out += [item(name, region, usd), item(name, region, round(usd * 0.4, 4), spot=True),
                    item(name, region, round(usd * 0.2, 4), low_priority=True),
                    item(name, region, round(usd * 1.2, 4), windows=True),
                    item(name, region, round(usd * 0.5, 4), windows=True, spot=True),
                    item(name, region, round(usd * 0.9, 4), kind="DevTestConsumption"),
                    item(name, region, round(usd * 0.6 * 8760, 2), kind="Reservation"),
                    item(name, region, round(usd * 1.1, 4), start="2024-01-01T00:00:00Z")]  # an older meter
    return out


def aws_products(cat, *, regions: list[str] | None = None) -> list[dict]:
    """Price List entries (Linux, shared tenancy, Used capacity) of the catalog's AWS types:
    what the fetcher's TERM_MATCH queries return, one entry per type and region."""
    from fakes.aws import product

    regions = regions or sorted(cat.regions["aws"])
    return [product(name, region, round(4.0 * it.gpu_count * _factor("aws", region, name), 4), it.gpu_count)
            for (p, name), it in sorted(cat.instances.items()) if p == "aws" for region in regions]


def aws_spot_history(cat, *, regions: list[str] | None = None, records: int = 12) -> dict[str, list[dict]]:
    """Region -> spot price history records (several zones, ``records`` per type and zone)."""
    regions = regions or sorted(cat.regions["aws"])
    out: dict[str, list[dict]] = {}
    for region in regions:
        zones = cat.region_zones("aws", region) or (f"{region}a",)
        out[region] = [{"instance_type": name, "zone": zone,
                        "price": round(4.0 * it.gpu_count * 0.45 * _factor("spot", zone, name, str(i)), 4),
                        "at": f"2026-11-22T08:{i * 59 // max(1, records - 1):02d}:00.000Z"}
                       for (p, name), it in sorted(cat.instances.items()) if p == "aws"
                       for zone in zones for i in range(records)]
    return out

"""Where a GPU can be had: per region, the cheapest offer per GPU-hour, on demand and on spot."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet.catalog.model import Catalog, Offer


@dataclass
class RegionOffer:
    provider: str
    region: str
    geo: str
    zones: list[str]  # zones listing any of the region's matching offers
    gpus: list[str]  # the GPU models offered there
    ondemand: Offer | None = None  # the cheapest per GPU-hour
    spot: Offer | None = None
    instances: set[str] = field(default_factory=set)

    @staticmethod
    def per_gpu(o: Offer | None) -> float | None:
        return o.usd_per_hour / o.instance.gpu_count if o else None

    @property
    def rank(self) -> tuple[bool, float]:
        """Regions with an on-demand price first, by it; then the spot-only ones, by spot price. Ranked
        among on-demand prices, a spot price would call a region cheapest that sells only preemptible
        nodes (and a spot price is no promise of capacity)."""
        if self.ondemand:
            return False, self.per_gpu(self.ondemand)
        return True, self.per_gpu(self.spot)

    def to_dict(self) -> dict:
        def one(o: Offer | None) -> dict | None:
            return o and {"instance": o.instance.name, "gpus": o.instance.gpu_count, "usd_per_hour": o.usd_per_hour,
                          "usd_per_gpu_hour": round(self.per_gpu(o), 4), "as_of": o.as_of, "zones": list(o.zones)}

        return {"provider": self.provider, "region": self.region, "geo": self.geo, "zones": self.zones, "gpus": self.gpus,
                "instances": sorted(self.instances), "ondemand": one(self.ondemand), "spot": one(self.spot)}


def regions(cat: Catalog, gpu: str | None = None, providers: list[str] = ()) -> list[RegionOffer]:
    """Every cloud region with an offer (of ``gpu``, when given): cheapest on-demand $/GPU-hour first,
    then the regions with spot offers only, cheapest spot first."""
    out: dict[tuple[str, str], RegionOffer] = {}
    for o in cat.offers():
        if o.market == "owned" or (gpu and o.gpu.name != gpu) or (providers and o.provider not in providers):
            continue
        r = out.get((o.provider, o.region))
        if r is None:
            r = out[(o.provider, o.region)] = RegionOffer(o.provider, o.region, cat.regions.get(o.provider, {}).get(
                o.region, ""), [], [])
        r.instances.add(o.instance.name)
        r.zones = sorted(set(r.zones) | set(o.zones))
        if o.gpu.name not in r.gpus:
            r.gpus.append(o.gpu.name)
        held = getattr(r, o.market)
        if held is None or RegionOffer.per_gpu(o) < RegionOffer.per_gpu(held):
            setattr(r, o.market, o)
    return sorted(out.values(), key=lambda r: (r.rank, r.provider, r.region))

"""User configuration: negotiated discounts, custom prices and owned racks.

Looked up at ``$GPUFLEET_CONFIG``, else ``$XDG_CONFIG_HOME/gpufleet/config.yaml`` (default
``~/.config/gpufleet/config.yaml``). Example::

    discounts: {aws: 0.12, gcp: 0.20}        # fraction off list, per provider
    prices:
      - {provider: aws, item: p4d.24xlarge, region: us-east-1, market: spot,
         usd_per_hour: 9.80, source: "AWS console spot price", as_of: 2026-11-20}
    sites:
      - name: dc1-h100
        gpu: H100
        gpus_per_node: 8
        nodes: 4
        purchase_usd_per_node: 300000
        depreciation_years: 4
        utilization: 0.7
        power_kw_per_node: 10.2
        usd_per_kwh: 0.11
        pue: 1.4
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.modelerrors import validate_located


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PriceOverride(_Strict):
    provider: Literal["aws", "gcp", "azure"]
    item: str
    region: str
    market: Literal["ondemand", "spot"] = "ondemand"
    usd_per_hour: float = Field(gt=0)
    source: str = "user config"
    as_of: str = Field(default_factory=lambda: dt.date.today().isoformat())


class SiteCosts(_Strict):
    """An owned rack's costs; also the ``site_costs`` block of a bare-metal pool."""

    purchase_usd_per_node: float = Field(gt=0)
    depreciation_years: float = Field(gt=0, le=15)
    utilization: float = Field(gt=0, le=1)
    power_kw_per_node: float = Field(ge=0)
    usd_per_kwh: float = Field(ge=0)
    pue: float = Field(default=1.5, ge=1, le=4)
    ops_usd_per_node_year: float = Field(default=0, ge=0)


class SiteConfig(SiteCosts):
    name: str
    gpu: str
    gpus_per_node: int = Field(gt=0)
    nodes: int = Field(gt=0)
    vcpus: int = Field(default=64, gt=0)
    memory_gib: float = Field(default=512, gt=0)
    network_gbps: float = Field(default=100, gt=0)
    fabric: Literal["ethernet", "infiniband-hdr", "infiniband-ndr", "roce"] = "ethernet"
    local_nvme_gb: float = Field(default=0, ge=0)


class UserConfig(_Strict):
    discounts: dict[Literal["aws", "gcp", "azure"], float] = {}
    prices: list[PriceOverride] = []
    sites: list[SiteConfig] = []
    catalog_max_age_days: int = Field(default=90, gt=0)

    def apply(self, cat) -> None:
        from gpufleet.catalog import Price
        from gpufleet.catalog.onprem import Site

        for prov, d in self.discounts.items():
            if not 0 <= d < 1:
                from gpufleet.errors import CatalogError

                raise CatalogError(f"config: discounts.{prov}: {d} must be a fraction in [0, 1)",
                                   "write 0.15 for a 15% discount")
        cat.discounts.update(self.discounts)
        for p in self.prices:
            cat.prices.append(Price(p.provider, p.item, p.region, p.market, p.usd_per_hour, p.source, p.as_of))
        for s in self.sites:
            cat.gpu(s.gpu)  # raises NotFound with a suggestion
            cat.sites.append(Site(**s.model_dump(), source=f"site costs in {self._path}",
                                  as_of=dt.date.today().isoformat()))

    _path: str = ""


def load(path: str | Path | None = None) -> UserConfig | None:
    """The user config, or None when there is none (an explicit missing path is an error)."""
    from gpufleet import yamlsrc
    from gpufleet.paths import user_config

    p = user_config(path)
    if p is None:
        return None
    located = yamlsrc.load_file(p)
    cfg = validate_located(UserConfig, located)
    cfg._path = str(p)
    return cfg

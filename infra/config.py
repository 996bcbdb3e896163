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
    budgets:                                  # per calendar month (UTC); `up` refuses to exceed one
      - {name: ml-platform, usd_per_month: 50000}           # every cluster
      - {name: llm, usd_per_month: 20000, stack: llm-train} # one stack's clusters
      - {name: alice, usd_per_month: 5000, owner: alice}    # owned or created by alice
    billing: {gcp_export_table: my-project.billing.gcp_billing_export_v1_0123AB_4567CD_89EF01, drift: 0.15}
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr

from gpufleet import yamlsrc
from gpufleet.providers import CLOUDS
from gpufleet.validation import validate_located

Cloud = Literal[CLOUDS]  # type: ignore[valid-type]  # the tuple's names, one by one


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _day(v):
    """A date as YAML reads ``2026-11-20`` (a date), or as a string: kept as YYYY-MM-DD."""
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, str) and re.match(r"^\d{4}-\d{2}(-\d{2})?$", v.strip()):
        return v.strip()
    raise ValueError(f"{v!r} is not a date: write it as 2026-11-20")


class PriceOverride(_Strict):
    provider: Cloud
    item: str
    region: str
    market: Literal["ondemand", "spot"] = "ondemand"
    usd_per_hour: float = Field(gt=0, le=10_000)
    source: str = "user config"
    as_of: Annotated[str, BeforeValidator(_day)] = Field(default_factory=lambda: dt.date.today().isoformat())


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


class Budget(_Strict):
    """What clusters may spend in a calendar month (UTC): every cluster, those of one ``stack``, or
    those whose owner or creator names ``owner`` (as `status --owner` matches); both: both."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")]
    usd_per_month: float = Field(gt=0, le=1_000_000_000)
    stack: str | None = None
    owner: str | None = None


class Billing(_Strict):
    """Where the bill is read (`gpufleet cost`) and when a difference is worth a warning."""

    gcp_export_table: str | None = None  # the Cloud Billing export's BigQuery table: project.dataset.table
    drift: float = Field(default=0.15, gt=0, le=10)  # billed off predicted by more than this share: a warning


class UserConfig(_Strict):
    _located: Any = PrivateAttr(default=None)  # set by load(): the file's lines
    discounts: dict[Cloud, float] = {}
    prices: list[PriceOverride] = []
    sites: list[SiteConfig] = []
    budgets: list[Budget] = []
    billing: Billing = Billing()
    catalog_max_age_days: int = Field(default=90, gt=0)

    @property
    def located(self):
        """Where each key of the file is (``yamlsrc.Located``), for errors found after validation."""
        return self._located


def load(path: str | Path) -> UserConfig:
    """The user config file (``paths.user_config`` says which), validated with file:line errors;
    ``located`` keeps the lines for the checks against the catalog."""
    located = yamlsrc.load_file(path)
    cfg = validate_located(UserConfig, located)
    cfg._located = located
    return cfg

"""The interface every provider implements, and the records it exchanges with cross-cloud code.

``Provider`` is what validation needs of anything a pool can run on (clouds and racks):
which interconnects it offers and what it cannot do for a pool. ``Cloud`` adds what the
cross-cloud operations need: credentials, the Pulumi program and its plan-time answers, the
cloud's API by tag (inventory, deletion, quotas) and its prices. A cloud object is cheap:
whatever imports an SDK or Pulumi is reached through its methods, each of which loads its
module through the cloud's ``sdk`` module (an ``SdkMissing`` error names the extra to install).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from gpufleet.spec import Problem  # what a provider cannot do for a pool, keys relative to the pool


@dataclass(frozen=True)
class ErrorPatterns:
    """How a cloud's failures read in Pulumi's output: refused credentials, a quota, no capacity."""

    credentials: re.Pattern
    quota: re.Pattern
    capacity: re.Pattern


@dataclass(frozen=True)
class Need:
    """What one cloud pool asks of its cloud's quotas."""

    pool: str
    provider: str
    region: str
    instance: object  # catalog.InstanceType
    nodes: int  # new nodes (an update counts only those it adds)
    spot: bool
    image: str | None = None  # the pool's image (a marketplace image may have terms to accept first)


@dataclass
class QuotaLine:
    """One quota as the cloud states it, against what the stack needs of it."""

    provider: str
    region: str
    quota: str  # the cloud's name for it
    code: str  # the cloud's id for it (AWS quota code, GCP metric, Azure usage name)
    unit: str  # vCPUs | GPUs
    needed: float
    limit: float | None  # None: could not be read
    used: float | None
    pools: list[str]
    note: str = ""

    @property
    def available(self) -> float | None:
        return None if self.limit is None else max(0.0, self.limit - (self.used or 0.0))

    @property
    def ok(self) -> bool | None:
        return None if self.available is None else self.needed <= self.available

    def to_dict(self) -> dict:
        return {"provider": self.provider, "region": self.region, "quota": self.quota, "code": self.code,
                "unit": self.unit, "needed": self.needed, "limit": self.limit, "used": self.used,
                "available": self.available, "ok": self.ok, "pools": self.pools, "note": self.note or None}


@runtime_checkable
class Provider(Protocol):
    """Anything a pool can run on: a cloud, or the team's own racks."""

    name: str
    # what a pool may ask for as `interconnect` -> the catalog fabric its instance type needs for it
    # (None: any machine of this provider can have it)
    interconnects: Mapping[str, str | None]
    lustre_flavor: str  # how the lustre_client formula reaches this provider's Lustre (salt/lustre_client)
    time_servers: tuple[str, ...]  # NTP servers the nodes use (the cloud's own time source; none: the image's)
    ib_port_per_gpu: bool  # an InfiniBand node has one port per GPU (else one port per node)

    def check_pool(self, stack, pool, instance) -> list[Problem]:
        """What this provider cannot do for the pool, with the reason, before anything is created."""


@runtime_checkable
class CloudApi(Protocol):
    """A cloud's own API, by the gpufleet tags: who we are, what is there, delete, quotas."""

    provider: str

    def identity(self) -> dict:
        """``{"account", "principal", "source"}``; CredentialsError when there are none or they are refused."""

    def regions(self, wanted: list[str] | None = None) -> list[str]:
        """The regions to look at: every one, or ``wanted`` after checking each exists."""

    def inventory(self, regions: list[str], cluster: str | None = None,
                  on_region: Callable[[str], None] | None = None) -> tuple[list, dict[str, str]]:
        """Every resource tagged ``gpufleet:cluster`` (= ``cluster``) in ``regions``, and the places
        that could not be read (``{"aws/us-west-2": "AuthFailure: ..."}``)."""

    def delete(self, region: str, kind: str, resources: list) -> dict[str, tuple[str, str]]:
        """Ask for their deletion: ``{id: (deleted | gone | retry | failed, message)}``."""

    def still_there(self, region: str, kind: str, resources: list) -> dict[str, str]:
        """Of resources whose deletion was accepted, those not gone yet: ``{id: state}``."""

    def quotas(self, region: str, needs: list[Need]) -> list[QuotaLine]:
        """The quotas the needs touch in one region, with limit and use."""


@runtime_checkable
class ObjectStore(Protocol):
    """A stack's bucket: what `up` and `configure` publish for the nodes and read back from them
    (``configure.cloudnodes``); keys are ``/``-separated paths."""

    def put(self, key: str, body: bytes) -> None: ...

    def get(self, key: str) -> bytes: ...

    def exists(self, key: str) -> bool: ...

    def list(self, prefix: str) -> tuple[list[tuple[str, str]], int]:
        """(key, etag) of every object under ``prefix``, and the number of list requests made."""

    def delete_all(self) -> int:
        """Empty the bucket (every version); the number of objects deleted."""


class Cloud(Provider, Protocol):
    """A cloud gpufleet creates pools on, through Pulumi, and finds again by tag."""

    extra: str  # the pip extra that installs its SDKs: pip install 'gpufleet[<extra>]'
    pulumi_package: str  # the type prefix of its Pulumi resources ("aws", "gcp", "azure-native")
    credential_hint: str  # how to give gpufleet credentials for it
    errors: ErrorPatterns
    # hourly list prices of what can be left behind, for `status` and `reap`:
    # {"disk": {disk type: $ per GB-month}, "fixed": {kind: $ per hour}}
    leftover_prices: Mapping[str, Mapping[str, float]]

    def credentials(self) -> str:
        """Where credentials would come from (no network call); CredentialsError naming how to set them up."""

    def pool_fabric(self, pool, instance) -> str | None:
        """The catalog fabric the pool's nodes use for GPU traffic between nodes (``efa``, ``tcpx``
        ...), or None for plain networking."""

    def region_subnets(self, region: str) -> list[tuple[str, int]]:
        """Subnets a region needs besides its pools': ``(purpose, addresses)``."""

    def pool_subnets(self, pool) -> list[tuple[str, int]]:
        """Subnets a pool needs besides its own: ``(purpose, addresses)``."""

    def program_settings(self, *, plan: bool) -> dict[str, Any]:
        """What the program needs besides the stack (a GCP project, an Azure subscription);
        placeholders under `plan`."""

    def program(self):
        """The module whose ``build_region(ctx, index, region, pools, shared)`` creates a region's
        components inside the Pulumi program and returns each pool's exports."""

    def mocks(self):
        """The module that answers for this cloud under `plan`: ``ID_PREFIX``, ``COLUMNS``,
        ``resource(typ, name, inputs, rid, state, ctx)``, ``call(token, args, region, cat)`` and
        ``summary(typ, inputs)``."""

    def api(self) -> CloudApi:
        """The cloud's own API (loads its SDK)."""

    def objects(self, ref: dict) -> ObjectStore:
        """The stack's bucket (``ref``: a pool export's ``bucket``) through the cloud's SDK."""

    def prices(self):
        """The module with ``FLAGSHIPS`` and ``fetch(cat, progress) -> catalog.fetched.Fetched``."""

    def quota_hint(self, line: QuotaLine) -> str:
        """Where to ask for more of a quota that is short."""

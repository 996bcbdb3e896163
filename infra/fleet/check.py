"""`gpufleet check`: whose credentials, and do the quotas leave room for the stack
(``clouds.quotas``, which `up` runs before it creates anything)?"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet import stacks
from gpufleet.clouds import inventory
from gpufleet.clouds.base import QuotaLine
from gpufleet.clouds.quotas import check, needs, refuse_if_short
from gpufleet.errors import QuotaError
from gpufleet.fleet import team
from gpufleet.providers import CLOUDS
from gpufleet.state.registry import Registry


@dataclass
class CheckReport:
    """Who we are on each cloud, the quota lines of a stack, and the first short one."""

    clouds: inventory.Clouds
    lines: list[QuotaLine] = field(default_factory=list)
    short: QuotaError | None = None
    cloud_pools: bool = True  # False: the stack has none, there was nothing to check

    @property
    def unread(self) -> dict[str, str]:
        """Clouds whose credentials should have been checked and could not be (exit 1)."""
        return self.clouds.unread()

    def to_dict(self) -> dict:
        return {"identity": self.clouds.identity, "skipped": self.clouds.skipped, "unread": self.unread,
                "quotas": [x.to_dict() for x in self.lines], "ok": self.short is None and not self.unread,
                **(self.short.to_dict() if self.short else {})}


def run(stack_path: str | None, cat, *, providers: list[str] | None = None,
        registry: Registry | None = None) -> CheckReport:
    """Open the clouds (``providers``, default all; a stack's own when given) and check a stack's quotas."""
    if stack_path is None:
        return CheckReport(inventory.open_clouds(providers, required=bool(providers), regions={}))
    st = stacks.load(stack_path, cat)
    used = sorted({p.provider for p in st.pools if p.provider in CLOUDS and (not providers or p.provider in providers)})
    if not used:
        return CheckReport(inventory.Clouds(), cloud_pools=False)
    clouds = inventory.open_clouds(used, required=True,
                                   regions={p.provider: [p.region] for p in st.pools if p.provider in used})
    lines, _ = check([n for n in needs(st, cat, (registry or team.registry()).get(st.name)) if n.provider in used], clouds)
    report = CheckReport(clouds, lines)
    try:
        refuse_if_short(lines)
    except QuotaError as e:
        report.short = e
    return report

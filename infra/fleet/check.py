"""`gpufleet check`: whose credentials, and do the quotas leave room for the stack?

Each cloud counts GPU capacity its own way: AWS in vCPUs per instance class (Service
Quotas), GCP in GPUs per model and region (plus a project-wide GPU count), Azure in vCPUs
per VM family and region. ``needs`` turns the stack into what it asks of each cloud; each
cloud API's ``quotas(region, needs)`` answers in ``QuotaLine``s. `up` runs this before it
creates anything and refuses with a QuotaError when a line is short.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet.clouds import cloud, inventory
from gpufleet.clouds.base import Need, QuotaLine
from gpufleet.engine.program import layout
from gpufleet.errors import GpufleetError, QuotaError
from gpufleet.fleet import stacks
from gpufleet.providers import CLOUDS
from gpufleet.state.registry import Registry


def needs(stack, cat, existing=None) -> list[Need]:
    """What each cloud pool adds; nodes an earlier `up` of the same cluster runs already count as used."""
    have: dict[str, int] = {}
    for n in (existing.nodes if existing else []):
        have[n.pool] = have.get(n.pool, 0) + 1
    out = []
    for pp in layout(stack, cat).pools:  # cloud pools, with the instance type a gpu/gpus_per_node pool resolves to
        p = pp.pool
        add = max(0, (p.nodes or 1) - have.get(p.name, 0))
        if add:
            out.append(Need(p.name, p.provider, p.region, pp.instance, add, p.spot, p.image))
    return out


def check(needs_: list[Need], clouds: inventory.Clouds) -> tuple[list[QuotaLine], dict[str, str]]:
    """Quota lines for every (provider, region) the needs touch, and the clouds that could not be asked."""
    lines: list[QuotaLine] = []
    skipped: dict[str, str] = {}
    groups: dict[tuple[str, str], list[Need]] = {}
    for n in needs_:
        groups.setdefault((n.provider, n.region), []).append(n)
    for (provider, region), ns in groups.items():
        if provider not in clouds.open:
            skipped[provider] = clouds.skipped.get(provider, "not opened")
            continue
        lines += clouds[provider].quotas(region, ns)
    return lines, skipped


def refuse_if_short(lines: list[QuotaLine]) -> None:
    short = [x for x in lines if x.ok is False]
    if not short:
        return
    terms = [x for x in short if x.unit == "agreement"]  # not a quota: terms to accept before anything boots
    if terms:
        t = terms[0]
        raise GpufleetError(f"{t.provider} {t.region}: the {t.quota} are not accepted (pools {', '.join(t.pools)}): "
                            "the cloud would refuse their nodes", t.note)
    first = short[0]
    more = f" (and {len(short) - 1} more)" if len(short) > 1 else ""
    raise QuotaError(first.provider, first.region, first.quota, first.needed, first.available or 0.0,
                     f"request an increase ({cloud(first.provider).quota_hint(first)}), make the pool smaller, "
                     "or pick another region", lines=[x.to_dict() for x in short], more=more)


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
    lines, _ = check([n for n in needs(st, cat, (registry or Registry()).get(st.name)) if n.provider in used], clouds)
    report = CheckReport(clouds, lines)
    try:
        refuse_if_short(lines)
    except QuotaError as e:
        report.short = e
    return report

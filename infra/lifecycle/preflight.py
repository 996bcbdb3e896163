"""`gpufleet check`: whose credentials, and do the quotas leave room for the stack?

Each cloud counts GPU capacity its own way: AWS in vCPUs per instance class (Service
Quotas), GCP in GPUs per model and region (plus a project-wide GPU count), Azure in vCPUs
per VM family and region. ``needs`` turns the stack into what it asks of each cloud; each
cloud module's ``quotas(region, needs)`` answers in ``QuotaLine``s. `up` runs this before it
creates anything and refuses with a QuotaError when a line is short.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.errors import QuotaError


@dataclass(frozen=True)
class Need:
    pool: str
    provider: str
    region: str
    instance: object  # catalog.InstanceType
    nodes: int  # new nodes (an update counts only those it adds)
    spot: bool


@dataclass
class QuotaLine:
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


def needs(stack, cat, existing=None) -> list[Need]:
    """What each cloud pool adds; nodes an earlier `up` of the same cluster runs already count as used."""
    have: dict[str, int] = {}
    for n in (existing.nodes if existing else []):
        have[n.pool] = have.get(n.pool, 0) + 1
    from gpufleet.engine.program import layout

    out = []
    for pp in layout(stack, cat).pools:  # cloud pools, with the instance type a gpu/gpus_per_node pool resolves to
        p = pp.pool
        add = max(0, (p.nodes or 1) - have.get(p.name, 0))
        if add:
            out.append(Need(p.name, p.provider, p.region, pp.instance, add, p.spot))
    return out


def check(needs_: list[Need], clouds) -> tuple[list[QuotaLine], dict[str, str]]:
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
    first = short[0]
    more = f" (and {len(short) - 1} more)" if len(short) > 1 else ""
    raise QuotaError(first.provider, first.region, first.quota, first.needed, first.available or 0.0,
                     _hint(first), lines=[x.to_dict() for x in short], more=more)


def _hint(line: QuotaLine) -> str:
    where = {"aws": f"Service Quotas console, EC2 quota {line.code} in {line.region}",
             "gcp": f"IAM & Admin > Quotas, metric {line.code} in {line.region}",
             "azure": f"Subscriptions > Usage + quotas, {line.quota} in {line.region}"}[line.provider]
    return f"request an increase ({where}), make the pool smaller, or pick another region"

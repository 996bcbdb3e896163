"""Do the clouds' quotas leave room for a stack? ``needs`` turns the stack into what it asks of
each cloud; each cloud API's ``quotas(region, needs)`` answers in ``QuotaLine``s (each cloud
counts GPU capacity its own way: AWS in vCPUs per instance class, GCP in GPUs per model and
region, Azure in vCPUs per VM family and region). `up` and `check` refuse when a line is short.
"""

from __future__ import annotations

from gpufleet import spec
from gpufleet.clouds import candidates, cloud, inventory
from gpufleet.clouds.base import Need, QuotaLine
from gpufleet.errors import GpufleetError, QuotaError
from gpufleet.providers import CLOUDS


def needs(stack, cat, existing=None) -> list[Need]:
    """What each cloud pool adds at the first place `up` tries (a pool holding reservations: the first
    it can launch into now); nodes an earlier `up` of the same cluster runs already count as used."""
    have: dict[str, int] = {}
    for n in (existing.nodes if existing else []):
        have[n.pool] = have.get(n.pool, 0) + 1
    out = []
    for p in stack.pools:
        if p.provider not in CLOUDS:
            continue
        add = max(0, (p.nodes or 1) - have.get(p.name, 0))
        held = candidates.holds(p, cat)
        if add and held:
            h = held[0]
            out.append(Need(p.name, h.provider, h.region, cat.instance(h.provider, h.instance_type), add, False,
                            p.image, False, h.reservation.id))
        elif add:  # with the instance type a gpu/gpus_per_node pool resolves to
            out.append(Need(p.name, p.provider, p.region, spec.resolve_instance(p, cat), add, p.spot, p.image,
                            p.flex_start is not None))
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

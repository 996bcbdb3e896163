"""Loading a stack file with every check gpufleet has: its shape and the catalog (``spec``), what
each provider can do for each pool (``clouds``), whether the software fits, the Salt formulas.

Every command that reads a stack file goes through ``load``: nothing is created before the
whole file is valid, and every problem is reported at once, as ``file:line: key: problem``.

A package of its own, under the operations (``fleet``) and the node kinds: the checks ask the
clouds, the Salt formulas (``configure``) and the address plan (``engine``), so it cannot sit
with the stack model in ``spec``, below them. ``pools``: a stack's pools as the offers `compare`
ranks.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from pathlib import Path

from gpufleet import catalog, spec
from gpufleet.catalog.images import IMAGES, osfinger
from gpufleet.clouds import provider
from gpufleet.clouds.tags import Cluster
from gpufleet.configure import FORMULAS, packages, software
from gpufleet.configure.pillar import scraped_pools
from gpufleet.engine.addresses import address_needs, plan_addresses
from gpufleet.errors import InputError, NotFound, did_you_mean
from gpufleet.monitoring.scrape import unreached
from gpufleet.perf import workloads
from gpufleet.providers import PROVIDERS
from gpufleet.spec import Problem


def load(path: str | Path, cat=None, *, text: str | None = None) -> spec.Stack:
    """Load and fully validate a stack file. Raises SpecError/SpecErrors (exit code 2)."""
    return spec.load(path, cat if cat is not None else catalog.load(), text=text,
                     pool_checks=[interconnect, provider_rules, failover_places, reserved_places],
                     stack_checks=[formulas, software_fits, lustre_clients, workload_known, addresses_fit, bastion_pool,
                                   tags_fit, monitor_reaches, gate_has_dcgm])


def interconnect(stack, pool, instance, cat) -> Iterable[Problem]:
    """The interconnect a pool asks for: one its provider offers, on an instance type that has it."""
    wanted = pool.interconnect
    if wanted is None:
        return []
    offers = provider(pool.provider).interconnects
    if wanted not in offers:
        where = [p for p in PROVIDERS if wanted in provider(p).interconnects]
        own = [x for x, fabric in offers.items() if fabric] or list(offers)
        return [Problem(("interconnect",), f"{pool.provider} cannot provide {wanted}",
                        f"{wanted} comes with {' and '.join(where)}; {pool.provider} offers {', '.join(own)}")]
    fabric = offers[wanted]
    if fabric and instance.fabric != fabric:
        return [Problem(("interconnect",), f"{instance.name} has no {wanted}",
                        "instance types with it: " + ", ".join(sorted(
                            n for (p, n), x in cat.instances.items()
                            if p == pool.provider and x.fabric == fabric)))]
    return []


def provider_rules(stack, pool, instance, cat) -> Iterable[Problem]:
    """What the pool's provider cannot do for it (images, storage tiers, sizes ...)."""
    return provider(pool.provider).check_pool(stack, pool, instance)


def failover_places(stack, pool, instance, cat) -> Iterable[Problem]:
    """The places a pool's ``failover`` names exist: regions of its clouds, zones of its region,
    instance types with the same GPUs; its own place is under its price cap."""
    f = pool.failover
    if f is None:
        return []
    out = []
    clouds_ = [pool.provider, *f.providers]
    known = sorted({r for p in clouds_ for r in cat.regions.get(p, {})})
    for j, r in enumerate(f.regions):
        if r not in known:
            s = did_you_mean(r, known)
            out.append(Problem(("failover", "regions", j), f"no region {r!r} of {' or '.join(clouds_)}",
                               f"did you mean {s!r}?" if s else "see `gpufleet catalog regions`"))
    zones = cat.region_zones(pool.provider, pool.region)
    for j, z in enumerate(f.zones if isinstance(f.zones, list) else []):
        if zones and z not in zones:
            out.append(Problem(("failover", "zones", j), f"{pool.region} has no zone {z!r}",
                               f"its zones: {', '.join(sorted(zones))}"))
    for j, t in enumerate(f.instance_types if isinstance(f.instance_types, list) else []):
        it = next((cat.instances[(p, t)] for p in clouds_ if (p, t) in cat.instances), None)
        if it is None:
            s = did_you_mean(t, [n for (p, n) in cat.instances if p in clouds_])
            out.append(Problem(("failover", "instance_types", j), f"unknown instance type {t!r} on {' or '.join(clouds_)}",
                               f"did you mean {s!r}?" if s else "see `gpufleet catalog instances`"))
        elif (it.gpu, it.gpu_count) != (instance.gpu, instance.gpu_count):
            out.append(Problem(("failover", "instance_types", j), f"{t} has {it.gpu_count}x {it.gpu}, the pool "
                               f"{instance.gpu_count}x {instance.gpu}", "a pool moves only to the same GPUs per node"))
    own = cat.offer(pool.provider, pool.region, instance.name, "spot" if pool.spot else "ondemand")
    cap = f.max_price_per_node_hour
    if cap is not None and own is not None and own.usd_per_hour > cap:
        out.append(Problem(("failover", "max_price_per_node_hour"), f"the pool's own place costs "
                           f"${own.usd_per_hour:,.2f}/node-hour, above the cap of ${cap:,.2f}",
                           "raise the cap: it bounds the alternatives, and the pool's own place is always tried"))
    return out


def reserved_places(stack, pool, instance, cat) -> Iterable[Problem]:
    """Each reservation a pool names is a place the catalog knows, with the pool's GPUs, in its
    cloud's form (that cloud's ``check_reservation``)."""
    out = []
    for j, r in enumerate(pool.reservations):
        at = ("reservations", j)
        if r.provider != pool.provider and r.provider not in (pool.failover.providers if pool.failover else []):
            out.append(Problem(at + ("provider",), f"reservation {r.id} is on {r.provider}, where the pool may not "
                               "move", f"list it in failover.providers: [{r.provider}]"))
            continue
        if not (r.region and r.instance_type):
            out.append(Problem(at, f"reservation {r.id} on {r.provider} needs `region` and `instance_type`",
                               "they default to the pool's only on the pool's own cloud"))
            continue
        it = cat.instances.get((r.provider, r.instance_type)) if r.instance_type else instance
        out += [Problem(at + p.keys, p.message, p.hint) for p in provider(r.provider).check_reservation(r, it, pool)]
        regions = cat.regions.get(r.provider, {})
        if r.region not in regions:
            s = did_you_mean(r.region, regions)
            out.append(Problem(at + ("region",), f"{r.region!r} is not a {r.provider} region",
                               f"did you mean {s!r}?" if s else "see `gpufleet catalog regions`"))
            continue
        zones = cat.region_zones(r.provider, r.region)
        if r.zone and zones and r.zone not in zones:
            out.append(Problem(at + ("zone",), f"{r.region} has no zone {r.zone!r}", f"its zones: {', '.join(zones)}"))
        if it is None:
            s = did_you_mean(r.instance_type, [n for (p, n) in cat.instances if p == r.provider])
            out.append(Problem(at + ("instance_type",), f"unknown {r.provider} instance type {r.instance_type!r}",
                               f"did you mean {s!r}?" if s else "see `gpufleet catalog instances`"))
        elif (it.gpu, it.gpu_count) != (instance.gpu, instance.gpu_count):
            out.append(Problem(at + ("instance_type",), f"{it.name} has {it.gpu_count}x {it.gpu}, the pool "
                               f"{instance.gpu_count}x {instance.gpu}", "a pool uses a reservation of its own GPUs"))
    return out


def formulas(stack, cat) -> Iterable[Problem]:
    """Every Salt formula a pool names exists in salt/."""
    for i, pool in enumerate(stack.pools):
        for j, name in enumerate(pool.salt.states or []):
            if name not in FORMULAS:
                s = did_you_mean(name, FORMULAS)
                yield Problem(("pools", i, "salt", "states", j), f"unknown Salt formula {name!r}",
                              f"did you mean {s!r}?" if s else f"formulas: {', '.join(FORMULAS)}")


def gate_has_dcgm(stack, cat) -> Iterable[Problem]:
    """A pool whose boot gate runs DCGM's diagnostic (``health.gate: dcgm1-3``) installs DCGM: the monitoring formula
    does (salt/monitoring). Without it the gate could never pass (its watch requires the diagnostic it names)."""
    for i, pool in enumerate(stack.pools):
        if not pool.health.gate.startswith("dcgm"):
            continue
        states = pool.salt.states
        if not stack.software.monitoring or (states is not None and "monitoring" not in states):
            why = "software.monitoring is false" if not stack.software.monitoring else \
                f"pool {pool.name}'s salt.states has no monitoring"
            yield Problem(("pools", i, "health", "gate"), f"gate {pool.health.gate} runs `dcgmi diag`, and no DCGM is "
                          f"installed on pool {pool.name}'s nodes ({why})",
                          "gate: quick, or install DCGM (software.monitoring: true, monitoring among salt.states)")


def addresses_fit(stack, cat) -> Iterable[Problem]:
    """The stack's network block holds the subnets its pools need (one per pool and region's own)."""
    try:
        plan_addresses(stack.network.cidr, address_needs(stack)[0])
    except InputError as e:
        return [Problem(("network", "cidr"), e.message, e.hint)]
    return []


def bastion_pool(stack, cat) -> Iterable[Problem]:
    """``access.bastion_pool`` names a cloud pool of the stack whose nodes have public addresses: its
    first node is the jump host `gpufleet ssh` and `ssh-config` go through (``access.via: bastion``)."""
    name = stack.access.bastion_pool
    if not name:
        return []
    pool = next((p for p in stack.pools if p.name == name), None)
    if pool is None:
        s = did_you_mean(name, [p.name for p in stack.pools])
        return [Problem(("access", "bastion_pool"), f"no pool {name!r} in the stack",
                        f"did you mean {s!r}?" if s else "name a small cloud pool with public_ip: true")]
    if pool.on_rack or not pool.public_ip:
        return [Problem(("access", "bastion_pool"), f"pool {name!r} cannot be the bastion: "
                        + ("a rack is reached directly" if pool.on_rack else "its nodes have no public address"),
                        "give a cloud pool public_ip: true (its SSH is open only to access.ssh_cidrs)")]
    return []


def monitor_reaches(stack, cat) -> Iterable[Problem]:
    """The monitor lists and reaches every pool it scrapes (monitoring.scrape.unreached): a pool it does not would be
    waited on in a file nobody fills, or scraped where no node answers, and alert on nothing."""
    mon = stack.monitor_pool()
    if mon is None:
        return
    for pool, why in unreached(mon, scraped_pools(stack)):
        yield Problem(("monitoring", "host"), f"pool {pool.name} is scraped, and the monitor cannot list and reach "
                      f"its nodes: {why}", "put the monitor on the pools' cloud and region (host: a pool of its own "
                      f"there), or give pool {pool.name} salt.states without monitoring")


def tags_fit(stack, cat) -> Iterable[Problem]:
    """Every value that becomes a ``gpufleet:*`` tag or label (the owner, the stack's and pools' names)
    is one each cloud of the stack takes, by that cloud's rules, said at the stack's key."""
    identity = Cluster(stack.name, stack.name, stack.owner, dt.datetime.now(dt.timezone.utc))
    seen: set[tuple] = set()
    for i, pool in enumerate(stack.pools):
        if pool.on_rack:
            continue
        # a part that failed the schema (no str) is said already, not again here
        tags = {k: v for k, v in identity.tags(pool.name).items() if isinstance(v, str)}
        for tag, problem in provider(pool.provider).tag_problems(tags):
            keys = {"gpufleet:owner": ("owner",), "gpufleet:pool": ("pools", i, "name")}.get(tag, ("name",))
            if (keys, problem) not in seen:
                seen.add((keys, problem))
                yield Problem(keys, problem, "every resource carries it as a tag: shorten it, or write it in the "
                                             "characters the cloud takes (an e-mail address or a team's name)")


def workload_known(stack, cat) -> Iterable[Problem]:
    """The stack's `workload` is one of the library's (or the user's workload file's), or llm:<size>."""
    if stack.workload is None:
        return []
    try:
        workloads.get(stack.workload.name)
    except InputError as e:  # NotFound with the nearest name, or a malformed llm:<size>
        return [Problem(("workload", "name"), e.message, e.hint)]
    return []


def software_fits(stack, cat) -> Iterable[Problem]:
    """Driver, CUDA, OS image, GPU and frameworks go together, and with ``slurm:`` the Slurm each image
    installs (racks' OS is checked on the hosts)."""
    sw = stack.software
    base = dict(driver=sw.driver, cuda=sw.cuda, open_modules=sw.open_kernel_modules)
    # what no pool changes (CUDA, frameworks) once, so that it is said even when no pool could be
    # checked; then what each pool's OS and GPU add
    found = [(None, software.check(**base, frameworks=dict(sw.frameworks)))]
    for i, pool in enumerate(stack.pools):
        gpu = pool.gpu
        if pool.instance_type and not pool.on_rack:
            try:
                gpu = cat.instance(pool.provider, pool.instance_type).gpu
            except NotFound:
                continue  # reported by the catalog pass
        os_ = osfinger(pool.image) if not pool.on_rack else None  # a cloud's own image says no OS
        found.append((i, software.check(**base, osfinger=os_, gpu=gpu)))
    seen: set[tuple] = set()
    for i, probs in found:
        for prob in probs:
            if prob.warning or (prob.key, prob.message) in seen:
                continue
            seen.add((prob.key, prob.message))
            keys = ("pools", i, "image") if prob.key == "os" else \
                (("pools", i, "gpu") if prob.key == "gpu" else tuple(prob.key.split(".")))
            yield Problem(keys, prob.message, prob.hint)
    if stack.slurm:  # a cloud cluster's Slurm, as its pools' images install it (a rack's is checked on its hosts)
        index = {p.name: i for i, p in enumerate(stack.pools)}
        hosts = [(p.name, p.role, osfinger(p.image)) for p in stack.pools if not p.on_rack]
        for name, prob in software.slurm_check(hosts, cgroups=stack.slurm.cgroups):
            yield Problem(("pools", index[name], "image"), prob.message, prob.hint)


def lustre_clients(stack, cat) -> Iterable[Problem]:
    """A cloud pool with Lustre storage boots an OS its cloud's Lustre client is confirmed for (or names
    the package in its pillar): the formula would fail on the node, after the file system and the nodes
    were made. The hint names the images that have one (with Slurm's cgroups, those whose Slurm has
    cgroup v2)."""
    for i, pool in enumerate(stack.pools):
        os_ = osfinger(pool.image)
        if pool.on_rack or os_ is None or not any(s.type == "lustre" for s in pool.storage) \
                or (pool.salt.pillar.get("lustre_client") or {}).get("package"):
            continue
        flavor = provider(pool.provider).lustre_flavor
        why = packages.unconfirmed("lustre_client", flavor, os_)
        if why is None:
            continue
        slurm_cgroups = stack.slurm is not None and stack.slurm.cgroups
        fits = [name for name, os_of in IMAGES.items()
                if packages.unconfirmed("lustre_client", flavor, os_of) is None
                and not (slurm_cgroups and software.slurm_check([("", "compute", os_of)], cgroups=True))]
        yield Problem(("pools", i, "image"), f"no confirmed {flavor} Lustre client for {os_} ({why}): its "
                      "formula would fail on the nodes after they and the file system were made",
                      (f"name image: {' or '.join(fits)}" + (" on every pool" if stack.slurm else "") if fits
                       else "boot an image with a Lustre client") + " or set lustre_client: {package: ...} in "
                      "the pool's salt pillar")


def cloud_pools(stack, pool: str | None, *, without: str = "") -> list:
    """The stack's cloud pools, or only ``pool``; InputError (exit 2) naming the cloud pools there
    are when none matches (``without``: what to add when the stack has none at all)."""
    pools = [p for p in stack.pools if not p.on_rack and (pool is None or p.name == pool)]
    if not pools:
        names = [p.name for p in stack.pools if not p.on_rack]
        raise InputError(f"no cloud pool {pool!r} in stack {stack.name}" if pool else
                         f"stack {stack.name} has no cloud pool{without}", f"its cloud pools: {', '.join(names) or 'none'}")
    return pools


def stack_of(target: str, cat=None) -> spec.Stack | None:
    """A stack file gives the stack (loaded and checked); anything else is a cluster name (None)."""
    p = Path(target)
    if p.suffix in (".yaml", ".yml") or p.exists() or p.is_symlink():  # a broken link: load says why
        return load(p, cat)
    return None

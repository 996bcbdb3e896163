"""The one Pulumi program behind `plan` and `up`: a stack file turned into components.

``layout()`` is pure Python (no Pulumi): which instance each pool runs on, its subnet, the
fabric between its nodes, and its price. ``build()`` returns the inline program the
Automation API (for `up`) and the mock runtime (for `plan`) both run: each region's
components come from its cloud's ``program().build_region``, the rack hosts from
``clouds.baremetal.rack``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet import spec
from gpufleet.clouds import cloud, golden
from gpufleet.clouds.tags import Cluster
from gpufleet.engine.addresses import AddressPlan, address_needs, plan_addresses
from gpufleet.errors import InputError
from gpufleet.monitoring.ports import monitor_ports
from gpufleet.providers import CLOUDS
from gpufleet.state.images import BuiltImage, Manifest


@dataclass
class PoolPlan:
    pool: object  # spec.Pool
    instance: object  # catalog.InstanceType
    subnet_cidr: str
    fabric: str | None  # what its cloud's pool_fabric says the nodes use between them (efa, tcpx ...)
    usd_per_node_hour: float | None
    price_note: str
    extra_subnets: list[tuple[str, int]] = field(default_factory=list)  # its cloud's pool_subnets
    zones: tuple[str, ...] = ()  # the region's zones offering the instance type, as the catalog knows them
    reservation: object = None  # spec.Reservation the pool launches into (failover placed it there), else None
    image: object = None  # state.images.BuiltImage the pool boots (its image: gpufleet:<name>), else None

    @property
    def name(self) -> str:
        return self.pool.name

    @property
    def usd_per_hour(self) -> float | None:
        return None if self.usd_per_node_hour is None else self.usd_per_node_hour * self.pool.nodes


@dataclass
class Layout:
    stack: object
    addresses: AddressPlan
    pools: list[PoolPlan]
    regions: list[tuple[str, str]] = field(default_factory=list)  # (provider, region) in file order
    placed: bool = False  # failover placed the pools: one without a ``reservation`` runs on the open market

    def pools_in(self, provider: str, region: str) -> list[PoolPlan]:
        return [p for p in self.pools if p.pool.provider == provider and p.pool.region == region]


def layout(stack, cat, reserved: dict | None = None) -> Layout:
    """Decide, before any Pulumi code runs, what each cloud pool becomes and costs. ``reserved``:
    pool name -> the ``clouds.candidates.Candidate`` of a reservation failover placed it at (the
    pool launches into it, at the price its cloud bills for it); given (if empty), the layout is of
    failover's placement, where a pool without one runs on the open market."""
    placed, reserved = reserved is not None, reserved or {}
    needs, regions = address_needs(stack)
    addresses = plan_addresses(stack.network.cidr, needs)
    cloud_pools = [p for p in stack.pools if p.provider in CLOUDS]
    plans = []
    built = Manifest()
    for p in cloud_pools:
        c = cloud(p.provider)
        image = _built_image(built, p)
        if image is not None:  # the program boots what the cloud calls it
            p = p.model_copy(update={"image": image.id})
        it = spec.resolve_instance(p, cat)
        market = "spot" if p.spot else "ondemand"
        offer = cat.offer(p.provider, p.region, it.name, market)
        note = "" if offer else (f"no {market} price for {it.name} in {p.region} in the catalog"
                                 + ("; add a quote under `prices:` in your config" if p.spot else ""))
        held = reserved.get(p.name)
        price = held.price_per_node_hour if held else offer.usd_per_hour if offer else None
        plans.append(PoolPlan(
            pool=p, instance=it, subnet_cidr=p.subnet or addresses.get(p.provider, p.region, p.name),
            fabric=c.pool_fabric(p, it), usd_per_node_hour=price, price_note=note if price is None else "",
            extra_subnets=c.pool_subnets(p),
            zones=cat.offered_zones(p.provider, it.name, p.region) or cat.region_zones(p.provider, p.region),
            reservation=held.reservation if held else None, image=image))
    return Layout(stack, addresses, plans, regions, placed=placed)


def _built_image(manifest: Manifest, pool) -> BuiltImage | None:
    """The golden image a pool names as ``gpufleet:<name>``, built for its cloud and region (``clouds.golden``)."""
    name = golden.name_of(pool)
    if name is None:
        return None
    found = golden.find(manifest, name, pool.provider, pool.region)
    if found is None:
        raise InputError(f"pool {pool.name}: no image {name} built for {pool.provider} {pool.region} in "
                         f"{manifest.path}", f"build it: gpufleet image build STACK --pool {pool.name}")
    return found


RACKS = "@racks"  # the shard (see ``only``) that registers the rack hosts


@dataclass
class Context:
    """What a cloud's ``build_region`` gets besides its region and pools."""

    stack: object
    cluster: Cluster
    addresses: AddressPlan
    settings: dict[str, dict]  # provider -> its program_settings
    refresh_images: bool = False  # look up again what an image name pins (`up --refresh-image`)
    # the monitor host's own ports (Prometheus, Alertmanager, Grafana): its region's rules admit the cluster's network
    monitor_ports: list[int] = field(default_factory=monitor_ports)

    @staticmethod
    def export(p: PoolPlan, region: str, zone, comp) -> dict:
        """One pool's entry in the program's ``pools`` output (``state.registry`` reads it)."""
        return {"provider": p.pool.provider, "region": region, "zone": zone, "instance_type": p.instance.name,
                "nodes": p.pool.nodes, "gpus_per_node": p.instance.gpu_count,
                "usd_per_node_hour": p.usd_per_node_hour, "node_ids": comp.node_ids, "private_ips": comp.private_ips,
                "public_ips": comp.public_ips, "ssh_endpoint": comp.ssh_endpoint,
                # a VM's unique id where its node id is not one (Azure's vmId): its host key's name
                "vm_uids": getattr(comp, "vm_uids", None),
                "bucket": comp.bucket,  # where its nodes find their configuration (``clouds.bootstrap``)
                # the pool's request where the cloud keeps none (GCP's bulkInsert): heal asks it again when no VM of
                # the pool is left to read it from
                "request": getattr(comp, "request", None)}


def build(lay: Layout, cluster: Cluster, *, plan: bool = False, only: set[str] | None = None,
          trust_new_hosts: bool = False, refresh_images: bool = False):
    """The inline Pulumi program for a stack's cloud pools and its rack hosts.

    ``plan``: under the mock runtime, with placeholder project/subscription settings.
    ``only`` restricts it to some pools (and the networks of their regions; ``RACKS`` for the
    rack hosts): `plan` runs shards of a large stack in parallel processes and merges what
    they register. Rack hosts are dynamic resources (``clouds.baremetal.rack``): the machines
    exist, "creating" one verifies and fact-gathers it through the same code as `up`.
    ``refresh_images``: what a cloud pins of an image name is looked up again (``Context``).
    """
    used = list(dict.fromkeys(p for p, _ in lay.regions))
    settings = {p: cloud(p).program_settings(plan=plan) for p in used}
    ctx = {p: Context(lay.stack, cluster.on(p), lay.addresses, settings, refresh_images)  # each cloud's own creator
           for p in used}
    programs = {p: cloud(p).program() for p in used}  # loads each cloud's Pulumi SDK, or says which extra is missing

    def program():
        import pulumi

        exports: dict[str, dict] = {}
        shared: dict[str, dict] = {p: {} for p in used}  # what a cloud's regions share (GCP: the VPC)
        for index, (prov, region) in enumerate(lay.regions):
            pools = [p for p in lay.pools_in(prov, region) if only is None or p.name in only]
            if pools:
                exports.update(programs[prov].build_region(ctx[prov], index, region, pools, shared[prov]))
        if only is None or RACKS in only:
            from gpufleet.clouds.baremetal import rack

            hosts = rack.rack_hosts(lay.stack, cluster.name, trust_new=trust_new_hosts)
            if hosts:
                pulumi.export("rack_hosts", {h._name: h.id for h in hosts})
        pulumi.export("cluster", cluster.name)
        pulumi.export("pools", exports)

    return program

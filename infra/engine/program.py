"""The one Pulumi program behind `plan` and `up`: a stack file turned into components.

``layout()`` is pure Python (no Pulumi): which instance each pool runs on, its subnet,
EFA/TCPX, and its price. ``build()`` returns the inline program the Automation API (for
`up`) and the mock runtime (for `plan`) both run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet.providers import CLOUDS, uses_efa, uses_tcpx
from gpufleet.providers.common import AddressPlan, Cluster, StorageArgs, image, plan_addresses, resource_name

# GPUDirect-TCPX GPU NIC networks are VPCs of their own; their subnets come from here.
TCPX_BLOCK = "172.16.0.0/12"


@dataclass
class PoolPlan:
    pool: object  # spec.Pool
    instance: object  # catalog.InstanceType
    subnet_cidr: str
    efa_interfaces: int
    tcpx: bool
    usd_per_node_hour: float | None
    price_note: str

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

    def pools_in(self, provider: str, region: str) -> list[PoolPlan]:
        return [p for p in self.pools if p.pool.provider == provider and p.pool.region == region]


def layout(stack, cat) -> Layout:
    """Decide, before any Pulumi code runs, what each cloud pool becomes and costs."""
    from gpufleet import spec

    needs: list[tuple[str, str, str, int]] = []
    regions: list[tuple[str, str]] = []
    cloud_pools = [p for p in stack.pools if p.provider in CLOUDS]
    for p in cloud_pools:
        if (p.provider, p.region) not in regions:
            regions.append((p.provider, p.region))
            if p.provider == "aws":
                needs.append(("aws", p.region, "public", 8))
        if not p.subnet:
            needs.append((p.provider, p.region, p.name, p.nodes))
        if p.provider == "azure" and any(s.type == "lustre" for s in p.storage):
            needs.append(("azure", p.region, f"{p.name}-lustre", 120))  # AMLFS wants a /24 of its own
    addresses = plan_addresses(stack.network.cidr, needs)
    plans = []
    for p in cloud_pools:
        it = spec.resolve_instance(p, cat)
        market = "spot" if p.spot else "ondemand"
        offer = cat.offer(p.provider, p.region, it.name, market)
        note = "" if offer else (f"no {market} price for {it.name} in {p.region} in the catalog"
                                 + ("; add a quote under `prices:` in your config" if p.spot else ""))
        plans.append(PoolPlan(
            pool=p, instance=it,
            subnet_cidr=p.subnet or addresses.get(p.provider, p.region, p.name),
            efa_interfaces=it.efa_interfaces if p.provider == "aws" and uses_efa(p, it) else 0,
            tcpx=p.provider == "gcp" and uses_tcpx(p, it),
            usd_per_node_hour=offer.usd_per_hour if offer else None, price_note=note))
    return Layout(stack, addresses, plans, regions)


def _tcpx_cidrs(region_index: int) -> list[str]:
    import ipaddress

    block = ipaddress.ip_network(TCPX_BLOCK)
    subnets = list(block.subnets(new_prefix=20))
    return [str(subnets[region_index * 4 + i]) for i in range(4)]


RACKS = "@racks"  # the shard (see ``only``) that registers the rack hosts


def build(lay: Layout, cluster: Cluster, *, gcp_project: str | None = None,
          azure_subscription: str | None = None, only: set[str] | None = None, trust_new_hosts: bool = False):
    """The inline Pulumi program for a stack's cloud pools and its rack hosts.

    ``only`` restricts it to some pools (and the networks of their regions; ``RACKS`` for the
    rack hosts): `plan` runs shards of a large stack in parallel processes and merges what
    they register. Rack hosts are dynamic resources (``providers.rack``): the machines exist,
    "creating" one verifies and fact-gathers it through the same code as `up` without Pulumi.
    """
    stack = lay.stack

    def program():
        import pulumi

        from gpufleet.providers import components

        exports: dict[str, dict] = {}
        gcp_network = None
        for r_index, (prov, region) in enumerate(lay.regions):
            mod = components(prov)
            pools = [p for p in lay.pools_in(prov, region) if only is None or p.name in only]
            if not pools:
                continue
            rname = resource_name(cluster.name, region)
            if prov == "aws":
                provider = mod.make_provider(region, cluster.tags())
                popts = pulumi.ResourceOptions(providers=[provider])
                images = {p.name: p.pool.image if (p.pool.image or "").startswith("ami-")
                          else mod.image_id(image(p.pool.image).aws_owner, image(p.pool.image).aws_name, provider)
                          for p in pools}
                zones = {p.name: p.pool.zone or mod.zone_for(region, p.instance.name, provider) for p in pools}
                existing = next((p.pool.vpc for p in pools if p.pool.vpc), None)
                net = mod.ClusterNetwork(rname, mod.NetworkArgs(
                    cluster=cluster.name, region=region, cidr=stack.network.cidr,
                    public_cidr=lay.addresses.get("aws", region, "public"), nat_zone=zones[pools[0].name],
                    ssh_cidrs=stack.access.ssh_cidrs, public_key=stack.access.public_key, tags=cluster.tags(),
                    existing_vpc=existing), opts=popts)
                for p in pools:
                    comp = mod.GpuNodePool(resource_name(cluster.name, p.name), mod.PoolArgs(
                        cluster=cluster.name, pool=p.name, instance_type=p.instance.name, nodes=p.pool.nodes,
                        efa_interfaces=p.efa_interfaces, zone=zones[p.name], subnet_cidr=p.subnet_cidr,
                        image_id=images[p.name], vpc_id=p.pool.vpc or net.vpc_id,
                        security_group_id=net.security_group_id,
                        route_table_id=net.public_route_table_id if p.pool.public_ip else net.private_route_table_id,
                        tags=cluster.tags(p.name), key_name=net.key_name, existing_subnet=p.pool.subnet,
                        spot=p.pool.spot, capacity_reservation=p.pool.capacity_reservation,
                        public_ip=p.pool.public_ip, root_disk_gb=p.pool.root_disk_gb,
                        storage=[StorageArgs.of(s) for s in p.pool.storage]), opts=popts)
                    exports[p.name] = _export(p, region, zones[p.name], comp)
            elif prov == "gcp":
                provider = mod.make_provider(region, cluster.labels(), gcp_project)
                popts = pulumi.ResourceOptions(providers=[provider])
                existing = next((p.pool.vpc for p in pools if p.pool.vpc), None)
                net = mod.ClusterNetwork(rname, mod.NetworkArgs(
                    cluster=cluster.name, region=region,
                    subnets={p.name: p.subnet_cidr for p in pools if not p.pool.subnet},
                    ssh_cidrs=stack.access.ssh_cidrs, cluster_cidr=stack.network.cidr, tags=cluster.tags(),
                    tcpx=any(p.tcpx for p in pools), tcpx_cidrs=_tcpx_cidrs(r_index),
                    existing_network=existing, create_network=gcp_network is None,
                    network_id=gcp_network), opts=popts)
                gcp_network = gcp_network or net.network_id
                for p in pools:
                    ref = image(p.pool.image) if not (p.pool.image or "").startswith("projects/") else None
                    zone = p.pool.zone or mod.zone_for(region, p.instance.base_machine, provider)
                    comp = mod.GpuNodePool(resource_name(cluster.name, p.name), mod.PoolArgs(
                        cluster=cluster.name, pool=p.name, machine_type=p.instance.base_machine, gpu=p.instance.gpu,
                        gpu_count=p.instance.gpu_count, gpu_attach=p.instance.gpu_attach, nodes=p.pool.nodes,
                        zone=zone, region=region,
                        image=f"projects/{ref.gcp_project}/global/images/family/{ref.gcp_family}" if ref else p.pool.image,
                        subnet_id=p.pool.subnet or net.subnet_ids[p.name], network_id=net.network_id,
                        labels=cluster.labels(p.name), gpu_subnet_ids=net.gpu_subnet_ids if p.tcpx else [],
                        ssh_user=stack.access.user, public_key=stack.access.public_key, spot=p.pool.spot,
                        public_ip=p.pool.public_ip, root_disk_gb=p.pool.root_disk_gb,
                        storage=[StorageArgs.of(s) for s in p.pool.storage]), opts=popts)
                    exports[p.name] = _export(p, region, zone, comp)
            else:  # azure
                provider = mod.make_provider(region, azure_subscription)
                popts = pulumi.ResourceOptions(providers=[provider])
                subnets = {p.name: p.subnet_cidr for p in pools if not p.pool.subnet}
                subnets.update({f"{p.name}-lustre": lay.addresses.get("azure", region, f"{p.name}-lustre")
                                for p in pools if any(s.type == "lustre" for s in p.pool.storage)})
                net = mod.ClusterNetwork(rname, mod.NetworkArgs(
                    cluster=cluster.name, region=region, cidr=stack.network.cidr, subnets=subnets,
                    ssh_cidrs=stack.access.ssh_cidrs, tags=cluster.tags()), opts=popts)
                for p in pools:
                    img = image(p.pool.image).azure if ":" not in (p.pool.image or "") else tuple(p.pool.image.split(":"))
                    comp = mod.GpuNodePool(resource_name(cluster.name, p.name), mod.PoolArgs(
                        cluster=cluster.name, pool=p.name, sku=p.instance.name, nodes=p.pool.nodes, region=region,
                        resource_group_name=net.resource_group_name,
                        subnet_id=p.pool.subnet or net.subnet_ids[p.name], nsg_id=net.nsg_id, image=img,
                        public_key=stack.access.public_key, tags=cluster.tags(p.name),
                        storage_subnet_id=net.subnet_ids.get(f"{p.name}-lustre"), ssh_user=stack.access.user,
                        spot=p.pool.spot, public_ip=p.pool.public_ip, root_disk_gb=p.pool.root_disk_gb,
                        infiniband=p.instance.fabric.startswith("infiniband"),
                        storage=[StorageArgs.of(s) for s in p.pool.storage]), opts=popts)
                    exports[p.name] = _export(p, region, None, comp)
        if only is None or RACKS in only:
            from gpufleet.providers.rack import rack_hosts

            hosts = rack_hosts(stack, cluster.name, trust_new=trust_new_hosts)
            if hosts:
                pulumi.export("rack_hosts", {h._name: h.id for h in hosts})
        pulumi.export("cluster", cluster.name)
        pulumi.export("pools", exports)

    return program


def _export(p: PoolPlan, region: str, zone, comp) -> dict:
    return {"provider": p.pool.provider, "region": region, "zone": zone, "instance_type": p.instance.name,
            "nodes": p.pool.nodes, "gpus_per_node": p.instance.gpu_count, "usd_per_node_hour": p.usd_per_node_hour,
            "node_ids": comp.node_ids, "private_ips": comp.private_ips, "ssh_endpoint": comp.ssh_endpoint}

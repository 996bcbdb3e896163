"""An Azure region of the stack's Pulumi program: the pools turned into component arguments."""

from __future__ import annotations

import pulumi

from gpufleet.clouds.azure import access
from gpufleet.clouds.azure import components as mod
from gpufleet.clouds.azure.rules import image_urn, is_image_id, marketplace_plan, scale_set_zone
from gpufleet.clouds.pools import StorageArgs, resource_name


def build_region(ctx, index: int, region: str, pools: list, shared: dict) -> dict[str, dict]:
    """The region's resource group and network, and a scale set per pool; returns each pool's exports."""
    stack, cluster = ctx.stack, ctx.cluster
    provider = mod.make_provider(region, ctx.settings["azure"]["subscription"])
    popts = pulumi.ResourceOptions(providers=[provider])
    subnets = {p.name: p.subnet_cidr for p in pools if not p.pool.subnet}
    for p in pools:
        subnets.update({purpose: ctx.addresses.get("azure", region, purpose) for purpose, _ in p.extra_subnets})
    net = mod.ClusterNetwork(resource_name(cluster.name, region), mod.NetworkArgs(
        cluster=cluster.name, region=region, cidr=stack.network.cidr, subnets=subnets,
        ssh_cidrs=stack.access.ssh_cidrs, tags=cluster.tags(),
        monitor_ports=ctx.monitor_ports if any(stack.monitor_pool() is p.pool for p in pools) else [],
        bastion_cidr=ctx.addresses.get("azure", region, access.SUBNET) if stack.access.via == "cloud" else None),
        opts=popts)
    if "storage" not in shared:  # the stack's one storage account, in its first Azure region
        s = mod.ClusterStorage(resource_name(cluster.name, "azure"), cluster.name, ctx.settings["azure"]["subscription"],
                               region, net.resource_group_name, cluster.tags(), opts=popts,
                               deployer_type=ctx.settings["azure"]["deployer_type"])
        shared["storage"] = mod.NodeStorage(s.account, s.container_id, s.node_role_id)
    out = {}
    for p in pools:
        zone = scale_set_zone(p.pool, p.zones)
        comp = mod.GpuNodePool(resource_name(cluster.name, p.name), mod.PoolArgs(
            cluster=cluster.name, pool=p.name, sku=p.instance.name, nodes=p.pool.running, region=region,
            resource_group_name=net.resource_group_name,
            subnet_id=p.pool.subnet or net.subnet_ids[p.name], nsg_id=net.nsg_id,
            image=p.pool.image if is_image_id(p.pool.image or "") else image_urn(p.pool.image),
            plan=p.image.plan if p.image else marketplace_plan(p.pool.image),  # a golden image: its build's
            public_key=stack.access.public_key, tags=cluster.tags(p.name),
            storage_subnet_id=net.subnet_ids.get(f"{p.name}-lustre"), ssh_user=stack.access.user,
            spot=p.pool.spot, public_ip=p.pool.public_ip, root_disk_gb=p.pool.root_disk_gb,
            infiniband=p.fabric is not None, storage=[StorageArgs.of(s) for s in p.pool.storage],
            zone=zone, subscription=ctx.settings["azure"]["subscription"],
            storage_account=shared["storage"],
            capacity_reservation_group=p.reservation.id if p.reservation else None,
            metadata=stack.metadata_of(p.pool),
            monitor=stack.monitor_pool() is p.pool), opts=popts)
        out[p.name] = ctx.export(p, region, zone, comp)
    return out

"""An AWS region of the stack's Pulumi program: the pools turned into component arguments."""

from __future__ import annotations

import pulumi

from gpufleet.catalog.images import DEFAULT_IMAGE
from gpufleet.clouds.aws import components as mod
from gpufleet.clouds.aws.ami import PinnedAmi
from gpufleet.clouds.aws.rules import IMAGES, is_ami
from gpufleet.clouds.pools import StorageArgs, resource_name


def build_region(ctx, index: int, region: str, pools: list, shared: dict) -> dict[str, dict]:
    """The region's network and each pool's nodes; returns each pool's exports.

    ``ctx`` is ``engine.program.Context`` (stack, cluster, addresses, exports); ``pools`` are
    ``engine.program.PoolPlan``s."""
    stack, cluster = ctx.stack, ctx.cluster
    provider = mod.make_provider(region, cluster.tags())
    popts = pulumi.ResourceOptions(providers=[provider])
    zones = {p.name: p.pool.zone or mod.zone_for(region, p.instance.name, provider) for p in pools}
    existing = next((p.pool.vpc for p in pools if p.pool.vpc), None)
    net = mod.ClusterNetwork(resource_name(cluster.name, region), mod.NetworkArgs(
        cluster=cluster.name, region=region, cidr=stack.network.cidr,
        public_cidr=ctx.addresses.get("aws", region, "public"), nat_zone=zones[pools[0].name],
        ssh_cidrs=stack.access.ssh_cidrs, public_key=stack.access.public_key, tags=cluster.tags(),
        existing_vpc=existing), opts=popts)
    if "bucket" not in shared:  # the stack's one bucket, in its first AWS region
        b = mod.ClusterBucket(resource_name(cluster.name, "aws"), cluster.name, cluster.tags(), opts=popts)
        shared["bucket"] = mod.NodeConfig(b.name, b.arn, region, ctx.settings["aws"].get("s3_endpoint"),
                                          ctx.settings["aws"].get("ec2_endpoint"))
    pins: dict[str, object] = {}  # image name -> its AMI, pinned once for the cluster in this region

    def image(pool) -> object:
        """The pool's own AMI (a golden image's too), or its image name's, pinned (clouds.aws.ami)."""
        if pool.image and is_ami(pool.image):
            return pool.image
        name = pool.image or DEFAULT_IMAGE
        if name not in pins:
            owner, pattern = IMAGES[name]
            pins[name] = PinnedAmi(resource_name(cluster.name, region, name, "ami"), region=region, owner=owner,
                                   pattern=pattern, refresh=ctx.refresh_images,
                                   opts=pulumi.ResourceOptions(parent=net)).image_id  # the region's
        return pins[name]

    out = {}
    for p in pools:
        comp = mod.GpuNodePool(resource_name(cluster.name, p.name), mod.PoolArgs(
            cluster=cluster.name, pool=p.name, instance_type=p.instance.name, nodes=p.pool.nodes, region=region,
            session_manager=stack.access.via == "cloud",  # `gpufleet ssh` through Session Manager
            efa_interfaces=p.instance.efa_interfaces if p.fabric == "efa" else 0, zone=zones[p.name],
            subnet_cidr=p.subnet_cidr, image=image(p.pool), vpc_id=p.pool.vpc or net.vpc_id,
            security_group_id=net.security_group_id,
            route_table_id=net.public_route_table_id if p.pool.public_ip else net.private_route_table_id,
            tags=cluster.tags(p.name), key_name=net.key_name, existing_subnet=p.pool.subnet,
            spot=p.pool.spot, on_demand_fallback=bool(p.pool.failover and p.pool.failover.spot_fallback),
            reservation=p.reservation.id if p.reservation else None,
            capacity_block=bool(p.reservation and p.reservation.capacity_block),
            public_ip=p.pool.public_ip, root_disk_gb=p.pool.root_disk_gb,
            imds_hop_limit=p.pool.imds_hop_limit or mod.IMDS_HOP_LIMIT, metadata=stack.metadata_of(p.pool),
            monitor=stack.monitor_pool() is p.pool,
            storage=[StorageArgs.of(s) for s in p.pool.storage], node_config=shared["bucket"]), opts=popts)
        out[p.name] = ctx.export(p, region, zones[p.name], comp)
    return out


"""A GCP region of the stack's Pulumi program: the pools turned into component arguments."""

from __future__ import annotations

import ipaddress

import pulumi

from gpufleet.clouds.gcp import components as mod
from gpufleet.clouds.gcp.rules import image_path
from gpufleet.clouds.gcp.tags import labels
from gpufleet.clouds.pools import StorageArgs, resource_name

# GPUDirect-TCPX GPU NIC networks are VPCs of their own; their subnets come from here.
TCPX_BLOCK = "172.16.0.0/12"


def tcpx_cidrs(region_index: int) -> list[str]:
    """The four GPU NIC subnets of the ``region_index``-th region of the stack."""
    subnets = list(ipaddress.ip_network(TCPX_BLOCK).subnets(new_prefix=20))
    return [str(subnets[region_index * 4 + i]) for i in range(4)]


def _any_managed_lustre(stack) -> bool:
    """Whether some GCP pool of the whole stack creates Managed Lustre (the VPC, made with the
    first region, then needs private services access)."""
    return any(p.provider == "gcp" and any(s.type == "lustre" for s in p.storage) for p in stack.pools)


def build_region(ctx, index: int, region: str, pools: list, shared: dict) -> dict[str, dict]:
    """The region's subnets and firewall rules in the stack's one VPC (created with the first
    region, kept in ``shared``), and each pool's nodes; returns each pool's exports."""
    stack, cluster = ctx.stack, ctx.cluster
    provider = mod.make_provider(region, labels(cluster.tags()), ctx.settings["gcp"]["project"])
    popts = pulumi.ResourceOptions(providers=[provider])
    existing = next((p.pool.vpc for p in pools if p.pool.vpc), None)
    net = mod.ClusterNetwork(resource_name(cluster.name, region), mod.NetworkArgs(
        cluster=cluster.name, region=region,
        subnets={p.name: p.subnet_cidr for p in pools if not p.pool.subnet},
        ssh_cidrs=stack.access.ssh_cidrs, cluster_cidr=stack.network.cidr, tags=cluster.tags(),
        tcpx=any(p.fabric == "tcpx" for p in pools), tcpx_cidrs=tcpx_cidrs(index),
        existing_network=existing, create_network="network" not in shared,
        network_id=shared.get("network"), managed_lustre=_any_managed_lustre(stack),
        iap=stack.access.via == "cloud"), opts=popts)
    shared.setdefault("network", net.network_id)
    shared.setdefault("private_services", net.private_services)
    if "bucket" not in shared:  # the stack's one bucket, in its first GCP region
        shared["bucket"] = mod.ClusterBucket(resource_name(cluster.name, "gcs"), cluster.name, region,
                                             ctx.settings["gcp"]["project"], labels(cluster.tags()), opts=popts).name
    out = {}
    for p in pools:
        zone = p.pool.zone or mod.zone_for(region, p.instance.base_machine, provider)
        comp = mod.GpuNodePool(resource_name(cluster.name, p.name), mod.PoolArgs(
            cluster=cluster.name, pool=p.name, machine_type=p.instance.base_machine, gpu=p.instance.gpu,
            gpu_count=p.instance.gpu_count, gpu_attach=p.instance.gpu_attach, nodes=p.pool.nodes,
            zone=zone, region=region, image=image_path(p.pool.image),
            subnet_id=p.pool.subnet or net.subnet_ids[p.name], network_id=net.network_id,
            labels=labels(cluster.tags(p.name)), gpu_subnet_ids=net.gpu_subnet_ids if p.fabric == "tcpx" else [],
            private_services=shared["private_services"], bucket=shared["bucket"],
            ssh_user=stack.access.user, public_key=stack.access.public_key, spot=p.pool.spot,
            public_ip=p.pool.public_ip, root_disk_gb=p.pool.root_disk_gb,
            storage=[StorageArgs.of(s) for s in p.pool.storage], project=ctx.settings["gcp"]["project"],
            reservation=p.reservation.id if p.reservation else None,
            flex_start=(round(p.pool.flex_start.run_hours * 3600), p.pool.flex_start.wait_minutes * 60)
            if p.pool.flex_start else None, metadata=stack.metadata_of(p.pool),
            monitor=stack.monitor_pool() is p.pool), opts=popts)
        out[p.name] = ctx.export(p, region, zone, comp)
    return out

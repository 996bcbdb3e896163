"""AWS GPU node pools as Pulumi components (pulumi-aws).

``ClusterNetwork`` is the per-region bootstrap (VPC, subnets, NAT, the cluster security
group, the key pair); ``ClusterBucket`` the stack's S3 bucket the nodes configure themselves
from (one per stack, in its first AWS region); ``GpuNodePool`` is one pool (placement group,
instance profile with the one bucket policy it needs, launch template with EFA interfaces and
the bootstrap as user data on the AMI its cluster's first `up` in the region found (``ami.PinnedAmi``), one
instant EC2 Fleet for all its nodes, replaced rather than modified (``nodes.FleetNodes`` reads
them back), optional FSx for Lustre): a pool's resources do not grow with its nodes. Loaded through ``aws.sdk`` by
``aws.program`` when a stack has AWS pools.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from gpufleet.clouds import bootstrap
from gpufleet.clouds.aws import access, monitoring
from gpufleet.clouds.aws.pool_vms import FleetNodes
from gpufleet.clouds.aws.rules import STORAGE
from gpufleet.clouds.pools import StorageArgs, first_zone, resource_name


def network_interfaces(efa: int, subnet_id, sg_id, public_ip: bool) -> list[dict]:
    """Launch-template interfaces: an ENA primary and ``efa`` EFA-only devices, one per card.

    AWS's recommended layout for instances with several network cards: the primary ENA
    interface at card 0 / device 0, an EFA-only interface at card 0 / device 1, and an
    EFA-only interface at device 0 of every further card (p4d: 4 cards, p5: 32).
    https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html
    """
    primary = {"network_card_index": 0, "device_index": 0, "subnet_id": subnet_id,
               "security_groups": [sg_id], "delete_on_termination": "true",
               "associate_public_ip_address": "true" if public_ip else "false"}
    out = [primary]
    for card in range(efa):
        out.append({"network_card_index": card, "device_index": 1 if card == 0 else 0,
                    "interface_type": "efa-only", "subnet_id": subnet_id,
                    "security_groups": [sg_id], "delete_on_termination": "true"})
    return out


def lustre_user_data(mounts: list[tuple[str, str, str]]) -> str:
    """Shell lines (the bootstrap runs them first): install the FSx Lustre client and mount every
    file system at boot.

    ``mounts``: (DNS name, mount name, mount point) of each. Follows the FSx for Lustre guide's
    Ubuntu steps (signed repository key, then lustre-client-modules for the running kernel) and
    mounts with ``relatime,flock`` and ``_netdev`` (without it a boot can hang on the mount).
    https://docs.aws.amazon.com/fsx/latest/LustreGuide/install-lustre-client.html
    """
    return "\n".join([
        "if command -v apt-get >/dev/null; then",
        "  install -d /usr/share/keyrings",
        "  curl -fsSL https://fsx-lustre-client-repo-public-keys.s3.amazonaws.com/fsx-ubuntu-public-key.asc"
        " | gpg --dearmor -o /usr/share/keyrings/fsx-ubuntu-public-key.gpg",
        '  echo "deb [signed-by=/usr/share/keyrings/fsx-ubuntu-public-key.gpg]'
        ' https://fsx-lustre-client-repo.s3.amazonaws.com/ubuntu $(. /etc/os-release; echo $VERSION_CODENAME) main"'
        " > /etc/apt/sources.list.d/fsxlustreclientrepo.list",
        "  apt-get update && apt-get install -y lustre-client-modules-$(uname -r)",
        "else",
        "  dnf install -y lustre-client",
        "fi",
        *(line for dns_name, mount_name, mount_point in mounts for line in (
            f"mkdir -p {mount_point}",
            f'grep -q " {mount_point} lustre " /etc/fstab || echo "{dns_name}@tcp:/{mount_name} {mount_point} lustre '
            'defaults,relatime,flock,_netdev,x-systemd.automount 0 0" >> /etc/fstab',
            f"mount {mount_point} || true  # the automount mounts it on first use")),
        "",
    ])


@dataclass
class NetworkArgs:
    cluster: str
    region: str
    cidr: str  # the VPC block
    public_cidr: str  # subnet for the NAT gateway (and nodes with public IPs)
    nat_zone: pulumi.Input[str]  # where a new region's NAT goes; kept there after (ClusterNetwork)
    ssh_cidrs: list[str]
    public_key: str | None
    tags: dict[str, str]
    existing_vpc: str | None = None


class ClusterNetwork(pulumi.ComponentResource):
    """VPC, public subnet with NAT for egress, route tables, the cluster security group, key pair."""

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpufleet:aws:ClusterNetwork", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        t = args.tags
        if args.existing_vpc:
            self.vpc_id = pulumi.Output.from_input(args.existing_vpc)
            self.private_route_table_id = None
            self.public_route_table_id = None
        else:
            vpc = aws.ec2.Vpc(f"{name}-vpc", cidr_block=args.cidr, enable_dns_support=True,
                              enable_dns_hostnames=True, tags={**t, "Name": f"{args.cluster}-{args.region}"}, opts=child)
            self.vpc_id = vpc.id
            igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id, tags=t, opts=child)
            # The NAT's subnet stays in the zone the region's first `up` gave it (its first pool's, so
            # that pool's egress stays in its zone): an availability zone is ForceNew on a subnet, and a
            # replacement (create before delete, the same CIDR) is refused by EC2 with
            # InvalidSubnet.Conflict, which would stop capacity failover moving that pool to another zone
            public = aws.ec2.Subnet(f"{name}-public", vpc_id=vpc.id, cidr_block=args.public_cidr,
                                    availability_zone=args.nat_zone, map_public_ip_on_launch=False,
                                    tags={**t, "Name": f"{args.cluster}-public"},
                                    opts=pulumi.ResourceOptions(parent=self, ignore_changes=["availability_zone"]))
            public_rt = aws.ec2.RouteTable(f"{name}-public-rt", vpc_id=vpc.id,
                                           routes=[{"cidr_block": "0.0.0.0/0", "gateway_id": igw.id}], tags=t, opts=child)
            aws.ec2.RouteTableAssociation(f"{name}-public-rta", subnet_id=public.id, route_table_id=public_rt.id, opts=child)
            eip = aws.ec2.Eip(f"{name}-nat-ip", domain="vpc", tags=t, opts=child)
            nat = aws.ec2.NatGateway(f"{name}-nat", allocation_id=eip.id, subnet_id=public.id, tags=t,
                                     opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]))
            private_rt = aws.ec2.RouteTable(f"{name}-private-rt", vpc_id=vpc.id,
                                            routes=[{"cidr_block": "0.0.0.0/0", "nat_gateway_id": nat.id}], tags=t, opts=child)
            self.private_route_table_id = private_rt.id
            self.public_route_table_id = public_rt.id

        # One group for every node of the cluster in this region: all traffic between members
        # (EFA and NCCL need it, FSx for Lustre too), SSH only from the configured blocks.
        sg = aws.ec2.SecurityGroup(f"{name}-sg", vpc_id=self.vpc_id, description=f"gpufleet cluster {args.cluster}",
                                   tags={**t, "Name": f"{args.cluster}-nodes"}, opts=child)
        self.security_group_id = sg.id
        aws.vpc.SecurityGroupIngressRule(f"{name}-sg-self-in", security_group_id=sg.id, ip_protocol="-1",
                                         referenced_security_group_id=sg.id, description="all traffic inside the cluster",
                                         tags=t, opts=child)
        aws.vpc.SecurityGroupEgressRule(f"{name}-sg-self-out", security_group_id=sg.id, ip_protocol="-1",
                                        referenced_security_group_id=sg.id, description="all traffic inside the cluster (EFA)",
                                        tags=t, opts=child)
        aws.vpc.SecurityGroupEgressRule(f"{name}-sg-egress", security_group_id=sg.id, ip_protocol="-1",
                                        cidr_ipv4="0.0.0.0/0", description="outbound (packages, datasets)", tags=t, opts=child)
        for i, cidr in enumerate(args.ssh_cidrs):
            aws.vpc.SecurityGroupIngressRule(f"{name}-sg-ssh-{i}", security_group_id=sg.id, ip_protocol="tcp",
                                             from_port=22, to_port=22, cidr_ipv4=cidr, description="SSH",
                                             tags=t, opts=child)
        self.key_name = None
        if args.public_key:
            kp = aws.ec2.KeyPair(f"{name}-key", key_name=resource_name(args.cluster, args.region),
                                 public_key=args.public_key, tags=t, opts=child)
            self.key_name = kp.key_name
        self.register_outputs({"vpc_id": self.vpc_id, "security_group_id": sg.id})


class ClusterBucket(pulumi.ComponentResource):
    """The stack's private, encrypted bucket: the Salt tree, each pool's configuration, the nodes'
    statuses. Emptied by `down` and `reap` before it is deleted (``force_destroy`` stays off)."""

    def __init__(self, name: str, cluster: str, tags: dict[str, str], opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpufleet:aws:ClusterBucket", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        # names are global: a prefix (at most 37 characters) and S3's unique suffix
        b = aws.s3.Bucket(f"{name}-bucket", bucket_prefix=resource_name("gpufleet", cluster, limit=36) + "-",
                          tags=tags, opts=child)
        aws.s3.BucketPublicAccessBlock(f"{name}-private", bucket=b.id, block_public_acls=True,
                                       block_public_policy=True, ignore_public_acls=True,
                                       restrict_public_buckets=True, opts=child)
        aws.s3.BucketServerSideEncryptionConfiguration(f"{name}-encryption", bucket=b.id, rules=[
            {"apply_server_side_encryption_by_default": {"sse_algorithm": "AES256"}}], opts=child)
        self.name, self.arn = b.bucket, b.arn
        self.register_outputs({"bucket": b.bucket})


# IMDSv2's PUT answers travel this many hops: 1 keeps the node role's credentials on the node itself,
# out of a container on a bridge network (EC2 User Guide, "Instance metadata access considerations":
# "In a container environment, we recommend setting the hop limit to 2" only where containers need it)
IMDS_HOP_LIMIT = 1


def bucket_policy(bucket_arn: str, pool: str) -> str:
    """What a pool's nodes may do with the bucket: read the Salt trees and their pool's
    configuration, and write one status object, whose key is their own ``aws:userid`` (the role
    id and the instance id, for an EC2 instance role: IAM User Guide, "IAM policy elements:
    Variables and tags", 2026). Nothing else: no listing, no other pool, no deletion."""
    return json.dumps({"Version": "2012-10-17", "Statement": [
        {"Sid": "ReadTreesAndPool", "Effect": "Allow", "Action": "s3:GetObject",
         "Resource": [f"{bucket_arn}/tree/*", f"{bucket_arn}/pools/{pool}/*"]},
        {"Sid": "WriteOwnStatus", "Effect": "Allow", "Action": "s3:PutObject",
         "Resource": f"{bucket_arn}/status/{pool}/${{aws:userid}}.json"}]})


@dataclass
class NodeConfig:
    """Where a pool's nodes find their configuration: the stack's bucket (name, ARN, region) and,
    for an S3-compatible store, its endpoint; EC2's endpoint where it is not AWS's own (the monitor's lister)."""

    bucket: pulumi.Input[str]
    bucket_arn: pulumi.Input[str]
    region: str
    endpoint: str | None = None
    ec2_endpoint: str | None = None


@dataclass
class PoolArgs:
    cluster: str
    pool: str
    instance_type: str
    nodes: int
    efa_interfaces: int  # 0 unless the pool asks for EFA; the count comes from the catalog
    zone: pulumi.Input[str]
    subnet_cidr: str
    image: pulumi.Input[str]  # an AMI id: the pool's own, or its image name's pinned for the region (ami.PinnedAmi)
    vpc_id: pulumi.Input[str]
    security_group_id: pulumi.Input[str]
    route_table_id: pulumi.Input[str] | None
    tags: dict[str, str]
    key_name: pulumi.Input[str] | None = None
    existing_subnet: str | None = None
    spot: bool = False
    on_demand_fallback: bool = False  # a spot pool whose failover.spot_fallback launches on-demand from its template
    reservation: str | None = None  # cr-...: an On-Demand Capacity Reservation or a Capacity Block to launch into
    capacity_block: bool = False  # the reservation is a Capacity Block for ML
    region: str = ""
    public_ip: bool = False
    root_disk_gb: int = 200
    storage: list[StorageArgs] = field(default_factory=list)
    node_config: NodeConfig | None = None
    session_manager: bool = False  # the nodes are reached through Session Manager (clouds.aws.access)
    imds_hop_limit: int = 1  # the instance metadata service's hop limit (spec Pool.imds_hop_limit)
    metadata: str = "root"  # who on the node reaches it (spec Access.metadata: root or all-users)
    monitor: bool = False  # its first node runs Prometheus, which lists the cluster's instances (spec monitor_pool)


class GpuNodePool(pulumi.ComponentResource):
    """One pool of identical GPU nodes in one zone."""

    def __init__(self, name: str, args: PoolArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpufleet:aws:GpuNodePool", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        t = args.tags
        if args.existing_subnet:
            subnet_id = pulumi.Output.from_input(args.existing_subnet)
        else:
            subnet = aws.ec2.Subnet(f"{name}-subnet", vpc_id=args.vpc_id, cidr_block=args.subnet_cidr,
                                    availability_zone=args.zone, map_public_ip_on_launch=False,
                                    tags={**t, "Name": name}, opts=child)
            aws.ec2.RouteTableAssociation(f"{name}-rta", subnet_id=subnet.id, route_table_id=args.route_table_id, opts=child)
            subnet_id = subnet.id

        placement = None
        if args.nodes > 1:
            pg = aws.ec2.PlacementGroup(f"{name}-pg", strategy="cluster", tags=t, opts=child)
            placement = {"group_name": pg.name}

        # IAM names are account-wide and at most 64 characters: Pulumi's auto-name of a long pool's
        # role (logical name + 8) would pass that, so the role is named for its cluster and pool
        role = aws.iam.Role(f"{name}-role", name=resource_name(args.cluster, args.pool, limit=64),
                            assume_role_policy=json.dumps({
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}],
        }), description=f"gpufleet {args.cluster}/{args.pool} nodes; attach data-access policies here", tags=t, opts=child)
        profile = aws.iam.InstanceProfile(f"{name}-profile", role=role.name, tags=t, opts=child)
        if args.session_manager:  # what SSM Agent needs to take Session Manager sessions, and nothing more
            aws.iam.RolePolicy(f"{name}-ssm", role=role.id, name="gpufleet-session-manager",
                               policy=json.dumps(access.NODE_POLICY), opts=child)
        if args.monitor:  # Prometheus's EC2 discovery: this one action, and nothing more (clouds.aws.monitoring)
            aws.iam.RolePolicy(f"{name}-discovery", role=role.id, name="gpufleet-prometheus-discovery",
                               policy=json.dumps(monitoring.discovery_policy()), opts=child)
        nc = args.node_config
        if nc:
            aws.iam.RolePolicy(f"{name}-bucket", role=role.id, name="gpufleet-configuration",
                               policy=pulumi.Output.from_input(nc.bucket_arn).apply(
                                   lambda arn: bucket_policy(arn, args.pool)), opts=child)

        self.file_systems = []
        mounts = []
        for i, st in enumerate(args.storage):
            if st.type != "lustre":
                continue  # NFS and local NVMe are mounted by the Salt states
            fs = aws.fsx.LustreFileSystem(
                f"{name}-fsx{i}", deployment_type="PERSISTENT_2", storage_type="SSD",
                storage_capacity=STORAGE.lustre(st)[1],
                per_unit_storage_throughput=st.throughput_mbps_per_tib or STORAGE.default_tier,
                data_compression_type="LZ4",
                subnet_ids=subnet_id,  # one subnet: a string in pulumi-aws 7
                # the nodes' group: it admits all traffic between members, Lustre's TCP 988 and
                # 1018-1023 included (without it FSx takes the VPC's default group and /fsx never mounts)
                security_group_ids=[args.security_group_id],
                tags={**t, "Name": f"{name}-{i}"}, opts=child)
            self.file_systems.append(fs)
            mounts.append(pulumi.Output.all(fs.dns_name, fs.mount_name, st.mount))
        user_data = None
        if nc:  # the bootstrap mounts the file systems, then configures the node from the bucket
            user_data = pulumi.Output.all(nc.bucket, pulumi.Output.all(*mounts)).apply(
                lambda v: base64.b64encode(bootstrap.render(
                    bootstrap.config("aws", cluster=args.cluster, pool=args.pool, bucket=v[0], region=nc.region,
                                     endpoint=nc.endpoint, ec2_endpoint=nc.ec2_endpoint,
                                     metadata=args.metadata),
                    pre=lustre_user_data([tuple(m) for m in v[1]]) if v[1] else "").encode()).decode())

        reservation = market = None
        if args.reservation:
            reservation = {"capacity_reservation_target": {"capacity_reservation_id": args.reservation}}
            if args.capacity_block:  # MarketType capacity-block (ec2-fleet-launch-instances-capacity-blocks-walkthrough)
                market = {"market_type": "capacity-block"}
        # the subnet stays in the template's interfaces and the fleet overrides none: an override's
        # SubnetId makes EC2 Fleet ignore the template's NetworkInterfaces, EFA ones included
        # (aws/karpenter-provider-aws#3819, the EC2 Fleet team's answer). Spot or On-Demand is the
        # fleet's own choice (its target capacity type), not the template's market options.
        lt = aws.ec2.LaunchTemplate(
            f"{name}-lt", image_id=args.image, instance_type=args.instance_type, key_name=args.key_name,
            iam_instance_profile={"arn": profile.arn},
            metadata_options={"http_endpoint": "enabled", "http_tokens": "required",
                              "http_put_response_hop_limit": args.imds_hop_limit, "instance_metadata_tags": "enabled"},
            block_device_mappings=[{"device_name": "/dev/sda1", "ebs": {
                "volume_size": args.root_disk_gb, "volume_type": "gp3", "encrypted": "true",
                "delete_on_termination": "true"}}],
            network_interfaces=network_interfaces(args.efa_interfaces, subnet_id, args.security_group_id, args.public_ip),
            placement=placement, capacity_reservation_specification=reservation, instance_market_options=market,
            user_data=user_data,
            tag_specifications=[{"resource_type": kind, "tags": t}
                                for kind in ("instance", "volume", "network-interface")]
            # a template that tags spot-instances-request cannot launch on-demand ("If the instance does not
            # include the resource type that you specify, the instance launch fails": botocore 1.44.8's EC2 model,
            # LaunchTemplateTagSpecificationRequest.ResourceType; EC2 says "You cannot specify tags for Spot
            # instances requests if there are no Spot instances requests being created by the request",
            # github-aws-runners/terraform-aws-github-runner#4561, read 2026-11): a pool with a spot_fallback
            # leaves it out, its instances, volumes and interfaces keep their tags
            + ([{"resource_type": "spot-instances-request", "tags": t}]
               if args.spot and not args.on_demand_fallback else []),
            update_default_version=True, tags=t, opts=child)

        # An instant fleet is never modified: terraform-provider-aws updates an aws_ec2_fleet in place
        # (ModifyFleet) for any change but its tags, only `type` and a few capacity fields being ForceNew
        # (internal/service/ec2/ec2_fleet.go, resourceFleetUpdate), and EC2 modifies only fleets of type
        # maintain (API_ModifyFleet.html, read 2026-11). So a change of any input the request carries
        # (its instance type, zone, size, market, reservation) replaces the fleet and every node of it,
        # the old one deleted first; `up` shows that and asks first, and terminates the old nodes before
        # the new fleet is asked for (fleet.up, nodes.cloud.release). A launch template change is none
        # of these: the fleet names the template's default version, not a number (fleet_request).
        request = fleet_request(args, lt)
        fleet = aws.ec2.Fleet(f"{name}-fleet", **request, tags=t, opts=pulumi.ResourceOptions(
            parent=self, replace_on_changes=[k for k in request if k != "type"], delete_before_replace=True))
        nodes = FleetNodes(f"{name}-nodes", fleet_id=fleet.id, region=args.region, nodes=args.nodes,
                           subnet_id=subnet_id, public=args.public_ip, opts=child)
        self.bucket = {"cloud": "aws", "name": nc.bucket, "region": nc.region,
                       **({"endpoint": nc.endpoint} if nc.endpoint else {})} if nc else None
        self.node_ids, self.private_ips = nodes.node_ids, nodes.private_ips
        self.public_ips = nodes.public_ips if args.public_ip else None
        self.ssh_endpoint = (self.public_ips if args.public_ip else self.private_ips).apply(lambda ips: f"{ips[0]}:22")
        self.register_outputs({"node_ids": self.node_ids, "private_ips": self.private_ips,
                               "ssh_endpoint": self.ssh_endpoint,
                               **({"public_ips": self.public_ips} if self.public_ips is not None else {})})


def fleet_request(args: PoolArgs, lt) -> dict:
    """The pool as one all-or-nothing CreateFleet: type ``instant`` (one synchronous request, no
    fleet left to maintain), one instance type in one zone, and a minimum target capacity of all the
    pool's nodes, below which EC2 launches none (``MinTargetCapacity``: "supported only for fleets of
    type instant", with SingleAvailabilityZone or SingleInstanceType;
    https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_OnDemandOptionsRequest.html and
    API_SpotOptionsRequest.html). Deleting an instant fleet terminates its instances
    (API_DeleteFleets.html), so ``terminate_instances`` is set: pulumi-aws passes it to DeleteFleets.
    ``lt``: the pool's launch template, named by id at its default version."""
    market = "spot" if args.spot else "on-demand"
    whole = {"min_target_capacity": args.nodes, "single_availability_zone": True, "single_instance_type": True}
    if args.capacity_block:
        # a Capacity Block: target capacity type capacity-block, and no OnDemandOptions (its
        # CapacityReservationOptions "throws an exception"; ec2-fleet-launch-instances-capacity-blocks-
        # walkthrough.html). A block short of the pool fails FleetNodes' count like any refusal.
        market, options = "capacity-block", {}
    elif args.spot:
        options = {"spot_options": {**whole, "allocation_strategy": "capacity-optimized",
                                    "instance_interruption_behavior": "terminate"}}
    else:
        # an On-Demand Capacity Reservation named in the template: used first, and with MinTargetCapacity
        # a reservation short of the pool launches nothing (ec2-fleet-on-demand-capacity-reservations.html)
        reserved = {"capacity_reservation_options": {"usage_strategy": "use-capacity-reservations-first"}} \
            if args.reservation else {}
        options = {"on_demand_options": {**whole, "allocation_strategy": "lowest-price", **reserved}}
    return dict(type="instant", terminate_instances=True,
                # "$Default" (FleetLaunchTemplateSpecificationRequest: "The launch template version number,
                # $Latest, or $Default"), which update_default_version moves to each new version: a changed
                # template (user data, root disk, AMI) leaves the running fleet as it is, and its running
                # nodes keep the version they booted (they take configuration from the bucket)
                launch_template_configs=[{
                    "launch_template_specification": {"launch_template_id": lt.id, "version": "$Default"},
                    "overrides": [{"instance_type": args.instance_type, "availability_zone": args.zone}]}],
                target_capacity_specification={"default_target_capacity_type": market,
                                               "total_target_capacity": args.nodes},
                **options)


def zone_for(region: str, instance_type: str, provider) -> pulumi.Output[str]:
    """The first zone of the region that offers the instance type, asked of EC2."""
    zones = aws.ec2.get_instance_type_offerings_output(
        location_type="availability-zone", filters=[{"name": "instance-type", "values": [instance_type]}],
        opts=pulumi.InvokeOptions(provider=provider))
    return zones.locations.apply(lambda z: first_zone(z, f"no zone of {region} offers {instance_type}"))


def make_provider(region: str, tags: dict[str, str]):
    return aws.Provider(f"aws-{region}", region=region, default_tags={"tags": tags})



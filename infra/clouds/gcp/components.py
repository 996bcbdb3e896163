"""GCP GPU node pools as Pulumi components (pulumi-gcp).

``ClusterNetwork``: a custom-mode VPC (MTU 8896, the largest, which Managed Lustre's docs
recommend), Cloud NAT for egress, firewall rules (all traffic inside the cluster, SSH only
from the configured blocks), private services access for Managed Lustre with the rule that
admits its TCP 988 (once per network), and, when a pool uses GPUDirect-TCPX, the four extra
GPU networks an a3-highgpu-8g needs. ``GpuNodePool``: compact placement where the machine
series supports it (at most 150 VMs a policy), and all its VMs in one all-or-nothing
``bulkInsert`` per policy, each policy made with its VMs (``nodes.BulkInstances``: gVNIC, guest accelerators where the machine
type needs them, ``onHostMaintenance=TERMINATE``, spot provisioning), so a pool's resources do not
grow with its nodes; optional Filestore / Managed Lustre in the
sizes each sells (``rules.STORAGE``).

``ClusterBucket``: the stack's GCS bucket the nodes configure themselves from (uniform access,
public access prevented, no soft delete); each pool's nodes run as a service account of their
own that may read the Salt trees and their pool's configuration and write their pool's
statuses (IAM conditions on the object names), and get the bootstrap as ``startup-script``.

Every resource has an explicit GCP name of at most 63 characters (``gcp_name``): pulumi-gcp's
own names (logical name + 8 characters) are not shortened and a long cluster name would make
GCP refuse them. GCP networks, subnets, firewalls and routers take no labels: their names start
with the cluster name and their descriptions carry the gpufleet tags, so the lifecycle
commands still find them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

from gpufleet.clouds import bootstrap
from gpufleet.clouds.gcp import access, flexstart, monitoring
from gpufleet.clouds.gcp.flexstart import FlexNodes
from gpufleet.clouds.gcp.pool_vms import BulkInstances, kept_request, placement_policy
from gpufleet.clouds.gcp.rules import (
    ACCELERATORS,
    LUSTRE_PORTS,
    MAX_COMPACT_VMS,
    MTU,
    PSA_PREFIX,
    STORAGE,
    TCPX_MTU,
    boot_disk_type,
    compact_placement,
    gcp_name,
    reservation_bound,
    scheduling,
)
from gpufleet.clouds.gcp.tags import describe
from gpufleet.clouds.pools import StorageArgs, first_zone, resource_name

# GPUDirect-TCPX on a3-highgpu-8g: one host NIC plus four GPU NICs, each in its own VPC with
# MTU 8244. https://cloud.google.com/compute/docs/gpus/gpudirect
TCPX_GPU_NICS = 4



@dataclass
class NetworkArgs:
    cluster: str
    region: str
    subnets: dict[str, str]  # purpose (pool name) -> CIDR, in this region
    ssh_cidrs: list[str]
    cluster_cidr: str  # every subnet of the cluster, for the internal firewall rule
    tags: dict[str, str]
    tcpx: bool = False
    tcpx_cidrs: list[str] = field(default_factory=list)
    existing_network: str | None = None
    create_network: bool = True  # False for the second region of the same VPC
    network_id: pulumi.Input[str] | None = None
    managed_lustre: bool = False  # some pool of the stack creates Managed Lustre: private services access
    iap: bool = False  # SSH through IAP TCP forwarding (clouds.gcp.access): admit IAP's range on TCP 22


class ClusterNetwork(pulumi.ComponentResource):
    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpufleet:gcp:ClusterNetwork", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        desc = describe(args.tags)
        if args.existing_network:
            self.network_id = pulumi.Output.from_input(args.existing_network)
            self.network_name = self.network_id
        elif args.create_network:
            net = gcp.compute.Network(f"{name}-vpc", name=gcp_name(args.cluster), auto_create_subnetworks=False,
                                      routing_mode="REGIONAL", mtu=MTU, description=desc, opts=child)
            self.network_id, self.network_name = net.id, net.name
            gcp.compute.Firewall(f"{name}-internal", name=gcp_name(args.cluster, "internal"), network=net.id,
                                 direction="INGRESS", priority=1000, allows=[{"protocol": "all"}],
                                 source_ranges=[args.cluster_cidr],
                                 description=desc + " all traffic inside the cluster", opts=child)
            if args.ssh_cidrs:
                gcp.compute.Firewall(f"{name}-ssh", name=gcp_name(args.cluster, "ssh"), network=net.id,
                                     direction="INGRESS", priority=1000, allows=[{"protocol": "tcp", "ports": ["22"]}],
                                     source_ranges=args.ssh_cidrs, description=desc + " SSH", opts=child)
            if args.iap:  # IAP's forwarders to the cluster's VMs (their network tag) on SSH, no one else
                gcp.compute.Firewall(f"{name}-iap", name=gcp_name(args.cluster, "iap"), network=net.id,
                                     direction="INGRESS", priority=1000, allows=[{"protocol": "tcp", "ports": ["22"]}],
                                     source_ranges=[access.IAP_RANGE], target_tags=[gcp_name(args.cluster)],
                                     description=desc + " SSH through IAP TCP forwarding", opts=child)
            if args.managed_lustre:
                self.private_services = _private_services(name, args, net, desc, child)
        else:
            self.network_id = pulumi.Output.from_input(args.network_id)
            self.network_name = self.network_id
        if not hasattr(self, "private_services"):
            self.private_services = None  # another region's network made it, or the network is the user's
        self.subnet_ids: dict[str, pulumi.Output] = {}
        if not args.existing_network:
            for purpose, cidr in args.subnets.items():
                sub = gcp.compute.Subnetwork(f"{name}-{purpose}", name=gcp_name(args.cluster, args.region, purpose),
                                             network=self.network_id, region=args.region, ip_cidr_range=cidr,
                                             private_ip_google_access=True, description=desc, opts=child)
                self.subnet_ids[purpose] = sub.id
            router = gcp.compute.Router(f"{name}-router", name=gcp_name(args.cluster, args.region, "router"),
                                        network=self.network_id, region=args.region, description=desc, opts=child)
            gcp.compute.RouterNat(f"{name}-nat", name=gcp_name(args.cluster, args.region, "nat"), router=router.name,
                                  region=args.region, nat_ip_allocate_option="AUTO_ONLY",
                                  source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES", opts=child)
        self.gpu_subnet_ids: list[pulumi.Output] = []
        if args.tcpx:
            for i in range(TCPX_GPU_NICS):
                gnet = gcp.compute.Network(f"{name}-gpunet{i}", name=gcp_name(args.cluster, args.region, f"gpunet{i}"),
                                           auto_create_subnetworks=False, mtu=TCPX_MTU,
                                           description=desc + f" GPUDirect-TCPX NIC {i + 1}", opts=child)
                gsub = gcp.compute.Subnetwork(f"{name}-gpusub{i}", name=gcp_name(args.cluster, args.region, f"gpusub{i}"),
                                              network=gnet.id, region=args.region, ip_cidr_range=args.tcpx_cidrs[i],
                                              description=desc, opts=child)
                gcp.compute.Firewall(f"{name}-gpunet{i}-internal",
                                     name=gcp_name(args.cluster, args.region, f"gpunet{i}", "internal"),
                                     network=gnet.id, direction="INGRESS", allows=[{"protocol": "all"}],
                                     source_ranges=[args.tcpx_cidrs[i]], description=desc, opts=child)
                self.gpu_subnet_ids.append(gsub.id)
        self.register_outputs({"network_id": self.network_id})


class ClusterBucket(pulumi.ComponentResource):
    """The stack's private bucket: the Salt tree, each pool's configuration, the nodes' statuses."""

    def __init__(self, name: str, cluster: str, region: str, project: str, labels: dict[str, str],
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpufleet:gcp:ClusterBucket", name, None, opts)
        # bucket names are global: the cluster's name and a digest of the project it lives in
        unique = hashlib.sha1(f"{project}/{cluster}".encode()).hexdigest()[:8]
        b = gcp.storage.Bucket(f"{name}-bucket", name=resource_name("gpufleet", cluster, limit=54) + "-" + unique,
                               location=region.upper(), uniform_bucket_level_access=True,
                               public_access_prevention="enforced", soft_delete_policy={"retention_duration_seconds": 0},
                               force_destroy=False, labels=labels, opts=pulumi.ResourceOptions(parent=self))
        self.name = b.name
        self.register_outputs({"bucket": b.name})


def bucket_access(bucket: str, pool: str) -> dict[str, str]:
    """Role -> IAM condition of what a pool's service account may do in the bucket: read the Salt
    trees and its pool's configuration, create and replace its pool's statuses. GCS conditions
    match object names as ``projects/_/buckets/<bucket>/objects/<name>`` (Cloud Storage IAM
    conditions, cloud.google.com/storage/docs/access-control/iam#conditions, 2026)."""
    obj = f"projects/_/buckets/{bucket}/objects/"
    return {"roles/storage.objectViewer": f'resource.name.startsWith("{obj}tree/") || '
                                          f'resource.name.startsWith("{obj}pools/{pool}/")',
            "roles/storage.objectUser": f'resource.name.startsWith("{obj}status/{pool}/")'}


@dataclass
class PoolArgs:
    cluster: str
    pool: str
    machine_type: str
    gpu: str
    gpu_count: int
    gpu_attach: str  # "bundled" (A2/A3/G2) or "separate" (N1 + guest accelerators)
    nodes: int
    zone: str
    region: str
    image: str  # projects/<project>/global/images/family/<family>
    subnet_id: pulumi.Input[str]
    network_id: pulumi.Input[str]
    labels: dict[str, str]
    gpu_subnet_ids: list = field(default_factory=list)  # TCPX: four GPU NIC subnets
    private_services: object = None  # the network's private services peering (Managed Lustre waits for it)
    ssh_user: str = "ubuntu"
    public_key: str | None = None
    spot: bool = False
    public_ip: bool = False
    root_disk_gb: int = 200
    storage: list[StorageArgs] = field(default_factory=list)
    bucket: pulumi.Input[str] | None = None  # the stack's bucket: the nodes configure themselves from it
    project: str | None = None  # None: the credentials' own (as the provider's)
    reservation: str | None = None  # a specific reservation the VMs consume (name or projects/P/reservations/N)
    flex_start: tuple[int, int] | None = None  # (run, wait) seconds: DWS provisions the VMs (clouds.gcp.flexstart)
    metadata: str = "root"  # who on the node reaches the metadata server (spec Access.metadata: root or all-users)
    monitor: bool = False  # its node runs Prometheus, and lists the cluster's instances for it (spec monitor_pool)


def instance_properties(args: PoolArgs, nics: list, metadata: dict, service_account: dict | None) -> dict:
    """What every VM of the pool is, as the REST API's InstanceProperties (bulkInsert's
    ``instanceProperties``; https://cloud.google.com/compute/docs/reference/rest/v1/instances/bulkInsert)."""
    props = {
        "machineType": args.machine_type,
        "disks": [{"boot": True, "autoDelete": True,
                   "initializeParams": {"sourceImage": args.image, "diskSizeGb": str(args.root_disk_gb),
                                        "diskType": boot_disk_type(args.machine_type), "labels": args.labels}}],
        "networkInterfaces": nics,
        "scheduling": scheduling(args.spot, bool(args.reservation) and reservation_bound(args.machine_type)),
        "labels": args.labels,
        "tags": {"items": [gcp_name(args.cluster), gcp_name(args.cluster, args.pool)]},
        "metadata": {"items": [{"key": k, "value": v} for k, v in metadata.items()]},
        "shieldedInstanceConfig": {"enableSecureBoot": False, "enableVtpm": True, "enableIntegrityMonitoring": True},
    }
    if args.reservation:  # ReservationAffinity (compute/docs/instances/reservations-consume#consuming_a_specific_reservation)
        props["reservationAffinity"] = {"consumeReservationType": "SPECIFIC_RESERVATION",
                                        "key": "compute.googleapis.com/reservation-name", "values": [args.reservation]}
    if args.gpu_attach == "separate":  # N1: the GPUs are attached, not part of the machine type
        props["guestAccelerators"] = [{"acceleratorType": ACCELERATORS[args.gpu], "acceleratorCount": args.gpu_count}]
    if service_account:
        props["serviceAccounts"] = [service_account]
    return props


def _private_services(name: str, args: NetworkArgs, net, desc: str, child):
    """Private services access (Managed Lustre reaches the VPC through it): one reserved range and
    one peering per network, and the rule that admits Lustre's LNet traffic from that range.
    https://cloud.google.com/managed-lustre/docs/vpc"""
    addr = gcp.compute.GlobalAddress(f"{name}-psa", name=gcp_name(args.cluster, "psa"), purpose="VPC_PEERING",
                                     address_type="INTERNAL", prefix_length=PSA_PREFIX, network=net.id,
                                     description=desc, opts=child)
    gcp.compute.Firewall(f"{name}-lustre", name=gcp_name(args.cluster, "lustre"), network=net.id,
                         direction="INGRESS", priority=1000, allows=[{"protocol": "tcp", "ports": LUSTRE_PORTS}],
                         source_ranges=[addr.address.apply(lambda a: f"{a}/{PSA_PREFIX}")],
                         description=desc + " Managed Lustre (LNet) from the private services range", opts=child)
    return gcp.servicenetworking.Connection(f"{name}-peering", network=net.id,
                                            service="servicenetworking.googleapis.com",
                                            reserved_peering_ranges=[addr.name], opts=child)


class GpuNodePool(pulumi.ComponentResource):
    def __init__(self, name: str, args: PoolArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpufleet:gcp:GpuNodePool", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        policies: list[dict] = []
        if args.nodes > 1 and compact_placement(args.machine_type):
            # a compact policy holds at most MAX_COMPACT_VMS VMs: one per that many nodes, made with them
            policies = [placement_policy(gcp_name(args.cluster, args.pool, "compact", str(k)), describe(args.labels))
                        for k in range(-(-args.nodes // MAX_COMPACT_VMS))]
        nics = [{"subnetwork": args.subnet_id, "nicType": "GVNIC",
                 **({"accessConfigs": [{"type": "ONE_TO_ONE_NAT", "name": "External NAT"}]} if args.public_ip else {})}]
        nics += [{"subnetwork": s, "nicType": "GVNIC"} for s in args.gpu_subnet_ids]
        metadata = {"enable-oslogin": "FALSE"}
        if args.public_key:
            metadata["ssh-keys"] = f"{args.ssh_user}:{args.public_key.strip()}"
        service_account = None
        self.bucket = None
        if args.bucket is not None:
            sa = gcp.serviceaccount.Account(f"{name}-sa", account_id=resource_name("gf", args.cluster, args.pool, limit=30),
                                            display_name=f"gpufleet {args.cluster}/{args.pool} nodes", opts=child)
            member = sa.email.apply(lambda e: f"serviceAccount:{e}")
            for role in ("roles/storage.objectViewer", "roles/storage.objectUser"):
                gcp.storage.BucketIAMMember(
                    f"{name}-{role.rsplit('.', 1)[1].lower()}", bucket=args.bucket, role=role, member=member,
                    condition=pulumi.Output.from_input(args.bucket).apply(lambda b, r=role: {
                        "title": f"gpufleet pool {args.pool}"[:100], "expression": bucket_access(b, args.pool)[r]}),
                    opts=child)
            if args.monitor:  # the listing's one permission (clouds.gcp.monitoring), in a role of its own
                role = gcp.projects.IAMCustomRole(
                    f"{name}-discovery", project=args.project,
                    # named by the account's unique id: a role id stays taken up to 37 days after its role is deleted
                    # (pulumi-gcp IAMCustomRole, "soft-delete", read 2026-11-27), and a cluster may come up again sooner
                    role_id=sa.unique_id.apply(lambda u: f"gpufleet_list_{u}"),
                    title=f"gpufleet {args.cluster}/{args.pool}: list the cluster's instances"[:100],
                    permissions=list(monitoring.DISCOVERY_PERMISSIONS), opts=child)
                gcp.projects.IAMMember(f"{name}-discovery-member", project=args.project, role=role.name, member=member,
                                       opts=child)
            service_account = {"email": sa.email, "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}
            metadata["startup-script"] = pulumi.Output.from_input(args.bucket).apply(lambda b: bootstrap.render(
                bootstrap.config("gcp", cluster=args.cluster, pool=args.pool, bucket=b, metadata=args.metadata)))
            self.bucket = {"cloud": "gcp", "name": args.bucket}

        self.file_systems = []
        for i, st in enumerate(args.storage):
            if st.type == "lustre":
                self.file_systems.append(_managed_lustre(f"{name}-lustre{i}", args, st, i, child))
            elif st.type == "nfs" and not st.server:
                self.file_systems.append(gcp.filestore.Instance(
                    f"{name}-filestore{i}", name=gcp_name(args.cluster, args.pool, f"nfs{i}"), location=args.zone,
                    tier="ZONAL", file_shares={"name": "data", "capacity_gb": STORAGE.nfs(st)},
                    networks=[{"network": args.network_id, "modes": ["MODE_IPV4"]}], labels=args.labels, opts=child))

        self.request = None  # the pool's own request, kept for heal (pool_vms.kept_request); none for flex-start
        if args.flex_start:
            self.nodes = _flex_start_nodes(name, args, metadata, service_account, child)
        else:  # all the pool's VMs in one request (per placement policy), all of them or none (clouds.gcp.pool_vms)
            properties = instance_properties(args, nics, metadata, service_account)
            self.nodes = BulkInstances(
                f"{name}-nodes", project=args.project, region=args.region, zone=args.zone,
                names=[gcp_name(args.cluster, args.pool, str(i)) for i in range(args.nodes)],
                properties=properties, policies=policies, subnet_id=args.subnet_id, public=args.public_ip,
                opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True))
            self.request = kept_request(args.zone, properties, policies)
        self.node_ids, self.private_ips = self.nodes.node_ids, self.nodes.private_ips
        self.public_ips = self.nodes.public_ips if args.public_ip else None
        ips = self.public_ips if args.public_ip else self.private_ips
        self.ssh_endpoint = ips.apply(lambda v: f"{v[0]}:22")
        self.register_outputs({"node_ids": self.node_ids, "private_ips": self.private_ips,
                               "ssh_endpoint": self.ssh_endpoint,
                               **({"public_ips": self.public_ips} if self.public_ips is not None else {})})


def _flex_start_nodes(name: str, args: PoolArgs, metadata: dict, service_account: dict | None, child) -> FlexNodes:
    """The pool on flex-start VMs: template, group at size 0, one resize request for every VM, and
    the reader that waits for them (clouds.gcp.flexstart)."""
    run_s, wait_s = args.flex_start
    desc = describe(args.labels)  # the group and the template carry no labels: reap finds them by description
    nics = [{"subnetwork": args.subnet_id, "nic_type": "GVNIC", **({"access_configs": [{}]} if args.public_ip else {})}]
    nics += [{"subnetwork": s, "nic_type": "GVNIC"} for s in args.gpu_subnet_ids]
    template = gcp.compute.InstanceTemplate(
        f"{name}-flex", name_prefix=gcp_name(args.cluster, args.pool)[:33] + "-", description=desc,
        machine_type=args.machine_type, labels=args.labels,
        disks=[{"source_image": args.image, "boot": True, "auto_delete": True, "disk_type": boot_disk_type(args.machine_type),
                "disk_size_gb": args.root_disk_gb, "labels": args.labels}],
        network_interfaces=nics, scheduling=flexstart.scheduling(run_s),
        reservation_affinity={"type": "NO_RESERVATION"},  # flex-start VMs consume no reservation
        guest_accelerators=[{"type": ACCELERATORS[args.gpu], "count": args.gpu_count}]
        if args.gpu_attach == "separate" else None,
        tags=[gcp_name(args.cluster), gcp_name(args.cluster, args.pool)], metadata=metadata,
        service_account=service_account,
        shielded_instance_config={"enable_secure_boot": False, "enable_vtpm": True, "enable_integrity_monitoring": True},
        opts=child)
    group = gcp.compute.InstanceGroupManager(
        f"{name}-group", name=gcp_name(args.cluster, args.pool), zone=args.zone, description=desc,
        base_instance_name=gcp_name(args.cluster, args.pool)[:54],
        versions=[{"instance_template": template.self_link_unique}],
        instance_lifecycle_policy={"default_action_on_failure": "DO_NOTHING"}, wait_for_instances=False,
        # the resize request sets the group's size; Pulumi must not set it back
        opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(ignore_changes=["targetSize"])))
    request = gcp.compute.ResizeRequest(
        f"{name}-request", name=gcp_name(args.cluster, args.pool, "flex"), zone=args.zone,
        instance_group_manager=group.name, description=desc, resize_by=args.nodes,
        requested_run_duration={"seconds": str(run_s)}, opts=child)
    return FlexNodes(f"{name}-nodes", project=args.project, zone=args.zone, group=group.name, request=request.name,
                     nodes=args.nodes, wait_s=wait_s, subnet_id=args.subnet_id, public=args.public_ip, opts=child)


def _managed_lustre(name: str, args: PoolArgs, st: StorageArgs, i: int, child):
    """Google Cloud Managed Lustre, in the size its tier sells (``rules.STORAGE``); it reaches the VPC
    through the network's private services access (``args.private_services``, waited for)."""
    return gcp.lustre.Instance(
        name, instance_id=gcp_name(args.cluster, args.pool, f"lustre{i}"), location=args.zone, filesystem="lustre",
        capacity_gib=str(STORAGE.lustre(st)[1]), network=args.network_id,
        per_unit_storage_throughput=str(st.throughput_mbps_per_tib or STORAGE.default_tier), labels=args.labels,
        opts=pulumi.ResourceOptions(parent=child.parent,
                                    depends_on=[args.private_services] if args.private_services else None))


def zone_for(region: str, machine_type: str, provider) -> pulumi.Output[str]:
    """The first zone of the region that is up, asked of Compute Engine.

    Compute Engine's zone list does not say which zones have a GPU model; a pool that
    needs a particular zone names it (``zone:``), as the examples do for a3-highgpu-8g.
    """
    zones = gcp.compute.get_zones_output(region=region, status="UP", opts=pulumi.InvokeOptions(provider=provider))
    return zones.names.apply(lambda z: first_zone(z, f"no zone of {region} is up for {machine_type}"))


def make_provider(region: str, labels: dict[str, str], project: str | None):
    return gcp.Provider(f"gcp-{region}", region=region, project=project, default_labels=labels)

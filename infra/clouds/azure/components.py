"""Azure GPU node pools as Pulumi components (pulumi-azure-native).

``ClusterNetwork``: a resource group per cluster and region, the VNet, an NSG (SSH only
from the configured blocks) and a NAT gateway for egress. ``GpuNodePool``: a proximity
placement group and a Uniform virtual machine scale set of ND/NC SKUs. InfiniBand comes
with the scale set: Azure connects the VMs of one placement group of an ND scale set over
InfiniBand, so the scale set keeps ``single_placement_group`` (up to 100 VMs) and no
overprovisioning; a pool launched into a capacity reservation group has neither the single
placement group nor the proximity placement group (Azure refuses both for reserved VMs), which is
why no InfiniBand pool takes one. The scale set goes to the pool's zone (the stack's, a failover
attempt's, its reservation's), else it is regional. Optional Azure Managed Lustre on a subnet of
its own, in the sizes its SKU sells (``rules.STORAGE``) and in the zone of the scale set (AMLFS is
zonal; a scale set with Lustre is pinned to a zone). The VMs' ids, host names and addresses come from ARM
through ``nodes.ScaleSetNodes``: a scale set's own outputs do not list them.

``ClusterStorage``: the stack's storage account and container the nodes configure themselves
from (no public access, no shared keys: Entra ID only, TLS 1.2). With shared keys off, the
deployer (whoever runs `up`) needs a data role of its own: Owner and Contributor carry no
DataActions, so it gets Storage Blob Data Contributor on the container. The nodes get a custom
role with exactly the blob data actions they use (read, write, add) and no control-plane
action: the built-in Storage Blob Data Contributor also carries containers/delete and write,
which ABAC conditions (data actions only) cannot narrow. Each pool's scale set runs as a
user-assigned managed identity of its own, given that role with a condition that holds it to
reading the Salt trees and its pool's configuration and writing its pool's statuses, and gets
the bootstrap as ``customData``.

Names: a scale set's Linux host names are ``computer_name_prefix`` plus six characters, so the
prefix carries the cluster and pool names (shortened with a digest to 57, the host name to a
63-character DNS label; azurerm allows 58). learn.microsoft.com/azure/azure-resource-manager/
management/resource-name-rules (2026).
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from dataclasses import dataclass, field

import pulumi
import pulumi_azure_native as azn

from gpufleet.clouds import bootstrap
from gpufleet.clouds.azure import access, monitoring
from gpufleet.clouds.azure.pool_vms import ScaleSetNodes
from gpufleet.clouds.azure.rules import HOST_PREFIX_LIMIT, SKUS, STORAGE
from gpufleet.clouds.pools import StorageArgs, resource_name


@dataclass
class NetworkArgs:
    cluster: str
    region: str
    cidr: str
    subnets: dict[str, str]  # purpose -> CIDR
    ssh_cidrs: list[str]
    tags: dict[str, str]
    bastion_cidr: str | None = None  # the AzureBastionSubnet: a Bastion for `gpufleet ssh` (clouds.azure.access)
    monitor_ports: list[int] = field(default_factory=list)  # the monitor's (Prometheus...), where it is in this region


class ClusterNetwork(pulumi.ComponentResource):
    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpufleet:azure:ClusterNetwork", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        t = args.tags
        rg = azn.resources.ResourceGroup(f"{name}-rg",
                                         resource_group_name=access.group_name(args.cluster, args.region),
                                         location=args.region, tags=t, opts=child)
        self.resource_group_name = rg.name
        rules = [{"name": f"ssh-{i}", "priority": 100 + i, "direction": "Inbound", "access": "Allow",
                  "protocol": "Tcp", "source_address_prefix": cidr, "source_port_range": "*",
                  "destination_address_prefix": "*", "destination_port_range": "22"}
                 for i, cidr in enumerate(args.ssh_cidrs)]
        if args.monitor_ports:
            # the NSG's default AllowVnetInBound (65000) admits the VirtualNetwork tag: every peered VNet and network
            # behind a gateway too; the monitor's ports answer the cluster's own address space only (learn.microsoft.com
            # /azure/virtual-network/network-security-groups-overview, "Default security rules", read 2026-11-27)
            ports = [str(p) for p in args.monitor_ports]
            rules += [{"name": "monitor-from-cluster", "priority": 3000, "direction": "Inbound", "access": "Allow",
                       "protocol": "Tcp", "source_address_prefix": args.cidr, "source_port_range": "*",
                       "destination_address_prefix": "*", "destination_port_ranges": ports},
                      {"name": "monitor-deny-others", "priority": 3001, "direction": "Inbound", "access": "Deny",
                       "protocol": "*", "source_address_prefix": "*", "source_port_range": "*",
                       "destination_address_prefix": "*", "destination_port_ranges": ports}]
        rules.append({"name": "deny-internet-in", "priority": 4000, "direction": "Inbound", "access": "Deny",
                      "protocol": "*", "source_address_prefix": "Internet", "source_port_range": "*",
                      "destination_address_prefix": "*", "destination_port_range": "*"})
        nsg = azn.network.NetworkSecurityGroup(f"{name}-nsg", resource_group_name=rg.name, location=args.region,
                                               security_rules=rules, tags=t, opts=child)
        self.nsg_id = nsg.id
        pip = azn.network.PublicIPAddress(f"{name}-nat-ip", resource_group_name=rg.name, location=args.region,
                                          sku={"name": "Standard"}, public_ip_allocation_method="Static", tags=t, opts=child)
        nat = azn.network.NatGateway(f"{name}-nat", resource_group_name=rg.name, location=args.region,
                                     sku={"name": "Standard"}, public_ip_addresses=[{"id": pip.id}], tags=t, opts=child)
        vnet = azn.network.VirtualNetwork(f"{name}-vnet", resource_group_name=rg.name, location=args.region,
                                          virtual_network_name=resource_name(args.cluster, args.region, limit=64),
                                          address_space={"address_prefixes": [args.cidr]}, tags=t, opts=child)
        self.subnet_ids = {}
        for purpose, cidr in args.subnets.items():
            sub = azn.network.Subnet(f"{name}-{purpose}", resource_group_name=rg.name, virtual_network_name=vnet.name,
                                     subnet_name=purpose, address_prefix=cidr, network_security_group={"id": nsg.id},
                                     nat_gateway={"id": nat.id}, default_outbound_access=False, opts=child)
            self.subnet_ids[purpose] = sub.id
        if args.bastion_cidr:
            _bastion(name, args, rg.name, vnet.name, child)
        self.register_outputs({"resource_group": rg.name, "vnet_id": vnet.id})


def _bastion(name: str, args: NetworkArgs, group, vnet, child) -> None:
    """Azure Bastion for SSH from the operator's own client (``az network bastion tunnel``): the Standard
    SKU with native client support (``enableTunneling``), in a subnet named AzureBastionSubnet (no NSG,
    no NAT gateway of ours: Bastion manages its own) with a Standard static public IP ("Configure
    Bastion for native client connections", learn.microsoft.com/azure/bastion/native-client, and
    "Azure Bastion subnet", learn.microsoft.com/azure/bastion/configuration-settings#subnet, 2026-11).
    The nodes' NSG already admits the VNet, which the Bastion connects from; the Internet stays denied."""
    t = args.tags
    sub = azn.network.Subnet(f"{name}-bastion-subnet", resource_group_name=group, virtual_network_name=vnet,
                             subnet_name=access.SUBNET, address_prefix=args.bastion_cidr, opts=child)
    pip = azn.network.PublicIPAddress(f"{name}-bastion-ip", resource_group_name=group, location=args.region,
                                      sku={"name": "Standard"}, public_ip_allocation_method="Static", tags=t,
                                      opts=child)
    azn.network.BastionHost(f"{name}-bastion", resource_group_name=group, location=args.region,
                            bastion_host_name=access.bastion_name(args.cluster, args.region),
                            sku={"name": "Standard"}, enable_tunneling=True,
                            ip_configurations=[{"name": "bastion", "subnet": {"id": sub.id},
                                                "public_ip_address": {"id": pip.id}}],
                            tags=t, opts=child)


# Built-in role (learn.microsoft.com/azure/role-based-access-control/built-in-roles/storage
# #storage-blob-data-contributor, 2026): the deployer's, to publish the trees and configurations
BLOB_CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"  # Storage Blob Data Contributor
CONTAINER = "gpufleet"
_PATH = "@Resource[Microsoft.Storage/storageAccounts/blobServices/containers/blobs:path]"
_BLOBS = "Microsoft.Storage/storageAccounts/blobServices/containers/blobs"
# what the node agent does and nothing more: Get Blob, and Put Blob of a new or existing status
# (learn.microsoft.com/rest/api/storageservices/authorize-with-azure-active-directory#permissions-for-calling-data-operations)
NODE_DATA_ACTIONS = (f"{_BLOBS}/read", f"{_BLOBS}/write", f"{_BLOBS}/add/action")
_ROLE_IDS = uuid.UUID("5b1e1b8e-9f0c-4a59-9c61-6f2d3c8e7a10")  # namespace of gpufleet's custom role ids


class ClusterStorage(pulumi.ComponentResource):
    """The stack's storage account and its private container."""

    def __init__(self, name: str, cluster: str, subscription: str, region: str, resource_group_name,
                 tags: dict[str, str], opts: pulumi.ResourceOptions | None = None, deployer_type: str = "User"):
        super().__init__("gpufleet:azure:ClusterStorage", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        # account names are global, 3-24 lowercase letters and digits
        account = "gf" + hashlib.sha1(f"{subscription}/{cluster}".encode()).hexdigest()[:22]
        acct = azn.storage.StorageAccount(f"{name}-account", account_name=account, resource_group_name=resource_group_name,
                                          location=region, kind="StorageV2", sku={"name": "Standard_LRS"},
                                          allow_blob_public_access=False, allow_shared_key_access=False,
                                          minimum_tls_version="TLS1_2", enable_https_traffic_only=True, tags=tags,
                                          opts=child)
        container = azn.storage.BlobContainer(f"{name}-container", account_name=acct.name, container_name=CONTAINER,
                                              resource_group_name=resource_group_name, public_access="None", opts=child)
        # the deployer's data role (role assignments take effect within minutes: `up` retries its first
        # publish meanwhile, clouds.azure.objects)
        deployer = azn.authorization.get_client_config_output(opts=pulumi.InvokeOutputOptions(parent=self))
        azn.authorization.RoleAssignment(f"{name}-deployer", scope=container.id, principal_id=deployer.object_id,
                                         principal_type=deployer_type,  # credentials.principal_type
                                         role_definition_id=role_id(subscription, BLOB_CONTRIBUTOR), opts=child)
        group = pulumi.Output.concat("/subscriptions/", subscription, "/resourceGroups/", resource_group_name)
        guid = str(uuid.uuid5(_ROLE_IDS, f"{subscription}/{cluster}/{region}"))
        role = azn.authorization.RoleDefinition(
            f"{name}-node-role", role_definition_id=guid,
            # a custom role's name is unique in the whole directory ("Custom role properties", learn.microsoft.com/
            # azure/role-based-access-control/custom-roles, read 2026-11-27): the guid (of the subscription among the
            # rest) tells one subscription's cluster from another's of the same name
            role_name=f"gpufleet node {cluster} {region} {guid}", scope=group, assignable_scopes=[group],
            description="gpufleet cloud nodes: read the Salt trees and their pool's configuration, write their "
                        "statuses (blob data actions only)",
            permissions=[{"actions": [], "data_actions": list(NODE_DATA_ACTIONS)}], opts=child)
        # assigned by the id role assignments take (the subscription's form), once the role exists
        self.node_role_id = role.id.apply(lambda _: role_id(subscription, guid))
        self.account, self.container_id = acct.name, container.id
        self.register_outputs({"account": acct.name, "node_role_id": self.node_role_id})


def role_id(subscription: str, role: str) -> str:
    return f"/subscriptions/{subscription}/providers/Microsoft.Authorization/roleDefinitions/{role}"


def node_condition(pool: str) -> str:
    """The ABAC condition that holds a pool's nodes to their paths: read the Salt trees and the
    pool's configuration, write (create or replace) only the pool's statuses (ABAC conditions for
    Blob storage, learn.microsoft.com/azure/storage/blobs/storage-auth-abac-examples, 2026)."""
    read = (f"((!(ActionMatches{{'{_BLOBS}/read'}})) OR ({_PATH} StringStartsWith 'tree/' OR "
            f"{_PATH} StringStartsWith 'pools/{pool}/'))")
    write = (f"((!(ActionMatches{{'{_BLOBS}/write'}}) AND !(ActionMatches{{'{_BLOBS}/add/action'}})) OR "
             f"({_PATH} StringStartsWith 'status/{pool}/'))")
    return f"{read} AND {write}"


@dataclass
class NodeStorage:
    """Where a pool's nodes find their configuration: the stack's storage account and container."""

    account: pulumi.Input[str]
    container_id: pulumi.Input[str]
    node_role_id: pulumi.Input[str]  # the data-actions-only role the nodes get


@dataclass
class PoolArgs:
    cluster: str
    pool: str
    sku: str
    nodes: int
    region: str
    resource_group_name: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    nsg_id: pulumi.Input[str]
    image: tuple[str, str, str, str] | str  # a marketplace URN, or an image's resource id
    public_key: str
    tags: dict[str, str]
    storage_subnet_id: pulumi.Input[str] | None = None
    ssh_user: str = "azureuser"
    spot: bool = False
    public_ip: bool = False
    root_disk_gb: int = 200
    infiniband: bool = False
    storage: list[StorageArgs] = field(default_factory=list)
    zone: str | None = None  # the scale set's zone (rules.scale_set_zone), its Managed Lustre's too; None: regional
    subscription: str = ""  # where ScaleSetNodes reads the VMs
    storage_account: NodeStorage | None = None  # the nodes configure themselves from it
    capacity_reservation_group: str | None = None  # a group's resource id: the VMs take its reserved capacity
    plan: dict | None = None  # the purchase plan the image is sold with (name, publisher, product): VMs must name it
    metadata: str = "root"  # who on the node reaches IMDS and WireServer (spec Access.metadata: root or all-users)
    monitor: bool = False  # its node runs Prometheus, and lists the pools' scale sets for it (spec monitor_pool)


class GpuNodePool(pulumi.ComponentResource):
    def __init__(self, name: str, args: PoolArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpufleet:azure:GpuNodePool", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        t = args.tags
        zones = [args.zone] if args.zone else None
        # A scale set that takes a capacity reservation group has singlePlacementGroup false and no
        # proximity placement group: Azure refuses both for reserved VMs ("Associate a virtual machine
        # scale set with Uniform Orchestration to a capacity reservation group" and the capacity
        # reservation overview's limitations, Microsoft Learn, read 2026-11). InfiniBand needs the single
        # placement group, so an InfiniBand pool takes no reservation (rules.check_reservation refuses it).
        reserved = args.capacity_reservation_group is not None
        ppg = None if reserved else azn.compute.ProximityPlacementGroup(
            f"{name}-ppg", resource_group_name=args.resource_group_name, location=args.region,
            proximity_placement_group_type="Standard", zones=zones, tags=t, opts=child)
        # a marketplace URN (publisher, offer, sku, version), or an image of the subscription's own by id
        # (a golden image's Compute Gallery version)
        reference = {"id": args.image} if isinstance(args.image, str) else dict(
            zip(("publisher", "offer", "sku", "version"), args.image))
        ipconf = {"name": "ipconfig", "primary": True, "subnet": {"id": args.subnet_id}}
        if args.public_ip:
            ipconf["public_ip_address_configuration"] = {"name": "pip", "sku": {"name": "Standard"}}
        profile = {
            "os_profile": {
                "computer_name_prefix": resource_name(args.cluster, args.pool, limit=HOST_PREFIX_LIMIT),
                "admin_username": args.ssh_user,
                "linux_configuration": {"disable_password_authentication": True, "ssh": {"public_keys": [
                    {"path": f"/home/{args.ssh_user}/.ssh/authorized_keys", "key_data": args.public_key.strip()}]}},
            },
            "storage_profile": {
                "image_reference": reference,
                "os_disk": {"create_option": "FromImage", "caching": "ReadWrite", "disk_size_gb": args.root_disk_gb,
                            "managed_disk": {"storage_account_type": "Premium_LRS"}},
            },
            "network_profile": {"network_interface_configurations": [{
                "name": "nic", "primary": True, "enable_accelerated_networking": True,
                "network_security_group": {"id": args.nsg_id}, "ip_configurations": [ipconf]}]},
        }
        if args.spot:
            profile.update(priority="Spot", eviction_policy="Delete", billing_profile={"max_price": -1})
        if args.capacity_reservation_group:
            # virtualMachineProfile.capacityReservation.capacityReservationGroup.id (Compute REST 2024-07-01,
            # example VirtualMachineScaleSet_Create_WithCapacityReservation.json)
            profile["capacity_reservation"] = {"capacity_reservation_group": {"id": args.capacity_reservation_group}}
        identity, self.bucket = None, None
        if args.storage_account:
            st = args.storage_account
            ident = azn.managedidentity.UserAssignedIdentity(
                f"{name}-identity", resource_name_=resource_name(args.cluster, args.pool, limit=128),
                resource_group_name=args.resource_group_name, location=args.region, tags=t, opts=child)
            azn.authorization.RoleAssignment(
                f"{name}-data", scope=st.container_id, principal_id=ident.principal_id,
                principal_type="ServicePrincipal", role_definition_id=st.node_role_id,
                condition=node_condition(args.pool), condition_version="2.0", opts=child)
            if args.monitor:  # the listing's one action (clouds.azure.monitoring), on its region's group only
                group = pulumi.Output.concat("/subscriptions/", args.subscription, "/resourceGroups/",
                                             args.resource_group_name)
                guid = str(uuid.uuid5(_ROLE_IDS, f"{args.subscription}/{args.cluster}/{args.pool}/discovery"))
                listing = azn.authorization.RoleDefinition(
                    f"{name}-discovery-role", role_definition_id=guid, scope=group, assignable_scopes=[group],
                    role_name=f"gpufleet monitor {args.cluster} {args.pool} {guid}",  # unique in the directory
                    description="gpufleet's monitor: list the network interfaces of the cluster's scale sets",
                    permissions=[{"actions": list(monitoring.DISCOVERY_ACTIONS), "data_actions": []}], opts=child)
                azn.authorization.RoleAssignment(
                    f"{name}-discovery", scope=group, principal_id=ident.principal_id, principal_type="ServicePrincipal",
                    role_definition_id=listing.id.apply(lambda _: role_id(args.subscription, guid)), opts=child)
            identity = {"type": "UserAssigned", "user_assigned_identities": [ident.id]}
            profile["os_profile"]["custom_data"] = pulumi.Output.all(st.account, ident.client_id).apply(
                lambda v: base64.b64encode(bootstrap.render(bootstrap.config(
                    "azure", cluster=args.cluster, pool=args.pool, bucket=CONTAINER, account=v[0],
                    identity=v[1], metadata=args.metadata)).encode()).decode())
            self.bucket = {"cloud": "azure", "name": st.account, "container": CONTAINER}
        self.scale_set = azn.compute.VirtualMachineScaleSet(
            f"{name}-vmss", resource_group_name=args.resource_group_name, location=args.region,
            vm_scale_set_name=resource_name(args.cluster, args.pool, limit=64),
            sku={"name": args.sku, "tier": "Standard", "capacity": args.nodes},
            orchestration_mode="Uniform", upgrade_policy={"mode": "Manual"}, overprovision=False,
            single_placement_group=not reserved, platform_fault_domain_count=1,
            proximity_placement_group={"id": ppg.id} if ppg else None, virtual_machine_profile=profile, zones=zones,
            identity=identity,
            plan=args.plan, tags=t,
            # "if singlePlacementGroup is false, it may not be modified to true" (azure-native 3.29.0): a pool
            # leaving its reservation gets a new scale set of the same name, which `up` shows and asks first
            opts=pulumi.ResourceOptions(parent=self, replace_on_changes=["singlePlacementGroup"],
                                        delete_before_replace=True))

        self.file_systems = []
        for i, st in enumerate(args.storage):
            if st.type != "lustre":
                continue
            self.file_systems.append(azn.storagecache.AmlFilesystem(
                f"{name}-amlfs{i}", resource_group_name=args.resource_group_name, location=args.region,
                aml_filesystem_name=resource_name(args.cluster, args.pool, str(i), limit=80),
                sku={"name": SKUS[st.throughput_mbps_per_tib or STORAGE.default_tier]},
                storage_capacity_ti_b=float(STORAGE.lustre(st)[1]), filesystem_subnet=args.storage_subnet_id,
                maintenance_window={"day_of_week": "Sunday", "time_of_day_utc": "02:00"}, zones=zones,
                tags=t, opts=child))

        self.nodes = ScaleSetNodes(f"{name}-nodes", scale_set_id=self.scale_set.id, capacity=args.nodes,
                                   subscription=args.subscription, subnet_id=args.subnet_id, public=args.public_ip,
                                   opts=child)
        self.node_ids, self.private_ips, self.vm_uids = self.nodes.node_ids, self.nodes.private_ips, self.nodes.vm_uids
        self.public_ips = self.nodes.public_ips if args.public_ip else None
        self.ssh_endpoint = (self.public_ips if args.public_ip else self.private_ips).apply(lambda ips: f"{ips[0]}:22")
        self.register_outputs({"node_ids": self.node_ids, "private_ips": self.private_ips, "vm_uids": self.vm_uids,
                               "host_names": self.nodes.host_names, "ssh_endpoint": self.ssh_endpoint,
                               "scale_set_id": self.scale_set.id,
                               **({"public_ips": self.public_ips} if self.public_ips is not None else {})})


def make_provider(region: str, subscription: str | None):
    return azn.Provider(f"azure-{region}", location=region, subscription_id=subscription)

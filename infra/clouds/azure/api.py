"""Azure through azure-mgmt-resource and azure-mgmt-compute: who, resources by tag, deletion,
per-family vCPU quotas.

Every ARM resource gpufleet creates carries the ``gpufleet:*`` tags, so one paged
``GET /subscriptions/{id}/resources?$filter=tagName eq 'gpufleet:cluster'`` finds them all,
in every region; a resource group is deleted only once nothing at all is left in it (a
group's deletion would take untagged resources with it). Deletion goes by resource id
with each type's API version and does not wait on the long-running operation; the next
rank waits until the resource is gone.

``GPUFLEET_AZURE_ENDPOINT`` replaces the ARM endpoint (sovereign clouds, the tests' server).
"""

from __future__ import annotations

import base64
import json
import os

from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.core.rest import HttpRequest
from azure.identity import CredentialUnavailableError, DefaultAzureCredential
from azure.mgmt.compute import ComputeManagementClient
from azure.mgmt.core.tools import parse_resource_id
from azure.mgmt.resource.resources import ResourceManagementClient

from gpufleet.clouds.azure import credentials, replace, resize
from gpufleet.clouds.azure.errors import CREDENTIAL_HINT
from gpufleet.clouds.azure.rules import marketplace_plan, terms_command
from gpufleet.clouds.base import Capacity, FoundImage, QuotaLine
from gpufleet.clouds.resources import Resource, delete_each, pick_regions, present_each
from gpufleet.clouds.tags import TAG_PREFIX, gpufleet_tags
from gpufleet.errors import CloudUnreadable, CredentialsError
from gpufleet.state.images import PREFIX, Manifest

ARM = "https://management.azure.com"
# ARM type -> (kind, API version used to read and delete it by id)
TYPES = {
    "microsoft.compute/virtualmachinescalesets": ("scale-set", "2024-07-01"),
    "microsoft.compute/virtualmachines": ("instance", "2024-07-01"),
    "microsoft.compute/disks": ("disk", "2024-03-02"),
    "microsoft.compute/proximityplacementgroups": ("placement-group", "2024-07-01"),
    "microsoft.compute/sshpublickeys": ("key-pair", "2024-07-01"),
    "microsoft.network/networkinterfaces": ("network-interface", "2024-05-01"),
    "microsoft.network/networksecuritygroups": ("security-group", "2024-05-01"),
    "microsoft.network/publicipaddresses": ("address", "2024-05-01"),
    "microsoft.network/natgateways": ("nat-gateway", "2024-05-01"),
    "microsoft.network/virtualnetworks": ("network", "2024-05-01"),
    "microsoft.storagecache/amlfilesystems": ("file-system", "2024-03-01"),
    # the stack's storage account (deleting it deletes its containers and blobs) and the pools' identities
    "microsoft.storage/storageaccounts": ("bucket", "2023-05-01"),
    "microsoft.managedidentity/userassignedidentities": ("identity", "2023-01-31"),
}
RG_API = "2024-03-01"
VM_API = "2024-07-01"
CAPACITY_API = "2024-07-01"  # capacity reservation groups and their reservations
# learn.microsoft.com/azure/virtual-machines/capacity-reservation-overallocate (read 2026-11)
OVERALLOCATION = ("Azure also allocates VMs beyond the reserved quantity, as quota and its capacity allow, "
                  "without the reservation's SLA")
GALLERY_VERSION = "microsoft.compute/galleries/images/versions"  # a golden image (azure.pkr.hcl)
SCALE_SET_NETWORK_API = "2018-10-01"  # the Compute-scoped NIC and public IP lists of a Uniform scale set

# The vCPU quota family of each catalog VM size (Compute usage names, as `az vm list-usage`
# shows them). https://learn.microsoft.com/azure/virtual-machines/sizes/overview (2025-06)
FAMILIES = {
    "Standard_NC6s_v3": "standardNCSv3Family", "Standard_NC24s_v3": "standardNCSv3Family",
    "Standard_NC4as_T4_v3": "standardNCASv3_T4Family", "Standard_NC64as_T4_v3": "standardNCASv3_T4Family",
    "Standard_NC24ads_A100_v4": "StandardNCADSA100v4Family", "Standard_NC96ads_A100_v4": "StandardNCADSA100v4Family",
    "Standard_NC40ads_H100_v5": "standardNCadsH100v5Family", "Standard_ND96asr_v4": "standardNDASv4_A100Family",
    "Standard_ND96amsr_A100_v4": "StandardNDAMSv4_A100Family", "Standard_ND96isr_H100_v5": "standardNDSH100v5Family",
}


def default_credential():
    """azure-identity's chain: environment, workload identity, managed identity, Azure CLI ..."""
    return DefaultAzureCredential(exclude_interactive_browser_credential=True)


def classify(e) -> tuple[str, str]:
    msg = getattr(e, "message", None) or str(e)
    if isinstance(e, ResourceNotFoundError) or getattr(e, "status_code", None) == 404:
        return "gone", msg
    if isinstance(e, HttpResponseError) and (e.status_code in (409, 429) or (e.status_code or 0) >= 500
                                             or "InUse" in msg or "Conflict" in msg):
        return "retry", msg
    return "failed", msg


def unreadable(e, where: str = "azure") -> CloudUnreadable:
    """Why Azure could not be read: not reached, credentials refused (401, a failed token),
    permission denied (403), or another answer."""
    status = getattr(e, "status_code", None)
    if isinstance(e, (ServiceRequestError, ServiceResponseError)):
        kind = "unreachable"
    elif isinstance(e, ClientAuthenticationError) or status == 401:
        kind = "refused"
    elif status == 403:
        kind = "permission"
    else:
        kind = "error"
    return CloudUnreadable("azure", kind, str(e).splitlines()[0][:300] if str(e) else type(e).__name__, where)


def _claims(token: str) -> dict:
    try:
        part = token.split(".")[1]
        return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    except (IndexError, ValueError):
        return {}


def _built_plan(image: str, region: str) -> dict | None:
    """The purchase plan a golden image's build recorded (``gpufleet:<name>``, built for ``region``);
    none for one not built here, which `plan` and `up` refuse on their own."""
    built = Manifest().find(image[len(PREFIX):], "azure", region)
    return built.plan if built else None


class AzureApi:
    """``base.CloudApi`` for Azure."""

    provider = "azure"

    def __init__(self, credential=None, subscription: str | None = None):
        self._cred, self._sub = credential, subscription
        self.endpoint = os.environ.get("GPUFLEET_AZURE_ENDPOINT", ARM).rstrip("/")
        self._rm = self._cm = None

    def _auth(self):
        self._sub = self._sub or credentials.subscription()
        if not self._sub:
            raise CredentialsError("azure", "azure: no subscription is selected (az login, or ARM_SUBSCRIPTION_ID)",
                                   CREDENTIAL_HINT)
        if self._cred is None:
            self._cred = default_credential()
        return self._cred

    def signed_in(self) -> tuple[object, str]:
        """The credential and the subscription gpufleet works in (CredentialsError when there is none)."""
        return self._auth(), self._sub

    @property
    def rm(self):
        if self._rm is None:
            self._rm = ResourceManagementClient(self._auth(), self._sub, base_url=self.endpoint)
        return self._rm

    @property
    def compute(self):
        if self._cm is None:
            self._cm = ComputeManagementClient(self._auth(), self._sub, base_url=self.endpoint)
        return self._cm

    def _get(self, path: str, api: str, **params) -> dict:
        rm = self.rm
        resp = rm.send_request(HttpRequest("GET", f"{self.endpoint}{path}", params={"api-version": api, **params}))
        if resp.status_code >= 400:
            raise HttpResponseError(response=resp)
        return resp.json()

    def _pages(self, path: str, api: str) -> list[dict]:
        """Every ``value`` of a paged ARM list, following ``nextLink``."""
        page = self._get(path, api)
        rows = list(page.get("value") or [])
        while page.get("nextLink"):
            resp = self.rm.send_request(HttpRequest("GET", page["nextLink"]))
            if resp.status_code >= 400:
                raise HttpResponseError(response=resp)
            page = resp.json()
            rows += page.get("value") or []
        return rows

    # --- a scale set's nodes ---------------------------------------------------------------------
    def gone_nodes(self, region: str, *, cluster: str, pool: str, node_ids: list[str]) -> set[str]:
        """Which of the pool's VMs their tagged scale set no longer holds (``azure.replace``)."""
        try:
            return replace.gone_nodes(self, cluster=cluster, pool=pool, node_ids=node_ids)
        except (HttpResponseError, ServiceRequestError, ServiceResponseError, ClientAuthenticationError) as e:
            raise unreadable(e, f"azure listing pool {pool}'s VMs") from None

    def replace_node(self, region: str, *, cluster: str, pool: str, node_id: str, release_first: bool = False,
                     launched: str | None = None, on_launch=None, market: str | None = None) -> dict:
        """One of the pool's VMs replaced through its scale set (``azure.replace``)."""
        try:
            return replace.replace_node(self, cluster=cluster, pool=pool, node_id=node_id, release_first=release_first,
                                        launched=launched, on_launch=on_launch, market=market)
        except (HttpResponseError, ServiceRequestError, ServiceResponseError, ClientAuthenticationError) as e:
            raise unreadable(e, f"azure replacing {node_id}") from None

    def add_nodes(self, region: str, *, cluster: str, pool: str, count: int, market: str | None = None,
                  on_launch=None) -> list[dict]:
        """``count`` more VMs in the pool's scale set (``azure.resize``)."""
        try:
            return resize.add_nodes(self, cluster=cluster, pool=pool, region=region, count=count, market=market,
                                    on_launch=on_launch)
        except (HttpResponseError, ServiceRequestError, ServiceResponseError, ClientAuthenticationError) as e:
            raise unreadable(e, f"azure adding {count} VM(s) to pool {pool}") from None

    def remove_nodes(self, region: str, *, cluster: str, pool: str, node_ids: list[str]) -> None:
        """Exactly these VMs of the pool's scale set deleted (``azure.resize``)."""
        try:
            resize.remove_nodes(self, cluster=cluster, pool=pool, node_ids=node_ids)
        except (HttpResponseError, ServiceRequestError, ServiceResponseError, ClientAuthenticationError) as e:
            raise unreadable(e, f"azure removing {len(node_ids)} VM(s) from pool {pool}") from None

    def scale_set_nodes(self, scale_set_id: str) -> list[dict]:
        """The VMs of a Uniform scale set, by instance id: ARM id, unique VM id (``properties.vmId``, "Azure VM
        unique ID": the ARM id and address come back with the next scale set of the name), host name,
        private and public IP.

        A scale set's VMs, and its NICs and public IPs (each pointing back at its VM / IP
        configuration), are lists of their own: Virtual Machine Scale Set VMs - List and Network
        Interfaces - List Virtual Machine Scale Set Network Interfaces / Public IP Addresses - List
        Virtual Machine Scale Set Public IP Addresses (api-version 2018-10-01, the one ARM serves
        these Compute-scoped network lists under). learn.microsoft.com/rest/api/compute and
        /rest/api/virtualnetwork (2026)."""
        self._auth()
        vms = self._pages(f"{scale_set_id}/virtualMachines", VM_API)
        nics = self._pages(f"{scale_set_id}/networkInterfaces", SCALE_SET_NETWORK_API)
        pips = self._pages(f"{scale_set_id}/publicIPAddresses", SCALE_SET_NETWORK_API)
        public = {(x["properties"].get("ipConfiguration") or {}).get("id", "").lower(): x["properties"].get("ipAddress")
                  for x in pips}
        private: dict[str, tuple[str | None, str | None]] = {}
        for nic in nics:
            props = nic["properties"]
            if props.get("primary") is False:
                continue
            conf = next((c for c in props.get("ipConfigurations") or [] if c["properties"].get("primary", True)), None)
            if conf and props.get("virtualMachine"):
                private[props["virtualMachine"]["id"].lower()] = (conf["properties"].get("privateIPAddress"),
                                                                  public.get(conf["id"].lower()))
        out = []
        for vm in sorted(vms, key=lambda v: int(v["instanceId"])):
            ip, pub = private.get(vm["id"].lower(), (None, None))
            name = ((vm.get("properties") or {}).get("osProfile") or {}).get("computerName")
            out.append({"id": vm["id"], "instance_id": vm["instanceId"], "vm_uid": (vm.get("properties") or {}).get("vmId"),
                        "host_name": name, "private_ip": ip, "public_ip": pub})
        return out

    # --- golden images (`gpufleet image list/delete`) ---------------------------------------------
    def images(self, regions: list[str]) -> list[FoundImage]:
        """The subscription's Compute Gallery image versions tagged ``gpufleet:image`` in ``regions``."""
        self._auth()
        try:
            found = [x for x in self.rm.resources.list(filter=f"tagName eq '{TAG_PREFIX}image'", expand="createdTime")
                     if (x.type or "").lower() == GALLERY_VERSION and x.location in regions]
        except Exception as e:  # noqa: BLE001 - refused, unreachable, denied: said as such
            raise unreadable(e, "azure images") from None
        return [FoundImage("azure", x.location, x.tags[f"{TAG_PREFIX}image"], x.id, gpufleet_tags(x.tags),
                           str(getattr(x, "created_time", "") or "") or None) for x in found]

    def delete_image(self, image: FoundImage) -> None:
        """Delete a gallery image version through azure-mgmt-compute's own operation, under the
        gallery api-version it is built for: gallery types are versioned apart from VMs (GalleryRP
        in azure-rest-api-specs has no 2024-07-01), and ARM refuses a version a type does not have."""
        try:
            part = parse_resource_id(image.id)
            self.compute.gallery_image_versions.begin_delete(part["resource_group"], part["name"], part["child_name_1"],
                                                             part["child_name_2"], polling=False)
        except Exception as e:  # noqa: BLE001
            raise unreadable(e, f"azure image {image.id}") from None

    # --- reserved capacity (`gpufleet capacity find`) ----------------------------------------------
    def capacity(self, region: str, instance_type: str, nodes: int, hours: int, start: str | None) -> list[Capacity]:
        """The subscription's capacity reservation groups in the region holding reservations of the
        size, one row per zone (a zonal reservation serves VMs of its zone only; a regional one, zone
        None, non-zonal VMs), each with what it still takes: the reserved capacity less the VMs
        allocated in it (the group's instance view, ``utilizationInfo.virtualMachinesAllocated``),
        not less those associated with it, which count deallocated VMs that hold none of it (Capacity
        Reservation Groups - List By Subscription and Get with ``$expand=instanceView``, Capacity
        Reservations - List By Capacity Reservation Group, api-version 2024-07-01; the capacity
        reservation overview's "Capacity Reservation lifecycle"; read 2026-11). Azure also lets VMs
        in beyond the reserved quantity, without the reservation's SLA ("Overallocating capacity
        reservation"): each row says so. Azure sells no offerings through a read call: reservations
        are created, so none are listed."""
        self._auth()
        try:
            groups = self._pages(f"/subscriptions/{self._sub}/providers/Microsoft.Compute/capacityReservationGroups",
                                 CAPACITY_API)
            out = []
            for g in (g for g in groups if g["location"].lower() == region.lower()):
                mine = [r for r in self._pages(f"{g['id']}/capacityReservations", CAPACITY_API)
                        if r["sku"]["name"].lower() == instance_type.lower()]
                if not mine:
                    continue
                view = self._get(g["id"], CAPACITY_API, **{"$expand": "instanceView"})
                used = {x["name"].lower(): x.get("utilizationInfo") or {} for x in
                        ((view.get("properties") or {}).get("instanceView") or {}).get("capacityReservations") or []}
                free: dict[str | None, int] = {}
                over: dict[str | None, int] = {}  # VMs allocated beyond a reservation's quantity: it has none free
                for r in mine:
                    u = used.get(r["name"].lower(), {})
                    reserved = int(u.get("currentCapacity", r["sku"].get("capacity", 0)))
                    zone = ",".join(sorted(r.get("zones") or [])) or None
                    allocated = len(u.get("virtualMachinesAllocated") or [])
                    free[zone] = free.get(zone, 0) + max(0, reserved - allocated)
                    over[zone] = over.get(zone, 0) + max(0, allocated - reserved)
                out += [Capacity("azure", "capacity reservation group", g["id"], region, zone, instance_type, n, True,
                                 note=OVERALLOCATION + (f"; overallocated by {over[zone]} VM(s) now" if over[zone] else ""))
                        for zone, n in sorted(free.items(), key=lambda z: z[0] or "")]
        except HttpResponseError as e:
            raise unreadable(e, f"azure {region} capacity reservations") from None
        return out

    # --- who ---------------------------------------------------------------------------------
    def identity(self) -> dict:
        cred = self._auth()
        try:
            token = cred.get_token(f"{ARM}/.default").token
            sub = self._get(f"/subscriptions/{self._sub}", "2022-12-01")
        except CredentialUnavailableError as e:  # no login or service principal anywhere
            raise CredentialsError("azure", f"azure: no credentials found ({str(e).splitlines()[0][:200]})",
                                   CREDENTIAL_HINT) from None
        except Exception as e:  # noqa: BLE001 - refused, unknown subscription, no network
            raise unreadable(e, f"azure subscription {self._sub}") from None
        c = _claims(token)
        who = c.get("upn") or c.get("unique_name") or (f"app {c['appid']}" if c.get("appid") else None) or \
            c.get("oid") or "unknown principal"
        return {"account": f"{sub.get('displayName', '')} ({self._sub})".strip(), "principal": who,
                "source": type(cred).__name__, "tenant": sub.get("tenantId") or c.get("tid")}

    def regions(self, wanted: list[str] | None = None) -> list[str]:
        self._auth()
        try:
            names = sorted(x["name"] for x in self._get(f"/subscriptions/{self._sub}/locations", "2022-12-01")["value"])
        except Exception as e:  # noqa: BLE001
            raise unreadable(e, "azure regions") from None
        return pick_regions("azure", names, wanted, "see az account list-locations")

    # --- inventory ---------------------------------------------------------------------------
    def inventory(self, regions: list[str], cluster: str | None = None, on_region=None):
        """Every tagged resource (and resource group) of the subscription in ``regions``."""
        wanted = set(regions)
        flt = f"tagName eq '{TAG_PREFIX}cluster'" + (f" and tagValue eq '{cluster}'" if cluster else "")
        out: list[Resource] = []
        problems: dict[str, str] = {}
        try:
            for x in self.rm.resources.list(filter=flt, expand="createdTime,provisioningState"):
                kind, api = TYPES.get((x.type or "").lower(), (None, None))
                if kind is None or x.location not in wanted:
                    continue
                r = Resource("azure", x.location, kind, x.id, gpufleet_tags(x.tags), name=x.name,
                             state=getattr(x, "provisioning_state", None), created_at=getattr(x, "created_time", None),
                             ref={"api": api, "group": x.id.split("/")[4]})
                if kind == "scale-set" and x.sku is not None:
                    # priced on-demand: the generic listing does not say whether a scale set is Spot
                    r.machine, r.count = x.sku.name, int(x.sku.capacity or 0)
                out.append(r)
            for g in self.rm.resource_groups.list(filter=flt):
                if g.location in wanted:
                    out.append(Resource("azure", g.location, "resource-group", g.id, gpufleet_tags(g.tags), name=g.name,
                                        state=g.properties.provisioning_state if g.properties else None,
                                        ref={"api": RG_API, "group": g.name}))
        except Exception as e:  # noqa: BLE001
            problems["azure resources"] = unreadable(e).reason
        if on_region:
            for r in regions:
                on_region(f"azure/{r}")
        return out, problems

    # --- deletion ------------------------------------------------------------------------------
    def delete(self, region: str, kind: str, resources: list[Resource]) -> dict[str, tuple[str, str]]:
        return delete_each(resources, self._delete_one, classify)

    def _delete_one(self, r: Resource):
        if r.kind == "resource-group":  # deleting a group deletes everything in it: only when empty
            left = list(self.rm.resources.list_by_resource_group(r.name))
            if left:
                return "failed", (f"resource group {r.name} still holds {len(left)} resource(s) (e.g. {left[0].name}); "
                                  "a group is deleted only once it is empty")
            self.rm.resource_groups.begin_delete(r.name, polling=False)
        else:
            self.rm.resources.begin_delete_by_id(r.id, api_version=r.ref["api"], polling=False)
        return None

    def still_there(self, region: str, kind: str, resources: list[Resource]) -> dict[str, str]:
        def state(r):
            props = getattr(self.rm.resources.get_by_id(r.id, api_version=r.ref["api"]), "properties", None)
            return props.get("provisioningState") if isinstance(props, dict) else None

        return present_each(resources, state, classify)

    # --- quotas ----------------------------------------------------------------------------
    def quotas(self, region: str, needs) -> list:
        """vCPUs per VM family and the regional total (``cores``; ``lowPriorityCores`` for spot)."""
        try:
            usage = {u.name.value.lower(): u for u in self.compute.usage.list(region)}
            note = ""
        except Exception as e:  # noqa: BLE001
            usage, note = {}, f"could not be read: {classify(e)[1][:200]}"
        groups: dict[str, list] = {}
        for n in needs:
            if n.spot:
                groups.setdefault("lowPriorityCores", []).append(n)
            else:
                groups.setdefault(FAMILIES.get(n.instance.name, n.instance.name), []).append(n)
                groups.setdefault("cores", []).append(n)
        lines = []
        for key, ns in groups.items():
            u = usage.get(key.lower())
            name = u.name.localized_value if u is not None and u.name.localized_value else key
            lines.append(QuotaLine("azure", region, name, key, "vCPUs", float(sum(n.instance.vcpus * n.nodes for n in ns)),
                                   float(u.limit) if u is not None else None,
                                   float(u.current_value) if u is not None else None, [n.pool for n in ns],
                                   note or ("" if u is not None else f"no usage {key!r} in {region}")))
        return lines + self._terms(region, needs)

    def _terms(self, region: str, needs) -> list:
        """One line per marketplace plan the pools' images carry: are its terms accepted in this
        subscription? (Marketplace Agreements - Get, api-version 2021-01-01,
        learn.microsoft.com/rest/api/marketplaceordering/marketplace-agreements/get)"""
        plans: dict[tuple, list[str]] = {}
        for n in needs:
            plan = _built_plan(n.image, region) if (n.image or "").startswith(PREFIX) else marketplace_plan(n.image)
            if plan:
                plans.setdefault((plan["name"], plan["publisher"], plan["product"]), []).append(n.pool)
        lines = []
        for (name, publisher, product), pools in plans.items():
            plan = {"name": name, "publisher": publisher, "product": product}
            try:
                got = self._get(f"/subscriptions/{self._sub}/providers/Microsoft.MarketplaceOrdering/offerTypes/"
                                f"virtualmachine/publishers/{publisher}/offers/{product}/plans/{name}/agreements/current",
                                "2021-01-01")
                accepted, note = bool((got.get("properties") or {}).get("accepted")), ""
            except Exception as e:  # noqa: BLE001 - said in the line, as an unreadable quota is
                accepted, note = None, f"could not be read: {classify(e)[1][:200]}"
            lines.append(QuotaLine("azure", region, f"Marketplace terms of {publisher}:{product}:{name}", "terms",
                                   "agreement", 1.0, None if accepted is None else float(accepted), 0.0, pools,
                                   note or ("" if accepted else f"accept them once per subscription: {terms_command(plan)}")))
        return lines

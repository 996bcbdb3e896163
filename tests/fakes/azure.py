"""A stand-in for Azure Resource Manager over HTTPS (no Azure endpoint can be reached here).

It answers the calls azure-mgmt-resource and azure-mgmt-compute make, in ARM's documented
formats (https://learn.microsoft.com/rest/api/resources/):

* ``GET /subscriptions/{s}`` and ``/subscriptions/{s}/locations``;
* ``GET /subscriptions/{s}/resources?$filter=tagName eq '...' [and tagValue eq '...']&$expand=
  createdTime,provisioningState``: ``{"value": [GenericResourceExpanded], "nextLink": ...}``,
  paged by ``$top`` / ``$skiptoken`` as ARM pages;
* ``GET /subscriptions/{s}/resourcegroups?$filter=...`` and ``.../resourceGroups/{g}/resources``;
* ``PUT`` of a resource group or a resource by id (Resource Groups - Create Or Update; a Compute
  Gallery, a gallery image definition): ``201`` with the resource as stored, ``provisioningState``
  ``Succeeded`` (a long-running PUT done at once); the request body as the SDK serialised it is
  kept beside the resource (``sent``); ``HEAD`` of a resource group: ``204`` or ``404``;
* Marketplace images (``marketplace_image``): ``GET .../locations/{l}/publishers/{p}/artifacttypes/
  vmimage/offers/{o}/skus/{s}/versions`` (a JSON array of ``{name, location, id}``) and ``.../versions/
  {v}`` (``properties.hyperVGeneration``, ``osDiskImage.operatingSystem``, ``plan`` when it is sold
  with one), learn.microsoft.com/rest/api/compute/virtual-machine-images;
* ``GET`` / ``DELETE`` of a resource by id (``?api-version=``, one the type is served under for a
  Compute type, else ``400 NoRegisteredProviderFound``: ``azure_versions``): the resource, ``202 Accepted``
  with ``Azure-AsyncOperation`` / ``Location`` headers for a delete; ``404
  ResourceNotFound``; ``400 InUseSubnetCannotBeDeleted``-style conflicts while another
  resource still uses it (``uses``);
* ``GET /subscriptions/{s}/providers/Microsoft.Compute/locations/{l}/usages``:
  ``{"value": [{"name": {"value", "localizedValue"}, "currentValue", "limit", "unit"}]}``;
* a Uniform scale set's VMs, NICs and public IPs (``scale_set_vms``): ``GET {vmss}/virtualMachines``
  (``instanceId``, ``properties.osProfile.computerName``), ``GET {vmss}/networkInterfaces`` and
  ``GET {vmss}/publicIPAddresses`` (api-version 2018-10-01; a NIC names its VM in
  ``properties.virtualMachine.id``, a public IP its IP configuration in
  ``properties.ipConfiguration.id``), paged with ``nextLink`` as ARM pages,
  https://learn.microsoft.com/rest/api/virtualnetwork/network-interfaces/list-virtual-machine-scale-set-network-interfaces;
* capacity reservation groups (``capacity_group``): ``GET /subscriptions/{s}/providers/
  Microsoft.Compute/capacityReservationGroups`` and ``GET {group}/capacityReservations``
  (api-version 2024-07-01: ``value`` of groups with ``location``, ``zones`` and
  ``properties.capacityReservations[].id``; of reservations with ``sku {name, capacity}``,
  ``zones`` and ``properties.virtualMachinesAssociated[].id``), paged with ``nextLink``,
  https://learn.microsoft.com/rest/api/compute/capacity-reservation-groups/list-by-subscription;
  ``GET {group}?$expand=instanceView``: the group with ``properties.instanceView.capacityReservations[]``
  (``name``, ``utilizationInfo {currentCapacity, virtualMachinesAllocated[].id}``: the VMs running
  or stopped but allocated, a subset of those associated), capacity-reservation-groups/get;
* ``GET /subscriptions/{s}/providers/Microsoft.Compute/skus?$filter=location eq '<l>'``: resource
  SKUs (``resourceType``, ``name``, ``locations``, ``locationInfo[].zones``, ``capabilities``
  as name/value strings, ``restrictions``), https://learn.microsoft.com/rest/api/compute/resource-skus/list;
  ``resource_sku(...)`` builds one.

Entra ID is not replayed: tests hand the SDK a static bearer token (``StaticToken``), a
JWT-shaped string whose claims say who it is. TLS is real (a self-signed certificate the
client trusts through ``REQUESTS_CA_BUNDLE``), since the SDK refuses tokens over HTTP.
"""

from __future__ import annotations

import base64
import json
import re
import time
import uuid

from fakes import azure_versions
from fakes.jsonserver import JsonServer


def _err(status: int, code: str, message: str):
    return status, {"error": {"code": code, "message": message}}, {}


class StaticToken:
    """A TokenCredential with a fixed token (claims: tid, oid, appid)."""

    def __init__(self, claims: dict):
        body = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
        self.token = f"eyJhbGciOiJub25lIn0.{body}.sig"

    def get_token(self, *scopes, **kw):
        from azure.core.credentials import AccessToken

        return AccessToken(self.token, int(time.time()) + 3600)

    def get_token_info(self, *scopes, options=None):
        from azure.core.credentials import AccessTokenInfo

        return AccessTokenInfo(self.token, int(time.time()) + 3600)


def storage_token(oid: str = "11111111-0000-0000-0000-000000000000") -> StaticToken:
    """A bearer token for Blob storage as Azurite's "basic" OAuth level checks it (audience, issuer,
    lifetime; not the signature)."""
    now = int(time.time())
    return StaticToken({"aud": "https://storage.azure.com", "iss": "https://sts.windows.net/72f988bf-0000/",
                        "iat": now, "nbf": now - 60, "exp": now + 3600, "oid": oid})


class ArmFake(JsonServer):
    def __init__(self, subscription: str = "00000000-0000-0000-0000-00000000abcd",
                 locations=("eastus", "westus3", "westeurope", "swedencentral")):
        super().__init__(tls=True)
        self.subscription = subscription
        self.locations = list(locations)
        self.items: dict[str, dict] = {}  # lowercased id -> resource
        self.groups: dict[str, dict] = {}  # lowercased name -> resource group
        self.usages: dict[str, list[dict]] = {}
        self.skus: list[dict] = []
        self.scale_sets: dict[str, list[dict]] = {}  # lowercased scale set id -> its VMs
        self.accepted: set[str] = set()  # "publisher:offer:plan" whose marketplace terms the subscription accepted
        # lowercased id -> (group, its reservations, its instance view)
        self.capacity_groups: dict[str, tuple[dict, list[dict], dict]] = {}
        self.marketplace: dict[tuple, list[dict]] = {}  # (location, publisher, offer, sku) lowercased -> versions
        self.sent: dict[str, dict] = {}  # lowercased id -> the last PUT body, as the client serialised it
        self.page_size = 50
        # Cost Management's query: the recorded QueryResults it answers in order (none left: 204 No Content),
        # and the query bodies it was sent
        self.cost_pages: list[dict] = []
        self.cost_queries: list[dict] = []

    def reset(self) -> None:
        with self.lock:
            self.items.clear()
            self.groups.clear()
            self.usages.clear()
            self.skus.clear()
            self.scale_sets.clear()
            self.accepted.clear()
            self.capacity_groups.clear()
            self.marketplace.clear()
            self.sent.clear()
            self.cost_pages.clear()
            self.cost_queries.clear()
            self.faults.clear()
            self.calls.clear()

    # --- what tests call ------------------------------------------------------------------
    def group(self, name: str, location: str, tags: dict | None = None) -> dict:
        g = {"id": f"/subscriptions/{self.subscription}/resourceGroups/{name}", "name": name, "location": location,
             "type": "Microsoft.Resources/resourceGroups", "tags": tags or {},
             "properties": {"provisioningState": "Succeeded"}}
        with self.lock:
            self.groups[name.lower()] = g
        return g

    def add(self, group: str, rtype: str, name: str, location: str, tags: dict | None = None, *, sku=None,
            uses=()) -> dict:
        """A resource ``{rtype}/{name}`` in ``group``; a child's ``rtype`` names its parents
        (``Microsoft.Compute/galleries/G/images/D/versions``), its type is ARM's (``.../galleries/images/versions``)."""
        rid = f"/subscriptions/{self.subscription}/resourceGroups/{group}/providers/{rtype}/{name}"
        ns, *segments = rid.split("/providers/", 1)[1].split("/")
        item = {"id": rid, "name": name, "type": "/".join([ns, *segments[0::2]]), "location": location, "tags": tags or {},
                "createdTime": "2026-11-22T06:00:00.0000000Z", "changedTime": "2026-11-22T06:00:00.0000000Z",
                "provisioningState": "Succeeded", "_uses": [u.lower() for u in uses]}
        if sku:
            item["sku"] = sku
        with self.lock:
            self.items[rid.lower()] = item
        return item

    def marketplace_image(self, location: str, publisher: str, offer: str, sku: str, versions: list[str], *,
                          generation: str = "V2", plan: dict | None = None) -> None:
        """A Marketplace image's versions in a location, of one Hyper-V generation (``plan``: name,
        publisher, product when it is sold with one)."""
        base = (f"/Subscriptions/{self.subscription}/Providers/Microsoft.Compute/Locations/{location}/Publishers/"
                f"{publisher}/ArtifactTypes/VMImage/Offers/{offer}/Skus/{sku}/Versions")
        rows = [{"name": v, "location": location, "id": f"{base}/{v}",
                 "properties": {"hyperVGeneration": generation, "architecture": "x64",
                                "osDiskImage": {"operatingSystem": "Linux"}, **({"plan": plan} if plan else {})}}
                for v in versions]
        with self.lock:
            self.marketplace[tuple(x.lower() for x in (location, publisher, offer, sku))] = rows

    def scale_set_vms(self, scale_set_id: str, vms: list[tuple[str, str, str | None, str | None]]) -> None:
        """A scale set's VMs as (instance id, computer name, private IP or None, public IP or None)."""
        with self.lock:
            self.scale_sets[scale_set_id.lower()] = [
                {"instance": i, "name": n, "ip": ip, "public": pub, "vm": f"{scale_set_id}/virtualMachines/{i}"}
                for i, n, ip, pub in vms]

    def capacity_group(self, group: str, name: str, location: str,
                       reservations: list[tuple[str, str, int, int, int]]):
        """A capacity reservation group and its reservations as (zone, VM size, capacity, VMs allocated,
        VMs associated: the allocated ones and the deallocated ones still associated)."""
        gid = f"/subscriptions/{self.subscription}/resourceGroups/{group}/providers/Microsoft.Compute/" \
              f"capacityReservationGroups/{name}"
        rows = [{"id": f"{gid}/capacityReservations/r{i}", "name": f"r{i}", "location": location,
                 "type": "Microsoft.Compute/capacityReservationGroups/capacityReservations", "zones": [zone],
                 "sku": {"name": size, "capacity": capacity},
                 "properties": {"reservationId": str(uuid.uuid4()), "platformFaultDomainCount": 1,
                                "provisioningState": "Succeeded", "timeCreated": "2026-11-20T00:00:00Z",
                                "virtualMachinesAssociated": [{"id": f"{gid}/vm{i}-{k}"} for k in range(associated)]}}
                for i, (zone, size, capacity, _, associated) in enumerate(reservations)]
        g = {"id": gid, "name": name, "location": location, "type": "Microsoft.Compute/capacityReservationGroups",
             "zones": sorted({r["zones"][0] for r in rows}),
             "properties": {"capacityReservations": [{"id": r["id"]} for r in rows]}}
        view = {"capacityReservations": [
            {"name": r["name"], "utilizationInfo": {"currentCapacity": capacity, "virtualMachinesAllocated": [
                {"id": f"{gid}/vm{i}-{k}"} for k in range(allocated)]},
             "statuses": [{"code": "ProvisioningState/succeeded", "level": "Info"}]}
            for i, (r, (_, _, capacity, allocated, _)) in enumerate(zip(rows, reservations))]}
        with self.lock:
            self.capacity_groups[gid.lower()] = (g, rows, view)
        return g

    @staticmethod
    def vm_uid(vm: str) -> str:
        """The GUID a scale set VM's ``properties.vmId`` holds here (made from its ARM id)."""
        return str(uuid.uuid5(uuid.NAMESPACE_URL, vm))

    def _scale_set_list(self, vmss: str, what: str, query, path):
        vms = self.scale_sets.get(vmss, [])
        if what == "virtualmachines":
            rows = [{"id": v["vm"], "instanceId": v["instance"], "name": v["vm"].rsplit("/", 3)[-3] + "_" + v["instance"],
                     "properties": {"osProfile": {"computerName": v["name"]}, "provisioningState": "Succeeded",
                                    "vmId": self.vm_uid(v["vm"])}}
                    for v in vms]
        elif what == "networkinterfaces":
            rows = [{"id": f"{v['vm']}/networkInterfaces/nic", "name": "nic", "properties": {
                "primary": True, "virtualMachine": {"id": v["vm"]},
                "ipConfigurations": [{"id": f"{v['vm']}/networkInterfaces/nic/ipConfigurations/ipconfig",
                                      "properties": {"primary": True, "privateIPAddress": v["ip"]}}]}}
                    for v in vms if v["ip"]]
        else:
            rows = [{"id": f"{v['vm']}/networkInterfaces/nic/ipConfigurations/ipconfig/publicIPAddresses/pip",
                     "properties": {"ipAddress": v["public"], "ipConfiguration": {
                         "id": f"{v['vm']}/networkInterfaces/nic/ipConfigurations/ipconfig"}}}
                    for v in vms if v["public"]]
        return self._page(rows, query, path)

    def _scale(self, lid: str, method: str, body: dict):
        """Virtual Machine Scale Sets - Update of ``sku.capacity`` (PATCH: new VMs take the next instance ids,
        a scale-in removes the highest) and - Delete Instances (POST .../delete: those VMs go, the capacity
        with them), answered as done (200)."""
        with self.lock:
            item = self.items.get(lid)
            if item is None:
                return _err(404, "ResourceNotFound", "The Resource was not found.")
            vms = self.scale_sets.setdefault(lid, [])
            if method == "POST":
                gone = set(body.get("instanceIds") or [])
                vms[:] = [v for v in vms if v["instance"] not in gone]
            else:
                want = int(body["sku"]["capacity"])
                while len(vms) < want:
                    i = max([int(v["instance"]) for v in vms] + [-1]) + 1
                    vms.append({"instance": str(i), "name": f"{item['name']}{i:06d}", "ip": f"10.3.0.{10 + i}",
                                "public": None, "vm": f"{item['id']}/virtualMachines/{i}"})
                vms.sort(key=lambda v: int(v["instance"]))
                del vms[want:]
            item["sku"] = {**item.get("sku", {}), "capacity": len(vms)}
            return 200, {k: v for k, v in item.items() if not k.startswith("_")}, {}

    def has(self, rid: str) -> bool:
        with self.lock:
            return rid.lower() in self.items

    # --- the API ---------------------------------------------------------------------------
    def route(self, method, path, query, body):
        sub = f"/subscriptions/{self.subscription}"
        p = path.rstrip("/")
        lp = p.lower()
        if not lp.startswith(sub.lower()):
            return _err(404, "SubscriptionNotFound", f"The subscription '{p.split('/')[2]}' could not be found.")
        rest = lp[len(sub):]
        if rest == "" and method == "GET":
            return 200, {"id": sub, "subscriptionId": self.subscription, "displayName": "gpufleet tests",
                         "state": "Enabled", "tenantId": "72f988bf-0000-0000-0000-000000000000"}, {}
        if rest == "/providers/microsoft.costmanagement/query" and method == "POST":
            self.cost_queries.append(body)
            if not self.cost_pages:
                return 204, b"", {}
            page = json.loads(json.dumps(self.cost_pages.pop(0)).replace("https://management.azure.com", self.url))
            return 200, page, {}
        if rest == "/locations":
            return 200, {"value": [{"id": f"{sub}/locations/{x}", "name": x, "displayName": x, "type": "Region"}
                                   for x in self.locations]}, {}
        if rest == "/resources":
            return self._page([dict(i) for i in self.items.values() if _tag_filter(query.get("$filter", ""), i)],
                              query, path)
        if rest == "/resourcegroups" and method == "GET":
            return self._page([dict(g) for g in self.groups.values() if _tag_filter(query.get("$filter", ""), g)],
                              query, path)
        m = re.fullmatch(r"/resourcegroups/([^/]+)/resources", rest)
        if m:
            return self._page([dict(i) for i in self.items.values()
                               if i["id"].lower().split("/")[4] == m.group(1)], query, path)
        m = re.fullmatch(r"/providers/microsoft.compute/locations/([^/]+)/usages", rest)
        if m:
            return 200, {"value": self.usages.get(m.group(1), [])}, {}
        if rest == "/providers/microsoft.compute/skus" and method == "GET":
            m = re.fullmatch(r"location eq '([^']+)'", query.get("$filter", ""))
            with self.lock:
                rows = [x for x in self.skus if not m or m.group(1).lower() in [loc.lower() for loc in x["locations"]]]
            return 200, {"value": rows}, {}
        if rest == "/providers/microsoft.compute/capacityreservationgroups" and method == "GET":
            return self._page([g for g, _, _ in self.capacity_groups.values()], query, path)
        m = re.fullmatch(r"(/resourcegroups/[^/]+/providers/microsoft.compute/capacityreservationgroups/[^/]+)"
                         r"(/capacityreservations)?", rest)
        if m and method == "GET":
            found = self.capacity_groups.get(sub.lower() + m.group(1))
            if found is None:
                return _err(404, "ResourceNotFound", f"The Resource '{m.group(1)}' was not found.")
            if m.group(2):
                return self._page(found[1], query, path)
            expanded = query.get("$expand", "").lower() == "instanceview"
            return 200, {**found[0], "properties": {**found[0]["properties"],
                                                    **({"instanceView": found[2]} if expanded else {})}}, {}
        m = re.fullmatch(r"(/resourcegroups/[^/]+/providers/microsoft.compute/virtualmachinescalesets/[^/]+)(/delete)?",
                         rest)
        if m and (method, bool(m.group(2))) in (("PATCH", False), ("POST", True)):
            return self._scale(sub.lower() + m.group(1), method, body)
        m = re.fullmatch(r"(/resourcegroups/[^/]+/providers/microsoft.compute/virtualmachinescalesets/[^/]+)/"
                         r"(virtualmachines|networkinterfaces|publicipaddresses)", rest)
        if m and method == "GET":
            return self._scale_set_list(sub.lower() + m.group(1), m.group(2), query, path)
        # Marketplace Agreements - Get (learn.microsoft.com/rest/api/marketplaceordering/marketplace-agreements/get)
        m = re.fullmatch(r"/providers/microsoft.marketplaceordering/offertypes/virtualmachine/publishers/([^/]+)/offers/"
                         r"([^/]+)/plans/([^/]+)/agreements/current", rest)
        if m and method == "GET":
            urn = ":".join(m.groups())
            return 200, {"id": f"{sub}/providers/Microsoft.MarketplaceOrdering/offerTypes/VirtualMachine/publishers/"
                               f"{m.group(1)}/offers/{m.group(2)}/plans/{m.group(3)}/agreements/current",
                         "name": m.group(3), "type": "Microsoft.MarketplaceOrdering/offertypes",
                         "properties": {"publisher": m.group(1), "product": m.group(2), "plan": m.group(3),
                                        "accepted": urn in self.accepted, "licenseTextLink": "https://example.invalid/",
                                        "retrieveDatetime": "2026-11-24T00:00:00Z", "signature": "S"}}, {}
        m = re.fullmatch(r"/providers/microsoft.compute/locations/([^/]+)/publishers/([^/]+)/artifacttypes/vmimage/"
                         r"offers/([^/]+)/skus/([^/]+)/versions(?:/([^/]+))?", rest)
        if m and method == "GET":
            rows = self.marketplace.get(m.group(1, 2, 3, 4))
            if rows is None:
                return _err(404, "NotFound", "Artifact: VMImage was not found.")
            if m.group(5) is None:
                return 200, [{k: r[k] for k in ("name", "location", "id")} for r in rows], {}
            found = [r for r in rows if r["name"].lower() == m.group(5)]
            return (200, found[0], {}) if found else _err(404, "NotFound", "Artifact: VMImage was not found.")
        m = re.fullmatch(r"/resourcegroups/([^/]+)", rest)
        if m:
            return self._group(method, m.group(1), body)
        refused = azure_versions.refusal(p, query.get("api-version"))  # a resource by id, of a Compute type
        if refused:
            return _err(400, "NoRegisteredProviderFound", refused)
        if method == "PUT":
            return self._put(lp, p, body)
        return self._resource(method, lp, p)

    def _put(self, lid, path, body):
        """Create or update a resource by id: its type from the path's provider segments."""
        group = lid.split("/")[4]
        if group not in self.groups:
            return _err(404, "ResourceGroupNotFound", f"Resource group '{path.split('/')[4]}' could not be found.")
        ns, *segments = path.split("/providers/", 1)[1].split("/")
        rtype = "/".join([ns, *segments[0::2]])
        item = {"id": path, "name": segments[-1], "type": rtype, "location": body.get("location"),
                "tags": body.get("tags") or {}, "properties": {**(body.get("properties") or {}),
                                                               "provisioningState": "Succeeded"},
                "createdTime": "2026-11-22T06:00:00.0000000Z", "changedTime": "2026-11-22T06:00:00.0000000Z",
                "provisioningState": "Succeeded", "_uses": []}
        with self.lock:
            created = lid not in self.items
            self.items[lid] = item
            self.sent[lid] = body
        return (201 if created else 200), {k: v for k, v in item.items() if not k.startswith("_")}, {}

    def _page(self, rows, query, path):
        rows = [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows]
        rows.sort(key=lambda r: r["id"])
        start = int(query.get("$skiptoken") or 0)
        size = int(query.get("$top") or self.page_size)
        out = {"value": rows[start:start + size]}
        if start + size < len(rows):
            keep = "&".join(f"{k}={v}" for k, v in query.items() if k not in ("$skiptoken",))
            out["nextLink"] = f"{self.url}{path}?{keep}&$skiptoken={start + size}".replace(" ", "%20")
        return 200, out, {}

    def _group(self, method, name, body=None):
        with self.lock:
            g = self.groups.get(name)
            if method == "PUT":
                self.sent[f"/subscriptions/{self.subscription}/resourcegroups/{name}".lower()] = body
                return (200 if g else 201), self.group(name, body["location"], body.get("tags")), {}
            if method == "HEAD":
                return (204 if g else 404), b"", {}
            if g is None:
                return _err(404, "ResourceGroupNotFound", f"Resource group '{name}' could not be found.")
            if method == "GET":
                return 200, g, {}
            inside = [i for i in self.items if i.split("/")[4] == name]
            for i in inside:  # what ARM does: a group's deletion takes everything in it
                del self.items[i]
            del self.groups[name]
        return 202, b"", self._async_headers()

    def _resource(self, method, lid, path):
        with self.lock:
            item = self.items.get(lid)
            if item is None:
                return _err(404, "ResourceNotFound", f"The Resource '{path.split('/providers/', 1)[-1]}' under "
                                                     f"resource group '{path.split('/')[4]}' was not found.")
            if method == "GET":
                return 200, {k: v for k, v in item.items() if not k.startswith("_")}, {}
            if method != "DELETE":
                return _err(405, "MethodNotAllowed", method)
            users = [i["name"] for i in self.items.values() if lid in i["_uses"]]
            if users:
                return _err(400, "InUseSubnetCannotBeDeleted" if "virtualnetworks" in lid else "ResourceInUse",
                            f"{item['name']} is in use by {users[0]} and cannot be deleted.")
            del self.items[lid]
        return 202, b"", self._async_headers()

    def _async_headers(self) -> dict:
        op = f"{self.url}/subscriptions/{self.subscription}/providers/Microsoft.Resources/operations/{uuid.uuid4()}"
        return {"Azure-AsyncOperation": op, "Location": op, "Retry-After": "0"}


def _tag_filter(expr: str, item: dict) -> bool:
    if not expr:
        return True
    m = re.fullmatch(r"tagName eq '([^']+)'(?: and tagValue eq '([^']*)')?", expr.strip())
    if not m:
        raise ValueError(f"filter the fake does not know: {expr}")
    tags = item.get("tags") or {}
    return m.group(1) in tags and (m.group(2) is None or tags[m.group(1)] == m.group(2))


def resource_sku(name: str, location: str, *, zones=("1", "2", "3"), gpus: int | None = None, vcpus: int = 96,
                 memory_gb: float = 1900, rdma: bool | None = None, restricted_zones=()) -> dict:
    """One ``virtualMachines`` resource SKU in one location, as Microsoft.Compute/skus lists it."""
    caps = {"vCPUs": str(vcpus), "MemoryGB": f"{memory_gb:g}", "MaxResourceVolumeMB": "2949120",
            "HyperVGenerations": "V1,V2", "AcceleratedNetworkingEnabled": "True"}
    if gpus is not None:
        caps["GPUs"] = str(gpus)
    if rdma is not None:
        caps["RdmaEnabled"] = str(rdma)
    sku = {"resourceType": "virtualMachines", "name": name, "tier": "Standard", "size": name.split("_", 1)[1],
           "family": f"standard{name.split('_')[1]}Family", "locations": [location],
           "locationInfo": [{"location": location, "zones": list(zones), "zoneDetails": []}],
           "capabilities": [{"name": k, "value": v} for k, v in caps.items()], "restrictions": []}
    if restricted_zones:
        sku["restrictions"].append({"type": "Zone", "values": [location], "reasonCode": "NotAvailableForSubscription",
                                    "restrictionInfo": {"locations": [location], "zones": list(restricted_zones)}})
    return sku

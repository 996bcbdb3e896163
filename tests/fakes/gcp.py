"""A stand-in for the Compute Engine REST API (v1) and Google's OAuth token endpoint.

No GCP endpoint can be reached here, so this server answers the calls
google-cloud-compute's REST transport makes, in the documented formats
(https://cloud.google.com/compute/docs/reference/rest/v1):

* ``GET /compute/v1/projects/{p}/aggregated/{collection}``: ``{"items": {"zones/...":
  {"instances": [...]}, "zones/...": {"warning": {"code": "NO_RESULTS_ON_PAGE", ...}}},
  "nextPageToken": ...}`` with ``filter`` (``labels.K:*``, ``labels.K="v"``,
  ``description eq "regex"``), ``maxResults`` and ``pageToken``;
* ``GET /compute/v1/projects/{p}/global/{collection}``: ``{"items": [...]}``, same filters;
* ``GET`` / ``DELETE`` of one resource under ``zones/{z}``, ``regions/{r}`` or ``global``:
  the resource, or a ``compute#operation`` (``status: DONE``); errors as ``{"error":
  {"code", "message", "errors": [{"reason", "domain", "message"}]}}`` (``notFound``;
  ``resourceInUseByAnotherResource`` when a network still has subnetworks, firewalls or
  routers, as Compute Engine answers);
* ``GET /compute/v1/projects/{p}/zones/{z}/instances``: the zone's VMs, ``{"items": [...]}``
  with ``maxResults`` / ``pageToken``;
* ``POST /compute/v1/projects/{p}/zones/{z}/instances/bulkInsert``
  (https://cloud.google.com/compute/docs/reference/rest/v1/instances/bulkInsert): the VMs named
  in ``perInstanceProperties``, each with ``instanceProperties``' labels, machine type and a
  private address, or none when the zone holds fewer than ``minCount`` more (``zone_capacity``; for
  ``scheduling.provisioningModel`` SPOT, ``spot_capacity`` too: a spot shortage is refused alike):
  then a ``DONE`` operation whose ``error.errors[]`` carries ``ZONE_RESOURCE_POOL_EXHAUSTED``
  and ``httpErrorStatusCode`` 503, as Compute Engine reports a failed operation. Each VM is kept as
  the Instance resource (https://cloud.google.com/compute/docs/reference/rest/v1/instances) holds
  what InstanceProperties asked: ``machineType``, ``guestAccelerators[].acceleratorType`` and
  ``resourcePolicies`` as URLs, ``scheduling``, ``tags``, ``metadata``, ``serviceAccounts``,
  ``shieldedInstanceConfig``, ``reservationAffinity``, and its boot disk as an AttachedDisk
  (``source``: the disk's URL, ``boot``, ``autoDelete``) beside a Disk resource
  (https://cloud.google.com/compute/docs/reference/rest/v1/disks: ``sourceImage``, ``sizeGb``,
  ``type`` as a URL, ``labels``, ``users``) named as the VM, as Compute Engine names a boot disk it
  makes; deleting a VM deletes its ``autoDelete`` disks. Each request body (refused or not) is kept in ``bulk_bodies``;
* ``POST /compute/v1/projects/{p}/regions/{r}/resourcePolicies``: a resource policy (409
  ``alreadyExists`` for a name taken), answered with a ``DONE`` operation;
* a flex-start pool's managed instance group (``flex_group``): ``GET .../zones/{z}/
  instanceGroupManagers/{g}/resizeRequests/{r}`` (InstanceGroupManagerResizeRequest: ``state``,
  ``resizeBy``, ``status.error.errors[]``) and ``POST .../instanceGroupManagers/{g}/
  listManagedInstances`` (``managedInstances[].instance`` URLs), as
  compute/docs/reference/rest/v1/instanceGroupManagerResizeRequests documents them; a group
  and its template are also listed like other resources (``instanceGroupManagers`` zonal,
  ``instanceTemplates`` global) for reap;
* ``GET /compute/v1/projects/{p}``, ``.../regions`` and ``.../regions/{r}`` with ``quotas``
  (``metric``, ``limit``, ``usage``);
* ``POST /token``: the OAuth 2.0 token response a service-account JWT grant (or a user's refresh
  token) gets; ``GET /tokeninfo?access_token=``: what Google's tokeninfo endpoint says of that token
  (``azp``, ``aud``, ``scope``, ``exp``, ``expires_in``, ``email``, ``email_verified``: ``user_email``),
  400 ``invalid_token`` for another;
* machine types, accelerator types and reservations (``aggregated/machineTypes``,
  ``aggregated/acceleratorTypes``, ``aggregated/reservations``), zonal like instances, with ``name eq "regex"`` filters;
* the Cloud Billing Catalog API v1 (cloudbilling.googleapis.com), ``GET
  /v1/services/{service}/skus?pageSize=&pageToken=&currencyCode=``: ``{"skus": [...],
  "nextPageToken": ""}`` (https://cloud.google.com/billing/docs/reference/rest/v1/services.skus/list);
  ``sku(...)`` builds one SKU in that format. A ``key`` query parameter (the API-key form,
  docs.cloud.google.com/billing/v1/how-tos/catalog-api) must be one of ``api_keys``, else the
  API's 400 ``API key not valid`` (INVALID_ARGUMENT); each page's query is kept in ``sku_queries``;
* Filestore (file.googleapis.com) and Managed Lustre (lustre.googleapis.com) v1, served under
  ``/file`` and ``/lustre``: ``GET .../v1/projects/{p}/locations/-/instances?filter=&pageSize=
  &pageToken=`` answering ``{"instances": [...], "nextPageToken", "unreachable": []}``, ``GET`` /
  ``DELETE .../v1/projects/{p}/locations/{l}/instances/{id}`` (a long-running operation,
  ``"done": false``), errors as ``{"error": {"code", "message", "status": "NOT_FOUND"}}``.

Tests add resources with ``add(...)`` in these same formats and script failures through
``faults`` (see fakes/jsonserver.py).
"""

from __future__ import annotations

import itertools
import re

from fakes.jsonserver import JsonServer

API = "https://www.googleapis.com/compute/v1"
ZONAL = {"instances", "disks", "machineTypes", "acceleratorTypes", "reservations", "instanceGroupManagers"}
REGIONAL = {"addresses", "resourcePolicies", "routers", "subnetworks"}
GLOBAL = {"firewalls", "networks", "addresses", "instanceTemplates", "images"}
KIND = {"instances": "instance", "disks": "disk", "addresses": "address", "resourcePolicies": "resourcePolicy",
        "routers": "router", "subnetworks": "subnetwork", "firewalls": "firewall", "networks": "network",
        "machineTypes": "machineType", "acceleratorTypes": "acceleratorType", "reservations": "reservation",
        "instanceGroupManagers": "instanceGroupManager", "instanceTemplates": "instanceTemplate", "images": "image"}
_ids = itertools.count(1000)


def _error(code: int, reason: str, message: str):
    return code, {"error": {"code": code, "message": message,
                            "errors": [{"message": message, "domain": "global", "reason": reason}]}}, {}


class ComputeFake(JsonServer):
    def __init__(self, project: str = "gpufleet-test", regions=("us-central1", "us-east4", "europe-west4")):
        super().__init__()
        self.project = project
        self.regions = list(regions)
        self.items: dict[tuple[str, str, str], dict] = {}  # (collection, scope, name) -> resource
        self.region_quotas: dict[str, list[dict]] = {}
        self.project_quotas: list[dict] = []
        self.files: dict[tuple[str, str], dict] = {}  # (file | lustre, full name) -> instance
        self.skus: list[dict] = []  # the Cloud Billing Catalog's Compute Engine SKUs
        self.sku_page_size = 5000  # the API's most per page
        self.api_keys: set[str] = set()  # keys the Cloud Billing Catalog accepts
        self.sku_queries: list[dict] = []
        self.zone_capacity: dict[str, int] = {}  # zone -> how many more VMs bulkInsert may create there
        self.spot_capacity: dict[str, int] = {}  # zone -> how many more SPOT VMs, within zone_capacity
        self.resize_requests: dict[tuple[str, str, str], dict] = {}  # (zone, group, name) -> the request
        self.groups: dict[tuple[str, str], list[str]] = {}  # (zone, group) -> its VMs' names
        self.user_email = "alice@example.com"  # whose user credentials tokeninfo names
        self.bulk_bodies: list[dict] = []  # each bulkInsert's BulkInsertInstanceResource, as sent

    # --- what tests call ------------------------------------------------------------------
    def reset(self) -> None:
        with self.lock:
            self.items.clear()
            self.region_quotas.clear()
            self.project_quotas.clear()
            self.files.clear()
            self.skus.clear()
            self.sku_page_size = 5000
            self.api_keys.clear()
            self.sku_queries.clear()
            self.zone_capacity.clear()
            self.spot_capacity.clear()
            self.resize_requests.clear()
            self.groups.clear()
            self.bulk_bodies.clear()
            self.faults.clear()
            self.calls.clear()

    def add(self, collection: str, scope: str, name: str, **fields) -> dict:
        """A resource in its REST shape; ``scope`` is ``zones/<z>``, ``regions/<r>`` or ``global``."""
        link = f"{API}/projects/{self.project}/{scope}/{collection}/{name}"
        item = {"kind": f"compute#{KIND[collection]}", "id": str(next(_ids)), "name": name,
                "creationTimestamp": "2026-11-22T00:00:00.000-08:00", "selfLink": link, **fields}
        if scope.startswith("zones/"):
            item.setdefault("zone", f"{API}/projects/{self.project}/{scope}")
        elif scope.startswith("regions/"):
            item.setdefault("region", f"{API}/projects/{self.project}/{scope}")
        with self.lock:
            self.items[(collection, scope, name)] = item
        return item

    def add_file_system(self, api: str, location: str, fid: str, **fields) -> dict:
        """A Filestore (``api="file"``) or Managed Lustre (``"lustre"``) instance."""
        name = f"projects/{self.project}/locations/{location}/instances/{fid}"
        item = {"name": name, "createTime": "2026-11-22T06:00:00.000000Z", "state": "READY", **fields}
        with self.lock:
            self.files[(api, name)] = item
        return item

    def has_file_system(self, api: str, fid: str) -> bool:
        with self.lock:
            return any(a == api and n.endswith("/" + fid) for a, n in self.files)

    def has(self, collection: str, name: str) -> bool:
        with self.lock:
            return any(c == collection and n == name for c, _, n in self.items)

    # --- the API ---------------------------------------------------------------------------
    def route(self, method, path, query, body):
        if path == "/token" and method == "POST":
            return 200, {"access_token": "ya29.fake-token", "expires_in": 3600, "token_type": "Bearer"}, {}
        if path == "/tokeninfo" and method == "GET":
            if query.get("access_token") != "ya29.fake-token":
                return 400, {"error": "invalid_token", "error_description": "Invalid Value"}, {}
            return 200, {"azp": "764086051850-6qr4p6gpi6hn506pt8ejuq83di341hur.apps.googleusercontent.com",
                         "aud": "764086051850-6qr4p6gpi6hn506pt8ejuq83di341hur.apps.googleusercontent.com",
                         "scope": "openid https://www.googleapis.com/auth/userinfo.email "
                                  "https://www.googleapis.com/auth/cloud-platform",
                         "exp": "1893456000", "expires_in": "3599", "email": self.user_email,
                         "email_verified": "true", "access_type": "offline"}, {}
        m = re.match(r"^/v1/services/([^/]+)/skus$", path)
        if m and method == "GET":
            return self._skus(m.group(1), query)
        m = re.match(r"^/(file|lustre)/v1/(projects/[^/]+/locations/[^/]+/instances)(?:/([^/]+))?$", path)
        if m:
            return self._files(method, m.group(1), m.group(2), m.group(3), query)
        m = re.match(r"^/compute/v1/projects/([^/]+)(/.*)?$", path)
        if not m:
            return _error(404, "notFound", f"no such path {path}")
        if m.group(1) != self.project:
            return _error(404, "notFound", f"The resource 'projects/{m.group(1)}' was not found")
        rest = (m.group(2) or "").strip("/")
        parts = rest.split("/") if rest else []
        if not parts:
            return 200, {"kind": "compute#project", "name": self.project, "id": "4242",
                         "quotas": self.project_quotas}, {}
        if parts == ["regions"]:
            return 200, {"kind": "compute#regionList",
                         "items": [{"kind": "compute#region", "name": r, "status": "UP"} for r in self.regions]}, {}
        if len(parts) == 2 and parts[0] == "regions":
            if parts[1] not in self.regions:
                return _error(404, "notFound", f"The resource 'projects/{self.project}/regions/{parts[1]}' was not found")
            return 200, {"kind": "compute#region", "name": parts[1], "status": "UP",
                         "quotas": self.region_quotas.get(parts[1], [])}, {}
        if parts[0] == "aggregated" and len(parts) == 2 and method == "GET":
            return self._aggregated(parts[1], query)
        if parts[0] == "global" and len(parts) == 2 and method == "GET":
            return self._list_global(parts[1], query)
        if parts[0] == "zones" and len(parts) == 6 and parts[2] == "instanceGroupManagers" and \
                parts[4] == "resizeRequests" and method == "GET":
            with self.lock:
                r = self.resize_requests.get((parts[1], parts[3], parts[5]))
            return (200, r, {}) if r else _error(404, "notFound", f"The resource '{path}' was not found")
        if parts[0] == "zones" and len(parts) == 5 and parts[2] == "instanceGroupManagers" and \
                parts[4] == "listManagedInstances" and method == "POST":
            with self.lock:
                vms = [self.items[("instances", f"zones/{parts[1]}", n)] for n in self.groups.get((parts[1], parts[3]), [])
                       if ("instances", f"zones/{parts[1]}", n) in self.items]
            return 200, {"managedInstances": [{"instance": i["selfLink"], "id": i["id"], "instanceStatus": "RUNNING",
                                               "currentAction": "NONE"} for i in vms]}, {}
        if parts[0] == "zones" and parts[2:] == ["instances", "bulkInsert"] and method == "POST":
            return self._bulk_insert(parts[1], body)
        if parts[0] == "regions" and parts[2:] == ["resourcePolicies"] and method == "POST":
            scope = f"regions/{parts[1]}"
            if self.has("resourcePolicies", body["name"]):
                return _error(409, "alreadyExists", f"The resource 'projects/{self.project}/{scope}/resourcePolicies/"
                                                    f"{body['name']}' already exists")
            item = self.add("resourcePolicies", scope, body["name"], **{k: v for k, v in body.items() if k != "name"})
            return 200, {"kind": "compute#operation", "id": str(next(_ids)), "name": f"operation-{next(_ids)}",
                         "operationType": "insert", "targetLink": item["selfLink"], "status": "DONE", "progress": 100,
                         "region": f"{API}/projects/{self.project}/{scope}"}, {}
        if parts[0] == "zones" and parts[2:] == ["instances"] and method == "GET":
            page, token = self._page(self._matching("instances", query, lambda s: s == f"zones/{parts[1]}"), query)
            return 200, {"kind": "compute#instanceList", "items": [i for _, i in page],
                         **({"nextPageToken": token} if token else {})}, {}
        if parts[0] in ("zones", "regions") and len(parts) == 4:
            return self._one(method, parts[2], f"{parts[0]}/{parts[1]}", parts[3])
        if parts[0] == "global" and len(parts) == 3:
            return self._one(method, parts[1], "global", parts[2])
        return _error(404, "notFound", f"no such path {path}")

    def flex_group(self, zone: str, group: str, request: str, nodes: int, state: str, error: dict | None = None):
        """A flex-start pool's group and its resize request in ``state``; SUCCEEDED gives the group
        ``nodes`` VMs (named as a MIG names them: the base name and a random suffix)."""
        body = {"kind": "compute#instanceGroupManagerResizeRequest", "id": str(next(_ids)), "name": request,
                "zone": f"{API}/projects/{self.project}/zones/{zone}", "resizeBy": nodes, "state": state,
                "requestedRunDuration": {"seconds": "86400"}, "status": {"error": error} if error else {}}
        with self.lock:
            self.resize_requests[(zone, group, request)] = body
        if state == "SUCCEEDED":
            names = [f"{group}-{next(_ids):x}" for _ in range(nodes)]
            for i, name in enumerate(names):
                self.add("instances", f"zones/{zone}", name, status="RUNNING",
                         networkInterfaces=[{"networkIP": f"10.1.0.{i + 2}", "nicType": "GVNIC"}])
            with self.lock:
                self.groups[(zone, group)] = names

    def _bulk_insert(self, zone, body):
        names = list(body.get("perInstanceProperties") or {})
        props = body.get("instanceProperties") or {}
        least = int(body.get("minCount") or body["count"])
        op = {"kind": "compute#operation", "id": str(next(_ids)), "name": f"operation-{next(_ids)}",
              "operationType": "bulkInsert", "status": "DONE", "progress": 100,
              "zone": f"{API}/projects/{self.project}/zones/{zone}",
              "selfLink": f"{API}/projects/{self.project}/zones/{zone}/operations/op"}
        spot = ((props.get("scheduling") or {}).get("provisioningModel")) == "SPOT"
        with self.lock:
            self.bulk_bodies.append(body)
            room = self.zone_capacity.get(zone, 10**6)
            if spot:
                room = min(room, self.spot_capacity.get(zone, 10**6))
            if room < least:
                op.update(httpErrorStatusCode=503, httpErrorMessage="SERVICE UNAVAILABLE", error={"errors": [{
                    "code": "ZONE_RESOURCE_POOL_EXHAUSTED",
                    "message": f"The zone 'projects/{self.project}/zones/{zone}' does not have enough resources "
                               "available to fulfill the request.  Try a different zone, or try again later."}]})
                return 200, op, {}
            self.zone_capacity[zone] = self.zone_capacity.get(zone, 10**6) - len(names)
            if spot:
                self.spot_capacity[zone] = self.spot_capacity.get(zone, 10**6) - len(names)
        here = f"{API}/projects/{self.project}/zones/{zone}"
        for name in names:
            nics = [{"network": "global/networks/x", "subnetwork": n.get("subnetwork"), "nicType": n.get("nicType"),
                     "networkIP": f"10.0.{next(_ids) % 250}.{next(_ids) % 250 + 2}",
                     **({"accessConfigs": [{**a, "natIP": "203.0.113.9"} for a in n["accessConfigs"]]}
                        if n.get("accessConfigs") else {})}
                    for n in props.get("networkInterfaces") or []]
            disks = [self._boot_disk(zone, name, d) for d in props.get("disks") or [] if d.get("boot")]
            kept = {k: props[k] for k in ("scheduling", "tags", "metadata", "serviceAccounts", "shieldedInstanceConfig",
                                          "reservationAffinity") if k in props}
            self.add("instances", f"zones/{zone}", name, status="RUNNING", labels=props.get("labels") or {},
                     machineType=f"{here}/machineTypes/{props.get('machineType')}", networkInterfaces=nics,
                     resourcePolicies=[f"{API}/projects/{self.project}/regions/{zone.rsplit('-', 1)[0]}/resourcePolicies/"
                                       f"{p}" for p in props.get("resourcePolicies") or []],
                     guestAccelerators=[{"acceleratorType": f"{here}/acceleratorTypes/{a['acceleratorType']}",
                                         "acceleratorCount": a["acceleratorCount"]}
                                        for a in props.get("guestAccelerators") or []], disks=disks, **kept)
        return 200, op, {}

    def _boot_disk(self, zone: str, vm: str, asked: dict) -> dict:
        """The boot disk Compute Engine makes from an AttachedDisk's initializeParams, named as its VM; the
        VM's AttachedDisk that names it."""
        init = asked.get("initializeParams") or {}
        image = init.get("sourceImage") or ""
        disk = self.add("disks", f"zones/{zone}", vm, status="READY", sizeGb=str(init.get("diskSizeGb") or "10"),
                        sourceImage=image if image.startswith("http") else f"{API}/{image}",
                        type=f"{API}/projects/{self.project}/zones/{zone}/diskTypes/{init.get('diskType') or 'pd-standard'}",
                        labels=init.get("labels") or {},
                        users=[f"{API}/projects/{self.project}/zones/{zone}/instances/{vm}"])
        return {"kind": "compute#attachedDisk", "type": "PERSISTENT", "mode": "READ_WRITE", "source": disk["selfLink"],
                "deviceName": vm, "index": 0, "boot": True, "autoDelete": bool(asked.get("autoDelete")),
                "diskSizeGb": disk["sizeGb"]}

    def _files(self, method, api, collection, fid, query):
        if fid is None:
            with self.lock:
                rows = [dict(i) for (a, _), i in sorted(self.files.items()) if a == api]
            rows = [i for i in rows if _filter(query.get("filter", ""), i)]
            start, size = int(query.get("pageToken") or 0), int(query.get("pageSize") or 100)
            out = {"instances": rows[start:start + size], "unreachable": []}
            if start + size < len(rows):
                out["nextPageToken"] = str(start + size)
            return 200, out, {}
        name = f"{collection}/{fid}"
        with self.lock:
            item = self.files.get((api, name))
            if item is None:
                return 404, {"error": {"code": 404, "message": f"Resource '{name}' was not found",
                                       "status": "NOT_FOUND"}}, {}
            if method == "GET":
                return 200, item, {}
            del self.files[(api, name)]
        op = name.rsplit("/instances/", 1)[0] + f"/operations/operation-{next(_ids)}"
        return 200, {"name": op, "metadata": {"target": name, "verb": "delete"}, "done": False}, {}

    def _skus(self, service, query):
        self.sku_queries.append(dict(query))
        if "key" in query and query["key"] not in self.api_keys:
            return 400, {"error": {"code": 400, "message": "API key not valid. Please pass a valid API key.",
                                   "status": "INVALID_ARGUMENT"}}, {}
        if service != "6F81-5844-456A":
            return 404, {"error": {"code": 404, "message": f"Service {service} not found", "status": "NOT_FOUND"}}, {}
        start, size = int(query.get("pageToken") or 0), min(int(query.get("pageSize") or 5000), self.sku_page_size)
        with self.lock:
            rows = self.skus[start:start + size]
            more = start + size < len(self.skus)
        return 200, {"skus": rows, "nextPageToken": str(start + size) if more else ""}, {}

    def _matching(self, collection, query, scopes):
        flt = query.get("filter", "")
        with self.lock:
            rows = [(s, dict(i)) for (c, s, _), i in sorted(self.items.items()) if c == collection and scopes(s)]
        return [(s, i) for s, i in rows if _filter(flt, i)]

    def _page(self, rows, query):
        start = int(query.get("pageToken") or 0)
        size = int(query.get("maxResults") or 500)
        page = rows[start:start + size]
        token = str(start + size) if start + size < len(rows) else None
        return page, token

    def _aggregated(self, collection, query):
        rows = self._matching(collection, query, lambda s: s != "global")
        page, token = self._page(rows, query)
        items: dict[str, dict] = {}
        for scope, item in page:
            items.setdefault(scope, {}).setdefault(collection, []).append(item)
        quiet = "zones/us-east1-b" if collection in ZONAL else "regions/us-east1"
        items.setdefault(quiet, {"warning": {"code": "NO_RESULTS_ON_PAGE", "message": f"There are no results for scope "
                                             f"'{quiet}' on this page.", "data": [{"key": "scope", "value": quiet}]}})
        out = {"kind": f"compute#{KIND[collection]}AggregatedList", "id": f"projects/{self.project}/aggregated/{collection}",
               "items": items, "selfLink": f"{API}/projects/{self.project}/aggregated/{collection}"}
        if token:
            out["nextPageToken"] = token
        return 200, out, {}

    def _list_global(self, collection, query):
        page, token = self._page(self._matching(collection, query, lambda s: s == "global"), query)
        out = {"kind": f"compute#{KIND[collection]}List", "items": [i for _, i in page],
               "selfLink": f"{API}/projects/{self.project}/global/{collection}"}
        if token:
            out["nextPageToken"] = token
        return 200, out, {}

    def _one(self, method, collection, scope, name):
        key = (collection, scope, name)
        with self.lock:
            item = self.items.get(key)
            if item is None:
                return _error(404, "notFound", f"The resource 'projects/{self.project}/{scope}/{collection}/{name}' "
                                               "was not found")
            if method == "GET":
                return 200, item, {}
            if method != "DELETE":
                return _error(405, "badRequest", f"{method} is not supported here")
            if collection == "networks":
                users = [f"{c}/{n}" for (c, _, n), i in self.items.items() if i.get("network") == item["selfLink"]]
                if users:
                    return _error(400, "resourceInUseByAnotherResource",
                                  f"The network resource 'projects/{self.project}/global/networks/{name}' is already "
                                  f"being used by 'projects/{self.project}/{users[0]}'")
            del self.items[key]
            if collection == "instances":  # its disks marked autoDelete go with it
                for d in item.get("disks") or []:
                    if d.get("autoDelete"):
                        self.items.pop(("disks", scope, d["source"].rsplit("/", 1)[-1]), None)
        op = {"kind": "compute#operation", "id": str(next(_ids)), "name": f"operation-{next(_ids)}",
              "operationType": "delete", "targetLink": item["selfLink"], "status": "DONE", "progress": 100,
              "selfLink": f"{API}/projects/{self.project}/{scope}/operations/op"}
        if scope != "global":
            op[scope.split("/")[0][:-1]] = f"{API}/projects/{self.project}/{scope}"
        return 200, op, {}


def _filter(expr: str, item: dict) -> bool:
    """The filter forms gpufleet sends: labels.K:*, labels.K="v", description eq "regex"."""
    expr = expr.strip()
    if not expr:
        return True
    m = re.fullmatch(r"labels\.([a-z0-9_-]+):\*", expr)
    if m:
        return m.group(1) in (item.get("labels") or {})
    m = re.fullmatch(r'labels\.([a-z0-9_-]+)="?([^"]*)"?', expr)
    if m:
        return (item.get("labels") or {}).get(m.group(1)) == m.group(2)
    m = re.fullmatch(r'(\w+) eq "(.*)"', expr)
    if m:
        return re.fullmatch(m.group(2), str(item.get(m.group(1), ""))) is not None
    raise ValueError(f"filter the fake does not know: {expr}")


def sku(description: str, regions, usd: float, *, unit: str = "h", usage: str = "OnDemand",
        group: str | None = None, sku_id: str | None = None) -> dict:
    """One Compute Engine SKU as services.skus.list returns it (``usd`` per ``unit``)."""
    units, nanos = int(usd), round((usd - int(usd)) * 1e9)
    regions = [regions] if isinstance(regions, str) else list(regions)
    n = next(_ids)
    sid = sku_id or f"{n % 65536:04X}-{n * 7919 % 65536:04X}-{n * 104729 % 65536:04X}"  # the real ids' shape
    return {
        "name": f"services/6F81-5844-456A/skus/{sid}", "skuId": sid, "description": description,
        "category": {"serviceDisplayName": "Compute Engine", "resourceFamily": "Compute",
                     "resourceGroup": group or ("GPU" if "GPU" in description else "RAM" if "Ram" in description
                                                else "CPU"), "usageType": usage},
        "serviceRegions": regions,
        "pricingInfo": [{
            "summary": "", "effectiveTime": "2026-11-21T11:07:02.561Z", "currencyConversionRate": 1,
            "pricingExpression": {
                "usageUnit": unit, "displayQuantity": 1, "baseUnit": "s" if unit == "h" else "By.s",
                "usageUnitDescription": "hour" if unit == "h" else "gibibyte hour",
                "baseUnitDescription": "second" if unit == "h" else "byte second",
                "baseUnitConversionFactor": 3600 if unit == "h" else 3865470566400,
                "tieredRates": [{"startUsageAmount": 0,
                                 "unitPrice": {"currencyCode": "USD", "units": str(units), "nanos": nanos}}]},
            "aggregationInfo": {"aggregationLevel": "ACCOUNT", "aggregationInterval": "DAILY",
                                "aggregationCount": 1}}],
        "serviceProviderName": "Google",
        "geoTaxonomy": {"type": "REGIONAL" if len(regions) == 1 else "MULTI_REGIONAL", "regions": regions},
    }

"""GCP through google-cloud-compute: who, resources by label, deletion, regional GPU quotas.

Instances, disks and addresses carry the labels ``gpufleet-cluster`` ...; networks,
subnetworks, firewalls, routers and resource policies take no labels, so gpufleet writes
the tags into their description (``gpufleet {"gpufleet:cluster": ...}``, see
``gcp.tags``) and finds them by that. Aggregated lists cover every zone and
region in one paged call per kind; ``--region`` narrows the result.

``GPUFLEET_GCP_ENDPOINT`` replaces the Compute API endpoint (a Private Service Connect
endpoint, or the tests' server).
"""

from __future__ import annotations

import concurrent.futures
import datetime as dt
import json
import os
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote

import google.auth
import google.auth.transport.requests
import requests
from google.api_core import exceptions as gx
from google.api_core.client_options import ClientOptions
from google.auth.exceptions import DefaultCredentialsError, RefreshError, TransportError
from google.auth.transport.requests import AuthorizedSession
from google.cloud import compute_v1

from gpufleet.clouds.base import Capacity, FoundImage, QuotaLine
from gpufleet.clouds.gcp import credentials as local_credentials
from gpufleet.clouds.gcp import replace
from gpufleet.clouds.gcp.errors import CREDENTIAL_HINT
from gpufleet.clouds.gcp.rules import ACCELERATORS
from gpufleet.clouds.gcp.tags import LABEL_PREFIX, tags, tags_of
from gpufleet.clouds.resources import Resource, delete_each, pick_regions, present_each
from gpufleet.clouds.tags import TAG_PREFIX
from gpufleet.errors import CloudUnreadable, CredentialsError

LABEL = LABEL_PREFIX + "cluster"
# what a Compute call raises when it was not answered as asked (refused, not reached, credentials)
# (an operation's wait that runs out: google-api-core's PollingFuture.result raises concurrent.futures.TimeoutError,
# api_core/future/polling.py, read 2026-11)
CALL_ERRORS = (gx.GoogleAPICallError, gx.RetryError, TransportError, RefreshError, requests.RequestException,
               concurrent.futures.TimeoutError)
# what the inventory lists, and through which client: (resource kind, client, aggregated?, filtered by label
# (else by description))
INVENTORY_CLIENTS = [
    ("instance", "InstancesClient", True, True),
    ("disk", "DisksClient", True, True),
    ("address", "AddressesClient", True, True),
    ("address", "GlobalAddressesClient", False, True),
    ("scale-set", "InstanceGroupManagersClient", True, False),  # a flex-start pool's group: its VMs go with it
    ("launch-template", "InstanceTemplatesClient", False, False),
    ("placement-group", "ResourcePoliciesClient", True, False),
    ("router", "RoutersClient", True, False),
    ("firewall", "FirewallsClient", False, False),
    ("subnet", "SubnetworksClient", True, False),
    ("network", "NetworksClient", False, False),
    ("file-system", "filestore", False, True),
    ("file-system", "lustre", False, True),
    ("bucket", "storage", False, True),
]
# The stack buckets (ClusterBucket): Cloud Storage's JSON API lists a project's buckets with their
# labels (https://cloud.google.com/storage/docs/json_api/v1/buckets/list); only gpufleet's names.
# Endpoint: GPUFLEET_GCS_ENDPOINT.
GCS = ("GPUFLEET_GCS_ENDPOINT", "https://storage.googleapis.com")
BUCKET_PREFIX = "gpufleet-"
# File systems are not Compute resources: Filestore and Managed Lustre have their own REST
# APIs (https://cloud.google.com/filestore/docs/reference/rest, .../managed-lustre/docs/reference/rest),
# read here through google-auth's AuthorizedSession. Endpoints: GPUFLEET_GCP_FILESTORE_ENDPOINT,
# GPUFLEET_GCP_LUSTRE_ENDPOINT.
FILE_APIS = {"filestore": ("GPUFLEET_GCP_FILESTORE_ENDPOINT", "https://file.googleapis.com"),
             "lustre": ("GPUFLEET_GCP_LUSTRE_ENDPOINT", "https://lustre.googleapis.com")}
# Per Compute client: the request field naming one resource (get/delete) and the list field of an
# aggregated scope (``InstancesScopedList.instances`` ...).
FIELDS = {"InstancesClient": ("instance", "instances"), "DisksClient": ("disk", "disks"),
          "AddressesClient": ("address", "addresses"), "GlobalAddressesClient": ("address", None),
          "ResourcePoliciesClient": ("resource_policy", "resource_policies"), "RoutersClient": ("router", "routers"),
          "FirewallsClient": ("firewall", None), "SubnetworksClient": ("subnetwork", "subnetworks"),
          "NetworksClient": ("network", None),
          "InstanceGroupManagersClient": ("instance_group_manager", "instance_group_managers"),
          "InstanceTemplatesClient": ("instance_template", None)}
_ACCEL = {v: k for k, v in ACCELERATORS.items()}

# Regional GPU quota metrics per catalog GPU (Compute Engine quota metric names; spot, preemptible
# and flex-start VMs count against the PREEMPTIBLE_ ones).
# https://cloud.google.com/compute/resource-usage#gpu_quota (2025-06); flex-start: "Preemptible quota
# is charged" (cluster-director/docs/choose-consumption-option) and "preemptible quota is consumed"
# (compute/docs/instances/provisioning-models), both read 2026-11
GPU_METRICS = {"T4": "NVIDIA_T4_GPUS", "V100": "NVIDIA_V100_GPUS", "P100": "NVIDIA_P100_GPUS", "P4": "NVIDIA_P4_GPUS",
               "L4": "NVIDIA_L4_GPUS", "A100-40GB": "NVIDIA_A100_GPUS", "A100-80GB": "NVIDIA_A100_80GB_GPUS",
               "H100": "NVIDIA_H100_GPUS", "H100-MEGA": "NVIDIA_H100_MEGA_GPUS", "H200": "NVIDIA_H200_GPUS",
               "B200": "NVIDIA_B200_GPUS"}
# VMs launched into a reservation the team holds draw on the capacity it holds, not on a GPU quota: a future
# reservation in calendar mode, "No quota is charged"; an AI Hypercomputer future reservation, "Quota is
# automatically increased before capacity is delivered" (the consumption tables of cloud.google.com/
# cluster-director/docs/choose-consumption-option and ai-hypercomputer/docs/consumption-models, read 2026-11);
# VMs consuming a reservation use "the reserved resources ... instead of using the available resources in the
# compute zone" (compute/docs/instances/reservations-consume, read 2026-11). A quota the cloud applies anyway
# refuses the attempt, and failover reads that refusal
HELD = ("its nodes launch into the reservation, which holds their capacity: no GPU quota is charged (future and "
        "calendar-mode reservations charge none, per Google's consumption table)")


def on_gce() -> bool:
    """A Compute Engine VM (its metadata server has credentials), by the DMI product name."""
    try:
        with open("/sys/class/dmi/id/product_name", encoding="utf-8") as f:
            return "Google" in f.read()
    except OSError:
        return False


def _last(url: str | None) -> str:
    return (url or "").rstrip("/").rsplit("/", 1)[-1]


def _time(s: str | None) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(s.replace("Z", "+00:00")) if s else None
    except ValueError:
        return None


def classify(e) -> tuple[str, str]:
    msg = getattr(e, "message", None) or str(e)
    if isinstance(e, gx.NotFound):
        return "gone", msg
    if isinstance(e, (gx.TooManyRequests, gx.ServiceUnavailable, gx.InternalServerError, gx.Conflict)) or \
            "resourceInUseByAnotherResource" in str(e) or "resourceNotReady" in str(e):
        return "retry", msg
    return "failed", msg


def unreadable(e, where: str = "gcp") -> CloudUnreadable:
    """Why GCP could not be read: not reached, credentials refused (401, a token that does not
    refresh), permission denied (403), or another answer."""
    if isinstance(e, (TransportError, requests.ConnectionError, requests.Timeout, gx.RetryError, gx.DeadlineExceeded,
                      gx.ServiceUnavailable, concurrent.futures.TimeoutError)):
        kind = "unreachable"
    elif isinstance(e, (RefreshError, gx.Unauthenticated, gx.Unauthorized)):
        kind = "refused"
    elif isinstance(e, (gx.PermissionDenied, gx.Forbidden)):
        kind = "permission"
    else:
        kind = "error"
    return CloudUnreadable("gcp", kind, classify(e)[1][:300], where)


# Google's OAuth 2.0 token information endpoint (``GPUFLEET_GCP_OAUTH2_ENDPOINT`` replaces the host)
TOKENINFO = ("GPUFLEET_GCP_OAUTH2_ENDPOINT", "https://oauth2.googleapis.com")


def _user_email(creds) -> str | None:
    """A user's own credentials (``gcloud auth application-default login``) name no account; the
    tokeninfo endpoint says whose an access token is (``email``) when the token carries the email
    scope, as gcloud's login asks for (developers.google.com/identity/protocols/oauth2/javascript-
    implicit-flow, "tokeninfo"). None when it cannot say."""
    try:
        if not creds.valid:
            creds.refresh(google.auth.transport.requests.Request())
        base = os.environ.get(TOKENINFO[0], TOKENINFO[1]).rstrip("/")
        r = requests.get(f"{base}/tokeninfo", params={"access_token": creds.token}, timeout=10)
    except (requests.RequestException, TransportError, RefreshError):
        return None
    return (r.json().get("email") or None) if r.ok else None


class GcpApi:
    """``base.CloudApi`` for GCP."""

    provider = "gcp"

    def __init__(self, credentials=None, project: str | None = None, *, workers: int = 8):
        self._creds, self._project = credentials, project
        self.workers = workers
        self._clients: dict = {}

    # --- who ---------------------------------------------------------------------------------
    def _auth(self):
        if self._creds is None:
            if not on_gce():
                local_credentials.check()  # no key, no ADC file and not on GCE: say so without asking the network
            try:
                self._creds, found = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
            except DefaultCredentialsError as e:
                raise CredentialsError("gcp", f"gcp: no credentials found ({str(e).splitlines()[0][:160]})",
                                       CREDENTIAL_HINT) from None
            self._project = self._project or local_credentials.project() or found
        if not self._project:
            raise CredentialsError("gcp", "gcp: no project is set", "set GOOGLE_CLOUD_PROJECT=my-project")
        return self._creds

    @property
    def project(self) -> str:
        self._auth()
        return self._project

    def client(self, name: str):
        if name not in self._clients:
            endpoint = os.environ.get("GPUFLEET_GCP_ENDPOINT")
            self._clients[name] = getattr(compute_v1, name)(
                credentials=self._auth(), client_options=ClientOptions(api_endpoint=endpoint) if endpoint else None)
        return self._clients[name]

    def identity(self) -> dict:
        creds = self._auth()
        try:
            project = self.client("ProjectsClient").get(project=self._project)
        except Exception as e:  # noqa: BLE001 - refused credentials, an unknown project, no network
            raise unreadable(e, f"gcp project {self._project}") from None
        who = getattr(creds, "service_account_email", None) or getattr(creds, "signer_email", None) or \
            getattr(creds, "account", None) or _user_email(creds) or "user credentials (application default)"
        return {"account": project.name, "principal": who, "source": type(creds).__module__.split(".")[-1]}

    def regions(self, wanted: list[str] | None = None) -> list[str]:
        try:
            names = sorted(r.name for r in self.client("RegionsClient").list(project=self._project))
        except Exception as e:  # noqa: BLE001
            raise unreadable(e, "gcp regions") from None
        return pick_regions("gcp", names, wanted, "see gcloud compute regions list")

    # --- inventory ---------------------------------------------------------------------------
    def inventory(self, regions: list[str], cluster: str | None = None, on_region=None):
        """Every labelled (or described) resource of the project in ``regions``: one aggregated
        list per kind, side by side; (resources, {"gcp <kind>s": problem})."""
        wanted = set(regions)
        out: list[Resource] = []
        problems: dict[str, str] = {}

        def one(spec):
            try:
                return spec, list(self._list(spec, cluster)), None
            except Exception as e:  # noqa: BLE001 - one kind unreadable: the others still count
                return spec, [], unreadable(e).reason

        with ThreadPoolExecutor(max_workers=min(self.workers, len(INVENTORY_CLIENTS))) as pool:
            for spec, found, problem in pool.map(one, INVENTORY_CLIENTS):
                if problem:
                    problems[f"gcp {spec[1]}"] = problem
                out += [r for r in found if r.region in wanted or r.region == "global"]
        if on_region:
            for r in regions:
                on_region(f"gcp/{r}")
        return out, problems

    def _list(self, spec, cluster):
        kind, client_name, aggregated, by_label = spec
        if client_name in FILE_APIS:
            yield from self._file_systems(client_name, cluster)
            return
        if client_name == "storage":
            yield from self._buckets(cluster)
            return
        client = self.client(client_name)
        if by_label:
            flt = f'labels.{LABEL}="{cluster}"' if cluster else f"labels.{LABEL}:*"
        else:
            flt = 'description eq "gpufleet .*"'
        if aggregated:
            pages = client.aggregated_list(request={"project": self._project, "filter": flt,
                                                    "max_results": 500})
            items = ((scope, x) for scope, scoped in pages for x in (getattr(scoped, FIELDS[client_name][1]) or []))
        else:
            items = (("global", x) for x in client.list(request={"project": self._project, "filter": flt,
                                                                  "max_results": 500}))
        for scope, x in items:
            found = tags_of(x)
            if TAG_PREFIX + "cluster" not in found or (cluster and found[TAG_PREFIX + "cluster"] != cluster):
                continue
            yield self._resource(kind, client_name, scope, x, found)

    def _resource(self, kind, client_name, scope, x, found) -> Resource:
        where, _, place = scope.partition("/")  # zones/us-central1-a, regions/us-central1, global
        zone = place if where == "zones" else None
        region = zone.rsplit("-", 1)[0] if zone else (place if where == "regions" else "global")
        r = Resource("gcp", region, kind, x.name, found, name=x.name, zone=zone, created_at=_time(x.creation_timestamp),
                     ref={"client": client_name, "scope": where, "place": place})
        if kind == "instance":
            r.state = x.status
            machine = _last(x.machine_type)
            acc = [(a.accelerator_type, a.accelerator_count) for a in x.guest_accelerators]
            if acc and _last(acc[0][0]) in _ACCEL:
                machine = f"{machine}+{acc[0][1]}x{_ACCEL[_last(acc[0][0])]}"
            r.machine = machine
            r.spot = x.scheduling.provisioning_model == "SPOT" or bool(x.scheduling.preemptible)
        elif kind == "disk":
            r.state, r.size_gb, r.disk_type = x.status, float(x.size_gb or 0), _last(x.type_)
        elif kind == "address":
            r.state = x.status
        return r

    def session(self):
        """An authorized HTTP session for the REST APIs without a client here (Filestore, Lustre, Billing)."""
        if "session" not in self._clients:
            self._clients["session"] = AuthorizedSession(self._auth())
        return self._clients["session"]

    def _file_url(self, api: str, path: str) -> str:
        var, default = FILE_APIS[api]
        return f"{os.environ.get(var, default).rstrip('/')}/v1/{path}"

    def _file_systems(self, api: str, cluster: str | None):
        """Filestore / Managed Lustre instances of every location, by label, page by page."""
        params = {"filter": f'labels.{LABEL}="{cluster}"' if cluster else f"labels.{LABEL}:*", "pageSize": 100}
        url = self._file_url(api, f"projects/{self._project}/locations/-/instances")
        while True:
            resp = self.session().get(url, params=params, timeout=60)
            _raise_for(resp)
            body = resp.json()
            for x in body.get("instances", []):
                found = tags(x.get("labels"))
                if TAG_PREFIX + "cluster" not in found or (cluster and found[TAG_PREFIX + "cluster"] != cluster):
                    continue
                loc = x["name"].split("/")[3]  # projects/p/locations/<zone or region>/instances/<id>
                zone = loc if loc.count("-") == 2 else None
                size = x.get("capacityGib") or sum(int(f.get("capacityGb", 0)) for f in x.get("fileShares", []))
                yield Resource("gcp", zone.rsplit("-", 1)[0] if zone else loc, "file-system", x["name"], found,
                               name=x["name"].rsplit("/", 1)[-1], zone=zone, state=x.get("state"),
                               created_at=_time(x.get("createTime")), size_gb=float(size or 0) or None,
                               ref={"client": api})
            if not body.get("nextPageToken"):
                return
            params["pageToken"] = body["nextPageToken"]

    def _gcs(self, path: str) -> str:
        return f"{os.environ.get(GCS[0], GCS[1]).rstrip('/')}/storage/v1/{path}"

    def _buckets(self, cluster: str | None):
        params = {"project": self._project, "prefix": BUCKET_PREFIX, "maxResults": 1000}
        while True:
            resp = self.session().get(self._gcs("b"), params=params, timeout=60)
            _raise_for(resp)
            body = resp.json()
            for b in body.get("items", []):
                found = tags(b.get("labels"))
                if TAG_PREFIX + "cluster" not in found or (cluster and found[TAG_PREFIX + "cluster"] != cluster):
                    continue
                yield Resource("gcp", (b.get("location") or "global").lower(), "bucket", b["name"], found,
                               name=b["name"], created_at=_time(b.get("timeCreated")), ref={"client": "storage"})
            if not body.get("nextPageToken"):
                return
            params["pageToken"] = body["nextPageToken"]

    def _empty_bucket(self, bucket: str) -> None:
        """Delete every object (and every generation of it) so that the bucket can be deleted."""
        params = {"versions": "true", "maxResults": 1000}
        while True:
            resp = self.session().get(self._gcs(f"b/{bucket}/o"), params=params, timeout=60)
            _raise_for(resp)
            body = resp.json()
            for o in body.get("items", []):
                gone = self.session().delete(self._gcs(f"b/{bucket}/o/{quote(o['name'], safe='')}"),
                                             params={"generation": o.get("generation")} if o.get("generation") else None,
                                             timeout=60)
                if gone.status_code != 404:
                    _raise_for(gone)
            if not body.get("nextPageToken"):
                return
            params["pageToken"] = body["nextPageToken"]

    # --- reserved capacity (`gpufleet capacity find`) ----------------------------------------------
    def capacity(self, region: str, instance_type: str, nodes: int, hours: int, start: str | None) -> list[Capacity]:
        """The project's reservations of the machine type in the region's zones, ready, with how many
        VMs each still takes (``specificReservation.count`` - ``inUseCount``; reservations.aggregatedList,
        https://cloud.google.com/compute/docs/reference/rest/v1/reservations, read 2026-11). GCP
        sells future reservations through its console and ``gcloud``: there is no read call for
        offerings, so none are listed."""
        try:
            pages = self.client("ReservationsClient").aggregated_list(request={"project": self.project})
            found = [(scope, r) for scope, listed in pages for r in listed.reservations]
        except gx.GoogleAPICallError as e:
            raise unreadable(e, f"gcp {region} reservations") from None
        out = []
        for scope, r in found:
            zone = scope.rsplit("/", 1)[-1]
            want = r.specific_reservation
            if not zone.startswith(region + "-") or r.status != "READY" or \
                    want.instance_properties.machine_type.rsplit("/", 1)[-1] != instance_type:
                continue
            out.append(Capacity("gcp", "reservation" + (" (specific)" if r.specific_reservation_required else ""),
                                r.name, region, zone, instance_type, int(want.count) - int(want.in_use_count), True))
        return out

    # --- golden images (`gpufleet image list/delete`) ---------------------------------------------
    def images(self, regions: list[str]) -> list[FoundImage]:
        """The project's images labelled ``gpufleet-image``; images are global, so region ``global``."""
        try:
            found = list(self.client("ImagesClient").list(request={"project": self.project,
                                                                   "filter": f"labels.{LABEL_PREFIX}image:*"}))
        except gx.GoogleAPICallError as e:
            raise unreadable(e, "gcp images") from None
        return [FoundImage("gcp", "global", x.labels[f"{LABEL_PREFIX}image"], f"projects/{self._project}/global/images/"
                           f"{x.name}", tags(dict(x.labels)), x.creation_timestamp or None,
                           size_gb=float(x.disk_size_gb or 0) or None) for x in found]

    def delete_image(self, image: FoundImage) -> None:
        try:
            self.client("ImagesClient").delete(project=self.project, image=_last(image.id)).result(timeout=600)
        except gx.NotFound:
            pass
        except gx.GoogleAPICallError as e:
            raise unreadable(e, f"gcp image {image.id}") from None

    # --- a pool's VMs (clouds.gcp.pool_vms) --------------------------------------------------------
    def bulk_insert(self, zone: str, body: dict, timeout_s: float = 1800) -> None:
        """One ``instances.bulkInsert`` (``body``: the REST API's BulkInsertInstanceResource),
        waited for. A refusal is raised as Compute Engine states it: ``<code>: <message>`` of the
        operation's first error, or ``Error <status>: <message>, <reason>`` of a refused call."""
        resource = compute_v1.BulkInsertInstanceResource.from_json(json.dumps(body), ignore_unknown_fields=False)
        try:
            op = self.client("InstancesClient").bulk_insert(project=self.project, zone=zone,
                                                             bulk_insert_instance_resource_resource=resource)
            op.result(timeout=timeout_s)
        except gx.GoogleAPICallError as e:
            raise Exception(_stated(e)) from None
        errors = list(op.error.errors)  # an unset error reads as an empty one
        if errors:
            raise Exception(f"{errors[0].code}: {errors[0].message}")

    def insert_placement_policy(self, region: str, body: dict, timeout_s: float = 300) -> None:
        """One ``resourcePolicies.insert`` (``body``: the REST API's ResourcePolicy), waited for; one
        of that name already there (a retried create) is fine."""
        policy = compute_v1.ResourcePolicy.from_json(json.dumps(body), ignore_unknown_fields=False)
        try:
            self.client("ResourcePoliciesClient").insert(
                project=self.project, region=region, resource_policy_resource=policy).result(timeout=timeout_s)
        except gx.Conflict:
            pass
        except gx.GoogleAPICallError as e:
            raise Exception(_stated(e)) from None

    def delete_placement_policies(self, region: str, names: list[str]) -> None:
        """Delete the resource policies ``names`` of ``region``; one already gone is fine."""
        for name in names:
            try:
                self.client("ResourcePoliciesClient").delete(project=self.project, region=region,
                                                             resource_policy=name).result(timeout=300)
            except gx.NotFound:
                pass

    def resize_request(self, zone: str, group: str, name: str) -> tuple[str, str | None]:
        """A resize request's state, and its error as ``<code>: <message>`` (``status.error`` or
        its last attempt's; InstanceGroupManagerResizeRequest, compute/docs/reference/rest/v1/
        instanceGroupManagerResizeRequests)."""
        try:
            r = self.client("InstanceGroupManagerResizeRequestsClient").get(
                project=self.project, zone=zone, instance_group_manager=group, resize_request=name)
        except gx.GoogleAPICallError as e:
            raise Exception(_stated(e)) from None
        errors = list(r.status.error.errors) or list(r.status.last_attempt.error.errors)
        return r.state, (f"{errors[0].code}: {errors[0].message}" if errors else None)

    def managed_instance_names(self, zone: str, group: str) -> list[str]:
        """The names of a managed instance group's VMs (listManagedInstances)."""
        pages = self.client("InstanceGroupManagersClient").list_managed_instances(
            project=self.project, zone=zone, instance_group_manager=group)
        return [_last(m.instance) for m in pages]

    def instances_named(self, zone: str, names: list[str]) -> list[dict]:
        """The VMs of ``zone`` among ``names``: name, id, first private and public address."""
        wanted = set(names)
        out = []
        for x in self.client("InstancesClient").list(request={"project": self.project, "zone": zone,
                                                               "max_results": 500}):
            if x.name in wanted:
                nic = x.network_interfaces[0] if x.network_interfaces else None
                nat = nic.access_configs[0].nat_i_p if nic and nic.access_configs else None
                out.append({"name": x.name, "id": str(x.id), "private_ip": nic.network_i_p if nic else None,
                            "public_ip": nat or None})
        return out

    # --- a pool's nodes replaced, added, removed (`gpufleet heal`: clouds.gcp.replace) ------------
    def gone_nodes(self, region: str, *, cluster: str, pool: str, node_ids: list[str]) -> set[str]:
        """Which of the pool's VMs the region no longer holds (``gcp.replace``)."""
        try:
            return replace.gone_nodes(self, region, cluster=cluster, pool=pool, node_ids=node_ids)
        except CALL_ERRORS as e:
            raise unreadable(e, f"gcp {region} listing pool {pool}'s VMs") from None

    def replace_node(self, region: str, *, cluster: str, pool: str, node_id: str, release_first: bool = False,
                     launched: str | None = None, on_launch=None, market: str | None = None,
                     request: dict | None = None) -> dict:
        """One of the pool's VMs replaced through the pool's own request (``gcp.replace``)."""
        try:
            return replace.replace_node(self, region, cluster=cluster, pool=pool, node_id=node_id,
                                        release_first=release_first, launched=launched, on_launch=on_launch,
                                        market=market, request=request)
        except CALL_ERRORS as e:
            raise unreadable(e, f"gcp {region} replacing {node_id}") from None

    def add_nodes(self, region: str, *, cluster: str, pool: str, count: int, market: str | None = None,
                  on_launch=None) -> list[dict]:
        """``count`` VMs more for the pool, from its own request (``gcp.replace``)."""
        try:
            return replace.add_nodes(self, region, cluster=cluster, pool=pool, count=count, market=market,
                                     on_launch=on_launch)
        except CALL_ERRORS as e:
            raise unreadable(e, f"gcp {region} adding {count} node(s) to pool {pool}") from None

    def remove_nodes(self, region: str, *, cluster: str, pool: str, node_ids: list[str]) -> None:
        """Exactly these VMs of the pool deleted, their labels checked first (``gcp.replace``)."""
        try:
            replace.remove_nodes(self, region, cluster=cluster, pool=pool, node_ids=node_ids)
        except CALL_ERRORS as e:
            raise unreadable(e, f"gcp {region} removing node(s) of pool {pool}") from None

    def delete_instances(self, zone: str, names: list[str]) -> None:
        """Delete the VMs ``names`` of ``zone`` and wait for each; one already gone is fine."""
        def one(name):
            try:
                self.client("InstancesClient").delete(project=self.project, zone=zone, instance=name).result(timeout=900)
            except gx.NotFound:
                pass

        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            list(pool.map(one, names))

    # --- deletion ------------------------------------------------------------------------------
    def delete(self, region: str, kind: str, resources: list[Resource]) -> dict[str, tuple[str, str]]:
        return delete_each(resources, self._delete_one, classify)

    def _delete_one(self, r: Resource) -> None:
        # the delete returns an operation; it is not awaited: still_there asks for the resource
        if r.ref["client"] in FILE_APIS:
            _raise_for(self.session().delete(self._file_url(r.ref["client"], r.id), timeout=60))
        elif r.ref["client"] == "storage":  # a bucket goes only once empty
            self._empty_bucket(r.id)
            _raise_for(self.session().delete(self._gcs(f"b/{r.id}"), timeout=60))
        else:
            self.client(r.ref["client"]).delete(request=self._ident(r))

    def still_there(self, region: str, kind: str, resources: list[Resource]) -> dict[str, str]:
        return present_each(resources, self._state, classify)

    def _state(self, r: Resource) -> str:
        if r.ref["client"] in FILE_APIS:
            resp = self.session().get(self._file_url(r.ref["client"], r.id), timeout=60)
            _raise_for(resp)
            return resp.json().get("state", "")
        if r.ref["client"] == "storage":
            _raise_for(self.session().get(self._gcs(f"b/{r.id}"), timeout=60))
            return "present"
        return getattr(self.client(r.ref["client"]).get(request=self._ident(r)), "status", "")

    def _ident(self, r: Resource) -> dict:
        req = {"project": self._project, FIELDS[r.ref["client"]][0]: r.id}
        if r.ref["scope"] == "zones":
            req["zone"] = r.ref["place"]
        elif r.ref["scope"] == "regions":
            req["region"] = r.ref["place"]
        return req

    # --- quotas ----------------------------------------------------------------------------
    def quotas(self, region: str, needs) -> list:
        """Regional GPU quotas (per model, PREEMPTIBLE_ for spot and flex-start) and the project-wide GPU
        count; nodes in a held reservation are a line of their own that charges none (``HELD``)."""
        lines = [QuotaLine("gcp", region, f"reservation {n.reservation}", "reservation", "GPUs",
                           float(n.instance.gpu_count * n.nodes), None, None, [n.pool], HELD, charged=False)
                 for n in needs if n.reservation]
        groups: dict[str, list] = {}
        for n in (n for n in needs if not n.reservation):
            base = GPU_METRICS.get(n.instance.gpu)
            if base:
                groups.setdefault(("PREEMPTIBLE_" if n.spot or n.flex_start else "") + base, []).append(n)
        if not groups:
            return lines
        try:
            reg = {q.metric: q for q in self.client("RegionsClient").get(project=self._project, region=region).quotas}
            proj = {q.metric: q for q in self.client("ProjectsClient").get(project=self._project).quotas}
            note = ""
        except Exception as e:  # noqa: BLE001
            reg, proj, note = {}, {}, f"could not be read: {classify(e)[1][:200]}"
        for metric, ns in groups.items():
            q = reg.get(metric)
            lines.append(QuotaLine("gcp", region, metric, metric, "GPUs",
                                   float(sum(n.instance.gpu_count * n.nodes for n in ns)),
                                   q.limit if q else None, q.usage if q else None, [n.pool for n in ns],
                                   note or ("" if q else f"{metric} is not a quota of {region}: no such GPU there?")))
        total = proj.get("GPUS_ALL_REGIONS")
        if groups and total is not None:
            lines.append(QuotaLine("gcp", "all regions", "GPUS_ALL_REGIONS", "GPUS_ALL_REGIONS", "GPUs",
                                   float(sum(n.instance.gpu_count * n.nodes for ns in groups.values() for n in ns)),
                                   total.limit, total.usage, sorted({n.pool for ns in groups.values() for n in ns})))
        return lines



def _stated(e) -> str:
    """A refusal as Compute Engine states it, so ``refusals`` reads it the same whichever of
    pulumi-gcp and gpufleet made the call: a failed operation (google-api-core raises its HTTP
    status, ``503 SERVICE UNAVAILABLE``, with the operation's ``error.errors[]`` beside it) as
    ``<code>: <message>`` of its first error; a refused call as pulumi-gcp prints one
    (``googleapi: Error 403: <message>, forbidden``)."""
    first = next((x for x in (e.errors or []) if not isinstance(x, dict)), None)
    if first is not None and getattr(first, "code", None):
        return f"{first.code}: {first.message}"
    reason = getattr(e, "reason", None) or next((x.get("reason") for x in (e.errors or []) if isinstance(x, dict)), "")
    return f"googleapi: Error {e.code}: {e.message}" + (f", {reason}" if reason else "")


def _raise_for(resp) -> None:
    """A REST error as google-api-core's exception for its status (what ``classify`` reads)."""
    if resp.status_code >= 400:
        raise gx.from_http_response(resp)

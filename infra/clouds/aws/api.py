"""AWS through boto3: who the credentials are, resources by tag, deletion, vCPU quotas.

boto3 honours ``AWS_ENDPOINT_URL`` (and per-service ``AWS_ENDPOINT_URL_<SERVICE>``), which
is how the tests point it at moto's server. Loaded through ``aws.sdk`` by the lifecycle commands.
"""

from __future__ import annotations

import datetime as dt
import threading
from concurrent.futures import ThreadPoolExecutor

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError, NoCredentialsError
from botocore.exceptions import ConnectionError as BotoConnectionError

from gpufleet.clouds.aws import credentials, replace, resize
from gpufleet.clouds.aws.errors import CREDENTIAL_HINT
from gpufleet.clouds.base import Capacity, FoundImage, QuotaLine
from gpufleet.clouds.resources import Resource, delete_each, pick_regions
from gpufleet.clouds.tags import TAG_PREFIX, gpufleet_tags
from gpufleet.errors import CloudUnreadable, CredentialsError

DEFAULT_REGION = "us-east-1"

# Error codes that mean "already gone", and those worth retrying (still in use, a dependency
# going away, throttled). Anything else is a refusal: retrying will not help.
GONE_CODES = ("NotFound", "NotFoundException", ".Unknown", "FileSystemNotFound", "NatGatewayNotFound", "NoSuchBucket")
RETRY_CODES = {"DependencyViolation", "InvalidNetworkInterface.InUse", "VolumeInUse", "IncorrectState",
               "IncorrectInstanceState", "InvalidIPAddress.InUse", "InvalidPlacementGroup.InUse",
               "ResourceInUse", "InvalidGroup.InUse", "RequestLimitExceeded", "Throttling", "ThrottlingException",
               "ServiceUnavailable", "Unavailable", "InternalError", "InternalFailure", "BadRequest"}

# The EC2 vCPU quotas per instance class, on-demand and spot (Service Quotas, service code
# "ec2"). https://docs.aws.amazon.com/ec2/latest/instancetypes/ec2-instance-quotas.html
# and the Service Quotas console (2025-06).
VCPU_QUOTAS = {
    ("P", "ondemand"): ("L-417A185B", "Running On-Demand P instances"),
    ("G", "ondemand"): ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    ("Trn", "ondemand"): ("L-2C3B7624", "Running On-Demand Trn instances"),
    ("Inf", "ondemand"): ("L-1945791B", "Running On-Demand Inf instances"),
    ("DL", "ondemand"): ("L-6E869C2A", "Running On-Demand DL instances"),
    ("Standard", "ondemand"): ("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"),
    ("P", "spot"): ("L-7212CCBC", "All P Spot Instance Requests"),
    ("G", "spot"): ("L-3819A6DF", "All G and VT Spot Instance Requests"),
    ("Trn", "spot"): ("L-6B0D517C", "All Trn Spot Instance Requests"),
    ("Inf", "spot"): ("L-B5D1601B", "All Inf Spot Instance Requests"),
    ("DL", "spot"): ("L-85EED4F7", "All DL Spot Instance Requests"),
    ("Standard", "spot"): ("L-34B43A08", "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests"),
}


def instance_class(instance_type: str) -> str:
    """The quota class of an instance type: p5.48xlarge -> P, g6e.xlarge -> G, trn1... -> Trn."""
    family = instance_type.split(".", 1)[0].lower()
    for prefix, cls in (("trn", "Trn"), ("inf", "Inf"), ("dl", "DL"), ("vt", "G"), ("p", "P"), ("g", "G")):
        if family.startswith(prefix) and (len(family) > len(prefix) and family[len(prefix)].isdigit()):
            return cls
    return "Standard"


def _code(err) -> str:
    return err.response.get("Error", {}).get("Code", "") if hasattr(err, "response") else ""


def classify(err) -> tuple[str, str]:
    """A botocore error as (gone | retry | failed, message); no answer at all is worth a retry."""
    if isinstance(err, BotoCoreError):
        return "retry", str(err)
    code = _code(err)
    msg = err.response.get("Error", {}).get("Message", "") if hasattr(err, "response") else str(err)
    text = f"{code}: {msg}" if code else str(err)
    if code.endswith(GONE_CODES):
        return "gone", text
    if code in RETRY_CODES:
        return "retry", text
    return "failed", text


# Error codes of credentials AWS does not accept, and of an identity that may not do something.
REFUSED_CODES = {"InvalidClientTokenId", "SignatureDoesNotMatch", "ExpiredToken", "ExpiredTokenException",
                 "UnrecognizedClientException", "AuthFailure", "InvalidAccessKeyId", "RequestExpired"}
DENIED_CODES = {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "OptInRequired"}


def _iso(t) -> str | None:
    """A botocore timestamp as ISO 8601 UTC."""
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if t else None


def unreadable(err, where: str = "aws") -> CloudUnreadable:
    """Why AWS could not be read: not reached (no network, a wrong endpoint), credentials refused,
    permission denied, or another answer."""
    if isinstance(err, (BotoConnectionError, HTTPClientError)):
        return CloudUnreadable("aws", "unreachable", str(err)[:300], where)
    code = _code(err)
    kind = "refused" if code in REFUSED_CODES else "permission" if code in DENIED_CODES else "error"
    return CloudUnreadable("aws", kind, classify(err)[1][:300], where)


class AwsApi:
    """``base.CloudApi`` for AWS."""

    provider = "aws"

    def __init__(self, session=None, *, workers: int = 8):
        self.session = session or credentials.session()
        self.config = Config(retries={"mode": "standard", "max_attempts": 6}, max_pool_connections=max(10, workers * 2),
                             connect_timeout=10, read_timeout=60)
        self.workers = workers
        self._clients: dict = {}
        self._lock = threading.Lock()

    def client(self, service: str, region: str):
        key = (service, region)
        with self._lock:  # creating clients from one session is not thread-safe
            if key not in self._clients:
                self._clients[key] = self.session.client(service, region_name=region, config=self.config)
            return self._clients[key]

    @property
    def home_region(self) -> str:
        return self.session.region_name or DEFAULT_REGION

    # --- who -------------------------------------------------------------------------------
    def identity(self) -> dict:
        """The account and principal of the credentials (STS GetCallerIdentity)."""
        creds = self.session.get_credentials()
        if creds is None:
            raise CredentialsError("aws", "aws: no credentials found (environment, ~/.aws, SSO or instance role)",
                                   CREDENTIAL_HINT)
        try:
            me = self.client("sts", self.home_region).get_caller_identity()
        except NoCredentialsError:
            raise CredentialsError("aws", "aws: no credentials found", CREDENTIAL_HINT) from None
        except Exception as e:  # noqa: BLE001 - any other answer (an error, garbage, none): not read
            raise unreadable(e) from None
        return {"account": me["Account"], "principal": me["Arn"], "source": creds.method}

    def regions(self, wanted: list[str] | None = None) -> list[str]:
        """The account's enabled regions, or ``wanted`` after checking each exists."""
        try:
            resp = self.client("ec2", self.home_region).describe_regions(AllRegions=False)
        except Exception as e:  # noqa: BLE001
            raise unreadable(e, "aws regions") from None
        names = [r["RegionName"] for r in resp["Regions"]]
        return pick_regions("aws", names, wanted, f"enabled regions: {', '.join(sorted(names))}",
                            " (or it is not enabled for this account)")

    # --- inventory -------------------------------------------------------------------------
    def inventory(self, regions: list[str], cluster: str | None = None, on_region=None):
        """Every resource tagged ``gpufleet:cluster`` (= ``cluster`` when given) in ``regions``,
        the regions side by side: (resources, {"aws/<region>": problem} for what could not be read)."""
        out: list[Resource] = []
        problems: dict[str, str] = {}
        with ThreadPoolExecutor(max_workers=min(self.workers, max(1, len(regions)))) as pool:
            for region, found, trouble in pool.map(lambda r: (r, *self._region(r, cluster)), regions):
                out += found
                problems.update(trouble)
                if on_region:
                    on_region(f"aws/{region}")
        return out, problems

    def _region(self, region: str, cluster: str | None) -> tuple[list[Resource], dict[str, str]]:
        """One region, kind by kind; a kind that cannot be listed is a problem, the others still count."""
        f = ([{"Name": f"tag:{TAG_PREFIX}cluster", "Values": [cluster]}] if cluster
             else [{"Name": "tag-key", "Values": [f"{TAG_PREFIX}cluster"]}])
        out: list[Resource] = []
        problems: dict[str, str] = {}
        for kind, lister in LISTERS.items():
            try:
                for rid, tags, kw in lister(self, region, f, cluster):
                    t = {x["Key"]: x["Value"] for x in tags or []}
                    kw.setdefault("name", t.get("Name", ""))
                    out.append(Resource("aws", region, kind, rid, gpufleet_tags(t), **kw))
            except Exception as e:  # noqa: BLE001 - a kind that cannot be listed; the others still count
                where = f"aws/{region} {kind}s"
                problems[where] = unreadable(e, where).reason
        return out, problems

    # --- deletion --------------------------------------------------------------------------
    def delete(self, region: str, kind: str, resources: list[Resource]) -> dict[str, tuple[str, str]]:
        """Ask AWS to delete resources of one kind in one region: {id: (deleted|gone|retry|failed, message)}."""
        ec2 = self.client("ec2", region)
        out: dict[str, tuple[str, str]] = {}
        if kind == "instance":
            ids = [r.id for r in resources]
            for i in range(0, len(ids), 500):
                batch = ids[i:i + 500]
                try:
                    ec2.terminate_instances(InstanceIds=batch)
                    out.update({x: ("deleted", "terminating") for x in batch})
                except ClientError:  # one refusal fails the whole call: find which, one by one
                    out.update(delete_each([r for r in resources if r.id in batch],
                                           lambda r: ec2.terminate_instances(InstanceIds=[r.id]) and None, classify))
            for x, (status, msg) in out.items():
                if status == "failed" and "OperationNotPermitted" in msg:
                    out[x] = (status, msg + " (termination protection is on: aws ec2 modify-instance-attribute "
                                            f"--region {region} --instance-id {x} --no-disable-api-termination)")
            return out
        return delete_each(resources, lambda r: self._delete_one(ec2, region, r), classify)

    def _delete_one(self, ec2, region: str, r: Resource) -> None:
        k = r.kind
        if k == "volume":
            ec2.delete_volume(VolumeId=r.id)
        elif k == "network-interface":
            if r.ref.get("attachment"):
                try:
                    ec2.detach_network_interface(AttachmentId=r.ref["attachment"], Force=True)
                except ClientError as e:
                    if classify(e)[0] != "gone":
                        raise
            ec2.delete_network_interface(NetworkInterfaceId=r.id)
        elif k == "security-group":
            ec2.delete_security_group(GroupId=r.id)
        elif k == "placement-group":
            ec2.delete_placement_group(GroupName=r.ref["name"])
        elif k == "address":
            if r.ref.get("association"):
                ec2.disassociate_address(AssociationId=r.ref["association"])
            ec2.release_address(AllocationId=r.id)
        elif k == "nat-gateway":
            ec2.delete_nat_gateway(NatGatewayId=r.id)
        elif k == "launch-template":
            ec2.delete_launch_template(LaunchTemplateId=r.id)
        elif k == "key-pair":
            ec2.delete_key_pair(KeyPairId=r.id) if r.id.startswith("key-") else ec2.delete_key_pair(KeyName=r.name)
        elif k == "subnet":
            ec2.delete_subnet(SubnetId=r.id)
        elif k == "route-table":
            for a in r.ref.get("associations", []):
                ec2.disassociate_route_table(AssociationId=a)
            ec2.delete_route_table(RouteTableId=r.id)
        elif k == "internet-gateway":
            for vpc in r.ref.get("vpcs", []):
                ec2.detach_internet_gateway(InternetGatewayId=r.id, VpcId=vpc)
            ec2.delete_internet_gateway(InternetGatewayId=r.id)
        elif k == "network":
            ec2.delete_vpc(VpcId=r.id)
        elif k == "file-system":
            self.client("fsx", region).delete_file_system(FileSystemId=r.id)
        elif k == "fleet":  # an instant fleet cannot outlive its instances: EC2 terminates any left
            failed = ec2.delete_fleets(FleetIds=[r.id], TerminateInstances=True).get("UnsuccessfulFleetDeletions")
            if failed:
                e = failed[0].get("Error") or {}
                raise ClientError({"Error": {"Code": e.get("Code", "Unknown"), "Message": e.get("Message", "")}},
                                  "DeleteFleets")
        elif k == "bucket":  # a bucket goes only once empty: every object version and delete marker first
            s3 = self.client("s3", region)
            empty_bucket(s3, r.id)
            s3.delete_bucket(Bucket=r.id)
        else:
            raise ValueError(f"aws: cannot delete a {k}")

    def still_there(self, region: str, kind: str, resources: list[Resource]) -> dict[str, str]:
        """Of resources whose deletion was accepted, those not gone yet: {id: state}."""
        ids = [r.id for r in resources]
        if kind == "instance":
            left = {}
            ec2 = self.client("ec2", region)
            for i in range(0, len(ids), 500):
                try:
                    resp = ec2.describe_instances(InstanceIds=ids[i:i + 500])
                except ClientError as e:
                    if classify(e)[0] == "gone":
                        continue
                    raise
                for rv in resp["Reservations"]:
                    for x in rv["Instances"]:
                        if x["State"]["Name"] != "terminated":
                            left[x["InstanceId"]] = x["State"]["Name"]
            return left
        if kind == "nat-gateway":
            resp = self.client("ec2", region).describe_nat_gateways(NatGatewayIds=ids)
            return {n["NatGatewayId"]: n["State"] for n in resp["NatGateways"] if n["State"] != "deleted"}
        if kind == "file-system":
            left = {}
            for x in ids:
                try:
                    fs = self.client("fsx", region).describe_file_systems(FileSystemIds=[x])["FileSystems"]
                except ClientError as e:
                    if classify(e)[0] == "gone":
                        continue
                    raise
                if fs:
                    left[x] = fs[0].get("Lifecycle", "present")
            return left
        return {}  # the other deletions are synchronous

    # --- a pool's AMI (clouds.aws.ami) -------------------------------------------------------
    def newest_image(self, region: str, owner: str, pattern: str) -> str:
        """The newest available x86_64 AMI of ``owner`` whose name matches ``pattern``: the latest
        CreationDate, as terraform-provider-aws's aws_ami data source picks with ``most_recent``."""
        try:
            found = self.client("ec2", region).describe_images(Owners=[owner], Filters=[
                {"Name": "name", "Values": [pattern]}, {"Name": "architecture", "Values": ["x86_64"]},
                {"Name": "state", "Values": ["available"]}])["Images"]
        except (ClientError, BotoCoreError) as e:
            raise unreadable(e, f"aws {region} images of {owner}") from None
        if not found:
            raise Exception(f"no available x86_64 AMI of owner {owner} named {pattern} in {region}")
        return max(found, key=lambda x: x["CreationDate"])["ImageId"]

    # --- a pool's instant fleet ------------------------------------------------------------
    def fleet_nodes(self, region: str, fleet_id: str) -> tuple[list[dict], list[dict]]:
        """An instant fleet's instances ({id, private_ip, public_ip}, in the fleet's order) and the
        errors EC2 recorded for it ({code, message}), from DescribeFleets and DescribeInstances."""
        ec2 = self.client("ec2", region)
        fleets = ec2.describe_fleets(FleetIds=[fleet_id]).get("Fleets") or [{}]
        ids = [i for s in fleets[0].get("Instances") or [] for i in s.get("InstanceIds") or []]
        errors = [{"code": e.get("ErrorCode"), "message": e.get("ErrorMessage")} for e in fleets[0].get("Errors") or []]
        found: dict[str, dict] = {}
        for i in range(0, len(ids), 500):
            for rv in ec2.describe_instances(InstanceIds=ids[i:i + 500])["Reservations"]:
                for x in rv["Instances"]:
                    found[x["InstanceId"]] = {"id": x["InstanceId"], "private_ip": x.get("PrivateIpAddress"),
                                              "public_ip": x.get("PublicIpAddress")}
        return [found[i] for i in ids if i in found], errors

    def gone_nodes(self, region: str, *, cluster: str, pool: str, node_ids: list[str]) -> set[str]:
        """Which of the pool's nodes EC2 says are terminated (``aws.replace``)."""
        try:
            return replace.gone_nodes(self.client("ec2", region), cluster=cluster, pool=pool, node_ids=node_ids)
        except (ClientError, BotoCoreError) as e:
            raise unreadable(e, f"aws {region} listing pool {pool}'s terminated nodes") from None

    def replace_node(self, region: str, *, cluster: str, pool: str, node_id: str, release_first: bool = False,
                     launched: str | None = None, on_launch=None, market: str | None = None) -> dict:
        """One of the pool's nodes replaced through the pool's own request (``aws.replace``)."""
        try:
            return replace.replace_node(self.client("ec2", region), cluster=cluster, pool=pool, node_id=node_id,
                                        release_first=release_first, launched=launched, on_launch=on_launch,
                                        market=market)
        except (ClientError, BotoCoreError) as e:
            raise unreadable(e, f"aws {region} replacing {node_id}") from None

    def add_nodes(self, region: str, *, cluster: str, pool: str, count: int, market: str | None = None,
                  on_launch=None) -> list[dict]:
        """``count`` more nodes for the pool through its own request (``aws.resize``)."""
        try:
            return resize.add_nodes(self.client("ec2", region), cluster=cluster, pool=pool, count=count, market=market,
                                    on_launch=on_launch)
        except (ClientError, BotoCoreError) as e:
            raise unreadable(e, f"aws {region} adding {count} node(s) to pool {pool}") from None

    def remove_nodes(self, region: str, *, cluster: str, pool: str, node_ids: list[str]) -> None:
        """Exactly these nodes of the pool terminated, their tags checked first (``aws.resize``)."""
        try:
            resize.remove_nodes(self.client("ec2", region), cluster=cluster, pool=pool, node_ids=node_ids)
        except (ClientError, BotoCoreError) as e:
            raise unreadable(e, f"aws {region} removing {', '.join(node_ids)} from pool {pool}") from None

    # --- quotas ----------------------------------------------------------------------------
    def quotas(self, region: str, needs) -> list:
        """One line per EC2 vCPU quota the needs touch: limit (Service Quotas) and vCPUs in use."""
        groups: dict[tuple[str, str], list] = {}
        for n in needs:
            groups.setdefault((instance_class(n.instance.name), "spot" if n.spot else "ondemand"), []).append(n)
        lines = []
        for (cls, market), ns in groups.items():
            code, name = VCPU_QUOTAS[(cls, market)]
            line = QuotaLine("aws", region, name, code, "vCPUs", float(sum(n.instance.vcpus * n.nodes for n in ns)),
                             None, None, [n.pool for n in ns])
            try:
                line.code, line.quota, line.limit = self.vcpu_quota(region, cls, market)
                line.used = self.vcpus_in_use(region, cls, market)
            except (ClientError, BotoCoreError) as e:
                line.note = f"could not be read: {classify(e)[1]}"
            lines.append(line)
        return lines

    def capacity(self, region: str, instance_type: str, nodes: int, hours: int, start: str | None) -> list[Capacity]:
        """The account's Capacity Reservations of the type (On-Demand ones and Capacity Blocks,
        active or scheduled: DescribeCapacityReservations, API_CapacityReservation.html), then the
        Capacity Block offerings for ``nodes`` over ``hours`` starting within two weeks of ``start``
        (DescribeCapacityBlockOfferings, API_CapacityBlockOffering.html; read 2026-11). A type not
        sold as Capacity Blocks is answered with its held reservations alone."""
        ec2 = self.client("ec2", region)
        out = []
        try:
            pages = ec2.get_paginator("describe_capacity_reservations").paginate(Filters=[
                {"Name": "instance-type", "Values": [instance_type]}, {"Name": "state", "Values": ["active", "scheduled"]}])
            for cr in (x for page in pages for x in page["CapacityReservations"]):
                block = cr.get("ReservationType") == "capacity-block"
                out.append(Capacity("aws", "capacity block" if block else "capacity reservation",
                                    cr["CapacityReservationId"], region, cr["AvailabilityZone"], instance_type,
                                    int(cr.get("AvailableInstanceCount", 0)), True, _iso(cr.get("StartDate")),
                                    _iso(cr.get("EndDate"))))
            first = dt.datetime.fromisoformat(start) if start else dt.datetime.now(dt.timezone.utc)
            first = first if first.tzinfo else first.replace(tzinfo=dt.timezone.utc)
            offered = ec2.describe_capacity_block_offerings(
                InstanceType=instance_type, InstanceCount=nodes, CapacityDurationHours=hours, StartDateRange=first,
                EndDateRange=first + dt.timedelta(days=14, hours=hours))["CapacityBlockOfferings"]
        except ClientError as e:
            if _code(e) not in ("InvalidParameterValue", "Unsupported"):  # a type not sold as Capacity Blocks
                raise unreadable(e, f"aws {region}") from None
            offered = []
        except BotoCoreError as e:
            raise unreadable(e, f"aws {region}") from None
        for o in offered:
            out.append(Capacity("aws", "capacity block offering", o["CapacityBlockOfferingId"], region,
                                o["AvailabilityZone"], instance_type, int(o["InstanceCount"]), False,
                                _iso(o.get("StartDate")), _iso(o.get("EndDate")), float(o["UpfrontFee"]),
                                f"aws ec2 purchase-capacity-block --region {region} --capacity-block-offering-id "
                                f"{o['CapacityBlockOfferingId']} --instance-platform Linux/UNIX"))
        return out

    def images(self, regions: list[str]) -> list[FoundImage]:
        """The account's AMIs tagged ``gpufleet:image`` in ``regions``, with the EBS snapshots behind each."""
        return [x for region in regions for x in self._images(region)]

    def _images(self, region: str) -> list[FoundImage]:
        try:
            found = self.client("ec2", region).describe_images(
                Owners=["self"], Filters=[{"Name": "tag-key", "Values": [f"{TAG_PREFIX}image"]}])["Images"]
        except (ClientError, BotoCoreError) as e:
            raise unreadable(e, f"aws {region} images") from None
        out = []
        for x in found:
            tags = {t["Key"]: t["Value"] for t in x.get("Tags", [])}
            ebs = [m["Ebs"] for m in x.get("BlockDeviceMappings", []) if "Ebs" in m]
            out.append(FoundImage("aws", region, tags[f"{TAG_PREFIX}image"], x["ImageId"], gpufleet_tags(tags),
                                  x.get("CreationDate"), tuple(e["SnapshotId"] for e in ebs if e.get("SnapshotId")),
                                  float(sum(e.get("VolumeSize", 0) for e in ebs)) or None))
        return out

    def delete_image(self, image: FoundImage) -> None:
        """Deregister the AMI, then delete its snapshots (deregistering keeps them, and they bill)."""
        ec2 = self.client("ec2", image.region)
        try:
            ec2.deregister_image(ImageId=image.id)
        except (ClientError, BotoCoreError) as e:
            raise unreadable(e, f"aws {image.region} image {image.id}") from None
        for i, snap in enumerate(image.snapshots):  # a snapshot goes only once no AMI uses it
            try:
                ec2.delete_snapshot(SnapshotId=snap)
            except (ClientError, BotoCoreError) as e:
                left = " ".join(image.snapshots[i:])
                raise unreadable(e, f"aws {image.region} snapshot {snap}: image {image.id} is deregistered, its "
                                    f"snapshots {left} are left and bill (aws ec2 delete-snapshot --snapshot-id "
                                    "each)") from None

    def vcpu_quota(self, region: str, cls: str, market: str) -> tuple[str, str, float]:
        """(code, name, value) of the EC2 vCPU quota for an instance class and market."""
        code, name = VCPU_QUOTAS[(cls, market)]
        sq = self.client("service-quotas", region)
        try:
            q = sq.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]
        except Exception as e:  # noqa: BLE001 - NoSuchResource: the account has no override; ask for the default
            if _code(e) != "NoSuchResourceException":
                raise
            q = sq.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]
        return code, q.get("QuotaName", name), float(q["Value"])

    def vcpus_in_use(self, region: str, cls: str, market: str) -> float:
        """vCPUs of the running and pending instances of a class and market in a region."""
        ec2 = self.client("ec2", region)
        total, unknown = 0, {}
        for page in ec2.get_paginator("describe_instances").paginate(
                Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]):
            for rv in page["Reservations"]:
                for i in rv["Instances"]:
                    if instance_class(i["InstanceType"]) != cls or (i.get("InstanceLifecycle") == "spot") != (market == "spot"):
                        continue
                    cpu = i.get("CpuOptions") or {}
                    if cpu.get("CoreCount"):
                        total += cpu["CoreCount"] * cpu.get("ThreadsPerCore", 1)
                    else:
                        unknown[i["InstanceType"]] = unknown.get(i["InstanceType"], 0) + 1
        if unknown:
            resp = ec2.describe_instance_types(InstanceTypes=list(unknown))
            per = {t["InstanceType"]: t["VCpuInfo"]["DefaultVCpus"] for t in resp["InstanceTypes"]}
            total += sum(per.get(t, 0) * n for t, n in unknown.items())
        return float(total)


# --- listing, one function per kind: yields (id, tags, Resource fields) -----------------------

def _pages(client, op: str, key: str, **kw):
    for page in client.get_paginator(op).paginate(**kw):
        yield from page.get(key, [])


def _instances(aws: AwsApi, region, f, cluster):
    live = ["pending", "running", "shutting-down", "stopping", "stopped"]
    for rv in _pages(aws.client("ec2", region), "describe_instances", "Reservations",
                     Filters=f + [{"Name": "instance-state-name", "Values": live}], PaginationConfig={"PageSize": 1000}):
        for i in rv["Instances"]:
            yield i["InstanceId"], i.get("Tags"), dict(
                zone=i.get("Placement", {}).get("AvailabilityZone"), state=i["State"]["Name"], machine=i["InstanceType"],
                created_at=i.get("LaunchTime"), spot=i.get("InstanceLifecycle") == "spot")


def _volumes(aws: AwsApi, region, f, cluster):
    for v in _pages(aws.client("ec2", region), "describe_volumes", "Volumes", Filters=f):
        if v["State"] not in ("deleting", "deleted"):
            yield v["VolumeId"], v.get("Tags"), dict(
                zone=v.get("AvailabilityZone"), state=v["State"], size_gb=v.get("Size"), disk_type=v.get("VolumeType"),
                created_at=v.get("CreateTime"))


def _interfaces(aws: AwsApi, region, f, cluster):
    for n in _pages(aws.client("ec2", region), "describe_network_interfaces", "NetworkInterfaces", Filters=f):
        yield n["NetworkInterfaceId"], n.get("TagSet"), dict(
            zone=n.get("AvailabilityZone"), state=n.get("Status"),
            ref={"attachment": (n.get("Attachment") or {}).get("AttachmentId")})


def _security_groups(aws: AwsApi, region, f, cluster):
    for g in _pages(aws.client("ec2", region), "describe_security_groups", "SecurityGroups", Filters=f):
        yield g["GroupId"], g.get("Tags"), dict(name=g.get("GroupName", ""))


def _placement_groups(aws: AwsApi, region, f, cluster):
    for g in aws.client("ec2", region).describe_placement_groups(Filters=f).get("PlacementGroups", []):
        yield g.get("GroupId") or g["GroupName"], g.get("Tags"), dict(name=g["GroupName"], state=g.get("State"),
                                                                      ref={"name": g["GroupName"]})


def _addresses(aws: AwsApi, region, f, cluster):
    for a in aws.client("ec2", region).describe_addresses(Filters=f).get("Addresses", []):
        yield a["AllocationId"], a.get("Tags"), dict(name=a.get("PublicIp", ""), ref={"association": a.get("AssociationId")})


def _nat_gateways(aws: AwsApi, region, f, cluster):
    for n in _pages(aws.client("ec2", region), "describe_nat_gateways", "NatGateways", Filter=f):
        if n["State"] not in ("deleted", "deleting"):
            yield n["NatGatewayId"], n.get("Tags"), dict(state=n["State"], created_at=n.get("CreateTime"))


def _launch_templates(aws: AwsApi, region, f, cluster):
    for lt in _pages(aws.client("ec2", region), "describe_launch_templates", "LaunchTemplates", Filters=f):
        yield lt["LaunchTemplateId"], lt.get("Tags"), dict(name=lt.get("LaunchTemplateName", ""),
                                                           created_at=lt.get("CreateTime"))


def _key_pairs(aws: AwsApi, region, f, cluster):
    for k in aws.client("ec2", region).describe_key_pairs(Filters=f).get("KeyPairs", []):
        yield k.get("KeyPairId") or k["KeyName"], k.get("Tags"), dict(name=k["KeyName"], created_at=k.get("CreateTime"))


def _subnets(aws: AwsApi, region, f, cluster):
    for sn in _pages(aws.client("ec2", region), "describe_subnets", "Subnets", Filters=f):
        yield sn["SubnetId"], sn.get("Tags"), dict(zone=sn.get("AvailabilityZone"), state=sn.get("State"))


def _route_tables(aws: AwsApi, region, f, cluster):
    for rt in _pages(aws.client("ec2", region), "describe_route_tables", "RouteTables", Filters=f):
        assoc = rt.get("Associations", [])
        if not any(a.get("Main") for a in assoc):  # a VPC's main table goes with the VPC
            yield rt["RouteTableId"], rt.get("Tags"), dict(ref={"associations": [a["RouteTableAssociationId"]
                                                                                 for a in assoc]})


def _internet_gateways(aws: AwsApi, region, f, cluster):
    for g in _pages(aws.client("ec2", region), "describe_internet_gateways", "InternetGateways", Filters=f):
        yield g["InternetGatewayId"], g.get("Tags"), dict(ref={"vpcs": [a["VpcId"] for a in g.get("Attachments", [])]})


def _vpcs(aws: AwsApi, region, f, cluster):
    for v in _pages(aws.client("ec2", region), "describe_vpcs", "Vpcs", Filters=f):
        yield v["VpcId"], v.get("Tags"), dict(state=v.get("State"))


def _fleets(aws: AwsApi, region, f, cluster):
    """The pools' EC2 Fleets. DescribeFleets filters by state and type, not by tag: the tag filter is applied
    here (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeFleets.html). Unasked, it leaves
    out every `instant` fleet ("If a fleet is of type instant, you must specify the fleet ID in the request,
    otherwise the fleet does not appear in the response", botocore 1.44.8's EC2 model), and every pool is
    one: those are named by the ``aws:ec2:fleet-id`` tag EC2 Fleet puts on the instances it launches (AWS's
    EC2 Fleet workshop, awslabs/ec2-spot-workshops), read off the cluster's instances, live or terminated."""
    ec2 = aws.client("ec2", region)
    want = f[0]["Values"][0] if cluster else None
    named = sorted({t["Value"] for rv in _pages(ec2, "describe_instances", "Reservations", Filters=f)
                    for i in rv["Instances"] for t in i.get("Tags") or [] if t["Key"] == "aws:ec2:fleet-id"})
    asked = [x for k in range(0, len(named), 100) for x in _named_fleets(ec2, named[k:k + 100])]
    seen = set()
    for x in [*asked, *_pages(ec2, "describe_fleets", "Fleets")]:
        t = {k["Key"]: k["Value"] for k in x.get("Tags") or []}
        if x["FleetId"] in seen or x.get("FleetState", "").startswith("deleted") or TAG_PREFIX + "cluster" not in t:
            continue
        seen.add(x["FleetId"])
        if want is None or t[TAG_PREFIX + "cluster"] == want:
            yield x["FleetId"], x.get("Tags"), dict(state=x.get("FleetState"), created_at=x.get("CreateTime"))


def _named_fleets(ec2, ids: list[str]) -> list[dict]:
    """DescribeFleets of these ids; one EC2 no longer knows (a fleet of long-gone instances) is left out,
    not the reason the others go unread."""
    try:
        return ec2.describe_fleets(FleetIds=ids)["Fleets"]
    except ClientError as e:
        if "NotFound" not in e.response.get("Error", {}).get("Code", ""):
            raise
    return [] if len(ids) == 1 else [x for i in ids for x in _named_fleets(ec2, [i])]


def _file_systems(aws: AwsApi, region, f, cluster):
    for fs in _pages(aws.client("fsx", region), "describe_file_systems", "FileSystems"):  # FSx filters no tags
        t = {x["Key"]: x["Value"] for x in fs.get("Tags", [])}
        if t.get(TAG_PREFIX + "cluster") and (not cluster or t[TAG_PREFIX + "cluster"] == cluster) \
                and fs.get("Lifecycle") != "DELETING":
            yield fs["FileSystemId"], fs.get("Tags"), dict(state=fs.get("Lifecycle"), size_gb=fs.get("StorageCapacity"),
                                                           created_at=fs.get("CreationTime"))


def empty_bucket(s3, bucket: str) -> int:
    """Delete every object version and delete marker of a bucket (a versioned bucket keeps them
    otherwise and cannot be deleted), 1,000 a request; the number deleted."""
    deleted = 0
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        batch = [{"Key": v["Key"], "VersionId": v["VersionId"]}
                 for v in page.get("Versions", []) + page.get("DeleteMarkers", [])]
        for i in range(0, len(batch), 1000):
            s3.delete_objects(Bucket=bucket, Delete={"Objects": batch[i:i + 1000], "Quiet": True})
            deleted += len(batch[i:i + 1000])
    return deleted


BUCKET_PREFIX = "gpufleet-"  # ClusterBucket's names: only these are asked for their tags


def _buckets(aws: AwsApi, region, f, cluster):
    """The stack buckets in ``region``: S3 lists buckets account-wide, each with its region; only
    gpufleet's are asked for their tags (one call each)."""
    s3 = aws.client("s3", region)
    for b in s3.list_buckets(BucketRegion=region).get("Buckets", []):
        if not b["Name"].startswith(BUCKET_PREFIX):
            continue
        try:
            tags = s3.get_bucket_tagging(Bucket=b["Name"]).get("TagSet", [])
        except ClientError as e:
            if classify(e)[0] == "gone" or "NoSuchTagSet" in str(e):
                continue
            raise
        t = {x["Key"]: x["Value"] for x in tags}
        if t.get(TAG_PREFIX + "cluster") and (not cluster or t[TAG_PREFIX + "cluster"] == cluster):
            yield b["Name"], tags, dict(name=b["Name"], created_at=b.get("CreationDate"))


LISTERS = {"instance": _instances, "volume": _volumes, "network-interface": _interfaces,
           "security-group": _security_groups, "placement-group": _placement_groups, "address": _addresses,
           "nat-gateway": _nat_gateways, "launch-template": _launch_templates, "key-pair": _key_pairs,
           "subnet": _subnets, "route-table": _route_tables, "internet-gateway": _internet_gateways,
           "network": _vpcs, "file-system": _file_systems, "fleet": _fleets, "bucket": _buckets}

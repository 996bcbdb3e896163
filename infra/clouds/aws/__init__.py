"""AWS: everything gpufleet does that names AWS's SDKs or APIs, behind ``base.Cloud``.

``rules`` (what a pool may ask of AWS), ``tag_rules`` (what a tag may hold), ``errors`` (how its failures read, credential hint),
``credentials`` (boto3's chain), ``components`` (the Pulumi components) and ``program`` (a
pool turned into their arguments), ``mocks`` (its answers under `plan`), ``api`` (inventory,
deletion and quotas by tag) and ``prices`` (Price List and spot history). Modules that import
boto3 or Pulumi are loaded through ``sdk``.
"""

from __future__ import annotations

import os

from gpufleet.clouds.aws import access, images, mocks, monitoring, rules, tag_rules
from gpufleet.clouds.aws import spend as spending
from gpufleet.clouds.aws.errors import CREDENTIAL_HINT, PATTERNS
from gpufleet.clouds.aws.sdk import load


class Aws:
    name = "aws"
    extra = "aws"
    pulumi_package = "aws"
    lustre_flavor = "fsx"
    time_servers = ("169.254.169.123",)  # Amazon Time Sync Service, on every instance
    ib_port_per_gpu = False  # no InfiniBand offered
    interconnects = rules.INTERCONNECTS
    credential_hint = CREDENTIAL_HINT
    errors = PATTERNS
    # what a leftover costs an hour: EBS per GB-month (us-east-1, https://aws.amazon.com/ebs/pricing/,
    # 2025-06); a NAT gateway and a public IPv4 address per hour (us-east-1,
    # https://aws.amazon.com/vpc/pricing/, 2025-06)
    leftover_prices = {"disk": {"gp3": 0.08, "gp2": 0.10, "io1": 0.125, "io2": 0.125, "st1": 0.045, "sc1": 0.015,
                                "standard": 0.05},
                       "fixed": {"nat-gateway": 0.045, "address": 0.005}}

    node_kinds = ("aws:ec2/fleet:Fleet",)  # one instant fleet a pool (components.GpuNodePool)
    # DeleteFleets returns while an instant fleet's instances shut down, and an instance holds its
    # reservation's or Capacity Block's slot until it is terminated ("Launch instances using Capacity
    # Blocks": "it takes several minutes to clean up your instance before you can launch another",
    # docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-launch.html, read 2026-11)
    released_first = ("instance",)
    replaces_nodes = True  # AwsApi.replace_node: the pool's instant EC2 Fleet request, for one node
    market_per_node = True  # CreateFleet's DefaultTargetCapacityType and its options, per request (aws.replace)
    own_status_only = True  # status/<pool>/${aws:userid}.json (components: the node role's policy)
    up_sets_capacity = False  # aws.components: the fleet's request says min; any change of it replaces the fleet

    check_pool = staticmethod(rules.check_pool)
    scrape_discovery = staticmethod(monitoring.scrape_discovery)  # the files root writes on the monitor
    monitor_discovery = staticmethod(monitoring.monitor_discovery)  # what it lists them with
    spend = staticmethod(spending.spend)
    check_reservation = staticmethod(rules.check_reservation)
    tag_problems = staticmethod(tag_rules.tag_problems)
    image_template = images.TEMPLATE
    # an AMI is regional: another region boots it only once copied there (CopyImage; "Copy an Amazon
    # EC2 AMI", docs.aws.amazon.com/AWSEC2/latest/UserGuide/CopyingAMIs.html, read 2026-11)
    images_global = False
    # a VPC is regional, and gpufleet makes no peering or transit gateway between its regions' VPCs
    network_global = False
    image_vars = staticmethod(images.variables)
    image_artifacts = staticmethod(images.artifacts)
    image_destination = staticmethod(images.destination)
    image_purchase_plan = staticmethod(images.purchase_plan)
    pool_fabric = staticmethod(rules.pool_fabric)
    region_subnets = staticmethod(rules.region_subnets)
    pool_subnets = staticmethod(rules.pool_subnets)
    ssh_route = staticmethod(access.ssh_route)  # its private route (clouds.<cloud>.access)
    host_key_alias = staticmethod(access.host_key_alias)  # its VMs' unique ids, on every route

    def credentials(self) -> str:
        return load("credentials").check()

    def program_settings(self, *, plan: bool) -> dict:
        # an S3-compatible endpoint (boto3's own variables) goes into the nodes' bootstrap too, so
        # nodes and `up` read the same store (and `plan` shows it); real AWS needs neither. EC2's is
        # its own: AWS_ENDPOINT_URL_S3 names S3's alone ("Service-specific endpoints",
        # docs.aws.amazon.com/sdkref/latest/guide/feature-ss-endpoints.html, read 2026-11-27), and the
        # monitor's lister (clouds/node_targets.py) asks EC2
        general = os.environ.get("AWS_ENDPOINT_URL")
        return {"s3_endpoint": os.environ.get("AWS_ENDPOINT_URL_S3") or general,
                "ec2_endpoint": os.environ.get("AWS_ENDPOINT_URL_EC2") or general}

    def program(self):
        return load("program")

    def mocks(self):
        return mocks

    def api(self):
        return load("api").AwsApi()

    def objects(self, ref: dict):
        return load("objects").Store(ref)

    def prices(self):
        return load("prices")

    def rates(self):
        return load("rates")

    def public_prices(self):
        return load("bulk_prices")

    team_scheme = "s3"

    def billed(self, since, until, clusters, settings):
        return load("billing").billed(since, until, clusters, settings)

    def team_store(self, url: str):
        return load("objects").Shared(url)

    def team_pulumi_backend(self, url: str) -> tuple[str, dict[str, str]]:
        return f"{url}/pulumi", {}  # Pulumi's S3 backend takes a key prefix after the bucket

    def quota_hint(self, line) -> str:
        return f"Service Quotas console, EC2 quota {line.code} in {line.region}"


PROVIDER = Aws()

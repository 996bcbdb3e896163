"""GCP: everything gpufleet does that names Google Cloud's SDKs or APIs, behind ``base.Cloud``.

``rules`` (what a pool may ask of GCP, accelerator and image names), ``tags`` (the gpufleet tags
as labels and descriptions), ``tag_rules`` (what a label may hold), ``errors``, ``credentials`` (ADC files and variables, no SDK),
``components`` and ``program`` (Pulumi), ``mocks`` (its answers under `plan`), ``api``
(Compute Engine, Filestore and Managed Lustre by label; quotas) and ``prices`` (the Cloud
Billing Catalog priced onto machine types; ``key_prices`` the same with an API key only).
Modules that import an SDK or Pulumi are loaded through ``sdk``.
"""

from __future__ import annotations

from gpufleet.clouds.gcp import access, images, mocks, monitoring, rules, tag_rules
from gpufleet.clouds.gcp import credentials as creds
from gpufleet.clouds.gcp import spend as spending
from gpufleet.clouds.gcp.errors import CREDENTIAL_HINT, PATTERNS
from gpufleet.clouds.gcp.sdk import load


class Gcp:
    name = "gcp"
    extra = "gcp"
    pulumi_package = "gcp"
    lustre_flavor = "gcp"
    time_servers = ("metadata.google.internal",)  # the metadata server's NTP
    ib_port_per_gpu = False  # no InfiniBand offered
    interconnects = rules.INTERCONNECTS
    credential_hint = CREDENTIAL_HINT
    errors = PATTERNS
    # persistent disk per GB-month (us-central1, https://cloud.google.com/compute/disks-image-pricing,
    # 2025-06); Cloud NAT is billed per VM and by traffic, and not shown
    leftover_prices = {"disk": {"pd-standard": 0.04, "pd-balanced": 0.10, "pd-ssd": 0.17,
                                "hyperdisk-balanced": 0.08}}

    # a pool's VMs: one bulkInsert (clouds.gcp.pool_vms.KIND), or a flex-start pool's managed instance group
    node_kinds = ("gcp:gpufleet:BulkInstances", "gcp:compute/instanceGroupManager:InstanceGroupManager")
    released_first = ()  # its deletion of the VMs waits for Compute Engine's operations
    replaces_nodes = True  # GcpApi.replace_node: the pool's bulkInsert request, for one VM (clouds.gcp.replace)
    market_per_node = True  # each VM's own scheduling.provisioningModel (gcp.replace)
    own_status_only = False  # the pool's objectUser condition: any object under status/<pool>/ (components)
    up_sets_capacity = False  # gcp.program: the pool's bulkInsert asks for min; a change of it makes the VMs anew

    check_pool = staticmethod(rules.check_pool)
    scrape_discovery = staticmethod(monitoring.scrape_discovery)  # the files root writes on the monitor
    monitor_discovery = staticmethod(monitoring.monitor_discovery)  # what it lists them with
    spend = staticmethod(spending.spend)
    check_reservation = staticmethod(rules.check_reservation)
    tag_problems = staticmethod(tag_rules.tag_problems)
    image_template = images.TEMPLATE
    # a Compute Engine image is a global resource, usable in every region and zone ("Images",
    # cloud.google.com/compute/docs/images, read 2026-11)
    images_global = True
    # a VPC network is global: its subnets in every region route to each other ("VPC networks",
    # cloud.google.com/vpc/docs/vpc, read 2026-11-27)
    network_global = True
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
        return creds.check()

    def program_settings(self, *, plan: bool) -> dict:
        return {"project": "gpufleet-plan" if plan else creds.project()}

    def program(self):
        return load("program")

    def mocks(self):
        return mocks

    def api(self):
        return load("api").GcpApi()

    def objects(self, ref: dict):
        return load("objects").Store(ref)

    def prices(self):
        return load("prices")

    def public_prices(self):
        return load("key_prices")

    def rates(self):
        return None  # the Cloud Billing Catalog's storage and network SKUs are not mapped to the rates table

    team_scheme = "gs"

    def billed(self, since, until, clusters, settings):
        return load("billing").billed(since, until, clusters, settings)

    def team_store(self, url: str):
        return load("objects").Shared(url)

    def team_pulumi_backend(self, url: str) -> tuple[str, dict[str, str]]:
        return f"{url}/pulumi", {}  # Pulumi's GCS backend takes a prefix after the bucket

    def quota_hint(self, line) -> str:
        return f"IAM & Admin > Quotas, metric {line.code} in {line.region}"


PROVIDER = Gcp()

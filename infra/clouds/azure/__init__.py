"""Azure: everything gpufleet does that names Azure's SDKs or APIs, behind ``base.Cloud``.

``rules`` (what a pool may ask of Azure, image URNs), ``tag_rules`` (what a tag may hold), ``errors``, ``credentials`` (Azure CLI
profile and ARM_* variables, no SDK), ``components`` and ``program`` (Pulumi), ``mocks`` (its
answers under `plan`), ``api`` (ARM resources by tag, deletion, vCPU quotas) and ``prices``
(Retail Prices, which needs no SDK; resource SKUs through ``api`` when there are credentials).
Modules that import an SDK or Pulumi are loaded through ``sdk``.
"""

from __future__ import annotations

from gpufleet.clouds.azure import access, images, mocks, monitoring, rules, tag_rules
from gpufleet.clouds.azure import credentials as creds
from gpufleet.clouds.azure import spend as spending
from gpufleet.clouds.azure.errors import CREDENTIAL_HINT, PATTERNS
from gpufleet.clouds.azure.sdk import load


class Azure:
    name = "azure"
    extra = "azure"
    pulumi_package = "azure-native"
    lustre_flavor = "amlfs"
    time_servers = ()  # the image keeps its own (Azure's host time through Hyper-V)
    ib_port_per_gpu = True  # ND-series: one InfiniBand port per GPU (learn.microsoft.com, ND H100 v5 / ND A100 v4)
    interconnects = rules.INTERCONNECTS
    credential_hint = CREDENTIAL_HINT
    errors = PATTERNS
    leftover_prices: dict = {}  # managed disks are not priced here yet

    node_kinds = ("azure-native:compute:VirtualMachineScaleSet",)  # one scale set a pool
    released_first = ()  # azure-native waits for a scale set's deletion (and its VMs') to finish
    replaces_nodes = True  # AzureApi.replace_node: one VM more from the scale set's model, then the faulty one deleted
    market_per_node = False  # a Uniform scale set's VMs all take its model's priority (azure.replace)
    own_status_only = False  # the pool's role condition: any blob under status/<pool>/ (components)
    up_sets_capacity = True  # azure.program: sku.capacity is the pool's recorded size, in a whole PUT

    check_pool = staticmethod(rules.check_pool)
    scrape_discovery = staticmethod(monitoring.scrape_discovery)  # the files root writes on the monitor
    monitor_discovery = staticmethod(monitoring.monitor_discovery)  # what it lists them with
    spend = staticmethod(spending.spend)
    check_reservation = staticmethod(rules.check_reservation)
    tag_problems = staticmethod(tag_rules.tag_problems)
    image_template = images.TEMPLATE
    # a gallery image version boots in the regions it is replicated to ("Store and share images in an
    # Azure Compute Gallery", learn.microsoft.com/azure/virtual-machines/shared-image-galleries, read
    # 2026-11), and images/azure.pkr.hcl replicates it to the build's location only
    images_global = False
    # a VNet is regional, and gpufleet peers none of its regions' VNets
    network_global = False
    image_vars = staticmethod(images.variables)
    image_artifacts = staticmethod(images.artifacts)
    image_purchase_plan = staticmethod(images.purchase_plan)
    pool_fabric = staticmethod(rules.pool_fabric)
    region_subnets = staticmethod(rules.region_subnets)
    pool_subnets = staticmethod(rules.pool_subnets)
    ssh_route = staticmethod(access.ssh_route)  # its private route (clouds.<cloud>.access)
    host_key_alias = staticmethod(access.host_key_alias)  # its VMs' unique ids, on every route

    def credentials(self) -> str:
        return creds.check()

    def program_settings(self, *, plan: bool) -> dict:
        return {"subscription": creds.PLAN_SUBSCRIPTION if plan else creds.subscription(),
                "deployer_type": creds.principal_type()}

    def image_destination(self, variables: dict) -> None:
        load("gallery").ensure(variables)

    def program(self):
        return load("program")

    def mocks(self):
        return mocks

    def api(self):
        return load("api").AzureApi()

    def objects(self, ref: dict):
        return load("objects").Store(ref)

    def prices(self):
        return load("prices")  # Retail Prices need no SDK; its resource SKUs are read through api

    def rates(self):
        return load("rates")

    def public_prices(self):
        return None  # its Retail Prices need no credentials to begin with

    team_scheme = "azblob"

    def billed(self, since, until, clusters, settings):
        return load("billing").billed(since, until, clusters, settings)

    def team_store(self, url: str):
        return load("objects").Shared(url)

    def team_pulumi_backend(self, url: str) -> tuple[str, dict[str, str]]:
        """Pulumi's Blob backend names the container and the path in it (``azblob://container/path``)
        and finds the account in ``AZURE_STORAGE_ACCOUNT`` (pulumi.com/docs/iac/operations/
        stack-management/using-a-diy-backend, "Azure Blob Storage")."""
        account, _, path = url.split("://", 1)[1].partition("/")
        return f"azblob://{path}/pulumi", {"AZURE_STORAGE_ACCOUNT": account}

    def quota_hint(self, line) -> str:
        return f"Subscriptions > Usage + quotas, {line.quota} in {line.region}"


PROVIDER = Azure()

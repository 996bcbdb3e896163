"""The one way Azure's SDKs are imported: azure-identity, azure-core and azure-mgmt-* (API, prices'
resource SKUs), pulumi and pulumi-azure-native (components). A module of this folder that imports
them is loaded through ``load``."""

from gpufleet.clouds.sdk import loader

load = loader("azure", ("azure", "pulumi", "pulumi_azure_native"), extra="azure")

"""The one way AWS's SDKs are imported: boto3 and botocore (API, prices, credentials), pulumi and
pulumi-aws (components). A module of this folder that imports them is loaded through ``load``."""

from gpufleet.clouds.sdk import loader

load = loader("aws", ("boto3", "botocore", "pulumi", "pulumi_aws"), extra="aws")

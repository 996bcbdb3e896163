"""The one way GCP's SDKs are imported: google-auth, google-api-core and google-cloud-compute (API,
prices), pulumi and pulumi-gcp (components). A module of this folder that imports them is loaded
through ``load``."""

from gpufleet.clouds.sdk import loader

load = loader("gcp", ("google", "requests", "pulumi", "pulumi_gcp"), extra="gcp")

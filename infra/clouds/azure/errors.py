"""How Azure failures read in Pulumi's output, and how to give gpufleet Azure credentials.

The error codes Microsoft documents are rows of ``refusals.RULES``; what is left here are the Azure
CLI's and the provider's own words for missing credentials, which carry no code.
"""

from gpufleet.clouds.azure.refusals import RULES
from gpufleet.clouds.base import ErrorPatterns

CREDENTIAL_HINT = ("run `az login` (and `az account set -s SUBSCRIPTION`), or set ARM_CLIENT_ID, ARM_CLIENT_SECRET, "
                   "ARM_TENANT_ID and ARM_SUBSCRIPTION_ID")

PATTERNS = ErrorPatterns.of(
    RULES,
    credentials=r"az login|Please run 'az login'|unable to determine subscription|obtain a token|ARM_SUBSCRIPTION_ID",
)

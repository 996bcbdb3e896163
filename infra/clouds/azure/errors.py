"""How Azure failures read in Pulumi's output, and how to give gpufleet Azure credentials."""

import re

from gpufleet.clouds.base import ErrorPatterns

CREDENTIAL_HINT = ("run `az login` (and `az account set -s SUBSCRIPTION`), or set ARM_CLIENT_ID, ARM_CLIENT_SECRET, "
                   "ARM_TENANT_ID and ARM_SUBSCRIPTION_ID")

PATTERNS = ErrorPatterns(
    credentials=re.compile(r"az login|Please run 'az login'|AADSTS\d+|unable to determine subscription|"
                           r"obtain a token|ARM_SUBSCRIPTION_ID", re.I),
    quota=re.compile(r"OperationNotAllowed.*quota|exceeding approved .* quota", re.I),
    capacity=re.compile(r"AllocationFailed|SkuNotAvailable|ZonalAllocationFailed|OverconstrainedAllocationRequest",
                        re.I),
)

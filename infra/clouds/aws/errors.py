"""How AWS failures read in Pulumi's output, and how to give gpufleet AWS credentials."""

import re

from gpufleet.clouds.base import ErrorPatterns

CREDENTIAL_HINT = ("run `aws configure` or `aws sso login`, or set AWS_PROFILE / AWS_ACCESS_KEY_ID and "
                   "AWS_SECRET_ACCESS_KEY")

PATTERNS = ErrorPatterns(
    credentials=re.compile(r"No valid credential sources.*found|NoCredentialProviders|InvalidClientTokenId|"
                           r"UnrecognizedClientException|ExpiredToken|failed to refresh cached credentials", re.I),
    quota=re.compile(r"VcpuLimitExceeded|InstanceLimitExceeded", re.I),
    capacity=re.compile(r"InsufficientInstanceCapacity|InsufficientCapacity", re.I),
)

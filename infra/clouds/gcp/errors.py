"""How GCP failures read in Pulumi's output, and how to give gpufleet GCP credentials."""

import re

from gpufleet.clouds.base import ErrorPatterns

CREDENTIAL_HINT = ("run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a "
                   "key file")

PATTERNS = ErrorPatterns(
    credentials=re.compile(r"could not find default credentials|google: could not find|oauth2: cannot fetch token|"
                           r"invalid_grant", re.I),
    quota=re.compile(r"QUOTA_EXCEEDED|Quota '[^']+' exceeded", re.I),
    capacity=re.compile(r"ZONE_RESOURCE_POOL_EXHAUSTED|does not have enough resources available", re.I),
)

"""How GCP failures read in Pulumi's output, and how to give gpufleet GCP credentials.

The error codes Google documents are rows of ``refusals.RULES``; what is left here are the auth
libraries' own words for missing credentials, which carry no code.
"""

from gpufleet.clouds.base import ErrorPatterns
from gpufleet.clouds.gcp.refusals import RULES

CREDENTIAL_HINT = ("run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a "
                   "key file")

PATTERNS = ErrorPatterns.of(
    RULES,
    credentials=r"could not find default credentials|google: could not find|oauth2: cannot fetch token",
)

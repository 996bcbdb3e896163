"""How AWS failures read in Pulumi's output, and how to give gpufleet AWS credentials.

The error codes AWS documents are rows of ``refusals.RULES``; what is left here are the SDK's own
words for missing credentials, which carry no code.
"""

from gpufleet.clouds.aws.refusals import RULES
from gpufleet.clouds.base import ErrorPatterns

CREDENTIAL_HINT = ("run `aws configure` or `aws sso login`, or set AWS_PROFILE / AWS_ACCESS_KEY_ID and "
                   "AWS_SECRET_ACCESS_KEY")

PATTERNS = ErrorPatterns.of(
    RULES,
    credentials=r"No valid credential sources.*found|NoCredentialProviders|UnrecognizedClientException|"
                r"failed to refresh cached credentials",
)

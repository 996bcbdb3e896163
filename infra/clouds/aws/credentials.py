"""Is there anything to authenticate to AWS with? boto3's own credential chain, no network call."""

import boto3

from gpufleet.clouds.aws.errors import CREDENTIAL_HINT
from gpufleet.errors import CredentialsError


def check() -> str:
    """Where boto3 finds credentials (environment, profiles, SSO, instance role)."""
    creds = boto3.Session().get_credentials()
    if creds is None:
        raise CredentialsError("aws", "aws: no credentials found (environment, ~/.aws, SSO or instance role)",
                               CREDENTIAL_HINT)
    return creds.method or "found"

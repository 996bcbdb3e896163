"""Is there anything to authenticate with, per provider? Checked before `up` starts Pulumi.

These checks only look for the credential sources each provider's own tooling reads (no
network call); `gpufleet check` (quota preflight) asks the clouds who the credentials are.
"""

from __future__ import annotations

import os
from pathlib import Path

from gpufleet.engine.automation import CREDENTIAL_HINTS
from gpufleet.errors import CredentialsError


def aws() -> str:
    """boto3's own credential chain (env, profiles, SSO, IMDS)."""
    try:
        import boto3
    except ModuleNotFoundError:
        raise CredentialsError("aws", "aws: boto3 is not installed", "pip install 'gpufleet[aws]'") from None
    creds = boto3.Session().get_credentials()
    if creds is None:
        raise CredentialsError("aws", "aws: no credentials found (environment, ~/.aws, SSO or instance role)",
                               CREDENTIAL_HINTS["aws"])
    return creds.method or "found"


def gcp_project() -> str | None:
    for var in ("GOOGLE_CLOUD_PROJECT", "GOOGLE_PROJECT", "CLOUDSDK_CORE_PROJECT", "GCLOUD_PROJECT"):
        if os.environ.get(var):
            return os.environ[var]
    return None


def gcp() -> str:
    adc = Path(os.environ.get("CLOUDSDK_CONFIG") or Path.home() / ".config" / "gcloud") / "application_default_credentials.json"
    key = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS") or os.environ.get("GOOGLE_CREDENTIALS")
    if key and not key.lstrip().startswith("{") and not Path(key).exists():
        raise CredentialsError("gcp", f"gcp: GOOGLE_APPLICATION_CREDENTIALS points to {key}, which does not exist",
                               CREDENTIAL_HINTS["gcp"])
    if not key and not adc.exists():
        raise CredentialsError("gcp", "gcp: no application default credentials found", CREDENTIAL_HINTS["gcp"])
    if not gcp_project():
        raise CredentialsError("gcp", "gcp: no project is set", "set GOOGLE_CLOUD_PROJECT=my-project")
    return "service account key" if key else "application default credentials"


def azure_subscription() -> str | None:
    if os.environ.get("ARM_SUBSCRIPTION_ID"):
        return os.environ["ARM_SUBSCRIPTION_ID"]
    profile = Path(os.environ.get("AZURE_CONFIG_DIR") or Path.home() / ".azure") / "azureProfile.json"
    if profile.exists():
        import json

        try:
            data = json.loads(profile.read_text(encoding="utf-8-sig"))
        except ValueError:
            return None
        for sub in data.get("subscriptions", []):
            if sub.get("isDefault"):
                return sub.get("id")
    return None


def azure() -> str:
    sp = all(os.environ.get(v) for v in ("ARM_CLIENT_ID", "ARM_TENANT_ID")) and (
        os.environ.get("ARM_CLIENT_SECRET") or os.environ.get("ARM_USE_MSI") or os.environ.get("ARM_USE_OIDC"))
    if not sp and azure_subscription() is None:
        raise CredentialsError("azure", "azure: no Azure CLI login or service principal found", CREDENTIAL_HINTS["azure"])
    if azure_subscription() is None:
        raise CredentialsError("azure", "azure: no subscription is selected", "set ARM_SUBSCRIPTION_ID")
    return "service principal" if sp else "Azure CLI login"


CHECKS = {"aws": aws, "gcp": gcp, "azure": azure}


def require(providers) -> dict[str, str]:
    """Check every provider; raise the first missing one (each names how to configure it)."""
    return {p: CHECKS[p]() for p in providers}

"""Is there anything to authenticate to GCP with? The files and variables Google's tools read,
no network call and no SDK."""

from __future__ import annotations

import os
from pathlib import Path

from gpufleet.clouds.gcp.errors import CREDENTIAL_HINT
from gpufleet.errors import CredentialsError


def project() -> str | None:
    for var in ("GOOGLE_CLOUD_PROJECT", "GOOGLE_PROJECT", "CLOUDSDK_CORE_PROJECT", "GCLOUD_PROJECT"):
        if os.environ.get(var):
            return os.environ[var]
    return None


def check() -> str:
    adc = Path(os.environ.get("CLOUDSDK_CONFIG") or Path.home() / ".config" / "gcloud") / "application_default_credentials.json"
    key = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS") or os.environ.get("GOOGLE_CREDENTIALS")
    if key and not key.lstrip().startswith("{") and not Path(key).exists():
        raise CredentialsError("gcp", f"gcp: GOOGLE_APPLICATION_CREDENTIALS points to {key}, which does not exist",
                               CREDENTIAL_HINT)
    if not key and not adc.exists():
        raise CredentialsError("gcp", "gcp: no application default credentials found", CREDENTIAL_HINT)
    if not project():
        raise CredentialsError("gcp", "gcp: no project is set", "set GOOGLE_CLOUD_PROJECT=my-project")
    return "service account key" if key else "application default credentials"

"""Is there anything to authenticate to GCP with? The files and variables Google's tools read,
no network call and no SDK."""

from __future__ import annotations

import os
from pathlib import Path

from gpufleet.clouds.gcp.errors import CREDENTIAL_HINT
from gpufleet.errors import CredentialsError
from gpufleet.userfiles import SMALL_BYTES, check_file


def project() -> str | None:
    for var in ("GOOGLE_CLOUD_PROJECT", "GOOGLE_PROJECT", "CLOUDSDK_CORE_PROJECT", "GCLOUD_PROJECT"):
        if os.environ.get(var):
            return os.environ[var]
    return None


def check() -> str:
    adc = Path(os.environ.get("CLOUDSDK_CONFIG") or Path.home() / ".config" / "gcloud") / "application_default_credentials.json"
    key = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS") or os.environ.get("GOOGLE_CREDENTIALS")
    if key and not key.lstrip().startswith("{"):
        try:  # google-auth reads it whole: a device or a pipe is refused before it is
            check_file(key, "a service account key (JSON)", SMALL_BYTES, variable="GOOGLE_APPLICATION_CREDENTIALS")
        except FileNotFoundError:
            raise CredentialsError("gcp", f"gcp: GOOGLE_APPLICATION_CREDENTIALS points to {key}, which does not exist",
                                   CREDENTIAL_HINT) from None
    elif not key and adc.exists():
        check_file(adc, "the application default credentials (JSON)", SMALL_BYTES, variable="CLOUDSDK_CONFIG")
    if not key and not adc.exists():
        raise CredentialsError("gcp", "gcp: no application default credentials found", CREDENTIAL_HINT)
    if not project():
        raise CredentialsError("gcp", "gcp: no project is set", "set GOOGLE_CLOUD_PROJECT=my-project")
    return "service account key" if key else "application default credentials"

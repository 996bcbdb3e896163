"""The team setting: the URL of the store a team shares (``gpufleet team init URL``), read by every
command. Without one, gpufleet works alone: registry, Pulumi state and no leases, on this machine."""

from __future__ import annotations

import json
import os

from gpufleet.errors import InputError
from gpufleet.paths import make_dir, team_path

SCHEMES = ("file", "s3", "gs", "azblob", "postgres")
PASSPHRASE = "passphrase"
KMS_SCHEMES = ("awskms://", "gcpkms://", "azurekeyvault://", "hashivault://")


def url() -> str | None:
    """``$GPUFLEET_TEAM`` when set, else the URL ``team init`` wrote, else None (no team)."""
    env = os.environ.get("GPUFLEET_TEAM")
    if env is not None:
        return env or None  # GPUFLEET_TEAM= : alone, whatever the file says
    got = _setting()
    if got and "url" not in got:
        raise InputError(f"{team_path()}: not a gpufleet team setting (no url)", "run `gpufleet team init URL` again")
    return got.get("url")


def check(text: str) -> str:
    scheme = text.split("://", 1)[0] if "://" in text else ""
    if scheme not in SCHEMES:
        raise InputError(f"{text!r} is not a team store's URL",
                         "write s3://bucket/prefix, gs://bucket/prefix, azblob://account/container, "
                         "postgres://host/db or file:///shared/dir")
    return text.rstrip("/")


def write(store_url: str, by: str, at: str, secrets_provider: str = PASSPHRASE) -> None:
    path = team_path()
    make_dir(path.parent, "GPUFLEET_TEAM_FILE")
    path.write_text(json.dumps({"url": store_url, "secrets_provider": secrets_provider, "by": by, "at": at},
                               indent=2) + "\n")


def _setting() -> dict:
    path = team_path()
    if not path.exists():
        return {}
    try:
        got = json.loads(path.read_text())
    except (ValueError, OSError) as e:
        raise InputError(f"{path}: not a gpufleet team setting ({e})", "run `gpufleet team init URL` again") from None
    if not isinstance(got, dict):
        raise InputError(f"{path}: not a gpufleet team setting (not an object)", "run `gpufleet team init URL` again")
    return got


def check_secrets_provider(text: str) -> str:
    """``passphrase`` or a key Pulumi encrypts the state's secrets with: ``awskms://``, ``gcpkms://``,
    ``azurekeyvault://``, ``hashivault://`` (pulumi.com/docs/iac/concepts/secrets, "Configuring
    secrets encryption")."""
    if text in ("passphrase", "default") or (text.startswith(KMS_SCHEMES) and text.split("://", 1)[1]):
        return PASSPHRASE if text == "default" else text
    raise InputError(f"{text!r} is not a Pulumi secrets provider",
                     "write passphrase, awskms://alias/NAME?region=R, gcpkms://projects/P/locations/L/keyRings/K/"
                     "cryptoKeys/C, azurekeyvault://VAULT.vault.azure.net/keys/KEY or hashivault://KEY")


def secrets_provider() -> str:
    """What encrypts the secrets in the team's Pulumi state: ``$GPUFLEET_SECRETS_PROVIDER``, else what
    ``team init --secrets-provider`` wrote, else the passphrase (``PULUMI_CONFIG_PASSPHRASE``)."""
    env = os.environ.get("GPUFLEET_SECRETS_PROVIDER")
    return check_secrets_provider(env) if env else _setting().get("secrets_provider", PASSPHRASE)

"""The team setting: the URL of the store a team shares (``gpufleet team init URL``), read by every
command. Without one, gpufleet works alone: registry, Pulumi state and no leases, on this machine."""

from __future__ import annotations

import json
import os

from gpufleet.errors import InputError
from gpufleet.paths import make_dir, team_path

SCHEMES = ("file", "s3", "gs", "azblob", "postgres")


def url() -> str | None:
    """``$GPUFLEET_TEAM`` when set, else the URL ``team init`` wrote, else None (no team)."""
    env = os.environ.get("GPUFLEET_TEAM")
    if env is not None:
        return env or None  # GPUFLEET_TEAM= : alone, whatever the file says
    path = team_path()
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())["url"]
    except (ValueError, KeyError, OSError) as e:
        raise InputError(f"{path}: not a gpufleet team setting ({e})", "run `gpufleet team init URL` again") from None


def check(text: str) -> str:
    scheme = text.split("://", 1)[0] if "://" in text else ""
    if scheme not in SCHEMES:
        raise InputError(f"{text!r} is not a team store's URL",
                         "write s3://bucket/prefix, gs://bucket/prefix, azblob://account/container, "
                         "postgres://host/db or file:///shared/dir")
    return text.rstrip("/")


def write(store_url: str, by: str, at: str) -> None:
    path = team_path()
    make_dir(path.parent, "GPUFLEET_TEAM_FILE")
    path.write_text(json.dumps({"url": store_url, "by": by, "at": at}, indent=2) + "\n")


def pulumi_backend(store_url: str) -> str | None:
    """The Pulumi self-managed backend in the team's store (its state beside the leases), where
    Pulumi has one for the scheme."""
    return f"{store_url}/pulumi" if store_url.startswith(("s3://", "file://")) else None

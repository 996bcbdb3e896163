"""The team's store by its URL (``gpufleet team init URL``), and Pulumi's self-managed backend in it.

A shared directory (``file://``) and a PostgreSQL database (``postgres://``) are the team's own; a
bucket is its cloud's (``s3://``, ``gs://``, ``azblob://``: the cloud whose ``team_scheme`` it is
opens it and names Pulumi's backend URL for it).
"""

from __future__ import annotations

from gpufleet.clouds import cloud
from gpufleet.errors import InputError
from gpufleet.providers import CLOUDS
from gpufleet.state import postgres, team_config
from gpufleet.state.shared import DirectoryStore, SharedStore


def _scheme(url: str) -> str:
    return url.split("://", 1)[0]


def _cloud_of(scheme: str):
    for p in CLOUDS:
        if cloud(p).team_scheme == scheme:
            return cloud(p)
    raise InputError(f"no cloud stores {scheme}:// URLs")


def open_store(url: str) -> SharedStore:
    url = team_config.check(url)
    scheme = _scheme(url)
    if scheme == "file":
        return DirectoryStore(url)
    if scheme == "postgres":
        return postgres.PostgresStore(url)
    return _cloud_of(scheme).team_store(url)


def pulumi_backend(url: str) -> tuple[str, dict[str, str]]:
    """Pulumi's self-managed backend beside the team's leases (a ``pulumi/`` folder of the bucket or
    directory; a table of its own in the database), and the environment the Pulumi CLI needs for it."""
    scheme = _scheme(url)
    if scheme == "file":
        return f"{url}/pulumi", {}
    if scheme == "postgres":
        return postgres.pulumi_backend(url), {}
    return _cloud_of(scheme).team_pulumi_backend(url)

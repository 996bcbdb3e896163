"""The identity every resource gpufleet creates carries, in every cloud: the ``gpufleet:*`` tags.

``gpufleet:cluster``, ``:stack``, ``:pool``, ``:owner`` and ``:expires-at`` (ISO 8601 UTC). The
lifecycle commands find resources by these tags, never only through local state. GCP writes
them as labels (``gpufleet.clouds.gcp.tags`` maps the two forms).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from gpufleet.errors import InputError

TAG_PREFIX = "gpufleet:"
TAG_KEYS = ("cluster", "stack", "pool", "owner", "expires-at")


@dataclass(frozen=True)
class Cluster:
    """The identity every resource of one brought-up stack carries."""

    name: str  # the cluster (= Pulumi stack) name; one stack file can be up as several clusters
    stack: str  # the stack file's `name`
    owner: str
    expires_at: dt.datetime  # aware, UTC

    def tags(self, pool: str | None = None) -> dict[str, str]:
        """``gpufleet:cluster`` ... ``gpufleet:expires-at`` (ISO 8601 UTC)."""
        return {
            "gpufleet:cluster": self.name,
            "gpufleet:stack": self.stack,
            "gpufleet:pool": pool or "-",
            "gpufleet:owner": self.owner,
            "gpufleet:expires-at": format_expiry(self.expires_at),
        }


def gpufleet_tags(tags: dict[str, str] | None) -> dict[str, str]:
    """The ``gpufleet:*`` entries of a resource's tags."""
    return {k: v for k, v in (tags or {}).items() if k.startswith(TAG_PREFIX)}


def format_expiry(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_expiry(value: str) -> dt.datetime:
    """An ``expires-at`` tag (ISO 8601); InputError when it cannot be read."""
    try:
        t = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InputError(f"expires-at {value!r} is not an ISO 8601 time",
                         "write it like 2026-11-22T18:00:00Z") from None
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


def time_or_none(value: str | None) -> dt.datetime | None:
    """A time a cloud or the registry states (``...Z``, ``...000-08:00``, ``... +00:00``); None when
    absent or unreadable, for what is shown as unknown rather than refused."""
    try:
        return parse_expiry(value) if value else None
    except InputError:
        return None


def expiry_from(now: dt.datetime, ttl: dt.timedelta) -> dt.datetime:
    return (now + ttl).astimezone(dt.timezone.utc).replace(microsecond=0)

"""The identity every resource gpufleet creates carries, in every cloud: the ``gpufleet:*`` tags.

``gpufleet:cluster``, ``:stack``, ``:pool``, ``:owner`` and ``:expires-at`` (ISO 8601 UTC). The
lifecycle commands find resources by these tags, never only through local state. GCP writes
them as labels (``gpufleet.clouds.gcp.tags`` maps the two forms).

``gpufleet:created-by`` names who brought the cluster up, as the cloud knows the caller (AWS: the
STS caller ARN; GCP: the credentials' account; Azure: the signed-in principal), set by the first
`up` and kept by the next; the stack's ``owner`` stays the accountable contact it names.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from gpufleet.errors import InputError

TAG_PREFIX = "gpufleet:"
TAG_KEYS = ("cluster", "stack", "pool", "owner", "expires-at")
CREATED_BY = TAG_PREFIX + "created-by"


@dataclass(frozen=True)
class Cluster:
    """The identity every resource of one brought-up stack carries."""

    name: str  # the cluster (= Pulumi stack) name; one stack file can be up as several clusters
    stack: str  # the stack file's `name`
    owner: str
    expires_at: dt.datetime  # aware, UTC
    created_by: Mapping[str, str] = field(default_factory=dict)  # provider -> the caller there (unknown: absent)
    principal: str | None = None  # the one the tags of one cloud's resources carry (``on``)

    def on(self, provider: str) -> Cluster:
        """The cluster as one cloud's resources are tagged: with its creator there."""
        return replace(self, principal=self.created_by.get(provider))

    def tags(self, pool: str | None = None) -> dict[str, str]:
        """``gpufleet:cluster`` ... ``gpufleet:expires-at`` (ISO 8601 UTC), and ``gpufleet:created-by``
        where the creator is known."""
        return {
            "gpufleet:cluster": self.name,
            "gpufleet:stack": self.stack,
            "gpufleet:pool": pool or "-",
            "gpufleet:owner": self.owner,
            "gpufleet:expires-at": format_expiry(self.expires_at),
            **({CREATED_BY: self.principal} if self.principal else {}),
        }


LABEL_MAX = 63  # GCP's labels, the narrowest of the clouds' tags


def label_escaped(value: str) -> str:
    """``value`` in GCP's label characters (lowercase ``[a-z0-9_-]``, ``@`` as ``_at_``), uncut."""
    return re.sub(r"[^a-z0-9_-]", "_", value.strip().lower().replace("@", "_at_"))


def principal_key(value: str) -> str:
    """A principal in the form every cloud's tags keep it (GCP's labels are the narrowest: lowercase
    ``[a-z0-9_-]``, at most 63 characters, ``@`` as ``_at_``), so that one read back from any cloud
    compares equal to the same one as the caller's credentials name it."""
    return label_escaped(value)[:LABEL_MAX]


def names(value: str, wanted: str) -> bool:
    """Whether ``value`` (an owner or creator) is, or contains, ``wanted`` (``status --owner``)."""
    return bool(wanted.strip()) and principal_key(wanted) in principal_key(value)


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

"""The gpufleet tags in GCP's forms, both ways: labels, and descriptions for what takes no labels.

Labels allow no colons and only lowercase ``[a-z0-9_-]`` values of at most 63 characters, so
``gpufleet:cluster`` is the label ``gpufleet-cluster`` and the expiry
``2026-11-22T18:00:00Z`` is ``2026-11-22t18-00-00z``. Networks, subnetworks, firewalls, routers
and resource policies take no labels: their description carries the tags as JSON.
"""

from __future__ import annotations

import json
import re

from gpufleet.clouds.tags import TAG_PREFIX, label_escaped, principal_key

LABEL_PREFIX = "gpufleet-"
_EXPIRY = TAG_PREFIX + "expires-at"
_EXPIRY_LABEL = re.compile(r"^(\d{4}-\d{2}-\d{2})t(\d{2})-(\d{2})-(\d{2})z$")


def label_value(v: str) -> str:
    """A GCP label value: lowercase letters, digits, ``_`` and ``-``; max 63 characters (the form
    ``tags.principal_key`` compares every cloud's principals in)."""
    return principal_key(v)


def labels(tags: dict[str, str]) -> dict[str, str]:
    """The labels of ``gpufleet:*`` tags (an ISO expiry keeps its digits: ``2026-11-22t18-00-00z``)."""
    return {label_key(k): (v.lower().replace(":", "-") if k == _EXPIRY else label_value(v)) for k, v in tags.items()}


def label_key(tag: str) -> str:
    return tag.replace(":", "-")


def written(tag: str, value: str) -> str:
    """What ``labels`` writes for ``value``, before a value is cut to LABEL_MAX characters."""
    return value.lower().replace(":", "-") if tag == _EXPIRY else label_escaped(value)


def tags(labels_: dict[str, str] | None) -> dict[str, str]:
    """The ``gpufleet:*`` tags of labels; the expiry back in ISO 8601 (an unreadable one as it is)."""
    out = {}
    for k, v in (labels_ or {}).items():
        if not k.startswith(LABEL_PREFIX):
            continue
        key = TAG_PREFIX + k[len(LABEL_PREFIX):]
        m = _EXPIRY_LABEL.match(v) if key == _EXPIRY else None
        out[key] = f"{m[1]}T{m[2]}:{m[3]}:{m[4]}Z" if m else v
    return out


def describe(tags_: dict[str, str]) -> str:
    """The description that marks a label-less resource (network, firewall ...) as gpufleet's."""
    return "gpufleet " + json.dumps(tags_, sort_keys=True)


def tags_of(item) -> dict[str, str]:
    """gpufleet tags from an item's labels, or from the JSON in its ``gpufleet {...}`` description."""
    found = dict(getattr(item, "labels", None) or {})
    if found:
        return tags(found)
    desc = getattr(item, "description", "") or ""
    if not desc.startswith("gpufleet {"):
        return {}
    try:
        data, _ = json.JSONDecoder().raw_decode(desc[len("gpufleet "):])
    except ValueError:
        return {}
    # keys in either form: gpufleet writes ``gpufleet:cluster``; a hand-made description may say ``gpufleet-cluster``
    return {**tags({k: str(v) for k, v in data.items() if k.startswith(LABEL_PREFIX)}),
            **{k: str(v) for k, v in data.items() if k.startswith(TAG_PREFIX)}}

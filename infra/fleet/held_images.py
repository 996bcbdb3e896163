"""The golden images the clouds hold, and what each has become: current, superseded or expired.

Images bill for their storage (AWS: the EBS snapshots behind an AMI; GCP: the image; Azure: the
gallery version's replicas) for as long as they are kept, with no VM running. They are found by
their ``gpufleet:image`` tag, not by a cluster's, so `image list`, `status` and `reap` all ask the
clouds through ``held`` here. An image with a ``gpufleet:expires-at`` tag (`image build
--expires`) that has passed is what `reap` deletes; a newer image of the same stack, pool and
place makes an older one *superseded*: shown, never deleted by `reap` (a pool may name it).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from gpufleet.clouds.base import FoundImage
from gpufleet.clouds.tags import TAG_PREFIX, format_expiry, parse_expiry, time_or_none
from gpufleet.errors import CloudUnreadable, InputError
from gpufleet.state.images import Manifest


@dataclass
class Held:
    image: FoundImage
    state: str  # current | superseded | expired | unreadable
    detail: str = ""
    created: dt.datetime | None = None
    expires: dt.datetime | None = None

    def to_dict(self) -> dict:
        return {**self.image.to_dict(), "state": self.state, "detail": self.detail,
                "expires_at": format_expiry(self.expires) if self.expires else None}


@dataclass
class Removed:
    image: FoundImage
    ok: bool
    message: str = ""

    def to_dict(self) -> dict:
        return {**self.image.to_dict(), "deleted": self.ok, "message": self.message or None}


def held(clouds) -> tuple[list[FoundImage], dict[str, str]]:
    """Every golden image of the opened clouds (``inventory.Clouds``) in their regions, and the
    clouds whose images could not be listed, with why."""
    images, unread = [], {}
    for p, api in clouds.open.items():
        try:
            images += api.images(clouds.regions[p])
        except CloudUnreadable as e:
            unread[f"{p} images"] = e.reason
    images.sort(key=lambda i: (i.name, i.provider, i.region))
    return images, unread


def _place(i: FoundImage) -> tuple:
    """Where an image stands beside its pool's others: its cloud, region, stack and pool."""
    return i.provider, i.region, i.tags.get(TAG_PREFIX + "stack"), i.tags.get(TAG_PREFIX + "pool")


def judge(images: list[FoundImage], now: dt.datetime) -> list[Held]:
    """Each image's state: expired (its expires-at passed), superseded (a newer image of the same
    stack and pool in the same cloud and region), or current; unreadable when its expires-at is not a time."""
    newest: dict[tuple, tuple[dt.datetime, str]] = {}
    for i in images:
        t, key = time_or_none(i.created_at), _place(i)
        if t and (key not in newest or t > newest[key][0]):
            newest[key] = (t, i.name)
    out = []
    for i in images:
        created, key = time_or_none(i.created_at), _place(i)
        raw = i.tags.get(TAG_PREFIX + "expires-at")
        try:
            expires = parse_expiry(raw) if raw else None
        except InputError as e:
            out.append(Held(i, "unreadable", f"{e.message}; not touched: fix the tag or `gpufleet image delete {i.name}`",
                            created))
            continue
        if expires is not None and expires <= now:
            out.append(Held(i, "expired", f"expired {format_expiry(expires)}: `gpufleet reap` deletes it", created,
                            expires))
        elif key in newest and created and newest[key][1] != i.name and created < newest[key][0]:
            out.append(Held(i, "superseded", f"{newest[key][1]} is newer; kept until `gpufleet image delete {i.name}`"
                            + (" or it expires" if expires else ""), created, expires))
        else:
            out.append(Held(i, "current", "", created, expires))
    return out


def remove(clouds, images: list[FoundImage]) -> list[Removed]:
    """Delete each image with its snapshots and drop it from the manifest; a failure is said and the rest go on."""
    manifest, out = Manifest(), []
    for i in images:
        try:
            clouds.open[i.provider].delete_image(i)
        except CloudUnreadable as e:
            out.append(Removed(i, False, f"{e.where}: {e.reason}"))
            continue
        manifest.forget(i.name, i.provider)
        out.append(Removed(i, True))
    return out

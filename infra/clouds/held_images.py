"""The golden images the clouds hold, and what each has become: current, superseded or expired.

Images bill for their storage (AWS: the EBS snapshots behind an AMI; GCP: the image; Azure: the
gallery version's replicas) for as long as they are kept, with no VM running. They are found by
their ``gpufleet:image`` tag, not by a cluster's, so `image list`, `status` and `reap` all ask the
clouds through ``held`` here. Each build is an image of its own (its cloud id), and the builds of
one state tree share its ``gpufleet:image`` name. An image with a ``gpufleet:expires-at`` tag
(`image build --expires`) that has passed is what `reap` deletes; a newer build of the same stack,
pool and place (of the same tree or another) makes an older one *superseded*: shown, never deleted
by `reap` (a pool may name it), removed by `image delete`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from gpufleet.clouds.base import FoundImage
from gpufleet.clouds.tags import TAG_PREFIX, format_expiry, parse_expiry, time_or_none
from gpufleet.errors import CloudUnreadable, InputError
from gpufleet.state.images import Manifest

# A build's builder carries the image's tags and a cluster of its own, so that `reap` finds one a
# Packer killed mid-build left running (clouds list what gpufleet made by gpufleet:cluster). No build
# runs this long (the stand-in Packer's, like a real bake of drivers, CUDA and NCCL, takes under an
# hour): a builder older than this is left over. By age, not an expires-at tag: azure-arm tags the
# gallery version with the builder's tags, and a variable file may be built by hand long after its plan.
BUILD_LIMIT = dt.timedelta(hours=6)


def builder_tags(stack: str) -> dict[str, str]:
    """What a builder adds to its image's tags: the cluster `reap` and `status` show it under."""
    return {TAG_PREFIX + "cluster": f"image-build-{stack}"}


def is_builder(tags: dict[str, str]) -> bool:
    """A resource of a cluster that is an image build's builder: the only ones tagged with an image."""
    return TAG_PREFIX + "image" in tags and TAG_PREFIX + "cluster" in tags


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
    """Each build's state: expired (its expires-at passed), superseded (a newer build of the same
    stack and pool in the same cloud and region, under its name or another), or current; unreadable
    when its expires-at is not a time."""
    newest: dict[tuple, tuple[dt.datetime, FoundImage]] = {}
    for i in images:
        t, key = time_or_none(i.created_at), _place(i)
        if t and (key not in newest or t > newest[key][0]):
            newest[key] = (t, i)
    out = []
    for i in images:
        created, key = time_or_none(i.created_at), _place(i)
        raw = i.tags.get(TAG_PREFIX + "expires-at")
        try:
            expires = parse_expiry(raw) if raw else None
        except InputError as e:
            out.append(Held(i, "unreadable", f"{e.message}; not touched: fix the tag or `gpufleet image delete {i.id} --all`",
                            created))
            continue
        if expires is not None and expires <= now:
            out.append(Held(i, "expired", f"expired {format_expiry(expires)}: `gpufleet reap` deletes it", created,
                            expires))
        elif key in newest and created and newest[key][1].id != i.id and created < newest[key][0]:
            newer = newest[key][1]
            out.append(Held(i, "superseded", (f"a newer build of it ({newer.id})" if newer.name == i.name else
                                              f"{newer.name} ({newer.id}) is newer")
                            + f"; kept until `gpufleet image delete {i.id}`" + (" or it expires" if expires else ""),
                            created, expires))
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
        manifest.forget(i.provider, i.id)
        out.append(Removed(i, True))
    return out


def booted(images: list[FoundImage], manifest: Manifest) -> set[str]:
    """The builds pools boot as ``gpufleet:<name>`` (lowercased ids: ARM's are not case-sensitive):
    each the manifest records; of a name and cloud it records none of (another machine built it),
    the newest in each region."""
    recorded = {e.id.lower() for e in manifest.entries()}
    known = {(e.name, e.provider) for e in manifest.entries()}
    newest: dict[tuple, FoundImage] = {}
    for i in images:
        key = (i.name, i.provider, i.region)
        if (i.name, i.provider) not in known and (key not in newest or _later(i, newest[key])):
            newest[key] = i
    return ({i.id.lower() for i in images} & recorded) | {i.id.lower() for i in newest.values()}


def _later(a: FoundImage, b: FoundImage) -> bool:
    ta, tb = time_or_none(a.created_at), time_or_none(b.created_at)
    return ta is not None and (tb is None or ta > tb)

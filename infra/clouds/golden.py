"""The golden image a pool boots where it lands (``image: gpufleet:<name>``, built by `gpufleet image
build` and recorded in the manifest, ``state.images``): the build for its cloud and region, or any
build of it on a cloud whose images are global (``images_global``). A place where the pool's image
cannot boot is left out of failover before any attempt (``clouds.candidates``)."""

from __future__ import annotations

from gpufleet.clouds import provider
from gpufleet.state.images import PREFIX, BuiltImage, Manifest


def name_of(pool) -> str | None:
    """The golden image a pool names (``gpufleet:<name>``), else None."""
    image = pool.image or ""
    return image[len(PREFIX):] if image.startswith(PREFIX) else None


def find(manifest: Manifest, name: str, cloud: str, region: str) -> BuiltImage | None:
    """The newest build of ``name`` a pool on ``cloud`` in ``region`` boots."""
    return manifest.find(name, cloud, None if provider(cloud).images_global else region)


def missing(manifest: Manifest, name: str, cloud: str, region: str) -> str | None:
    """Why a pool booting ``name`` cannot land in ``region`` of ``cloud`` (None: it can)."""
    if find(manifest, name, cloud, region) is not None:
        return None
    if provider(cloud).images_global:
        return f"no golden image {name} built for {cloud}"
    return (f"no golden image {name} built for {cloud} {region}, and {cloud}'s images boot only in the region "
            f"they were built in: build it there (gpufleet image build, the pool's region set to {region})")

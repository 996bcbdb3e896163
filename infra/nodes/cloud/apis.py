"""Opening the clouds' APIs for an operation over cloud nodes: the one place the cloud kind, heal and scale do it
(a test's stand-in, ``Seams.cloud_api``, in their place)."""

from __future__ import annotations

from gpufleet.clouds import inventory
from gpufleet.nodes.run import Run


def open_apis(providers_used: list[str], regions: dict[str, list[str]], given=None) -> inventory.Clouds:
    """The clouds' APIs to ask (credentials required), limited to ``regions``; ``given``: already open."""
    if given is not None:
        return given
    return inventory.open_clouds(providers_used, required=True, regions=regions)


def pool_api(run: Run, provider: str, region: str):
    """The API of a pool's cloud, ``provider`` in ``region``."""
    return open_apis([provider], {provider: [region]}, given=run.seams.cloud_api)[provider]

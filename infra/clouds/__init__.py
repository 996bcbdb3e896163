"""The providers gpufleet drives, behind one interface, found by name.

``provider("baremetal")`` and ``cloud("aws")`` return the implementation in the folder of that
name (``gpufleet/clouds/aws/``), whose ``PROVIDER`` object implements ``base.Provider`` (and,
for a cloud, ``base.Cloud``). Cross-cloud code dispatches through these, never by comparing
provider names. The names themselves are in ``gpufleet.providers``.
"""

from __future__ import annotations

import functools
import importlib

from gpufleet.errors import NotFound
from gpufleet.providers import CLOUDS, PROVIDERS


def provider(name: str):
    """The implementation of a provider (cloud or bare metal), by name."""
    if name not in PROVIDERS:
        raise NotFound("provider", name, PROVIDERS)
    return importlib.import_module(f"gpufleet.clouds.{name}").PROVIDER


def cloud(name: str):
    """The implementation of a cloud, by name."""
    if name not in CLOUDS:
        raise NotFound("cloud", name, CLOUDS)
    return provider(name)


@functools.lru_cache(maxsize=None)
def by_pulumi_package(package: str):
    """The cloud whose Pulumi resources' types start with ``package:``, or None (Pulumi's own, dynamic)."""
    return next((c for c in map(cloud, CLOUDS) if c.pulumi_package == package), None)

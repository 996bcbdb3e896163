"""Loading a cloud's modules that import its SDKs, with one error when they are not installed."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from gpufleet.errors import SdkMissing


def loader(provider: str, packages: tuple[str, ...], extra: str) -> Callable[[str], object]:
    """``load(module)``: ``gpufleet.clouds.<provider>.<module>``, which imports some of ``packages``
    at its top. A missing one of those becomes ``SdkMissing`` naming the extra to install; any
    other missing module is a bug and stays a ModuleNotFoundError."""

    def load(module: str):
        try:
            return importlib.import_module(f"gpufleet.clouds.{provider}.{module}")
        except ModuleNotFoundError as e:
            if (e.name or "").split(".")[0] not in packages:
                raise
            raise SdkMissing(provider, e.name, extra) from None

    return load

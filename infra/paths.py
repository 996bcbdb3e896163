"""Where gpufleet keeps user files. Cheap to import (no pydantic)."""

from __future__ import annotations

import os
from pathlib import Path


def config_path() -> Path:
    """``$GPUFLEET_CONFIG``, else ``$XDG_CONFIG_HOME/gpufleet/config.yaml`` (~/.config by default)."""
    env = os.environ.get("GPUFLEET_CONFIG")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpufleet" / "config.yaml"


def user_config(path: str | Path | None = None) -> Path | None:
    """The config file to read, or None when there is none.

    A path given explicitly (argument or ``$GPUFLEET_CONFIG``) must exist; the default
    location is optional.
    """
    explicit = path is not None or "GPUFLEET_CONFIG" in os.environ
    p = Path(path) if path is not None else config_path()
    if p.exists():
        return p
    if explicit:
        from gpufleet.errors import InputError

        raise InputError(f"config file {p} not found", "unset GPUFLEET_CONFIG or create the file")
    return None

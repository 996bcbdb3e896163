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

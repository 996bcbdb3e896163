"""Where gpufleet keeps user files: one place for every data, config and state path.

Cheap to import (no pydantic). Each path honours the XDG variables and, where one exists, a
gpufleet variable that names the file itself (as tests and shared machines need).
"""

from __future__ import annotations

import os
from pathlib import Path

from gpufleet.errors import InputError


def _xdg(var: str, default: str) -> Path:
    return Path(os.environ.get(var) or str(Path.home() / default))


def data_dir() -> Path:
    """``$XDG_DATA_HOME/gpufleet`` (~/.local/share/gpufleet): registry, state, known hosts, prices."""
    return _xdg("XDG_DATA_HOME", ".local/share") / "gpufleet"


def config_path() -> Path:
    """``$GPUFLEET_CONFIG``, else ``$XDG_CONFIG_HOME/gpufleet/config.yaml`` (~/.config by default)."""
    env = os.environ.get("GPUFLEET_CONFIG")
    if env:
        return Path(env)
    return _xdg("XDG_CONFIG_HOME", ".config") / "gpufleet" / "config.yaml"


def user_workloads_path() -> Path:
    """The user's own workload library, beside the config file."""
    return config_path().parent / "workloads.yaml"


def registry_path() -> Path:
    """The registry of clusters (SQLite): ``$GPUFLEET_REGISTRY``, else in the data directory."""
    env = os.environ.get("GPUFLEET_REGISTRY")
    return Path(env) if env else data_dir() / "registry.db"


def prices_path() -> Path:
    """The prices of the last `gpufleet catalog refresh`: ``$GPUFLEET_PRICES``, else in the data directory."""
    env = os.environ.get("GPUFLEET_PRICES")
    return Path(env) if env else data_dir() / "catalog" / "prices.json"


def known_hosts_path(site: str) -> Path:
    """The known_hosts file of one site (rack)."""
    return data_dir() / "known_hosts" / site


def pulumi_state_dir() -> Path:
    """The default Pulumi file backend."""
    return data_dir() / "pulumi"


def salt_run_dir(cluster: str) -> Path:
    """A cluster's salt-ssh configuration (master config, roster, pillar)."""
    return data_dir() / "salt" / cluster


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
        raise InputError(f"config file {p} not found", "unset GPUFLEET_CONFIG or create the file")
    return None

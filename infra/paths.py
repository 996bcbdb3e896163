"""Where gpufleet keeps user files: one place for every data, config and state path.

Cheap to import (no pydantic). Each path honours the XDG variables and, where one exists, a
gpufleet variable that names the file itself (as tests and shared machines need).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from gpufleet.errors import GpufleetError, InputError, ToolMissing


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


def local_log_dir() -> Path:
    """Without a team store, this machine's event log and `heal`'s memory (``state.events``), in the data
    directory."""
    return data_dir() / "log"


def local_lock_dir() -> Path:
    """Without a team store, this machine's locks of its clusters (one `heal` or `scale` pass at a time), in the
    data directory."""
    return data_dir() / "locks"


def prices_path() -> Path:
    """The prices of the last `gpufleet catalog refresh`: ``$GPUFLEET_PRICES``, else in the data directory."""
    env = os.environ.get("GPUFLEET_PRICES")
    return Path(env) if env else data_dir() / "catalog" / "prices.json"


def rates_path() -> Path:
    """The rates (storage, NAT, addresses, traffic) of the last `gpufleet catalog refresh --rates`:
    ``$GPUFLEET_RATES``, else in the data directory."""
    env = os.environ.get("GPUFLEET_RATES")
    return Path(env) if env else data_dir() / "catalog" / "rates.csv"


def measured_path() -> Path:
    """The user's own training-step measurements (`gpufleet bench --record`), a layer over the shipped
    calibration as the refreshed prices are over the shipped ones: ``$GPUFLEET_MEASURED``, else in the data directory."""
    env = os.environ.get("GPUFLEET_MEASURED")
    return Path(env) if env else data_dir() / "calibration" / "measured.json"


def images_path() -> Path:
    """The manifest of golden images built (``gpufleet image build``): ``$GPUFLEET_IMAGES``, else in the data directory."""
    env = os.environ.get("GPUFLEET_IMAGES")
    return Path(env) if env else data_dir() / "images.json"


def known_hosts_path(site: str) -> Path:
    """The known_hosts file of one site (rack)."""
    return data_dir() / "known_hosts" / site


def ssh_config_path(cluster: str) -> Path:
    """The OpenSSH config `gpufleet ssh-config` writes for a cluster (``Include`` it from ~/.ssh/config)."""
    return data_dir() / "ssh" / f"{cluster}.config"


def pulumi_state_dir() -> Path:
    """The default Pulumi file backend."""
    return data_dir() / "pulumi"


def salt_run_dir(cluster: str) -> Path:
    """A cluster's salt-ssh configuration (master config, roster, pillar)."""
    return data_dir() / "salt" / cluster


def salt_venv_dir() -> Path:
    """The virtualenv `gpufleet setup salt` installs Salt in (Salt cannot share gpufleet's own: its
    ``packaging`` pin conflicts with Pulumi's)."""
    return data_dir() / "salt-venv"


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


def named_by(variable: str) -> str:
    """What names the place of a file that ``variable`` can name itself: that variable when it is
    set, else XDG_DATA_HOME (as the way out an error about that place gives)."""
    return variable if os.environ.get(variable) else "XDG_DATA_HOME"


def make_dir(path: Path, variable: str = "XDG_DATA_HOME") -> Path:
    """``path`` made (with its parents) and writable, for gpufleet to write its own files in. What
    stops that is said with the folder and the way out (``variable``: what names the place), never
    as an OSError: a file where a folder must be (HOME=/dev/null too) is bad input, a read-only
    disk or a folder of someone else's is work not done."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        # the first thing on the way that is there but is not a folder
        blocker = next((p for p in reversed([path, *path.parents]) if p.exists() and not p.is_dir()), None)
        if blocker is not None:
            what = "is a file" if blocker.is_file() else "is not a folder"
            aside = f", or move {blocker} aside if it is there by mistake" if blocker.is_file() else ""
            raise InputError(f"cannot create the folder {path}: {blocker} {what}",
                             f"set {variable} to a place you can write{aside}") from None
        raise GpufleetError(f"cannot create the folder {path}: {e.strerror or e}",
                            f"set {variable} to a place you can write") from None
    if not os.access(path, os.W_OK | os.X_OK):
        why = "read-only file system" if os.statvfs(path).f_flag & os.ST_RDONLY else "permission denied"
        raise GpufleetError(f"cannot write in the folder {path} ({why})",
                            f"make it writable, or set {variable} to a place you can write")
    return path


def make_private_dir(path: Path, variable: str = "XDG_DATA_HOME") -> Path:
    """``path`` made as ``make_dir`` makes it, then the owner's alone (0700) whatever the umask or an
    older gpufleet left: the folder of files holding secrets (a pillar with the munge key)."""
    make_dir(path, variable)
    path.chmod(0o700)
    return path


def write_private(path: Path, text: str, variable: str = "XDG_DATA_HOME") -> None:
    """``text`` into ``path``, replaced whole, mode 0600 whatever the umask."""
    replace_atomically(path, lambda f: f.write(text), variable, mode=0o600)


def team_path() -> Path:
    """The team setting (``gpufleet team init``): ``$GPUFLEET_TEAM_FILE``, else beside the config file."""
    env = os.environ.get("GPUFLEET_TEAM_FILE")
    return Path(env) if env else config_path().parent / "team.json"


def replace_atomically(path: Path, write: Callable[[TextIO], None], variable: str, newline: str | None = None,
                       mode: int = 0o666) -> None:
    """``write(f)`` into a file beside ``path``, flushed to disk, then renamed over it: a reader sees the
    old file or the new one, never half of one (``variable``: what names the folder, for make_dir;
    ``mode``: the new file's, less the umask, as open() makes it by default)."""
    make_dir(path.parent, named_by(variable))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with open(fd, "w", encoding="utf-8", newline=newline) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def states_dir() -> Path:
    """The Salt state tree: ``$GPUFLEET_SALT_STATES``, the checkout's ``salt/``, or the wheel's copy."""
    env = os.environ.get("GPUFLEET_SALT_STATES")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent
    for p in (here.parent / "salt", here / "states"):
        if (p / "top.sls").exists():
            return p
    raise ToolMissing("the Salt states are not installed with gpufleet", "set GPUFLEET_SALT_STATES to a salt/ tree")

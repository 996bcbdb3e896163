"""Reading a file a user can point gpufleet at: a stack, the config, a workload library, the
refreshed prices and rates, a public key, a cloud CLI's profile. One way for all of them: a
regular file only, never more than a cap per kind, so that a path naming /dev/zero,
/dev/urandom, /dev/stdin, a named pipe or a 20 GB file fails at once with the path and the
way out, instead of waiting for a writer that never comes or filling the machine's memory.

Cheap to import (the standard library only).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from gpufleet.errors import InputError

MB = 1024 * 1024
# The caps, per kind: far above any real file, low enough to fail at once.
YAML_BYTES = 4 * MB  # a stack, the config, a workload library: a few KB each
TABLE_BYTES = 256 * MB  # the refreshed prices and rates, the image manifest (a full `catalog refresh`: a few MB)
SMALL_BYTES = 16 * MB  # a public key, a cloud CLI's profile, the team setting: KBs


class FileRefused(InputError):
    """A file gpufleet was pointed at cannot be read: it is no regular file, it is over its cap,
    or the system refuses it. Exit code 2: the user gives another path."""

    def __init__(self, path: str | Path, problem: str, hint: str | None = None):
        self.path, self.problem = str(path), problem
        super().__init__(f"{path}: {problem}", hint)

    def to_dict(self) -> dict:
        return {**super().to_dict(), "path": self.path, "problem": self.problem}


def read_bytes(path: str | Path, what: str, limit: int, *, variable: str | None = None) -> bytes:
    """The whole of ``path``, a regular file of at most ``limit`` bytes. ``what``: what the file
    is, with its article ("a YAML file"), for the message; ``variable``: the environment variable
    that can name the path, the way out when it is set. A missing file is FileNotFoundError (whether
    that is an error is the caller's to say); anything else that stops the read is FileRefused."""
    way_out = _way_out(what, variable)
    try:
        # O_NONBLOCK: opening a named pipe does not wait for a writer (the check below refuses it)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as e:
        _not_there(e)
        raise _refused(path, e, way_out) from None
    try:
        _check(path, os.fstat(fd), what, limit, way_out)  # what was opened, not what the path named before
        os.set_blocking(fd, True)
        data = bytearray()
        while len(data) <= limit:  # a file that grows while it is read stops past the cap too
            chunk = os.read(fd, min(MB, limit + 1 - len(data)))
            if not chunk:
                break
            data += chunk
        if len(data) > limit:
            raise _too_large(path, len(data), limit, what)
        return bytes(data)
    except OSError as e:
        raise _refused(path, e, way_out) from None
    finally:
        os.close(fd)


def check_file(path: str | Path, what: str, limit: int, *, variable: str | None = None) -> None:
    """That ``path`` is a regular file of at most ``limit`` bytes, for a file another library reads
    (a cloud SDK's configuration): what ``read_bytes`` refuses, refused alike, before it is read."""
    way_out = _way_out(what, variable)
    try:
        st = os.stat(path)
    except OSError as e:
        _not_there(e)
        raise _refused(path, e, way_out) from None
    _check(path, st, what, limit, way_out)


def read_text(path: str | Path, what: str, limit: int, *, variable: str | None = None,
              encoding: str = "utf-8") -> str:
    """``read_bytes`` decoded; text that is not ``encoding`` is UnicodeDecodeError (a ValueError,
    as the caller's parser reports a file it cannot parse)."""
    return read_bytes(path, what, limit, variable=variable).decode(encoding)


def _not_there(e: OSError) -> None:
    """A path with a file where a folder should be (HOME=/dev/null) holds no file, as one that is not
    there: FileNotFoundError either way."""
    if isinstance(e, FileNotFoundError):
        raise e
    if e.errno == errno.ENOTDIR:
        raise FileNotFoundError(e.errno, e.strerror, e.filename) from None


def _way_out(what: str, variable: str | None) -> str:
    return f"point {variable} at {what}, or unset it" if variable and os.environ.get(variable) else \
        f"give the path of {what}"


def _check(path, st: os.stat_result, what: str, limit: int, way_out: str) -> None:
    if not stat.S_ISREG(st.st_mode):
        kind = _kind(st.st_mode)
        raise FileRefused(path, f"this is {kind}, not a file", way_out + (
            " (what a pipe or /dev/stdin gives is not read: save it to a file first)"
            if kind in ("a named pipe", "a device") else ""))
    if st.st_size > limit:
        raise _too_large(path, st.st_size, limit, what)


def _too_large(path, size: int, limit: int, what: str) -> FileRefused:
    return FileRefused(path, f"the file is {size / MB:,.1f} MB; at most {limit / MB:,.0f} MB of {what} is read",
                       "is this the right file?")


def _refused(path, e: OSError, way_out: str) -> FileRefused:
    if e.errno == errno.ELOOP:
        return FileRefused(path, "the path is a loop of symbolic links",
                           "point the link at the file itself (`ls -l` shows where each link leads)")
    return FileRefused(path, f"cannot read: {e.strerror or e}", way_out)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device"

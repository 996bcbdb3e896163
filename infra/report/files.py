"""Writing a report's files all or nothing: each is written beside its destination under a
temporary name, and only when every one is written are they renamed into place."""

from __future__ import annotations

import os
from pathlib import Path

from gpufleet.errors import InputError


def check_writable(path: Path) -> Path:
    """The file to write for ``--out path``; bad input (exit 2) unless it can be written: its folder
    exists and is writable, and it is a regular file or a new one. The file is replaced by renaming
    over it, so a device (/dev/full) or a pipe would become a file, and a link a file of its own:
    a link is followed to a regular file (which is what is written), and refused to anything else.
    Checked before any work is done."""
    if path.is_symlink():
        target = Path(os.path.realpath(path))
        if not target.is_file():
            what = "is not a regular file" if target.exists() else "does not exist"
            raise InputError(f"--out {path}: a link to {target}, which {what}",
                             "give a regular file or a new name (a link is followed only to a regular file)")
        path = target
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise InputError(f"--out {path}: is a folder", "give a file name, e.g. --out report.html")
    if path.exists() and not path.is_file():
        raise InputError(f"--out {path}: not a regular file (a device, a pipe or a socket)",
                         "give a regular file or a new name")
    if not folder.is_dir():
        raise InputError(f"--out {path}: the folder {folder} does not exist", "create it, or choose another path")
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise InputError(f"--out {path}: cannot be written (permission denied)", "choose a path you can write")
    return path


def write_all(files: dict[Path, str]) -> list[Path]:
    """Write every file or none; an OSError (a full disk, a folder gone) leaves nothing behind."""
    temps: list[tuple[Path, Path]] = []
    try:
        for path, text in files.items():
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            temps.append((tmp, path))
            tmp.write_text(text, encoding="utf-8")
        for tmp, path in temps:
            os.replace(tmp, path)
    except OSError as e:
        for tmp, _ in temps:
            tmp.unlink(missing_ok=True)
        raise InputError(f"could not write {e.filename or 'the report'}: {e.strerror or e}",
                         "choose a path you can write (--out)") from None
    return [p for _, p in temps]

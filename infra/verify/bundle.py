"""The node-side checks as one zip application, run by the node's own ``python3``.

It holds ``gpufleet/nodecheck/`` as it is installed here plus an empty ``gpufleet/__init__.py``
(the package's real one is not needed on the node), and a ``__main__.py``. Entries carry no
times, so the same code gives the same bytes and the same SHA-256.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from importlib import resources

NAME = "verify.pyz"
MAIN = "from gpufleet.nodecheck.runner import main\nraise SystemExit(main())\n"


def build() -> tuple[bytes, str]:
    """(the bundle's bytes, their SHA-256)."""
    files = {"__main__.py": MAIN, "gpufleet/__init__.py": ""}
    pkg = resources.files("gpufleet.nodecheck")
    for entry in sorted(pkg.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".py") and entry.name != "__main__.py":
            files[f"gpufleet/nodecheck/{entry.name}"] = entry.read_text(encoding="utf-8")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, files[name])
    data = buf.getvalue()
    return data, hashlib.sha256(data).hexdigest()

"""The vendor package table the formulas install from (salt/lib/packages.yaml), as a stack is checked.

A row that no published source confirms (``confirmed: false``) makes its formula fail on the node with
a message naming it (salt/lib/packages.jinja); a pool that would need one is refused when its stack is
loaded instead, before anything is created or billed. The lookup is the formulas': the row of the
node's osfinger, else of its os_family.
"""

from __future__ import annotations

from functools import cache

import yaml

from gpufleet.configure.saltrun import states_dir

# Salt's os_family of the OSes gpufleet's images boot (grains: Ubuntu's family is Debian, EL 9's RedHat)
OS_FAMILY = {"Ubuntu": "Debian", "Debian": "Debian", "Rocky": "RedHat", "AlmaLinux": "RedHat",
             "Red Hat Enterprise Linux": "RedHat"}


@cache
def _table() -> dict:
    return yaml.safe_load((states_dir() / "lib" / "packages.yaml").read_text())


def unconfirmed(formula: str, purpose: str, osfinger: str) -> str | None:
    """Why the table confirms no package of ``formula``'s ``purpose`` for ``osfinger`` (None: it does)."""
    by_os = _table()[formula][purpose]
    rows = by_os.get(osfinger) or by_os.get(OS_FAMILY.get(osfinger.rsplit("-", 1)[0], ""))
    if not rows:
        return f"no package for {osfinger} in salt/lib/packages.yaml"
    row = rows[0]
    return None if row.get("confirmed", True) else row.get("why") or "unconfirmed"

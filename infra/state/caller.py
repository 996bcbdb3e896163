"""Who runs gpufleet on this machine: ``$GPUFLEET_WHO``, else the OS user at this host. Leases and the
team's event log name the caller so, and on racks it is who brought a cluster up (on a cloud, the
cloud's own principal is: ``Cloud.api().identity()``)."""

from __future__ import annotations

import getpass
import os
import socket


def local() -> str:
    return os.environ.get("GPUFLEET_WHO") or f"{getpass.getuser()}@{socket.gethostname()}"

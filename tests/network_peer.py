"""A host elsewhere on the network, as the benchmark's tests play it (tests/unit/test_nodebench_launch.py,
tests/unit/nodes/cloud/test_cloud_bench.py; hostile review rev51c #1): it connects through this machine's network
address (not loopback), as another host of the cluster would, finds a run's listening sockets with `ss -ltnp` and,
where one is a torch TCPStore, lists its keys (TCPStore.list_keys) and puts a pickle in each: unpickling it leaves a
marker file."""

import base64
import datetime as dt
import os
import pickle
import socket
import subprocess

from gpufleet.fleet import bench

LOOPBACK = ("127.", "::1", "::ffff:127.")


def own_address() -> str | None:
    """This machine's address on its network (not loopback): where another machine of the cluster reaches it."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
            address = s.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


class Planted:
    """What a peer puts in a store: unpickling it runs code (here: writes a marker saying as whom)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('ran as uid %d' % __import__('os').getuid())",))


def run_processes(mark: str) -> set[int]:
    """The processes whose command line names ``mark`` (the run's folder: its launcher and every worker, whose
    arguments are the script and plan in it)."""
    out = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if any(mark.encode() in a for a in argv):
            out.add(int(pid))
    return out


def listeners(pids: set[int]) -> set[tuple[str, int]]:
    """(local address, port) of every TCP socket the processes ``pids`` listen on, as `ss -ltnpH` (iproute2) shows
    them: `*` or `0.0.0.0` or `[::]` is every interface."""
    shown = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, timeout=30, check=True).stdout
    out = set()
    for line in shown.splitlines():
        fields = line.split()
        if len(fields) < 6 or not any(f"pid={p}," in fields[5] for p in pids):
            continue
        address, port = fields[3].rsplit(":", 1)
        out.add((address.strip("[]").split("%")[0], int(port)))
    return out


def beyond_loopback(found: set[tuple[str, int]]) -> set[tuple[str, int]]:
    return {(a, p) for a, p in found if not a.startswith(LOOPBACK)}


def plant(address: str, ports, marker: str, planted: set) -> None:
    """As a peer on the network: every key of every torch store at ``address`` on ``ports`` replaced by a pickle."""
    import torch.distributed as tdist

    for port in ports:
        try:
            store = tdist.TCPStore(address, port, is_master=False, timeout=dt.timedelta(seconds=3))
            keys = store.list_keys()
        except Exception:  # noqa: BLE001 (not a store, not reachable, or not yet)
            continue
        for key in keys:
            if (port, key) not in planted:
                store.set(key, base64.b64encode(pickle.dumps(Planted(marker))).decode())
                planted.add((port, key))


def tiny_plan(steps: int) -> dict:
    """The toy decoder, for ``steps`` steps: long enough that the peer finds the run's sockets while it trains."""
    return {**bench.plan(["llm:1b"], tiny=True), "warmup": 1, "steps": steps}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

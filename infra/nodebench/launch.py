"""How a node starts ``train_steps.py``: alone on one GPU, on all (or N) of its GPUs, or under torchrun with the other
nodes of a job.

The controller's side (the standard library only, like the node script): ``gpufleet bench --here`` runs the
command itself, ``gpufleet bench CLUSTER`` sends it to each rack host over SSH and to each cloud node in its request.
On one node the script starts its processes itself (the plan's ``procs``; train_steps.spawn): their process group
meets through a file in a private folder and nothing listens beyond loopback. torchrun --standalone is not used: its
TCPStore listens on every interface with no authentication and its agent unpickles the rendezvous state it reads
there (torch 2.13 elastic/rendezvous/dynamic_rendezvous.py:444), so any host of the network ran code in the
benchmark (hostile review rev51c #1).

Across nodes torchrun is the node's own (``python -m torch.distributed.run`` of the Python that has PyTorch). Its
rendezvous is c10d (a TCP store hosted by the first node's agent at the first node's address); the node's own
address is given (``--local-addr``), so the workers' MASTER_ADDR is an address the peers reach, not a host name they
may not resolve. Flags as torch 2.13's torch/distributed/run.py and elastic/rendezvous/c10d_rendezvous_backend.py
define them (read 2026-11-27).
"""

from __future__ import annotations

from dataclasses import dataclass

TORCHRUN = "torch.distributed.run"  # what the torchrun console script runs
RDZV_PORT = 29500  # torchrun's default port; --port moves it where it is taken
# how long a node's agent waits for the others to join: they start within seconds of each other over SSH, and a
# node that cannot start (no PyTorch) should not hold its peers for torchrun's default 600 s
RDZV_JOIN_S = 120
ALL = "gpu"  # torchrun's --nproc-per-node for one process per visible GPU


@dataclass(frozen=True)
class Launch:
    """``procs`` processes a node (a count, or ``ALL``) on ``nodes`` nodes, whose rendezvous is ``endpoint``
    (the first node's address and port) under the id ``job``; alone on one node when ``nodes`` is 1."""

    procs: str
    nodes: int = 1
    port: int = RDZV_PORT
    job: str = "gpufleet-bench"

    def to_dict(self) -> dict:
        return {"procs": self.procs, "nodes": self.nodes, "port": self.port, "job": self.job}

    @classmethod
    def from_dict(cls, d: dict) -> "Launch":
        return cls(str(d["procs"]), int(d["nodes"]), int(d["port"]), str(d["job"]))

    def plan(self, the_plan: dict) -> dict:
        """The plan a node runs: on one node with the count of processes the script starts itself."""
        return {**the_plan, "procs": self.procs} if self.nodes == 1 else the_plan

    def args(self, first: str = "", address: str = "", index: int = 0) -> list[str]:
        """What goes before the script and its arguments for the node at ``index`` of the job (``address``: its own):
        nothing on one node (the script starts its processes: ``plan``), else torchrun's module and flags."""
        if self.nodes == 1:
            return []
        host = f"[{first}]" if ":" in first else first  # an IPv6 address in brackets before its port
        return ["-m", TORCHRUN, "--nproc-per-node", self.procs, "--nnodes", str(self.nodes), "--rdzv-backend", "c10d",
                "--rdzv-endpoint", f"{host}:{self.port}", "--rdzv-id", self.job, "--local-addr", address,
                "--rdzv-conf", f"is_host={'true' if index == 0 else 'false'},join_timeout={RDZV_JOIN_S}"]

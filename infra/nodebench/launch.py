"""How a node starts ``train_steps.py``: alone on one GPU, on all (or N) of its GPUs, or under torchrun with the other
nodes of a job.

The controller's side (the standard library only, like the node script): ``gpufleet bench --here`` runs the
command itself, ``gpufleet bench CLUSTER`` sends it to each rack host over SSH and to each cloud node in its request.
On one node the script starts its processes itself (the plan's ``procs``; train_steps.spawn): their process group
meets through a file in a private folder and nothing listens beyond loopback. torchrun --standalone is not used: its
TCPStore listens on every interface with no authentication and its agent unpickles the rendezvous state it reads
there (torch 2.13 elastic/rendezvous/dynamic_rendezvous.py:444), so any host of the network ran code in the
benchmark (hostile review rev51c #1).

Across nodes torchrun is the node's own (``python -m torch.distributed.run`` of the Python that has PyTorch), with
its static rendezvous: a TCPStore hosted by the first node's agent at the first node's address and port, each node
given its rank. The store has no authentication (torch 2.13, nor any release before) and listens on every interface:
TCPStore binds the wildcard address unless handed a bound socket (master_listen_fd), which torchrun's rendezvous
never passes, and binding the cluster's own address would still admit the cluster's hosts. So a job over several
nodes trusts every host of the cluster's network for its duration: such a host can read and change the store (forge
or stop the run). What it no longer gets is a pickle read: the static rendezvous keeps no pickled state
(elastic/agent/server/api.py exchanges the ranks as JSON), and the script gathers its rows as JSON, not with
all_gather_object (pickle). The node's own address is given (``--local-addr``) so that the workers reach each other
by address, not by a host name the peers may not resolve. Flags as torch 2.13's torch/distributed/run.py and
elastic/rendezvous/static_tcp_rendezvous.py define them (read 2026-11-28).
"""

from __future__ import annotations

from dataclasses import dataclass

TORCHRUN = "torch.distributed.run"  # what the torchrun console script runs
RDZV_PORT = 29500  # torchrun's default port; --port moves it where it is taken
# how long a node's agent waits for the others to join: they start within seconds of each other over SSH, and a
# node that cannot start (no PyTorch) should not hold its peers for torchrun's default 600 s
RDZV_JOIN_S = 120
ALL = "gpu"  # one process per visible GPU: the plan's procs on one node, torchrun's --nproc-per-node across nodes


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
        return ["-m", TORCHRUN, "--nproc-per-node", self.procs, "--nnodes", str(self.nodes), "--rdzv-backend",
                "static", "--rdzv-endpoint", f"{host}:{self.port}", "--node-rank", str(index), "--rdzv-id", self.job,
                "--local-addr", address, "--rdzv-conf", f"timeout={RDZV_JOIN_S}"]

"""Slurm's view of a cluster as its controller says it, the same on every kind of node: one probe
the controller runs (over SSH on a rack; by the node agent on a cloud node, which puts the answer in
its status), and its answer read back as nodes and jobs per state and the drained nodes' reasons."""

from __future__ import annotations

# each node's state (sinfo's long names: idle, mixed, allocated, drained, down ...), each job's
# (squeue: PENDING, RUNNING ...) and each drained node's reason, one per line, after a marker
PROBE = ("echo nodes; sinfo -h -N -o '%N %T'; echo jobs; squeue -h -o '%T'; "
         "echo drained; sinfo -h -R -o '%n|%E'")
SECTIONS = ("nodes", "jobs", "drained")


def parse(controller: str, text: str) -> dict:
    """The probe's answer: {"controller", "nodes": {state: count}, "jobs": {state: count}, "drained":
    {node: reason}}. States lose sinfo's flags (``idle*``: not responding, ``drain~``: powered off)."""
    section, nodes, jobs, drained = "", {}, {}, {}
    for line in text.splitlines():
        if line in SECTIONS:
            section = line
        elif section == "drained" and "|" in line:
            node, reason = line.split("|", 1)
            drained[node] = reason
        elif line.strip() and section in ("nodes", "jobs"):
            counts = nodes if section == "nodes" else jobs
            state = line.split()[-1].rstrip("*~#!%$@^-").lower()
            counts[state] = counts.get(state, 0) + 1
    return {"controller": controller, "nodes": nodes, "jobs": jobs, "drained": drained}

"""Slurm's view of a cluster as its controller says it, the same on every kind of node: one probe
the controller runs (over SSH on a rack; by the node agent on a cloud node, which puts the answer in
its status), and its answer read back as nodes and jobs per state and the drained nodes' reasons."""

from __future__ import annotations

import re
from collections.abc import Collection

# each node's state (sinfo's long names: idle, mixed, allocated, drained, down ...), each job's
# (squeue: PENDING, RUNNING ..., its partition, the nodes it asks, why it waits) and each drained node's reason, one
# per line, after a marker. squeue's %T state, %P partition, %D node count, %r reason (squeue(1), Slurm 21.08-23.11;
# the reason last: it may hold spaces). Nodes and reasons both by NodeName (%N, one line per node with -N): %n is the
# node's HOST name (slurm-22-05-8-1 src/sinfo/print.c _print_node_hostnames), which for a cloud slot is what its
# slurmd registered with, not the slot (sinfo 22.05.8 run by rev51c, 2026-11-27)
PROBE = ("echo nodes; sinfo -h -N -o '%N %T'; echo jobs; squeue -h -o '%T %P %D %r'; "
         "echo drained; sinfo -h -N -R -o '%N|%E'")
# why a pending job waits when more nodes in its partition would start it: Slurm's job_state_reason_string
# (src/common/job_state_reason.c): WAIT_RESOURCES "Resources", WAIT_PART_NODE_LIMIT "PartitionNodeLimit" (it asks more
# nodes than the partition has), and WAIT_NODE_NOT_AVAIL with the state_desc squeue's %r prints instead (it asks more
# than the partition's available nodes: an elastic pool's slots no node holds yet, drained; src/slurmctld/
# node_scheduler.c _pick_best_nodes and its "ReqNodeNotAvail, UnavailableNodes:%s", slurm-22-05-8-1, read 2026-11-27),
# not its "Reserved for maintenance" or "May be reserved for other job". That list is the partition's unavailable
# nodes, or with the job's required nodes (`sbatch -w`) only those (node_scheduler.c:2580-2605): the job waits for
# more nodes only where it names a slot no node holds (review rev51d, finding 2: not a node a person drained)
# and a job asking more nodes than the partition has up (its unheld slots drained): as its partition's first job it
# waits with this state_desc (slurm-22-05-8-1 src/slurmctld/job_scheduler.c:1727-1738, slurm-23-11-4-1 :1751; squeue's
# %r prints it; review rev51d, seen with the real slurmctld 22.05.8, 2026-11-27)
WAITS_FOR_NODES = ("Resources", "PartitionNodeLimit",
                   "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions")
WAITS_FOR_SLOTS = "ReqNodeNotAvail, UnavailableNodes:"
SECTIONS = ("nodes", "jobs", "drained")


FLAGS = "*~#!%$@^-"  # sinfo's suffixes to a state (``idle*``: not responding, ``drain~``: powered off)


def bare(state: str) -> str:
    """A state without sinfo's flags, lower case."""
    return state.rstrip(FLAGS).lower()


def _sections(text: str):
    """The probe's answer as (section, line), each line after its marker."""
    section = ""
    for line in text.splitlines():
        if line in SECTIONS:
            section = line
        else:
            yield section, line


def parse(controller: str, text: str) -> dict:
    """The probe's answer: {"controller", "nodes": {state: count}, "jobs": {state: count}, "drained":
    {node: reason}}. States lose sinfo's flags (``bare``)."""
    nodes, jobs, drained = {}, {}, {}
    for section, line in _sections(text):
        if section == "drained" and "|" in line:
            node, reason = line.split("|", 1)
            drained[node] = reason
        elif line.strip() and section in ("nodes", "jobs"):
            counts = nodes if section == "nodes" else jobs
            state = bare(line.split()[-1] if section == "nodes" else line.split()[0])
            counts[state] = counts.get(state, 0) + 1
    return {"controller": controller, "nodes": nodes, "jobs": jobs, "drained": drained}


def node_states(text: str) -> dict[str, str]:
    """Each node's state in the probe's answer ({sinfo node name: state, ``bare``}), for `heal`, which
    needs one node's state where `status` shows counts."""
    return {line.split()[0]: bare(line.split()[1]) for section, line in _sections(text)
            if section == "nodes" and len(line.split()) == 2}


def waiting(text: str, free_slots: Collection[str]) -> dict[str, int]:
    """partition -> the nodes its pending jobs ask for, of the jobs that wait for nodes (``WAITS_FOR_NODES``, or
    ``WAITS_FOR_SLOTS`` naming one of ``free_slots``: the elastic pools' slots no node holds); a line of an older
    probe (the state alone) or one that is not of the shape says nothing."""
    out: dict[str, int] = {}
    for section, line in _sections(text):
        parts = line.split(None, 3)
        if section != "jobs" or len(parts) != 4 or parts[0] != "PENDING":
            continue
        slots = parts[3].startswith(WAITS_FOR_SLOTS) and \
            not free_slots.isdisjoint(hostnames(parts[3].removeprefix(WAITS_FOR_SLOTS)))
        count = parts[2].split("-")[0]  # a range (min-max) asks at least its min
        if (parts[3] in WAITS_FOR_NODES or slots) and count.isdigit():
            out[parts[1]] = out.get(parts[1], 0) + int(count)
    return out


_RANGE = re.compile(r"(\d+)(?:-(\d+))?")


def hostnames(hostlist: str) -> set[str]:
    """The names a Slurm host list writes (``gpu-[0,3-4],t4-1``: bitmap2node_name's form, one bracket a name,
    src/common/hostlist.c, slurm-22-05-8-1); a part not of that form is taken as written."""
    out: set[str] = set()
    for part in re.findall(r"[^,\[]*(?:\[[^\]]*\])?[^,]*", hostlist.strip()):
        head, bracket, rest = part.partition("[")
        ranges, _, tail = rest.partition("]")
        if not bracket:
            out.add(part)
            continue
        for m in _RANGE.finditer(ranges):
            lo, hi = m.group(1), m.group(2) or m.group(1)
            out.update(f"{head}{i:0{len(lo)}d}{tail}" for i in range(int(lo), int(hi) + 1))
    return out - {""}


# A host's own node as Slurm says it (run on the host: slurm.conf is on every node): its state and the
# reason it was drained (``%E``, "none" when it has none)
OWN_PROBE = "sinfo -h -N -n \"$(hostname -s)\" -o '%T|%E'"


def own_state(text: str) -> tuple[str, str | None] | None:
    """(state, reason) from OWN_PROBE's answer (flags stripped, lower case; reason None when Slurm
    gives none); None when it names no node (the host is not one of Slurm's)."""
    line = next((ln for ln in text.splitlines() if "|" in ln), None)
    if line is None:
        return None
    state, reason = line.split("|", 1)
    reason = reason.strip()
    return bare(state.strip()), None if reason.lower() in ("", "none") else reason

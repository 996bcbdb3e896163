"""Slurm's configuration for a cluster, rendered here and written by the ``slurm`` formula.

One ``slurm.conf`` (with ``gres.conf``, ``cgroup.conf`` and ``topology.conf``) serves every node:
slurmctld and each slurmd must read the same file, so it is rendered once from all the nodes and
carried to each in its pillar, with the cluster's munge key. Per node it says what the node is:
its CPUs (with its sockets, cores and threads as the node counts them: without them Slurm takes each
CPU for a socket of one core, and a hyper-thread for a core) and memory, its GPUs as GRES (an
explicit ``gres.conf``: Debian's and Ubuntu's Slurm packages are built without NVML, which
``AutoDetect=nvml`` needs), and features from its pool (GPU model, fabric, pool). Each compute pool
is a partition (the first the default), whose jobs get their share of a node unless they ask
(``partition_defaults``): a GPU job its GPUs' share of the node's memory and CPUs, any other job its
CPUs' share of the memory (under ``CR_Core_Memory`` a job without ``--mem`` would take the whole node's
memory, and one one-GPU job hold an 8-GPU node); ``topology.conf`` puts each pool's
nodes under a switch of their own (a rack pool's hosts share its switches, a cloud
pool's nodes its placement group), so that a job lands on close nodes.

With ``accounting``, the controller also gets ``slurmdbd.conf`` and a MariaDB database for it.

Keys and values follow slurm.conf(5), gres.conf(5), cgroup.conf(5), topology.conf(5) and slurmdbd.conf(5) of Slurm
22.05 (Debian 12's), all of them still valid in 24.11 (slurm.schedmd.com/slurm.conf.html, 2026).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import os
import re
import secrets
from dataclasses import dataclass, field, replace

from gpufleet.catalog import images
from gpufleet.configure import software
from gpufleet.configure.pillar import gpu_of
from gpufleet.errors import GpufleetError
from gpufleet.paths import make_private_dir, salt_run_dir

HEALTH_PROGRAM = "/usr/local/sbin/gpufleet-slurm-health"
# slurmd's Prolog where compute nodes are slots: the job's nodes' slot names in /etc/hosts, at the addresses Slurm has
# for them (no DNS knows `gpu-0`: a job's `MASTER_ADDR=$(scontrol show hostnames ...)` and `ssh gpu-0` need it), at
# allocation on every node of the job, before its script (PrologFlags=Alloc; DeferBatch, or the batch script starts
# once the FIRST node's prolog is done: slurm.conf(5) at slurm-22-05-8-1 and slurm-23-11-4-1, the same words in both,
# review rev51d finding 5); why this way and where the addresses come from: salt/slurm/files/gpufleet-slurm-prolog
PROLOG_PROGRAM = "/usr/local/sbin/gpufleet-slurm-prolog"
# slurmctld's PrologSlurmctld where compute nodes are slots: a job given a slot no node holds is requeued and the slot
# drained (slurm.conf cannot declare a CLOUD node drained; review rev51d finding 3): salt/slurm/files/gpufleet-slurm-slots
SLOTS_PROGRAM = "/usr/local/sbin/gpufleet-slurm-slots"
# the node checks a health check runs: what reads the node's state, none of the load tests (NCCL,
# copy bandwidth, DCGM diagnostics) that would compete with the jobs it runs beside
HEALTH_SKIPS = ("nccl", "copy", "dcgm_level", "dcgm_level_full")
MEMORY_KEPT = 0.05  # of a node's memory, left to the OS and slurmd (RealMemory is what jobs may take)
MUNGE_KEY_BYTES = 1024  # as `mungekey` makes them (munge 0.5.13+)
DBD_DATABASE = "slurm_acct_db"  # slurmdbd.conf(5)'s default StorageLoc
# A cloud pool's compute node is a slot of the pool, named ``<pool>-<idx>`` (heal's replacement keeps the idx), not
# its host name: a replacement has a new host name and address, and slurmd on a host slurm.conf does not name exits
# ("Unable to determine this slurmd's NodeName", src/slurmd/slurmd/slurmd.c, 22.05.8 and 23.11.4), so the new node
# starts slurmd with ``-N <its slot>`` (a name given there is used as is: slurmd.c 22.05.8 `_read_config`, "node_name
# may already be set from a command line parameter") and registers from wherever it is. State=CLOUD is Slurm's way for
# a node whose address is not known when slurm.conf is written: with SlurmctldParameters=cloud_reg_addrs (21.08 and
# 22.05; defunct in 23.11, where it is how every cloud node registers: NEWS 23.11.0rc1 "Remove cloud_reg_addrs and make
# it default behavior", and read_config.c logs an error for it from every client command, so it is written only where
# the controller's OS installs an older Slurm: one file for the whole cluster, as slurmctld 23.11 compares each
# slurmd's hash of it, src/slurmctld/proc_req.c; a 22.05 slurmd reads a file without it silently) slurmctld takes
# NodeAddr and NodeHostName from the registration (src/slurmctld/node_mgr.c validate_node_specs, 22.05.8), keeps them
# across a restart (load_all_node_state recovers them for CLOUD nodes only), and gives jobs the cloud nodes' addresses
# (node_scheduler.c set_job_alias_list: SLURM_NODE_ALIASES), where a plain node's peers would resolve it to the old
# address their slurm.conf says. Read 2026-11-27 at tags slurm-22-05-8-1 and slurm-23-11-4-1. Weighed and left:
# dynamic nodes (`slurmd -Z`: 22.05 leaves them out of slurm.conf's partitions and topology, which gpufleet builds per
# pool) and a plain node whose NodeAddr the new node sets with `scontrol update` (lost on a slurmctld restart, and
# unknown to the peers of a multi-node job). Until it registers, a CLOUD node is "powered down" (idle~), which the
# scheduler may still pick (node_scheduler.c puts powered-down nodes last, not out): the node drains its slot before
# slurmd starts (salt/slurm/daemon.sls, gpufleet-slurm-health --before-slurmd), so it registers drained; the
# controller drains the slots no node holds, and a job slurmctld gives one before is requeued (SLOTS_PROGRAM).
# PrivateData=cloud: 22.05 hides a powered-down CLOUD node from sinfo and scontrol, root's included (node_mgr.c
# _is_cloud_hidden), so neither the node's gate nor the controller could find its slot to drain it; 23.02 shows them by
# default and ignores the word (NEWS 23.02.0rc1 "PrivateData=cloud is no longer needed"; read_config.c, 23.11.4)
SLOT_STATE = "CLOUD"
CLOUD_REG_ADDRS = "SlurmctldParameters=cloud_reg_addrs"
CLOUD_REG_ADDRS_DEFUNCT = "23.11"  # the first Slurm that refuses it (above)
SLOT_PARAMETERS = (CLOUD_REG_ADDRS, "PrivateData=cloud")


# slurm.conf(5) 22.05.8: TreeWidth's maximum
TREE_WIDTH_MAX = 65533


def _tree_width(stack, nodes: list[SlurmNode]) -> int:
    """Every node the cluster may have (an elastic pool's max, the controller), so that slurmctld talks to each node
    itself: SchedMD/slurm doc/html/elastic_computing.shtml (slurm-22-05-8-1) "Since the slurmd daemons are not aware
    of the network addresses of other nodes in the cloud, ... configure TreeWidth to a number at least as large as
    the maximum node count"; a slurmd forwards by its own slurm.conf's NodeAddr (src/common/forward.c, 22.05.8),
    which a replaced slot's registration does not change, and the default width is 50 (16 from 23.11)."""
    most = {p.name: p.size.max for p in stack.pools if p.size is not None}
    count = sum(most.values()) + sum(1 for n in nodes if n.pool not in most)
    return min(TREE_WIDTH_MAX, max(count, len(nodes)) + 1)


@dataclass
class SlurmNode:
    name: str  # its NodeName: a rack host's host name, a cloud compute node's slot (SLOT_STATE)
    address: str
    pool: str
    cpus: int
    memory_mb: int
    gpus: int = 0
    gpu_type: str = ""  # GRES type: the GPU model, lower case (h100, a100, t4)
    features: list[str] = field(default_factory=list)
    topology: tuple[int, int, int] | None = None  # (sockets, cores per socket, threads per core)
    cloud: bool = False  # a cloud pool's slot (SLOT_STATE): its NodeAddr is the address it registers from


def gres_type(gpu: str | None) -> str:
    """The GRES type of a GPU model: lower case, no memory size (``A100-80GB`` -> ``a100``)."""
    return re.sub(r"[^a-z0-9]", "", (gpu or "").split("-")[0].lower())


def node(name: str, address: str, pool, *, cpus: int, mem_gib: float, gpus: int, gpu: str | None,
         fabric: str | None = None, topology=None, cloud: bool = False) -> SlurmNode:
    """A node of ``pool`` as Slurm is told of it (``gpus``: how many it has, from its facts or type;
    ``fabric``: its interconnect, the pool's unless given, as the catalog names a cloud type's;
    ``topology``: its [sockets, cores per socket, threads per core] as its facts count them, kept only
    when they are whole numbers that make its CPUs: a node's word is checked before slurm.conf)."""
    features = [f for f in (gres_type(gpu) if gpus else "", (fabric or pool.interconnect or "").lower(), pool.name,
                            (pool.instance_type or "").replace(".", "-").lower()) if f]
    shape = tuple(topology or ())
    fits = len(shape) == 3 and all(type(x) is int and x > 0 for x in shape) and math.prod(shape) == cpus
    return SlurmNode(name, address, pool.name, max(1, cpus), max(1, math.floor(mem_gib * 1024 * (1 - MEMORY_KEPT))),
                     gpus, gres_type(gpu) if gpus else "", list(dict.fromkeys(features)), shape if fits else None, cloud)


def _gpu_files(n: int) -> str:
    return "/dev/nvidia0" if n == 1 else f"/dev/nvidia[0-{n - 1}]"


def render(stack, cluster: str, controller: SlurmNode, nodes: list[SlurmNode], controller_os: str | None = None
           ) -> dict[str, str]:
    """The four files, by name (``controller_os``: the controller's OS as Salt names it, osfinger; None unknown)."""
    cfg = stack.slurm
    head = f"# gpufleet: Slurm of cluster {cluster} (stack {stack.name}); written by `gpufleet configure`, replaced by it\n"
    cgroups = cfg.cgroups
    lines = [
        f"ClusterName={_cluster_name(cluster)}",
        f"SlurmctldHost={controller.name}({controller.address})",
        # no CryptoType: the job credentials' signer is cred/munge by default in every Slurm gpufleet installs
        # (21.08 to 23.11, src/common/read_config.c DEFAULT_CRED_TYPE), and none of their slurm.conf(5) has
        # CryptoType (CredType, its new name, since 20.11)
        "SlurmUser=slurm", "AuthType=auth/munge",
        "StateSaveLocation=/var/spool/slurmctld", "SlurmdSpoolDir=/var/spool/slurmd",
        "SlurmctldPidFile=/run/slurmctld.pid", "SlurmdPidFile=/run/slurmd.pid",
        "SlurmctldLogFile=/var/log/slurm/slurmctld.log", "SlurmdLogFile=/var/log/slurm/slurmd.log",
        "SchedulerType=sched/backfill", "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core_Memory",
        "GresTypes=gpu", "MpiDefault=none", "ReturnToService=2",
        # cgroup tracking confines each job to what it asked for; linuxproc where hosts share a kernel
        "ProctrackType=" + ("proctrack/cgroup" if cgroups else "proctrack/linuxproc"),
        "TaskPlugin=" + ("task/cgroup,task/affinity" if cgroups else "task/none"),
        "JobAcctGatherType=" + ("jobacct_gather/cgroup" if cgroups else "jobacct_gather/linux"),
        "TopologyPlugin=topology/tree",
    ]
    if any(n.cloud for n in nodes):
        defunct = software.installs_slurm_since(controller_os, CLOUD_REG_ADDRS_DEFUNCT)
        lines += [*(p for p in SLOT_PARAMETERS if not (defunct and p == CLOUD_REG_ADDRS)),
                  f"TreeWidth={_tree_width(stack, nodes)}", f"Prolog={PROLOG_PROGRAM}",
                  "PrologFlags=Alloc,DeferBatch", f"PrologSlurmctld={SLOTS_PROGRAM}"]
    if cfg.accounting:  # slurmdbd beside slurmctld, on its default port (6819)
        lines += ["AccountingStorageType=accounting_storage/slurmdbd", f"AccountingStorageHost={controller.address}"]
    if cfg.health_check_interval:
        lines += [f"HealthCheckProgram={HEALTH_PROGRAM}", f"HealthCheckInterval={cfg.health_check_interval}",
                  "HealthCheckNodeState=ANY"]
    lines.append("")
    for n in nodes:
        gres = f" Gres=gpu:{n.gpu_type}:{n.gpus}" if n.gpus else ""
        feats = f" Feature={','.join(n.features)}" if n.features else ""
        shape = (f" Sockets={n.topology[0]} CoresPerSocket={n.topology[1]} ThreadsPerCore={n.topology[2]}"
                 if n.topology else "")
        addr = f" NodeAddr={n.address}" if n.address else ""  # a slot no node holds yet: its registration says it
        lines.append(f"NodeName={n.name}{addr} CPUs={n.cpus}{shape} RealMemory={n.memory_mb}{gres}"
                     f"{feats} State={SLOT_STATE if n.cloud else 'UNKNOWN'}")
    members: dict[str, list[SlurmNode]] = {}  # each pool's nodes, pools in the order their nodes come
    for n in nodes:
        members.setdefault(n.pool, []).append(n)
    for i, (pool, held) in enumerate(members.items()):
        lines.append(f"PartitionName={pool} Nodes={','.join(n.name for n in held)} Default={'YES' if i == 0 else 'NO'} "
                     f"{partition_defaults(held)} MaxTime=INFINITE State=UP")
    gres_lines = [f"NodeName={n.name} Name=gpu Type={n.gpu_type} File={_gpu_files(n.gpus)}" for n in nodes if n.gpus]
    switches = [f"SwitchName={pool} Nodes={','.join(n.name for n in held)}" for pool, held in members.items()]
    switches.append(f"SwitchName=root Switches={','.join(members)}")
    return {
        "slurm.conf": head + "\n".join(lines) + "\n",
        "gres.conf": head + ("\n".join(gres_lines) + "\n" if gres_lines else "# no GPUs on these nodes\n"),
        "cgroup.conf": head + ("ConstrainCores=yes\nConstrainRAMSpace=yes\nConstrainDevices=yes\n" if cgroups
                               else "# cgroups are off for this cluster (slurm: {cgroups: false})\n"),
        "topology.conf": head + "\n".join(switches) + "\n",
    }


def partition_defaults(held: list[SlurmNode]) -> str:
    """What a job of a pool's partition gets of a node when it does not say (``--mem``, ``--cpus-per-gpu``):
    a job with GPUs their share of the node's memory and CPUs (``DefMemPerGPU``, ``DefCpuPerGPU``), any
    other job its CPUs' share of the memory (``DefMemPerCPU``). Each the smallest share of the pool's
    nodes, so that it fits on every one of them: on a pool of unlike nodes a job that wants the whole of a
    larger one asks for it (``--mem=0``).

    slurm.conf(5) 22.05: DefMemPerCPU "The default value is 0 (unlimited)", and under CR_Core_Memory
    "Setting a value for DefMemPerCPU is strongly recommended". Alone it starved GPU jobs: a job's one
    CPU's share of a p5.48xlarge is 1% of its memory, the job's cgroup limit (ConstrainRAMSpace), and an
    8-GPU job got 2 CPUs. The manual calls DefMemPerCPU and DefMemPerGPU "mutually exclusive", but every
    release gpufleet installs (21.08 to 23.11, and to 25.11) keeps them apart on a partition and takes the
    GPU one for a job with GPUs: the partition's DefMemPerGPU and DefCPUPerGPU are its job_defaults_list,
    DefMemPerCPU its def_mem_per_cpu (src/common/read_config.c, _parse_partitionname), and the select
    plugin sets a GPU job's defaults from the list whatever def_mem_per_cpu is (cons_common/job_test.c
    _set_gpu_defaults in 22.05.8, cons_tres/job_test.c in 23.11.4 and 25.11; upstream's only exclusion,
    since 25.05, is of the cluster-wide DefMemPerGPU under a partition's DefMemPerCPU). Checked with Debian
    12's slurmctld 22.05.8 on the test rack (tests/integration/test_slurm_rack.py)."""
    out = [f"DefMemPerCPU={max(1, min(n.memory_mb // n.cpus for n in held))}"]
    gpu_nodes = [n for n in held if n.gpus]
    if gpu_nodes:
        cpus = min(n.cpus // n.gpus for n in gpu_nodes)
        if cpus:  # fewer CPUs than GPUs (a stand-in node): a job keeps Slurm's one CPU per task
            out.append(f"DefCpuPerGPU={cpus}")
        out.append(f"DefMemPerGPU={max(1, min(n.memory_mb // n.gpus for n in gpu_nodes))}")
    return " ".join(out)


def dbd_conf(cluster: str, controller: SlurmNode, password: str) -> str:
    """slurmdbd.conf(5) for the controller: MariaDB on the same host, its password for Slurm's user."""
    return "\n".join([
        f"# gpufleet: slurmdbd of cluster {cluster}; written by `gpufleet configure`, replaced by it",
        "AuthType=auth/munge", f"DbdHost={controller.name}", f"DbdAddr={controller.address}", "SlurmUser=slurm",
        "StorageType=accounting_storage/mysql", "StorageHost=localhost", f"StorageLoc={DBD_DATABASE}",
        "StorageUser=slurm", f"StoragePass={password}",
        "LogFile=/var/log/slurm/slurmdbd.log", "PidFile=/run/slurmdbd.pid", ""])


def dbd_password(key: bytes) -> str:
    """The database password of Slurm's user, derived from the cluster's munge key: nothing more to
    keep, the same wherever the key is, and no way back to the key from it."""
    return hmac.new(key, b"gpufleet slurmdbd", hashlib.sha256).hexdigest()[:32]


def _cluster_name(cluster: str) -> str:
    """slurm.conf's ClusterName: lower case, letters and digits (slurmdbd keys tables by it)."""
    return re.sub(r"[^a-z0-9_]", "_", cluster.lower())[:40]


def munge_key(cluster: str, shared=None) -> bytes:
    """The cluster's munge key: made once, kept beside its Salt configuration (mode 0600); in team
    mode (``shared``: the team's store) kept in the store, so that whoever of the team configures
    the cluster hands its nodes the same key (the first to write it wins a race: the others read it)."""
    path = salt_run_dir(cluster) / "munge.key"
    if shared is not None:
        key = _team_key(cluster)
        held = shared.read(key)
        if held is None:
            mine = path.read_bytes() if path.exists() else secrets.token_bytes(MUNGE_KEY_BYTES)
            held = (mine, "") if shared.create(key, mine) else shared.read(key)
        if held is not None:
            return held[0]
    make_private_dir(path.parent)  # an older gpufleet's folder (its mode the umask's) included
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(MUNGE_KEY_BYTES))
    return path.read_bytes()


def forget_munge_key(cluster: str, shared=None) -> None:
    """A cluster that is gone: its key removed from this machine and from the team's store."""
    (salt_run_dir(cluster) / "munge.key").unlink(missing_ok=True)
    held = shared.read(_team_key(cluster)) if shared is not None else None
    if held is not None:
        shared.delete(_team_key(cluster), held[1])


def _team_key(cluster: str) -> str:
    """Where the team's store keeps a cluster's munge key."""
    return f"slurm/{cluster}/munge.key"


def health_expectations(expect: dict) -> dict:
    """A node's verify expectations as its health check uses them: the reads, none of the load tests."""
    out = {k: v for k, v in expect.items() if k not in HEALTH_SKIPS}
    out["required"] = [r for r in expect.get("required") or () if not r.startswith("bw.")]
    return out


# the active checks (README, "Health"): DCGM's diagnostic at this level (about two minutes a GPU: `dcgmi diag`
# documentation) and the single-node all-reduce, run by the node's watch only while the node is idle
ACTIVE_DCGM_LEVEL = 2


def active_expectations(expect: dict) -> dict:
    """What a node's active checks add to its health expectations: the load tests the health check leaves out. DCGM's
    diagnostic wherever dcgmi is (a node with none skips it), and required where the pool installs DCGM (its
    expectations have a level): the watch then never passes the checks without it."""
    return {"dcgm_level": ACTIVE_DCGM_LEVEL, **({"dcgm_required": True} if expect.get("dcgm_level") else {}),
            **({"nccl": expect["nccl"]} if expect.get("nccl") else {})}


def pillars(stack, cluster: str, controller: SlurmNode, nodes: list[SlurmNode], hosts: dict[str, tuple[str, dict | None, int]],
            *, bundle: bytes, key: bytes, controller_os: str | None = None) -> dict[str, dict]:
    """The ``slurm`` pillar of each host (``hosts``: id -> its role, its pool's verify expectations and
    the GPUs its facts show): the cluster's files rendered once (``controller_os``: see ``render``), the same for
    all of them."""
    files = render(stack, cluster, controller, nodes, controller_os)
    encoded = base64.b64encode(bundle).decode()
    listed = sorted({controller.name, *(n.name for n in nodes)})  # a node not among them starts no daemon
    accounting = None
    if stack.slurm.accounting:  # the controller's alone: it holds the database password
        password = dbd_password(key)
        accounting = {"conf": dbd_conf(cluster, controller, password), "password": password,
                      "database": DBD_DATABASE, "cluster": _cluster_name(cluster)}
    return {hid: {"role": role, "files": files, "nodes": listed,
                  "munge_key": key.hex(),  # munge hashes the key file's bytes: hex text keeps all of their randomness
                  "health": {"interval": stack.slurm.health_check_interval,
                             "expect": health_expectations(expect or {}), "gpus_seen": gpus_seen, "bundle": encoded},
                  "controller": controller.name,
                  **({"accounting": accounting} if accounting and role == "controller" else {})}
            for hid, (role, expect, gpus_seen) in hosts.items()}


def pool_pillars(stack, cluster: str, cat, facts: list[tuple[str, str | None, dict, str]], *,
                 expectations: dict[str, dict], bundle: bytes, key: bytes) -> dict[str, dict]:
    """Each cloud pool's ``slurm`` pillar (its nodes share one document), from what its nodes said of
    themselves (``facts``: (pool, the address the cloud gave it, the facts in its status, its slot
    ``<pool>-<idx>``)): the controller by its host name (slurmctld must find itself in SlurmctldHost; each
    one node's: cloudnodes.slurm_members), a compute node by its slot (SLOT_STATE); CPUs (and their
    sockets, cores and threads), memory and the GPUs it shows; its address is the cloud's, never what its
    status says."""
    pools = {p.name: p for p in stack.pools}
    # each pool's GPU model and fabric, as the catalog names its instance type
    kinds = {p.name: (gpu_of(p, cat)[0], cat.instance(p.provider, p.instance_type).fabric if p.instance_type else None)
             for p in stack.pools}
    found: dict[str, list[SlurmNode]] = {}
    for pool_name, address, f, slot in facts:
        gpu, fabric = kinds[pool_name]
        compute = pools[pool_name].role == "compute"
        found.setdefault(pool_name, []).append(node(
            slot if compute else f["hostname"], address, pools[pool_name], cpus=int(f["cpus"]),
            mem_gib=float(f["mem_gib"]), gpus=int(f.get("gpu_count") or 0), gpu=gpu, fabric=fabric,
            topology=f.get("cpu_topology"), cloud=compute))
    ctl = [n for p in stack.pools if p.role == "controller" for n in found.get(p.name, [])]
    if not ctl:
        raise GpufleetError("the Slurm controller's node did not configure: no slurm.conf can be written",
                            "see its status in `gpufleet status` and /var/log/gpufleet/node.log on it, then run "
                            "`gpufleet configure`")
    compute = [n for p in stack.pools if p.role == "compute" for n in found.get(p.name, []) + _free_slots(p, found)]
    per_pool = {name: (pools[name].role, expectations.get(name), max(n.gpus for n in members))
                for name, members in found.items()}
    ctl_pool = next(p for p in stack.pools if p.role == "controller")
    return pillars(stack, cluster, ctl[0], compute, per_pool, bundle=bundle, key=key,
                   controller_os=images.osfinger(ctl_pool.image))


def _free_slots(pool, found: dict[str, list[SlurmNode]]) -> list[SlurmNode]:
    """An elastic pool's slots no node holds now, up to its max (``<pool>-<idx>``, idx below max), each shaped as a
    node of the pool (one instance type): a node `scale` or `heal` adds later takes one (``channel.assign_slots``)
    and joins Slurm with no `configure`. Without an address: slurm.conf(5) 22.05.8 NodeAddr "By default, the NodeAddr
    will be identical in value to NodeHostname", and a CLOUD node's is set by its registration (cloud_reg_addrs, see
    SLOT_STATE), as SchedMD/slurm doc/html/elastic_computing.shtml declares its State=CLOUD nodes (slurm-22-05-8-1,
    read 2026-11-27). Until a node registers as one, a slot is powered down, and the controller's state drains it
    (salt/slurm/daemon.sls, "GF-GATE not registered yet"); a job slurmctld gives it before is requeued and the slot
    drained (SLOTS_PROGRAM, PrologSlurmctld: slurm.conf cannot declare a CLOUD node drained). A pool with no node to
    lend its shape declares none (`configure` does once one has joined)."""
    held = found.get(pool.name) or []
    if pool.size is None or pool.role != "compute" or not held:
        return []
    like, taken = held[0], {n.name for n in held}
    return [replace(like, name=f"{pool.name}-{i}", address="") for i in range(pool.size.max)
            if f"{pool.name}-{i}" not in taken]


def has_facts(f: dict | None) -> bool:
    """Whether a node's facts say all Slurm needs of it (an agent older than this does not)."""
    return bool(f) and all(f.get(k) for k in ("hostname", "cpus", "mem_gib"))

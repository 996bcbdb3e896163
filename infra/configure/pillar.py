"""The Salt pillar for a pool's nodes, built from the stack file (and a host's facts).

Every formula under ``salt/`` reads its own top-level pillar key (``nvidia_driver``,
``fabric``, ...) merged over its parameter files; ``gpufleet`` carries what all formulas share:
the cluster, pool and provider, which formulas apply, and ``live`` (whether kernel settings,
services and mounts take effect at once; false on test hosts that share a kernel).
"""

from __future__ import annotations

import copy
import hashlib
import json

from gpufleet.clouds import provider
from gpufleet.configure import FORMULAS, GPU_STATES, software
from gpufleet.monitoring import ports, provisioning, scrape
from gpufleet.monitoring.rules import render_rules

SERVER = "monitoring.server"  # Prometheus and Alertmanager, on the monitor pool's nodes
# node_exporter alone: on a monitor pool whose nodes run no exporters of their own (Slurm's controller), it serves
# the cluster collector's file (spend, budgets, Slurm) to Prometheus
NODE_EXPORTER = "monitoring.node_exporter"

FABRIC = {"efa": "efa", "infiniband-hdr": "infiniband", "infiniband-ndr": "infiniband", "gpudirect-tcpx": "tcpx",
          "roce": "roce", "10gbe": "ethernet", "25gbe": "ethernet", "100gbe": "ethernet", None: "ethernet"}


def formulas(stack, pool) -> list[str]:
    """The formulas a pool's nodes get: the pool's ``salt.states``, or every one that applies; and
    Prometheus with Alertmanager on the monitor pool (``stack.monitoring``)."""
    out = _node_formulas(stack, pool)
    if stack.monitor_pool() is pool:
        if "monitoring" not in out:
            out.append(NODE_EXPORTER)
        out.append(SERVER)
    return out


def scraped_pools(stack) -> list:
    """The pools whose nodes run the exporters, which the monitor scrapes."""
    return [p for p in stack.pools if "monitoring" in _node_formulas(stack, p)]


def monitor_pillar(stack, cluster: str) -> dict:
    """The monitor host's ``monitoring:server`` pillar: prometheus.yml scraping every pool whose nodes
    run the exporters, alertmanager.yml, the rules, retention by time and by the stack's disk size, Grafana's files
    where the stack asks for it, and the address to listen on (a rack pool's first host's; a cloud node's own
    address in the cluster's network)."""
    m, pool = stack.monitoring, stack.monitor_pool()
    scraped = scraped_pools(stack)
    return {"listen_address": pool.hosts[0].address if pool.hosts else "", "cluster_cidr": stack.network.cidr,
            "retention": m.retention, "retention_size": f"{m.disk_gb}GB", "external_url": ports.local_url("prometheus"),
            "prometheus_yml": scrape.render_prometheus(stack, cluster=cluster, pools=scraped, monitor=pool),
            "discovery": scrape.discovery(cluster, pool, scraped, [stack.network.cidr]),
            "alertmanager_yml": scrape.render_alertmanager(stack),
            "rules": render_rules(stack, cluster),
            # Grafana beside them (monitoring.grafana): its provisioning, dashboards and data source
            "grafana_files": provisioning.monitor_files(stack.name) if m.grafana else {}}


def _node_formulas(stack, pool) -> list[str]:
    if pool.salt.states is not None:
        return [f for f in FORMULAS if f in pool.salt.states]
    if pool.role == "controller":  # Slurm's controller: no GPU, none of the GPU node's software
        return ["node_base", "slurm"]
    sw = stack.software
    out = ["node_base", "nvidia_driver", "cuda", "nccl"]
    if sw.container_runtime != "none" or pool.interconnect == "gpudirect-tcpx":
        out.append("container_runtime")
    out.append("fabric")
    if any(s.type == "lustre" for s in pool.storage):
        out.append("lustre_client")
    if any(s.type == "nfs" and s.server for s in pool.storage):
        out.append("nfs_client")
    if sw.frameworks:
        out.append("frameworks")
    if sw.monitoring:
        out.append("monitoring")
    out.append("verify_tools")  # what `gpufleet verify` runs (nccl-tests, nvbandwidth, fio, perftest)
    if stack.slurm:
        out.append("slurm")
    return out


def split_for_host(states: list[str], has_gpu: bool) -> tuple[list[str], list[str]]:
    """(applied for real, applied with test=True): a host without a GPU only rehearses the GPU states."""
    if has_gpu:
        return list(states), []
    real, rehearse = [], []
    for s in states:
        if s == "monitoring":
            real.append("monitoring.node_exporter")
            rehearse.append("monitoring.dcgm")
        elif s in GPU_STATES:
            rehearse.append(s)
        else:
            real.append(s)
    return real, rehearse


def merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def gpu_of(pool, cat=None) -> tuple[str | None, int | None]:
    """The pool's GPU model and count per node (from the instance type for cloud pools)."""
    if pool.gpu or pool.on_rack or cat is None or not pool.instance_type:
        return pool.gpu, pool.gpus_per_node
    it = cat.instance(pool.provider, pool.instance_type)
    return it.gpu, it.gpu_count


def build(stack, pool, *, cluster: str, gpu: str | None = None, gpu_count: int | None = None, has_gpu: bool = True,
          nvswitches: int = 0, subnet_manager_host: bool = False, index: int | None = 0, collector: dict | None = None) -> dict:
    """The pillar for one node of ``pool`` (``has_gpu``/``nvswitches`` from its facts when known;
    ``index``: the node's in its pool where known, a rack host's: the monitor is its pool's first; None: no one
    node, a golden image, which carries no monitor (what it serves is the cluster's, rendered when it is configured);
    ``collector``: the monitor's cluster collector settings, monitoring.collector.settings, from the operation)."""
    sw = stack.software
    gpu = gpu or pool.gpu
    count = gpu_count or pool.gpus_per_node or 0
    states = [s for s in formulas(stack, pool) if s != SERVER or index == 0]
    kind = FABRIC[pool.interconnect]
    fm = nvswitches > 0 or bool(gpu and count >= 8 and gpu.upper().startswith(software.NVSWITCH_GPUS))
    fabric: dict = {"kind": kind}
    if kind == "infiniband":
        fabric.update(ipoib=True, subnet_manager=subnet_manager_host)
    lustre = [s for s in pool.storage if s.type == "lustre"]
    nfs = [s for s in pool.storage if s.type == "nfs" and s.server]
    pillar = {
        "gpufleet": {"cluster": cluster, "stack": stack.name, "pool": pool.name, "provider": pool.provider,
                     "live": True, "states": states, "gpu": {"model": gpu, "count": count or None}},
        "node_base": {"chrony": {"servers": list(provider(pool.provider).time_servers)}},
        "nvidia_driver": {"branch": sw.driver, "open": software.use_open_modules(gpu, sw.open_kernel_modules),
                          "fabric_manager": fm},
        "cuda": {"version": sw.cuda},
        "nccl": {"version": sw.nccl, "cuda": sw.cuda},
        "verify_tools": {"nccl": sw.nccl, "cuda": sw.cuda},
        "container_runtime": {"engine": sw.container_runtime},
        "fabric": fabric,
        "lustre_client": {"flavor": provider(pool.provider).lustre_flavor, "mounts": [
            {"device": ":".join(s.mgs_nids) + f":/{s.fsname}", "mount": s.mount} for s in lustre if s.mgs_nids]},
        "nfs_client": {"mounts": [{"server": s.server, "export": s.export or "/", "mount": s.mount} for s in nfs]},
        "frameworks": {"envs": {name: _env_dict(software.framework_env(name, ver, sw.cuda, has_gpu))
                                for name, ver in sorted(sw.frameworks.items())}},
        "monitoring": {"node_exporter": sw.monitoring, "dcgm": sw.monitoring, "cuda_major": sw.cuda.split(".")[0]},
    }
    if SERVER in states:
        pillar["monitoring"]["server"] = monitor_pillar(stack, cluster)
        if collector is not None:
            pillar["monitoring"]["collector"] = collector
    return merge(pillar, pool.salt.pillar)


def _env_dict(env: software.Env) -> dict:
    d = {"packages": env.packages}
    if env.index_url:
        d["index_url"] = env.index_url
    if env.extra_index_urls:
        d["extra_index_urls"] = env.extra_index_urls
    return d


def digest(pillar: dict, states: list[str], tree_hash: str, identity: str = "") -> str:
    """What a host was configured with: pillar, formulas, the state tree's content, and the machine
    itself (machine-id and host key: a reinstalled host is configured again)."""
    blob = json.dumps({"pillar": pillar, "states": states, "tree": tree_hash, "host": identity}, sort_keys=True,
                      default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]

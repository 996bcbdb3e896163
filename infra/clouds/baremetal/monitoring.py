"""How Prometheus on the monitor host finds a rack pool's nodes: the stack lists its hosts, so their
targets are written out (``static_configs``) with gpufleet's labels; the node is ``<pool>-<index>``,
as the registry, the Salt roster and ``status`` name a rack host."""

from __future__ import annotations


def scrape_discovery(cluster: str, pools: list, port: int) -> tuple[dict, list]:
    groups = [{"targets": [f"{h.address}:{port}"], "labels": {"pool": p.name, "node": f"{p.name}-{i}"}}
              for p in pools for i, h in enumerate(p.hosts)]
    return {"static_configs": groups}, []

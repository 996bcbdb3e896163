"""How Prometheus on the monitor host finds an AWS pool's nodes: EC2 service discovery by the
cluster's tags, so a node heal replaced or `up` added is scraped without a hand edit.

``ec2_sd_configs`` as Prometheus 2.42 reads them (prometheus.io/docs/prometheus/2.42/configuration/
configuration/#ec2_sd_config, read 2026-11-27): ``region``, ``port``, ``filters`` (DescribeInstances
filters); each tag is the meta label ``__meta_ec2_tag_<key>`` with the key's characters outside
``[a-zA-Z0-9_]`` as ``_`` (``gpufleet:pool`` -> ``__meta_ec2_tag_gpufleet_pool``). The monitor host's
identity needs ``DISCOVERY_ACTIONS`` (the same page: "must have the ec2:DescribeInstances permission"):
the monitor pool's role gets them (components.GpuNodePool, ``discovery_policy``).
"""

from __future__ import annotations

DISCOVERY_ACTIONS = ("ec2:DescribeInstances",)


def discovery_policy() -> dict:
    """The monitor pool's role's inline policy: the discovery's one action, on "*" (DescribeInstances has
    no resource-level permissions: "Actions, resources, and condition keys for Amazon EC2", Service
    Authorization Reference, read 2026-11-27)."""
    return {"Version": "2012-10-17", "Statement": [{"Sid": "PrometheusEc2Discovery", "Effect": "Allow",
                                                    "Action": list(DISCOVERY_ACTIONS), "Resource": "*"}]}


def scrape_discovery(cluster: str, pools: list, port: int) -> tuple[dict, list]:
    names = sorted({p.name for p in pools})
    regions = sorted({r for p in pools for r in (p.region, *(p.failover.regions if p.failover else ())) if r})
    configs = [{"region": r, "port": port, "filters": [
        {"name": "tag:gpufleet:cluster", "values": [cluster]},
        {"name": "tag:gpufleet:pool", "values": names},
        {"name": "instance-state-name", "values": ["running"]}]} for r in regions]
    relabel = [{"source_labels": ["__meta_ec2_tag_gpufleet_pool"], "regex": "(.+)", "target_label": "pool"},
               {"source_labels": ["__meta_ec2_instance_id"], "regex": "(.+)", "target_label": "node"}]
    return {"ec2_sd_configs": configs}, relabel

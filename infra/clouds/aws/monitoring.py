"""How the monitor finds an AWS pool's nodes: root on the monitor's node lists them (EC2 DescribeInstances on the
cluster's tags, clouds/node_targets.py) with the monitor pool's role, and writes them for Prometheus's file_sd, so a
node heal replaced or `scale` added is scraped without a hand edit. Prometheus's own ec2_sd would need the role's
credentials, which the node's guard keeps from its user (node_targets says why).

The role needs ``DISCOVERY_ACTIONS``: the monitor pool's role gets them (components.GpuNodePool, ``discovery_policy``).
"""

from __future__ import annotations

from gpufleet.clouds import node_targets

DISCOVERY_ACTIONS = ("ec2:DescribeInstances",)


def discovery_policy() -> dict:
    """The monitor pool's role's inline policy: the listing's one action, on "*" (DescribeInstances has
    no resource-level permissions: "Actions, resources, and condition keys for Amazon EC2", Service
    Authorization Reference, read 2026-11-27)."""
    return {"Version": "2012-10-17", "Statement": [{"Sid": "PrometheusEc2Discovery", "Effect": "Allow",
                                                    "Action": list(DISCOVERY_ACTIONS), "Resource": "*"}]}


def scrape_discovery(cluster: str, pools: list, port: int) -> tuple[dict, list]:
    return node_targets.file_sd(port), []


def monitor_discovery(cluster: str, monitor, pools: list) -> dict:
    """What node_targets.aws_nodes lists: the monitor's own region, the one whose VPC it reaches (the stack refuses
    a scraped pool that may run elsewhere: monitoring.scrape.unreached)."""
    return {"regions": [monitor.region]}

"""The monitor's own ports (Prometheus, Alertmanager, Grafana) answer only inside the cluster's network, on every
cloud, whatever else the network admits: checked on the plan under Pulumi's mock runtime, each cloud's rules
evaluated as the cloud evaluates them, its own default rules included:

* AWS security groups admit only what a rule allows (no deny rules); the cluster's group admits its own members
  and SSH from ``ssh_cidrs`` (EC2 User Guide, "Security group rules", read 2026-11-27);
* GCP firewall rules: the matching rule of the lowest priority number wins, a deny before an allow at the same
  number; the implied rules deny all ingress at 65535; a rule made without a priority gets 1000
  (cloud.google.com/firewall/docs/firewalls, "Firewall rule priority", "Implied rules", read 2026-11-27);
* Azure NSGs: the matching rule of the lowest priority wins; the default rules admit the VirtualNetwork service tag
  (the VNet, every peered VNet and on-premises network behind a gateway) at 65000 and deny the rest at 65500
  (learn.microsoft.com/azure/virtual-network/network-security-groups-overview, "Default security rules", read
  2026-11-27).

A pool on a network the stack names (``vpc:``) is on the team's network and its rules: gpufleet makes none there.
"""

import ipaddress
import json
import re

import pytest

from gpufleet import stacks
from gpufleet.engine import plan as planner
from gpufleet.monitoring.ports import monitor_ports
from tests.unit.test_plan_invariants import _args_class, unknown_keys

pytest.importorskip("pulumi")

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFjtZCMk8DLg9Gw3q44fZDXDQHKWHrf7Wb55hmdcfA0A x"
POOL = {"aws": "{provider: aws, region: us-east-1, instance_type: g5.xlarge}",
        "gcp": "{provider: gcp, region: us-central1, instance_type: g2-standard-4}",
        "azure": "{provider: azure, region: eastus, instance_type: Standard_NC4as_T4_v3}"}
INSIDE = "10.64.3.7"  # an address of the cluster's network (network.cidr: 10.64.0.0/16, the default)
OUTSIDE = ("10.200.0.9",  # a peered network's, another of the default network's, a VPN's
           "198.51.100.7")  # the Internet's


@pytest.fixture(scope="module", params=sorted(POOL))
def plan(request, tmp_path_factory):
    from gpufleet import catalog

    cat = catalog.load(use_config=False)
    path = tmp_path_factory.mktemp("mon") / "stack.yaml"
    path.write_text(f"name: m\nowner: o\naccess: {{public_key: \"{KEY}\", ssh_cidrs: [198.51.100.0/24]}}\n"
                    f"monitoring: {{prometheus: true, host: mon}}\n"
                    f"pools:\n  - {{name: mon, nodes: 1, {POOL[request.param][1:]}\n")
    return request.param, planner.plan(stacks.load(path, cat), cat, workers=1)


def _by_type(p, typ):
    return [r for r in p.cloud_resources if r.type == typ]


def _in(addr: str, src: str) -> bool:
    return src in ("*", "Internet", "0.0.0.0/0") or (
        "/" in src and ipaddress.ip_address(addr) in ipaddress.ip_network(src))


def aws_admits(p, addr: str, port: int) -> bool:
    """Only allow rules: admitted where one matches; a rule naming a group admits that group's members, which an
    address outside the cluster's network is not."""
    for r in _by_type(p, "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"):
        i = r.inputs
        ports = i["ipProtocol"] == "-1" or (i["ipProtocol"] == "tcp" and i["fromPort"] <= port <= i["toPort"])
        if ports and (("cidrIpv4" in i and _in(addr, i["cidrIpv4"])) or
                      (i.get("referencedSecurityGroupId") and _in(addr, "10.64.0.0/16"))):
            return True
    return False


def gcp_admits(p, addr: str, port: int) -> bool:
    rules = [{"priority": 65535, "src": "0.0.0.0/0", "allow": False, "ports": None}]
    for r in _by_type(p, "gcp:compute/firewall:Firewall"):
        i = r.inputs
        if i.get("direction", "INGRESS") != "INGRESS":
            continue
        for key, allow in (("allows", True), ("denies", False)):
            for a in i.get(key) or []:
                ports = None if a["protocol"] == "all" else [int(x) for x in a.get("ports", [])] or None
                if a["protocol"] in ("all", "tcp"):
                    rules += [{"priority": int(i.get("priority", 1000)), "src": s, "allow": allow, "ports": ports}
                              for s in i.get("sourceRanges", [])]
    hits = [r for r in rules if _in(addr, r["src"]) and (r["ports"] is None or port in r["ports"])]
    return min(hits, key=lambda r: (r["priority"], r["allow"]))["allow"]


def _azure_in(addr: str, src: str) -> bool:
    """A source as an NSG reads it: the service tags Internet (public addresses) and VirtualNetwork (here: every
    private address, as peering and gateways can make it), else a prefix."""
    if src == "Internet":
        return not ipaddress.ip_address(addr).is_private
    return _in(addr, "10.0.0.0/8" if src == "VirtualNetwork" else src)


def azure_admits(p, addr: str, port: int) -> bool:
    rules = [{"priority": 65000, "src": "VirtualNetwork", "allow": True, "ports": ["*"]},
             {"priority": 65500, "src": "*", "allow": False, "ports": ["*"]}]
    for nsg in _by_type(p, "azure-native:network:NetworkSecurityGroup"):
        rules += [{"priority": int(x["priority"]), "src": x.get("sourceAddressPrefix") or "*",
                   "allow": x["access"] == "Allow",
                   "ports": x.get("destinationPortRanges") or [x.get("destinationPortRange", "*")]}
                  for x in nsg.inputs["securityRules"] if x["direction"] == "Inbound" and x["protocol"] in ("*", "Tcp")]
    hits = [r for r in rules if _azure_in(addr, r["src"]) and ("*" in r["ports"] or str(port) in r["ports"])]
    return min(hits, key=lambda r: r["priority"])["allow"]


def admits(cloud: str, p, addr: str, port: int) -> bool:
    if cloud == "aws":
        return aws_admits(p, addr, port)
    if cloud == "gcp":
        return gcp_admits(p, addr, port)
    return azure_admits(p, addr, port)


def test_the_monitors_ports_answer_the_clusters_network_only(plan):
    cloud, p = plan
    # every key a rule has is one the SDK's typed args know (a misspelt one is dropped by the mocks)
    assert not [k for r in p.cloud_resources if ":gpufleet:" not in r.type
                for k in unknown_keys(r.inputs, _args_class(r.type), "")]
    assert sorted(monitor_ports()) == [3000, 9090, 9093]
    for port in monitor_ports():
        assert admits(cloud, p, INSIDE, port), (cloud, port)
        for addr in OUTSIDE:
            assert not admits(cloud, p, addr, port), (cloud, addr, port)


def test_the_monitors_identity_may_list_the_clusters_nodes_and_nothing_more(plan):
    """Root on the monitor's node lists the cluster's nodes with the node's identity (clouds/node_targets.py): its
    pool's identity, and no other, gets exactly the listing's named actions, on every cloud."""
    from gpufleet.clouds.aws import monitoring as aws
    from gpufleet.clouds.azure import monitoring as azure
    from gpufleet.clouds.gcp import monitoring as gcp

    cloud, p = plan
    if cloud == "aws":
        (r,) = [r for r in _by_type(p, "aws:iam/rolePolicy:RolePolicy") if r.inputs["name"] == "gpufleet-prometheus-discovery"]
        assert json.loads(r.inputs["policy"])["Statement"][0]["Action"] == list(aws.DISCOVERY_ACTIONS)
        assert r.parent.endswith("m-mon")
    elif cloud == "gcp":
        (role,) = _by_type(p, "gcp:projects/iAMCustomRole:IAMCustomRole")
        assert role.inputs["permissions"] == list(gcp.DISCOVERY_PERMISSIONS) == ["compute.instances.list"]
        (member,) = _by_type(p, "gcp:projects/iAMMember:IAMMember")
        (sa,) = _by_type(p, "gcp:serviceaccount/account:Account")
        assert member.parent == sa.parent == role.parent and member.inputs["member"].startswith("serviceAccount:")
        assert re.fullmatch(r"[a-zA-Z0-9_.]{3,64}", role.inputs["roleId"])  # IAM's custom role id format
    else:
        (role,) = [r for r in _by_type(p, "azure-native:authorization:RoleDefinition") if "discovery" in r.name]
        (perm,) = role.inputs["permissions"]
        assert perm["actions"] == list(azure.DISCOVERY_ACTIONS) and not perm.get("dataActions")
        (grant,) = [r for r in _by_type(p, "azure-native:authorization:RoleAssignment") if r.name.endswith("-discovery")]
        assert grant.inputs["scope"] == role.inputs["scope"] and "/resourceGroups/" in grant.inputs["scope"]


def test_the_azure_role_names_are_unique_in_the_tenant(write, monkeypatch):
    """Two subscriptions of one tenant (dev and prod) each bring up a cluster "train" with a monitor pool "mon": a
    custom role's roleName "must be unique at the scope of the Microsoft Entra directory" ("Custom role properties",
    learn.microsoft.com/azure/role-based-access-control/custom-roles, read 2026-11-27), else the second `up` fails
    with RoleDefinitionWithSameNameExists. The monitor's role and the region's node role differ by subscription
    (rev53c finding 4)."""
    from gpufleet import catalog
    from gpufleet.clouds.azure import credentials as az_creds

    cat = catalog.load(use_config=False)
    path = write("s.yaml", "name: train\nowner: o\naccess: {public_key: \"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFjtZCMk8DLg"
                           "9Gw3q44fZDXDQHKWHrf7Wb55hmdcfA0A x\"}\nmonitoring: {prometheus: true, host: mon}\npools:\n"
                           "  - {name: mon, provider: azure, region: eastus, instance_type: Standard_NC4as_T4_v3, "
                           "nodes: 1}\n")
    names = []
    for sub in ("11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222"):
        monkeypatch.setattr(az_creds, "PLAN_SUBSCRIPTION", sub)
        p = planner.plan(stacks.load(path, cat), cat, workers=1)
        roles = _by_type(p, "azure-native:authorization:RoleDefinition")
        assert {r.inputs["roleName"].split()[1] for r in roles} == {"monitor", "node"}
        assert all(sub in r.inputs["scope"] for r in roles)  # the plan really is the subscription's
        names += [r.inputs["roleName"] for r in roles]
    assert len(set(names)) == 4, names

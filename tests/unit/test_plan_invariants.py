"""What every plan must hold before it meets a real cloud, checked on every example stack and on a
generated one that pushes names to their limits (40-character cluster and pool names in the
longest region name of each cloud), under Pulumi's mock runtime:

* every nested input key exists in the SDK's typed ``*Args`` (a misspelt key is silently
  dropped by the mocks and refused, or ignored, by the real provider);
* every name is legal for its cloud and resource type (``clouds/<cloud>/rules.NAME_RULES``),
  explicit or Pulumi's auto-name (logical name + 8);
* every pool exports its node ids, private IPs and an SSH endpoint;
* every file system is reachable from the nodes on its ports.

And the capacity tables: every size a file system is created with is one its service sells.
"""

import collections.abc
import dataclasses
import importlib
import ipaddress
import json
import re
import sys
import typing

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet import stacks
from gpufleet.clouds.aws.rules import STORAGE as AWS_STORAGE
from gpufleet.clouds.azure.rules import STORAGE as AZURE_STORAGE
from gpufleet.clouds.gcp.rules import STORAGE as GCP_STORAGE
from gpufleet.clouds.pools import AUTONAME_SUFFIX
from gpufleet.engine import plan as planner

from conftest import EXAMPLES, reserved_plan

pulumi = pytest.importorskip("pulumi")

PACKAGES = {"aws": "pulumi_aws", "gcp": "pulumi_gcp", "azure-native": "pulumi_azure_native"}
CLOUD_OF = {"aws": "aws", "gcp": "gcp", "azure-native": "azure"}
# the longest region name of each cloud (its public region lists, 2026), where the catalog has none that long
LONGEST = {"gcp": ("northamerica-northeast2", ("northamerica-northeast2-a",)),
           "azure": ("germanywestcentral", ("1", "2", "3")), "aws": ("ap-southeast-5", ("ap-southeast-5a",))}
PRICED_IN = {"gcp": "us-central1", "azure": "eastus", "aws": "us-east-1"}
CLUSTER = "c" * 20 + "-" + "d" * 19  # 40 characters, the most a stack allows
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeFakeFakeFakeFakeFakeFakeFakeFakeFakeFake test"
LONG_STACK = f"""name: {CLUSTER}
owner: o
access: {{public_key: "{KEY}"}}
pools:
  - {{name: {"g" * 40}, provider: gcp, region: {LONGEST["gcp"][0]}, instance_type: a3-highgpu-8g, nodes: 2,
     storage: [{{type: lustre, capacity_tib: 9, throughput_mbps_per_tib: 1000, mount: /l}},
               {{type: nfs, capacity_tib: 11, mount: /n}}]}}
  - {{name: {"z" * 40}, provider: azure, region: {LONGEST["azure"][0]}, instance_type: Standard_ND96isr_H100_v5,
     nodes: 2, public_ip: true, storage: [{{type: lustre, capacity_tib: 10, throughput_mbps_per_tib: 250, mount: /l}}]}}
  - {{name: {"a" * 40}, provider: aws, region: {LONGEST["aws"][0]}, instance_type: p5.48xlarge, nodes: 2,
     storage: [{{type: lustre, capacity_tib: 5, mount: /l}}, {{type: lustre, capacity_tib: 1, mount: /m}}]}}
"""


# a pool of each cloud placed at a reservation it holds (what failover's first attempt deploys)
# a cloud monitor (no example has one: mixed.yaml's pools span clouds, which one monitor cannot reach)
MONITORED_STACK = f"""name: watched
owner: o
access: {{public_key: "{KEY}"}}
monitoring: {{prometheus: true, host: mon}}
pools:
  - {{name: mon, provider: aws, region: us-east-1, instance_type: g5.xlarge, nodes: 1}}
  - {{name: gpu, provider: aws, region: us-east-1, instance_type: p4d.24xlarge, nodes: 2}}
"""

RESERVED_STACK = """\
name: reserved
owner: ops@example.com
access: {public_key: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFjtZCMk8DLg9Gw3q44fZDXDQHKWHrf7Wb55hmdcfA0A x"}
pools:
  - {name: odcr, provider: aws, region: us-east-1, instance_type: p5.48xlarge, nodes: 2,
     reservations: [{id: cr-0123456789abcdef0, zone: us-east-1a}]}
  - name: block
    provider: aws
    region: us-east-1
    instance_type: p5.48xlarge
    nodes: 2
    reservations:
      - id: cr-0fedcba9876543210
        zone: us-east-1b
        capacity_block: {starts_at: 2026-01-01T00:00:00Z, ends_at: 2099-01-01T00:00:00Z, upfront_usd: 50000}
  - {name: gres, provider: gcp, region: us-central1, instance_type: a3-highgpu-8g, nodes: 2,
     reservations: [{id: h100-reservation, zone: us-central1-a}]}
  - {name: crg, provider: azure, region: eastus, instance_type: Standard_NC96ads_A100_v4, nodes: 2,
     reservations: [{id: "%s", zone: "1"}]}
""" % ("/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg/providers/Microsoft.Compute/"
       "capacityReservationGroups/h100")
FLEX_STACK = """\
name: flex
owner: ops@example.com
pools:
  - {name: a3, provider: gcp, region: us-central1, instance_type: a3-highgpu-8g, nodes: 4, public_ip: true,
     flex_start: {run_hours: 72}}
  - {name: t4, provider: gcp, region: us-central1, instance_type: n1-standard-8+1xT4, nodes: 2}
"""
CHECKED = [p.stem for p in EXAMPLES] + ["generated-long-names", "placed-at-reservations", "flex-start"]


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    from gpufleet import catalog

    cat = catalog.load(use_config=False)
    out = {p.stem: planner.plan(stacks.load(p, cat), cat, workers=1) for p in EXAMPLES}
    for provider, (region, zones) in LONGEST.items():  # the long regions, priced as the catalog's first
        cat.regions[provider][region] = "test"
        cat.zones[(provider, region)] = zones
    cat.prices.extend(dataclasses.replace(x, region=LONGEST[x.provider][0]) for x in list(cat.prices)
                      if PRICED_IN.get(x.provider) == x.region)
    cat.reset_offers()
    path = tmp_path_factory.mktemp("long") / "long.yaml"
    path.write_text(LONG_STACK)
    out["generated-long-names"] = planner.plan(stacks.load(path, cat), cat, workers=1)
    path = tmp_path_factory.mktemp("reserved") / "reserved.yaml"
    path.write_text(RESERVED_STACK)
    out["placed-at-reservations"] = reserved_plan(stacks.load(path, cat), cat)
    path = tmp_path_factory.mktemp("flex") / "flex.yaml"
    path.write_text(FLEX_STACK)
    out["flex-start"] = planner.plan(stacks.load(path, cat), cat, workers=1)
    path = tmp_path_factory.mktemp("monitored") / "watched.yaml"
    path.write_text(MONITORED_STACK)
    out["aws-monitor"] = planner.plan(stacks.load(path, cat), cat, workers=1)
    return out


def _resource_class(typ: str):
    pkg, mod, cls = typ.split(":")
    return getattr(importlib.import_module(f"{PACKAGES[pkg]}.{mod.split('/')[0]}"), cls)


def _args_class(typ: str):
    """The resource's own typed arguments (``<Name>InitArgs`` where a nested input type took ``<Name>Args``)."""
    cls = _resource_class(typ)
    module = sys.modules[cls.__module__]
    return getattr(module, cls.__name__ + "InitArgs", None) or getattr(module, cls.__name__ + "Args")


def _fields(input_type) -> dict:
    # Pulumi's own reading of a typed *Args class: {pulumi (camelCase) name: type}
    from pulumi._types import _types_from_py_properties

    return _types_from_py_properties(input_type)


def _unwrap(t):
    """Input[X] is Union[X, Awaitable[X], Output[X]]: X."""
    if typing.get_origin(t) is typing.Union:
        plain = [a for a in typing.get_args(t) if typing.get_origin(a) not in (collections.abc.Awaitable, pulumi.Output)
                 and a is not type(None)]
        return plain[0] if len(plain) == 1 else t
    return t


def unknown_keys(value, typ, path: str) -> list[str]:
    typ = _unwrap(typ)
    if isinstance(typ, type) and getattr(typ, "_pulumi_input_type", False):
        if not isinstance(value, dict):
            return []
        fields = _fields(typ)
        out = []
        for k, v in value.items():
            out += [f"{path}.{k}"] if k not in fields else unknown_keys(v, fields[k], f"{path}.{k}")
        return out
    if typing.get_origin(typ) in (list, collections.abc.Sequence) and isinstance(value, list):
        (elem,) = typing.get_args(typ)
        return [k for i, v in enumerate(value) for k in unknown_keys(v, elem, f"{path}[{i}]")]
    return []  # scalars, and maps whose keys are the user's (tags, labels, metadata)


BULK = "gcp:gpufleet:BulkInstances"  # a GCP pool's VMs (clouds.gcp.pool_vms): the Compute API's own types check them


def _names(p) -> list[tuple[str, str, str, object]]:
    """(type, logical name, name, rule) of every resource with a name rule in its cloud."""
    out = []
    for r in p.cloud_resources:
        rules = importlib.import_module(f"gpufleet.clouds.{CLOUD_OF[r.type.split(':')[0]]}.rules")
        if r.type == BULK:  # the VMs' names, and their placement policies'
            out += [(r.type, r.name, n, rules.NAME_DEFAULT) for n in r.inputs["names"]]
            out += [(r.type, r.name, x["name"], rules.NAME_DEFAULT) for x in r.inputs["policies"]]
        if ":gpufleet:" in r.type:
            continue
        for key in (r.type, r.type + "#host"):
            rule = rules.NAME_RULES.get(key, rules.NAME_DEFAULT if key == r.type else None)
            if rule is None:
                continue
            if rule.key is None:
                out.append((r.type, r.name, r.name + "-" + "x" * (AUTONAME_SUFFIX - 1), rule))
            else:
                value = r.inputs
                for part in rule.key.split("."):
                    value = (value or {}).get(part)
                out.append((r.type, r.name, value, rule))
    return out


@pytest.mark.parametrize("name", CHECKED)
def test_every_input_key_is_one_the_sdk_knows(plans, name):
    bad = []
    for r in plans[name].cloud_resources:
        if ":gpufleet:" not in r.type:
            bad += [f"{r.type} {r.name}: {k}" for k in unknown_keys(r.inputs, _args_class(r.type), "")]
    assert not bad, bad


@pytest.mark.parametrize("name", CHECKED)
def test_every_bulk_insert_is_one_the_compute_api_takes(plans, name):
    """Each bulkInsert a GCP pool makes, and each placement policy made with it, parsed by
    google-cloud-compute's own message types, which refuse a key the Compute API does not have;
    all or nothing: minCount = count = its VMs."""
    from google.cloud import compute_v1
    from google.protobuf.json_format import ParseError

    from gpufleet.clouds.gcp import pool_vms as nodes

    for r in (r for r in plans[name].cloud_resources if r.type == BULK):
        for names, policy in nodes.groups(r.inputs["names"], r.inputs["policies"]):
            body = nodes.request(names, r.inputs["properties"], policy)
            try:
                parsed = compute_v1.BulkInsertInstanceResource.from_json(json.dumps(body), ignore_unknown_fields=False)
            except ParseError as e:
                raise AssertionError(f"{r.name}: {e}") from None
            assert parsed.min_count == parsed.count == len(names) == len(parsed.per_instance_properties)
        for policy in r.inputs["policies"]:
            try:
                compute_v1.ResourcePolicy.from_json(json.dumps(policy), ignore_unknown_fields=False)
            except ParseError as e:
                raise AssertionError(f"{r.name}: {e}") from None


def test_a_misspelt_bulk_insert_key_is_caught():
    """The check above can fail: google-cloud-compute refuses a key the API does not have."""
    from google.cloud import compute_v1
    from google.protobuf.json_format import ParseError

    with pytest.raises(ParseError):
        compute_v1.BulkInsertInstanceResource.from_json(json.dumps(
            {"count": "1", "instanceProperties": {"disks": [{"initializeParams": {"lables": {}}}]}}),
            ignore_unknown_fields=False)


def test_a_misspelt_nested_key_is_caught():
    """The check above can fail: an unknown key one level down in a typed input."""
    inputs = {"bootDisk": {"initializeParams": {"image": "x", "lables": {}}}, "machineType": "n1-standard-8"}
    assert unknown_keys(inputs, _args_class("gcp:compute/instance:Instance"), "") == [".bootDisk.initializeParams.lables"]


@pytest.mark.parametrize("name", CHECKED)
def test_every_name_is_legal_for_its_cloud(plans, name):
    names = _names(plans[name])
    assert names or name.startswith(("baremetal", "local")), name
    for typ, logical, value, rule in names:
        assert isinstance(value, str), f"{typ} {logical}: no {rule.key} ({rule.source})"
        assert len(value) <= rule.limit and re.match(rule.pattern, value), \
            f"{typ} {logical}: {value!r} ({len(value)} characters) breaks {rule.source}"


def test_gcp_labels_and_network_tags_are_legal(plans):
    label = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
    for p in plans.values():
        for r in p.cloud_resources:
            if not r.type.startswith("gcp:"):
                continue
            props = r.inputs.get("properties") or {}  # a pool's VMs (BULK)
            for k, v in (r.inputs.get("labels") or props.get("labels") or {}).items():
                assert label.match(k) and re.match(r"^[a-z0-9_-]{0,63}$", v), (r.name, k, v)
            for tag in r.inputs.get("tags") or (props.get("tags") or {}).get("items") or []:
                assert len(tag) <= 63 and re.match(r"^[a-z]([-a-z0-9]*[a-z0-9])?$", tag), (r.name, tag)


@pytest.mark.parametrize("name", CHECKED)
def test_every_pool_exports_node_ids_private_ips_and_an_ssh_endpoint(plans, name):
    p = plans[name]
    for pool, out in (p.outputs.get("pools") or {}).items():
        n = out["nodes"]
        assert len(out["node_ids"]) == n and all(out["node_ids"]) and len(set(out["node_ids"])) == n, (pool, out)
        assert len(out["private_ips"]) == n and all(ipaddress.ip_address(ip).is_private for ip in out["private_ips"])
        first = (out["public_ips"] or out["private_ips"])[0]
        assert out["ssh_endpoint"] == f"{first}:22", (pool, out)


def _by_type(p, typ):
    return [r for r in p.cloud_resources if r.type == typ]


def test_every_file_system_is_reachable_from_its_nodes(plans):
    seen = collections.Counter()
    for p in plans.values():
        # FSx: in the nodes' security group, which admits all traffic from itself (TCP 988, 1018-1023)
        self_in = {r.inputs["securityGroupId"] for r in
                   _by_type(p, "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
                   if r.inputs.get("referencedSecurityGroupId") == r.inputs["securityGroupId"]
                   and r.inputs["ipProtocol"] == "-1"}
        for fs in _by_type(p, "aws:fsx/lustreFileSystem:LustreFileSystem"):
            assert fs.inputs.get("securityGroupIds") and set(fs.inputs["securityGroupIds"]) <= self_in, fs.name
            seen["fsx"] += 1
        # GCP Managed Lustre: on the VPC, peered through private services access, TCP 988 admitted from it
        addresses = _by_type(p, "gcp:compute/globalAddress:GlobalAddress")
        for fs in _by_type(p, "gcp:lustre/instance:Instance"):
            (conn,) = [c for c in _by_type(p, "gcp:servicenetworking/connection:Connection")
                       if c.inputs["network"] == fs.inputs["network"]]
            (addr,) = [a for a in addresses if a.inputs["name"] in conn.inputs["reservedPeeringRanges"]]
            rules = [f for f in _by_type(p, "gcp:compute/firewall:Firewall") if f.inputs["network"] == fs.inputs["network"]
                     and {"protocol": "tcp", "ports": ["988"]} in f.inputs["allows"]]
            assert any(s.endswith(f"/{int(addr.inputs['prefixLength'])}") for f in rules for s in f.inputs["sourceRanges"])
            seen["gcp-lustre"] += 1
        # Filestore: on the network whose firewall admits all traffic inside the cluster
        internal = {f.inputs["network"] for f in _by_type(p, "gcp:compute/firewall:Firewall")
                    if f.inputs["allows"] == [{"protocol": "all"}] and f.inputs["sourceRanges"] == ["10.64.0.0/16"]}
        for fs in _by_type(p, "gcp:filestore/instance:Instance"):
            assert fs.inputs["networks"][0]["network"] in internal, fs.name
            seen["filestore"] += 1
        # AMLFS: a subnet of the scale set's VNet (VNet traffic is allowed by default) in the scale set's zone
        subnets = {r.name: r for r in _by_type(p, "azure-native:network:Subnet")}
        for fs in _by_type(p, "azure-native:storagecache:AmlFilesystem"):
            vmss = next(r for r in _by_type(p, "azure-native:compute:VirtualMachineScaleSet") if r.parent == fs.parent)
            assert fs.inputs["zones"] == vmss.inputs["zones"], fs.name
            vnets = {s.inputs["virtualNetworkName"] for s in subnets.values()}
            assert len(vnets) == 1 and fs.inputs["filesystemSubnet"], fs.name
            seen["amlfs"] += 1
        for nsg in _by_type(p, "azure-native:network:NetworkSecurityGroup"):
            denies = [r for r in nsg.inputs["securityRules"] if r["access"] == "Deny" and r["direction"] == "Inbound"]
            assert all(r["sourceAddressPrefix"] == "Internet" for r in denies), nsg.name
    assert seen["fsx"] >= 3 and seen["gcp-lustre"] >= 1 and seen["amlfs"] >= 2 and seen["filestore"] >= 1, seen


SERVICES = [("FSx", AWS_STORAGE), ("GCP Managed Lustre", GCP_STORAGE), ("Azure Managed Lustre", AZURE_STORAGE)]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(service=st.sampled_from(SERVICES), tier_index=st.integers(0, 3), tib=st.floats(0.01, 20_000))
def test_every_created_size_is_one_the_service_sells(service, tier_index, tib):
    """Capacities x tiers: the size gpufleet asks for holds the request, is on the service's steps,
    and is the smallest such size; past the tier's maximum there is none (validate refuses)."""
    _, rules = service
    tier = rules.lustre_tiers[tier_index]
    sizes = rules.lustre_sizes[tier]
    size = sizes.fit(tib)
    want = sizes.requested(tib)
    if size is None:
        assert want > sizes.maximum
        return
    assert want <= size <= sizes.maximum
    on_steps = size in sizes.first or (size >= sizes.start and (size - sizes.start) % sizes.step == 0)
    assert on_steps, (tier, tib, size)
    smaller = [s for s in sizes.first if s < size] + ([size - sizes.step] if size - sizes.step >= sizes.start else [])
    assert all(s < want for s in smaller), (tier, tib, size, smaller)


def test_filestore_sizes_follow_its_two_ranges():
    nfs = GCP_STORAGE.nfs_sizes
    assert [nfs.fit(t) for t in (0.5, 1, 1.01, 9.75, 9.76, 10, 10.01, 100)] == \
        [1024, 1024, 1280, 9984, 10240, 10240, 12800, 102400]
    assert nfs.fit(100.1) is None


# ---------------------------------------------------------------- the way in (access.via)

SSM_POLICY = "gpufleet-session-manager"  # the nodes' inline policy for Session Manager (clouds.aws.access)
IAP_RANGE = "35.235.240.0/20"
WORLD = ("0.0.0.0/0", "*", "Internet", "any")


def ssh_open_to_the_world(p) -> list[str]:
    """Every rule of the plan that admits TCP 22 from anywhere (AWS ingress rules, GCP firewalls, Azure
    NSG rules), by name."""
    out = []
    for r in _by_type(p, "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"):
        i = r.inputs
        ports = i.get("ipProtocol") == "-1" or (i.get("ipProtocol") == "tcp" and i["fromPort"] <= 22 <= i["toPort"])
        if ports and i.get("cidrIpv4") == "0.0.0.0/0":
            out.append(r.name)
    for r in _by_type(p, "gcp:compute/firewall:Firewall"):
        ssh = any(a["protocol"] == "all" or (a["protocol"] == "tcp" and "22" in a.get("ports", ["22"]))
                  for a in r.inputs["allows"])
        if ssh and r.inputs.get("direction", "INGRESS") == "INGRESS" and "0.0.0.0/0" in r.inputs.get("sourceRanges", []):
            out.append(r.name)
    for nsg in _by_type(p, "azure-native:network:NetworkSecurityGroup"):
        out += [f"{nsg.name}/{x['name']}" for x in nsg.inputs["securityRules"]
                if x["access"] == "Allow" and x["direction"] == "Inbound" and x["sourceAddressPrefix"] in WORLD
                and x["destinationPortRange"] in ("22", "*")]
    return out


def route_pieces(p) -> dict[str, list[str]]:
    """What each cloud's private route adds to a plan."""
    return {
        "aws": [r.inputs["role"] for r in _by_type(p, "aws:iam/rolePolicy:RolePolicy") if r.inputs["name"] == SSM_POLICY],
        "gcp": [r.name for r in _by_type(p, "gcp:compute/firewall:Firewall") if r.inputs["sourceRanges"] == [IAP_RANGE]],
        "azure": [r.name for r in _by_type(p, "azure-native:network:BastionHost")]}


@pytest.mark.parametrize("name", CHECKED)
def test_every_cloud_has_its_private_route_and_no_rule_opens_ssh_to_the_world(plans, name):
    """The examples take the default, ``via: cloud``: each AWS pool's role gets what Session Manager needs
    (an inline policy) and no managed policy; each GCP network admits IAP's range on TCP 22 only, to the cluster's VMs; each
    Azure region has a Standard Bastion with native client tunnelling in an AzureBastionSubnet with a
    public IP. None consents to SSH from the Internet, and no rule admits it."""
    p = plans[name]
    pieces = route_pieces(p)
    roles = _by_type(p, "aws:iam/role:Role")
    assert len(pieces["aws"]) == len(set(pieces["aws"])) == len(roles), name
    assert not _by_type(p, "aws:iam/rolePolicyAttachment:RolePolicyAttachment"), name
    networks = [r for r in _by_type(p, "gcp:compute/network:Network") if "gpunet" not in r.name]
    iap = [r for r in _by_type(p, "gcp:compute/firewall:Firewall") if r.inputs["sourceRanges"] == [IAP_RANGE]]
    assert len(iap) == len(networks), name
    for r in iap:
        assert r.inputs["allows"] == [{"protocol": "tcp", "ports": ["22"]}] and r.inputs["direction"] == "INGRESS"
        assert len(r.inputs["targetTags"]) == 1 and r.inputs["targetTags"][0] == r.inputs["name"][:-len("-iap")]
    groups = _by_type(p, "azure-native:resources:ResourceGroup")
    bastions = _by_type(p, "azure-native:network:BastionHost")
    assert len(bastions) == len(groups), name
    subnets = {r.name: r for r in _by_type(p, "azure-native:network:Subnet")}
    ips = {r.name for r in _by_type(p, "azure-native:network:PublicIPAddress")}
    for b in bastions:
        assert b.inputs["sku"] == {"name": "Standard"} and b.inputs["enableTunneling"] is True, b.name
        (conf,) = b.inputs["ipConfigurations"]
        sub = subnets[b.name + "-subnet"]
        assert sub.inputs["subnetName"] == "AzureBastionSubnet" and "networkSecurityGroup" not in sub.inputs
        assert ipaddress.ip_network(sub.inputs["addressPrefix"]).prefixlen <= 26 and b.name + "-ip" in ips
        assert conf["subnet"]["id"] and conf["publicIPAddress"]["id"]
    assert ssh_open_to_the_world(p) == [], name


ROUTE_STACK = """\
name: routes
owner: o
access: {{public_key: "{key}", via: {via}, ssh_cidrs: [{cidr}], ssh_from_internet: {consent}}}
pools:
  - {{name: a, provider: aws, region: us-east-1, instance_type: p5.48xlarge, nodes: 1}}
  - {{name: g, provider: gcp, region: us-central1, instance_type: a3-highgpu-8g, nodes: 1}}
  - {{name: z, provider: azure, region: eastus, instance_type: Standard_ND96isr_H100_v5, nodes: 1}}
"""


def _route_plan(tmp_path, **kw):
    from gpufleet import catalog

    cat = catalog.load(use_config=False)
    path = tmp_path / "routes.yaml"
    path.write_text(ROUTE_STACK.format(key=KEY, **kw))
    return planner.plan(stacks.load(path, cat), cat, workers=1)


def test_another_route_creates_none_of_the_clouds_pieces_and_the_world_needs_consent(tmp_path):
    p = _route_plan(tmp_path, via="direct", cidr="198.51.100.0/24", consent="false")
    assert route_pieces(p) == {"aws": [], "gcp": [], "azure": []}  # least privilege: nothing it does not use
    assert ssh_open_to_the_world(p) == []
    # a stack that consents gets the rules it asked for, and the check sees every one of them
    p = _route_plan(tmp_path, via="direct", cidr="0.0.0.0/0", consent="true")
    found = ssh_open_to_the_world(p)
    assert len(found) == 3 and any("sg-ssh" in f for f in found) and any(f.endswith("/ssh-0") for f in found), found


DISCOVERY_POLICY = "gpufleet-prometheus-discovery"  # the monitor pool's role (clouds.aws.monitoring)


def test_only_the_monitor_pools_role_may_list_instances_for_prometheus(plans):
    """MONITORED_STACK puts Prometheus on its AWS pool, whose EC2 discovery calls DescribeInstances: that role,
    and no other of any plan, gets an inline policy with that one action on "*" (DescribeInstances has
    no resource-level permissions: "Actions, resources, and condition keys for Amazon EC2", Service
    Authorization Reference, read 2026-11-27)."""
    found = {name: [r for r in _by_type(p, "aws:iam/rolePolicy:RolePolicy") if r.inputs["name"] == DISCOVERY_POLICY]
             for name, p in plans.items()}
    assert {n for n, rs in found.items() if rs} == {"aws-monitor"}, found
    (r,) = found["aws-monitor"]
    doc = json.loads(r.inputs["policy"])
    assert doc["Statement"] == [{"Sid": "PrometheusEc2Discovery", "Effect": "Allow",
                                 "Action": ["ec2:DescribeInstances"], "Resource": "*"}]

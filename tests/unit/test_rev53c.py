"""Review rev53c of merge b976113 (a cloud monitor's targets as file_sd written by root, clouds/node_targets.py): each
test here fails on that merge and names the real behaviour it holds the code to.

Sources (read 2026-11-27):
* Prometheus 2.42 file_sd_config: a file nobody writes is no target at all -- no series, so no ``up == 0`` and no
  "node down" (prometheus.io/docs/prometheus/2.42/configuration/configuration/#file_sd_config);
* AWS: a VPC is regional and gpufleet makes no peering or transit gateway between its regions' VPCs (grep of
  infra/clouds/aws), so a private address of another region's VPC does not answer the monitor;
* boto3/botocore "Service-specific endpoints": ``AWS_ENDPOINT_URL_S3`` is S3's endpoint alone; EC2's stays
  ``https://ec2.<region>.amazonaws.com`` (docs.aws.amazon.com/sdkref/latest/guide/feature-ss-endpoints.html);
* Azure "Azure custom roles", "Custom role properties": ``roleName`` "must be unique at the scope of the Microsoft
  Entra directory" -- one tenant, every subscription in it (learn.microsoft.com/azure/role-based-access-control/
  custom-roles).
"""

import json
import os

import pytest

from gpufleet import catalog, stacks
from gpufleet.clouds import node_agent, node_targets
from gpufleet.configure import pillar
from gpufleet.errors import GpufleetError

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFjtZCMk8DLg9Gw3q44fZDXDQHKWHrf7Wb55hmdcfA0A x"
RACK = "{name: mon, provider: baremetal, site: lab, gpu: L4, gpus_per_node: 1, hosts: [{address: 10.0.9.1}]}"
AWS_MON = "{name: mon, provider: aws, region: us-east-1, instance_type: g5.xlarge, nodes: 1}"
AZ_MON = "{name: mon, provider: azure, region: eastus, instance_type: Standard_NC4as_T4_v3, nodes: 1}"


@pytest.fixture(scope="module")
def cat():
    return catalog.load(use_config=False)


def _listed_and_reachable(stack, discovery, pool) -> bool:
    """Whether root on the monitor's node lists ``pool``'s nodes (what it writes into the file_sd files), at
    addresses inside the monitor's own network."""
    mon = stack.monitor_pool()
    if discovery is None or pool.provider != mon.provider or pool.name not in discovery["pools"]:
        return False
    if pool.provider == "aws":  # a regional VPC each, nothing joins them
        return pool.region == mon.region and pool.region in discovery["aws"]["regions"]
    if pool.provider == "azure":  # the lister asks each scale set it names, and no other
        return pool.name in {s["pool"] for s in discovery["azure"]["scale_sets"]}
    return True  # a GCP VPC spans its regions


@pytest.mark.parametrize("mon,gpu", [
    (AWS_MON, "{name: gpu, provider: gcp, region: us-central1, instance_type: g2-standard-4, nodes: 2}"),
    (RACK, "{name: gpu, provider: aws, region: us-east-1, instance_type: p4d.24xlarge, nodes: 2}"),
    (AWS_MON, "{name: gpu, provider: aws, region: us-west-2, instance_type: p4d.24xlarge, nodes: 2}"),
    (AZ_MON, "{name: gpu, provider: azure, region: westus2, instance_type: Standard_NC4as_T4_v3, nodes: 2}"),
], ids=["aws-monitor-gcp-pool", "rack-monitor-aws-pool", "aws-other-region", "azure-other-region"])
def test_every_scraped_pool_is_listed_where_the_monitor_reaches_it_or_the_stack_is_refused(
        write, cat, monkeypatch, mon, gpu):
    """prometheus.yml names the pool's file_sd files (scrape.scrape_config), but the monitor lists only its own
    cloud's pools (scrape.discovery), only its own region's scale sets on Azure (azure/monitoring.monitor_discovery),
    every region on AWS (whose other VPCs it cannot reach), and nothing on a rack: the pool is then never scraped, or
    scraped at addresses that never answer (every node "down"), and nothing says so. Either list it where it answers
    or refuse the stack at ``monitoring.host`` with a suggestion."""
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "p1")
    monkeypatch.setenv("ARM_SUBSCRIPTION_ID", "11111111-1111-1111-1111-111111111111")
    path = write("s.yaml", f"name: c1\nowner: o\naccess: {{public_key: \"{KEY}\"}}\n"
                           f"monitoring: {{prometheus: true, host: mon}}\npools:\n  - {mon}\n  - {gpu}\n")
    try:
        stack = stacks.load(path, cat)
    except GpufleetError as e:  # refused: the fix may take this way
        assert "monitoring" in str(e)
        return
    pil = pillar.monitor_pillar(stack, "c1")
    gpu_pool = next(p for p in stack.pools if p.name == "gpu")
    assert node_targets.DIR in pil["prometheus_yml"]  # Prometheus waits on the files for it...
    assert _listed_and_reachable(stack, pil["discovery"], gpu_pool), (
        f"pool gpu is scraped from files the monitor never fills with it: discovery={json.dumps(pil['discovery'])}")


def test_nodes_left_out_of_the_targets_are_said_somewhere(tmp_path, monkeypatch, capsys):
    """node_targets prints each node it leaves out (a public address, a name outside its format) and exits 0; the
    agent (list_targets) shows the lister's output only when it exits non-zero, so what the module's docstring
    promises ("left out, and said") reaches no log: a node never scraped, and no line anywhere says why."""
    stand_in = tmp_path / "node_targets.py"
    stand_in.write_text("print(\"left out of the scrape targets: 'i-0abc' of pool 'gpu' at '203.0.113.9'\")\n")
    monkeypatch.setattr(node_agent, "STATE_DIR", str(tmp_path))
    monkeypatch.setattr(node_agent, "TARGETS_HOME", str(stand_in))
    d = {"cluster": "c1", "pools": ["gpu"], "ports": [9100], "aws": {"regions": ["us-east-1"]}}
    (tmp_path / "applied.json").write_text(json.dumps({"generation": "g1", "ok": True, "discovery": d}))
    node_agent.list_targets({"cloud": "aws", "bucket": "b", "region": "us-east-1"})
    assert "203.0.113.9" in capsys.readouterr().out


def test_the_monitors_azure_role_name_is_unique_in_the_tenant(write, cat, monkeypatch):
    """Two subscriptions of one tenant (dev and prod) each bring up a cluster named "train" with a monitor pool
    "mon": the monitor's custom role is "gpufleet monitor train mon" in both, and Azure refuses the second
    (RoleDefinitionWithSameNameExists: a custom role's name is unique in the directory). Its id (uuid5 of subscription,
    cluster, pool) differs; its name must too. (The region's node role, "gpufleet node <cluster> <region>", has the
    same flaw; it predates this merge.)"""
    pytest.importorskip("pulumi")
    from gpufleet.clouds.azure import credentials as az_creds
    from gpufleet.engine import plan as planner

    path = write("s.yaml", f"name: train\nowner: o\naccess: {{public_key: \"{KEY}\"}}\n"
                           f"monitoring: {{prometheus: true, host: mon}}\npools:\n  - {AZ_MON}\n")
    names = {}
    for sub in ("11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222"):
        monkeypatch.setattr(az_creds, "PLAN_SUBSCRIPTION", sub)
        p = planner.plan(stacks.load(path, cat), cat, workers=1)
        (role,) = [r for r in p.cloud_resources if r.type == "azure-native:authorization:RoleDefinition"
                   and "monitor" in r.inputs.get("roleName", "")]
        assert sub in role.inputs["scope"]  # the plan really is the subscription's
        names[sub] = role.inputs["roleName"]
    assert len(set(names.values())) == 2, names


def test_the_lister_leaves_no_part_file_when_it_cannot_write(tmp_path, monkeypatch):
    """node_targets.write opens ``<file>.<pid>`` and renames it over the file: a write that fails midway (a full disk)
    keeps the last good file, but leaves the part file behind, a new one each failing run (the pid changes), and
    run() lets the OSError out as a traceback (it catches only the listing's errors)."""
    out = tmp_path / "t"
    node_targets.write([("gpu", "i-0aaa", "10.64.0.2")], [9100], str(out))
    before = (out / "9100.json").read_text()
    monkeypatch.setattr(node_targets.json, "dump", lambda *a, **k: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError):
        node_targets.write([("gpu", "i-0bbb", "10.64.0.3")], [9100], str(out))
    assert (out / "9100.json").read_text() == before
    assert sorted(os.listdir(out)) == ["9100.json"]


def _ec2_page(instances, token=None) -> bytes:
    """DescribeInstances' answer in the shape botocore 1.44.8's ec2 model gives (DescribeInstancesResult: reservationSet
    > item > instancesSet > item, each with instanceId, privateIpAddress and tagSet; nextToken beside reservationSet)."""
    items = "".join(f"<item><instanceId>{i}</instanceId><privateIpAddress>{a}</privateIpAddress><tagSet><item>"
                    f"<key>gpufleet:pool</key><value>gpu</value></item></tagSet></item>" for i, a in instances)
    nxt = f"<nextToken>{token}</nextToken>" if token else ""
    return (f'<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>r</requestId>'
            f"<reservationSet><item><reservationId>r-1</reservationId><instancesSet>{items}</instancesSet></item>"
            f"</reservationSet>{nxt}</DescribeInstancesResponse>").encode()


def test_ec2_pages_are_followed_with_the_token_ec2_gave(monkeypatch, tmp_path):
    """Checked and found right (a guard: moto's three instances never page): NextToken goes back as sent, the query
    keeps MaxResults with the filters (allowed: MaxResults excludes only InstanceIds, botocore 1.44.8 ec2 model)."""
    import urllib.parse

    asked = []
    token = "eyJ2IjoiMiJ9/a+b="  # a token's characters that need encoding

    def http(method, url, headers=None, body=None, timeout=30):
        q = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))
        asked.append(q)
        if "NextToken" not in q:
            return 200, {}, _ec2_page([("i-0aaa", "10.64.0.2")], token)
        return 200, {}, _ec2_page([("i-0bbb", "10.64.0.3")])

    monkeypatch.setattr(node_agent, "http", http)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    d = {"cluster": "c1", "pools": ["gpu"], "ports": [9100], "aws": {"regions": ["us-east-1"]}}
    assert node_targets.run({"cloud": "aws", "bucket": "b", "region": "us-east-1"}, d, out_dir=str(tmp_path)) == 0
    assert [q.get("NextToken") for q in asked] == [None, token] and all(q["MaxResults"] == "1000" for q in asked)
    got = json.loads((tmp_path / "9100.json").read_text())
    assert [g["targets"] for g in got] == [["10.64.0.2:9100"], ["10.64.0.3:9100"]]


def test_the_describe_instances_query_is_signed_as_botocores_signer_signs_it():
    """Checked and found right (a guard): the agent's SigV4 over the lister's query (filters, a value with a space, a
    NextToken with / + =) gives botocore 1.44.8's SigV4Auth signature for service ec2."""
    import datetime as dt
    import urllib.parse

    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    q = [("Action", "DescribeInstances"), ("Version", node_targets.EC2_VERSION), ("MaxResults", "1000"),
         ("Filter.1.Name", "tag:gpufleet:cluster"), ("Filter.1.Value.1", "c1 x"), ("NextToken", "eyJ2/a+b=")]
    url = "https://ec2.us-east-1.amazonaws.com/?" + urllib.parse.urlencode(q, quote_via=urllib.parse.quote)
    empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"  # SHA-256 of no body
    req = AWSRequest(method="GET", url=url, headers={"x-amz-content-sha256": empty})
    SigV4Auth(Credentials("AKID", "s", "T"), "ec2", "us-east-1").add_auth(req)
    now = dt.datetime.strptime(req.headers["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.timezone.utc)
    ours = node_agent.sigv4_headers("GET", url, "us-east-1", "ec2", {"key": "AKID", "secret": "s", "token": "T"}, now=now)
    assert ours["authorization"] == req.headers["Authorization"]


@pytest.mark.parametrize("cidr", ["198.18.0.0/16", "240.10.0.0/16"])
def test_a_node_inside_the_stacks_own_network_is_a_target(write, cat, monkeypatch, cidr):
    """The spec takes any network.cidr Python calls private (spec.Network: ``is_private``), and GCP takes these for
    subnets ("Valid IPv4 ranges": 198.18.0.0/15 benchmarking, 240.0.0.0/4 reserved; cloud.google.com/vpc/docs/
    subnets#valid-ranges, read 2026-11-27); node_targets.checked keeps only its fixed PRIVATE blocks (RFC 1918, 6598,
    4193), so every node of such a cluster is left out and the monitor scrapes nothing (and says it nowhere: see the
    test above). The addresses to keep are the cluster's own network's."""
    import ipaddress

    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "p1")
    path = write("s.yaml", f"name: c1\nowner: o\nnetwork: {{cidr: {cidr}}}\nmonitoring: {{prometheus: true, host: mon}}\n"
                           "pools:\n  - {name: mon, provider: gcp, region: us-central1, instance_type: g2-standard-4, "
                           "nodes: 1}\n")
    stack = stacks.load(path, cat)  # accepted
    inside = str(ipaddress.ip_network(stack.network.cidr)[7])
    good, bad = node_targets.checked([("mon", "mon-0", inside)], {"mon"})
    assert good == [("mon", "mon-0", inside)], bad

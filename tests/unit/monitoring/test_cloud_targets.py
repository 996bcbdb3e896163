"""A cloud monitor's scrape targets: root on the monitor's node lists the cluster's running nodes with the monitor's
own identity (clouds/node_targets.py, run by the node agent) and writes them for Prometheus's file_sd; Prometheus,
which runs as its own user and cannot reach the metadata service (the node's guard), reads the files. Checked
against moto's EC2 with IAM enforced (the monitor's policy alone, signed by the agent's SigV4) and Debian's real
Prometheus 2.42 run on loopback, whose /api/v1/targets must list every node with its labels."""

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request

import pytest
import yaml

from gpufleet import catalog, stacks
from gpufleet.clouds import node_targets
from gpufleet.clouds.aws import monitoring as aws_monitoring
from gpufleet.configure import pillar
from gpufleet.monitoring import scrape
from gpufleet.nodes.cloud import channel
from tests.conftest import require

TEMPLATE = """name: c1
owner: o
{head}monitoring: {{prometheus: true, host: mon}}
pools:
  - {{name: mon, {mon}, nodes: 1}}
  - {{name: gpu, {gpu}, nodes: 2}}
"""
STACK = TEMPLATE.format(head="", mon="provider: aws, region: us-east-1, instance_type: g5.xlarge",
                        gpu="provider: aws, region: us-east-1, instance_type: p4d.24xlarge")
KEY = 'access: {public_key: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFjtZCMk8DLg9Gw3q44fZDXDQHKWHrf7Wb55hmdcfA0A x"}\n'


@pytest.fixture(scope="module")
def cat():
    return catalog.load(use_config=False)


@pytest.fixture
def stack(write, cat):
    return stacks.load(write("c1.yaml", STACK), cat)


def _discovery(stack, cat) -> dict:
    """The monitor pool's document as `up` publishes it: what its agent lists and writes."""
    doc = channel.pool_document(stack, stack.monitor_pool(), cluster="c1", cat=cat, tree="0" * 64)
    return doc["discovery"]


def _launch(ec2, pool: str, cluster: str = "c1", count: int = 1) -> list[str]:
    tags = [{"Key": "gpufleet:cluster", "Value": cluster}, {"Key": "gpufleet:pool", "Value": pool}]
    r = ec2.run_instances(ImageId="ami-12c6146b", MinCount=count, MaxCount=count, InstanceType="p4d.24xlarge",
                          TagSpecifications=[{"ResourceType": "instance", "Tags": tags}])
    return [i["InstanceId"] for i in r["Instances"]]


def test_the_monitor_lists_the_clusters_running_nodes_with_its_one_action(iam_moto, stack, cat, monkeypatch, tmp_path):
    ec2 = iam_moto.client("ec2")
    mine = _launch(ec2, "gpu", count=2) + _launch(ec2, "mon")
    gone = _launch(ec2, "gpu")
    ec2.terminate_instances(InstanceIds=gone)
    _launch(ec2, "gpu", cluster="another")  # another cluster's node
    _launch(ec2, "notes")  # a machine tagged with the cluster but of no pool it has
    creds = iam_moto.user("monitor", aws_monitoring.discovery_policy())  # the monitor's role's policy, nothing more
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", creds["aws_access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", creds["aws_secret_access_key"])
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    d = _discovery(stack, cat)
    cfg = {"cloud": "aws", "bucket": "b", "region": "us-east-1", "ec2_endpoint": iam_moto.url}
    assert node_targets.run(cfg, d, out_dir=str(tmp_path)) == 0
    got = json.loads((tmp_path / "9100.json").read_text())
    addresses = {i["InstanceId"]: i["PrivateIpAddress"] for r in ec2.describe_instances(InstanceIds=mine)["Reservations"]
                 for i in r["Instances"]}
    assert sorted((g["labels"]["node"], g["targets"][0]) for g in got) == sorted(
        (i, f"{a}:9100") for i, a in addresses.items())
    assert {g["labels"]["pool"] for g in got} == {"gpu", "mon"}
    assert [g["targets"][0] for g in json.loads((tmp_path / "9400.json").read_text())] == \
        [t.replace(":9100", ":9400") for t in (g["targets"][0] for g in got)]


def test_a_listing_refused_leaves_the_last_targets(iam_moto, stack, cat, monkeypatch, tmp_path):
    creds = iam_moto.user("nobody", {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}]})
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", creds["aws_access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", creds["aws_secret_access_key"])
    (tmp_path / "9100.json").write_text('[{"targets": ["10.64.0.5:9100"], "labels": {"pool": "gpu", "node": "i-1"}}]')
    cfg = {"cloud": "aws", "bucket": "b", "region": "us-east-1", "ec2_endpoint": iam_moto.url}
    assert node_targets.run(cfg, _discovery(stack, cat), out_dir=str(tmp_path)) == 1
    assert "10.64.0.5:9100" in (tmp_path / "9100.json").read_text()


EMPTY_EC2 = (b'<?xml version="1.0" encoding="UTF-8"?><DescribeInstancesResponse '
             b'xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>r</requestId><reservationSet/>'
             b'</DescribeInstancesResponse>')


def test_the_ec2_listing_goes_to_ec2_not_to_the_stacks_s3_endpoint(monkeypatch, tmp_path):
    """The node's ``endpoint`` is its store's (AWS_ENDPOINT_URL_S3: an S3 interface endpoint of a private VPC, say),
    which answers no EC2 action; DescribeInstances goes to EC2's own endpoint (rev53c finding 3)."""
    from gpufleet.clouds import node_agent

    asked = []

    def http(method, url, headers=None, body=None, timeout=30):
        asked.append(url)
        return 200, {}, EMPTY_EC2

    monkeypatch.setattr(node_agent, "http", http)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    cfg = {"cloud": "aws", "bucket": "b", "region": "us-east-1",
           "endpoint": "https://bucket.vpce-0a1b2c3d4e5f60718-abcdefgh.s3.us-east-1.vpce.amazonaws.com"}
    d = {"cluster": "c1", "pools": ["gpu"], "ports": [9100], "aws": {"regions": ["us-east-1"]}}
    assert node_targets.run(cfg, d, out_dir=str(tmp_path)) == 0
    assert asked and all(u.startswith("https://ec2.us-east-1.amazonaws.com/") for u in asked), asked


def test_the_nodes_ec2_endpoint_is_ec2s_variable_not_s3s(monkeypatch):
    """`up` hands the nodes AWS_ENDPOINT_URL_EC2 (or the general AWS_ENDPOINT_URL) as EC2's endpoint, never the S3 one
    (boto3's "Service-specific endpoints")."""
    from gpufleet.clouds import provider

    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_EC2", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "https://s3.example")
    assert provider("aws").program_settings(plan=True)["ec2_endpoint"] is None
    monkeypatch.setenv("AWS_ENDPOINT_URL_EC2", "https://ec2.example")
    assert provider("aws").program_settings(plan=True) == {"s3_endpoint": "https://s3.example",
                                                           "ec2_endpoint": "https://ec2.example"}


@pytest.mark.parametrize("pool,node,address", [
    ("gpu", "i-0abc", "203.0.113.9"),  # a public address
    ("gpu", "i-0abc", "169.254.169.254"),  # the metadata service
    ("gpu", "i-0abc", "10.0.0.1\n- targets: [evil]"),
    ("gpu", "../../etc", "10.0.0.1"),
    ("gpu", None, "10.0.0.1"),
    ("other", "i-0abc", "10.0.0.1"),
])
def test_what_the_cloud_says_is_checked_before_it_is_written(pool, node, address):
    good, bad = node_targets.checked([(pool, node, address), ("gpu", "i-0ok", "10.64.0.9")], {"gpu"})
    assert good == [("gpu", "i-0ok", "10.64.0.9")] and len(bad) == 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_prometheus_scrapes_the_nodes_root_wrote_for_it(stack, tmp_path):
    """The monitor's rendered prometheus.yml, its file_sd directory moved under tmp_path, run by the real
    Prometheus: every written node is an active target of both jobs, labelled cluster, pool and node."""
    require(shutil.which("prometheus") is not None, "prometheus is not installed (Debian's prometheus)")
    prom = pillar.monitor_pillar(stack, "c1")["prometheus_yml"]
    assert node_targets.DIR in prom and "ec2_sd_configs" not in prom  # Prometheus needs no cloud credentials
    cfg = yaml.safe_load(prom.replace(node_targets.DIR, str(tmp_path / "targets")))
    cfg["rule_files"], cfg["alerting"] = [], {}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    node_targets.write([("gpu", "i-0aaa", "127.0.0.2"), ("mon", "i-0bbb", "127.0.0.3")],
                       [scrape.ports()["node_exporter"], scrape.ports()["dcgm_exporter"]], str(tmp_path / "targets"))
    port = _free_port()
    proc = subprocess.Popen(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline, seen = time.monotonic() + 60, set()
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/targets", timeout=5) as r:
                    active = json.load(r)["data"]["activeTargets"]
                seen = {(t["labels"]["job"], t["labels"]["cluster"], t["labels"]["pool"], t["labels"]["node"],
                         t["labels"]["instance"]) for t in active}
                if len(seen) == 4:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        assert seen == {(job, "c1", pool, node, f"{addr}:{p}")
                        for job, p in (("node", 9100), ("dcgm", 9400))
                        for pool, node, addr in (("gpu", "i-0aaa", "127.0.0.2"), ("mon", "i-0bbb", "127.0.0.3"))}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_agent_on_the_monitor_runs_the_lister_each_run_with_its_config(tmp_path, monkeypatch):
    """The agent (root, every minute) hands node_targets.py, beside it, its own config and the discovery its pool's
    document named at the generation it applied; a node whose document names none lists nothing."""
    from gpufleet.clouds import node_agent

    got = tmp_path / "got.json"
    stand_in = tmp_path / "node_targets.py"
    stand_in.write_text(f"import sys\nopen({str(got)!r}, 'w').write(sys.stdin.read())\n")
    monkeypatch.setattr(node_agent, "STATE_DIR", str(tmp_path))
    monkeypatch.setattr(node_agent, "TARGETS_HOME", str(stand_in))
    cfg = {"cloud": "aws", "bucket": "b", "region": "us-east-1", "pool": "mon"}
    (tmp_path / "applied.json").write_text(json.dumps({"generation": "g1", "ok": True}))
    node_agent.list_targets(cfg)
    assert not got.exists()
    d = {"cluster": "c1", "pools": ["gpu"], "ports": [9100], "aws": {"regions": ["us-east-1"]}}
    (tmp_path / "applied.json").write_text(json.dumps({"generation": "g1", "ok": True, "discovery": d}))
    node_agent.list_targets(cfg)
    assert json.loads(got.read_text()) == {"cfg": cfg, "discovery": d}


def test_the_files_are_prometheus_users_to_read_under_the_agents_umask(tmp_path):
    """The agent runs with umask 0077 (what it writes is root's alone); the targets are for Prometheus's user."""
    import os
    import stat

    old = os.umask(0o077)
    try:
        node_targets.write([("gpu", "i-0aaa", "10.64.0.2")], [9100], str(tmp_path / "t"))
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "t").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "t" / "9100.json").stat().st_mode) == 0o644
    assert [p.name for p in (tmp_path / "t").iterdir()] == ["9100.json"]  # no temporary file left


class _Fake:
    """An HTTP server answering GETs from ``routes`` (path -> (status, JSON body)), keeping what it was asked."""

    def __init__(self, routes: dict):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.asked: list[tuple[str, dict]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                fake.asked.append((self.path, dict(self.headers)))
                path = self.path.split("?")[0]
                status, body = routes.get(path, (404, {"error": "no such path"}))
                if callable(body):
                    body = body(self.path)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _vm(name: str, pool: str, ip: str, status: str = "RUNNING", cluster: str = "c1") -> dict:
    return {"name": name, "status": status, "labels": {"gpufleet-cluster": cluster, "gpufleet-pool": pool},
            "networkInterfaces": [{"networkIP": ip, "name": "nic0"}]}


def test_gcp_nodes_are_listed_across_zones_and_pages_with_the_vms_token(tmp_path, write, cat, monkeypatch):
    """instances.aggregatedList in its own format (checked by google-cloud-compute's types, unknown fields refused):
    the running instances of the cluster's pools, every page; the token is the metadata server's."""
    from google.cloud import compute_v1

    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "proj-1")
    stack = stacks.load(write("g.yaml", TEMPLATE.format(
        head="", mon="provider: gcp, region: us-central1, instance_type: g2-standard-4",
        gpu="provider: gcp, region: us-central1, instance_type: a2-highgpu-1g")), cat)
    pages = [{"kind": "compute#instanceAggregatedList", "nextPageToken": "p2", "items": {
                 "zones/us-central1-a": {"instances": [_vm("c1-gpu-0", "gpu", "10.64.0.2"),
                                                       _vm("c1-gpu-9", "gpu", "10.64.0.9", status="TERMINATED")]},
                 "zones/us-central1-b": {"warning": {"code": "NO_RESULTS_ON_PAGE", "message": "none"}}}},
             {"kind": "compute#instanceAggregatedList", "items": {
                 "zones/us-central1-c": {"instances": [_vm("c1-mon-0", "mon", "10.64.1.2"),
                                                       _vm("c1-gpu-1", "gpu", "169.254.169.254")]}}}]
    for page in pages:
        compute_v1.InstanceAggregatedList.from_json(json.dumps(page), ignore_unknown_fields=False)
    fake = _Fake({"/token": (200, {"access_token": "ya29.t", "expires_in": 3599, "token_type": "Bearer"}),
                  "/compute/v1/projects/proj-1/aggregated/instances":
                      (200, lambda path: pages[1] if "pageToken=p2" in path else pages[0])})
    try:
        d = _discovery(stack, cat)
        cfg = {"cloud": "gcp", "bucket": "b", "token_url": fake.url + "/token", "compute_endpoint": fake.url}
        assert node_targets.run(cfg, d, out_dir=str(tmp_path)) == 0
    finally:
        fake.close()
    got = json.loads((tmp_path / "9100.json").read_text())
    assert [(g["labels"]["pool"], g["labels"]["node"], g["targets"]) for g in got] == [
        ("gpu", "c1-gpu-0", ["10.64.0.2:9100"]), ("mon", "c1-mon-0", ["10.64.1.2:9100"])]
    listed = [(p, h) for p, h in fake.asked if "/aggregated/" in p]
    assert len(listed) == 2 and all(h.get("Authorization") == "Bearer ya29.t" for _, h in listed)
    assert "labels.gpufleet-cluster+%3D+%22c1%22" in listed[0][0]


def test_azure_nodes_are_each_scale_sets_interfaces_with_the_identitys_token(tmp_path, write, cat, monkeypatch):
    """Each pool's scale set's network interfaces ("Network Interfaces - List Virtual Machine Scale Set Network
    Interfaces", api-version 2018-10-01: value[].properties.virtualMachine.id, ipConfigurations[].properties
    .privateIPAddress and primary), following nextLink; the token is the managed identity's, for ARM."""
    monkeypatch.setenv("ARM_SUBSCRIPTION_ID", "00000000-0000-0000-0000-000000000001")
    stack = stacks.load(write("z.yaml", TEMPLATE.format(
        head=KEY, mon="provider: azure, region: eastus, instance_type: Standard_NC4as_T4_v3",
        gpu="provider: azure, region: eastus, instance_type: Standard_NC24ads_A100_v4")), cat)
    d = _discovery(stack, cat)
    sets = {s["pool"]: s for s in d["azure"]["scale_sets"]}
    base = "/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/{group}/providers/Microsoft.Compute/" \
           "virtualMachineScaleSets/{name}"

    def nic(s, idx, ip):
        vm = base.format(**s) + f"/virtualMachines/{idx}"
        return {"name": "nic0", "id": vm + "/networkInterfaces/nic0", "properties": {
            "virtualMachine": {"id": vm}, "primary": True, "ipConfigurations": [
                {"name": "ip0", "properties": {"privateIPAddress": "10.64.9.9", "primary": False}},
                {"name": "ip1", "properties": {"privateIPAddress": ip, "primary": True}}]}}

    gpu_path = base.format(**sets["gpu"]) + "/networkInterfaces"

    def gpu_pages(path: str) -> dict:  # two pages, the first naming the second as ARM does (nextLink)
        if "skiptoken=2" in path:
            return {"value": [nic(sets["gpu"], 3, "10.64.0.7")]}
        return {"value": [nic(sets["gpu"], 0, "10.64.0.4")],
                "nextLink": f"{fake.url}{gpu_path}?api-version=2018-10-01&$skiptoken=2"}

    routes = {"/token": (200, {"access_token": "eyJ.t", "token_type": "Bearer"}),
              base.format(**sets["mon"]) + "/networkInterfaces": (200, {"value": [nic(sets["mon"], 0, "10.64.1.4")]}),
              gpu_path: (200, gpu_pages)}
    fake = _Fake(routes)
    try:
        cfg = {"cloud": "azure", "bucket": "b", "identity": "client-1", "token_url": fake.url + "/token",
               "arm_endpoint": fake.url}
        assert node_targets.run(cfg, d, out_dir=str(tmp_path)) == 0
    finally:
        fake.close()
    got = json.loads((tmp_path / "9400.json").read_text())
    assert [(g["labels"]["pool"], g["labels"]["node"], g["targets"]) for g in got] == [
        ("gpu", f"{sets['gpu']['name']}_0", ["10.64.0.4:9400"]), ("gpu", f"{sets['gpu']['name']}_3", ["10.64.0.7:9400"]),
        ("mon", f"{sets['mon']['name']}_0", ["10.64.1.4:9400"])]
    (token,) = [p for p, _ in fake.asked if p.startswith("/token")]
    assert "client_id=client-1" in token and "resource=https%3A%2F%2Fmanagement.azure.com%2F" in token
    assert all(h.get("Authorization") == "Bearer eyJ.t" for p, h in fake.asked if "networkInterfaces" in p)
    assert all("api-version=2018-10-01" in p for p, _ in fake.asked if "networkInterfaces" in p)


def test_the_tree_carries_the_lister_and_only_the_monitors_document_names_a_discovery(stack, cat):
    import io
    import tarfile

    from gpufleet.clouds import node_agent

    archive, _ = channel.tree_archive()
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:  # what the agent copies beside itself on the monitor
        assert tar.extractfile(node_agent.TARGETS).read() == channel.targets_module()
    gpu = next(p for p in stack.pools if p.name == "gpu")
    assert "discovery" not in channel.pool_document(stack, gpu, cluster="c1", cat=cat, tree="0" * 64)
    assert _discovery(stack, cat) == {"cluster": "c1", "pools": ["gpu", "mon"], "ports": [9100, 9400],
                                      "networks": ["10.64.0.0/16"], "aws": {"regions": ["us-east-1"]}}


@pytest.mark.parametrize("cidr", ["198.18.0.0/16", "240.10.0.0/16"])
def test_a_node_inside_the_stacks_own_network_is_a_target(write, cat, monkeypatch, cidr):
    """The spec takes any network.cidr Python calls private (spec.Network), and GCP takes these for subnets ("Valid
    IPv4 ranges": 198.18.0.0/15, 240.0.0.0/4; cloud.google.com/vpc/docs/subnets#valid-ranges, read 2026-11-27): the
    discovery carries the cluster's network, and the lister keeps its addresses (rev53c finding 5); a public
    address outside it is still left out."""
    import ipaddress

    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "p1")
    path = write("s.yaml", f"name: c1\nowner: o\nnetwork: {{cidr: {cidr}}}\nmonitoring: {{prometheus: true, host: mon}}\n"
                           "pools:\n  - {name: mon, provider: gcp, region: us-central1, instance_type: g2-standard-4, "
                           "nodes: 1}\n")
    st = stacks.load(path, cat)
    d = pillar.monitor_pillar(st, "c1")["discovery"]
    inside = str(ipaddress.ip_network(st.network.cidr)[7])
    good, bad = node_targets.checked([("mon", "mon-0", inside), ("mon", "mon-1", "203.0.113.9")], set(d["pools"]),
                                     d["networks"])
    assert good == [("mon", "mon-0", inside)] and len(bad) == 1, bad


def test_nodes_left_out_of_the_targets_are_in_the_agents_log(tmp_path, monkeypatch, capsys):
    """The lister prints each node it leaves out and exits 0 (the rest are written); the agent logs what it printed,
    not only on a failure: else a node never scraped (a bad address, a spoofed name) has no line anywhere saying why
    (rev53c finding 6)."""
    from gpufleet.clouds import node_agent

    stand_in = tmp_path / "node_targets.py"
    stand_in.write_text("print(\"left out of the scrape targets: 'i-0abc' of pool 'gpu' at '203.0.113.9'\")\n")
    monkeypatch.setattr(node_agent, "STATE_DIR", str(tmp_path))
    monkeypatch.setattr(node_agent, "TARGETS_HOME", str(stand_in))
    d = {"cluster": "c1", "pools": ["gpu"], "ports": [9100], "aws": {"regions": ["us-east-1"]}}
    (tmp_path / "applied.json").write_text(json.dumps({"generation": "g1", "ok": True, "discovery": d}))
    node_agent.list_targets({"cloud": "aws", "bucket": "b", "region": "us-east-1"})
    assert "203.0.113.9" in capsys.readouterr().out


def test_a_failed_write_keeps_the_last_file_and_leaves_no_part_file(tmp_path, monkeypatch, capsys):
    """A write that fails midway (a full disk) keeps the last good file, leaves no ``<port>.json.<pid>`` beside it (a
    new one each failing run), and run() says so and exits 1 instead of a traceback (rev53c finding 7)."""
    out = tmp_path / "t"
    node_targets.write([("gpu", "i-0aaa", "10.64.0.2")], [9100], str(out))
    before = (out / "9100.json").read_text()
    monkeypatch.setattr(node_targets.json, "dump", lambda *a, **k: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError):
        node_targets.write([("gpu", "i-0bbb", "10.64.0.3")], [9100], str(out))
    assert (out / "9100.json").read_text() == before
    assert sorted(os.listdir(out)) == ["9100.json"]
    monkeypatch.setattr(node_targets, "LISTERS", {"aws": lambda cfg, d: [("gpu", "i-0bbb", "10.64.0.3")]})
    d = {"cluster": "c1", "pools": ["gpu"], "ports": [9100], "aws": {"regions": ["us-east-1"]}}
    assert node_targets.run({"cloud": "aws"}, d, out_dir=str(out)) == 1
    assert "disk full" in capsys.readouterr().out and sorted(os.listdir(out)) == ["9100.json"]

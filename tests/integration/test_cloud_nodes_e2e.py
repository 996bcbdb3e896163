"""End to end: cloud nodes configure themselves from the stack's bucket, on the local test rack.

The rack's hosts (tests/rack/rack.py) play an AWS pool's instances. moto's S3 and STS, on the
rack's bridge, are the bucket and the instance role: `up` (in-process, the Pulumi CLI replayed by
fakes/pulumi_cli.py) publishes the Salt tree and the pools' configuration and waits, while each
host runs the launch template's user data as cloud-init would, with the credentials EC2 would
hand it (sts:AssumeRole, the instance id as the session name). The hosts install Salt in a
virtualenv (from a wheelhouse on the bridge: the site's pip mirror), apply the non-GPU states
for real, rehearse the GPU ones, and write their statuses. Faults in the same run: a host whose
state fails, a host that never runs its bootstrap, and a tree archive replaced in the bucket.
The GCS and Blob bootstraps run once on a host against fakes/objects.py.
"""

import contextlib
import http.server
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.integration import localrack
from tests.integration.golden import user_data as _user_data
from tests.integration.localrack import active, on_host

CACHE = Path(os.environ.get("GPUFLEET_RACK_CACHE", "/var/cache/gpufleet-rack"))
WAIT_S = 240  # the host that never runs its bootstrap is reported after this

pytestmark = [pytest.mark.slow, localrack.group(0)]

STACK = """\
name: e2e-cloud
owner: ci@example.com
ttl: 2h
software: {driver: "570", cuda: "12.8"}
pools:
  - name: gpu
    provider: aws
    region: us-east-1
    instance_type: g6.xlarge
    nodes: 3
    salt:
      states: [node_base, nvidia_driver]
      pillar:
        gpufleet: {live: false}   # the rack's hosts share this machine's kernel
  - name: edge
    provider: aws
    region: us-east-1
    instance_type: g6.xlarge
    nodes: 1
    salt:
      states: [node_base]
      pillar:
        gpufleet: {live: false}
"""


def _wheelhouse() -> Path:
    """Salt's wheels for the hosts' Python (Debian 12's 3.11, this machine's too), built once."""
    d = CACHE / "wheels-salt-3008.3"
    if not (d / ".complete").exists():  # built aside and moved in whole: the other rack's module may want it too
        tmp = Path(tempfile.mkdtemp(prefix=".wheels-", dir=CACHE))
        r = subprocess.run([str(ROOT / ".salt-venv" / "bin" / "python"), "-m", "pip", "wheel", "-q", "-w", str(tmp),
                            "salt==3008.3"], capture_output=True, text=True, timeout=1200)
        assert r.returncode == 0, r.stderr[-2000:]
        (tmp / ".complete").write_text("ok\n")
        tmp.chmod(0o755)
        try:
            tmp.rename(d)
        except OSError:  # the other one was first
            shutil.rmtree(tmp)
    return d


def _serve(directory: Path):
    handler = lambda *a, **kw: http.server.SimpleHTTPRequestHandler(*a, directory=str(directory), **kw)  # noqa: E731
    handler.log_message = lambda *a: None
    srv = http.server.ThreadingHTTPServer((active().gateway, 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


@contextlib.contextmanager
def cloud_rack(tmp: Path, rack_id: int | None = None):
    """Four fresh hosts of rack ``rack_id`` (the process's active one unless told), the site's pip mirror
    and moto on the rack's bridge; the rack taken down after (also what tests/bench/bench_heal_rack.py
    brings up)."""
    if rack_id is not None:
        localrack.use(rack_id)
    localrack.fresh_hosts("salt-call")
    bridge = active().gateway
    wheels = _serve(_wheelhouse())
    for i in range(1, 5):  # the site's pip mirror, as a real site's image points at its own
        (active().etc(i) / "pip.conf").write_text(
            f"[global]\nno-index = true\nfind-links = http://{bridge}:{wheels.server_address[1]}/\n"
            f"trusted-host = {bridge}\n")
    from fakes.aws import Server

    moto = Server(host=bridge).start()
    try:
        yield {"moto": moto, "tmp": tmp}
    finally:
        moto.stop()
        wheels.shutdown()
        localrack.down()


@pytest.fixture(scope="module")
def rack(request, tmp_path_factory):
    with cloud_rack(tmp_path_factory.mktemp("cloud-nodes"), localrack.rack_of(request)) as r:
        yield r


GATE_INTERVAL_S = 15  # the watch's interval where a test needs only its boot gate passed: the schema's shortest
WATCH_LOOP = """\
# the watch's timer (systemd.timer(5) OnUnitActiveSec={interval}): a run started every {interval} s
while :; do
  if [ -f /opt/gpufleet/node_watch.py ]; then
    env {exports} python3 /opt/gpufleet/node_watch.py /etc/gpufleet/node.json >>/var/log/gpufleet/watch.log 2>&1 &
  fi
  sleep {interval}; wait
done
"""
LOOP_PID = "/run/gpufleet-watch-loop.pid"


def start_watch(i: int, env: dict, interval: int) -> None:
    """Host ``i``'s watch, every ``interval`` s: the rack's hosts run no systemd (each host's PID 1 is its sshd), so
    its timer is played by a loop that starts ``python3 /opt/gpufleet/node_watch.py`` as OnUnitActiveSec would."""
    exports = " ".join(f"{k}={v}" for k, v in env.items())
    loop = WATCH_LOOP.format(interval=interval, exports=exports)
    wrote = on_host(i, "mkdir -p /var/log/gpufleet && cat > /run/gpufleet-watch-loop.sh", stdin=loop)
    assert wrote.returncode == 0, wrote.stderr
    started = on_host(i, f"setsid sh /run/gpufleet-watch-loop.sh </dev/null >/dev/null 2>&1 & echo $! > {LOOP_PID}")
    assert started.returncode == 0, started.stderr


def stop_watch(i: int) -> None:
    on_host(i, f"test -f {LOOP_PID} && kill -- -$(cat {LOOP_PID}); rm -f {LOOP_PID}")


def _boot(i: int, user_data: str, env: dict) -> subprocess.CompletedProcess:
    """What cloud-init does with user data: run it as root, here with the credentials and the
    instance id the instance metadata service would give."""
    exports = " ".join(f"{k}={v}" for k, v in env.items())
    return on_host(i, f"env {exports} bash -s", stdin=user_data, timeout=900)


def _aws_plan(rack, monkeypatch, text: str, data: str):
    """A stack of AWS pools as `up` meets it here: moto's endpoint and credentials, a data home of its
    own, the stack planned; (catalog, stack, plan)."""
    from gpufleet import catalog, stacks
    from gpufleet.engine import plan as planner

    moto = rack["moto"]
    moto.reset()
    for k, v in {"AWS_ENDPOINT_URL": moto.url, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
                 "XDG_DATA_HOME": str(rack["tmp"] / data), "PULUMI_CONFIG_PASSPHRASE": "test"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("GPUFLEET_REGISTRY", raising=False)
    cat = catalog.load(use_config=False)
    path = rack["tmp"] / f"{data}.yaml"
    path.write_text(text)
    stack = stacks.load(path, cat)
    return cat, stack, planner.plan(stack, cat, workers=1)


@contextlib.contextmanager
def slurm_nodes(rack, monkeypatch, text: str, data: str, *, every_s: float = 3, before_boot=None):
    """Hosts 2 (the controller), 3 and 4 booted as the instances of an AWS stack with pools `ctl` and `gpu`,
    each running its agent every ``every_s`` seconds (the systemd timer's minute, shortened) with the
    credentials of a role of its own; ``before_boot(i, env)`` first. Yields (catalog, stack, plan, hosts:
    {host: (pool, instance id)}, boot: boot(i, pool, instance id) boots one more host as a new instance of the
    pool, as a replacement boots); the agents stop after."""
    import boto3

    cat, stack, plan = _aws_plan(rack, monkeypatch, text, data)
    pools = plan.outputs["pools"]
    for name in {p["bucket"]["name"] for p in pools.values()}:
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=name)
    role = boto3.client("iam", region_name="us-east-1").create_role(RoleName=data, AssumeRolePolicyDocument="{}")
    hosts = {2: ("ctl", pools["ctl"]["node_ids"][0]), 3: ("gpu", pools["gpu"]["node_ids"][0]),
             4: ("gpu", pools["gpu"]["node_ids"][1])}
    # the addresses the cloud reports for its instances are the hosts' own, as in a real VPC: slurm.conf
    # takes each node's address from the cloud's record, never from what the node says of itself
    pools["ctl"]["private_ips"] = [active().address(2)]
    pools["gpu"]["private_ips"] = [active().address(3), active().address(4)]
    stop = threading.Event()

    def node(i: int, pool: str, node_id: str):
        c = boto3.client("sts", region_name="us-east-1").assume_role(RoleArn=role["Role"]["Arn"],
                                                                     RoleSessionName=node_id)["Credentials"]
        env = {"AWS_ACCESS_KEY_ID": c["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": c["SecretAccessKey"],
               "AWS_SESSION_TOKEN": c["SessionToken"], "GPUFLEET_NODE_ID": node_id}
        if before_boot:
            before_boot(i, env)
        _boot(i, _user_data(plan, pool), env)
        exports = " ".join(f"{k}={v}" for k, v in env.items())
        while not stop.wait(every_s):  # the timer: a new generation is picked up by the next run
            on_host(i, f"env {exports} python3 /opt/gpufleet/node_agent.py >>/var/log/gpufleet/node.log 2>&1",
                    timeout=900)

    booting = [threading.Thread(target=node, args=(i, *h), daemon=True) for i, h in hosts.items()]
    for t in booting:
        t.start()

    def boot(i: int, pool: str, node_id: str) -> None:
        booting.append(threading.Thread(target=node, args=(i, pool, node_id), daemon=True))
        booting[-1].start()

    try:
        yield cat, stack, plan, hosts, boot
    finally:
        stop.set()
        for t in booting:
            t.join(timeout=900)


def test_cloud_nodes_configure_themselves_and_up_reports_each(rack, monkeypatch):
    import boto3

    from gpufleet.errors import PartialFailure
    from gpufleet.fleet import up as fleet_up
    from gpufleet.fleet.configure import reconfigure
    from gpufleet.state.registry import Registry

    from fakes.pulumi_cli import FakePulumiCLI

    cat, stack, plan = _aws_plan(rack, monkeypatch, STACK, "data")
    pools = plan.outputs["pools"]
    bucket = pools["gpu"]["bucket"]
    assert bucket["endpoint"] == rack["moto"].url  # the nodes are told the same store `up` writes to
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=bucket["name"])  # what Pulumi creates
    iam = boto3.client("iam", region_name="us-east-1")
    role = iam.create_role(RoleName="e2e-cloud-gpu", AssumeRolePolicyDocument="{}")["Role"]

    def instance_env(node_id: str) -> dict:
        c = boto3.client("sts", region_name="us-east-1").assume_role(RoleArn=role["Arn"], RoleSessionName=node_id)
        c = c["Credentials"]
        return {"AWS_ACCESS_KEY_ID": c["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": c["SecretAccessKey"],
                "AWS_SESSION_TOKEN": c["SessionToken"], "GPUFLEET_NODE_ID": node_id}

    gpu_ids, edge_id = pools["gpu"]["node_ids"], pools["edge"]["node_ids"][0]
    # host 2's state fails: its modprobe.d is a file, so the nouveau blacklist cannot be written
    etc2 = active().etc(2)
    shutil.move(etc2 / "modprobe.d", etc2 / "modprobe.d.saved")
    (etc2 / "modprobe.d").write_text("not a directory\n")
    store = boto3.client("s3", region_name="us-east-1")
    boots: dict[int, subprocess.CompletedProcess] = {}

    def cloud_init():
        # instances boot while Pulumi still works: hosts 1 and 2 wait for their pool's configuration
        for i, nid in ((1, gpu_ids[0]), (2, gpu_ids[1])):
            threading.Thread(target=lambda i=i, nid=nid: boots.__setitem__(
                i, _boot(i, _user_data(plan, "gpu"), instance_env(nid))), daemon=True).start()
        # host 4 boots after someone replaced the tree its pool names: the archive does not match
        for _ in range(600):
            try:
                doc = json.loads(store.get_object(Bucket=bucket["name"], Key="pools/edge/current.json")["Body"].read())
                break
            except store.exceptions.NoSuchKey:
                time.sleep(0.5)
        forged = "f" * 64
        store.put_object(Bucket=bucket["name"], Key=f"tree/{forged}.tar.gz", Body=b"not the tree")
        store.put_object(Bucket=bucket["name"], Key="pools/edge/current.json",
                         Body=json.dumps({**doc, "tree": forged}).encode())
        boots[4] = _boot(4, _user_data(plan, "edge"), instance_env(edge_id))
        # host 3 never runs its bootstrap

    try:
        threading.Thread(target=cloud_init, daemon=True).start()
        out = fleet_up.bring_up(stack, cat, fleet_up.UpOptions(check=False,
                                seams=fleet_up.Seams(pulumi_command=FakePulumiCLI(plan), wait_s=WAIT_S)),
                                confirm=lambda p: True)
    finally:
        (etc2 / "modprobe.d").unlink()
        shutil.move(etc2 / "modprobe.d.saved", etc2 / "modprobe.d")
    by = {r.target.id: r for r in out.configured}
    logs = {i: on_host(i, "cat /var/log/gpufleet/bootstrap.log /var/log/gpufleet/node.log").stdout[-3000:]
            for i in (1, 2, 4)}
    assert by["gpu-0"].state == "configured", (by["gpu-0"].error, by["gpu-0"].failed, logs[1])
    assert by["gpu-0"].changed >= 5 and "nvidia_driver" in by["gpu-0"].detail["rehearsed"]
    assert by["gpu-0"].facts["os"].startswith("Debian") and by["gpu-0"].facts["gpu_count"] == 0
    assert by["gpu-1"].state == "failed", logs[2]
    assert any("node_base-config-nouveau" in f["state"] for f in by["gpu-1"].failed), by["gpu-1"].failed
    assert by["gpu-2"].state == "timeout" and "bootstrap.log" in by["gpu-2"].hint
    assert by["edge-0"].state == "failed" and "SHA-256" in by["edge-0"].error and "refused" in by["edge-0"].error
    failed = PartialFailure.of(out.configured)
    assert failed.exit_code == 3 and "3 of 4 node(s) not configured" in str(failed)
    # then the node ran the quick verification from its tree: it has no GPU, so it is not proven
    # healthy ("incomplete", naming what it could not check), and `up` marks it unhealthy
    assert by["gpu-0"].verify["verdict"] == "incomplete" and "gpu.count" in by["gpu-0"].verify["unchecked"]
    assert {v.node: v.verdict for v in out.verdicts} == {"gpu-0": "incomplete"}
    hosts = Registry().hosts("e2e-cloud")
    assert {k: v["state"] for k, v in hosts.items()} == {("gpu", 0): "unhealthy", ("gpu", 1): "failed",
                                                        ("gpu", 2): "timeout", ("edge", 0): "failed"}
    assert on_host(1, "test -x /opt/gpufleet/salt/bin/salt-call && grep -c max_map_count "
                      "/etc/sysctl.d/90-gpufleet.conf").returncode == 0  # Salt installed, node_base applied
    # nothing in the user data is a secret: the node's role reads the bucket
    assert "AWS_SECRET" not in _user_data(plan, "gpu") and len(_user_data(plan, "gpu").encode()) <= 16384

    # `configure` with nothing changed: host 1 is current and does nothing; its own timer agrees
    before = store.list_objects_v2(Bucket=bucket["name"], Prefix="status/gpu/")["Contents"]
    nodes = reconfigure(stack, cat, outputs=plan.outputs, wait_s=5)
    again = {r.target.id: r for r in nodes}
    assert again["gpu-0"].state == "current" and again["gpu-0"].changed == 0
    assert _boot(1, _user_data(plan, "gpu"), instance_env(gpu_ids[0])).returncode == 0
    after = store.list_objects_v2(Bucket=bucket["name"], Prefix="status/gpu/")["Contents"]
    assert [(o["Key"], o["ETag"]) for o in after] == [(o["Key"], o["ETag"]) for o in before]


GCS_AZURE_STACK = """\
name: e2e-objects
owner: ci@example.com
access: {public_key: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeFakeFakeFakeFakeFakeFakeFakeFakeFakeFake t"}
pools:
  - {name: g, provider: gcp, region: us-central1, instance_type: g2-standard-8,
     salt: {states: [node_base], pillar: {gpufleet: {live: false}}}}
  - {name: z, provider: azure, region: eastus, instance_type: Standard_NC4as_T4_v3,
     salt: {states: [node_base], pillar: {gpufleet: {live: false}}}}
"""


def test_the_gcs_and_blob_bootstraps_configure_a_host(rack, gcp, azure, monkeypatch):
    """GCP's startup-script and Azure's customData, each run once on host 3 against a fake of its
    object store (fakes/objects.py) on the rack's bridge; `up`'s side publishes and waits through
    the SDKs' credentials (the gcp and azure fixtures)."""
    from gpufleet import catalog, stacks
    from gpufleet.clouds import bootstrap
    from gpufleet.nodes.cloud import channel as cloudnodes

    from fakes.objects import BlobFake, GcsFake

    cat = catalog.load(use_config=False)
    path = rack["tmp"] / "objects.yaml"
    path.write_text(GCS_AZURE_STACK)
    stack = stacks.load(path, cat)
    archive, tree = cloudnodes.tree_archive()
    gcs, blob = GcsFake(host=active().gateway).start(), BlobFake(host=active().gateway).start()
    monkeypatch.setenv("GPUFLEET_GCS_ENDPOINT", gcs.url)
    monkeypatch.setenv("GPUFLEET_AZURE_BLOB_ENDPOINT", blob.url + "/{account}")
    try:
        for pool, ref, cfg in (
                ("g", {"cloud": "gcp", "name": "gpufleet-e2e-objects-0a1b2c3d"},
                 bootstrap.config("gcp", cluster="e2e-objects", pool="g", bucket="gpufleet-e2e-objects-0a1b2c3d",
                                  endpoint=gcs.url,
                                  token_url=gcs.url + "/computeMetadata/v1/instance/service-accounts/default/token")),
                ("z", {"cloud": "azure", "name": "gf0a1b2c3d4e5f60718293a4", "container": "gpufleet"},
                 bootstrap.config("azure", cluster="e2e-objects", pool="z", bucket="gpufleet",
                                  account="gf0a1b2c3d4e5f60718293a4", identity="11111111-2222-3333-4444-555555555555",
                                  endpoint=f"{blob.url}/gf0a1b2c3d4e5f60718293a4",
                                  token_url=blob.url + "/metadata/identity/oauth2/token"))):
            store = cloudnodes.cloud(ref["cloud"]).objects(ref)
            p = next(x for x in stack.pools if x.name == pool)
            doc = cloudnodes.pool_document(stack, p, cluster="e2e-objects", cat=cat, tree=tree)
            cloudnodes.publish(store, {pool: doc}, archive, tree)
            node_id = "/subscriptions/0/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/z/" \
                      "virtualMachines/0" if pool == "z" else "4815162342"
            booted = _boot(3, bootstrap.render(cfg), {"GPUFLEET_NODE_ID": node_id})
            (r,) = cloudnodes.wait(store, [cloudnodes.NodeTarget(pool, 0, node_id, None)], {pool: doc["generation"]},
                                   timeout_s=30, poll_s=1)
            log = on_host(3, "tail -20 /var/log/gpufleet/node.log").stdout
            assert booted.returncode == 0 and r.state == "configured", (ref["cloud"], r.error, log)
    finally:
        gcs.stop()
        blob.stop()
    assert any(m == "POST" and "/upload/storage/v1/b/" in p for m, p in gcs.requests)  # the node's status
    assert any(m == "PUT" and "/status/z/" in p for m, p in blob.requests)


def test_a_node_from_a_golden_image_applies_only_what_is_its_own(rack, monkeypatch):
    """Issue 32 on the rack (tests/integration/golden.py): a host bakes the pool's image with the
    bundle `gpufleet image plan` writes, then boots from it as the pool's node: it applies nothing
    of what the image holds (zero changes) and its status says the image is current; a host from
    stock applies everything; after the pool's settings for a baked formula change, the image's
    node applies everything and says why the image is stale. `make bench` times the two boots."""
    from tests.integration import golden

    moto = rack["moto"]
    moto.reset()
    for k, v in {"AWS_ENDPOINT_URL": moto.url, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
                 "XDG_DATA_HOME": str(rack["tmp"] / "data-image")}.items():
        monkeypatch.setenv(k, v)
    out = golden.run(moto, rack["tmp"])
    logs = [(r.returncode, r.stdout[-1500:], r.stderr[-1500:]) for r in out["boots"]]
    image, stock, stale = out["from_image"], out["from_stock"], out["from_stale"]
    assert image["ok"] and image["changed"] == 0 and image["image"]["current"] is True, (image, logs[0])
    assert image["rehearsed"] == []  # the baked formula is not even rehearsed: nothing of it runs
    assert stock["ok"] and stock["changed"] > 0 and "image" not in stock, (stock, logs[1])
    assert stale["ok"] and stale["changed"] > 0 and stale["image"]["current"] is False, (stale, logs[2])
    assert "settings for the baked formulas differ" in stale["image"]["stale"]
    print(f"golden image on the rack: bake {out['bake_s']:.0f}s; boot from the image {out['from_image_s']:.1f}s, "
          f"from stock {out['from_stock_s']:.1f}s, from a stale image {out['from_stale_s']:.1f}s")


SLURM_STACK = """\
name: e2e-slurm-cloud
owner: ci@example.com
ttl: 2h
# cgroups off: the pools' image (Ubuntu 22.04 by default) installs Slurm 21.08, which has no cgroup v2
slurm: {cgroups: false, health_check_interval: 0}
pools:
  - name: ctl
    provider: aws
    region: us-east-1
    instance_type: g6.xlarge
    role: controller
    nodes: 1
    health: {interval: 15}
    salt: {states: [slurm], pillar: {gpufleet: {live: false}}}
  - name: gpu
    provider: aws
    region: us-east-1
    instance_type: g6.xlarge
    nodes: 2
    health: {interval: 15}  # GATE_INTERVAL_S
    salt: {states: [node_base, slurm], pillar: {gpufleet: {live: false}}}
"""


def test_slurm_on_cloud_nodes_comes_up_through_the_bucket_and_runs_jobs(rack, monkeypatch):
    """Issue 37's Slurm on cloud pools: hosts 2 (the controller), 3 and 4 boot as an AWS stack's
    instances and run their agent every few seconds (the systemd timer's minute, shortened);
    `up` publishes a first round without Slurm, renders slurm.conf from the facts the nodes
    report (their names, addresses, CPUs, memory), and publishes the files and the munge key
    through the bucket; then `sinfo` on the controller lists both compute nodes idle and
    `srun -N2 hostname` runs on both."""
    from gpufleet.fleet import up as fleet_up

    from fakes.pulumi_cli import FakePulumiCLI

    booted = []
    try:
        # each node's watch, as its systemd timer runs it: it passes the node's boot gate and resumes it (the node
        # registers drained for its gate: health_check_interval 0 here, so the formula holds it before slurmd starts)
        with slurm_nodes(rack, monkeypatch, SLURM_STACK, "data-slurm",
                         before_boot=lambda i, env: (booted.append(i), start_watch(i, env, GATE_INTERVAL_S))) as (
                cat, stack, plan, hosts, _):
            pulumi = FakePulumiCLI(plan)
            out = fleet_up.bring_up(stack, cat, fleet_up.UpOptions(check=False,
                                    seams=fleet_up.Seams(pulumi_command=pulumi, wait_s=WAIT_S)), confirm=lambda p: True)
            _slurm_runs_jobs_and_status_shows_it(out, hosts, cat, pulumi, monkeypatch)
    finally:
        for i in booted:
            stop_watch(i)


def _slurm_runs_jobs_and_status_shows_it(out, hosts, cat, pulumi, monkeypatch):
    from gpufleet.engine import automation
    from gpufleet.fleet import status

    logs = {i: on_host(i, "tail -30 /var/log/gpufleet/node.log").stdout for i in hosts}
    assert {r.target.id: r.state for r in out.configured} == {"ctl-0": "configured", "gpu-0": "configured",
                                                         "gpu-1": "configured"}, ([r.error for r in out.configured], logs)
    conf = on_host(3, "cat /etc/slurm/slurm.conf").stdout
    # a compute node is its pool's slot (configure.slurm.SLOT_STATE), at the address the cloud recorded for it
    assert f"SlurmctldHost=h2({active().address(2)})" in conf and \
        f"NodeName=gpu-0 NodeAddr={active().address(3)}" in conf, conf
    nodes = {}
    for _ in range(45):
        nodes = dict(line.split() for line in on_host(2, "sinfo -h -N -o '%N %t'").stdout.splitlines() if line.strip())
        if nodes == {"gpu-0": "idle", "gpu-1": "idle"}:
            break
        time.sleep(2)
    assert nodes == {"gpu-0": "idle", "gpu-1": "idle"}, (nodes, on_host(2, "tail -20 /var/log/slurm/slurmctld.log").stdout)
    # an address gpu-0 had before (its slot moved) in h4's hosts file, where the Slurm prolog keeps them: see below
    stale = on_host(4, "printf '%s\\n' '# BEGIN gpufleet: Slurm node names (the Slurm prolog keeps these lines; edits "
                       "here are lost)' '10.77.0.99 gpu-0' '# END gpufleet: Slurm node names' >> /etc/hosts")
    assert stale.returncode == 0, stale.stderr
    # one job step over both: each slurmd reaches the other at the address it registered from (State=CLOUD)
    ran = on_host(2, "srun -N2 hostname", timeout=120)
    assert ran.returncode == 0 and sorted(ran.stdout.split()) == ["h3", "h4"], ran.stdout + ran.stderr
    # review rev51b finding 4: the slots' names resolve on every node of a job, at the address Slurm has, before it
    # runs (configure.slurm PROLOG_PROGRAM): the usual multi-node recipe's MASTER_ADDR. h4's stale line (gpu-0 was
    # elsewhere before: its slot moved) was put right by the jobs' prolog
    h3, h4 = localrack.active().address(3), localrack.active().address(4)
    ran = on_host(2, "srun -N2 -w gpu-0,gpu-1 -l sh -c "
                     "'getent hosts $(scontrol show hostnames $SLURM_JOB_NODELIST | head -n1) gpu-1'", timeout=120)
    assert ran.returncode == 0 and sorted(line.split() for line in ran.stdout.splitlines()) == [
        ["0:", h3, "gpu-0"], ["0:", h4, "gpu-1"], ["1:", h3, "gpu-0"], ["1:", h4, "gpu-1"]], ran.stdout + ran.stderr
    # and on the controller, in no job: its agent writes every node's name on each run (clouds/node_agent.py)
    seen = ""
    for _ in range(30):
        seen = on_host(2, "getent hosts gpu-0 gpu-1").stdout
        if len(seen.splitlines()) == 2:
            break
        time.sleep(2)
    assert sorted(line.split() for line in seen.splitlines()) == [[h3, "gpu-0"], [h4, "gpu-1"]], seen
    # the key came through the bucket: the same on every node, readable by munge alone
    keys = {on_host(i, "stat -c '%U %a' /etc/munge/munge.key; sha256sum < /etc/munge/munge.key").stdout for i in hosts}
    assert len(keys) == 1 and next(iter(keys)).startswith("munge 400"), keys
    # `status` reads Slurm's view from the controller's status in the bucket, which its agent keeps
    monkeypatch.setattr(automation, "find_pulumi", lambda: pulumi)
    view = None
    for _ in range(30):
        (row,) = status.run("e2e-slurm-cloud", cat).rows
        view = row.scheduler
        if view and view.get("nodes") == {"idle": 2}:
            break
        time.sleep(2)
    assert view and view["nodes"] == {"idle": 2} and view["controller"] == "ctl-0" and view["as_of"], (view, row.notes)

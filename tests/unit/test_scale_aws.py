"""`gpufleet scale` on an AWS pool against moto's server (the real wire protocol; moto answered as EC2 does by
test_heal_aws's ``like_ec2``): more nodes from the pool's own instant-fleet request, recorded so that the next
`up` keeps them; fewer nodes by id, only those that may go; a refusal or an API error changes nothing."""


import boto3
import pytest
from botocore.client import BaseClient
from test_heal import XID, Bucket, Cluster, say, stack_text
from test_heal_aws import REGION, ZONE, instance, like_ec2, pool_fleet  # noqa: F401  (like_ec2: autouse fixture)

from gpufleet.clouds import inventory
from gpufleet.errors import EXIT_BAD_INPUT, GpufleetError, InputError
from gpufleet.fleet import scale as scaling
from gpufleet.nodes.run import Seams
from gpufleet.state import events

ELASTIC = "{min: 2, max: 4}"


class Pool:
    """An elastic pool `up` brought up at its min: two nodes of one instant fleet, recorded; ``scale`` runs the
    operation through the real AWS API against moto."""

    def __init__(self, tmp_path, cat, slurm=False):
        self.fleet, self.ids = pool_fleet(2)
        ids = dict(enumerate(self.ids))
        self.c = Cluster(tmp_path, cat, stack_text(nodes=ELASTIC, slurm=slurm),
                         ids=lambda pool, i: ids[i] if pool == "gpu" else "i-ctl")
        self.bucket = Bucket()

    def scale(self, n, dry_run=False):
        api = inventory.open_clouds(["aws"], required=True, regions={"aws": [REGION]})
        return scaling.scale(self.c.stack, self.c.cat, pool="gpu", count=n, registry=self.c.reg, store=self.c.log,
                             dry_run=dry_run, seams=Seams(cloud_api=api, stores={"b": self.bucket}),
                             outputs=self.c.outputs)

    def ids_now(self):
        return [n.node_id for n in self.c.reg.get("hl").nodes if n.pool == "gpu"]

    def events(self):
        return [e for e in events.read(self.c.log, "hl") if e.get("command", "").startswith("scale")]


def test_scale_up_launches_from_the_pools_own_request_and_records_the_new_nodes(aws, tmp_path, cat):
    p = Pool(tmp_path, cat)
    out = p.scale(4)
    assert (out.before, out.after, len(out.added), out.refused) == (2, 4, 2, None)
    assert p.ids_now() == [*p.ids, *out.added]
    for i in out.added:
        made = instance(i)
        assert made["Placement"]["AvailabilityZone"] == ZONE and made["InstanceType"] == "g6.12xlarge"
        assert {t["Key"]: t["Value"] for t in made["Tags"]}["gpufleet:pool"] == "gpu"
    rec = p.c.reg.get("hl")
    assert [(n.idx, n.private_ip is not None) for n in rec.nodes] == [(0, True), (1, True), (2, True), (3, True)]
    assert {r.change for r in rec.resizes} == {"added"} and len(rec.resizes) == 2
    assert [e["action"] for e in p.events()] == ["scale-add", "scale-add"]
    # each with its code and evidence, as heal's (review rev51e finding 9)
    assert {(e["code"], e["evidence"]) for e in p.events()} == {("GF-SCALE-UP", "asked by `gpufleet scale`: pool gpu to 4 "
                                                                "node(s)")}
    assert {instance(i)["State"]["Name"] for i in p.ids} == {"running"}


def test_a_dry_run_says_what_it_would_do_and_changes_nothing(aws, tmp_path, cat):
    p = Pool(tmp_path, cat)
    out = p.scale(3, dry_run=True)
    assert out.would and not out.added and p.ids_now() == p.ids and p.events() == []
    ec2 = boto3.client("ec2", region_name=REGION)
    assert len([i for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]]) == 2


def test_a_size_outside_the_bounds_or_a_fixed_pool_is_bad_input_naming_the_range(aws, tmp_path, cat):
    p = Pool(tmp_path, cat)
    with pytest.raises(InputError) as ei:
        p.scale(5)
    assert ei.value.exit_code == EXIT_BAD_INPUT and "2 to 4" in ei.value.message
    (tmp_path / "fixed").mkdir()
    fixed = Cluster(tmp_path / "fixed", cat, stack_text(nodes=2)).stack.pools[0]
    with pytest.raises(InputError, match="is fixed") as ei:
        scaling.bounds(fixed, 3)
    assert ei.value.exit_code == EXIT_BAD_INPUT
    assert p.ids_now() == p.ids


def test_scale_down_without_slurm_removes_a_broken_node_first_and_only_it(aws, tmp_path, cat):
    p = Pool(tmp_path, cat)
    out = p.scale(4)
    say(p.bucket, p.ids[1], state="faulty", faults=[XID])
    for i in [p.ids[0], *out.added]:
        say(p.bucket, i)
    down = p.scale(3)
    assert down.removed == [p.ids[1]] and down.after == 3
    assert instance(p.ids[1])["State"]["Name"] in ("shutting-down", "terminated")
    assert {instance(i)["State"]["Name"] for i in [p.ids[0], *out.added]} == {"running"}
    assert p.ids_now() == [p.ids[0], *out.added]
    assert [(e["action"], e["code"]) for e in p.events()][-1] == ("scale-remove", "GF-SCALE-DOWN")
    assert p.events()[-1]["evidence"].endswith("pool gpu to 3 node(s)")


def test_a_refusal_is_reported_and_the_registry_and_the_pool_are_unchanged(aws, tmp_path, cat, monkeypatch):
    p = Pool(tmp_path, cat)
    real = BaseClient._make_api_call

    def no_capacity(self, op, params):  # an instant fleet's refusal is in its response (API_CreateFleet.html)
        if op == "CreateFleet":
            got = real(self, op, {**params, "TargetCapacitySpecification": {
                **params["TargetCapacitySpecification"], "TotalTargetCapacity": 1}})
            got["Errors"] = [{"ErrorCode": "InsufficientInstanceCapacity", "ErrorMessage": "We currently do not have "
                              "sufficient g6.12xlarge capacity in the Availability Zone you requested"}]
            return got
        return real(self, op, params)

    monkeypatch.setattr(BaseClient, "_make_api_call", no_capacity)
    out = p.scale(4)
    assert out.refused and "InsufficientInstanceCapacity" in out.refused and out.short and not out.added
    assert p.ids_now() == p.ids and p.c.reg.get("hl").resizes == []
    ec2 = boto3.client("ec2", region_name=REGION)
    running = [i["InstanceId"] for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]
               if i["State"]["Name"] == "running"]
    assert sorted(running) == sorted(p.ids)  # the one it launched was terminated with its fleet
    (e,) = p.events()
    assert e["refused"] is True and e["done"] is False


def test_an_api_error_changes_nothing(aws, tmp_path, cat, monkeypatch):
    from botocore.exceptions import ClientError

    p = Pool(tmp_path, cat)
    (added,) = p.scale(3).added
    for i in [*p.ids, added]:
        say(p.bucket, i)
    before = p.c.reg.get("hl")
    real = BaseClient._make_api_call

    def denied(self, op, params):
        if op in ("CreateFleet", "TerminateInstances"):
            raise ClientError({"Error": {"Code": "UnauthorizedOperation", "Message": "not allowed"}}, op)
        return real(self, op, params)

    monkeypatch.setattr(BaseClient, "_make_api_call", denied)
    for n in (4, 2):
        with pytest.raises(GpufleetError, match="UnauthorizedOperation"):
            p.scale(n)
    after = p.c.reg.get("hl")
    assert (after.nodes, after.resizes) == (before.nodes, before.resizes)
    assert {instance(i)["State"]["Name"] for i in [*p.ids, added]} == {"running"}
    assert [e["done"] for e in p.events()] == [True, False, False]


def test_remove_nodes_terminates_nothing_when_one_is_not_the_pools(aws):
    from gpufleet.clouds.aws.api import AwsApi

    _, ids = pool_fleet(2)
    _, other = pool_fleet(1, pool="other")
    with pytest.raises(GpufleetError, match="not tagged as a node of pool gpu"):
        AwsApi().remove_nodes(REGION, cluster="hl", pool="gpu", node_ids=[ids[0], other[0]])
    assert {instance(i)["State"]["Name"] for i in [*ids, *other]} == {"running"}


def test_the_request_for_more_nodes_is_valid_in_botocores_model(aws):
    """The request is the pool's, for N nodes, all or nothing, and botocore's own validator takes it."""
    from botocore.validate import ParamValidator

    from gpufleet.clouds.aws import resize

    fleet_id, _ = pool_fleet(2)
    (fleet,) = boto3.client("ec2", region_name=REGION).describe_fleets(FleetIds=[fleet_id])["Fleets"]
    model = boto3.client("ec2", region_name=REGION).meta.service_model.operation_model("CreateFleet").input_shape
    for market in (None, "spot", "on-demand"):
        req = resize.request_for(fleet, 3, market)
        report = ParamValidator().validate(req, model)
        assert not report.has_errors(), report.generate_report()
        assert req["TargetCapacitySpecification"]["TotalTargetCapacity"] == 3
        options = {None: "OnDemandOptions", "spot": "SpotOptions", "on-demand": "OnDemandOptions"}[market]
        assert req[options]["MinTargetCapacity"] == 3


def test_up_after_scale_keeps_the_added_nodes_drops_the_removed_one_and_down_leaves_nothing(aws, tmp_path, cat,
                                                                                          monkeypatch):
    """Pulumi's state still lists the pool's first two nodes after `scale`: the next `up` records the pool as
    `scale` left it (the added nodes kept, the removed one not back), terminates nothing, launches nothing;
    `status` and ssh see the same nodes; `down` deletes the added nodes' fleets by their tags."""
    pytest.importorskip("pulumi")
    from gpufleet import stacks
    from gpufleet.engine import plan as planner
    from gpufleet.fleet import down as fleet_down
    from gpufleet.fleet import up as fleet_up
    from gpufleet.state.registry import Registry
    from gpufleet.state.shared import DirectoryStore

    from fakes.pulumi_cli import FakePulumiCLI

    for var, value in (("XDG_DATA_HOME", tmp_path / "data"), ("PULUMI_BACKEND_URL", f"file://{tmp_path / 'state'}"),
                       ("PULUMI_CONFIG_PASSPHRASE", "test-passphrase")):
        monkeypatch.setenv(var, str(value))
    monkeypatch.delenv("GPUFLEET_REGISTRY", raising=False)
    (tmp_path / "hl.yaml").write_text(stack_text(nodes=ELASTIC))
    stack = stacks.load(tmp_path / "hl.yaml", cat)
    _, ids = pool_fleet(2)
    fake = FakePulumiCLI(planner.plan(stack, cat, workers=1))
    fake.plan.outputs["pools"]["gpu"].update(node_ids=ids, private_ips=[instance(i)["PrivateIpAddress"] for i in ids])

    def up():
        return fleet_up.bring_up(stacks.load(tmp_path / "hl.yaml", cat), cat, fleet_up.UpOptions(
            configure=False, check=False, seams=fleet_up.Seams(pulumi_command=fake)), confirm=lambda p: True).record

    assert [n.node_id for n in up().nodes] == ids
    (tmp_path / "log").mkdir()
    api = inventory.open_clouds(["aws"], required=True, regions={"aws": [REGION]})
    bucket = Bucket()

    def scale(n):
        return scaling.scale(stack, cat, pool="gpu", count=n, registry=Registry(), seams=Seams(
            cloud_api=api, stores={"b": bucket}), store=DirectoryStore(f"file://{tmp_path}/log"),
            outputs={"pools": {"gpu": {"bucket": {"name": "b", "cloud": "aws", "region": REGION}}}})

    added = scale(4).added
    say(bucket, ids[0], state="faulty", faults=[XID])
    for i in [ids[1], *added]:
        say(bucket, i)
    assert scale(3).removed == [ids[0]]
    want = [ids[1], *added]
    rec = up()  # Pulumi's state still lists ids[0] and not the added ones
    assert [n.node_id for n in rec.nodes] == want == [n.node_id for n in Registry().get("hl").nodes]
    assert [n.idx for n in rec.nodes] == [1, 2, 3]  # each node keeps its name (pool-idx)
    assert all(n.private_ip for n in rec.nodes)
    assert {instance(i)["State"]["Name"] for i in want} == {"running"}
    assert [n.node_id for n in up().nodes] == want  # and again: nothing added twice, nothing back
    ec2 = boto3.client("ec2", region_name=REGION)
    assert len([i for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]
                if i["State"]["Name"] == "running"]) == 3

    fleet_down.tear_down("hl", confirm=lambda r: True, pulumi_command=fake, cloud_api=api)
    left, _ = inventory.collect(api, cluster="hl")
    assert left == [] and Registry().get("hl") is None


def test_the_cli_scales_says_it_in_json_and_refuses_a_size_out_of_bounds_with_exit_2(aws, tmp_path, cat):
    import json

    from gpufleet.state.registry import Registry

    from conftest import cli

    _, ids = pool_fleet(2)
    text = stack_text(nodes=ELASTIC).replace("access: {", "access: {via: direct, ")  # ssh-config without plugins
    (tmp_path / "hl.yaml").write_text(text)
    c = Cluster(tmp_path, cat, text, ids=lambda pool, i: ids[i])
    nodes = c.reg.get("hl").nodes
    Registry().record(name="hl", stack="hl", stack_file=str(tmp_path / "hl.yaml"), owner="ops@example.com",
                      expires_at="2099-01-01T00:00:00Z", backend=None, nodes=nodes)
    got = cli("scale", "hl", "gpu", "7")
    assert got.exit_code == EXIT_BAD_INPUT and "2 to 4" in got.output and "Traceback" not in got.output
    got = cli("--json", "scale", "hl", "gpu", "3", "--dry-run")
    assert got.exit_code == 0, got.output
    doc = json.loads(got.output)
    assert (doc["dry_run"], doc["before"], doc["after"], doc["added"]) == (True, 2, 2, [])
    got = cli("--json", "scale", "hl", "gpu", "3")
    assert got.exit_code == 0, got.output
    doc = json.loads(got.output)
    assert (doc["before"], doc["after"], len(doc["added"])) == (2, 3, 1)
    assert len(Registry().get("hl").nodes) == 3
    got = cli("--json", "log", "hl")
    assert "scale add" in got.output
    new_ip = instance(doc["added"][0])["PrivateIpAddress"]
    got = cli("ssh-config", "hl")  # the added node is reached as the pool's others are
    assert got.exit_code == 0 and "hl-gpu-2" in got.output and new_ip in got.output, got.output
    got = cli("--json", "status", "hl", "--local")
    assert got.exit_code == 0 and json.loads(got.output)["clusters"][0]["nodes_recorded"] == 3, got.output


def _h(i, state="ok", drained=None, jobs=None):
    from gpufleet.nodes.health import NodeHealth

    return NodeHealth(f"gpu-{i}", "gpu", "cloud nodes", state, node_id=f"i-{i}", drained=drained, jobs=jobs)


def test_with_slurm_only_nodes_slurm_shows_drained_without_jobs_are_removed():
    nodes = [_h(0, drained=False, jobs="none"), _h(1, drained=True, jobs="running"), _h(2, drained=False, jobs="running"),
             _h(3), _h(4, drained=True, jobs="none"), _h(5, "faulty", drained=False, jobs="none")]
    chosen, held = scaling.choose(nodes, 3, slurm=True)
    assert [h.node for h in chosen] == ["gpu-4"]  # drained and idle: the only one that may go
    why = {h.node: w for h, w in held}
    assert "drain it in Slurm first" in why["gpu-0"] and "runs jobs" in why["gpu-1"] and "runs jobs" in why["gpu-2"]
    assert "not known" in why["gpu-3"] and "drain it in Slurm first" in why["gpu-5"]


def test_without_slurm_broken_nodes_go_first_then_the_newest():
    nodes = [_h(0), _h(1, "faulty"), _h(2), _h(3, "unknown")]
    chosen, _ = scaling.choose(nodes, 2, slurm=False)
    assert [h.node for h in chosen] == ["gpu-1", "gpu-3"]


def test_scale_down_with_slurm_removes_the_drained_node_and_names_the_busy_ones(aws, tmp_path, cat):
    p = Pool(tmp_path, cat, slurm=True)
    added = p.scale(4).added
    hosts = {i: f"ip-{i}" for i in [*p.ids, added[0], added[1]]}
    for i, host in hosts.items():
        say(p.bucket, i, hostname=host)
    view = "nodes\nhl-ctl idle\n" + "".join(f"{hosts[i]} {s}\n" for i, s in zip(
        [*p.ids, *added], ["allocated", "drained", "idle", "draining"])) + "jobs\ndrained\n"
    say(p.bucket, "i-ctl", pool="ctl", hostname="hl-ctl", scheduler=view)
    out = p.scale(2)
    assert out.removed == [p.ids[1]] and out.short  # one could go: the pool is 3, not 2
    assert any("runs jobs" in k for k in out.kept) and any("drain it in Slurm first" in k for k in out.kept)
    assert instance(p.ids[1])["State"]["Name"] in ("shutting-down", "terminated")
    assert {instance(i)["State"]["Name"] for i in [p.ids[0], *added]} == {"running"}


def test_an_up_that_makes_the_pool_anew_deletes_the_nodes_scale_added(aws, tmp_path, cat, monkeypatch):
    """Pulumi replaces the pool's fleet (new instances): the nodes `scale` added, in fleets of their own, are no
    nodes of the pool any more and would run on, billed, outside every list. `up` deletes them and their fleets by
    their ids among what is tagged for the pool, and forgets them."""
    pytest.importorskip("pulumi")
    from gpufleet import stacks
    from gpufleet.engine import plan as planner
    from gpufleet.fleet import up as fleet_up
    from gpufleet.state.registry import Registry
    from gpufleet.state.shared import DirectoryStore

    from fakes.pulumi_cli import FakePulumiCLI

    for var, value in (("XDG_DATA_HOME", tmp_path / "data"), ("PULUMI_BACKEND_URL", f"file://{tmp_path / 'state'}"),
                       ("PULUMI_CONFIG_PASSPHRASE", "test-passphrase")):
        monkeypatch.setenv(var, str(value))
    monkeypatch.delenv("GPUFLEET_REGISTRY", raising=False)
    (tmp_path / "hl.yaml").write_text(stack_text(nodes=ELASTIC))
    stack = stacks.load(tmp_path / "hl.yaml", cat)
    _, ids = pool_fleet(2)
    fake = FakePulumiCLI(planner.plan(stack, cat, workers=1))
    pool = fake.plan.outputs["pools"]["gpu"]
    pool.update(node_ids=ids, private_ips=[instance(i)["PrivateIpAddress"] for i in ids])

    def up():
        return fleet_up.bring_up(stacks.load(tmp_path / "hl.yaml", cat), cat, fleet_up.UpOptions(
            configure=False, check=False, seams=fleet_up.Seams(pulumi_command=fake)), confirm=lambda p: True).record

    up()
    (tmp_path / "log").mkdir()
    api = inventory.open_clouds(["aws"], required=True, regions={"aws": [REGION]})
    added = scaling.scale(stack, cat, pool="gpu", count=3, registry=Registry(), seams=Seams(cloud_api=api),
                          store=DirectoryStore(f"file://{tmp_path}/log")).added
    _, anew = pool_fleet(2, template="hl-gpu-anew")  # what Pulumi's new fleet launched
    pool.update(node_ids=anew, private_ips=[instance(i)["PrivateIpAddress"] for i in anew])
    rec = up()
    assert [n.node_id for n in rec.nodes] == anew and rec.resizes == []
    assert instance(added[0])["State"]["Name"] in ("shutting-down", "terminated")
    assert {instance(i)["State"]["Name"] for i in anew} == {"running"}


def test_a_spot_pools_scale_up_asks_spot_even_when_its_nodes_came_from_the_on_demand_fallback(aws, tmp_path, cat):
    """aws/resize.py add_nodes copies the fleet of whichever pool node it meets first (describe order), market
    included: a spot pool heal refilled from its spot_fallback (replace.request_for_one(fleet, "on-demand"), an
    instant fleet of its own) would grow on on-demand, spot never asked (botocore 1.44.8 CreateFleet:
    DefaultTargetCapacityType decides the market). Scale asks the pool's own market, as its spec says."""
    from gpufleet.clouds.aws import replace

    ec2 = boto3.client("ec2", region_name=REGION)
    fleet_id, spot_nodes = pool_fleet(2, spot=True)
    (fleet,) = ec2.describe_fleets(FleetIds=[fleet_id])["Fleets"]
    fallback = [ec2.create_fleet(**replace.request_for_one(fleet, "on-demand"))["Instances"][0]["InstanceIds"][0]
                for _ in spot_nodes]  # heal's spot_fallback replacements of both reclaimed spot nodes
    ec2.terminate_instances(InstanceIds=spot_nodes)
    ids = dict(enumerate(fallback))
    c = Cluster(tmp_path, cat, stack_text(nodes=ELASTIC).replace("nodes: {min", "spot: true, nodes: {min"),
                ids=lambda pool, i: ids[i] if pool == "gpu" else "i-ctl")
    api = inventory.open_clouds(["aws"], required=True, regions={"aws": [REGION]})
    out = scaling.scale(c.stack, c.cat, pool="gpu", count=3, registry=c.reg, store=c.log, dry_run=False,
                        seams=Seams(cloud_api=api, stores={"b": Bucket()}), outputs=c.outputs)
    (added,) = out.added
    assert instance(added).get("InstanceLifecycle") == "spot", "a spot pool grew on on-demand, copied from a fallback"


def _slot(store, node_id):
    """The slot a node's agent finds under its own id (node_agent.own_slot, as the agent reads the bucket), None: none."""
    import json

    from gpufleet.clouds import node_agent

    class AgentsView:  # NotThere for a missing object, as the agent's own S3 client says it
        def get(self, key):
            if not store.exists(key):
                raise node_agent.NotThere(f"{key}: HTTP 404")
            return store.get(key)

    got = node_agent.own_slot(AgentsView(), "gpu", node_id)
    assert got is None or json.loads(store.get(f"pools/gpu/slots/{node_id}.json"))["node_id"] == node_id
    return got


def test_with_slurm_an_added_node_takes_a_free_slot_and_a_removed_nodes_slot_is_the_next_ones(aws, tmp_path, cat):
    """Review rev51b, finding 2: `scale` (and heal's scale-up, which calls the same grow) wrote no Slurm slot for the
    node it added, so its agent started no slurmd (salt/slurm/map.jinja `listed`) and it never joined Slurm until a
    person ran `configure`. Each added node now gets its slot in the pool's bucket (here S3 on moto's server, the
    store `up` writes slots to), the lowest one no node holds, so that a pool stays within the slots slurm.conf
    declares up to max (configure.slurm): a removed node's slot is the next added node's, and the registry keeps
    that index for the next `up` (registry.resized)."""
    import boto3

    from gpufleet.clouds.aws.objects import Store
    from gpufleet.state.registry import resized

    boto3.client("s3", region_name=REGION).create_bucket(Bucket="hl-nodes")
    p = Pool(tmp_path, cat, slurm=True)
    ref = {"name": "hl-nodes", "cloud": "aws", "region": REGION}
    p.c.outputs = {"pools": {pool.name: {"bucket": ref} for pool in p.c.stack.pools}}
    p.bucket = Store(ref)  # the statuses below are written where the operation reads them (no seam names it)
    from gpufleet.nodes.cloud import channel

    channel.assign_slots(p.bucket, [channel.NodeTarget("gpu", k, i, None) for k, i in enumerate(p.ids)])  # as `up`
    (first,) = p.scale(3).added
    assert _slot(p.bucket, first) == "gpu-2"
    hosts = {i: f"gpu-{k}" for k, i in enumerate([*p.ids, first])}
    for i in hosts:
        say(p.bucket, i, hostname=f"ip-{i}")
    view = ("nodes\nhl-ctl idle\ngpu-0 drained\ngpu-1 allocated\ngpu-2 allocated\njobs\nRUNNING gpu 2 None\n"
            "drained\ngpu-0|gpufleet: release\n")
    say(p.bucket, "i-ctl", pool="ctl", hostname="hl-ctl", scheduler=view)
    assert p.scale(2).removed == [p.ids[0]]
    assert _slot(p.bucket, p.ids[0]) is None  # the removed node's slot is deleted (rev51b finding 10)
    (second,) = p.scale(3).added
    assert _slot(p.bucket, second) == "gpu-0", "the removed node's slot was not the next added node's"
    rec = p.c.reg.get("hl")
    assert sorted((n.idx, n.node_id) for n in rec.nodes if n.pool == "gpu") == [(0, second), (1, p.ids[1]), (2, first)]
    # the next `up` gets Pulumi's list back (the pool's two first nodes): the resizes leave each node at its slot
    again = resized([n for n in p.c.nodes if n.pool == "gpu"], rec.resizes)
    assert sorted((n.idx, n.node_id) for n in again) == [(0, second), (1, p.ids[1]), (2, first)]
    # one slot per node that is: what is kept stays O(pools), not O(nodes ever made)
    assert sorted(k for k, _ in p.bucket.list("pools/gpu/slots/")[0]) == sorted(
        f"pools/gpu/slots/{i}.json" for i in (second, p.ids[1], first))


def test_a_partial_launch_whose_fleet_ec2_would_not_delete_is_said_not_taken_for_a_refusal(aws, tmp_path, cat,
                                                                                           monkeypatch):
    """Review rev51b, finding 10: after a partial launch, a DeleteFleets EC2 refused was swallowed and the refusal
    said "terminated again": the launched node ran on, unrecorded, until `reap`, and heal (which forgets what a
    refusal launched) could launch again. The failure now names the nodes still running (not a refusal)."""
    from botocore.exceptions import ClientError

    p = Pool(tmp_path, cat)
    real = BaseClient._make_api_call

    def partly_and_kept(self, op, params):
        if op == "CreateFleet":
            got = real(self, op, {**params, "TargetCapacitySpecification": {
                **params["TargetCapacitySpecification"], "TotalTargetCapacity": 1}})
            got["Errors"] = [{"ErrorCode": "InsufficientInstanceCapacity", "ErrorMessage": "not enough g6.12xlarge"}]
            return got
        if op == "DeleteFleets":
            raise ClientError({"Error": {"Code": "UnauthorizedOperation", "Message": "not allowed"}}, op)
        return real(self, op, params)

    monkeypatch.setattr(BaseClient, "_make_api_call", partly_and_kept)
    with pytest.raises(GpufleetError) as e:
        p.scale(4)
    assert "could not be deleted" in e.value.message and "UnauthorizedOperation" in e.value.message
    assert "still run" in e.value.message and "terminated again" not in e.value.message
    (ev,) = p.events()
    assert ev["refused"] is False and "could not be deleted" in ev["outcome"]


def test_a_spot_pools_scale_up_keeps_the_pools_allocation_strategy_not_ec2s_lowest_price():
    """Review rev51c #4: a spot pool's growth asks market "spot" (fleet/scale.py); its request keeps the pool's own
    SpotOptions (capacity-optimized, components.py), all or nothing, not EC2's default lowest-price ("not recommended
    ... the highest risk of interruption": botocore 1.44.8's EC2 model, SpotOptionsRequest AllocationStrategy)."""
    from gpufleet.clouds.aws import replace, resize

    fleet = {"LaunchTemplateConfigs": [{"LaunchTemplateSpecification": {"LaunchTemplateId": "lt-1", "Version": "1"},
                                        "Overrides": [{"InstanceType": "p5.48xlarge", "SubnetId": "subnet-1"}]}],
             "TargetCapacitySpecification": {"TotalTargetCapacity": 2, "DefaultTargetCapacityType": "spot"},
             "SpotOptions": {"AllocationStrategy": "capacity-optimized", "InstanceInterruptionBehavior": "terminate",
                             "MinTargetCapacity": 2, "SingleAvailabilityZone": True, "SingleInstanceType": True},
             "Tags": []}
    req = resize.request_for(fleet, 3, "spot")
    assert req["SpotOptions"] == {**fleet["SpotOptions"], "MinTargetCapacity": 3}
    assert req["TargetCapacitySpecification"]["TotalTargetCapacity"] == 3
    # on the other market (a spot_fallback): that market's options, the replacement's table, all or nothing
    od = resize.request_for(fleet, 3, "on-demand")
    assert "SpotOptions" not in od and od["OnDemandOptions"]["MinTargetCapacity"] == 3
    assert od["OnDemandOptions"]["AllocationStrategy"] == replace.MARKET_OPTIONS["on-demand"][1]["AllocationStrategy"]

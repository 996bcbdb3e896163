"""A faulty GCP node replaced through its pool's own request, against the Compute fake (tests/fakes/gcp.py,
answering instances.bulkInsert, instances.list/aggregatedList, disks.get and instances.delete as the REST
reference documents them) through google-cloud-compute's own REST transport and types.

The pool is made as `up` makes it: one all-or-nothing bulkInsert of ``components.instance_properties`` with its
compact placement policy (``pool_vms.create_nodes``). A replacement asks the same InstanceProperties again for
one VM, in the pool's zone, then deletes the faulty VM once its own labels name the pool."""

import datetime as dt
import json

import pytest
from test_heal import XID, Cluster, say

from gpufleet.clouds import inventory
from gpufleet.clouds.gcp import pool_vms
from gpufleet.clouds.gcp.tags import labels
from gpufleet.errors import CapacityError, GpufleetError, ReplacementUnfinished

pytest.importorskip("pulumi")

REGION, ZONE = "us-central1", "us-central1-a"
SUBNET = "projects/gpufleet-test/regions/us-central1/subnetworks/hl-us-central1-gpu"
IMAGE = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts"


def tags(pool="gpu"):
    return {"gpufleet:cluster": "hl", "gpufleet:pool": pool, "gpufleet:stack": "hl",
            "gpufleet:owner": "ops@example.com", "gpufleet:expires-at": "2099-01-01T00:00:00Z"}


def pool(n: int = 2, name: str = "gpu", spot: bool = False, machine: str = "a3-highgpu-8g") -> tuple[dict, list[str]]:
    """The pool's VMs as `up` makes them (components' InstanceProperties, one bulkInsert with its compact
    placement policy); (its BulkInstances props, the VMs' ids in order)."""
    from gpufleet.clouds.gcp.api import GcpApi
    from gpufleet.clouds.gcp.components import PoolArgs, instance_properties
    from gpufleet.clouds.gcp.rules import gcp_name
    from gpufleet.clouds.gcp.tags import describe

    args = PoolArgs(cluster="hl", pool=name, machine_type=machine, gpu="H100", gpu_count=8, gpu_attach="bundled",
                    nodes=n, zone=ZONE, region=REGION, image=IMAGE, subnet_id=SUBNET, network_id="net",
                    labels=labels(tags(name)), spot=spot)
    sa = {"email": f"gf-hl-{name}@gpufleet-test.iam.gserviceaccount.com",
          "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}
    props = {"zone": ZONE, "region": REGION, "project": None, "public": False,
             "policies": [pool_vms.placement_policy(gcp_name("hl", name, "compact", "0"), describe(tags(name)))],
             "names": [gcp_name("hl", name, str(i)) for i in range(n)],
             "properties": instance_properties(args, [{"subnetwork": SUBNET, "nicType": "GVNIC"}],
                                               {"enable-oslogin": "FALSE", "startup-script": "#!/bin/sh\necho hi\n"},
                                               sa)}
    return props, pool_vms.create_nodes(props, GcpApi())["node_ids"]


def vms(gcp) -> dict[str, dict]:
    """id -> the VM as the fake holds it."""
    return {i["id"]: i for (c, _, _), i in gcp.items.items() if c == "instances"}


def api():
    from gpufleet.clouds.gcp.api import GcpApi

    return GcpApi()


def test_a_node_is_replaced_from_the_pools_own_request_and_the_old_one_deleted(gcp):
    props, ids = pool(2)
    _, others = pool(1, name="other")
    before = len(gcp.bulk_bodies)
    got = api().replace_node(REGION, cluster="hl", pool="gpu", node_id=ids[0])
    (asked,) = gcp.bulk_bodies[before:]
    own = pool_vms.request(props["names"], props["properties"], props["policies"][0])["instanceProperties"]
    # the pool's own InstanceProperties, its placement policy among them; the boot image as the disk names it
    image = asked["instanceProperties"]["disks"][0]["initializeParams"].pop("sourceImage")
    assert image.endswith(IMAGE)
    own["disks"][0]["initializeParams"].pop("sourceImage")
    assert asked["instanceProperties"] == own
    assert (asked["count"], asked["minCount"]) == ("1", "1") and len(asked["perInstanceProperties"]) == 1
    now = vms(gcp)
    assert ids[0] not in now and ids[1] in now and others[0] in now  # the faulty VM only
    new = now[got["id"]]
    assert new["zone"].endswith(ZONE) and got["zone"] == ZONE and got["private_ip"]
    assert got["fleet_id"] == new["name"]  # what `up` deletes by name if Pulumi makes the pool anew
    assert not any(c == "disks" and n == props["names"][0] for c, _, n in gcp.items)  # its boot disk with it


def test_the_request_is_valid_in_google_cloud_computes_own_types(gcp):
    """What is sent parses as google-cloud-compute 1.57's BulkInsertInstanceResource with no unknown field, and the
    names follow the forms InstanceProperties documents: a machine type name (a URL is an INTERNAL_ERROR), resource
    policies by name, not URL."""
    from google.cloud import compute_v1

    pool(2)
    before = len(gcp.bulk_bodies)
    api().replace_node(REGION, cluster="hl", pool="gpu", node_id=next(iter(vms(gcp))))
    (asked,) = gcp.bulk_bodies[before:]
    parsed = compute_v1.BulkInsertInstanceResource.from_json(json.dumps(asked), ignore_unknown_fields=False)
    assert parsed.instance_properties.machine_type == "a3-highgpu-8g"
    assert list(parsed.instance_properties.resource_policies) == ["hl-gpu-compact-0"]
    assert parsed.instance_properties.scheduling.provisioning_model == "STANDARD"
    # and what the fake answers, which the replacement reads, is in the same types' own fields
    for (collection, _, _), item in list(gcp.items.items()):
        kind = {"instances": compute_v1.Instance, "disks": compute_v1.Disk}.get(collection)
        if kind is not None:
            kind.from_json(json.dumps(item), ignore_unknown_fields=False)


def test_a_capacity_refusal_is_a_capacity_error_and_nothing_is_deleted(gcp):
    _, ids = pool(2)
    gcp.zone_capacity[ZONE] = 0
    with pytest.raises(CapacityError) as ei:
        api().replace_node(REGION, cluster="hl", pool="gpu", node_id=ids[0])
    assert ei.value.code == "ZONE_RESOURCE_POOL_EXHAUSTED"
    assert sorted(vms(gcp)) == sorted(ids)


def test_a_vm_not_labelled_for_the_pool_is_never_deleted(gcp):
    _, ids = pool(1)
    _, others = pool(1, name="other")
    with pytest.raises(GpufleetError, match="not labelled as a node of pool gpu"):
        api().replace_node(REGION, cluster="hl", pool="gpu", node_id=others[0])
    with pytest.raises(GpufleetError, match="not labelled as a node of pool gpu"):
        api().remove_nodes(REGION, cluster="hl", pool="gpu", node_ids=[ids[0], others[0]])
    assert sorted(vms(gcp)) == sorted(ids + others)
    assert not [p for m, p in gcp.calls if m == "DELETE"] and len(gcp.bulk_bodies) == 2  # the two pools' own


def test_a_deleted_spot_vm_is_said_gone_and_one_vm_more_is_asked_nothing_deleted(gcp):
    """A preempted spot VM (instanceTerminationAction DELETE) is no longer listed: the cloud's own answer."""
    props, ids = pool(2, spot=True)
    api().remove_nodes(REGION, cluster="hl", pool="gpu", node_ids=[ids[0]])  # as the preemption leaves it
    gcp.calls.clear()
    assert api().gone_nodes(REGION, cluster="hl", pool="gpu", node_ids=ids) == {ids[0]}
    got = api().replace_node(REGION, cluster="hl", pool="gpu", node_id=ids[0])
    assert sorted(vms(gcp)) == sorted([ids[1], got["id"]]) and not [p for m, p in gcp.calls if m == "DELETE"]
    assert vms(gcp)[got["id"]]["scheduling"]["provisioningModel"] == "SPOT"  # copied from its surviving peer


def test_a_replacement_whose_delete_is_refused_is_finished_later_without_a_second_launch(gcp):
    """Review of issue 51, finding 3 (GCP): the new VM is said (on_launch) before the old one is deleted; that
    refused, the replacement is unfinished, and the next call finishes it, launching none, even without heal's
    memory (the new VM's name is derived from the one it replaces)."""
    _, ids = pool(2)
    gcp.faults[("DELETE", r"/instances/[^/]+$")] = [
        (403, {"error": {"code": 403, "message": "Required 'compute.instances.delete' permission",
                         "errors": [{"reason": "forbidden", "message": "denied"}]}}, {})]
    said = []
    with pytest.raises(ReplacementUnfinished) as ei:
        api().replace_node(REGION, cluster="hl", pool="gpu", node_id=ids[0], on_launch=said.append)
    assert said == [ei.value.launched] and ids[0] in vms(gcp) and said[0] in vms(gcp)
    done = api().replace_node(REGION, cluster="hl", pool="gpu", node_id=ids[0], launched=said[0])
    assert done["id"] == said[0] and ids[0] not in vms(gcp)
    again = api().replace_node(REGION, cluster="hl", pool="gpu", node_id=ids[0])  # heal's memory lost
    assert again["id"] == said[0] and len(gcp.bulk_bodies) == 2  # the pool's, and one replacement


def test_on_reserved_capacity_the_faulty_vm_goes_first(gcp):
    """A reservation sized to the pool has no slot for a VM more: the faulty one frees its slot first."""
    _, ids = pool(2)
    got = api().replace_node(REGION, cluster="hl", pool="gpu", node_id=ids[0], release_first=True)
    order = [m for m, p in gcp.calls if (m == "DELETE" and "/instances/" in p) or p.endswith("/bulkInsert")]
    assert order[-2:] == ["DELETE", "POST"] and sorted(vms(gcp)) == sorted([ids[1], got["id"]])


def test_nodes_are_added_and_removed_through_the_pools_own_request(gcp):
    _, ids = pool(2)
    said = []
    added = api().add_nodes(REGION, cluster="hl", pool="gpu", count=2, on_launch=said.append)
    assert [a["id"] for a in added] == said and len(said) == 2 and all(a["zone"] == ZONE for a in added)
    assert {vms(gcp)[a["id"]]["labels"]["gpufleet-pool"] for a in added} == {"gpu"}
    api().remove_nodes(REGION, cluster="hl", pool="gpu", node_ids=said)
    assert sorted(vms(gcp)) == sorted(ids)


def test_spot_first_then_the_market_asked_for(gcp):
    """``market`` overrides the pool's own: on-demand asks a STANDARD VM of a spot pool (spot_fallback)."""
    _, ids = pool(2, spot=True)
    got = api().replace_node(REGION, cluster="hl", pool="gpu", node_id=ids[0], market="on-demand")
    sched = vms(gcp)[got["id"]]["scheduling"]
    assert sched["provisioningModel"] == "STANDARD" and not sched.get("preemptible")


# --- heal, end to end --------------------------------------------------------------------------

def gcp_stack(spot: bool = False, fallback: bool = False, slurm: bool = False) -> str:
    from test_heal import KEY

    extra = (", spot: true" if spot else "") + (", failover: {spot_fallback: on-demand}" if fallback else "")
    ctl = ("  - {name: ctl, provider: gcp, region: us-central1, zone: us-central1-a, instance_type: g2-standard-4, "
           "role: controller, nodes: 1}\n") if slurm else ""
    return (f"name: hl\nowner: ops@example.com\naccess: {{public_key: '{KEY}'}}\n" + ("slurm: {}\n" if slurm else "")
            + "pools:\n" + ctl + "  - {name: gpu, provider: gcp, region: us-central1, zone: us-central1-a, "
            f"instance_type: a3-highgpu-8g, nodes: 2, health: {{on_fault: replace, max_replacements: 2}}{extra}}}\n")


def healed_cluster(gcp, tmp_path, cat, ids, **kw) -> Cluster:
    c = Cluster(tmp_path, cat, gcp_stack(**kw), ids=lambda p, i: ids[i] if p == "gpu" else "ctl-0")
    c.api = inventory.open_clouds(["gcp"], required=True, regions={"gcp": [REGION]})["gcp"]
    return c


def test_heal_replaces_a_faulty_node_of_a_gcp_pool_end_to_end(gcp, tmp_path, cat):
    """With Slurm: on GCP any node of a pool can write its peers' statuses, so a node is replaced only once the
    controller's Slurm view says it is drained for gpufleet's own reason."""
    _, ids = pool(2)
    c = healed_cluster(gcp, tmp_path, cat, ids, slurm=True)
    say(c.bucket, ids[0], state="faulty", faults=[XID], hostname="hl-gpu-0")
    say(c.bucket, ids[1], hostname="hl-gpu-1")
    say(c.bucket, "ctl-0", pool="ctl", hostname="hl-ctl",
        scheduler="nodes\nhl-ctl idle\nhl-gpu-0 drained\nhl-gpu-1 idle\njobs\ndrained\n"
                  "hl-gpu-0|gpufleet: GF-XID-FATAL health.xid\n")
    out = c.heal(dt.datetime.now(dt.timezone.utc))
    assert [r.done for r in out.repaired] == [True], out.repaired
    new = c.node_ids()[1]
    assert new not in ids and c.node_ids()[2] == ids[1] and ids[0] not in vms(gcp)
    assert vms(gcp)[new]["zone"].endswith(ZONE)
    (e,) = [e for e in c.events() if e["action"] == "replace"]
    assert e["code"] == "GF-XID-FATAL" and new in e["outcome"]


def test_a_capacity_refusal_is_reported_and_retried_after_a_backoff_not_looped(gcp, tmp_path, cat):
    _, ids = pool(2)
    c = healed_cluster(gcp, tmp_path, cat, ids)
    say(c.bucket, ids[1])
    gcp.zone_capacity[ZONE] = 0
    # without Slurm, a GCP node's own word is never enough to terminate it (any node of its pool may write its
    # status): a VM the cloud says is gone is, so the first VM is deleted here, as a preempted spot VM is
    api().remove_nodes(REGION, cluster="hl", pool="gpu", node_ids=[ids[0]])
    now = dt.datetime.now(dt.timezone.utc)
    first = c.heal(now)
    assert [(r.done, r.refused) for r in first.repaired] == [(False, True)] and not first.trouble
    asked = len(gcp.bulk_bodies)
    second = c.heal(now + dt.timedelta(seconds=60))  # inside the backoff: not asked again
    assert [d.action for d in second.decisions if d.node == "gpu-0"] == ["wait"] and len(gcp.bulk_bodies) == asked
    gcp.zone_capacity.clear()
    third = c.heal(now + dt.timedelta(hours=1))
    assert [r.done for r in third.repaired] == [True] and len(gcp.bulk_bodies) == asked + 1
    assert len(vms(gcp)) == 2  # nothing leaked
    memory = json.loads(c.log.read("heal/hl.json")[0])
    assert set(memory["pools"]) == {"gpu"} and len(memory["nodes"]) <= 2  # O(pools), not O(passes)


def test_an_api_error_never_replaces(gcp, tmp_path, cat):
    _, ids = pool(2)
    c = healed_cluster(gcp, tmp_path, cat, ids)
    say(c.bucket, ids[1])  # ids[0] says nothing: only the cloud could say it is gone, and the cloud errs
    gcp.faults[("GET", r"/aggregated/instances$")] = [
        (403, {"error": {"code": 403, "message": "Required 'compute.instances.list' permission",
                         "errors": [{"reason": "forbidden", "message": "denied"}]}}, {})] * 4
    out = c.heal(dt.datetime.now(dt.timezone.utc))
    assert [d.action for d in out.decisions] == ["skip", "none"] and out.repaired == []
    assert sorted(vms(gcp)) == sorted(ids) and len(gcp.bulk_bodies) == 1


def test_a_spot_refusal_falls_back_to_the_pools_spot_fallback_and_says_so(gcp, tmp_path, cat):
    """Review of issue 51, finding 13: spot first; refused, the pool's spot_fallback (on-demand); the event says
    which market the new node is on."""
    _, ids = pool(2, spot=True)
    c = healed_cluster(gcp, tmp_path, cat, ids, spot=True, fallback=True)
    say(c.bucket, ids[1])
    api().remove_nodes(REGION, cluster="hl", pool="gpu", node_ids=[ids[0]])  # preempted
    gcp.spot_capacity[ZONE] = 0  # no spot VM in the zone; on-demand ones there are
    before = len(gcp.bulk_bodies)
    out = c.heal(dt.datetime.now(dt.timezone.utc))
    assert [r.done for r in out.repaired] == [True], out.repaired
    asked = [b["instanceProperties"]["scheduling"]["provisioningModel"] for b in gcp.bulk_bodies[before:]]
    assert asked == ["SPOT", "STANDARD"]  # spot first, refused
    new = c.node_ids()[0]
    assert vms(gcp)[new]["scheduling"]["provisioningModel"] == "STANDARD"
    (e,) = [e for e in c.events() if e["action"] == "replace"]
    assert "on-demand" in e["outcome"] and "spot_fallback" in e["outcome"]


def test_a_flex_start_pools_node_is_isolated_never_replaced(tmp_path, cat):
    """A flex-start pool's VMs are its managed instance group's (clouds.gcp.flexstart): heal never asks the pool's
    bulkInsert request for them; a faulty one is isolated."""
    from test_heal import Api

    c = Cluster(tmp_path, cat, gcp_stack(slurm=True).replace("nodes: 2,", "nodes: 2, flex_start: {run_hours: 24},"),
                api=Api(), ids=lambda p, i: f"{p}{i}")
    say(c.bucket, "gpu0", state="faulty", faults=[XID], hostname="hl-gpu-0")
    say(c.bucket, "ctl0", pool="ctl", hostname="hl-ctl",
        scheduler="nodes\nhl-ctl idle\nhl-gpu-0 drained\njobs\ndrained\nhl-gpu-0|gpufleet: GF-XID-FATAL health.xid\n")
    out = c.heal(dt.datetime.now(dt.timezone.utc))
    (d,) = [d for d in out.decisions if d.node == "gpu-0"]
    assert d.action == "isolate" and "flex-start" in d.why and c.api.asked == []


def test_up_heal_up_down_keeps_the_new_vm_and_leaves_nothing(gcp, tmp_path, cat, monkeypatch):
    """The whole life: `up` records the pool's VMs; a spot VM is preempted (deleted) and `heal` replaces it from the
    pool's request; the next `up` keeps the new VM where Pulumi's list still names the old one; an `up` that makes
    the pool anew deletes the VM heal made (by its name, among what is labelled for the pool); `down` leaves
    nothing labelled for the cluster."""
    from test_heal import Bucket

    from gpufleet import stacks
    from gpufleet.engine import plan as planner
    from gpufleet.fleet import down as fleet_down
    from gpufleet.fleet import heal as healing
    from gpufleet.fleet import up as fleet_up
    from gpufleet.nodes.run import Seams
    from gpufleet.state.registry import Registry
    from gpufleet.state.shared import DirectoryStore

    from fakes.pulumi_cli import FakePulumiCLI

    for var, value in (("XDG_DATA_HOME", tmp_path / "data"), ("PULUMI_BACKEND_URL", f"file://{tmp_path / 'state'}"),
                       ("PULUMI_CONFIG_PASSPHRASE", "test-passphrase")):
        monkeypatch.setenv(var, str(value))
    monkeypatch.delenv("GPUFLEET_REGISTRY", raising=False)
    props, ids = pool(2, spot=True)
    (tmp_path / "hl.yaml").write_text(gcp_stack(spot=True))
    stack = stacks.load(tmp_path / "hl.yaml", cat)
    fake = FakePulumiCLI(planner.plan(stack, cat, workers=1))
    outputs = fake.plan.outputs["pools"]["gpu"]  # Pulumi's state: the pool's VMs as BulkInstances read them
    outputs.update(node_ids=ids, private_ips=[vms(gcp)[i]["networkInterfaces"][0]["networkIP"] for i in ids])

    def up():
        return fleet_up.bring_up(stack, cat, fleet_up.UpOptions(configure=False, check=False,
                                                                seams=fleet_up.Seams(pulumi_command=fake)),
                                 confirm=lambda p: True).record

    assert [n.node_id for n in up().nodes] == ids
    api().remove_nodes(REGION, cluster="hl", pool="gpu", node_ids=[ids[0]])  # preempted: deleted
    bucket = Bucket()
    say(bucket, ids[1])
    (tmp_path / "log").mkdir()
    clouds = inventory.open_clouds(["gcp"], required=True, regions={"gcp": [REGION]})
    out = healing.heal(stack, cat, registry=Registry(), store=DirectoryStore(f"file://{tmp_path}/log"),
                       seams=Seams(cloud_api=clouds, stores={"b": bucket}),
                       outputs={"pools": {"gpu": {"bucket": {"name": "b", "cloud": "gcp", "region": REGION}}}},
                       now=dt.datetime.now(dt.timezone.utc))
    ((new, name),) = [(r.new.node_id, r.fleet) for r in out.repaired if r.done]
    assert [n.node_id for n in up().nodes] == [new, ids[1]]  # Pulumi's list still names the preempted VM
    assert vms(gcp)[new]["name"] == name

    _, anew = pool(2, name="gpu-anew")  # what Pulumi's new bulkInsert made, relabelled as the pool's own
    for i in anew:
        vms(gcp)[i]["labels"]["gpufleet-pool"] = "gpu"
    outputs.update(node_ids=anew, private_ips=[vms(gcp)[i]["networkInterfaces"][0]["networkIP"] for i in anew])
    rec = up()
    assert [n.node_id for n in rec.nodes] == anew and rec.replacements == [] and new not in vms(gcp)
    assert ids[1] in vms(gcp)  # Pulumi's own old VMs are Pulumi's to delete, not heal's

    fleet_down.tear_down("hl", confirm=lambda r: True, pulumi_command=fake, cloud_api=clouds)
    assert Registry().get("hl") is None and inventory.collect(clouds, cluster="hl") == ([], {})


def test_gpufleet_scale_grows_and_shrinks_a_gcp_pool_through_its_own_request(gcp, tmp_path, cat):
    """`gpufleet scale` on GCP (issue 51, step 5): the added VMs come from the pool's own InstanceProperties in its
    zone and are recorded after the pool's nodes; shrinking deletes only the newest (no Slurm: none is broken)."""
    from gpufleet.fleet import scale as scaling
    from gpufleet.nodes.run import Seams

    props, ids = pool(2)
    _, others = pool(1, name="other")
    c = Cluster(tmp_path, cat, gcp_stack().replace("nodes: 2", "nodes: {min: 2, max: 4}"),
                ids=lambda p, i: ids[i])

    def scale(n):
        return scaling.scale(c.stack, cat, pool="gpu", count=n, registry=c.reg, store=c.log,
                             seams=Seams(cloud_api=inventory.open_clouds(["gcp"], required=True,
                                                                         regions={"gcp": [REGION]})),
                             outputs=c.outputs)

    before = len(gcp.bulk_bodies)
    out = scale(4)
    assert (out.before, out.after, len(out.added)) == (2, 4, 2)
    asked = gcp.bulk_bodies[before:]
    own = pool_vms.request(props["names"], props["properties"], props["policies"][0])["instanceProperties"]
    for body in asked:
        body["instanceProperties"]["disks"][0]["initializeParams"].pop("sourceImage")
    own["disks"][0]["initializeParams"].pop("sourceImage")
    assert all(b["instanceProperties"] == own for b in asked)
    now = vms(gcp)
    assert all(i in now and now[i]["zone"].endswith(ZONE) for i in out.added)
    assert [n.node_id for n in c.reg.get("hl").nodes] == [*ids, *out.added]
    out = scale(2)
    assert out.after == 2 and set(vms(gcp)) == {*ids, *others}
    assert [n.node_id for n in c.reg.get("hl").nodes] == ids


def test_the_replacement_of_a_vm_the_spot_fallback_made_asks_spot_first_again(gcp, tmp_path, cat):
    """A spot pool's node that its spot_fallback put on on-demand is replaced on the pool's own market (spot) first,
    not on the market of the VM it replaces: the pool does not drift to on-demand slot by slot."""
    _, ids = pool(2, spot=True)
    c = healed_cluster(gcp, tmp_path, cat, ids, spot=True, fallback=True, slurm=True)

    def faulty(node_id):  # the node says a fatal Xid and the controller's Slurm view has it drained by its watch
        say(c.bucket, node_id, state="faulty", faults=[XID], hostname="hl-gpu-0")
        say(c.bucket, ids[1], hostname="hl-gpu-1")
        say(c.bucket, "ctl-0", pool="ctl", hostname="hl-ctl",
            scheduler="nodes\nhl-ctl idle\nhl-gpu-0 drained\nhl-gpu-1 idle\njobs\ndrained\n"
                      "hl-gpu-0|gpufleet: GF-XID-FATAL health.xid\n")

    faulty(ids[0])
    gcp.spot_capacity[ZONE] = 0
    now = dt.datetime.now(dt.timezone.utc)
    assert [r.done for r in c.heal(now).repaired] == [True]
    fallback = c.node_ids()[1]
    assert vms(gcp)[fallback]["scheduling"]["provisioningModel"] == "STANDARD"
    gcp.spot_capacity.clear()
    faulty(fallback)
    before = len(gcp.bulk_bodies)
    assert [r.done for r in c.heal(now + dt.timedelta(minutes=1)).repaired] == [True]
    asked = [b["instanceProperties"]["scheduling"]["provisioningModel"] for b in gcp.bulk_bodies[before:]]
    assert asked == ["SPOT"] and vms(gcp)[c.node_ids()[1]]["scheduling"]["provisioningModel"] == "SPOT"


class Deletion:
    """An instances.delete operation as google-api-core's ExtendedOperation answers ``result``: raising what its
    wait met (``error``), the VM left as it was."""

    def __init__(self, error: Exception):
        self.error = error

    def result(self, timeout=None):
        raise self.error


def failing_delete(monkeypatch, error: Exception):
    """Every instances.delete of the GcpApi this returns answers ``error`` from its operation's result."""
    gcp_api = api()
    client = gcp_api.client("InstancesClient")
    monkeypatch.setattr(type(client), "delete", lambda self, **kw: Deletion(error))
    monkeypatch.setattr(gcp_api, "client", lambda name: client if name == "InstancesClient" else api().client(name))
    return gcp_api


def test_a_delete_that_outlasts_its_wait_is_a_gpufleet_error(gcp, monkeypatch):
    """release_first waits DELETE_WAIT_S for the old VM's deletion; google-api-core's operation.result(timeout)
    raises concurrent.futures.TimeoutError when it runs out (api_core/future/polling.py: RetryError turned into
    TimeoutError): a GpufleetError heal reports, not a traceback that leaves its pass unwritten."""
    import concurrent.futures

    _, ids = pool(1)
    gcp_api = failing_delete(monkeypatch, concurrent.futures.TimeoutError("Operation did not complete within the "
                                                                          "designated timeout 900"))
    with pytest.raises(GpufleetError, match="not deleted within 900 s"):
        gcp_api.replace_node(REGION, cluster="hl", pool="gpu", node_id=ids[0], release_first=True)
    with pytest.raises(GpufleetError):
        gcp_api.remove_nodes(REGION, cluster="hl", pool="gpu", node_ids=ids)
    assert len(gcp.bulk_bodies) == 1  # nothing made while the old VM's slot is not free


def test_an_old_vm_whose_deletion_fails_afterwards_keeps_the_replacement_unfinished(gcp, monkeypatch):
    """The old VM's delete operation is awaited: one that fails in the operation (deletionProtection set by a
    person) is ReplacementUnfinished, so heal keeps the old VM recorded and finishes later, never says it went."""
    from google.api_core import exceptions as gx

    _, ids = pool(2)
    gcp_api = failing_delete(monkeypatch, gx.BadRequest("Resource cannot be deleted: deletionProtection is set"))
    with pytest.raises(ReplacementUnfinished, match="deletionProtection") as ei:
        gcp_api.replace_node(REGION, cluster="hl", pool="gpu", node_id=ids[0])
    assert ids[0] in vms(gcp) and ei.value.launched in vms(gcp)


def test_a_launched_successor_that_vanished_is_forgotten_and_the_node_replaced_anew(gcp, tmp_path, cat):
    """heal's memory names a successor the region no longer holds (a spot successor preempted before the finish):
    not an error every pass; forgotten (its launch was counted), and a later pass asks again."""
    from gpufleet.fleet.heal import state_key, write_state

    _, ids = pool(2)
    c = healed_cluster(gcp, tmp_path, cat, ids)
    say(c.bucket, ids[1])
    api().remove_nodes(REGION, cluster="hl", pool="gpu", node_ids=[ids[0]])
    write_state(c.log, "hl", {"pools": {}, "nodes": {"gpu-0": {"launched": "4242424242"}}}, None)
    now = dt.datetime.now(dt.timezone.utc)
    first = c.heal(now)
    assert [(r.done, r.forgotten) for r in first.repaired] == [(False, True)], first.repaired
    assert "launched" not in json.loads(c.log.read(state_key("hl"))[0])["nodes"]["gpu-0"]
    second = c.heal(now + dt.timedelta(minutes=1))
    assert [r.done for r in second.repaired] == [True] and c.node_ids()[0] in vms(gcp)


# --- a pool with no VM left: its request as `up` kept it in the pool's stack output ------------------------------

def kept(props: dict) -> dict:
    """The request `up` keeps in the pool's stack output (components: pool_vms.kept_request of its BulkInstances)."""
    return pool_vms.kept_request(props["zone"], props["properties"], props.get("policies") or [])


def test_a_preempted_one_node_spot_pool_is_replaced_from_its_kept_request(gcp):
    """A spot pool of one VM, preempted (instanceTerminationAction DELETE: the VM is gone): no VM is left to read the
    request from; the one `up` kept is asked, on spot."""
    props, ids = pool(1, spot=True)
    api().remove_nodes(REGION, cluster="hl", pool="gpu", node_ids=ids)  # as the preemption leaves it
    assert api().gone_nodes(REGION, cluster="hl", pool="gpu", node_ids=ids) == set(ids)
    got = api().replace_node(REGION, cluster="hl", pool="gpu", node_id=ids[0], request=kept(props))
    assert vms(gcp)[got["id"]]["scheduling"]["provisioningModel"] == "SPOT"


def test_every_vm_of_a_spot_pool_preempted_at_once_is_replaced_in_its_compact_policy(gcp):
    """GCP reclaims a zone's spot capacity together: a pool whose VMs all went is asked again from its kept
    request, in its own compact placement policy."""
    props, ids = pool(2, spot=True)
    api().remove_nodes(REGION, cluster="hl", pool="gpu", node_ids=ids)
    with pytest.raises(GpufleetError, match="has no VM left to read its request from, and its stack keeps none"):
        api().replace_node(REGION, cluster="hl", pool="gpu", node_id=ids[0])  # a stack `up` made before: said so
    got = api().replace_node(REGION, cluster="hl", pool="gpu", node_id=ids[0], request=kept(props))
    assert [p.rsplit("/", 1)[-1] for p in vms(gcp)[got["id"]]["resourcePolicies"]] == [props["policies"][0]["name"]]


def test_a_reserved_one_node_pool_whose_create_was_refused_is_asked_again(gcp):
    """release_first (a reserved pool): the old VM is deleted first; the bulkInsert refused, the next pass asks the
    kept request again, though the pool has no VM left."""
    props, ids = pool(1)
    gcp.zone_capacity[ZONE] = 0
    with pytest.raises(CapacityError):
        api().replace_node(REGION, cluster="hl", pool="gpu", node_id=ids[0], release_first=True, request=kept(props))
    assert vms(gcp) == {}  # the old VM went first, nothing was made
    gcp.zone_capacity.pop(ZONE)
    got = api().replace_node(REGION, cluster="hl", pool="gpu", node_id=ids[0], release_first=True,
                             request=kept(props))
    assert got["id"] in vms(gcp)


def test_heal_replaces_a_pool_with_no_vm_left_from_its_stack_output(gcp, tmp_path, cat):
    """heal passes the request the pool's stack output keeps (engine.program's export, ``request``)."""
    props, ids = pool(2, spot=True)
    c = healed_cluster(gcp, tmp_path, cat, ids, spot=True)
    c.outputs["pools"]["gpu"]["request"] = kept(props)
    api().remove_nodes(REGION, cluster="hl", pool="gpu", node_ids=ids)  # every spot VM reclaimed
    out = c.heal(dt.datetime.now(dt.timezone.utc))
    assert [r.done for r in out.repaired] == [True, True], out.repaired
    assert sorted(c.node_ids()) == sorted(vms(gcp)) and not set(ids) & set(vms(gcp))

"""Capacity failover end to end: `up` through the Pulumi stand-in, which replays the clouds'
documented refusals (tests/data/refusals/, each with its source) and registers what the same
program registers under Pulumi's mocks for each attempt's placement; AWS itself is moto's HTTP
server, where a refused attempt's stray instance is launched and must be gone afterwards.
The `up` runs are marked slow (a few CPU-seconds each): `make test-fast` leaves them out.
"""

import datetime as dt
import json

import boto3
import pytest

from gpufleet import stacks
from gpufleet.clouds import candidates
from gpufleet.engine import plan as planner
from gpufleet.errors import GpufleetError, SpecErrors
from gpufleet.fleet import budgets
from gpufleet.fleet import up as fleet_up
from gpufleet.nodes.cloud import failover
from gpufleet.state.registry import Node, Registry

from conftest import ROOT, cli

EXAMPLES = ROOT / "stacks" / "examples"
REFUSALS = ROOT / "tests" / "data" / "refusals"
P_VCPUS = "L-417A185B"  # Running On-Demand P instances (Service Quotas), counted in vCPUs
FLEET = "aws:ec2/fleet:Fleet"  # a pool's one request (its reader fails when it came back short)


def refusal(cloud: str, name: str) -> str:
    """A recorded refusal as Pulumi prints it (the file's comment lines name its source)."""
    text = (REFUSALS / cloud / f"{name}.txt").read_text()
    return "\n".join(line for line in text.splitlines() if not line.startswith("#")).strip()


def short_fleet() -> str:
    """How `up` fails when a pool's instant fleet came back empty: its reader (clouds.aws.pool_vms) raises
    EC2's error for the fleet (here the recorded InsufficientInstanceCapacity), and Pulumi's Python
    dynamic providers fail through gRPC, which words it "Exception calling application"."""
    from gpufleet.clouds.aws.pool_vms import shortfall

    said = refusal("aws", "insufficient_instance_capacity").split("InsufficientInstanceCapacity: ", 1)[1]
    error = {"code": "InsufficientInstanceCapacity", "message": said.splitlines()[0]}
    return "error: Exception calling application: " + shortfall("fleet-0a1b2c3d", 0, 2, [error])


@pytest.fixture(autouse=True)
def _env(aws, tmp_path, monkeypatch):
    monkeypatch.setenv("PULUMI_BACKEND_URL", "file://" + str(tmp_path / "state"))
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "test-passphrase")
    monkeypatch.delenv("GPUFLEET_REGISTRY", raising=False)


def with_failover(tmp_path, block: str, source: str = "aws-training.yaml") -> str:
    """An example stack whose first pool carries ``block`` as its failover."""
    text = (EXAMPLES / source).read_text()
    head, sep, rest = text.partition("\n    nodes:")
    path = tmp_path / source
    path.write_text(f"{head}\n    failover: {block}{sep}{rest}")
    (tmp_path / "keys").mkdir(exist_ok=True)
    (tmp_path / "keys" / "example.pub").write_text((EXAMPLES / "keys" / "example.pub").read_text())
    return str(path)


@pytest.fixture
def fake(recording_pulumi):
    return recording_pulumi


def stray_fleet(zone: str, cluster="aws-training", pool="trainers"):
    """What a refused attempt can leave outside Pulumi's state: an instant fleet tagged for the pool,
    holding one instance (moto's EC2 runs CreateFleet)."""
    def launch():
        ec2 = boto3.client("ec2", region_name=zone[:-1])
        tags = [{"Key": "gpufleet:cluster", "Value": cluster}, {"Key": "gpufleet:pool", "Value": pool},
                {"Key": "gpufleet:stack", "Value": cluster}, {"Key": "gpufleet:owner", "Value": "ops@example.com"},
                {"Key": "gpufleet:expires-at", "Value": "2099-01-01T00:00:00Z"}]
        lt = ec2.create_launch_template(LaunchTemplateName=f"stray-{zone}", LaunchTemplateData={
            "ImageId": "ami-12c6146b", "TagSpecifications": [{"ResourceType": "instance", "Tags": tags}]})
        made = ec2.create_fleet(
            Type="instant", TagSpecifications=[{"ResourceType": "fleet", "Tags": tags}],
            LaunchTemplateConfigs=[{"LaunchTemplateSpecification": {
                "LaunchTemplateId": lt["LaunchTemplate"]["LaunchTemplateId"], "Version": "1"},
                "Overrides": [{"InstanceType": "p4d.24xlarge", "AvailabilityZone": zone}]}],
            TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "on-demand"})
        launch.fleets.append(made["FleetId"])
        launch.ids += [i for s in made["Instances"] for i in s["InstanceIds"]]
    launch.ids, launch.fleets = [], []
    return launch


def live_fleets(region: str, ids) -> set:
    fleets = boto3.client("ec2", region_name=region).describe_fleets(FleetIds=list(ids))["Fleets"]
    return {f["FleetId"] for f in fleets if not f["FleetState"].startswith("deleted")}


def live(region: str, ids) -> set:
    out = set()
    for rv in boto3.client("ec2", region_name=region).describe_instances(InstanceIds=list(ids))["Reservations"]:
        out |= {i["InstanceId"] for i in rv["Instances"] if i["State"]["Name"] != "terminated"}
    return out


def up(path, cat, fake, on_attempt=None, **kw):
    return fleet_up.bring_up(stacks.load(path, cat), cat,
                             fleet_up.UpOptions(configure=False, seams=fleet_up.Seams(pulumi_command=fake), **kw),
                             confirm=lambda p: True, on_event=fleet_up.UpEvents(on_attempt=on_attempt))


def ups(fake) -> int:
    return sum(1 for c in fake.calls if c[0] == "up")


@pytest.mark.slow
def test_a_zone_out_of_capacity_moves_the_pool_to_the_next_zone_and_leaves_nothing_behind(cat, fake, tmp_path):
    from fakes.pulumi_cli import Failure

    path = with_failover(tmp_path, "{zones: any}")
    stray = stray_fleet("us-east-1a")
    fake.fail_ups = [Failure(short_fleet(), at=FLEET, then=stray), None, None]
    told = []
    out = up(path, cat, fake, on_attempt=told.append)
    first, second = out.attempts
    assert (first["zone"], first["outcome"], first["code"], first["scope"]) == (
        "us-east-1a", "refused", "InsufficientInstanceCapacity", "zone")
    assert first["source"].startswith("https://docs.aws.amazon.com/")
    assert (second["zone"], second["outcome"]) == ("us-east-1b", "created")
    assert [a.place.zone for a in told] == ["us-east-1a", "us-east-1b"]  # each told as it happened
    # the refused attempt's part is gone: Pulumi's own (the second `up` deleted it) and the stray
    assert ups(fake) == 3 and fake.stacks["aws-training"].history[1]["resourceChanges"].get("delete", 0) > 0
    assert stray.ids and live("us-east-1", stray.ids) == set()
    assert stray.fleets and live_fleets("us-east-1", stray.fleets) == set()
    rec = Registry().get("aws-training")
    assert rec.state == "up" and {n.zone for n in rec.nodes} == {"us-east-1b"}
    assert [a["outcome"] for a in Registry().attempts("aws-training")] == ["refused", "created"]


@pytest.mark.slow
def test_a_region_short_of_quota_is_skipped_and_never_tried(aws, cat, fake, tmp_path):
    path = with_failover(tmp_path, "{regions: [us-west-2]}")
    aws.extras.quotas[("us-east-1", P_VCPUS)] = 96.0  # two p4d need 192 vCPUs
    aws.extras.quotas[("us-west-2", P_VCPUS)] = 384.0
    out = up(path, cat, fake)
    skipped, created = out.attempts
    assert (skipped["region"], skipped["outcome"], skipped["seconds"]) == ("us-east-1", "skipped", 0)
    assert "96" in skipped["message"] and "192" in skipped["message"]
    assert (created["region"], created["outcome"]) == ("us-west-2", "created")
    assert ups(fake) == 1  # the short region had no attempt
    assert Registry().get("aws-training").locations == [("aws", "us-west-2")]


@pytest.mark.slow
def test_when_every_region_is_short_nothing_is_tried_and_the_skips_are_the_answer(aws, cat, fake, tmp_path):
    path = with_failover(tmp_path, "{regions: [us-west-2]}")
    for region in ("us-east-1", "us-west-2"):
        aws.extras.quotas[(region, P_VCPUS)] = 0.0
    r = cli("--json", "up", path, "--yes", "--no-configure")
    data = json.loads(r.stdout)
    assert r.exit_code == 1 and data["error"] == "NoPlaceLeft", r.output
    assert [(a["region"], a["outcome"]) for a in data["attempts"]] == [("us-east-1", "skipped"), ("us-west-2", "skipped")]
    assert ups(fake) == 0 and Registry().get("aws-training") is None  # nothing created, nothing to remove


@pytest.mark.slow
def test_a_permission_error_stops_failover_at_once(cat, fake, tmp_path):
    from fakes.pulumi_cli import Failure

    path = with_failover(tmp_path, "{zones: any, regions: [us-west-2]}")
    fake.fail_ups = [Failure(refusal("aws", "unauthorized_operation"), at=FLEET)]
    with pytest.raises(GpufleetError) as ei:
        up(path, cat, fake)
    (only,) = ei.value.attempts
    assert (only["outcome"], only["scope"], only["code"]) == ("failed", "stop", "UnauthorizedOperation")
    assert ups(fake) == 1 and Registry().get("aws-training").state == "failed"


@pytest.mark.slow
def test_without_failover_a_refusal_stops_as_before(cat, fake, tmp_path):
    from fakes.pulumi_cli import Failure

    path = with_failover(tmp_path, "{zones: any}")
    fake.fail_ups = [Failure(short_fleet(), at=FLEET)]
    with pytest.raises(GpufleetError) as ei:
        up(path, cat, fake, failover=False)
    assert type(ei.value).__name__ == "CapacityError" and not getattr(ei.value, "attempts", None)
    assert ups(fake) == 1


@pytest.mark.slow
def test_every_place_refused_is_exit_1_with_the_table_of_attempts(cat, fake, tmp_path):
    from fakes.pulumi_cli import Failure

    path = with_failover(tmp_path, "{zones: [us-east-1b], regions: [us-west-2]}")
    ice = short_fleet()
    fake.fail_ups = [Failure(ice, at=FLEET), None, Failure(ice, at=FLEET), None, Failure(ice, at=FLEET), None]
    r = cli("up", path, "--yes", "--no-configure")
    assert r.exit_code == 1, r.output
    assert "Placement attempts" in r.output and "no place held pool trainers" in r.output
    for where in ("us-east-1a", "us-east-1b", "us-west-2"):
        assert where in r.output
    assert r.output.count("InsufficientInstanceCapacity") >= 3
    assert Registry().get("aws-training").state == "failed"
    assert ("aws", "us-west-2") in Registry().get("aws-training").locations  # `down` looks there too


@pytest.mark.slow
def test_up_json_carries_the_attempts(cat, fake, tmp_path):
    from fakes.pulumi_cli import Failure

    path = with_failover(tmp_path, "{zones: any}")
    fake.fail_ups = [Failure(short_fleet(), at=FLEET), None, None]
    r = cli("--json", "up", path, "--yes", "--no-configure")
    data = json.loads(r.stdout)
    assert r.exit_code == 0, r.output
    assert [(a["zone"], a["outcome"]) for a in data["attempts"]] == [("us-east-1a", "refused"), ("us-east-1b", "created")]


@pytest.mark.slow
def test_max_attempts_bounds_the_runs(cat, fake, tmp_path):
    from fakes.pulumi_cli import Failure

    path = with_failover(tmp_path, "{zones: any}")
    ice = short_fleet()
    fake.fail_ups = [Failure(ice, at=FLEET), None] * 5
    r = cli("--json", "up", path, "--yes", "--no-configure", "--max-attempts", "2")
    data = json.loads(r.stdout)
    assert r.exit_code == 1 and data["error"] == "NoPlaceLeft" and "--max-attempts" in data["message"]
    assert [a["outcome"] for a in data["attempts"]] == ["refused", "refused"]


@pytest.mark.slow
def test_a_mixed_stack_fails_over_its_cloud_pool_and_leaves_the_rack_pool_alone(cat, fake, tmp_path):
    from fakes.pulumi_cli import Failure

    path = with_failover(tmp_path, "{regions: [us-east-1]}", source="mixed.yaml")
    stack = stacks.load(path, cat)
    only_aws = stack.model_copy(update={"pools": [p for p in stack.pools if p.provider in ("aws", "baremetal")]})
    fake.fail_ups = [Failure(short_fleet(), at=FLEET), None, None]
    out = fleet_up.bring_up(only_aws, cat, fleet_up.UpOptions(configure=False,
                            seams=fleet_up.Seams(pulumi_command=fake)), confirm=lambda p: True)
    assert [(a["region"], a["outcome"]) for a in out.attempts] == [("us-west-2", "refused"), ("us-east-1", "created")]
    rack = [n for n in out.record.nodes if n.pool == "rack"]
    assert [(n.node_id, n.location) for n in rack] == [("192.0.2.21", "lab"), ("192.0.2.22", "lab")]


# --- the places, before any attempt --------------------------------------------------------------

def test_plan_lists_each_pools_places_in_order_with_prices(cat, tmp_path):
    path = with_failover(tmp_path, "{zones: any, regions: [us-west-2], providers: [azure], "
                                   "max_price_per_node_hour: 30}")
    r = cli("--json", "plan", path)
    assert r.exit_code == 0, r.output
    (pool,) = json.loads(r.stdout)["pools"]
    places = pool["failover"]["candidates"]
    listed = cat.offer("aws", "us-east-1", "p4d.24xlarge", "ondemand").usd_per_hour
    assert places[0].pop("request")  # what each attempt asks (test_plan_json_shows_what_each_attempt_asks ...)
    assert places[0] | {"why": None} == {"provider": "aws", "region": "us-east-1", "zone": "us-east-1a",
                                        "instance_type": "p4d.24xlarge", "spot": False, "price_per_hour": 2 * listed,
                                        "price_per_node_hour": listed, "why": None, "reservation": None,
                                        "billing": ""}
    assert {p["provider"] for p in places} == {"aws", "azure"}
    assert all(p["price_per_node_hour"] <= 30 for p in places)
    prices = [p["price_per_node_hour"] for p in places[1:]]
    assert prices == sorted(prices)  # resnet50's cost to train ranks machines of one GPU as their price does
    assert any("above failover.max_price_per_node_hour" in d["why"] for d in pool["failover"]["dropped"])
    text = cli("plan", path).output
    assert "Failover for pool trainers" in text and "us-east-1b" in text


def test_plan_renders_the_attempts_requests_in_worker_processes_and_the_same_as_alone(cat, tmp_path, monkeypatch):
    """`plan` renders one more program per failover place (each attempt's request): one after the other in
    the plan's process, 34 places took 48.6 s where the plan took 5.5. They are rendered side by side in
    worker processes (as the plan's shards are), and read the same as rendered one by one."""
    stack = stacks.load(with_failover(tmp_path, "{zones: any, regions: [us-west-2]}"), cat)
    here = []
    real = planner._run_mocked
    monkeypatch.setattr(planner, "_run_mocked", lambda *a, **kw: here.append(1) or real(*a, **kw))
    alone = planner.plan(stack, cat, workers=1, attempts=True).pools[0].failover["candidates"]
    assert len(alone) > 2 and len(here) == 1 + len(alone)
    here.clear()
    side_by_side = planner.plan(stack, cat, workers=2, attempts=True).pools[0].failover["candidates"]
    assert len(here) == 1  # only the plan's own program in this process
    assert [c["request"] for c in side_by_side] == [c["request"] for c in alone]


def test_a_spot_pools_on_demand_fallback_comes_after_every_spot_place(cat, tmp_path):
    path = with_failover(tmp_path, "{zones: any, spot_fallback: on-demand}")
    text = open(path).read().replace("spot: false", "spot: true")
    open(path, "w").write(text)
    stack = stacks.load(path, cat)
    places = candidates.for_pool(stack, stack.pools[0], cat).ordered
    markets = [p.spot for p in places]
    assert markets[0] and not markets[-1] and markets == sorted(markets, reverse=True)


def test_same_gpu_instance_types_are_offered_and_others_are_refused(cat, tmp_path):
    path = with_failover(tmp_path, "{instance_types: same-gpu, providers: [gcp]}")
    stack = stacks.load(path, cat)
    c = candidates.for_pool(stack, stack.pools[0], cat)
    gpus = {(cat.instance(p.provider, p.instance_type).gpu, cat.instance(p.provider, p.instance_type).gpu_count)
            for p in c.ordered}
    assert gpus == {("A100-40GB", 8)}
    assert c.dropped and all(d["why"] for d in c.dropped)  # GCP's a2 has no local NVMe for /scratch: said why


@pytest.mark.parametrize("block, where, said", [
    ("{regions: [us-west-3]}", "pools[0].failover.regions[0]", "did you mean 'us-west-2'"),
    ("{zones: [us-east-1z]}", "pools[0].failover.zones[0]", "has no zone"),
    ("{instance_types: [p5.48xlarge]}", "pools[0].failover.instance_types[0]", "the same GPUs per node"),
    ("{spot_fallback: on-demand}", "pools[0]", "spot pools"),
    ("{providers: [aws]}", "pools[0]", "own cloud"),
    ("{max_price_per_node_hour: 10}", "pools[0].failover.max_price_per_node_hour", "above the cap"),
])
def test_a_bad_failover_block_is_exit_2_with_file_line_and_key(cat, tmp_path, block, where, said):
    path = with_failover(tmp_path, block)
    with pytest.raises(SpecErrors) as ei:
        stacks.load(path, cat)
    text = str(ei.value.to_dict())
    assert where in text and said in text and "aws-training.yaml" in text
    r = cli("plan", path)
    assert r.exit_code == 2 and "Traceback" not in r.output


def test_ruled_out_keeps_other_pools_zones_and_markets():
    c = candidates.Candidate
    failed = c("aws", "us-east-1", "us-east-1a", "p5.48xlarge", False, 1.0, 1.0, "")
    same_zone_other_type = c("aws", "us-east-1", "us-east-1a", "p5e.48xlarge", False, 1.0, 1.0, "")
    other_zone = c("aws", "us-east-1", "us-east-1b", "p5.48xlarge", False, 1.0, 1.0, "")
    spot_same_region = c("aws", "us-east-1", "us-east-1b", "p5.48xlarge", True, 1.0, 1.0, "")
    assert failover.ruled_out(failed, failed, "zone", same_pool=True)
    assert not failover.ruled_out(same_zone_other_type, failed, "zone", same_pool=True)
    assert not failover.ruled_out(failed, failed, "zone", same_pool=False)  # another pool's capacity differs
    assert failover.ruled_out(other_zone, failed, "region", same_pool=False)
    assert not failover.ruled_out(spot_same_region, failed, "region", same_pool=True)  # spot quotas apart
    assert failover.ruled_out(spot_same_region, failed, "provider", same_pool=False)


def with_reservation(tmp_path, entries: str, failover: str | None = None) -> str:
    """aws-training whose pool holds ``entries`` (a YAML list) as its reservations."""
    text = (EXAMPLES / "aws-training.yaml").read_text()
    head, sep, rest = text.partition("\n    nodes:")
    path = tmp_path / "reserved.yaml"
    path.write_text(f"{head}\n    reservations: {entries}" + (f"\n    failover: {failover}" if failover else "")
                    + f"{sep}{rest}")
    (tmp_path / "keys").mkdir(exist_ok=True)
    (tmp_path / "keys" / "example.pub").write_text((EXAMPLES / "keys" / "example.pub").read_text())
    return path


def _reservation_of(plan) -> str | None:
    (lt,) = [r for r in plan.cloud_resources if r.type == "aws:ec2/launchTemplate:LaunchTemplate"]
    return ((lt.inputs.get("capacityReservationSpecification") or {}).get("capacityReservationTarget") or {}).get(
        "capacityReservationId")


@pytest.mark.slow
def test_a_reservation_is_tried_first_and_holds_the_pool(cat, fake, tmp_path):
    """Without any failover block, a pool that holds a reservation launches into it first."""
    out = up(with_reservation(tmp_path, "[{id: cr-0123456789abcdef0, zone: us-east-1b}]"), cat, fake)
    (only,) = out.attempts
    assert (only["zone"], only["reservation"], only["outcome"]) == ("us-east-1b", "cr-0123456789abcdef0", "created")
    assert [_reservation_of(p) for p in fake.plans] == ["cr-0123456789abcdef0"]
    assert {n.zone for n in Registry().get("aws-training").nodes} == {"us-east-1b"}


@pytest.mark.slow
def test_a_short_reservation_falls_back_to_the_open_market_beside_it(cat, fake, tmp_path):
    """The reservation in us-east-1a is refused (ReservationCapacityExceeded): that rules out the
    reservation, not the zone, so the pool's own place in the same zone is tried next, without it."""
    from fakes.pulumi_cli import Failure

    said = refusal("aws", "reservation_capacity_exceeded").split("ReservationCapacityExceeded: ", 1)[1]
    from gpufleet.clouds.aws.pool_vms import shortfall

    error = {"code": "ReservationCapacityExceeded", "message": said.splitlines()[0]}
    fake.fail_ups = [Failure("error: Exception calling application: " + shortfall("fleet-0a1b", 0, 2, [error]),
                             at=FLEET), None, None]
    out = up(with_reservation(tmp_path, "[{id: cr-0123456789abcdef0, zone: us-east-1a}]"), cat, fake)
    first, second = out.attempts
    assert (first["reservation"], first["outcome"], first["code"], first["scope"]) == (
        "cr-0123456789abcdef0", "refused", "ReservationCapacityExceeded", "zone")
    assert (second["zone"], second["reservation"], second["outcome"]) == ("us-east-1a", None, "created")
    # the attempts' programs: into the reservation, the cleanup without the pool, the open market
    assert [_reservation_of(p) for p in (fake.plans[0], fake.plans[2])] == ["cr-0123456789abcdef0", None]


def test_plan_prices_a_capacity_block_as_paid_up_front_and_drops_one_out_of_its_window(cat, tmp_path):
    block = "capacity_block: {{starts_at: {}, ends_at: {}, upfront_usd: 33600}}"
    path = with_reservation(tmp_path, "[" + ", ".join([
        "{id: cr-0aaaaaaaaaaaaaaaa, zone: us-east-1b, " + block.format("2026-01-01T00:00:00Z", "2099-01-01T00:00:00Z")
        + "}",
        "{id: cr-0bbbbbbbbbbbbbbbb, zone: us-east-1c, " + block.format("2098-01-01T00:00:00Z", "2098-01-15T00:00:00Z")
        + "}",
        "{id: cr-0cccccccccccccccc, zone: us-east-1d}"]) + "]")
    doc = json.loads(cli("--json", "plan", str(path)).stdout)
    (pool,) = doc["pools"]
    held = [c for c in pool["failover"]["candidates"] if c["reservation"]]
    assert [c["reservation"] for c in held] == ["cr-0aaaaaaaaaaaaaaaa", "cr-0cccccccccccccccc"]
    hours = (dt.datetime(2099, 1, 1) - dt.datetime(2026, 1, 1)).total_seconds() / 3600
    assert held[0]["price_per_hour"] == pytest.approx(33600 / hours) and "paid up front" in held[0]["billing"]
    on_demand = cat.offer("aws", "us-east-1", "p4d.24xlarge", "ondemand").usd_per_hour
    assert held[1]["price_per_node_hour"] == pytest.approx(on_demand) and "on-demand rate" in held[1]["billing"]
    assert pool["failover"]["candidates"][2]["why"] == candidates.OWN  # the open market after what it holds
    (dropped,) = pool["failover"]["dropped"]
    assert "cr-0bbbbbbbbbbbbbbbb" in dropped["candidate"] and "runs from 2098-01-01" in dropped["why"]


# --- budgets at every place (issue 49, item 9) ------------------------------------------------------

def spot_with_on_demand_fallback(tmp_path, block: str = "{spot_fallback: on-demand}") -> str:
    """aws-training on spot (2 x p4d: $174.47 over its 12 h TTL) whose on-demand fallback costs $544.68."""
    path = with_failover(tmp_path, block)
    text = open(path).read()
    open(path, "w").write(text.replace("spot: false", "spot: true"))
    return path


def test_a_place_over_budget_is_dropped_before_any_attempt_and_said_with_the_numbers(cat, fake, tmp_path):
    from fakes.pulumi_cli import Failure

    fake.fail_ups = [Failure(short_fleet(), at=FLEET), None, None]
    with pytest.raises(failover.NoPlaceLeft) as ei:
        up(spot_with_on_demand_fallback(tmp_path), cat, fake, budget_list=[budgets.Budget("training", 300)])
    dropped, refused = ei.value.attempts
    assert (dropped["spot"], dropped["outcome"], refused["spot"], refused["outcome"]) == (
        False, "skipped", True, "refused")
    assert dropped["message"] == ("over budget 'training': the cluster would spend $544.68 over its TTL here, "
                                  "$300.00 is left this month")
    assert ups(fake) == 2  # the spot attempt and its cleanup: the on-demand place was never tried
    assert [a["outcome"] for a in Registry().attempts("aws-training")] == ["skipped", "refused"]


def test_a_failover_with_no_place_within_budget_is_refused_before_anything_is_created(cat, fake, tmp_path,
                                                                                       monkeypatch):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("budgets:\n  - {name: training, usd_per_month: 100}\n")
    monkeypatch.setenv("GPUFLEET_CONFIG", str(cfg))
    r = cli("--json", "up", spot_with_on_demand_fallback(tmp_path), "--yes", "--no-configure")
    doc = json.loads(r.stdout)
    assert r.exit_code == 5 and doc["error"] == "OverBudget", r.output
    assert doc["message"].startswith("cluster aws-training would spend $174.47 over its TTL even at the cheapest "
                                     "of pool trainers's 2 place(s), aws us-east-1a p4d.24xlarge spot, but budget "
                                     "'training' has $100.00 left this month")
    assert [(a["spot"], a["outcome"]) for a in doc["attempts"]] == [(True, "skipped"), (False, "skipped")]
    assert "$544.68" in doc["attempts"][1]["message"]
    assert not any(c[0] == "up" for c in fake.calls)


def test_where_failover_landed_is_checked_again_before_anything_is_configured(cat, fake, tmp_path):
    """A teammate's cluster took the budget while failover moved the pool: `up` stops before configuring."""
    from fakes.pulumi_cli import Failure

    def teammate(attempt):
        if attempt.outcome == "refused":
            reg = Registry()
            reg.record(name="other", stack="other", stack_file="o.yaml", owner="o@example.com",
                       expires_at="2099-01-01T00:00:00Z", backend=None,
                       nodes=[Node("gpu", 0, "aws", "us-east-1", "p5.48xlarge", usd_per_hour=1.0)],
                       predicted={"usd_per_hour": {"instances": 1e6}, "usd_once": {}, "ttl_hours": 1})
            with reg._db(write=True) as db:
                db.execute("UPDATE clusters SET created_at = ? WHERE name = 'other'",
                           ((dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),))

    fake.fail_ups = [Failure(short_fleet(), at=FLEET), None, None]
    path = spot_with_on_demand_fallback(tmp_path, "{zones: any}")
    with pytest.raises(budgets.OverBudget) as ei:
        up(path, cat, fake, budget_list=[budgets.Budget("all", 600)], on_attempt=teammate)
    assert "would spend $174.47 over its TTL" in ei.value.message and "budget 'all' has $0.00 left" in ei.value.message
    assert "gpufleet down aws-training" in ei.value.hint
    rec = Registry().get("aws-training")
    assert rec.state == "up" and {n.zone for n in rec.nodes} == {"us-east-1b"}  # recorded: `down` finds it


# A held reservation is committed spend: billed whether the pool uses it or not (AWS
# capacity-reservations-pricing-billing.html: "charged at the equivalent On-Demand rate whether you run
# instances in reserved capacity or not"; a Capacity Block is paid up front; GCP reservations-overview:
# "you begin paying for the reserved resources immediately ... While a VM is consuming a reservation, it
# does not incur separate charges"; read 2026-11). A budget counts it at every place; using it adds nothing.

def test_a_held_reservation_counts_at_every_place_and_is_never_dropped_for_a_pricier_place(cat, fake, tmp_path):
    """A spot pool holding an On-Demand Capacity Reservation (2 x p4d, $544.68 over the 12 h TTL, billed used
    or not) under a $400 budget: before, the reservation was dropped over budget and the pool launched on
    spot as well ($174.47 more, the reservation billed all the same). Now the reservation alone exceeds the
    budget, so nothing is created."""
    path = with_reservation(tmp_path, "[{id: cr-0123456789abcdef0, zone: us-east-1b}]")
    path.write_text(path.read_text().replace("spot: false", "spot: true"))
    with pytest.raises(budgets.OverBudget) as ei:
        up(path, cat, fake, budget_list=[budgets.Budget("training", 400)])
    assert not any(c[0] == "up" for c in fake.calls), "the spot place was bought"
    assert "$544.68" in ei.value.message and "budget 'training' has $400.00 left" in ei.value.message
    reserved, spot = ei.value.attempts
    assert (reserved["reservation"], reserved["outcome"], spot["spot"], spot["outcome"]) == (
        "cr-0123456789abcdef0", "skipped", True, "skipped")
    assert "reservation(s) it holds, billed used or not" in spot["message"]


GCP_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFjtZCMk8DLg9Gw3q44fZDXDQHKWHrf7Wb55hmdcfA0A x"


def gcp_stack(tmp_path, pool: str, ttl: str = "24h") -> str:
    path = tmp_path / "g.yaml"
    path.write_text(f"name: g\nowner: o@example.com\nttl: {ttl}\naccess: {{public_key: '{GCP_KEY}'}}\npools:\n"
                    f"  - {pool}\n")
    return str(path)


def test_a_spot_a4_pool_keeps_its_reservation_and_drops_the_spot_place_beyond_the_budget(cat, tmp_path):
    """The review's case: a spot A4 pool in europe-west4 holding a reservation in us-central1-b (2 x
    a4-highgpu-8g at the on-demand rate, $4,331.61 for the cluster over 24 h; spot $1,635.55 more). Before,
    a $3,000 budget dropped the reservation and kept spot; a $5,000 one kept both."""
    path = gcp_stack(tmp_path, "{name: b, provider: gcp, region: europe-west4, instance_type: a4-highgpu-8g, "
                               "nodes: 2, spot: true, reservations: [{id: a4-calendar-block, region: us-central1, "
                               "zone: us-central1-b}]}")
    stack = stacks.load(path, cat)
    spend = planner.plan(stack, cat, workers=1).spend

    def drop(usd):
        plans = failover.places(stack, cat)
        return plans, budgets.drop_places("g", stack, spend, ["o@example.com"], [], [budgets.Budget("b", usd)], plans)

    plans, dropped = drop(5000)
    assert [c.reservation.id if c.reservation else None for c in plans["b"].ordered] == ["a4-calendar-block"]
    (spot,) = dropped
    assert spot.place.spot and "$5,967" in spot.why and "$4,330.37 of it the reservation(s) it holds" in spot.why
    plans, dropped = drop(3000)
    assert not plans["b"].ordered and len(dropped) == 2
    with pytest.raises(budgets.OverBudget) as ei:
        budgets.require_places("g", plans, dropped)
    assert "would spend $4,331.61" in ei.value.message and "reservation a4-calendar-block" in ei.value.message


def test_an_azure_infiniband_pool_holding_a_reservation_is_refused_with_the_reason(tmp_path):
    """Azure reserves no ND-series capacity ("Support for other VM series isn't currently available:
    ... ND-series", capacity reservation overview, ms.date 02/17/2026): exit 2 before anything is
    created, with that reason (not the placement group InfiniBand would need)."""
    crg = ("/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg/providers/Microsoft.Compute/"
           "capacityReservationGroups/h100")
    text = (EXAMPLES / "azure-nd.yaml").read_text().replace(
        "    nodes: 4\n", f"    nodes: 4\n    reservations: [{{id: '{crg}', zone: '1'}}]\n")
    path = tmp_path / "azure-nd.yaml"
    path.write_text(text)
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "example.pub").write_text((EXAMPLES / "keys" / "example.pub").read_text())
    r = cli("--json", "plan", str(path))
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    said = json.dumps(json.loads(r.stdout))
    assert "pools[0].reservations[0]" in said and "Azure cannot reserve capacity for Standard_ND" in said
    assert "ND-series is among the series it does not support" in said


def _built(tmp_path, monkeypatch, provider: str, region: str, image_id: str) -> str:
    """A golden image recorded as `gpufleet image build` records it (in ``region``); its pool reference."""
    from gpufleet.state.images import BuiltImage, Manifest

    monkeypatch.setenv("GPUFLEET_IMAGES", str(tmp_path / "images.json"))
    Manifest().record(BuiltImage("gpufleet-s-p-0123456789", provider, region, image_id, "s", "p", "0" * 64,
                                 "2026-11-25T00:00:00Z"))
    return "gpufleet:gpufleet-s-p-0123456789"


def test_a_region_without_the_pools_ami_is_left_out_before_any_attempt(cat, fake, tmp_path, monkeypatch):
    """An AMI is regional (EC2 CopyImage makes a copy in another region): a pool booting a golden image
    built in us-east-1 cannot land in us-west-2. The place is left out, said, before anything is
    tried; before, the first move there stopped failover with exit 2."""
    from fakes.pulumi_cli import Failure

    image = _built(tmp_path, monkeypatch, "aws", "us-east-1", "ami-0123456789abcdef0")
    path = with_failover(tmp_path, "{regions: [us-west-2]}")
    text = open(path).read().replace("image: ubuntu-22.04", f"image: {image}")
    open(path, "w").write(text)
    stack = stacks.load(path, cat)
    c = candidates.for_pool(stack, stack.pools[0], cat)
    assert {x.region for x in c.ordered} == {"us-east-1"}
    (dropped,) = [d for d in c.dropped if "us-west-2" in d["candidate"]]
    assert "no golden image gpufleet-s-p-0123456789 built for aws us-west-2" in dropped["why"]
    fake.fail_ups = [Failure(short_fleet(), at=FLEET), None]
    r = cli("--json", "up", path, "--yes", "--no-configure")
    data = json.loads(r.stdout)
    assert r.exit_code == 1 and data["error"] == "NoPlaceLeft", r.output
    assert [(a["region"], a["outcome"]) for a in data["attempts"]] == [("us-east-1", "refused")]


def test_a_gcp_image_is_global_so_every_region_of_gcp_keeps_it(cat, tmp_path, monkeypatch):
    """A Compute Engine image is a global resource: one built from us-central1 boots a pool moved to
    us-east4 (its attempt's program names it), where the manifest has no entry of its own."""
    from conftest import placed_plan

    image = _built(tmp_path, monkeypatch, "gcp", "us-central1", "projects/p/global/images/gpufleet-s-p-0123456789")
    text = (EXAMPLES / "gcp-a3.yaml").read_text().replace("image: ubuntu-22.04", f"image: {image}")
    head, sep, rest = text.partition("\n    nodes:")
    path = tmp_path / "gcp.yaml"
    path.write_text(f"{head}\n    failover: {{regions: [us-east4]}}{sep}{rest}")
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "example.pub").write_text((EXAMPLES / "keys" / "example.pub").read_text())
    stack = stacks.load(path, cat)
    c = candidates.for_pool(stack, stack.pools[0], cat)
    moved = [x for x in c.ordered if x.region == "us-east4"]
    assert moved, c.dropped
    p = placed_plan(stack, cat, {stack.pools[0].name: moved[0]})
    assert p.pools[0].image["id"] == "projects/p/global/images/gpufleet-s-p-0123456789"


def test_a_golden_image_pool_moves_to_another_cloud_only_where_that_cloud_has_its_image(cat, tmp_path, monkeypatch):
    """A golden image is one cloud's (an AMI, a GCP image, a gallery version): before, a pool failing over to
    another cloud dropped it and booted that cloud's stock OS, and `plan` listed the place as fine. Now the
    other cloud's places are dropped with why, unless the same image name is built there, which they boot."""
    from gpufleet.state.images import BuiltImage, Manifest

    from conftest import placed_plan

    image = _built(tmp_path, monkeypatch, "aws", "us-east-1", "ami-0123456789abcdef0")
    path = with_failover(tmp_path, "{providers: [gcp]}")
    text = open(path).read().replace("image: ubuntu-22.04", f"image: {image}")
    open(path, "w").write(text.replace("      - {type: local-nvme, mount: /scratch}\n", ""))  # A2 VMs have none
    stack = stacks.load(path, cat)
    c = candidates.for_pool(stack, stack.pools[0], cat)
    assert {x.provider for x in c.ordered} == {"aws"}
    gcp = [d for d in c.dropped if d["candidate"].startswith("gcp")]
    # each GCP place is dropped: for the image, or before that for want of a price there
    assert gcp and all("no golden image gpufleet-s-p-0123456789 built for gcp" in d["why"]
                       or d["why"].startswith("no ondemand price") for d in gcp)
    assert any("no golden image" in d["why"] for d in gcp)

    Manifest().record(BuiltImage("gpufleet-s-p-0123456789", "gcp", "us-central1",
                                 "projects/p/global/images/gpufleet-s-p-0123456789", "s", "p", "0" * 64,
                                 "2026-11-25T00:00:00Z"))
    c = candidates.for_pool(stack, stack.pools[0], cat)
    moved = [x for x in c.ordered if x.provider == "gcp"]
    assert moved, c.dropped
    p = placed_plan(stack, cat, {stack.pools[0].name: moved[0]})
    assert p.pools[0].image["id"] == "projects/p/global/images/gpufleet-s-p-0123456789"  # not GCP's stock Ubuntu


def test_moving_a_pool_to_another_zone_replaces_nothing_the_region_shares(cat, tmp_path):
    """Failover moves pools[0] from us-east-1a to us-east-1b while another pool keeps the region's
    network: every input of a network resource that differs between the two attempts' programs must
    be one Pulumi ignores (ignoreChanges), or the update replaces it. Before, the NAT's public subnet
    followed pools[0]'s zone: replaced create-before-delete with the same CIDR, which EC2 refuses
    (InvalidSubnet.Conflict, a refusal that stops failover)."""
    from conftest import placed_plan

    path = with_failover(tmp_path, "{zones: [us-east-1b]}")
    text = open(path).read().replace("    zone: us-east-1a\n", "", 1) + (
        "  - {name: eval, provider: aws, region: us-east-1, zone: us-east-1c, instance_type: g5.xlarge, nodes: 1}\n")
    open(path, "w").write(text)
    stack = stacks.load(path, cat)
    first, second = candidates.for_pool(stack, stack.pools[0], cat).ordered[:2]
    assert (first.zone, second.zone) == ("us-east-1a", "us-east-1b")
    cluster = planner.cluster_for(stack)  # one `up`: the same expiry in every attempt's tags
    before, after = (placed_plan(stack, cat, {"trainers": c}, cluster=cluster) for c in (first, second))
    shared = {(r.type, r.name): r for r in before.cloud_resources if r.parent == "aws-training-us-east-1"}
    assert any(t == "aws:ec2/subnet:Subnet" for t, _ in shared)
    for r in after.cloud_resources:
        if (r.type, r.name) in shared:
            old = shared[(r.type, r.name)].inputs
            changed = {k for k in set(old) | set(r.inputs) if old.get(k) != r.inputs.get(k)}
            assert changed <= set(r.options.get("ignoreChanges", [])), (r.name, changed)


def test_plan_json_shows_what_each_attempt_asks_its_cloud_for(cat, tmp_path):
    """Each place `up` may try comes with the request its attempt sends, from the program that attempt
    deploys: the reserved one (Azure: singlePlacementGroup false, no proximity placement group, the
    reservation's zone) and every failover zone, so a reviewer sees what each attempt really asks."""
    crg = ("/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg/providers/Microsoft.Compute/"
           "capacityReservationGroups/h100")
    path = tmp_path / "z.yaml"
    path.write_text("name: z\nowner: o@example.com\naccess: {public_key: keys/example.pub}\npools:\n"
                    "  - {name: z, provider: azure, region: eastus, instance_type: Standard_NC96ads_A100_v4, nodes: 2,\n"
                    f"     reservations: [{{id: '{crg}', zone: '2'}}], failover: {{zones: any}}}}\n")
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "example.pub").write_text((EXAMPLES / "keys" / "example.pub").read_text())
    r = cli("--json", "plan", str(path))
    assert r.exit_code == 0, r.output
    (pool,) = json.loads(r.stdout)["pools"]
    places = pool["failover"]["candidates"]
    assert [(c["zone"], c["reservation"]) for c in places] == [("2", crg), ("1", None), ("2", None), ("3", None)]
    held = places[0]["request"]["azure-native:compute:VirtualMachineScaleSet"]
    assert (held["zones"], held["singlePlacementGroup"], held["proximityPlacementGroup"], held["orchestrationMode"]) \
        == (["2"], False, None, "Uniform")
    assert held["virtualMachineProfile.capacityReservation"] == {"capacityReservationGroup": {"id": crg}}
    assert "azure-native:compute:ProximityPlacementGroup" not in places[0]["request"]
    for c in places[1:]:
        vmss = c["request"]["azure-native:compute:VirtualMachineScaleSet"]
        assert (vmss["zones"], vmss["singlePlacementGroup"], vmss["virtualMachineProfile.capacityReservation"]) == (
            [c["zone"]], True, None)
        assert vmss["proximityPlacementGroup"] and \
            c["request"]["azure-native:compute:ProximityPlacementGroup"]["zones"] == [c["zone"]]
    # AWS: the fleet's zone is each attempt's
    aws = json.loads(cli("--json", "plan", with_failover(tmp_path, "{zones: [us-east-1b]}")).stdout)["pools"][0]
    for c in aws["failover"]["candidates"]:
        (override,) = c["request"]["aws:ec2/fleet:Fleet"]["launchTemplateConfigs"][0]["overrides"]
        assert override["availabilityZone"] == c["zone"]


def test_a_failover_region_without_a_price_for_the_pools_market_is_named_with_why(cat, tmp_path):
    """Flex-start is priced from the on-demand rate, and the catalog has none for a4-highgpu-8g in us-east4
    (spot only: it is sold there). Before, us-east4 vanished from the places without a word."""
    path = gcp_stack(tmp_path, "{name: b, provider: gcp, region: us-central1, instance_type: a4-highgpu-8g, nodes: 2, "
                               "flex_start: {run_hours: 24}, failover: {regions: [us-east4, europe-west4]}}")
    stack = stacks.load(path, cat)
    c = candidates.for_pool(stack, stack.pools[0], cat)
    assert [x.region for x in c.ordered] == ["us-central1", "europe-west4"]
    (east,) = [d for d in c.dropped if " us-east4" in d["candidate"]]
    assert east["why"] == "no ondemand price for a4-highgpu-8g in us-east4 in the catalog"

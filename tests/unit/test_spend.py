"""Every line of the predicted bill (issue 36): what each cloud's resources are billed for besides the
instances, priced from the catalog's rates (held to published prices they were not built from), and
the examples' plan totals recomputed here by hand from the rate rows."""

import csv
import json
from pathlib import Path

import pytest

from gpufleet import stacks
from gpufleet.catalog import rates
from gpufleet.clouds.base import Planned
from gpufleet.engine import plan as planner
from gpufleet.errors import CatalogError

from conftest import ROOT, cli, cli_at

pytest.importorskip("pulumi")

RATES = ROOT / "infra" / "catalog" / "data" / "rates.csv"
HELD = ROOT / "tests" / "data" / "held-prices" / "rates.csv"
MONTH = 730


def _rate(provider: str, item: str, region: str) -> float:
    """The rate row itself, read as a person would: the region's, else the one for every region."""
    rows = {(r["provider"], r["item"], r["region"]): float(r["usd"]) for r in csv.DictReader(RATES.open())}
    return rows.get((provider, item, region), rows.get((provider, item, "*")))


def _plan(name: str, cat, text: str | None = None, tmp_path: Path | None = None):
    path = ROOT / "stacks" / "examples" / f"{name}.yaml"
    if text is not None:
        path = tmp_path / f"{name}.yaml"
        path.write_text(text)
    stack = stacks.load(path, cat)
    return planner.plan(stack, cat, workers=1), stack


def test_the_aws_example_costs_what_its_rate_rows_add_up_to(cat):
    p, stack = _plan("aws-training", cat)
    by_hand = (2 * cat.offer("aws", "us-east-1", "p4d.24xlarge", "ondemand").usd_per_hour
               + 2 * 200 * _rate("aws", "ebs:gp3", "us-east-1") / MONTH  # each node's 200 GB gp3 root volume
               + 4800 * _rate("aws", "fsx-lustre:persistent-2:250", "us-east-2") / MONTH  # the only 250-tier row
               + _rate("aws", "nat-gateway", "us-east-1") + _rate("aws", "ipv4", "*"))  # the NAT and its address
    assert p.spend.usd_per_hour == pytest.approx(by_hand)
    assert p.spend.usd_for_ttl == pytest.approx(by_hand * 12)  # ttl: 12h, no traffic said
    lines = {x.line for x in p.spend.lines}
    assert lines == {"instances", "volumes", "file-system", "nat", "ipv4"} and not p.spend.unpriced
    fsx = next(x for x in p.spend.lines if x.line == "file-system")
    assert "the rate of us-east-2" in fsx.note and fsx.as_of == "2026-08"


def test_the_gcp_and_azure_examples_cost_what_their_rate_rows_add_up_to(cat):
    p, _ = _plan("gcp-a3", cat)
    vms = 1 + 2
    by_hand = (cat.offer("gcp", "us-central1", "a3-highgpu-8g", "ondemand").usd_per_hour
               + 2 * cat.offer("gcp", "us-central1", "n1-standard-8+1xT4", "ondemand").usd_per_hour
               + vms * 200 * _rate("gcp", "pd:pd-balanced", "us-central1") / MONTH
               + vms * _rate("gcp", "cloud-nat:vm", "*") + _rate("gcp", "ipv4", "*"))
    assert p.spend.usd_per_hour == pytest.approx(by_hand) and not p.spend.unpriced

    p, _ = _plan("azure-nd", cat)
    by_hand = (4 * cat.offer("azure", "eastus", "Standard_ND96isr_H100_v5", "ondemand").usd_per_hour
               + 4 * _rate("azure", "disk:premium-ssd:P15", "eastus") / MONTH  # 200 GiB OS disks bill as P15
               + _rate("azure", "nat-gateway", "westeurope")
               + 2 * _rate("azure", "ipv4", "eastus"))  # the NAT gateway's and the Bastion's public IPs
    assert p.spend.usd_per_hour == pytest.approx(by_hand)
    # no published price was found for Azure Managed Lustre, nor a source for the Bastion's hourly one:
    # each line is named, not priced at zero silently
    lustre, bastion = p.spend.unpriced
    assert lustre.line == "file-system" and "no rate for azure amlfs:durable-premium-500" in lustre.note
    assert bastion.line == "bastion" and "no rate for azure bastion:standard" in bastion.note


def test_the_rates_are_within_ten_percent_of_published_prices_they_were_not_built_from():
    held = list(csv.DictReader(HELD.open()))
    assert len(held) >= 15 and {r["provider"] for r in held} == {"aws", "gcp", "azure"}
    off = []
    for r in held:
        got = rates.rate(r["provider"], r["item"], r["region"])
        if got is None:
            off.append(f"{r['provider']} {r['item']}: no rate")
        elif abs(got.usd / float(r["price"]) - 1) > 0.10:
            off.append(f"{r['provider']} {r['item']} {r['region']}: rates.csv {got.usd}, held {r['price']}")
        elif got.source.split(" ")[0] == r["source"].split(" ")[0]:
            off.append(f"{r['provider']} {r['item']}: held from the source the table cites")
    assert not off, "\n".join(off)


DATA_STACK = """
name: moves-data
owner: ml@example.com
ttl: 48h
data: {dataset_gb: 2000, dataset_from: internet, checkpoint_gb: 150, checkpoints: 10, checkpoint_copies: 1,
       egress_gb: 300}
pools:
  - {name: gpu, provider: aws, region: us-east-1, instance_type: p4d.24xlarge, nodes: 1}
"""


def test_compare_of_a_stack_shows_the_bill_plan_shows():
    stack = str(ROOT / "stacks" / "examples" / "gcp-a3.yaml")
    planned = json.loads(cli("--json", "plan", stack).stdout)["spend"]
    compared = cli("--json", "compare", "--stack", stack)
    assert compared.exit_code == 0, compared.output
    bill = json.loads(compared.stdout)["spend"]
    assert bill["by_line"] == planned["by_line"] and bill["usd_for_ttl"] == planned["usd_for_ttl"]
    assert {"instances", "volumes", "nat"} <= set(bill["by_line"])
    table = cli_at(100, "compare", "--stack", stack).output
    assert "Every line of the bill" in table and f"Total: ${planned['usd_per_hour']:,.2f}/h" in table
    assert max(len(line) for line in table.splitlines()) <= 100


def test_the_traffic_a_stack_says_it_moves_is_priced_once_over_its_ttl(cat, tmp_path):
    p, _ = _plan("moves-data", cat, DATA_STACK, tmp_path)
    moved = [x for x in p.spend.lines if x.line == "transfer"]
    nat, copies, out = (_rate("aws", k, "us-east-1") for k in ("nat:data", "transfer:inter-region",
                                                              "transfer:internet-out"))
    assert sorted(round(x.usd_once, 4) for x in moved) == sorted(round(v, 4) for v in (
        2000 * nat,  # the dataset comes in free, but through the NAT gateway
        10 * 150 * 1 * copies,  # each checkpoint copied to one other region
        300 * out, 300 * nat))  # results downloaded, through the NAT gateway too
    assert all(x.usd_per_hour == 0 for x in moved) and not p.spend.notes
    assert p.spend.usd_for_ttl == pytest.approx(p.spend.usd_per_hour * 48 + sum(x.usd_once for x in moved))


def test_a_stack_that_says_nothing_it_moves_is_told_so(cat):
    p, _ = _plan("aws-training", cat)
    assert not any(x.line == "transfer" for x in p.spend.lines)
    assert p.spend.notes == ["the stack says nothing of the data it moves (`data:`): traffic is not estimated"]
    r = cli("plan", str(ROOT / "stacks" / "examples" / "aws-training.yaml"))
    assert r.exit_code == 0 and "traffic is not estimated" in r.output and "for the TTL of 12.0 h" in r.output
    doc = json.loads(cli("--json", "plan", str(ROOT / "stacks" / "examples" / "aws-training.yaml")).stdout)["spend"]
    assert set(doc["by_line"]) == {"instances", "volumes", "file-system", "nat", "ipv4"}
    assert doc["usd_for_ttl"] == pytest.approx(doc["usd_per_hour"] * 12, rel=1e-4)


def test_cloud_nat_bills_per_vm_up_to_32_then_flat():
    from gpufleet.clouds import cloud

    def nat_for(n):
        res = [Planned("gcp:gpufleet:BulkInstances", {"names": [f"v{i}" for i in range(n)]}, "p", "us-central1", n),
               Planned("gcp:compute/routerNat:RouterNat", {}, "-", "us-central1", 0)]
        return next(u for u in cloud("gcp").spend(res) if u.line == "nat")

    assert (nat_for(32).item, nat_for(32).quantity) == ("cloud-nat:vm", 32)
    assert (nat_for(33).item, nat_for(33).quantity) == ("cloud-nat:gateway", 1)


@pytest.mark.parametrize("gib,tier", [(4, "P1"), (100, "P10"), (200, "P15"), (256, "P15"), (257, "P20"), (1024, "P30")])
def test_an_azure_premium_disk_bills_at_the_smallest_tier_that_holds_it(gib, tier):
    from gpufleet.clouds import cloud

    vmss = {"sku": {"capacity": 3.0}, "virtualMachineProfile": {"storageProfile": {"osDisk": {
        "diskSizeGB": float(gib), "managedDisk": {"storageAccountType": "Premium_LRS"}}}}}
    (u,) = cloud("azure").spend([Planned("azure-native:compute:VirtualMachineScaleSet", vmss, "p", "eastus", 3)])
    assert (u.item, u.unit, u.quantity) == (f"disk:premium-ssd:{tier}", "disk-month", 3)


def test_gp3_iops_and_throughput_above_the_free_baseline_are_lines_of_their_own():
    from gpufleet.clouds import cloud

    lt = {"blockDeviceMappings": [{"ebs": {"volumeSize": 500.0, "volumeType": "gp3", "iops": 6000.0,
                                           "throughput": 500.0}}]}
    got = {u.item: u.quantity for u in cloud("aws").spend([Planned("aws:ec2/launchTemplate:LaunchTemplate", lt, "p",
                                                                   "us-east-1", 4)])}
    assert got == {"ebs:gp3": 2000, "ebs:gp3-iops": 4 * 3000, "ebs:gp3-throughput": 4 * 375}


def test_a_rates_table_that_is_not_one_is_refused_with_its_line(tmp_path, monkeypatch):
    bad = tmp_path / "rates.csv"
    bad.write_text("provider,item,region,unit,usd,source,as_of\naws,ebs:gp3,us-east-1,gb-month,0.08,x,2026-01\n"
                   "aws,nat-gateway,us-east-1,fortnight,1,x,2026-01\n")
    with pytest.raises(CatalogError, match=r"rates.csv:3: nat-gateway: a rate needs a unit of"):
        rates.read(bad)
    bad.write_text("provider,item,usd\naws,x,1\n")
    with pytest.raises(CatalogError, match="its columns are"):
        rates.read(bad)
    for row in csv.DictReader(RATES.open()):  # the embedded table: every row complete
        assert row["unit"] in rates.UNITS and row["source"] and row["as_of"][:2] == "20", row


# --- reservations and flex-start on the bill (hostile review of issue 49, items 2, 3 and 6) ---------

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFjtZCMk8DLg9Gw3q44fZDXDQHKWHrf7Wb55hmdcfA0A x"


def _one_pool(tmp_path, pool: str, cat):
    return _plan("one", cat, f"name: one\nowner: o@example.com\nttl: 24h\naccess: {{public_key: '{KEY}'}}\n"
                             f"pools:\n  - {pool}\n", tmp_path)[0]


def test_a_reservation_the_catalog_cannot_price_is_named_unpriced_rather_than_a_crash(cat, tmp_path):
    """The catalog has no on-demand a4-highgpu-8g row in us-east4 (spot only): the reservation there is
    billed at a rate it does not know. Before, `plan` crashed ("unsupported operand type(s) for +: 'int'
    and 'NoneType'"); now the line is unpriced, named and counted in no total."""
    p = _one_pool(tmp_path, "{name: b, provider: gcp, region: us-central1, instance_type: a4-highgpu-8g, nodes: 2, "
                            "spot: true, reservations: [{id: r1, region: us-east4, zone: us-east4-b}]}", cat)
    (held,) = [x for x in p.spend.lines if x.line == "reservation"]
    assert not held.priced and held.usd_per_hour == 0 and "no ondemand price for a4-highgpu-8g in us-east4" in held.note
    assert held.what in p.spend.to_dict()["unpriced"] and p.spend.unpriced_nodes == [f"pool b: {held.what}"]
    # Google sells A4 reserved in future reservations only, billed at a discount: the list rate is a bound
    assert "at a discount: priced at the on-demand list rate, an upper bound" in held.what


def test_every_reservation_a_pool_holds_is_on_the_bill_whether_it_runs_there_or_not(cat, tmp_path):
    """Two On-Demand Capacity Reservations of 2 x p4d: both are billed while they exist, used or not
    (capacity-reservations-pricing-billing.html, read 2026-11), and the pool, running in the first, adds
    nothing beyond them. Before, the bill had the first reservation only."""
    p = _one_pool(tmp_path, "{name: t, provider: aws, region: us-east-1, instance_type: p4d.24xlarge, nodes: 2, "
                            "reservations: [{id: cr-0aaaaaaaaaaaaaaaa, zone: us-east-1a}, "
                            "{id: cr-0bbbbbbbbbbbbbbbb, zone: us-east-1b}]}", cat)
    node = cat.offer("aws", "us-east-1", "p4d.24xlarge", "ondemand").usd_per_hour
    held = [x for x in p.spend.lines if x.line == "reservation"]
    assert [x.usd_per_hour for x in held] == [pytest.approx(2 * node)] * 2
    assert not [x for x in p.spend.lines if x.line == "instances"]  # its nodes run in the first: billed as it
    assert "the pool runs in it" in held[0].note and "not used by the pool" in held[1].note


def test_a_flex_start_pool_is_priced_at_the_on_demand_rate_as_an_upper_bound_and_says_so(cat, tmp_path):
    """Google bills flex-start VMs at Dynamic Workload Scheduler prices, "Discounted (up to 53%)" from
    on demand (cloud.google.com/ai-hypercomputer/docs/consumption-models, read 2026-11); the catalog has
    the on-demand list rate only, so the line is that rate and says it is at most what is billed."""
    p = _one_pool(tmp_path, "{name: b, provider: gcp, region: us-central1, instance_type: a4-highgpu-8g, nodes: 2, "
                            "flex_start: {run_hours: 24}}", cat)
    (nodes,) = [x for x in p.spend.lines if x.line == "instances"]
    node = cat.offer("gcp", "us-central1", "a4-highgpu-8g", "ondemand").usd_per_hour
    assert nodes.usd_per_hour == pytest.approx(2 * node) and nodes.priced
    assert "upper bound" in nodes.note and "Dynamic Workload Scheduler" in nodes.note

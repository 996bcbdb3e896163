"""Stack files: examples load; bad input gets file:line: key: problem + a suggestion."""

import pytest

from gpufleet import stacks
from gpufleet.errors import EXIT_BAD_INPUT, SpecError, SpecErrors

from conftest import EXAMPLES

GOOD = """\
name: demo
owner: ops@example.com
ttl: 8h
pools:
  - name: trainers
    provider: aws
    region: us-east-1
    instance_type: p4d.24xlarge
    nodes: 2
    interconnect: efa
"""


KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeFakeFakeFakeFakeFakeFakeFakeFakeFakeFake test"


def _errors(write, text):
    path = write("stack.yaml", text)
    with pytest.raises((SpecError, SpecErrors)) as ei:
        stacks.load(path)
    e = ei.value
    assert e.exit_code == EXIT_BAD_INPUT
    return path, (e.errors if isinstance(e, SpecErrors) else [e])


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_stack_is_valid(path, cat):
    st = stacks.load(path, cat)
    assert st.pools and st.total_nodes() >= 1


def test_examples_cover_every_provider_and_a_mixed_stack():
    providers = {}
    for p in EXAMPLES:
        st = stacks.load(p)
        providers[p.name] = {pool.provider for pool in st.pools}
    covered = set().union(*providers.values())
    assert covered == {"aws", "gcp", "azure", "baremetal"}
    assert any(len(v) >= 3 for v in providers.values()), "a mixed stack ships"


def test_yaml_syntax_error_names_the_line(write):
    path, errs = _errors(write, GOOD.replace("    nodes: 2\n", "    nodes: [2\n"))
    assert errs[0].path == path and errs[0].line in (9, 10, 11)
    assert "YAML syntax error" in errs[0].problem


def test_unknown_key_suggests_the_near_miss(write):
    path, errs = _errors(write, GOOD.replace("    nodes: 2", "    nodez: 2"))
    (e,) = errs
    assert (e.line, e.key, e.problem) == (9, "pools[0].nodez", "unknown key")
    assert "nodes" in e.hint
    assert e.message.startswith(f"{path}:9: pools[0].nodez:")


def test_misspelled_gpu_gets_did_you_mean(write):
    text = GOOD.replace("    instance_type: p4d.24xlarge\n", "    gpu: A100-40XB\n    gpus_per_node: 8\n")
    _, errs = _errors(write, text)
    (e,) = errs
    assert e.key == "pools[0].gpu" and e.line == 8
    assert "A100-40GB" in e.hint


def test_misspelled_instance_type_and_region(write):
    text = GOOD.replace("p4d.24xlarge", "p4d.24xlarg").replace("us-east-1", "us-east-l")
    _, errs = _errors(write, text)
    by_key = {e.key: e for e in errs}
    assert "p4d.24xlarge" in by_key["pools[0].instance_type"].hint
    assert "us-east-1" in by_key["pools[0].region"].hint
    assert by_key["pools[0].region"].line == 7


def test_negative_node_count(write):
    _, errs = _errors(write, GOOD.replace("nodes: 2", "nodes: -3"))
    (e,) = errs
    assert e.key == "pools[0].nodes" and e.line == 9 and "greater than or equal to 1" in e.problem


def test_instance_type_not_offered_in_region(write):
    _, errs = _errors(write, GOOD.replace("us-east-1", "sa-east-1"))  # no P4d in São Paulo in the catalog
    (e,) = errs
    assert e.key == "pools[0].region" and "not offered" in e.problem
    assert "us-east-1" in e.hint


def test_provider_cannot_give_the_interconnect(write):
    text = GOOD.replace("provider: aws", "provider: azure").replace("us-east-1", "eastus").replace(
        "p4d.24xlarge", "Standard_ND96asr_v4").replace("pools:", f"access: {{public_key: '{KEY}'}}\npools:")
    _, errs = _errors(write, text)
    (e,) = errs
    assert e.key == "pools[0].interconnect" and "azure cannot provide efa" in e.problem
    assert "infiniband" in e.hint


def test_instance_without_the_fabric(write):
    _, errs = _errors(write, GOOD.replace("p4d.24xlarge", "g5.xlarge").replace("nodes: 2", "nodes: 1"))
    (e,) = errs
    assert "g5.xlarge has no efa" in e.problem and "p5.48xlarge" in e.hint


def test_bad_ttl_and_duplicate_pool(write):
    _, errs = _errors(write, GOOD.replace("ttl: 8h", "ttl: eight hours"))
    assert errs[0].key == "ttl" and "90m, 8h" in errs[0].hint
    dup = GOOD + GOOD.split("pools:\n", 1)[1]
    _, errs = _errors(write, dup)
    assert "two pools are named 'trainers'" in errs[0].problem


def test_several_problems_are_reported_together(write):
    text = GOOD.replace("p4d.24xlarge", "p4d.24xlarg").replace("us-east-1", "us-east-l") + """\
  - name: rack
    provider: baremetal
    site: dc1
    gpu: H10
    gpus_per_node: 8
    hosts: [{address: 192.0.2.1}]
"""
    _, errs = _errors(write, text)
    assert [e.key for e in errs] == ["pools[0].region", "pools[0].instance_type", "pools[1].gpu"]
    assert [e.line for e in errs] == sorted(e.line for e in errs)


def test_baremetal_rules(write):
    text = """\
name: rack
owner: me
pools:
  - name: r
    provider: baremetal
    site: dc1
    gpu: H100
    gpus_per_node: 8
    nodes: 3
    hosts: [{address: 192.0.2.1}, {address: 192.0.2.2}]
"""
    _, errs = _errors(write, text)
    assert "nodes is 3 but 2 hosts" in errs[0].problem and errs[0].key == "pools[0]"


def test_top_level_must_be_a_mapping(write):
    _, errs = _errors(write, "- just\n- a list\n")
    assert "mapping" in errs[0].problem


def test_missing_file(tmp_path):
    with pytest.raises(SpecError) as ei:
        stacks.load(tmp_path / "nope.yaml")
    assert "file not found" in ei.value.message


# --- access, network, provider capabilities (issue 3) --------------------------------------

def test_azure_needs_a_public_key(write):
    text = GOOD.replace("provider: aws", "provider: azure").replace("us-east-1", "eastus").replace(
        "p4d.24xlarge", "Standard_ND96isr_H100_v5").replace("interconnect: efa", "interconnect: infiniband-ndr")
    _, errs = _errors(write, text)
    (e,) = errs
    assert "SSH public key" in e.problem and "access.public_key" in e.hint and e.line == 6


def test_public_key_path_is_read_relative_to_the_stack(write, tmp_path):
    write("keys/me.pub", KEY + "\n")
    st = stacks.load(write("stack.yaml", GOOD.replace("pools:", "access: {public_key: keys/me.pub}\npools:")))
    assert st.access.public_key == KEY


def test_private_key_or_missing_key_file_is_refused(write):
    write("id_ed25519", "-----BEGIN OPENSSH PRIVATE KEY-----\nxx\n")
    _, errs = _errors(write, GOOD.replace("pools:", "access:\n  public_key: id_ed25519\npools:"))
    assert "not an OpenSSH public key" in errs[0].problem and errs[0].line == 5
    _, errs = _errors(write, GOOD.replace("pools:", "access:\n  public_key: nothere.pub\npools:"))
    assert "cannot read" in errs[0].problem and errs[0].key == "access.public_key"


def test_ssh_cidr_and_network_block_are_checked(write):
    _, errs = _errors(write, GOOD.replace("pools:", "access:\n  ssh_cidrs: [203.0.113.0/33]\npools:"))
    assert "not a CIDR" in errs[0].message and errs[0].line == 5
    _, errs = _errors(write, GOOD.replace("pools:", "network: {cidr: 8.8.0.0/16}\npools:"))
    assert "private block" in errs[0].message


def test_zone_must_belong_to_the_region(write):
    _, errs = _errors(write, GOOD.replace("region: us-east-1", "region: us-east-1\n    zone: us-east-1z"))
    (e,) = errs
    assert e.key == "pools[0].zone" and "us-east-1a" in e.hint


def test_lustre_tier(write):
    text = GOOD + "    storage: [{type: lustre, capacity_tib: 2.4, throughput_mbps_per_tib: 300}]\n"
    _, errs = _errors(write, text)
    (e,) = errs
    assert e.key == "pools[0].storage[0].throughput_mbps_per_tib" and "125, 250, 500, 1000" in e.hint


GCP = "  - {name: g, provider: gcp, region: us-central1, instance_type: a3-highgpu-8g, reservations: [%s]}\n"
AZURE = "  - {name: z, provider: azure, region: eastus, instance_type: Standard_NC96ads_A100_v4, reservations: [%s]}\n"
WITH_KEY = GOOD.replace("pools:\n", f"access: {{public_key: '{KEY}'}}\npools:\n")
CRG = "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg/providers/Microsoft.Compute/" \
      "capacityReservationGroups/h100"


@pytest.mark.parametrize("entry, key, said", [
    ("{id: cr-12, zone: us-east-1a}", "pools[0].reservations[0].id", "not a capacity reservation id"),
    ("{id: cr-0123456789abcdef0}", "pools[0].reservations[0].zone", "holds capacity in one zone"),
    ("{id: cr-0123456789abcdef0, zone: us-east-1q}", "pools[0].reservations[0].zone", "has no zone 'us-east-1q'"),
    ("{id: cr-0123456789abcdef0, zone: us-east-1a, instance_type: p5.48xlarge}",
     "pools[0].reservations[0].instance_type", "p5.48xlarge has 8x H100"),
    ("{id: cr-0123456789abcdef0, zone: us-east-1a, capacity_block: {starts_at: 2026-12-02T11:30:00Z, "
     "ends_at: 2026-12-01T11:30:00Z, upfront_usd: 1000}}", "pools[0].reservations[0].capacity_block",
     "ends_at must come after starts_at"),
    ("{id: cr-0123456789abcdef0, zone: us-east-1a, provider: gcp}", "pools[0].reservations[0].provider",
     "where the pool may not move"),
])
def test_a_bad_aws_reservation_is_said_with_its_line_and_key(write, entry, key, said):
    _, errs = _errors(write, GOOD + f"    reservations: [{entry}]\n")
    assert [(e.key, said in e.message) for e in errs] == [(key, True)], [(e.key, e.message) for e in errs]
    assert errs[0].line == GOOD.count("\n") + 1


@pytest.mark.parametrize("pool, entry, key, said", [
    (GCP, "{id: Bad_Name, zone: us-central1-a}", "pools[1].reservations[0].id", "not a reservation name"),
    (GCP, "{id: h100, zone: us-central1-a, capacity_block: {starts_at: 2026-12-01T00:00:00Z, "
          "ends_at: 2026-12-02T00:00:00Z, upfront_usd: 9}}", "pools[1].reservations[0].capacity_block",
     "describes an AWS Capacity Block"),
    (GCP, "{id: h100}", "pools[1].reservations[0].zone", "holds capacity in one zone"),
    (AZURE, "{id: h100}", "pools[1].reservations[0].id", "not a capacity reservation group id"),
])
def test_a_bad_gcp_or_azure_reservation_is_said_in_its_clouds_terms(write, pool, entry, key, said):
    _, errs = _errors(write, WITH_KEY + pool % entry)
    assert [(e.key, said in e.message) for e in errs] == [(key, True)], [(e.key, e.message) for e in errs]


def test_good_reservations_on_every_cloud_and_their_defaults(write):
    text = WITH_KEY + "    reservations: [{id: cr-0123456789abcdef0, zone: us-east-1b}]\n" + \
        GCP % "{id: projects/shared-proj/reservations/h100, zone: us-central1-a}" + AZURE % f"{{id: {CRG}}}"
    st = stacks.load(write("ok.yaml", text))
    aws, gcp, azure = (p.reservations[0] for p in st.pools)
    assert (aws.provider, aws.region, aws.instance_type) == ("aws", "us-east-1", "p4d.24xlarge")
    assert (gcp.provider, gcp.zone) == ("gcp", "us-central1-a") and azure.provider == "azure"


AZURE_OF = "  - {name: z, provider: azure, region: eastus, instance_type: %s, reservations: [%s]%s}\n"


@pytest.mark.parametrize("size, said", [
    # ND (InfiniBand) and NCads H100 v5 sizes: "Support for other VM series isn't currently available"
    ("Standard_NC80adis_H100_v5", "the NCads H100 v5-series is among the series it does not support"),
    ("Standard_NC40ads_H100_v5", "the NCads H100 v5-series is among the series it does not support"),
    ("Standard_ND96isr_H100_v5", "the ND-series is among the series it does not support"),
])
def test_an_azure_reservation_of_a_series_azure_does_not_reserve_is_refused_with_that_reason(write, size, said):
    """Microsoft's capacity reservation overview (ms.date 02/17/2026) lists the GPU series it reserves and
    those it does not; validate accepted any size but InfiniBand ones, and said of ND the wrong reason."""
    _, errs = _errors(write, WITH_KEY + AZURE_OF % (size, f"{{id: {CRG}, zone: '1'}}", ""))
    (e,) = errs
    assert e.key == "pools[1].reservations[0]" and said in e.message and "capacity reservation overview" in e.message
    assert "Standard_NC96ads_A100_v4" in e.hint and "without InfiniBand" not in e.hint


def test_every_azure_gpu_size_of_the_catalog_is_in_the_reservable_table(cat):
    from gpufleet.clouds.azure import reservable

    assert [n for (p, n), it in cat.instances.items() if p == "azure" and reservable.series(n) is None] == []


def test_an_azure_lustre_pool_cannot_take_a_regional_reservation(write):
    """Azure Managed Lustre is zonal and puts the scale set in its zone, while "All VMs using the capacity
    reservation group must be deployed without specifying a zone" when it has none (capacity reservation
    overview, ms.date 02/17/2026): the pool got a zonal scale set against a regional reservation."""
    lustre = ", storage: [{type: lustre, capacity_tib: 4, throughput_mbps_per_tib: 250}]"
    _, errs = _errors(write, WITH_KEY + AZURE_OF % ("Standard_NC96ads_A100_v4", f"{{id: {CRG}}}", lustre))
    (e,) = errs
    assert e.key == "pools[1].reservations[0].zone" and "regional" in e.message and "zone: '1'" in e.hint
    stacks.load(write("zonal.yaml", WITH_KEY + AZURE_OF % ("Standard_NC96ads_A100_v4", f"{{id: {CRG}, zone: '1'}}",
                                                          lustre)))


def test_the_old_capacity_reservation_key_names_its_successor(write):
    _, errs = _errors(write, GOOD + "    capacity_reservation: cr-0123456789abcdef0\n")
    assert "now a list, `reservations`" in errs[0].message
    assert "reservations: [{id: cr-0123456789abcdef0" in errs[0].hint


def test_unknown_image_and_public_ip_with_efa(write):
    _, errs = _errors(write, GOOD + "    image: ubuntu-20.04\n    public_ip: true\n")
    keys = sorted(e.key for e in errs)
    assert keys == ["pools[0].image", "pools[0].public_ip"]
    assert "ami-" in next(e.hint for e in errs if e.key == "pools[0].image")


def test_a_zone_the_provider_does_not_offer_the_type_in_is_refused_after_a_refresh(write, tmp_path, monkeypatch):
    """Once `catalog refresh` has stored the zones AWS offers p4d.24xlarge in, a pool pinned to
    another zone is refused before anything is created."""
    from gpufleet.catalog import store as refreshed

    store = tmp_path / "prices.json"
    monkeypatch.setenv("GPUFLEET_PRICES", str(store))
    refreshed.write(store, {"schema": refreshed.SCHEMA, "providers": {}, "prices": [
        {"provider": "aws", "item": "p4d.24xlarge", "region": "us-east-1", "market": "ondemand", "usd_per_hour": 21.96,
         "api": "aws-price-list", "sku_id": "SKU1", "fetched_at": "2026-11-22T08:00:00Z"}], "facts": [
        {"provider": "aws", "item": "p4d.24xlarge", "api": "aws-ec2-instance-types", "fetched_at": "2026-11-22T08:00:00Z",
         "gpu": "A100-40GB", "gpu_count": 8, "zones": {"us-east-1": ["us-east-1b", "us-east-1c"]}}]})
    _, errs = _errors(write, GOOD.replace("region: us-east-1", "region: us-east-1\n    zone: us-east-1a"))
    e = next(e for e in errs if e.key == "pools[0].zone")
    assert "p4d.24xlarge is not offered in us-east-1a" in e.message and "us-east-1b, us-east-1c" in e.hint
    stacks.load(write("ok.yaml", GOOD.replace("region: us-east-1", "region: us-east-1\n    zone: us-east-1c")))


def test_a_pools_health_block_defaults_and_its_limits(write):
    pool = stacks.load(write("stack.yaml", GOOD)).pools[0]
    assert (pool.health.gate, pool.health.interval, pool.health.on_fault, pool.health.max_replacements) == \
        ("quick", 60, "isolate", 2)
    _, errs = _errors(write, GOOD + "    health: {interval: 5, gate: dcgm4}\n")
    assert sorted(e.key for e in errs) == ["pools[0].health.gate", "pools[0].health.interval"]
    rack = """\
name: rack
owner: me
pools:
  - {name: r, provider: baremetal, site: dc1, gpu: H100, gpus_per_node: 8, hosts: [{address: 192.0.2.1}],
     health: {on_fault: replace}}
"""
    _, errs = _errors(write, rack)
    assert "cannot be replaced" in errs[0].problem and "isolate" in errs[0].hint


def test_a_dcgm_gate_needs_dcgm_on_the_pools_nodes(write):
    """(review rev51e, 5) gate dcgm1-3 runs `dcgmi diag -r N`, and DCGM comes with the monitoring formula alone
    (salt/monitoring): without it the gate could never pass (the watch requires the diagnostic), so validate says so."""
    assert stacks.load(write("ok.yaml", GOOD + "    health: {gate: dcgm2}\n")).pools[0].health.gate == "dcgm2"
    _, errs = _errors(write, GOOD + "    health: {gate: dcgm2}\nsoftware: {monitoring: false}\n")
    (e,) = errs
    assert e.key == "pools[0].health.gate" and "software.monitoring is false" in e.message and "gate: quick" in e.hint
    _, errs = _errors(write, GOOD + "    health: {gate: dcgm1}\n    salt: {states: [nvidia_driver, cuda]}\n")
    assert [e.key for e in errs] == ["pools[0].health.gate"] and "salt.states has no monitoring" in errs[0].message
    stacks.load(write("quick.yaml", GOOD + "    health: {gate: quick}\nsoftware: {monitoring: false}\n"))


def test_the_active_checks_period_defaults_to_a_day_and_is_not_shorter_than_the_watch(write):
    pool = stacks.load(write("stack.yaml", GOOD)).pools[0]
    assert pool.health.active_every == 86_400
    assert stacks.load(write("off.yaml", GOOD + "    health: {active_every: 0}\n")).pools[0].health.active_every == 0
    _, errs = _errors(write, GOOD + "    health: {interval: 120, active_every: 60}\n")
    (e,) = errs
    assert e.key == "pools[0].health" and "shorter than health.interval 120" in e.message and "86400" in e.hint


# --- elastic pools: nodes: {min, max} (issue 51, step 5) ------------------------------------------

def test_an_elastic_pool_is_planned_at_its_min_and_keeps_its_bounds(write, cat):
    st = stacks.load(write("stack.yaml", GOOD.replace("nodes: 2", "nodes: {min: 2, max: 6}")), cat)
    (p,) = st.pools
    assert (p.nodes, p.bounds, (p.size.min, p.size.max)) == (2, (2, 6), (2, 6))
    assert p.model_copy(update={"image": "x"}).bounds == (2, 6)  # failover and the program copy pools
    fixed = stacks.load(write("fixed.yaml", GOOD), cat).pools[0]
    assert (fixed.nodes, fixed.size, fixed.bounds) == (2, None, (2, 2))


@pytest.mark.parametrize("nodes, says", [
    ("{min: 3, max: 2}", "0 <= min <= max"),
    ("{min: 1, max: 0}", "0 <= min <= max"),
    ("{min: 1, max: 100000}", "1 <= max <= 10000"),
    ("{min: 1, most: 2}", "unknown: most"),
    ("{min: 1}", "takes min and max"),
    ("{min: one, max: 2}", "nodes.min 'one' is not a valid integer"),
    ("{min: 1, max: true}", "nodes.max True is not a valid integer"),
    ("{min: 0, max: 4}", "not supported yet"),
])
def test_a_bad_size_is_named_at_its_line_with_a_hint(write, nodes, says):
    path, errs = _errors(write, GOOD.replace("nodes: 2", f"nodes: {nodes}"))
    (e,) = errs
    assert (e.key, e.line) == ("pools[0].nodes", 9) and says in e.problem and e.hint, e.message


def test_a_controller_is_never_elastic(write):
    text = GOOD.replace("nodes: 2", "nodes: {min: 1, max: 3}\n    role: controller") + (
        "  - {name: gpu, provider: aws, region: us-east-1, instance_type: p4d.24xlarge}\nslurm: {}\n")
    _, errs = _errors(write, text)
    assert any("controller is one node" in e.problem and e.line == 5 for e in errs), [e.message for e in errs]

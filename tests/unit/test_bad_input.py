"""Bad input is refused with its file, line and key, and a way out (exit 2): unsafe access, host
addresses, numbers out of range, YAML that would hang or crash, flags that made no sense; and what
looked like success but was not (a quote dropped, a pool priced at $0.00, a discount on a quote)."""

import json

import pytest

from gpufleet import catalog, stacks
from gpufleet.errors import SpecError, SpecErrors
from gpufleet.perf import workloads

from conftest import cli

POOL = "  - {name: a, provider: aws, region: us-east-1, instance_type: p4d.24xlarge}\n"


def stack(extra: str = "", pools: str = POOL) -> str:
    return f"name: s\nowner: o\n{extra}pools:\n{pools}"


def problems(write, text: str) -> list[SpecError]:
    with pytest.raises((SpecError, SpecErrors)) as e:
        stacks.load(write("stack.yaml", text))
    return getattr(e.value, "errors", [e.value])


@pytest.mark.parametrize("cidrs,needle,hint", [
    ("[0.0.0.0/0]", "open SSH to the whole Internet (0.0.0.0/0)", "ssh_from_internet: true"),
    ("[0.0.0.0/1, 128.0.0.0/1]", "open SSH to the whole Internet (0.0.0.0/0)", "ssh_from_internet: true"),
    ("['::/0']", "is an IPv6 block", "IPv4"),
    ("[10.0.0.0/0]", "10.0.0.0/0 has bits set past its /0 prefix", "did you mean 10.0.0.0/8?"),
    ("[203.0.113.7/24]", "203.0.113.7/24 has bits set", "did you mean 203.0.113.7/32?"),
])
def test_ssh_open_to_the_internet_needs_consent_and_typos_are_caught(write, cidrs, needle, hint):
    (e,) = problems(write, stack(f"access: {{ssh_cidrs: {cidrs}}}\n"))
    assert needle in e.problem and hint in (e.hint or "") and e.line == 3


def test_consent_to_internet_wide_ssh_is_flagged_by_plan(write):
    path = write("s.yaml", stack("access: {ssh_cidrs: [0.0.0.0/0], ssh_from_internet: true}\n"))
    r = cli("--json", "plan", path)
    assert r.exit_code == 0 and any("open to the whole Internet" in w for w in json.loads(r.stdout)["warnings"])
    r = cli("plan", path)
    assert "warning: SSH (port 22) is open to the whole Internet (0.0.0.0/0)" in r.output
    assert json.loads(cli("--json", "plan", write("t.yaml", stack())).stdout)["warnings"] == []


@pytest.mark.parametrize("host,needle", [
    ("{address: 999.1.1.1}", "is not an IP address or a host name"),
    ("{address: ''}", "is not an IP address or a host name"),
    ("{address: '10.0.0.1; rm -rf /'}", "is not an IP address or a host name"),
    ("{address: 10.0.0.1, port: true}", "valid integer"),
])
def test_rack_hosts_are_addresses_or_names(write, host, needle):
    rack = f"  - {{name: r, provider: baremetal, site: s, gpu: H100, gpus_per_node: 8, hosts: [{host}]}}\n"
    errs = problems(write, stack(pools=rack))
    assert any(needle in e.problem for e in errs) and all(e.line for e in errs)


def test_a_host_listed_twice_is_refused(write):
    rack = ("  - {name: r, provider: baremetal, site: s, gpu: H100, gpus_per_node: 8, hosts: [{address: gpu1.lab}]}\n"
            "  - {name: q, provider: baremetal, site: s, gpu: H100, gpus_per_node: 8, hosts: [{address: GPU1.lab.}]}\n")
    (e,) = problems(write, stack(pools=rack))
    assert "host GPU1.lab.:22 is listed twice (r[0] and q[0])" in e.problem


@pytest.mark.parametrize("field,needle", [
    ("nodes: true", "valid integer"),
    ("nodes: 1.5", "valid integer"),
    ("nodes: 100000", "less than or equal to 10000"),
    ("storage: [{type: nfs, server: nas, mount: data}]", "is not an absolute mount point"),
    ("storage: [{type: nfs, server: nas, mount: /a/../etc}]", "is not an absolute mount point"),
])
def test_pool_numbers_and_paths_are_what_they_say(write, field, needle):
    pool = POOL.replace("}\n", f", {field}}}\n")
    errs = problems(write, stack(pools=pool))
    assert any(needle in e.problem for e in errs), [e.problem for e in errs]


def test_ttl_and_workload_are_range_and_name_checked(write):
    errs = problems(write, stack("ttl: 99999999999d\nworkload: {name: resnet50, tokens: 1e40}\n"))
    assert {e.key for e in errs} == {"ttl", "workload.tokens"}
    assert "longer than 366 days" in next(e.problem for e in errs if e.key == "ttl")
    (e,) = problems(write, stack("workload: {name: resnet5, epochs: 1}\n"))  # names: the second pass
    assert e.key == "workload.name" and e.line == 3 and "did you mean 'resnet50'" in e.hint


def test_yaml_merge_keys_and_extension_keys_work(write):
    st = stacks.load(write("m.yaml", "name: m\nowner: o\nx-pool: &p {provider: aws, region: us-east-1, "
                                     "instance_type: p4d.24xlarge, nodes: 2}\npools:\n"
                                     "  - {<<: *p, name: a}\n  - {<<: *p, name: b, nodes: 1}\n"))
    assert [(p.name, p.nodes, p.instance_type) for p in st.pools] == [("a", 2, "p4d.24xlarge"), ("b", 1, "p4d.24xlarge")]


@pytest.mark.parametrize("text,needle", [
    ("name: x\n" + "".join(f"x-{c}: &{c} [" + ", ".join([f"*{p}"] * 9) + "]\n"
                           for p, c in zip("abcdefgh", "bcdefghi")).replace("x-b: &b [*a", "x-a: &a [lol]\nx-b: &b [*a"),
     "holds more than 200,000 values"),
    ("name: " + "[" * 3000 + "]" * 3000 + "\n", "nested more than 64 levels deep"),
    ("name: x\nx-e: !!python/object/apply:os.system [true]\n", "unsupported YAML tag"),
])
def test_yaml_that_would_hang_or_crash_is_refused_with_its_line(write, text, needle):
    path = write("y.yaml", text)
    for cmd in ("validate", "plan"):
        r = cli(cmd, path)
        assert r.exit_code == 2 and needle in r.output and f"{path}:" in r.output and "Traceback" not in r.output


def test_the_readme_config_is_read_and_quotes_are_what_is_paid(write):
    path = write("config.yaml", """discounts: {aws: 0.12}
prices:
  - {provider: aws, item: p4d.24xlarge, region: us-east-1, market: spot, usd_per_hour: 9.80, as_of: 2026-11-20}
""")
    cat = catalog.load(path)
    spot = cat.offer("aws", "us-east-1", "p4d.24xlarge", "spot")
    listed = cat.offer("aws", "us-east-1", "p4d.24xlarge", "ondemand")
    assert spot.usd_per_hour == pytest.approx(9.80) and spot.as_of == "2026-11-20"  # no discount on a quote
    shipped = catalog.load(use_config=False).offer("aws", "us-east-1", "p4d.24xlarge", "ondemand").usd_per_hour
    assert listed.usd_per_hour == pytest.approx(shipped * 0.88) and listed.discount == 0.12


def test_a_quote_for_nothing_the_catalog_knows_is_refused_not_dropped(write):
    path = write("config.yaml", "prices:\n  - {provider: aws, item: p4d.24xlage, region: us-east-1, usd_per_hour: 9}\n"
                                "  - {provider: aws, item: p4d.24xlarge, region: us-east-l, usd_per_hour: 9}\n")
    r = cli("--config", path, "compare", "resnet50")
    assert r.exit_code == 2 and f"{path}:2: prices[0].item" in r.output and "did you mean 'p4d.24xlarge'" in r.output
    assert f"{path}:3: prices[1].region" in r.output and "did you mean 'us-east-1'" in r.output


def test_a_pool_without_a_price_is_never_shown_as_free(write):
    # the spot snapshots have no P5 spot price in ca-central-1 (SkyPilot's only "spot" row there is
    # the on-demand price, its filler): a spot pool of it has no price
    unpriced = POOL.replace("us-east-1, instance_type: p4d.24xlarge}", "ca-central-1, instance_type: p5.48xlarge, spot: true}")
    path = write("s.yaml", stack("workload: {name: resnet50, epochs: 1}\n", unpriced + POOL.replace("name: a", "name: b")))
    r = cli("validate", path)
    assert r.exit_code == 0 and "$0.00" not in r.output and "pool a has no price: no spot price for p5.48xlarge" in r.output
    r = cli("--json", "compare", "--stack", path)
    doc = json.loads(r.stdout)
    assert r.exit_code == 1 and set(doc["left_out"]) == {"a"} and {o["nodes"] for o in doc["offers"]} == {1}


@pytest.mark.parametrize("args,needle", [
    (["--top", "-1"], "--top -1"), (["--nodes", "1,,2"], "not a list of whole numbers"),
    (["--nodes", "100000"], "node counts go from 1 to 10,000"), (["--tokens", "1e40"], "at most 1e+15"),
    (["--epochs", "nan"], "must be positive"),
])
def test_compare_flags_out_of_range(args, needle):
    r = cli("compare", "llm-7b", *args)
    assert r.exit_code == 2 and needle in r.output


def test_markdown_honours_top_and_json_comes_after_the_command_too():
    r = cli("compare", "resnet50", "--markdown", "--top", "3")
    assert r.exit_code == 0 and sum(line.startswith("| ") and line[2].isdigit() for line in r.stdout.splitlines()) == 3
    assert "Showing 3 of" in r.stdout
    for args in (["compare", "resnet50", "--json", "--top", "1"], ["catalog", "gpus", "--json"],
                 ["validate", "stacks/examples/aws-training.yaml", "-v", "--json"]):
        r = cli(*args)
        assert r.exit_code == 0 and json.loads(r.stdout), args


def test_a_library_llm_and_its_size_are_the_same_workload():
    assert workloads.get("llm:70b:2048") == workloads.get("llm-70b")  # MPT-70B, at its sequence
    assert workloads.get("llm:70b").params == 70e9 and workloads.get("llm:70b").seq_len == 8192  # Llama-3-like
    r = cli("--json", "compare", "llm:13b:2048", "--gpu", "H100", "--tokens", "1e10", "--top", "1")
    s = cli("--json", "compare", "llm-13b", "--gpu", "H100", "--tokens", "1e10", "--top", "1")
    assert json.loads(r.stdout)["offers"][0]["time_to_train_h"] == json.loads(s.stdout)["offers"][0]["time_to_train_h"]


@pytest.mark.parametrize("pool,needle,hint", [
    # Managed Lustre at 1000 MB/s/TiB stops at 1,530,000 GiB; AMLFS's 500 tier at 128 TiB
    ("  - {name: a, provider: gcp, region: us-central1, instance_type: a3-highgpu-8g,\n"
     "     storage: [{type: lustre, capacity_tib: 2000, throughput_mbps_per_tib: 1000, mount: /l}]}\n",
     "holds at most 1,530,000 GiB", "cloud.google.com/managed-lustre"),
    ("  - {name: a, provider: azure, region: eastus, instance_type: Standard_ND96isr_H100_v5,\n"
     "     storage: [{type: lustre, capacity_tib: 200, throughput_mbps_per_tib: 500, mount: /l}]}\n",
     "holds at most 128 TiB", "learn.microsoft.com/azure/azure-managed-lustre"),
    ("  - {name: a, provider: gcp, region: us-central1, instance_type: g2-standard-8,\n"
     "     storage: [{type: nfs, capacity_tib: 101, mount: /n}]}\n",
     "holds at most 102,400 GiB", "service-tiers-zonal"),
])
def test_file_systems_larger_than_their_service_sells_are_refused(write, pool, needle, hint):
    extra = "access: {public_key: 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeFakeFakeFakeFakeFakeFakeFakeFake k'}\n"
    (e,) = problems(write, stack(extra, pool))
    assert needle in e.problem and hint in (e.hint or "") and e.line == 6 and "storage[0].capacity_tib" in str(e)


@pytest.mark.parametrize("name", ["gpu-", "a-b-", "-a", "A"])
def test_names_every_cloud_accepts(write, name):
    (e,) = problems(write, f"name: {name}\nowner: o\npools:\n{POOL}")
    assert "is not a valid stack name" in e.problem and "not ending in '-'" in (e.hint or "") and e.line == 1

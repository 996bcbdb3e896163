"""The embedded catalog's build (gpufleet.catalog.build) and what it ships: the whole GPU market
of AWS, GCP and Azure per region and zone, on demand and spot, each row with its source."""

import csv
import fnmatch
import json
import os
import shutil
from pathlib import Path

import pytest

from gpufleet import catalog
from gpufleet.catalog import build
from gpufleet.catalog.store import USD_PER_GPU_HOUR

from conftest import ROOT, cli

FIXTURE = ROOT / "tests" / "data" / "skypilot"
SHIPPED = Path(build.__file__).parent


@pytest.fixture
def inputs(tmp_path):
    """The build's own inputs, narrowed to the families the fixture's rows hold, no pricing pages."""
    d = tmp_path / "inputs"
    d.mkdir()
    shutil.copy(SHIPPED / "sources" / "instance_specs.csv", d)
    rows = list(csv.DictReader(open(SHIPPED / "sources" / "families.csv")))
    keep = {"G5", "P5", "A3 High", "N1 + T4", "NC T4 v3"}
    with open(d / "families.csv", "w", newline="") as f:
        w = csv.DictWriter(f, rows[0].keys())
        w.writeheader()
        w.writerows(r for r in rows if r["family"] in keep)
    (d / "pricing_pages.csv").write_text("provider,item,region,market,usd_per_hour,source,as_of\n")
    return d


def _prices(built):
    return {(p["provider"], p["item"], p["region"], p["market"]): p for p in built.prices}


def test_the_build_turns_source_rows_into_priced_regions_and_zones(inputs):
    b = build.build(FIXTURE, inputs=inputs)
    assert b.problems == []
    p = _prices(b)
    # AWS: on-demand per region with every zone listing it; spot is the lowest zone's, with the zones quoting one
    assert p[("aws", "g5.xlarge", "eu-central-1", "ondemand")]["usd_per_hour"] == 1.006
    assert p[("aws", "g5.xlarge", "eu-central-1", "ondemand")]["zones"] == "euc1-az1 euc1-az2 euc1-az3"
    assert p[("aws", "g5.xlarge", "eu-central-1", "spot")]["usd_per_hour"] == 0.39
    assert p[("aws", "g5.xlarge", "eu-central-1", "spot")]["zones"] == "euc1-az1 euc1-az2"
    # a "spot" price equal to on-demand (SkyPilot's filler) is no spot offer
    assert p[("aws", "p5.48xlarge", "ap-south-1", "spot")]["usd_per_hour"] == 31.5
    assert ("aws", "m5.large", "us-east-1", "ondemand") not in p  # not a GPU family
    # GCP: the accelerator machine is its vCPUs and memory plus its GPUs' row, zone by zone for spot
    a3 = p[("gcp", "a3-highgpu-8g", "europe-west4", "ondemand")]
    assert a3["usd_per_hour"] == pytest.approx(89.93) and a3["zones"] == "europe-west4-b europe-west4-c"
    assert p[("gcp", "a3-highgpu-8g", "europe-west4", "spot")]["usd_per_hour"] == pytest.approx(21.79)
    # a GPU priced far below its dearest region (another SKU than on-demand list) prices no on-demand offer
    assert ("gcp", "a3-highgpu-8g", "us-central1", "ondemand") not in p
    assert p[("gcp", "a3-highgpu-8g", "us-central1", "spot")]["usd_per_hour"] == pytest.approx(20.18)
    assert any("gpu:H100:8: on-demand price below 55%" in n and "us-central1" in n for n in b.notes)
    # N1 machines and attached GPUs stay apart (the offer adds them up)
    assert p[("gcp", "gpu:T4", "asia-east1", "ondemand")]["usd_per_hour"] == 0.39
    assert p[("gcp", "n1-standard-8", "asia-east1", "spot")]["usd_per_hour"] == 0.08
    # Azure: zones from azure-zones.csv; a region without zones is listed with none
    regions = {(r["provider"], r["region"]): r for r in b.regions}
    assert regions[("azure", "westeurope")]["zones"] == "1 2 3" and regions[("azure", "westeurope")]["geo"] == "eu"
    assert regions[("azure", "westcentralus")]["zones"] == ""
    # AWS facts from the EC2 API's recording: network, EFA, NVMe
    g5 = next(i for i in b.instances if i["name"] == "g5.xlarge")
    assert (g5["gpu"], g5["gpu_count"], g5["vcpus"], g5["local_nvme_gb"]) == ("A10G", 1, 4, 250)
    p5 = next(i for i in b.instances if i["name"] == "p5.48xlarge")
    assert p5["fabric"] == "efa" and p5["efa_interfaces"] == 32 and p5["network_gbps"] == 3200


def test_the_build_refuses_unsound_results_and_writes_nothing(inputs, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(FIXTURE, src)
    aws = src / "skypilot-catalog" / "v7" / "aws" / "vms.csv"
    aws.write_text(aws.read_text().replace("98.32,31.5", "980.32,31.5").replace("A10G,1.0,4.0", "A10G,2.0,4.0", 1))
    (src / "azure-zones.csv").write_text("region,zones,source\nwesteurope,1 2 3,test\n")
    (src / "previous").mkdir()  # a previous build that knew no region
    (src / "previous" / "regions.csv").write_text("provider,region,geo,zones\n")
    b = build.build(src, inputs=inputs)
    text = "\n".join(b.problems)
    assert f"outside ${USD_PER_GPU_HOUR[0]}-${USD_PER_GPU_HOUR[1]}" in text and "p5.48xlarge ap-south-1 ondemand" in text
    assert "aws g5.xlarge: the snapshot says 2 GPUs, the instance facts 1" in text
    assert "azure westcentralus: no zone list in azure-zones.csv" in text
    out = tmp_path / "out"
    assert build.main([str(src), "--out", str(out)]) == 1 and not out.exists()
    assert build.main([str(tmp_path / "nowhere"), "--out", str(out)]) == 2


def test_spot_prices_outside_the_published_discounts_are_left_out_and_said(inputs, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(FIXTURE, src)
    gcp = src / "skypilot-catalog" / "v7" / "gcp" / "vms.csv"
    gcp.write_text(gcp.read_text()
                   # a region whose GPUs' on-demand row is off-list (left out), and whose "spot" rows are
                   # SkyPilot's filler: the list price
                   + "a3-highgpu-8g,208.0,1872.0,,,,asia-northeast1,asia-northeast1-b,9.93,9.93\n"
                   ",,,H100,8,{},asia-northeast1,asia-northeast1-b,33.6,78.79\n"
                   # 30% off on-demand, where GCP publishes 60-91%
                   "a3-highgpu-8g,208.0,1872.0,,,,europe-west2,europe-west2-b,9.93,1.79\n"
                   ",,,H100,8,{},europe-west2,europe-west2-b,80.0,61.0\n")
    aws = src / "skypilot-catalog" / "v7" / "aws" / "vms.csv"
    p5 = 'p5.48xlarge,H100,8.0,192.0,2048.0,"{\'Gpus\': [{\'Name\': \'H100\', \'Count\': 8}]}"'
    aws.write_text(aws.read_text() + f"{p5},98.32,9.832,us-east-2,use2-az1\n"  # 90% off: AWS's floor, a price
                                     f"{p5},98.32,5.0,eu-north-1,eun1-az1\n")  # 95% off: below it
    b = build.build(src, inputs=inputs)
    assert b.problems == []
    p = _prices(b)
    left_out = [("gcp", "a3-highgpu-8g", "asia-northeast1"), ("gcp", "a3-highgpu-8g", "europe-west2"),
                ("aws", "p5.48xlarge", "eu-north-1")]
    for provider, item, region in left_out:
        assert (provider, item, region, "spot") not in p
        assert any(n.startswith(f"{provider} {item} {region}: spot $") and "no spot offer, left out" in n
                   for n in b.notes), (region, b.notes)
    assert p[("gcp", "a3-highgpu-8g", "europe-west2", "ondemand")]["usd_per_hour"] == pytest.approx(89.93)
    assert p[("aws", "p5.48xlarge", "us-east-2", "spot")]["usd_per_hour"] == 9.832
    # spot prices within the published discounts stay, in a region without on-demand too
    assert p[("gcp", "a3-highgpu-8g", "europe-west4", "spot")]["usd_per_hour"] == pytest.approx(21.79)
    assert p[("gcp", "a3-highgpu-8g", "us-central1", "spot")]["usd_per_hour"] == pytest.approx(20.18)


def test_no_shipped_spot_price_is_at_or_above_on_demand_or_below_the_published_floor():
    prices = list(csv.DictReader(open(SHIPPED / "data" / "prices.csv")))
    ondemand = {(p["provider"], p["item"], p["region"]): float(p["usd_per_hour"]) for p in prices
                if p["market"] == "ondemand"}
    spot = [(p["provider"], p["item"], p["region"], float(p["usd_per_hour"])) for p in prices if p["market"] == "spot"]
    assert [s for s in spot if s[:3] in ondemand and s[3] >= ondemand[s[:3]]] == []
    # the floor: the most a provider says it takes off on-demand for spot (AWS, Azure 90%; GCP 91%)
    floor = {provider: 1 - most for provider, (_least, most) in build.SPOT_DISCOUNT.items()}
    assert [s for s in spot if s[:3] in ondemand and s[3] < floor[s[0]] * ondemand[s[:3]] * 0.999] == []
    assert build.spot_outliers(prices) == {}
    # the rows the v7 snapshot had so (SkyPilot's filler in a spot-only region, GCP spot at 30% off) are gone
    assert not [p for p in prices if p["market"] == "spot" and p["source"] == "skypilot-v7" and (
        p["provider"], p["item"], p["region"]) in {("gcp", "a3-highgpu-1g", "asia-northeast1"),
                                                   ("gcp", "a3-edgegpu-8g", "europe-west2")}]


def test_a_family_without_any_price_fails_the_build_unless_it_says_why(inputs):
    fams = (inputs / "families.csv").read_text()
    (inputs / "families.csv").write_text(fams + "aws,P6-B200,p6-b200.*,B200,https://aws.amazon.com/ec2/instance-types/p6/,\n")
    assert "aws P6-B200: no instance type of the family has a price" in "\n".join(build.build(FIXTURE, inputs=inputs).problems)
    (inputs / "families.csv").write_text(fams + "aws,P6-B200,p6-b200.*,B200,https://x,not in the test's sources\n")
    b = build.build(FIXTURE, inputs=inputs)
    assert b.problems == [] and "aws P6-B200: no price: not in the test's sources" in b.notes


SOURCES = os.environ.get("GPUFLEET_CATALOG_SOURCES", "")  # the gathered rows: public data, kept outside the repository


@pytest.mark.skipif(not SOURCES, reason="set GPUFLEET_CATALOG_SOURCES to the folder of the gathered source rows")
def test_the_shipped_files_are_what_the_build_makes_of_the_gathered_sources(tmp_path):
    assert build.main([SOURCES, "--out", str(tmp_path)]) == 0
    for name in ("instances.csv", "prices.csv", "regions.csv"):
        assert (tmp_path / name).read_text() == (SHIPPED / "data" / name).read_text(), name


# Families the sources price in one market only, and why (each checked in the gathered rows)
ONE_MARKET = {
    ("aws", "P5e"): "spot",  # the snapshot has no on-demand price: AWS sold P5e through Capacity Blocks
    ("azure", "ND H200 v5"): "ondemand",  # Azure's retail prices of 2026-06 as Karpenter keeps them: no spot
    ("azure", "ND GB200 v6"): "ondemand",  # likewise: the retail layer has its pay-as-you-go rows only
    ("azure", "NCads H100 v5"): "ondemand",  # the snapshot's spot price equals on-demand: no spot offer
    ("azure", "ND H100 v5"): "ondemand",  # likewise
}


def test_the_shipped_catalog_covers_every_family_in_both_markets_with_sound_prices():
    cat = catalog.load(use_config=False)
    gpus = set(cat.gpus)
    offers = cat.offers()
    problems = []
    for fam in build.families():
        mine = [o for o in offers if o.provider == fam.provider and fnmatch.fnmatchcase(o.instance.name, fam.match)]
        if fam.unpriced:
            assert not mine, f"{fam.name} has prices now: drop its `unpriced` note"
            continue
        markets = {o.market for o in mine}
        if markets != ({ONE_MARKET[(fam.provider, fam.name)]} if (fam.provider, fam.name) in ONE_MARKET
                       else {"ondemand", "spot"}):
            problems.append(f"{fam.provider} {fam.name}: markets {sorted(markets)}")
        if any(o.gpu.name != fam.gpu for o in mine):
            problems.append(f"{fam.provider} {fam.name}: a GPU other than {fam.gpu}")
    assert problems == []
    assert {it.gpu for it in cat.instances.values()} <= gpus
    lo, hi = USD_PER_GPU_HOUR
    assert all(lo <= o.usd_per_hour / o.instance.gpu_count <= hi for o in offers)
    # every priced region has its zones (Azure: regions without zones are said so in its zone source)
    for o in offers:
        assert o.provider == "azure" or cat.region_zones(o.provider, o.region), o.key
    # the market is wide: every continent the clouds sell GPUs on, tens of regions
    assert len({(o.provider, o.region) for o in offers}) >= 55  # 59 built from the sources of 2026-11-23
    assert {cat.regions[o.provider][o.region] for o in offers} >= {"us", "eu", "asia", "sa", "me", "africa"}


def test_compare_takes_region_globs_and_spot_works_offline():
    r = cli("--json", "compare", "resnet50", "--spot", "--region", "eu-*")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["offers"] and all(o["region"].startswith("eu-") and o["market"] == "spot" for o in rep["offers"])
    assert rep["spot_as_of"] and any("preempt" in a for a in rep["assumptions"])
    r = cli("--json", "compare", "llm-7b", "--gpu", "H100", "--region", "asia-*,ap-*")
    assert r.exit_code == 0, r.output
    offers = json.loads(r.stdout)["offers"]
    assert {o["provider"] for o in offers} >= {"aws", "gcp"} and all(o["gpu"] == "H100" for o in offers)
    assert all(o["region"].startswith(("asia-", "ap-")) for o in offers)
    assert "cheapest" in offers[0]["tags"]
    r = cli("compare", "resnet50", "--region", "mars-*")
    assert r.exit_code == 2 and "mars-*" in r.output


def test_catalog_regions_lists_where_a_gpu_is_sold_cheapest_first():
    r = cli("--json", "catalog", "regions", "--gpu", "H100")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["regions"]
    # on demand first, by its price; the regions with spot only after them, by theirs
    best = [(not o["ondemand"], (o["ondemand"] or o["spot"])["usd_per_gpu_hour"]) for o in rows]
    assert best == sorted(best) and all("H100" in o["gpus"] for o in rows)
    assert {o["provider"] for o in rows} == {"aws", "gcp", "azure"}
    r = cli("catalog", "regions", "--gpu", "H100", "--provider", "azure")
    assert r.exit_code == 0 and "eastus" in r.output and "spot" in r.output
    r = cli("catalog", "regions", "--gpu", "K80")
    assert r.exit_code == 1 and "no region offers K80" in r.output
    assert cli("catalog", "regions", "--gpu", "H1000").exit_code == 2


def test_newer_sources_replace_older_rows_each_dated_by_its_own_and_big_moves_are_notes(inputs, tmp_path):
    """Layers, oldest first: the previous build, SkyPilot v7, v9, Azure's retail prices. Made-up
    prices, in the sources' own formats."""
    src = tmp_path / "src"
    shutil.copytree(FIXTURE, src)
    (src / "previous").mkdir()
    (src / "previous" / "prices.csv").write_text(
        "provider,item,region,market,usd_per_hour,zones,source,as_of\n"
        "aws,g5.xlarge,eu-central-1,ondemand,0.5,euc1-az1,skypilot-v7,\n"  # dated by its source key
        "aws,g5.xlarge,eu-west-1,ondemand,1.1,euw1-az1,skypilot-v7,\n")  # no newer source prices it: carried
    v9 = src / "skypilot-catalog" / "v9" / "aws"
    v9.mkdir(parents=True)
    (v9 / "vms.csv").write_text(
        "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone\n"
        "p5.48xlarge,H100,8.0,192.0,2048.0,,55.04,20.5,ap-south-1,aps1-az1\n")
    (src / "azure-retail").mkdir()
    retail = src / "azure-retail" / "zz_generated.pricing.go"
    retail.write_text('package pricing\n// generated at 2026-06-18T03:43:41Z\n'
                      'var initialOnDemandPrices = map[string]map[string]float64{}\n\t// westeurope\n'
                      '\tinitialOnDemandPrices["westeurope"] = map[string]float64{\n'
                      '\t\t"Standard_NC4as_T4_v3":   0.658000,\n\t}\n')
    b = build.build(src, inputs=inputs)
    assert b.problems == []
    p = _prices(b)
    g5 = p[("aws", "g5.xlarge", "eu-central-1", "ondemand")]
    assert (g5["usd_per_hour"], g5["source"], g5["as_of"]) == (1.006, "skypilot-v7", "2024-12")
    assert any("g5.xlarge/eu-central-1/ondemand: $0.5/h in the previous build, $1.006/h now (+101%" in n for n in b.notes)
    carried = p[("aws", "g5.xlarge", "eu-west-1", "ondemand")]
    assert (float(carried["usd_per_hour"]), carried["as_of"]) == (1.1, "2024-12")
    p5 = p[("aws", "p5.48xlarge", "ap-south-1", "ondemand")]
    assert (p5["usd_per_hour"], p5["source"], p5["as_of"]) == (55.04, "skypilot-v9", "2025-06")
    t4 = p[("azure", "Standard_NC4as_T4_v3", "westeurope", "ondemand")]
    assert (t4["usd_per_hour"], t4["source"], t4["as_of"]) == (0.658, "azure-retail-2026-06", "2026-06")
    assert p[("azure", "Standard_NC4as_T4_v3", "westeurope", "spot")]["source"] == "skypilot-v7"  # retail has no spot
    retail.write_text(retail.read_text().replace("0.658000,", "0.658000, // a changed format"))
    with pytest.raises(build.CatalogError, match=r"zz_generated.pricing.go:6: not a line of Karpenter"):
        build.build(src, inputs=inputs)

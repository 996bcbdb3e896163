"""`gpufleet catalog refresh --rates` (issue 36): the rates of volumes, NAT gateways, public addresses
and traffic refreshed the way the instance prices are, from AWS's Price List (through botocore's
Stubber, which holds each request to the Pricing service model) and Azure's Retail Prices (the
fake public API), checked against the rows they replace, written atomically, and read by `plan`."""

import copy
import json

import pytest

from gpufleet.catalog import rates
from gpufleet.fleet import refresh_rates

from conftest import ROOT, cli

DATA = ROOT / "tests" / "data" / "rates"
AWS = json.loads((DATA / "aws_get_products.json").read_text())
AZURE = json.loads((DATA / "azure_retail.json").read_text())["items"]


@pytest.fixture
def refreshed(tmp_path, monkeypatch):
    path = tmp_path / "rates.csv"
    monkeypatch.setenv("GPUFLEET_RATES", str(path))
    return path


def _stubbed(answers: dict, queries=None):
    """A Pricing client that answers each query of clouds/aws/rates with its entries (two pages each
    where there are two or more, to follow NextToken), and expects exactly these requests."""
    import boto3
    from botocore.stub import Stubber

    from gpufleet.clouds.aws import rates as aws_rates

    client = boto3.client("pricing", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    for q in queries or aws_rates.QUERIES:
        docs = [json.dumps(e) for e in answers[q.item]]
        params = {"ServiceCode": q.service, "FormatVersion": "aws_v1",
                  "Filters": [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in q.filters]}
        half = (len(docs) + 1) // 2 if len(docs) > 1 else len(docs)
        stub.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": docs[:half],
                                           **({"NextToken": "t1"} if half < len(docs) else {})}, params)
        if half < len(docs):
            stub.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": docs[half:]},
                              {**params, "NextToken": "t1"})
    stub.activate()
    return client, stub


def _aws(client):
    from gpufleet.clouds.aws import rates as aws_rates

    return {"aws": lambda progress: aws_rates.fetch(progress, client=client)}


def test_aws_rates_from_the_price_list_replace_the_rows_and_plan_reads_them(refreshed):
    client, stub = _stubbed(AWS)
    res = refresh_rates.refresh(["aws"], fetchers=_aws(client))
    stub.assert_no_pending_responses()
    (r,) = res.results
    assert r.status == "updated" and res.written and refreshed.exists(), r.message
    got = {(x.item, x.region): x for x in rates.refreshed().values()}
    assert got[("ebs:gp3", "us-east-2")].usd == 0.08 and "USE2-EBS:VolumeUsage.gp3" in got[("ebs:gp3", "us-east-2")].source
    assert got[("ebs:io2", "us-east-1")].usd == 0.125  # its dimension's unit written GB-month
    assert got[("ebs:gp3-throughput", "us-east-1")].usd == pytest.approx(0.04)  # $40.96 per GiB/s: per MiB/s
    assert got[("nat-gateway", "us-east-1")].usd == 0.045 and got[("nat-gateway", "us-east-2")].usd == 0.045
    assert "RegionalNatGateway" not in got[("nat-gateway", "us-east-1")].source
    assert got[("ipv4", "us-east-1")].usd == 0.005 and "InUseAddress" in got[("ipv4", "us-east-1")].source
    assert got[("transfer:internet-out", "us-west-2")].usd == 0.09  # the first tier billed
    inter = got[("transfer:inter-region", "us-east-1")]
    assert inter.usd == 0.02 and "2 of its 3 destinations" in inter.source
    # the rows no fetcher covers (FSx for Lustre) stay the catalog's, with their own source and date
    fsx = rates.rate("aws", "fsx-lustre:persistent-2:125", "us-east-1")
    assert fsx.source.startswith("c3x.dev") and fsx.as_of == "2026-07"
    assert rates.rate("aws", "ebs:gp3", "us-east-2").source.startswith("AWS Price List API")


def test_a_price_list_answer_far_off_the_table_is_refused_and_nothing_is_written(refreshed):
    spoiled = copy.deepcopy(AWS)
    dims = spoiled["ebs:gp2"][0]["terms"]["OnDemand"]
    for term in dims.values():
        for d in term["priceDimensions"].values():
            d["pricePerUnit"]["USD"] = "1.0000000000"  # $1 a GB-month, ten times the row it replaces
    client, _ = _stubbed(spoiled)
    res = refresh_rates.refresh(["aws"], fetchers=_aws(client))
    (r,) = res.results
    assert r.status == "rejected" and "ebs:gp2 in us-east-1" in r.message and "3x" in r.message
    assert not res.written and not refreshed.exists()


def test_two_prices_where_one_was_expected_keep_the_previous_rates(refreshed):
    from gpufleet.clouds.aws import rates as aws_rates

    doubled = copy.deepcopy(AWS)
    doubled["ebs:gp2"].append(copy.deepcopy(doubled["ebs:gp2"][0]))
    client, _ = _stubbed(doubled, [q for q in aws_rates.QUERIES if q.item in ("ebs:gp3", "ebs:gp2")])
    (r,) = refresh_rates.refresh(["aws"], fetchers=_aws(client)).results
    assert r.status == "kept" and "ebs:gp2 in us-east-1: 2 prices where one was expected" in r.message


def test_azure_rates_from_retail_prices_through_the_cli(azure_prices, refreshed):
    azure_prices.items = list(AZURE)
    r = cli("--json", "catalog", "refresh", "--rates", "-p", "azure")
    assert r.exit_code == 0, r.output
    (res,) = json.loads(r.stdout)["results"]
    assert res["status"] == "updated" and res["rows"] == 6
    got = {(x.item, x.region): x for x in rates.refreshed().values()}
    assert got[("disk:premium-ssd:P10", "westeurope")].usd == 21.68
    assert got[("disk:premium-ssd:P10", "eastus")].usd == 19.71  # the primary meter region's, not the other's
    assert "Mount" not in got[("disk:premium-ssd:P10", "eastus")].source
    assert got[("ipv4", "westeurope")].usd == 0.005  # a meter that is not a primary region's
    # the filters sent name the meters exactly, Consumption only
    assert any("meterName eq 'P10 LRS Disk'" in f and "priceType eq 'Consumption'" in f for f in azure_prices.filters)
    # plan prices the example's disks from the refreshed rows
    plan = json.loads(cli("--json", "plan", str(ROOT / "stacks" / "examples" / "azure-nd.yaml")).stdout)
    disk = next(x for x in plan["spend"]["lines"] if x["line"] == "volumes")
    assert "Azure Retail Prices API" in disk["source"], disk


def test_a_meter_billed_in_another_unit_keeps_the_previous_rates(azure_prices, refreshed):
    azure_prices.items = [dict(x, unitOfMeasure="1 GB/Month") if x["meterName"] == "P15 LRS Disk" else x for x in AZURE]
    r = cli("catalog", "refresh", "--rates", "-p", "azure")
    assert r.exit_code == 1 and "P15 LRS Disk in eastus is priced per '1 GB/Month'" in r.output
    assert "previous rates kept" in r.output or "Nothing was written" in r.output
    assert not refreshed.exists()


def test_a_cloud_without_a_rates_fetcher_says_its_rows_stay(refreshed):
    r = cli("--json", "catalog", "refresh", "--rates", "-p", "gcp")
    assert r.exit_code == 0, r.output
    (res,) = json.loads(r.stdout)["results"]
    assert res["status"] == "skipped" and "no fetcher" in res["message"] and not refreshed.exists()


def test_without_credentials_aws_keeps_its_rates_and_the_refresh_exits_1(refreshed, monkeypatch, tmp_path):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    r = cli("--json", "catalog", "refresh", "--rates", "-p", "aws")
    assert r.exit_code == 1
    (res,) = json.loads(r.stdout)["results"]
    assert res["status"] == "kept" and "no credentials" in res["message"] and not refreshed.exists()

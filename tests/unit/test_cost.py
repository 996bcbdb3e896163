"""`gpufleet cost` (issue 36): what the clouds billed each cluster, per line, against what `up` predicted
for the same days. The bills are the payloads recorded from each API's documentation
(tests/data/billing, sources in its README), played through the vendors' own code where it exists:
botocore's Stubber (which checks requests and answers against Cost Explorer's model), Microsoft's
azure-mgmt-costmanagement client against the ARM stand-in, BigQuery's REST format from a stand-in."""

import datetime as dt
import json

import boto3
import pytest
from botocore.stub import Stubber

from gpufleet.clouds.aws import billing as aws_billing
from gpufleet.clouds.azure import billing as azure_billing
from gpufleet.clouds.gcp import billing as gcp_billing
from gpufleet.errors import CloudUnreadable, InputError
from gpufleet.fleet import cost
from gpufleet.state.registry import Node, Registry

from conftest import ROOT, cli

DATA = ROOT / "tests" / "data" / "billing"
NOW = dt.datetime(2026, 7, 3, 9, 0, tzinfo=dt.timezone.utc)
JUL1, JUL3 = dt.date(2026, 7, 1), dt.date(2026, 7, 3)


def payload(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def _record(reg, name, provider, region, *, per_hour, created="2026-06-30T00:00:00Z"):
    reg.record(name=name, stack=name, stack_file="s.yaml", owner="ops@example.com", expires_at="2026-07-31T00:00:00Z",
               backend=None, nodes=[Node("gpu", 0, provider, region, "x", usd_per_hour=per_hour["instances"])],
               locations=[(provider, region)], predicted={"usd_per_hour": per_hour, "usd_once": {}, "ttl_hours": 744})
    with reg._db(write=True) as db:
        db.execute("UPDATE clusters SET created_at = ? WHERE name = ?", (created, name))


def test_aws_bills_each_cluster_per_line_through_cost_explorer():
    ce, stub = _stubbed(["aws_get_cost_and_usage.page1.json", "aws_get_cost_and_usage.page2.json"])
    got = aws_billing.billed(JUL1, dt.date(2026, 7, 4), ["mycluster", "othercluster"], {}, client=ce)
    stub.assert_no_pending_responses()  # both pages read, in order, each request as Cost Explorer's model allows
    by = {(b.cluster, b.line): b for b in got.rows}
    page1, page2 = payload("aws_get_cost_and_usage.page1.json"), payload("aws_get_cost_and_usage.page2.json")

    def amount(cluster, usage_kind):
        return sum(float(g["Metrics"]["UnblendedCost"]["Amount"]) for p in (page1, page2) for d in p["ResultsByTime"]
                   for g in d["Groups"] if g["Keys"][0] == f"gpufleet:cluster${cluster}" and usage_kind in g["Keys"][1])
    assert by[("mycluster", "instances")].usd == pytest.approx(amount("mycluster", "BoxUsage"))
    assert by[("mycluster", "volumes")].usd == pytest.approx(amount("mycluster", "EBS:"))
    assert by[("mycluster", "nat")].usd == pytest.approx(amount("mycluster", "NatGateway-Hours"))
    assert by[("mycluster", "ipv4")].usd == pytest.approx(amount("mycluster", "PublicIPv4"))
    assert by[("mycluster", "transfer")].usd == pytest.approx(amount("mycluster", "NatGateway-Bytes")
                                                             + amount("mycluster", "DataTransfer"))
    assert by[("mycluster", "instances")].through == "2026-07-02" and by[("mycluster", "instances")].estimated
    assert not any(b.cluster == "" for b in got.rows)  # untagged cost ("gpufleet:cluster$") is no cluster's
    assert "up to three times a day" in got.notes[0]


def _stubbed(pages: list[str]):
    """Cost Explorer's client answering the recorded pages (the tag active), and the requests it must be sent."""
    ce = boto3.client("ce", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(ce)
    tags = payload("aws_list_cost_allocation_tags.inactive.json")
    tags["CostAllocationTags"][0]["Status"] = "Active"
    stub.add_response("list_cost_allocation_tags", tags, {"TagKeys": ["gpufleet:cluster"]})
    base = {"TimePeriod": {"Start": "2026-07-01", "End": "2026-07-04"}, "Granularity": "DAILY",
            "Metrics": ["UnblendedCost"], "GroupBy": [{"Type": "TAG", "Key": "gpufleet:cluster"},
                                                      {"Type": "DIMENSION", "Key": "USAGE_TYPE"}],
            "Filter": {"Tags": {"Key": "gpufleet:cluster", "Values": ["mycluster", "othercluster"],
                                "MatchOptions": ["EQUALS"]}}}
    for i, page in enumerate(pages):
        stub.add_response("get_cost_and_usage", payload(page),
                          {**base, **({"NextPageToken": payload(pages[i - 1])["NextPageToken"]} if i else {})})
    stub.activate()
    return ce, stub


@pytest.mark.parametrize("tags,says", [("aws_list_cost_allocation_tags.inactive.json", "is not activated"),
                                       ("aws_list_cost_allocation_tags.empty.json", "not known to billing yet")])
def test_an_aws_cluster_tag_that_is_not_active_is_said_with_how_to_activate_it(tags, says):
    ce = boto3.client("ce", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(ce)
    stub.add_response("list_cost_allocation_tags", payload(tags), {"TagKeys": ["gpufleet:cluster"]})
    stub.activate()
    with pytest.raises(CloudUnreadable) as ei:
        aws_billing.billed(JUL1, JUL3, None, {}, client=ce)
    assert says in ei.value.message and "update-cost-allocation-tags-status" in ei.value.hint
    stub.assert_no_pending_responses()  # nothing asked of Cost Explorer it could not group


def test_an_aws_member_account_refused_the_tag_list_still_reads_cost_explorer_and_says_why():
    """Only an Organization's management account may read cost allocation tags; a member account is
    refused with AccessDeniedException (HTTP 400, the wording seen in hashicorp/terraform-provider-aws
    #37636; not in Cost Explorer's model, so Stubber plays it as the JSON protocol's error code)."""
    ce = boto3.client("ce", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(ce)
    stub.add_client_error("list_cost_allocation_tags", service_error_code="AccessDeniedException",
                          service_message="Failed to list Cost Allocation Tags: Linked account doesn't have access to "
                                          "cost allocation tags.", http_status_code=400,
                          expected_params={"TagKeys": ["gpufleet:cluster"]})
    stub.add_response("get_cost_and_usage", payload("aws_get_cost_and_usage.page2.json"))
    stub.activate()
    got = aws_billing.billed(JUL1, dt.date(2026, 7, 4), None, {}, client=ce)
    stub.assert_no_pending_responses()  # Cost Explorer was asked all the same
    assert got.rows and any("only the management account may" in n for n in got.notes)



def test_an_aws_iam_denial_of_the_tag_list_says_which_permission_is_missing_not_a_member_account():
    """AccessDeniedException is IAM's generic refusal too (botocore 1.44's ce model declares only
    LimitExceededException and InvalidNextTokenException for ListCostAllocationTags, so Stubber plays it as
    the JSON protocol's error code). A caller without ce:ListCostAllocationTags gets IAM's wording ("User:
    ... is not authorized to perform: ...", IAM User Guide, troubleshoot_access-denied.html, read 2026-11);
    before, it was told it was an Organizations member account."""
    ce = boto3.client("ce", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(ce)
    stub.add_client_error("list_cost_allocation_tags", service_error_code="AccessDeniedException",
                          service_message="User: arn:aws:iam::123456789012:user/ops is not authorized to perform: "
                                          "ce:ListCostAllocationTags on resource: arn:aws:ce:us-east-1:123456789012:/"
                                          "ListCostAllocationTags because no identity-based policy allows the "
                                          "ce:ListCostAllocationTags action", http_status_code=400,
                          expected_params={"TagKeys": ["gpufleet:cluster"]})
    stub.add_response("get_cost_and_usage", payload("aws_get_cost_and_usage.page2.json"))
    stub.activate()
    got = aws_billing.billed(JUL1, dt.date(2026, 7, 4), None, {}, client=ce)
    stub.assert_no_pending_responses()  # advisory: Cost Explorer was asked all the same
    (said,) = [n for n in got.notes if "ListCostAllocationTags" in n]
    assert "grant them ce:ListCostAllocationTags" in said and "member account" not in said and got.rows

def test_the_aws_cli_documentations_own_answer_reads_as_cost_explorer_writes_it():
    """The verbatim example of aws-cli's docs: group keys are "<tag key>$<value>", an untagged cost "<key>$"."""
    doc = payload("aws_get_cost_and_usage.awscli_example.json")
    keys = [g["Keys"][1] for d in doc["ResultsByTime"] for g in d["Groups"]]
    assert {k.split("$", 1)[0] for k in keys} == {"Environment"} and "Environment$" in keys
    assert aws_billing.line_of("USE1-BoxUsage:p5.48xlarge") == "instances"
    assert aws_billing.line_of("EBS:VolumeUsage.gp3") == "volumes"
    assert aws_billing.line_of("USW2-NatGateway-Bytes") == "transfer" and aws_billing.line_of("USE2-APS3-AWS-Out-Bytes") \
        == "transfer"


@pytest.fixture
def bigquery(gcp, monkeypatch):
    from fakes.bigquery import BigQueryFake

    fake = BigQueryFake()
    fake.start()
    monkeypatch.setenv("GPUFLEET_BIGQUERY_ENDPOINT", fake.url)
    yield fake
    fake.stop()


def test_gcp_bills_each_cluster_from_the_billing_export_in_bigquery(bigquery):
    bigquery.answers += [payload("gcp_jobs_query.incomplete.json"), payload("gcp_jobs_query.page1.json"),
                         payload("gcp_get_query_results.page2.json")]
    table = "my-billing-project.billing_export.gcp_billing_export_v1_010101_F0FFF0_10X10X"
    got = gcp_billing.billed(JUL1, JUL3, ["mycluster"], {"gcp_export_table": table})
    (query, *more) = bigquery.requests
    body = query[3]
    assert query[:2] == ("POST", "/bigquery/v2/projects/my-billing-project/queries") and f"`{table}`" in body["query"]
    params = {p["name"]: p["parameterValue"] for p in body["queryParameters"]}
    assert params["label_key"] == {"value": "gpufleet-cluster"} and params["clusters"]["arrayValues"] == [
        {"value": "mycluster"}]
    assert body["formatOptions"] == {"useInt64Timestamp": True} and not body["useLegacySql"]
    assert [m[2].get("pageToken") for m in more] == [None, "BFDKZNLWHIAQAAASAUIIBAEAAUNAICAQCAAQ"]  # wait, then page 2
    (gpu,) = [b for b in got.rows if b.line == "instances"]
    assert gpu.usd == pytest.approx(2093.76 + 2093.76 - 104.688)  # cost plus (negative) credits, both days
    assert gpu.through == "2026-07-02" and all(b.cluster == "mycluster" for b in got.rows)  # unlabelled rows: no one's
    assert "no latency guarantee" in got.notes[0]


def test_the_gcp_query_reads_only_the_partitions_of_the_period_with_slack_for_late_rows(bigquery):
    """The export is partitioned on _PARTITIONTIME (each row's ingestion day, UTC): without a filter on it
    every run scans, and bills, the whole table. Rows land after their usage, so two days before the
    first day asked are enough; no upper bound, or late rows would be lost."""
    bigquery.answers += [payload("gcp_jobs_query.eur.json")]
    gcp_billing.billed(JUL1, JUL3, None, {"gcp_export_table": "my-billing-project.billing_export.gcp_billing_export_v1_X"})
    body = bigquery.requests[0][3]
    where = body["query"].split("WHERE", 1)[1]
    assert "_PARTITIONTIME >= @partitions_from" in where and "_PARTITIONTIME <" not in where
    params = {p["name"]: (p["parameterType"]["type"], p["parameterValue"]["value"]) for p in body["queryParameters"]}
    assert params["partitions_from"] == ("TIMESTAMP", "2026-06-29 00:00:00+00:00")


def test_a_gcp_bill_in_euros_is_counted_in_dollars_only_at_the_exports_own_rate(bigquery):
    bigquery.answers += [payload("gcp_jobs_query.eur.json")]
    got = gcp_billing.billed(JUL1, JUL3, None, {"gcp_export_table": "my-billing-project.billing_export.t"})
    assert "/ currency_conversion_rate" in bigquery.requests[0][3]["query"]  # the export's rate, per row
    (gpu,) = got.rows
    assert (gpu.currency, gpu.amount) == ("EUR", pytest.approx(1926.2592 * 2 - 96.31296))
    assert gpu.usd == pytest.approx((1926.2592 * 2 - 96.31296) / 0.92, rel=1e-6)  # not the euros as dollars


def test_an_azure_bill_in_euros_is_counted_at_cost_managements_own_rate_or_not_at_all(azure):
    page = json.loads((DATA / "azure_query.eur.json").read_text().replace("00000000-0000-0000-0000-000000000000",
                                                                          azure.subscription))
    azure.cost_pages.append(page)
    got = azure_billing.billed(JUL1, JUL3, None, {})
    assert azure.cost_queries[0]["dataset"]["aggregation"]["totalCostUSD"] == {"name": "CostUSD", "function": "Sum"}
    vm = next(b for b in got.rows if b.line == "instances")
    assert (vm.currency, vm.amount, vm.usd) == ("EUR", pytest.approx(1447.8592), pytest.approx(1573.76))
    # a result without the dollar column: the euros stay euros
    at = [c["name"] for c in page["properties"]["columns"]].index("CostUSD")
    page["properties"]["columns"].pop(at)
    for r in page["properties"]["rows"]:
        r.pop(at)
    azure.cost_pages.append(page)
    vm = next(b for b in azure_billing.billed(JUL1, JUL3, None, {}).rows if b.line == "instances")
    assert (vm.currency, vm.amount, vm.usd) == ("EUR", pytest.approx(1447.8592), None)


def test_a_bill_in_another_currency_is_never_held_against_the_dollar_prediction(tmp_path):
    reg = Registry(tmp_path / "r.db")
    _record(reg, "eur", "gcp", "europe-west4", per_hour={"instances": 40.0})
    _record(reg, "chf", "azure", "switzerlandnorth", per_hour={"instances": 40.0})
    from gpufleet.clouds.base import Billed, BillRead

    def billed(provider, since, until, clusters, settings):
        rows = [Billed("gcp", "eur", "instances", 1989.07, "2026-07-02", currency="EUR", amount=1829.95),
                Billed("azure", "chf", "instances", None, "2026-07-02", currency="CHF", amount=1700.0),
                Billed("azure", "chf", "volumes", 3.0, "2026-07-02")]
        return BillRead([b for b in rows if b.provider == provider], [])

    got = {r.cluster: r for r in cost.run(since=JUL1, registry=reg, now=NOW, billed=billed).rows}
    assert got["eur"].billed == pytest.approx(1989.07) and got["eur"].drift is not None
    assert "1,829.95 EUR billed, counted in US dollars at the bill's own rate" in got["eur"].notes
    chf = got["chf"]
    assert chf.billed == pytest.approx(3.0) and chf.drift is None and chf.unconverted == {"CHF": 1700.0}
    assert any("1,700.00 CHF billed with no US dollar rate" in n for n in chf.notes)
    assert chf.to_dict()["unconverted"] == {"CHF": 1700.0}


def test_gcp_without_a_billing_table_is_skipped_and_a_bad_one_is_bad_input(gcp, monkeypatch):
    from gpufleet.errors import CredentialsError

    with pytest.raises(CredentialsError, match="no billing export table"):
        gcp_billing.billed(JUL1, JUL3, None, {})
    with pytest.raises(InputError, match="is not a BigQuery table"):
        gcp_billing.billed(JUL1, JUL3, None, {"gcp_export_table": "billing; DROP TABLE x"})


def test_azure_bills_each_cluster_through_cost_managements_own_client(azure, monkeypatch):
    sub = azure.subscription

    def mine(name):
        return json.loads((DATA / name).read_text().replace("00000000-0000-0000-0000-000000000000", sub))
    throttled = payload("azure_query.429.json")
    azure.faults[("POST", "(?i)costmanagement/query")] = [(429, throttled["body"], throttled["headers"])]
    azure.cost_pages += [mine("azure_query.page1.json"), mine("azure_query.page2.json")]
    slept = []
    got = azure_billing.billed(JUL1, JUL3, ["mycluster", "othercluster"], {}, sleep=slept.append)
    assert slept == [10.0]  # waited as x-ms-ratelimit-microsoft.costmanagement-qpu-retry-after said
    first, second = azure.cost_queries  # the second POSTed to page 1's nextLink: the same query
    assert first == second and first["dataset"]["grouping"] == [{"type": "TagKey", "name": "gpufleet:cluster"},
                                                                 {"type": "Dimension", "name": "MeterCategory"}]
    assert first["timePeriod"] == {"from": "2026-07-01T00:00:00+00:00", "to": "2026-07-02T23:59:59+00:00"}
    rows = [r for p in (mine("azure_query.page1.json"), mine("azure_query.page2.json")) for r in p["properties"]["rows"]]
    by = {(b.cluster, b.line): b for b in got.rows}
    assert by[("mycluster", "instances")].usd == pytest.approx(sum(r[0] for r in rows if r[3] == "mycluster"
                                                                   and r[4] == "Virtual Machines"))
    assert by[("mycluster", "instances")].through == "2026-07-02"
    assert all(b.cluster for b in got.rows)


def test_the_official_azure_example_deserializes_in_microsofts_own_model():
    from azure.mgmt.costmanagement.models import QueryResult

    doc = payload("azure_query.official_grouping_example.json")["responses"]["200"]["body"]
    result = QueryResult(doc)
    assert [c.name for c in result.columns] == ["PreTaxCost", "ResourceGroup", "Currency"] and len(result.rows) == 4


def test_cost_holds_the_bill_against_the_prediction_for_the_same_days(tmp_path):
    reg = Registry(tmp_path / "r.db")
    _record(reg, "mycluster", "aws", "us-west-2", per_hour={"instances": 65.0, "volumes": 0.5, "nat": 0.045,
                                                            "ipv4": 0.005})
    from gpufleet.clouds.base import Billed, BillRead

    def billed(provider, since, until, clusters, settings):
        return BillRead([Billed("aws", "mycluster", "instances", 4000.0, "2026-07-02"),
                         Billed("aws", "mycluster", "transfer", 30.0, "2026-07-02"),
                         Billed("aws", "someone-else", "instances", 5.0, "2026-07-01")], ["lags"])

    got = cost.run(since=JUL1, registry=reg, now=NOW, billed=billed)
    row = next(r for r in got.rows if r.cluster == "mycluster")
    lines = {x.line: x for x in row.lines}
    assert lines["instances"].predicted == pytest.approx(65.0 * 48)  # July 1 and 2: the days the bill covers
    assert lines["transfer"].predicted == 0 and lines["transfer"].billed == 30
    assert row.drift == pytest.approx((4030) / (48 * (65.0 + 0.5 + 0.045 + 0.005)) - 1)
    assert row in got.drifted and row.widest()[0].line == "instances"
    other = next(r for r in got.rows if r.cluster == "someone-else")
    assert other.predicted is None and "not in the registry" in other.notes[0]


def test_the_cost_command_says_what_it_could_not_read_and_exits_1(aws, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    _record(Registry(), "mycluster", "aws", "us-east-1", per_hour={"instances": 10.0},
            created=(dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M:%SZ"))
    ce = boto3.client("ce", region_name="us-east-1")  # Cost Explorer (moto has none): the tag not activated yet
    stub = Stubber(ce)
    stub.add_response("list_cost_allocation_tags", payload("aws_list_cost_allocation_tags.inactive.json"),
                      {"TagKeys": ["gpufleet:cluster"]})
    stub.activate()
    real = aws_billing.billed
    monkeypatch.setattr(aws_billing, "billed", lambda *a, **kw: real(*a, **kw, client=ce))
    r = cli("cost")
    assert r.exit_code == 1 and "aws's bill could not be read" in r.output
    assert "update-cost-allocation-tags-status" in r.output and "Traceback" not in r.output
    assert "nothing billed yet" in r.output  # the registry's cluster, with its prediction
    for bad in ("yesterday", "2999-01-01"):
        r = cli("cost", "--since", bad)
        assert r.exit_code == 2 and "--since" in r.output


def test_the_clusters_report_holds_the_bill_against_the_prediction_when_it_can_be_read(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from gpufleet.clouds.base import Billed, BillRead

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    _record(Registry(), "mycluster", "aws", "us-east-1", per_hour={"instances": 10.0, "volumes": 1.0},
            created=(dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=3)).strftime("%Y-%m-%dT%H:%M:%SZ"))
    today = dt.datetime.now(dt.timezone.utc).date().isoformat()
    real = cost.run
    monkeypatch.setattr(cost, "run", lambda **kw: real(**kw, billed=lambda *a: BillRead(
        [Billed("aws", "mycluster", "instances", 2000.0, today)], [])))
    r = cli("report", "--clusters", "--local", "--markdown", "--out", str(tmp_path / "local.md"))
    assert r.exit_code == 0 and "Billed against predicted" not in (tmp_path / "local.md").read_text()  # --local: no bills
    r = cli("report", "--clusters", "--markdown", "--out", str(tmp_path / "fleet.md"))
    text = (tmp_path / "fleet.md").read_text()
    assert "## Billed against predicted" in text and "mycluster was billed" in text  # 2000 against ~720: drift

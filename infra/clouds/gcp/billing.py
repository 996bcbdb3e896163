"""What Google Cloud billed gpufleet's clusters, from the Cloud Billing export to BigQuery (the standard
usage cost table, ``gcp_billing_export_v1_<BILLING ACCOUNT>``, cloud.google.com/billing/docs/how-to/
export-data-bigquery-tables/standard-usage): its rows whose ``labels`` carry ``gpufleet-cluster``,
cost plus credits, summed per day, cluster, service and SKU by one query through BigQuery's REST
``jobs.query`` (named parameters; a result not ready, or in pages, read on with ``getQueryResults``,
cloud.google.com/bigquery/docs/reference/rest/v2/jobs/query). The export has "no delivery or latency
guarantees" and takes hours to show a day's costs, which the read says.

``cost`` and ``credits`` are in the billing account's ``currency``; ``currency_conversion_rate`` is "the
exchange rate from US dollars to the local currency", so cost / rate is the cost in dollars (the
standard export's schema, standard-usage, read 2026-11). Each currency stays apart: its own amount,
and its dollars at the export's own rate.

The table is partitioned by day on ``_PARTITIONTIME``, each row's ingestion time (UTC) cut to the day
(bigquery/docs/querying-partitioned-tables): a query without a filter on it scans, and bills, the whole
export every run. A row is loaded after the usage it bills, often a day or more after (late rows keep
arriving for days), so only the partitions from ``PARTITION_SLACK`` before the first day asked are read:
they hold every row of the period, and no upper bound leaves out the late ones.

The table is the user's (``billing: {gcp_export_table: project.dataset.table}`` in the config file, or
``GPUFLEET_GCP_BILLING_TABLE``); without one GCP's bill is not read, and that is said.
``GPUFLEET_BIGQUERY_ENDPOINT`` replaces ``https://bigquery.googleapis.com`` (the tests' server).
"""

from __future__ import annotations

import datetime as dt
import os
import re
import time

import google.auth
import requests
from google.auth.exceptions import DefaultCredentialsError, RefreshError, TransportError
from google.auth.transport.requests import AuthorizedSession

from gpufleet.clouds import bill_lines
from gpufleet.clouds.base import Billed, BillRead, merged
from gpufleet.clouds.gcp.errors import CREDENTIAL_HINT
from gpufleet.clouds.gcp.tags import LABEL_PREFIX
from gpufleet.errors import CloudUnreadable, CredentialsError, InputError

LABEL = LABEL_PREFIX + "cluster"
TABLE = re.compile(r"^[a-z][a-z0-9-]{4,61}[a-z0-9]\.[A-Za-z0-9_]{1,1024}\.[A-Za-z0-9_$-]{1,1024}$")
LAG = ("the Cloud Billing export to BigQuery takes hours to show a day's costs and has no latency guarantee: "
       "the last days may be incomplete")
WAIT_S = 120  # how long a query may run before the read gives up
PARTITION_SLACK = dt.timedelta(days=2)  # partitions read before the first day asked (rows land after their usage)
SQL = """
SELECT TIMESTAMP_TRUNC(usage_start_time, DAY) AS usage_day,
  (SELECT l.value FROM UNNEST(labels) AS l WHERE l.key = @label_key) AS cluster,
  service.description AS service, sku.description AS sku,
  SUM(cost) AS cost,
  SUM(IFNULL((SELECT SUM(c.amount) FROM UNNEST(credits) AS c), 0)) AS credits,
  currency,
  SUM((cost + IFNULL((SELECT SUM(c.amount) FROM UNNEST(credits) AS c), 0)) / currency_conversion_rate) AS usd
FROM `{table}`
WHERE _PARTITIONTIME >= @partitions_from
  AND usage_start_time >= @start AND usage_start_time < @end
  AND EXISTS(SELECT 1 FROM UNNEST(labels) AS l WHERE l.key = @label_key{only})
GROUP BY usage_day, cluster, service, sku, currency
"""
# what a SKU is, by its service and its description's words (first match wins)
LINES = ((re.compile(r"Filestore|Lustre", re.I), None, bill_lines.FILE_SYSTEM),
         (None, re.compile(r"NAT.*(Data Processing|Processed)", re.I), bill_lines.TRANSFER),
         (None, re.compile(r"Cloud NAT|NAT Gateway", re.I), bill_lines.NAT),
         (None, re.compile(r"External IP|Static Ip|IP address", re.I), bill_lines.IPV4),
         (None, re.compile(r"Egress|Inter Region|Inter Zone|Data Transfer", re.I), bill_lines.TRANSFER),
         (None, re.compile(r"PD Capacity|Hyperdisk|Storage PD|Balanced PD|SSD backed PD|Persistent Disk", re.I),
          bill_lines.VOLUMES),
         (re.compile(r"^Compute Engine$"), None, bill_lines.INSTANCES))


def line_of(service: str, sku: str) -> str:
    for svc, words, line in LINES:
        if (svc is None or svc.search(service)) and (words is None or words.search(sku)):
            return line
    return bill_lines.OTHER


def billed(since, until, clusters: list[str] | None, settings: dict, *, session=None) -> BillRead:
    table = settings.get("gcp_export_table") or os.environ.get("GPUFLEET_GCP_BILLING_TABLE")
    if not table:
        raise CredentialsError("gcp", "gcp: no billing export table is named",
                               "export Cloud Billing to BigQuery and name its table: billing: {gcp_export_table: "
                               "project.dataset.gcp_billing_export_v1_XXXXXX} in the config file")
    if not TABLE.match(table):
        raise InputError(f"billing.gcp_export_table {table!r} is not a BigQuery table",
                         "write project.dataset.table, e.g. my-project.billing.gcp_billing_export_v1_0123AB_4567CD_89EF01")
    session = session or _session()
    base = os.environ.get("GPUFLEET_BIGQUERY_ENDPOINT", "https://bigquery.googleapis.com").rstrip("/")
    project = table.split(".")[0]
    params = [_param("label_key", "STRING", LABEL), _param("start", "TIMESTAMP", f"{since.isoformat()} 00:00:00+00:00"),
              _param("end", "TIMESTAMP", f"{until.isoformat()} 00:00:00+00:00"),
              _param("partitions_from", "TIMESTAMP", f"{(since - PARTITION_SLACK).isoformat()} 00:00:00+00:00")]
    if clusters:
        params.append({"name": "clusters", "parameterType": {"type": "ARRAY", "arrayType": {"type": "STRING"}},
                       "parameterValue": {"arrayValues": [{"value": c} for c in sorted(clusters)]}})
    body = {"query": SQL.format(table=table, only=" AND l.value IN UNNEST(@clusters)" if clusters else ""),
            "useLegacySql": False, "parameterMode": "NAMED", "queryParameters": params, "timeoutMs": 30000,
            "formatOptions": {"useInt64Timestamp": True}}
    page = _call(session, "POST", f"{base}/bigquery/v2/projects/{project}/queries", json=body)
    job = page.get("jobReference", {})
    rows, fields, deadline = [], None, time.monotonic() + WAIT_S
    while True:
        if page.get("jobComplete") is False:
            if time.monotonic() > deadline:
                raise CloudUnreadable("gcp", "error", f"the billing query did not finish in {WAIT_S} s", table)
        else:
            fields = fields or [f["name"] for f in page["schema"]["fields"]]
            rows += [dict(zip(fields, (c["v"] for c in r["f"]))) for r in page.get("rows", [])]
            if not page.get("pageToken"):
                break
        query = {"location": job.get("location"), "timeoutMs": 30000, "formatOptions.useInt64Timestamp": "true",
                 **({"pageToken": page["pageToken"]} if page.get("pageToken") else {})}
        page = _call(session, "GET", f"{base}/bigquery/v2/projects/{job['projectId']}/queries/{job['jobId']}",
                     params={k: v for k, v in query.items() if v is not None})
    return BillRead(_rows(rows), [LAG])


def _rows(rows: list[dict]) -> list[Billed]:
    """The query's rows (every cell a string; a TIMESTAMP in microseconds, asked for with
    ``useInt64Timestamp``) as one Billed per cluster, line and currency: cost plus credits (credits are
    negative), and that in dollars at the export's rate."""
    out = []
    for r in rows:
        if not r["cluster"]:
            continue
        day = dt.datetime.fromtimestamp(int(r["usage_day"]) / 1e6, dt.timezone.utc).date().isoformat()
        amount = float(r["cost"] or 0) + float(r["credits"] or 0)
        currency = r.get("currency") or "USD"
        usd = amount if currency == "USD" else None if r.get("usd") is None else float(r["usd"])
        out.append(Billed("gcp", r["cluster"], line_of(r["service"] or "", r["sku"] or ""), usd, day,
                          currency=currency, amount=None if currency == "USD" else amount))
    return merged(out)


def _param(name: str, kind: str, value: str) -> dict:
    return {"name": name, "parameterType": {"type": kind}, "parameterValue": {"value": value}}


def _session():
    try:
        creds, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/bigquery.readonly"])
    except DefaultCredentialsError as e:
        raise CredentialsError("gcp", f"gcp: {str(e).splitlines()[0][:200]}", CREDENTIAL_HINT) from None
    return AuthorizedSession(creds)


def _call(session, method: str, url: str, **kw) -> dict:
    try:
        r = session.request(method, url, timeout=60, **kw)
    except (requests.RequestException, TransportError) as e:
        raise CloudUnreadable("gcp", "unreachable", str(e)[:300], "BigQuery (billing export)") from None
    except RefreshError as e:
        raise CloudUnreadable("gcp", "refused", str(e)[:300], "BigQuery (billing export)") from None
    if r.status_code != 200:
        raise CloudUnreadable.http("gcp", r.status_code, r.text, "BigQuery (billing export)")
    return r.json()

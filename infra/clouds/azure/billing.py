"""What Azure billed gpufleet's clusters, from Cost Management's Query API through Microsoft's own
client (azure-mgmt-costmanagement, api-version 2025-03-01): actual cost of the subscription, daily,
grouped by the ``gpufleet:cluster`` tag (``TagKey``: the result carries ``TagKey`` and ``TagValue``
columns, which are read by name) and ``MeterCategory``, filtered to the clusters asked
(learn.microsoft.com/rest/api/cost-management/query/usage). A result in pages is read on by POSTing
the same query to its ``nextLink``, which the client does not follow; a query throttled (429) waits
as ``x-ms-ratelimit-microsoft.costmanagement-qpu-retry-after`` says ("Cost Management automation",
learn.microsoft.com/azure/cost-management-billing/costs/manage-automation), which the client's retry
does not read. Cost Management refreshes its data about every four hours (same page).

Meter categories name the line; NAT gateways and public addresses share "Virtual Network", so the
comparison keeps them together as ``network``.

``Cost`` is in the billing currency, which each row's ``Currency`` column names; the query also sums
``CostUSD``, the same cost in US dollars at Cost Management's own rate (the query API's cost columns:
Cost, CostUSD, PreTaxCost, PreTaxCostUSD). A row in another currency is counted in dollars only at
that rate: without it, its amount stays in its currency, said and never compared with a prediction.
"""

from __future__ import annotations

import datetime as dt
import time

from azure.core.exceptions import AzureError, HttpResponseError
from azure.core.rest import HttpRequest
from azure.mgmt.costmanagement import CostManagementClient
from azure.mgmt.costmanagement.models import QueryResult

from gpufleet.clouds import bill_lines
from gpufleet.clouds.azure.api import AzureApi, unreadable
from gpufleet.clouds.base import Billed, BillRead, merged
from gpufleet.clouds.tags import TAG_PREFIX

TAG = TAG_PREFIX + "cluster"
API_VERSION = "2025-03-01"
LAG = "Azure Cost Management refreshes its data about every four hours: the last day may be incomplete"
RETRY_AFTER = "x-ms-ratelimit-microsoft.costmanagement-qpu-retry-after"
THROTTLED_TRIES = 5
# a meter category's line; "Virtual Network" has the NAT gateway and the public addresses together
LINES = {"Virtual Machines": bill_lines.INSTANCES, "Storage": bill_lines.VOLUMES,
         "Azure Managed Lustre": bill_lines.FILE_SYSTEM, "Virtual Network": bill_lines.NETWORK,
         "Bandwidth": bill_lines.TRANSFER}


def line_of(meter_category: str) -> str:
    return LINES.get(meter_category, bill_lines.OTHER)


def billed(since, until, clusters: list[str] | None, settings: dict, *, api: AzureApi | None = None,
           sleep=time.sleep) -> BillRead:
    api = api or AzureApi()
    credential, subscription = api.signed_in()  # none: skipped by the caller, as other commands skip it
    client = CostManagementClient(credential, base_url=api.endpoint, api_version=API_VERSION)
    scope = f"subscriptions/{subscription}"
    query = {"type": "ActualCost", "timeframe": "Custom",
             "timePeriod": {"from": f"{since.isoformat()}T00:00:00+00:00",
                            "to": f"{(until - dt.timedelta(days=1)).isoformat()}T23:59:59+00:00"},
             "dataset": {"granularity": "Daily", "aggregation": {"totalCost": {"name": "Cost", "function": "Sum"},
                                                                "totalCostUSD": {"name": "CostUSD", "function": "Sum"}},
                         "grouping": [{"type": "TagKey", "name": TAG}, {"type": "Dimension", "name": "MeterCategory"}],
                         **({"filter": {"tags": {"name": TAG, "operator": "In", "values": sorted(clusters)}}}
                            if clusters else {})}}
    rows: list[Billed] = []
    try:
        result = _throttled(lambda: client.query.usage(scope, query), sleep)
        while result is not None:  # 204: nothing billed in the period
            _add(rows, result)
            link = result.next_link
            result = _throttled(lambda link=link: _next(client, link, query), sleep) if link else None
    except AzureError as e:
        raise unreadable(e, "azure Cost Management") from None
    return BillRead(merged(rows), [LAG])


def _add(rows: list, result) -> None:
    names = [c.name for c in result.columns]
    at = {n: names.index(n) for n in names}
    for r in result.rows:
        cluster = r[at["TagValue"]] if "TagValue" in at else None
        if not cluster:
            continue  # cost of resources without the tag
        line = line_of(r[at["MeterCategory"]])
        day = str(int(r[at["UsageDate"]])) if "UsageDate" in at else ""
        day = f"{day[:4]}-{day[4:6]}-{day[6:]}" if len(day) == 8 else day
        amount = float(r[at["Cost"]])
        currency = (r[at["Currency"]] if "Currency" in at else None) or "USD"
        usd = amount if currency == "USD" else float(r[at["CostUSD"]]) if "CostUSD" in at else None
        rows.append(Billed("azure", cluster, line, usd, day, currency=currency,
                           amount=None if currency == "USD" else amount))


def _next(client, link: str, query: dict):
    """The next page: the same query POSTed to ``nextLink`` (the client's ``usage`` does not page)."""
    resp = client._client.send_request(HttpRequest("POST", link, json=query))
    if resp.status_code == 204:
        return None
    if resp.status_code >= 400:
        raise HttpResponseError(response=resp)
    return QueryResult(resp.json())


def _throttled(call, sleep):
    """``call``, again after the wait Cost Management names when it throttles (429)."""
    for attempt in range(THROTTLED_TRIES):
        try:
            return call()
        except HttpResponseError as e:
            wait = e.response.headers.get(RETRY_AFTER) if e.response is not None else None
            if e.status_code != 429 or wait is None or attempt == THROTTLED_TRIES - 1:
                raise
            sleep(min(float(wait), 60.0))

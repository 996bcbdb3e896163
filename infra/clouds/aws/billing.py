"""What AWS billed gpufleet's clusters, from Cost Explorer (GetCostAndUsage, grouped by the
``gpufleet:cluster`` tag and the usage type, daily, unblended cost; docs.aws.amazon.com/
aws-cost-management/latest/APIReference/API_GetCostAndUsage.html and botocore's ce 2017-10-25 model).

Cost Explorer groups by a tag only once the tag is activated as a cost allocation tag, which takes up
to 24 hours and does not reach back unless a backfill is asked for ("Activating user-defined cost
allocation tags", AWS Billing user guide): ListCostAllocationTags says whether it is, and a tag that
is not is an unreadable bill with the commands that fix it. Only an Organization's management account
(or an account in none) may read cost allocation tags ("Only a management account in an organization
and single accounts that aren't members of an organization have access to the cost allocation tags
manager", custom-tags.html, read 2026-11); a member account is refused with HTTP 400
``AccessDeniedException: Failed to list Cost Allocation Tags: Linked account doesn't have access to
cost allocation tags.`` (as seen in hashicorp/terraform-provider-aws#37636 and
aws/aws-parallelcluster-ui#242) even where the payer activated the tag; IAM refuses a caller without
ce:ListCostAllocationTags with the same code in its own words ("User: ... is not authorized to
perform: ..."). Either refused pre-check is said, each as what it is, and Cost Explorer is asked
anyway. Groups come as ``gpufleet:cluster$<name>`` (an untagged cost as ``gpufleet:cluster$``, left
out), pages follow NextPageToken (each request costs
$0.01), and days the service marks ``Estimated`` are said so. Usage types name the line: BoxUsage /
SpotUsage are instances, EBS: volumes, NatGateway-Hours NAT, NatGateway-Bytes and DataTransfer-*
traffic, PublicIPv4: addresses (docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-billing-usage-reports
.html, .../ebs/latest/userguide/ebs-billing-usage-reports.html, .../vpc/latest/userguide/
vpc-billing-usage-reports.html); FSx's usage types are matched by name. Each amount carries its
``Unit``: an amount in another unit than USD stays in it (counted in no dollar figure, and said), as
another currency does in the other clouds' bills.
"""

from __future__ import annotations

import re

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from gpufleet.clouds import bill_lines
from gpufleet.clouds.aws import credentials
from gpufleet.clouds.aws.api import unreadable
from gpufleet.clouds.aws.errors import CREDENTIAL_HINT
from gpufleet.clouds.base import Billed, BillRead, merged
from gpufleet.clouds.tags import TAG_PREFIX
from gpufleet.errors import CloudUnreadable, CredentialsError

TAG = TAG_PREFIX + "cluster"
# How Cost Explorer words a member account's refusal; the code, AccessDeniedException, is IAM's generic
# one too, and botocore's ce model (1.44) declares neither for ListCostAllocationTags
MEMBER_ACCOUNT = "Linked account doesn't have access to cost allocation tags"
REGION = "us-east-1"  # Cost Explorer's one endpoint: https://ce.us-east-1.amazonaws.com
LAG = ("AWS updates its billing data up to three times a day and at least once every 24 hours; the last day's "
       "figures are estimates")
LINES = ((re.compile(r"(BoxUsage|SpotUsage|DedicatedUsage|HostUsage|UnusedBox|Reservation)"), bill_lines.INSTANCES),
         (re.compile(r"EBS:"), bill_lines.VOLUMES),
         (re.compile(r"NatGateway-Hours"), bill_lines.NAT),
         (re.compile(r"PublicIPv4:"), bill_lines.IPV4),
         (re.compile(r"(NatGateway-Bytes|DataTransfer|-AWS-(In|Out)-Bytes)"), bill_lines.TRANSFER),
         (re.compile(r"(FSx|Lustre)", re.I), bill_lines.FILE_SYSTEM))


def line_of(usage_type: str) -> str:
    return next((line for pattern, line in LINES if pattern.search(usage_type)), bill_lines.OTHER)


def billed(since, until, clusters: list[str] | None, settings: dict, *, client=None) -> BillRead:
    if client is None:
        session = credentials.session()
        if session.get_credentials() is None:
            raise CredentialsError("aws", "aws: no credentials found (environment, ~/.aws, SSO or instance role)",
                                   CREDENTIAL_HINT)
        client = session.client("ce", region_name=REGION, config=Config(retries={"mode": "standard",
                                                                                 "max_attempts": 6}))
    ce = client
    notes = [LAG]
    try:
        notes += _require_active_tag(ce)
        rows: list[Billed] = []
        request = {"TimePeriod": {"Start": since.isoformat(), "End": until.isoformat()}, "Granularity": "DAILY",
                   "Metrics": ["UnblendedCost"], "GroupBy": [{"Type": "TAG", "Key": TAG},
                                                             {"Type": "DIMENSION", "Key": "USAGE_TYPE"}]}
        if clusters:
            request["Filter"] = {"Tags": {"Key": TAG, "Values": sorted(clusters), "MatchOptions": ["EQUALS"]}}
        while True:
            page = ce.get_cost_and_usage(**request)
            for day in page["ResultsByTime"]:
                for g in day.get("Groups", []):
                    cluster = g["Keys"][0].split("$", 1)[1]  # "gpufleet:cluster$name": split at the first $
                    if not cluster:
                        continue
                    cost = g["Metrics"]["UnblendedCost"]
                    amount, unit = float(cost["Amount"]), cost.get("Unit") or "USD"
                    rows.append(Billed("aws", cluster, line_of(g["Keys"][1]), amount if unit == "USD" else None,
                                       day["TimePeriod"]["Start"], day.get("Estimated", False), unit,
                                       None if unit == "USD" else amount))
            if not page.get("NextPageToken"):
                break
            request["NextPageToken"] = page["NextPageToken"]
    except (BotoCoreError, ClientError) as e:
        raise unreadable(e, "aws Cost Explorer") from None
    return BillRead(merged(rows), notes)


def _require_active_tag(ce) -> list[str]:
    """The cluster tag must be an active cost allocation tag, or Cost Explorer cannot group by it. A
    caller refused the list cannot tell: what it cannot tell, and why it was refused, is said."""
    try:
        tags = ce.list_cost_allocation_tags(TagKeys=[TAG]).get("CostAllocationTags", [])
    except ClientError as e:
        error = e.response.get("Error", {})
        if error.get("Code") != "AccessDeniedException":
            raise
        unknown = f"so whether {TAG} is active is not known: if nothing is billed for a cluster, "
        activate = f"aws ce update-cost-allocation-tags-status --cost-allocation-tags-status TagKey={TAG},Status=Active"
        if MEMBER_ACCOUNT in (error.get("Message") or ""):
            return [f"this account may not read cost allocation tags (an AWS Organizations member account: only the "
                    f"management account may), {unknown}ask the management account to activate it ({activate})"]
        # IAM's own refusal shares the code ("User: ... is not authorized to perform: ...")
        return [f"these credentials may not list cost allocation tags ({error.get('Message') or 'AccessDenied'}), "
                f"{unknown}grant them ce:ListCostAllocationTags to check, or activate the tag ({activate})"]
    status = tags[0]["Status"] if tags else None
    if status == "Active":
        return []
    err = CloudUnreadable("aws", "error", f"the cost allocation tag {TAG} is "
                          + ("not activated" if status else "not known to billing yet (no tagged cost so far)"),
                          "aws Cost Explorer")
    err.hint = (f"activate it: aws ce update-cost-allocation-tags-status --cost-allocation-tags-status "
                f"TagKey={TAG},Status=Active (it takes up to 24 hours, and only costs from then on are grouped; "
                "aws ce start-cost-allocation-tag-backfill --backfill-from <first day of a month> reaches back up "
                "to 12 months)" if status else
                "billing lists a tag up to 24 hours after a tagged resource first costs something; then activate it "
                f"with aws ce update-cost-allocation-tags-status --cost-allocation-tags-status TagKey={TAG},Status=Active")
    raise err

"""EC2's refusals, by what they rule out for the next attempt (capacity failover).

Each row is an error code from AWS's own documentation, how it reads in pulumi-aws's output
(``creating EC2 Instance: operation error EC2: RunInstances, https response error ..., api error
<Code>: <message>``, or the older ``<Code>: <message>\\n\\tstatus code: ...``), and its scope. EC2 Fleet's
instant errors (``errors[].errorCode`` of CreateFleet) carry the same codes (CreateFleetError points
to the same page), so the same rows read them. Table order is precedence: credentials and
permission first (they stop everything), then quotas, capacity, price, arguments.

Scopes: capacity is a pool of one instance type in one Availability Zone, so a shortage rules out
that zone; On-Demand and Spot instance quotas are Service Quotas of a Region, so they rule out
the region; a price below the Spot price rules out the zone, because a Spot price is set
per Spot pool (instance type and Availability Zone) and another zone's pool may be cheaper;
refused credentials rule out AWS; a permission or a bad argument fails the same way everywhere.
Tests: ``tests/unit/test_refusals.py`` over ``tests/data/refusals/aws/``.
"""


from gpufleet.clouds.base import RefusalRule

ERRORS = "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html"
COMMON = "https://docs.aws.amazon.com/IAM/latest/APIReference/CommonErrors.html"


def _rule(code: str, pattern: str, scope: str, kind: str, source: str = ERRORS) -> RefusalRule:
    return RefusalRule.of(code, pattern, scope, kind, source)


RULES = (
    # refused credentials: another provider may still be usable
    _rule("AuthFailure", r"\bAuthFailure\b", "provider", "credentials"),
    _rule("InvalidClientTokenId", r"\bInvalidClientTokenId\b", "provider", "credentials"),
    _rule("ExpiredToken", r"\b(?P<code>ExpiredToken(?:Exception)?)\b", "provider", "credentials", COMMON),
    _rule("SignatureDoesNotMatch", r"\bSignatureDoesNotMatch\b", "provider", "credentials"),
    # the identity may not do this: every other candidate is refused the same way
    _rule("UnauthorizedOperation", r"\bUnauthorizedOperation\b", "stop", "permission"),
    _rule("AccessDenied", r"\b(?P<code>AccessDenied(?:Exception)?)\b", "stop", "permission", COMMON),
    # quotas are per Region
    _rule("VcpuLimitExceeded", r"\bVcpuLimitExceeded\b", "region", "quota"),
    _rule("InstanceLimitExceeded", r"\bInstanceLimitExceeded\b", "region", "quota"),
    _rule("MaxSpotInstanceCountExceeded", r"\bMaxSpotInstanceCountExceeded\b", "region", "quota"),
    # no capacity in this Availability Zone (or in the targeted reservation, which lives in one)
    _rule("InsufficientInstanceCapacity", r"\bInsufficientInstanceCapacity\b", "zone", "capacity"),
    _rule("ReservationCapacityExceeded", r"\bReservationCapacityExceeded\b", "zone", "capacity"),
    _rule("UnfulfillableCapacity", r"\bUnfulfillableCapacity\b", "zone", "capacity"),
    # "you might be trying to launch an instance in an Availability Zone that currently has
    # constraints on that instance type"; anchored on EC2's two wordings, so that a Terraform
    # "Unsupported argument" diagnostic is not read as a zone without capacity
    _rule("Unsupported", r"\bUnsupported: (?:Your requested instance type|The requested configuration is currently not "
          r"supported)", "zone", "capacity"),
    # the maximum price is below this Spot pool's price
    _rule("SpotMaxPriceTooLow", r"\bSpotMaxPriceTooLow\b", "zone", "price"),
    # the request itself is wrong: it fails the same way anywhere
    _rule("InvalidParameterValue", r"\bInvalidParameterValue\b", "stop", "argument"),
    _rule("InvalidParameterCombination", r"\bInvalidParameterCombination\b", "stop", "argument"),
    _rule("InvalidAMIID", r"\b(?P<code>InvalidAMIID\.(?:Malformed|NotFound|Unavailable))\b", "stop", "argument"),
)

"""Azure's refusals, by what they rule out for the next attempt (capacity failover).

pulumi-azure-native prints the ARM error code and message (``Code="AllocationFailed"
Message="..."``, or ``{"error":{"code":"AuthorizationFailed","message":"..."}}``); a template
validation error nests the real code under ``InvalidTemplateDeployment``. Each row matches the
code, or the documented message where a code wraps it. Table order is precedence: credentials and
permission first, then the Spot price (its code is OperationNotAllowed, like a quota), quotas,
capacity, arguments.

Scopes: ``ZonalAllocationFailed`` ("sufficient capacity ... in this zone") rules out the zone, and so
does ``OverconstrainedAllocationRequest`` (its constraints include the availability zone, and
Microsoft's remedy is "a different zone ... or a different region"); ``AllocationFailed`` says "in
this region" and rules out the region (gpufleet's scale sets are regional unless Managed Lustre pins
them to a zone); ``SkuNotAvailable`` (a size not offered, or no Spot capacity, "in location") rules
out the region; vCPU quotas ("Total Regional Cores", the per-family cores) are per region and
subscription, so they rule out the region; a Spot price above the pool's maximum rules out the
region (Spot prices are per region and size); refused tokens rule out Azure; a missing role
assignment or a bad template fails the same way everywhere.
Tests: ``tests/unit/test_refusals.py`` over ``tests/data/refusals/azure/``.
"""


from gpufleet.clouds.base import RefusalRule

DEPLOYMENT_ERRORS = "https://learn.microsoft.com/en-us/azure/azure-resource-manager/troubleshooting/common-deployment-errors"
ALLOCATION = "https://learn.microsoft.com/en-us/troubleshoot/azure/virtual-machines/windows/allocation-failure"
OVERCONSTRAINED = ("https://learn.microsoft.com/en-us/troubleshoot/azure/azure-kubernetes/error-codes/"
                   "zonalallocation-allocationfailed-error")
SKU = "https://learn.microsoft.com/en-us/azure/azure-resource-manager/troubleshooting/error-sku-not-available"
QUOTA = "https://learn.microsoft.com/en-us/azure/azure-resource-manager/troubleshooting/error-resource-quota"
SPOT = "https://learn.microsoft.com/en-us/azure/virtual-machines/error-codes-spot"
ENTRA = "https://learn.microsoft.com/en-us/entra/identity-platform/reference-error-codes"


_rule = RefusalRule.of


RULES = (
    # Microsoft Entra refused to issue a token (AADSTS<number>), or issued one for another tenant
    _rule("AADSTS", r"\b(?P<code>AADSTS\d+)\b", "provider", "credentials", ENTRA),
    _rule("InvalidAuthenticationTokenTenant", r"\bInvalidAuthenticationTokenTenant\b", "provider", "credentials",
          DEPLOYMENT_ERRORS),
    # no role assignment allows the action
    _rule("AuthorizationFailed", r"\bAuthorizationFailed\b", "stop", "permission", DEPLOYMENT_ERRORS),
    # "the provided max price '...' is lower than the current spot price '...'"
    _rule("SpotPriceGreaterThanProvidedMaxPrice",
          r"\b(?P<code>SpotPriceGreaterThanProvidedMaxPrice)\b|provided max price '[^']*' is lower than the current "
          r"spot price", "region", "price", SPOT),
    # "Operation results in exceeding quota limits of Core" (OperationNotAllowed), or the newer
    # "... results in exceeding approved Total Regional Cores quota" (OperationNotAllowed / QuotaExceeded)
    _rule("OperationNotAllowed", r"\b(?P<code>QuotaExceeded)\b|results in exceeding (?:approved .*)?quota",
          "region", "quota", QUOTA),
    _rule("ZonalAllocationFailed", r"\bZonalAllocationFailed\b", "zone", "capacity", ALLOCATION),
    _rule("OverconstrainedAllocationRequest",
          r"\b(?P<code>Overconstrained(?:Zonal)?AllocationRequest)\b|VM\(s\) with the following constraints cannot "
          r"be allocated", "zone", "capacity", OVERCONSTRAINED),
    _rule("AllocationFailed", r"\bAllocationFailed\b", "region", "capacity", ALLOCATION),
    # "The requested size for resource '...' is currently not available in location '...'"
    _rule("SkuNotAvailable", r"\bSkuNotAvailable\b|is currently not available in location '", "region", "capacity",
          SKU),
    # the template or a parameter is wrong
    _rule("InvalidParameter",
          r"\b(?P<code>InvalidParameter|InvalidTemplate|InvalidTemplateDeployment|InvalidRequestContent|BadRequest)\b",
          "stop", "argument", DEPLOYMENT_ERRORS),
)

"""Compute Engine's refusals, by what they rule out for the next attempt (capacity failover).

pulumi-gcp prints what the Compute API said: a synchronous ``googleapi: Error <status>: <message>,
<reason>``, or, for an operation that failed while running, ``Error waiting for instance to
create: <message>`` with the message alone (no code). So each row matches the code where it is
printed and the documented message where it is not. Table order is precedence: credentials and
permission first, then quotas (a global one before a regional one), capacity, arguments.

Scopes: a resource availability error is a shortage of hardware in one zone ("indicate a shortage
of physical hardware in a zone rather than a project usage limit"), so it rules out the zone; an
allocation quota reported "in region R" rules out the region, one reported "globally" (the
``*_ALL_REGIONS`` quotas, e.g. ``GPUS_ALL_REGIONS``) rules out GCP; refused credentials rule out
GCP; a missing permission or a bad request fails the same way everywhere.
Tests: ``tests/unit/test_refusals.py`` over ``tests/data/refusals/gcp/``.
"""


from gpufleet.clouds.base import RefusalRule

AVAILABILITY = "https://cloud.google.com/compute/docs/troubleshooting/troubleshooting-resource-availability"
QUOTA_ERRORS = "https://cloud.google.com/docs/quotas/troubleshoot"
ALLOCATION_QUOTAS = "https://cloud.google.com/compute/resource-usage"
CORE_ERRORS = "https://cloud.google.com/resource-manager/docs/core_errors"
OAUTH_ERRORS = "https://datatracker.ietf.org/doc/html/rfc6749#section-5.2"
FLEX_START = "https://cloud.google.com/compute/docs/instances/about-flex-start-vms"


_rule = RefusalRule.of


RULES = (
    # OAuth 2.0 refused the grant (expired or revoked refresh token, reauthentication required)
    _rule("invalid_grant", r"\binvalid_grant\b", "provider", "credentials", OAUTH_ERRORS),
    # 403 with reason "forbidden": "Required '<permission>' permission for '<resource>'"
    _rule("forbidden", r"Required '[\w.]+' permission for|\b(?P<code>PERMISSION_DENIED)\b|Error 403: .*, forbidden\b",
          "stop", "permission", CORE_ERRORS),
    # "Quota 'GPUS_ALL_REGIONS' exceeded.  Limit: 0.0 globally."
    _rule("QUOTA_EXCEEDED", r"Quota '\w+' exceeded\.\s+Limit: [\d.]+ globally|Quota '\w+_ALL_REGIONS' exceeded",
          "provider", "quota", ALLOCATION_QUOTAS),
    # "Quota 'NVIDIA_H100_GPUS' exceeded.  Limit: 0.0 in region us-central1."
    _rule("QUOTA_EXCEEDED", r"Quota '\w+' exceeded|\bQUOTA_EXCEEDED\b|\bquotaExceeded\b", "region", "quota",
          QUOTA_ERRORS),
    # "A <machine> VM instance with <attachment> is currently unavailable in the <zone> zone."
    _rule("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
          r"\bZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS\b|VM instance .*is currently unavailable in the [\w-]+ zone",
          "zone", "capacity", AVAILABILITY),
    # a flex-start pool's resize request still unprovisioned after the pool's wait (clouds.gcp.flexstart,
    # gpufleet's own words): DWS found no capacity there in time, "If resources aren't available, then
    # the VM creation request fails" (About Flex-start VMs)
    _rule("FLEX_START_NOT_PROVISIONED", r"\bFLEX_START_NOT_PROVISIONED\b", "zone", "capacity", FLEX_START),
    # "The zone 'projects/P/zones/Z' does not have enough resources available to fulfill the request."
    _rule("ZONE_RESOURCE_POOL_EXHAUSTED",
          r"\bZONE_RESOURCE_POOL_EXHAUSTED\b|does not have enough resources available to fulfill the request",
          "zone", "capacity", AVAILABILITY),
    # 400 with reason "badRequest" or "invalid"
    _rule("badRequest", r"Error 400: .*, (?P<code>badRequest|invalid)\b", "stop", "argument", CORE_ERRORS),
)

"""The clouds' refusals, classified by what they rule out for the next attempt (capacity failover).

Every recorded payload (``tests/data/refusals/<cloud>/<name>.txt``: an error text quoted from a
public issue, its address in the ``# source:`` header) reads as the scope, kind and code written in
EXPECTED below (written by hand from the providers' documentation, not read from the tables under
test); every row of a cloud's table has a documentation page and at least one payload it reads
first; and a Pulumi failure that `translate` turns into a gpufleet error carries the refusal.
"""

import re

import pytest

from gpufleet import stacks
from gpufleet.clouds import cloud
from gpufleet.clouds.base import REFUSAL_KINDS, SCOPES, RefusalRule, first_refusal, refusal_in
from gpufleet.engine import automation
from gpufleet.engine import plan as planner
from gpufleet.errors import CapacityError, DeployError, ToolMissing
from gpufleet.providers import CLOUDS

from conftest import ROOT

DATA = ROOT / "tests" / "data" / "refusals"

# rows that read gpufleet's own words, for a failure the cloud reports without an error (no payload
# to record): each is read in the test of the code that raises it (FLEX_START_NOT_PROVISIONED:
# tests/unit/clouds/gcp/test_gcp_flex.py)
OWN_WORDS = {"FLEX_START_NOT_PROVISIONED"}

# (cloud, payload) -> (scope, kind, code); code "" where the text carries none (an SDK's own words)
EXPECTED = {
    ("aws", "auth_failure"): ("provider", "credentials", "AuthFailure"),
    ("aws", "invalid_client_token_id"): ("provider", "credentials", "InvalidClientTokenId"),
    ("aws", "expired_token"): ("provider", "credentials", "ExpiredToken"),
    ("aws", "signature_does_not_match"): ("provider", "credentials", "SignatureDoesNotMatch"),
    ("aws", "no_valid_credential_sources"): ("provider", "credentials", ""),
    ("aws", "unauthorized_operation"): ("stop", "permission", "UnauthorizedOperation"),
    ("aws", "access_denied"): ("stop", "permission", "AccessDenied"),
    ("aws", "vcpu_limit_exceeded"): ("region", "quota", "VcpuLimitExceeded"),
    ("aws", "instance_limit_exceeded"): ("region", "quota", "InstanceLimitExceeded"),
    ("aws", "max_spot_instance_count_exceeded"): ("region", "quota", "MaxSpotInstanceCountExceeded"),
    ("aws", "insufficient_instance_capacity"): ("zone", "capacity", "InsufficientInstanceCapacity"),
    ("aws", "insufficient_instance_capacity_fleet"): ("zone", "capacity", "InsufficientInstanceCapacity"),
    ("aws", "reservation_capacity_exceeded"): ("zone", "capacity", "ReservationCapacityExceeded"),
    ("aws", "unfulfillable_capacity"): ("zone", "capacity", "UnfulfillableCapacity"),
    ("aws", "unsupported_instance_type_in_zone"): ("zone", "capacity", "Unsupported"),
    ("aws", "unsupported_configuration"): ("zone", "capacity", "Unsupported"),
    ("aws", "spot_max_price_too_low"): ("zone", "price", "SpotMaxPriceTooLow"),
    ("aws", "invalid_parameter_value"): ("stop", "argument", "InvalidParameterValue"),
    ("aws", "invalid_parameter_combination"): ("stop", "argument", "InvalidParameterCombination"),
    ("aws", "invalid_ami_id_not_found"): ("stop", "argument", "InvalidAMIID.NotFound"),
    ("gcp", "invalid_grant"): ("provider", "credentials", "invalid_grant"),
    ("gcp", "no_default_credentials"): ("provider", "credentials", ""),
    ("gcp", "permission_required"): ("stop", "permission", "forbidden"),
    ("gcp", "quota_gpus_all_regions"): ("provider", "quota", "QUOTA_EXCEEDED"),
    ("gcp", "quota_all_regions_cloud_build"): ("provider", "quota", "QUOTA_EXCEEDED"),
    ("gcp", "quota_regional"): ("region", "quota", "QUOTA_EXCEEDED"),
    ("gcp", "zone_resource_pool_exhausted"): ("zone", "capacity", "ZONE_RESOURCE_POOL_EXHAUSTED"),
    ("gcp", "zone_resources_operation_error"): ("zone", "capacity", "ZONE_RESOURCE_POOL_EXHAUSTED"),
    ("gcp", "zone_resource_pool_exhausted_with_details"): ("zone", "capacity",
                                                           "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"),
    ("gcp", "zone_unavailable_with_details"): ("zone", "capacity", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"),
    ("gcp", "bad_request"): ("stop", "argument", "badRequest"),
    ("azure", "aadsts_invalid_client_secret"): ("provider", "credentials", "AADSTS7000215"),
    ("azure", "invalid_authentication_token_tenant"): ("provider", "credentials", "InvalidAuthenticationTokenTenant"),
    ("azure", "az_login"): ("provider", "credentials", ""),
    ("azure", "authorization_failed"): ("stop", "permission", "AuthorizationFailed"),
    ("azure", "spot_price"): ("region", "price", "SpotPriceGreaterThanProvidedMaxPrice"),
    ("azure", "operation_not_allowed_quota"): ("region", "quota", "OperationNotAllowed"),
    ("azure", "total_regional_cores"): ("region", "quota", "OperationNotAllowed"),
    ("azure", "quota_exceeded"): ("region", "quota", "QuotaExceeded"),
    ("azure", "zonal_allocation_failed"): ("zone", "capacity", "ZonalAllocationFailed"),
    ("azure", "overconstrained_allocation_request"): ("zone", "capacity", "OverconstrainedAllocationRequest"),
    ("azure", "overconstrained_zonal_allocation_request"): ("zone", "capacity",
                                                            "OverconstrainedZonalAllocationRequest"),
    ("azure", "allocation_failed"): ("region", "capacity", "AllocationFailed"),
    ("azure", "sku_not_available"): ("region", "capacity", "SkuNotAvailable"),
    ("azure", "sku_not_available_template"): ("region", "capacity", "SkuNotAvailable"),
    ("azure", "invalid_parameter"): ("stop", "argument", "InvalidParameter"),
}


def _payload(path) -> tuple[str, str]:
    """(source address, error text) of a recorded payload."""
    lines = path.read_text().splitlines(keepends=True)
    header = [ln for ln in lines if ln.startswith("# ")]
    assert lines[:len(header)] == header, f"{path}: the header comes first"
    sources = [ln[len("# source: "):].strip() for ln in header if ln.startswith("# source: ")]
    assert len(sources) == 1, f"{path}: one '# source: URL' line"
    return sources[0], "".join(lines[len(header):])


def _payloads(name: str):
    return sorted((DATA / name).glob("*.txt"))


def test_every_recorded_payload_is_expected_and_quoted_from_a_public_source():
    recorded = {(p.parent.name, p.stem) for name in CLOUDS for p in _payloads(name)}
    assert recorded == set(EXPECTED)
    for name in CLOUDS:
        for path in _payloads(name):
            source, text = _payload(path)
            assert source.startswith("https://github.com/"), path
            assert text.strip(), path


@pytest.mark.parametrize("name,payload", sorted(EXPECTED))
def test_a_payload_reads_as_its_documented_refusal(name, payload):
    _, text = _payload(DATA / name / f"{payload}.txt")
    c, refusal = automation.classify(text, [cloud(name)])
    assert (refusal.scope, refusal.kind, refusal.code) == EXPECTED[name, payload]
    assert c is not None and c.name == name
    assert refusal.message and len(refusal.message) <= 300 and "\x1b" not in refusal.message
    assert refusal.message in text or refusal.message in text.replace("\t", " ")
    if refusal.code:
        assert refusal.source.startswith("https://")


@pytest.mark.parametrize("name,payload", sorted(EXPECTED))
def test_no_other_clouds_table_misreads_a_payload_when_the_failing_cloud_is_unknown(name, payload):
    """Before any resource failed (a provider's configuration), every cloud's table is asked."""
    _, text = _payload(DATA / name / f"{payload}.txt")
    c, refusal = automation.classify(text)
    assert c.name == name and (refusal.scope, refusal.kind, refusal.code) == EXPECTED[name, payload]


@pytest.mark.parametrize("name", CLOUDS)
def test_every_row_is_documented_and_read_first_by_a_recorded_payload(name):
    rules = cloud(name).errors.rules
    assert rules and all(isinstance(r, RefusalRule) for r in rules)
    texts = [_payload(p)[1] for p in _payloads(name)]
    for rule in rules:
        assert rule.scope in SCOPES and rule.kind in REFUSAL_KINDS
        assert rule.source.startswith("https://"), rule.code
        if rule.code in OWN_WORDS:
            continue
        assert any((found := first_refusal(rules, t)) and found[0] is rule for t in texts), \
            f"{name}: no recorded payload for {rule.code} ({rule.pattern.pattern})"


def test_the_kinds_of_failure_still_read_as_before_the_tables():
    """``errors.credentials / quota / capacity`` match the table's rows of that kind and the SDKs' words."""
    aws, gcp, azure = (cloud(n).errors for n in ("aws", "gcp", "azure"))
    assert aws.capacity.search("InsufficientInstanceCapacity: none left") and not aws.quota.search("InsufficientInstanceCapacity")
    assert aws.quota.search("api error VcpuLimitExceeded: You have requested more vCPU capacity")
    assert aws.credentials.search("no valid credential sources for Terraform AWS Provider found.")
    assert gcp.quota.search("Quota 'NVIDIA_H100_GPUS' exceeded.  Limit: 0.0 in region us-central1.")
    assert gcp.credentials.search("google: could not find default credentials")
    assert azure.capacity.search('Code="SkuNotAvailable"') and azure.credentials.search("AADSTS700016: Application")


def test_an_unknown_failure_stops_and_a_terraform_diagnostic_is_not_a_zone_shortage():
    c, refusal = automation.classify("Error: Unsupported argument: An argument named \"foo\" is not expected here.")
    assert c is None and (refusal.scope, refusal.kind, refusal.code, refusal.source) == ("stop", "unknown", "", "")
    assert refusal.message.startswith("Error: Unsupported argument")


def test_a_refusal_and_its_rule_are_checked_and_serialisable():
    with pytest.raises(ValueError):
        RefusalRule("X", re.compile("X"), "continent", "capacity", "https://example.com")
    refusal = refusal_in(cloud("aws").errors.rules, "error: \x1b[31mAuthFailure\x1b[0m: AWS was not able to validate")
    assert refusal.message == "error: AuthFailure: AWS was not able to validate"  # Pulumi's colours stripped
    assert refusal.to_dict() == {"scope": "provider", "kind": "credentials", "code": "AuthFailure",
                                 "message": refusal.message, "source": refusal.source}


# --- through translate ----------------------------------------------------------------------------

AWS_STACK = ROOT / "stacks" / "examples" / "aws-training.yaml"


@pytest.fixture
def fake(cat, tmp_path, monkeypatch):
    pytest.importorskip("pulumi")
    from fakes.pulumi_cli import FakePulumiCLI

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("PULUMI_BACKEND_URL", raising=False)
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "test-passphrase")
    return FakePulumiCLI(planner.plan(stacks.load(AWS_STACK, cat), cat, workers=1))


def test_translate_attaches_the_refusal_of_a_recorded_payload(fake):
    from fakes.pulumi_cli import Failure

    _, text = _payload(DATA / "aws" / "insufficient_instance_capacity.txt")
    fake.fail_up = Failure(text.strip(), after=3)
    with pytest.raises(CapacityError) as ei:
        automation.up("refusal-test", lambda: None, pulumi_command=fake)
    refusal = ei.value.refusal
    assert (refusal.scope, refusal.kind, refusal.code) == ("zone", "capacity", "InsufficientInstanceCapacity")
    assert refusal.source == "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html"
    assert "us-east-2a" in refusal.message and "not a quota problem" in ei.value.hint  # today's hint is kept
    assert ei.value.to_dict()["refusal"] == refusal.to_dict()


def test_translate_attaches_a_stop_to_what_no_table_knows(fake):
    from fakes.pulumi_cli import Failure

    fake.fail_up = Failure("creating FSx for Lustre File System: BadRequest: Throughput is not supported", after=2)
    with pytest.raises(DeployError) as ei:
        automation.up("refusal-test", lambda: None, pulumi_command=fake)
    assert (ei.value.refusal.scope, ei.value.refusal.kind) == ("stop", "unknown")
    assert ei.value.refusal.message in ei.value.message and ei.value.resources


def test_translate_attaches_no_refusal_where_the_cloud_said_nothing():
    err = automation.translate(FileNotFoundError("pulumi"))
    assert isinstance(err, ToolMissing) and err.refusal is None and "refusal" not in err.to_dict()

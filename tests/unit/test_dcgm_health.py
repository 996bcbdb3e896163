"""DCGM's health watches (`dcgmi health -s a` once, `dcgmi health -c -j` each run): the parser on the layouts
recorded from DCGM's own source (tests/data/verify/dcgmi-health/, NVIDIA/DCGM v4.6.0; see the README there), and
the check run by the verify bundle (what the node's watch and slurmd's health program run) against the stand-in
dcgmi replaying them: a failure is a fault named after DCGM's system, DCGM absent is not checked, dcgmi failing or
hanging is not checked either (unknown), never a failure."""

import pytest

from gpufleet.configure.slurm import health_expectations
from gpufleet.nodecheck import parsers
from tests.conftest import ROOT
from tests.unit.test_verify import by_check, h100_expect, run_bundle
from tests.verify_standin import standins

DATA = ROOT / "tests" / "data" / "verify"
HEALTH = DATA / "dcgmi-health"


def test_the_reports_layout_as_dcgmi_prints_it():
    assert parsers.dcgm_health((HEALTH / "dcgmi-health-healthy.json").read_text()) == {"overall": "pass",
                                                                                     "incidents": []}
    bad = parsers.dcgm_health((HEALTH / "dcgmi-health-memory-fail.json").read_text())
    assert bad["overall"] == "fail"
    assert [(i["group"], i["entity"], i["system"], i["status"]) for i in bad["incidents"]] == [
        ("GPU", "0", "MEMORY", "fail"), ("GPU", "0", "PCIE", "warn")]
    # a message over 54 characters comes in "overflow" lines, cut at word ends (Health::AddErrorMessage): joined back
    assert bad["incidents"][1]["message"] == "Detected more than 8 PCIe replays per minute for GPU 0 : 14"
    two = parsers.dcgm_health((HEALTH / "dcgmi-health-nvlink-fail.json").read_text())
    assert {(i["entity"], i["system"]) for i in two["incidents"]} == {("3", "NVLINK"), ("5", "MEMORY")}
    # no report: what dcgmi prints without a host engine, or before the watches are set
    for name in ("dcgmi-health-not-enabled.txt", "dcgmi-health-no-hostengine.txt"):
        assert parsers.dcgm_health((HEALTH / name).read_text()) == {}


def test_a_switch_incident_and_an_unknown_system_keep_a_code():
    doc = ('{"body": {"Overall Health": {"value": "Failure"}, "Switch": {"children": {"0": {"value": "Failure", '
           '"children": {"Errors": {"children": {"Internal error": {"value": "Failure", "overflow": ["fatal"]}}}}}}}, '
           '"GPU": {"children": {"1": {"value": "Warning", "children": {"Errors": {"children": {"Fan system": '
           '{"value": "Warning", "overflow": ["slow"]}}}}}}}}, "header": ["Health Monitor Report"]}')
    got = parsers.dcgm_health(doc)
    assert sorted((i["group"], i["system"]) for i in got["incidents"]) == [("GPU", "OTHER"), ("Switch", "NVSWITCH")]


def _bundle(tmp_path, changes=None, watched=True, tools=None, args=()):
    kw = {"tools": tools} if tools else {}
    bin_dir = standins(tmp_path, DATA / "h100x8", changes, **kw)
    if watched:  # the watches set earlier (by an earlier run)
        (tmp_path / "captures" / ".dcgmi-health-set").write_text("")
    return run_bundle(tmp_path, bin_dir, watched_expect(), "quick", *args)


def watched_expect() -> dict:
    """An H100 node's expectations as its watch and slurmd's health program run them (no load, no diagnostic)."""
    return health_expectations(h100_expect())


def test_a_dcgm_failure_fails_the_checks_with_its_system_and_message(tmp_path):
    rc, rep = _bundle(tmp_path, {"dcgmi-health.json": (HEALTH / "dcgmi-health-memory-fail.json").read_text()})
    assert rc == 1 and rep["verdict"] == "fail"
    (failed,) = [f for f in rep["failures"] if f["check"].startswith("dcgm.health")]
    assert (failed["check"], failed["code"]) == ("dcgm.health:memory", "GF-DCGM-MEMORY") and failed["remedy"]
    assert failed["measured"] == "GPU 0: Detected 2 volatile double-bit ECC error(s) in GPU 0."
    # the PCIe warning warns, with its own code; it fails nothing
    warned = by_check(rep)["dcgm.health:pcie"]
    assert (warned["status"], warned["code"]) == ("warn", "GF-DCGM-PCIE")


def test_a_dcgm_warning_alone_passes_the_node(tmp_path):
    rc, rep = _bundle(tmp_path, {"dcgmi-health.json": (HEALTH / "dcgmi-health-pcie-warn.json").read_text()})
    assert rc == 0 and rep["verdict"] == "pass", rep["failures"]
    assert by_check(rep)["dcgm.health:pcie"]["status"] == "warn"


def test_a_healthy_report_passes(tmp_path):
    rc, rep = _bundle(tmp_path, {"dcgmi-health.json": (HEALTH / "dcgmi-health-healthy.json").read_text()})
    assert rc == 0 and by_check(rep)["dcgm.health"]["status"] == "pass"


def test_the_watches_are_set_once_when_the_host_engine_has_none(tmp_path):
    """A fresh (or restarted) host engine: `-c` says the watches are not enabled; the check sets every watch
    (`-s a`) and judges nothing that run (DCGM needs 60 s of samples); the next run reads them."""
    changes = {"dcgmi-health.json": (HEALTH / "dcgmi-health-memory-fail.json").read_text()}
    rc, rep = _bundle(tmp_path, changes, watched=False)
    log = tmp_path / "captures" / "dcgmi-health.log"
    assert by_check(rep)["dcgm.health"]["status"] == "skip" and "set now" in by_check(rep)["dcgm.health"]["detail"]
    assert rc == 0 and log.read_text() == "-s a\n"
    rc, rep = run_bundle(tmp_path, tmp_path / "bin", watched_expect())
    assert rc == 1 and by_check(rep)["dcgm.health:memory"]["code"] == "GF-DCGM-MEMORY"
    assert log.read_text() == "-s a\n"  # set once: not again while the host engine keeps them


@pytest.mark.parametrize("changes, why, args", [
    # dcgmi waiting on a host engine that does not answer (a budget: each tool gets a third of it, 3 s)
    ({"dcgmi.hang": ""}, "timed out", ("--budget", "9")),
    ({}, "unable to establish a connection", ()),  # no host engine
])
def test_dcgmi_failing_or_hanging_is_not_checked_never_a_failure(tmp_path, changes, why, args):
    rc, rep = _bundle(tmp_path, changes, args=args)
    got = by_check(rep)["dcgm.health"]
    assert got["status"] == "skip" and why in got["detail"], got
    assert rc == 0 and rep["failures"] == [], rep["failures"]  # no GF-HEALTH-TIMEOUT: dcgmi's silence is not the GPU's


def test_without_dcgm_the_watches_are_not_checked(tmp_path):
    rc, rep = _bundle(tmp_path, tools=("nvidia-smi", "all_reduce_perf", "nvbandwidth", "ibstat", "journalctl",
                                       "systemctl"))
    got = by_check(rep)["dcgm.health"]
    assert rc == 0 and got["status"] == "skip" and got["detail"] == "DCGM (dcgmi) is not installed"

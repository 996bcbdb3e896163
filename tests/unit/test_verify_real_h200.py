"""The node checks against a real GPU: tests/data/verify/h200x1-real/ holds what a lent H200 machine
printed (`nvidia-smi -q`, the check's query, its kernel log's NVRM lines; see the README there) and the
report gpufleet's own bundle gave on that machine. Replaying the captures through the stand-in tools
must give the report the real machine gave: the parsers read the real layouts, not only ours."""

import json

from tests.unit.test_verify import DATA, by_check, run_bundle
from tests.verify_standin import standins

REAL = DATA / "h200x1-real"
HAD = ("nvidia-smi", "journalctl")  # what that machine had of the tools the checks run (no DCGM, nvbandwidth)


def test_replayed_captures_give_the_verdicts_the_real_h200_gave(tmp_path):
    real = json.loads((REAL / "gpufleet-verify-quick.json").read_text())
    expect = json.loads((REAL / "expect.json").read_text())
    rc, replay = run_bundle(tmp_path, standins(tmp_path, REAL, tools=HAD), expect)
    # the machine ran driver 580 where the stack asked for 570: the one failure, on both
    assert [f["code"] for f in real["failures"]] == ["GF-DRIVER-VERSION"]
    assert rc == 1 and replay["failures"] == real["failures"]
    mine, theirs = by_check(replay), by_check(real)
    # a check added after the capture (DCGM's health watches, issue 51): that machine had no DCGM, so it is skipped
    added = mine.pop("dcgm.health")
    assert added["status"] == "skip", added
    assert set(mine) == set(theirs)
    for name, check in theirs.items():
        if name == "health.xid":  # the real machine had no journald and read dmesg; the replay reads journalctl
            assert (mine[name]["status"], mine[name]["measured"]) == (check["status"], check["measured"])
            continue
        assert {k: mine[name][k] for k in ("status", "measured", "expected", "code")} == \
               {k: check[k] for k in ("status", "measured", "expected", "code")}, name
    assert theirs["gpu.model"]["measured"] == "NVIDIA H200" and theirs["links.pcie_gen"]["measured"] == "Gen5"

"""The monitor host's cluster metrics (salt/monitoring/files/gpufleet-cluster-metrics, run as the node runs it:
python3 -I on the standard library): this month's spend and each budget, Slurm's nodes and jobs from sinfo and
squeue (stand-ins printing their documented formats, or the real sinfo with no controller), parsed back with
prometheus_client's parser; and monitoring.collector rendered by real Salt with the pillar gpufleet builds."""

import datetime as dt
import json
import os
import subprocess
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.monitoring import collector, names
from tests.saltrender import OSES, render

from conftest import ROOT, salt_call

PROGRAM = ROOT / "salt" / "monitoring" / "files" / "gpufleet-cluster-metrics"
# `sinfo -h -a -N -o '%N|%T|%E'` (sinfo(1), Slurm 22.05: -N one line per node and partition, %T the extended state with
# its flags, %E the reason or "none"); `squeue -h -a -r -o '%T|%r'` (squeue(1): %T the job state, %r why it waits)
SINFO = ("gpu-0|idle|none\ngpu-1|drained|gpufleet: GF-XID-FATAL health.xid\ngpu-1|drained|gpufleet: GF-XID-FATAL "
         "health.xid\ngpu-2|mixed|none\ngpu-3|down*|Not responding\n")
SQUEUE = "RUNNING|None\nPENDING|Resources\nPENDING|Resources\nPENDING|Priority\n"
SETTINGS = collector.settings("watched", usd_per_hour=40.5, since="2020-01-01T00:00:00Z",
                              budgets=[("team", 20000), ("lab", 5000.5)], slurm=True)["settings"]


def stand_in(bin_dir, name, out, rc=0):
    (bin_dir / name).write_text(f"#!/bin/sh\ncat <<'EOF'\n{out}EOF\nexit {rc}\n")
    (bin_dir / name).chmod(0o755)


def collect(tmp_path, settings, path) -> tuple[subprocess.CompletedProcess, dict]:
    (conf := tmp_path / "cluster-metrics.json").write_text(json.dumps(settings))
    (out := tmp_path / "node-exporter").mkdir(exist_ok=True)
    ran = subprocess.run([sys.executable, "-I", str(PROGRAM), "--settings", str(conf), "--out", str(out)],
                         capture_output=True, text=True, timeout=120,
                         env={"PATH": path, "SLURM_CONF": str(tmp_path / "no-slurm.conf")})
    got = {}
    for fam in text_string_to_metric_families((out / "gpufleet_cluster.prom").read_text()):
        want = names.catalogue()[fam.name]
        assert want in names.CLUSTER and fam.type == {"info": "gauge"}.get(want.type, want.type)
        for s in fam.samples:
            assert set(s.labels) <= set(want.labels) and s.timestamp is None
            got[(s.name, tuple(sorted(s.labels.items())))] = s.value
    assert (out / "gpufleet_cluster.prom").stat().st_mode & 0o777 == 0o644 and os.listdir(out) == ["gpufleet_cluster.prom"]
    return ran, got


def of(got, name) -> dict:
    return {k[1]: v for k, v in got.items() if k[0] == name}


def test_the_cluster_file_says_this_months_spend_each_budget_and_slurms_nodes_and_jobs(tmp_path):
    stand_in(tmp_path, "sinfo", SINFO)
    stand_in(tmp_path, "squeue", SQUEUE)
    before = dt.datetime.now(dt.timezone.utc)
    ran, got = collect(tmp_path, SETTINGS, f"{tmp_path}:/usr/bin:/bin")
    assert ran.returncode == 0, ran.stderr
    month = before.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    hours = (before - month).total_seconds() / 3600  # up since 2020: every hour of this month so far
    assert 0 <= got[("gpufleet_cluster_spend_usd", ())] - 40.5 * hours < 40.5 * 0.1
    assert of(got, "gpufleet_cluster_budget_usd") == {(("budget", "team"),): 20000, (("budget", "lab"),): 5000.5}
    assert of(got, "gpufleet_slurm_nodes") == {(("state", "idle"),): 1, (("state", "drained"),): 1,
                                               (("state", "mixed"),): 1, (("state", "down"),): 1}
    info = {dict(k)["slurm_node"]: (dict(k)["state"], dict(k)["reason"]) for k in of(got, "gpufleet_slurm_node_state_info")}
    assert info["gpu-1"] == ("drained", "gpufleet: GF-XID-FATAL health.xid") and info["gpu-0"] == ("idle", "")
    assert of(got, "gpufleet_slurm_jobs") == {(("state", "running"),): 1, (("state", "pending"),): 3}
    assert of(got, "gpufleet_slurm_jobs_pending") == {(("reason", "Resources"),): 2, (("reason", "Priority"),): 1}


def test_a_cluster_up_since_this_month_began_counts_its_own_hours(tmp_path):
    now = dt.datetime.now(dt.timezone.utc)
    since = max(now - dt.timedelta(hours=2), now.replace(day=1, hour=0, minute=0, second=0, microsecond=0))
    _, got = collect(tmp_path, {**SETTINGS, "slurm": False, "since": since.strftime("%Y-%m-%dT%H:%M:%SZ")}, "/usr/bin")
    hours = (now - since.replace(microsecond=0)).total_seconds() / 3600
    assert 0 <= got[("gpufleet_cluster_spend_usd", ())] - 40.5 * hours < 40.5 * 0.1
    assert not of(got, "gpufleet_slurm_nodes")  # not asked


def test_a_controller_that_does_not_answer_leaves_slurm_out_keeps_the_money_and_fails_the_run(tmp_path):
    """Slurm's real sinfo with no configuration to find (or none installed): no Slurm family, exit 1."""
    ran, got = collect(tmp_path, SETTINGS, "/usr/bin:/bin")
    assert ran.returncode == 1 and "sinfo" in ran.stderr
    assert ("gpufleet_cluster_spend_usd", ()) in got and not of(got, "gpufleet_slurm_nodes")


def test_an_unpriced_cluster_says_no_spend_rather_than_zero(tmp_path):
    _, got = collect(tmp_path, {**SETTINGS, "usd_per_hour": None, "slurm": False}, "/usr/bin")
    assert ("gpufleet_cluster_spend_usd", ()) not in got and of(got, "gpufleet_cluster_budget_usd")


@pytest.mark.parametrize("osfinger", ["Debian-12", "Rocky-9"])
def test_the_collector_state_installs_the_program_its_settings_and_a_timer(tmp_path, osfinger):
    pil = {"monitoring": {"textfile_dir": "/var/lib/prometheus/node-exporter",
                          "collector": collector.settings("watched", usd_per_hour=40.5, since="2026-11-01T00:00:00Z",
                                                          budgets=[("team", 20000)], slurm=True)},
           "gpufleet": {"live": True}}
    out = render(salt_call(), tmp_path / "salt", OSES[osfinger], pil, ["monitoring.collector"])
    assert not any("Rendering SLS" in str(v) for v in out.values()), out

    def arg(state_id, fun, key, shown=out):
        return next(a[key] for a in shown[state_id][fun] if isinstance(a, dict) and key in a)

    assert arg("monitoring-collector-program-file-managed", "file", "source").endswith("files/gpufleet-cluster-metrics")
    assert arg("monitoring-collector-settings-file-serialize", "file", "dataset") == SETTINGS | {
        "since": "2026-11-01T00:00:00Z", "budgets": [{"name": "team", "usd_per_month": 20000.0}]}
    unit = arg("monitoring-collector-service-file-managed", "file", "contents")
    assert ("ExecStart=/usr/local/sbin/gpufleet-cluster-metrics --settings /etc/gpufleet/cluster-metrics.json "
            "--out /var/lib/prometheus/node-exporter") in unit
    assert f"OnUnitActiveSec={collector.INTERVAL_S}\n" in arg("monitoring-collector-timer-file-managed", "file",
                                                              "contents")
    assert arg("monitoring-collector-timer-service-running", "service", "name") == "gpufleet-cluster-metrics.timer"
    clean = render(salt_call(), tmp_path / "clean", OSES[osfinger], pil, ["monitoring.collector_clean"])
    assert "/var/lib/prometheus/node-exporter/gpufleet_cluster.prom" in arg(
        "monitoring-collector-clean-files-file-absent", "file", "names", clean)
    # a run killed between open and rename leaves its temporary file (FILE.<pid>): the clean takes those too, and
    # only those (Salt 3008's file.tidied: `matches` are regular expressions on the file's name)
    import re

    tidied = "monitoring-collector-clean-leftovers-file-tidied"
    assert arg(tidied, "file", "name", clean) == "/var/lib/prometheus/node-exporter"
    (pattern,) = arg(tidied, "file", "matches", clean)
    assert [n for n in ("gpufleet_cluster.prom.4242", "gpufleet_cluster.prom", "gpufleet.prom.17", "other.prom.1")
            if re.fullmatch(pattern, n)] == ["gpufleet_cluster.prom.4242"]
    assert arg(tidied, "file", "rmdirs", clean) is False


def stand_in_with_flag(bin_dir, name, flag, without, extra):
    """A Slurm command that prints ``without``, and ``extra`` after it only when called with ``flag``."""
    (bin_dir / name).write_text(f"#!/bin/sh\ncat <<'EOF'\n{without}EOF\nfor a in \"$@\"; do [ \"$a\" = {flag} ] && "
                                f"cat <<'EOF'\n{extra}EOF\ndone\nexit 0\n")
    (bin_dir / name).chmod(0o755)


def test_job_arrays_count_each_pending_task_and_hidden_partitions_nodes_count(tmp_path):
    """squeue(1) -r/--array: "Without this option … pending job array elements will be combined on one line"; sinfo(1)
    -a/--all: without it, nodes only in hidden partitions are left out (Slurm 22.05 man pages, read 2026-11-27). The
    stand-ins print a 3-task pending array as one line unless -r, and a hidden partition's node only with -a."""
    stand_in_with_flag(tmp_path, "squeue", "-r", "RUNNING|None\nPENDING|Resources\n",
                       "PENDING|Resources\nPENDING|Resources\n")
    stand_in_with_flag(tmp_path, "sinfo", "-a", "gpu-0|idle|none\n", "gpu-9|drained|hidden one\n")
    ran, got = collect(tmp_path, SETTINGS, f"{tmp_path}:/usr/bin:/bin")
    assert ran.returncode == 0, ran.stderr
    assert of(got, "gpufleet_slurm_jobs_pending") == {(("reason", "Resources"),): 3}
    assert of(got, "gpufleet_slurm_nodes") == {(("state", "idle"),): 1, (("state", "drained"),): 1}


def test_bytes_slurm_passes_through_neither_kill_the_run_nor_split_a_record(tmp_path):
    """A drain reason set from a Latin-1 terminal (not UTF-8) and one holding U+2028, which str.splitlines() takes
    for a line break: the file is still written, one record per node, every label value on one line."""
    (tmp_path / "sinfo").write_bytes(b"#!/bin/sh\nprintf 'gpu-0|drained|caf\\351 fan\\ngpu-1|drained|a\\342\\200\\250line "
                                     b"sep\\ngpu-2|drained|tab\\tand\\rcr\\n'\n")
    (tmp_path / "sinfo").chmod(0o755)
    stand_in(tmp_path, "squeue", SQUEUE)
    ran, got = collect(tmp_path, SETTINGS, f"{tmp_path}:/usr/bin:/bin")
    assert ran.returncode == 0, ran.stderr
    info = {dict(k)["slurm_node"]: dict(k)["reason"] for k in of(got, "gpufleet_slurm_node_state_info")}
    assert set(info) == {"gpu-0", "gpu-1", "gpu-2"}
    assert info["gpu-0"] == "caf\ufffd fan" and info["gpu-1"] == "a line sep" and info["gpu-2"] == "tab and cr"
    assert of(got, "gpufleet_slurm_nodes") == {(("state", "drained"),): 3}

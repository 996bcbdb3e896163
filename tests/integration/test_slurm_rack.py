"""Slurm on the local test rack, end to end (issue 37): Debian's slurm-wlm and munge installed by
`gpufleet up` through the `slurm` formula on a controller and three compute hosts; `sinfo` lists
them idle, `srun -N3 hostname` runs on all three, a host whose node checks fail (the stand-in GPU
tools replaying an XID 79) is drained by the health check with the fault as its reason and resumed
once they pass, slurmdbd (with MariaDB on the controller) records the jobs for `sacct`, `status`
shows the scheduler's view, and `down --clean` leaves nothing behind but the accounting database."""

import time

import pytest

from tests.conftest import ROOT
from tests.integration import localrack
from tests.integration.localrack import gpufleet, install_standins, on_host, remove_standins

STACK = str(ROOT / "tests" / "integration" / "slurm-rack.yaml")
CLUSTER = "e2e-slurm"
COMPUTE = ("h2", "h3", "h4")  # the rack's hosts 2-4 (their UTS names)

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("rack")]


@pytest.fixture(scope="module")
def rack(tmp_path_factory):
    yield from localrack.rack_module(tmp_path_factory)


def _nodes() -> dict[str, str]:
    """Each node's state as the controller's `sinfo` says it."""
    out = on_host(1, "sinfo -h -N -o '%N %t'").stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


def _until(what, ok, timeout: float = 90):
    deadline = time.monotonic() + timeout
    while True:
        got = what()
        if ok(got) or time.monotonic() > deadline:
            return got
        time.sleep(2)


def test_slurm_comes_up_runs_jobs_drains_a_failing_node_and_goes(rack):
    rc, doc, err = gpufleet(rack, "up", "--no-verify", STACK, "--cluster", CLUSTER, "--yes", "--trust-new-hosts")
    assert rc == 0, [(h["host"], h.get("error")) for h in (doc or {}).get("hosts", [])] or err[-3000:]
    assert {h["state"] for h in doc["hosts"]} == {"configured"}, doc["hosts"]
    nodes = _until(_nodes, lambda n: n == {h: "idle" for h in COMPUTE})
    assert nodes == {h: "idle" for h in COMPUTE}, (nodes, on_host(1, "tail -20 /var/log/slurm/slurmctld.log").stdout)
    ran = on_host(1, "srun -N3 hostname", timeout=120)
    assert ran.returncode == 0 and sorted(ran.stdout.split()) == list(COMPUTE), ran.stdout + ran.stderr
    assert "GresTypes=gpu" in on_host(3, "cat /etc/slurm/slurm.conf").stdout
    # accounting: slurmdbd recorded the job (slurmctld sends it on a moment later)
    jobs = _until(lambda: on_host(1, "sacct -n -X -P -o JobName,State,NNodes").stdout,
                  lambda out: "hostname|COMPLETED|3" in out, timeout=60)
    assert "hostname|COMPLETED|3" in jobs, (jobs, on_host(1, "tail -20 /var/log/slurm/slurmdbd.log").stdout)

    rc, doc, err = gpufleet(rack, "status", CLUSTER, "--local")
    assert rc == 0, err[-2000:]
    (cl,) = doc["clusters"]
    assert cl["scheduler"]["nodes"] == {"idle": 3} and cl["scheduler"]["controller"] == "ctl-0", cl.get("scheduler")

    xid = (ROOT / "tests" / "data" / "verify" / "journal-xid79.txt").read_text()
    install_standins(3, {"journal.txt": xid})  # host 3 (h3) now shows a GPU with a fatal XID
    try:
        shown = _until(lambda: on_host(1, "scontrol show node h3 -o").stdout, lambda s: "Reason=gpufleet:" in s)
        assert "DRAIN" in shown and "Reason=gpufleet: GF-XID-FATAL health.xid" in shown, shown
        assert _nodes()["h2"] == "idle"
    finally:
        remove_standins(3)
    # its checks pass again (no GPU seen at configure time, none expected of it): resumed
    assert _until(_nodes, lambda n: n.get("h3") == "idle")["h3"] == "idle"

    rc, doc, err = gpufleet(rack, "down", STACK, "--cluster", CLUSTER, "--yes", "--clean")
    assert rc == 0, [(h["host"], h.get("error")) for h in (doc or {}).get("hosts", [])] or err[-2000:]
    for i in range(1, 5):
        left = on_host(i, "ss -ltnH '( sport = :6817 or sport = :6818 or sport = :6819 or sport = :3306 )' | wc -l; "
                          "ls /etc/slurm/slurm.conf /etc/slurm/slurmdbd.conf /etc/munge/munge.key "
                          "/usr/local/sbin/gpufleet-slurm-health 2>/dev/null; dpkg -l slurmd slurmctld slurmdbd "
                          "slurm-client slurm-wlm-basic-plugins munge libmunge2 mariadb-server 2>/dev/null | grep -c '^ii'")
        assert left.stdout.split() == ["0", "0"], (i, left.stdout, left.stderr)
    # the job history is data: MariaDB's purge keeps the accounting database
    assert on_host(1, "test -d /var/lib/mysql/slurm_acct_db").returncode == 0

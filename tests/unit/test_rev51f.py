"""Hostile review rev51f (session 5) of tonight's merges fix51e (PrologSlurmctld gpufleet-slurm-slots), fix51f (this
machine's lock of a cluster, leases.held_here) and fix51g (IB port counters). Each test fails on main at e8476cf and
says what the real thing does, with its source (read 2026-11-28). No product code changed here."""

from __future__ import annotations

import datetime as dt
import json
import threading

from tests.unit.test_verify import _ib_node

EXPECT = {"gpus": {"count": 8}, "ib": {"ports": 8, "rate_gbps": 400}}


def _flaps(bin_dir, sysroot, before: dict | None = None) -> tuple[dict, dict]:
    from gpufleet.nodecheck import checks
    from gpufleet.nodecheck.tools import Tools

    node = checks.Node({**EXPECT, **({"ib_counters": before} if before is not None else {})},
                       Tools((str(bin_dir),)), str(sysroot))
    return {r["check"]: r for r in checks.links(node)}, node.ib_counters


def test_a_saturated_link_downed_counter_never_passes_as_no_flap(tmp_path):
    """The IB port counters the kernel shows are the PMA PortCounters, which are narrow and SATURATE (they stop at their
    maximum, they do not wrap): Linux drivers/infiniband/core/sysfs.c declares them with their width,
    ``PORT_PMA_ATTR(symbol_error, 0, 16, 32)``, ``PORT_PMA_ATTR(link_error_recovery, 1, 8, 48)``,
    ``PORT_PMA_ATTR(link_downed, 2, 8, 56)`` (the same widths in every kernel version the code search holds), the
    IBA PortCounters' LinkDownedCounter being 8 bits wide and saturating. A port that flapped 255 times is at
    255 for good: nodecheck/checks.py _ib_counters sees no growth and passes it ("none") at every later check, and the
    watch resumes a node drained for GF-IB-FLAP. A counter at its maximum can say nothing: the worst port of a fleet is
    the one that looks cleanest."""
    bin_dir, sysroot = _ib_node(tmp_path, {"mlx5_2": 255})
    seen, _ = _flaps(bin_dir, sysroot, before={"mlx5_2:1": {"link_downed": 255, "link_error_recovery": 0,
                                                           "symbol_error": 0}})
    assert seen["links.ib_flaps"]["status"] != "pass", (
        f"a link_downed counter saturated at 255 (8 bits) passes as 'no flap': {seen['links.ib_flaps']}")


def test_a_port_that_flapped_is_not_passed_again_one_interval_later(tmp_path):
    """checks._ib_counters judges a flap on the growth since the last reading only, so the check right after the one
    that saw link_downed grow passes, and the watch resumes the node it drained (node_watch.slurm_drain(None):
    GF-IB-FLAP is not among KEPT). With health.interval 60 s the fault lives one minute: a cron `heal --once` every few
    minutes never sees it (no isolate, no replacement, no event), and a port that flaps every ten minutes is drained
    and given jobs again ten times an hour. azurehpc-health-checks judges flapping over a window of hours
    (customTests/azure_ib_link_flapping.nhc, its lost-interval argument), not reading to reading. Here: a flap, then
    nothing more a minute later."""
    bin_dir, sysroot = _ib_node(tmp_path, {"mlx5_2": 1})
    first, kept = _flaps(bin_dir, sysroot, before={"mlx5_2:1": {"link_downed": 0, "link_error_recovery": 0,
                                                               "symbol_error": 0}})
    assert first["links.ib_flaps"]["status"] == "fail"
    second, _ = _flaps(bin_dir, sysroot, before=kept)
    assert second["links.ib_flaps"]["status"] == "fail", (
        f"a port that flapped one interval ago passes again (the node is resumed): {second['links.ib_flaps']}")


def test_alone_a_down_never_runs_beside_a_heal_pass_that_holds_the_cluster(tmp_path):
    """fix51f: alone (no team store), heal and scale take this machine's lock of the cluster (fleet/team.py held ->
    leases.held_here), but `up`, `down`, `configure`, `destroy` take team.session, which alone takes nothing
    (fleet/team.py session: "No team: nothing."). A `heal --watch` pass that launches a replacement through the pool's
    own fleet request (nodes/cloud/heal.py _replace: a VM Pulumi does not own) runs beside `gpufleet down`: down's sweep
    of tagged resources may finish before the launch lands, and the VM outlives its cluster (money), or heal writes a
    registry record down has just removed. The lock heal takes is the lock every changing command must take."""
    from gpufleet import paths
    from gpufleet.fleet import team
    from gpufleet.state import leases

    with leases.held_here(paths.make_dir(paths.local_lock_dir()), "c1", "heal"):
        ran = []
        try:
            with team.session("c1", "down"):
                ran.append("down")
        except leases.LeaseHeld:
            pass
    assert ran == [], "alone, `down` ran while a heal pass held cluster c1 on this machine"


def test_an_aws_instance_stop_soon_is_acted_on_behind_an_active_reboot_weeks_away(monkeypatch):
    """fix51g: node_watch.aws_notice returns the FIRST active entry of events/maintenance/scheduled and takes() then
    judges that one alone. IMDS gives a JSON list (EC2 User Guide, "Scheduled events for your instances", Instance
    metadata; DescribeInstanceStatus's Events is a list per instance, API_InstanceStatusEvent): an instance can have a
    system-reboot scheduled weeks ahead and an instance-stop (or instance-retirement) due sooner. With the reboot first
    in the list the stop due in 20 minutes is read as "a reboot in 14 days": no drain, no 'interrupted', and the VM
    stops under its jobs. The soonest active event decides (and a VM-gone one over a comes-back one at a tie)."""
    from gpufleet.clouds import node_agent, node_watch

    now = dt.datetime.now(dt.timezone.utc)
    gmt = "%d %b %Y %H:%M:%S GMT"
    events = [{"Code": "system-reboot", "Description": "scheduled reboot", "EventId": "instance-event-0d59937288b749b32",
               "NotBefore": (now + dt.timedelta(days=14)).strftime(gmt),
               "NotAfter": (now + dt.timedelta(days=14, hours=2)).strftime(gmt), "State": "active"},
              {"Code": "instance-stop", "Description": "The instance is running on degraded hardware",
               "EventId": "instance-event-0a1b2c3d4e5f60718", "NotBefore": (now + dt.timedelta(minutes=20)).strftime(gmt),
               "State": "active"}]
    said = {"/latest/meta-data/events/maintenance/scheduled": json.dumps(events)}
    monkeypatch.setattr(node_agent, "aws_imds", lambda path, missing=False: said.get(path))
    notice, unread = node_watch.read_notice("aws")
    assert unread is None, unread
    assert node_watch.takes(notice), f"an instance-stop due in 20 minutes is not acted on: the watch read {notice}"
    assert node_watch.verdict(notice, {"passed": True, "level": "quick"}, [])[0] == "interrupted", notice


def test_a_maintenance_drain_the_notice_thread_made_is_never_undone_by_the_checks_older_word(tmp_path, monkeypatch):
    """fix51g: the notice's thread drains a node the cloud takes "at once, outside any lock" (node_watch.Run.poll), while
    the checks' thread says its own word (Run.checked -> Run.say -> say -> slurm_drain) from a snapshot of the notice it
    took BEFORE that drain (Run.say copies notice/unread/faults under ``mu`` and releases it). For a maintenance notice
    the checks' word is "ok, no notice": slurm_drain(None, KEPT[:1] + (RELEASE,)) keeps only GF-SPOT-NOTICE drains, so
    it finds the node drained for GF-MAINTENANCE-NOTICE and sends State=RESUME. slurmctld may start a job on it before
    the writer thread drains it again, an hour (MAINTENANCE_LEAD_S) or less before a reboot that kills it: the very
    thing the drain is for. Here the interleaving is forced through scontrol: the notice's drain lands between the
    checks' snapshot and their `scontrol show node`."""
    from gpufleet.clouds import node_agent, node_watch

    monkeypatch.setattr(node_agent, "STATE_DIR", str(tmp_path))
    monkeypatch.setattr(node_watch, "TEXTFILE_DIR", str(tmp_path / "no-node-exporter"))
    monkeypatch.setattr(node_watch, "NOTICE_POLL_S", 0.05)
    monkeypatch.setattr(node_watch, "slurm_name", lambda: "gpu-0")
    monkeypatch.setattr(node_agent, "node_id", lambda cfg: "i-0watch1")
    monkeypatch.setattr(node_agent, "put_status", lambda *a, **k: None)
    monkeypatch.setattr(node_agent, "STORES", {"aws": lambda cfg: None})
    at = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    notice = {"cloud": "aws", "kind": "system-reboot", "at": at}
    go, drained = threading.Event(), threading.Event()
    monkeypatch.setattr(node_watch, "read_notice", lambda cloud, memo=None: (notice if go.is_set() else None, None))
    slurm = {"State": "IDLE", "Reason": ""}
    updates = []
    main = threading.current_thread()

    def scontrol(*args):
        if args[0] == "show":
            if threading.current_thread() is main and not go.is_set():
                go.set()  # the cloud's notice arrives now, after the checks took their snapshot
                drained.wait(10)
            line = f"NodeName=gpu-0 State={slurm['State']}"
            return line + (f" Reason={slurm['Reason']} [slurm@2026-11-28T01:00:00]" if slurm["Reason"] else ""), None
        words = dict(a.split("=", 1) for a in args[1:])
        updates.append(words["State"] + (f" {words['Reason']}" if "Reason" in words else ""))
        slurm.update({"State": "IDLE+DRAIN", "Reason": words.get("Reason", "")} if words["State"] == "DRAIN"
                     else {"State": "IDLE", "Reason": ""})
        if words["State"] == "DRAIN":
            drained.set()
        return "", None

    monkeypatch.setattr(node_watch, "scontrol", scontrol)
    run = node_watch.Run({"cloud": "aws", "cluster": "w", "pool": "gpu"}, 60, {"level": "quick", "passed": True})
    poller = threading.Thread(target=run.poll, daemon=True)
    poller.start()
    try:
        run.checked([], False)
    finally:
        run.done.set()
        poller.join(5)
    assert updates and updates[0].startswith("DRAIN gpufleet: GF-MAINTENANCE-NOTICE"), updates
    assert "RESUME" not in updates, f"the checks' older word resumed the node the notice had drained: {updates}"

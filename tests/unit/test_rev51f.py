"""Hostile review rev51f (session 5) of tonight's merges fix51e (PrologSlurmctld gpufleet-slurm-slots), fix51f (this
machine's lock of a cluster, leases.held_here) and fix51g (IB port counters). Each test fails on main at e8476cf and
says what the real thing does, with its source (read 2026-11-28). No product code changed here."""

from __future__ import annotations

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

"""Hostile review rev51f (session 5) of tonight's merges fix51e (PrologSlurmctld gpufleet-slurm-slots), fix51f (this
machine's lock of a cluster, leases.held_here) and fix51g (IB port counters). Each test fails on main at e8476cf and
says what the real thing does, with its source (read 2026-11-28). No product code changed here."""

from __future__ import annotations


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

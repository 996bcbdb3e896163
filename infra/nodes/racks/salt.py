"""Configure a cluster's rack hosts with Salt: check them, apply the formulas, record each one.

Reaching the hosts and gathering their facts is ``clouds.baremetal.hosts``; this adds the
software check, the salt-ssh runs and the registry. Each host goes its own way: one whose
states fail is reported with its reason while the others complete. Each host's outcome is
written to the registry on its own (one transaction per host), so a rerun skips the hosts
already configured with the same pillar, formulas and state tree, and picks up the rest.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from gpufleet.clouds.baremetal import hosts
from gpufleet.clouds.baremetal.hosts import HostReport, HostTarget, Progress
from gpufleet.configure import pillar as pillarmod
from gpufleet.configure import saltrun, slurm, software
from gpufleet.errors import GpufleetError, InputError


def check_hosts(stack, reports: dict[str, HostReport]) -> None:
    """Driver/CUDA/OS, and with ``slurm:`` the Slurm each host's OS installs, against each reachable
    host's facts; any incompatibility stops everything (exit 2)."""
    sw = stack.software
    pools = {p.name: p for p in stack.pools}
    problems = []
    for r in reports.values():
        if r.facts is None:
            continue
        pool = pools[r.target.pool]
        f = r.facts
        gpu_names = {g["name"] for g in f.gpus}
        if pool.gpu and not f.gpus:
            r.warnings.append(f"the pool says {pool.gpus_per_node}x {pool.gpu}, the host shows no NVIDIA GPU: "
                              "GPU states are rehearsed (test=True), not installed")
        elif pool.gpus_per_node and len(f.gpus) != pool.gpus_per_node:
            r.warnings.append(f"the pool says {pool.gpus_per_node} GPU(s), the host has {len(f.gpus)} ({', '.join(gpu_names)})")
        states = pillarmod.formulas(stack, pool)
        if not any(s in states for s in ("nvidia_driver", "cuda", "nccl")):
            continue
        for prob in software.check(driver=sw.driver, cuda=sw.cuda, osfinger=f.osfinger, gpu=pool.gpu,
                                   open_modules=sw.open_kernel_modules):
            if prob.warning:
                r.warnings.append(prob.message)
            elif (prob.key, prob.message) not in {(k, m) for _, k, m, _ in problems}:
                problems.append((r.target.id, prob.key, prob.message, prob.hint))
        if ("lustre_client" in states and f.os_family == "Debian" and pool.on_rack
                and not (pool.salt.pillar.get("lustre_client") or {}).get("repo")):
            problems.append((r.target.id, "pools.salt.pillar.lustre_client.repo",
                             f"no public Lustre client repository for {f.osfinger}",
                             "Whamcloud publishes Ubuntu clients without an apt index: set lustre_client: {repo: "
                             "'<your mirror> <suite> main'} in the pool's salt pillar"))
    if stack.slurm:
        reached = [(r.target.id, pools[r.target.pool].role, r.facts.osfinger) for r in reports.values() if r.facts]
        v1 = {r.target.id for r in reports.values() if r.facts and r.facts.cgroup == "v1"}  # as the hosts mount it
        problems += [(host, prob.key, prob.message, prob.hint)
                     for host, prob in software.slurm_check(reached, cgroups=stack.slurm.cgroups, cgroup_v1=v1)]
    if problems:
        lines = [f"{host}: {key}: {msg}" + (f" ({hint})" if hint else "") for host, key, msg, hint in problems]
        raise InputError("the stack's software does not fit these hosts (nothing was changed):\n  " + "\n  ".join(lines),
                         "change the stack's software block, or the hosts' OS")


def configure(stack, cluster: str, targets: list[HostTarget], *, registry=None, trust_new: bool = False,
              force: bool = False, workers: int = 32, progress: Progress | None = None,
              runner_factory=None, gathered: dict[str, HostReport] | None = None,
              health: tuple[dict[str, dict], bytes] | None = None, collector: dict | None = None) -> list[HostReport]:
    """Gather facts (unless ``gathered`` and checked already), check, apply the formulas (GPU ones
    rehearsed on GPU-less hosts), record each host. ``health``: each pool's verify expectations and
    the checks' bundle, for the Slurm health check of a stack with ``slurm:``."""
    if gathered is None:
        reports = hosts.gather(targets, trust_new=trust_new, workers=workers, progress=progress)
        check_hosts(stack, reports)
    else:
        reports = gathered
    pools = {p.name: p for p in stack.pools}
    tree = saltrun.tree_hash()
    known = registry.hosts(cluster) if registry else {}
    shared = registry.shared if registry else None  # the team's store, in team mode: the cluster's munge key
    scheduler = _slurm_pillars(stack, cluster, reports, pools, health, shared) if stack.slurm else {}
    plan: dict[str, tuple[list[str], list[str], dict]] = {}
    for r in reports.values():
        if r.facts is None:
            continue
        t, pool = r.target, pools[r.target.pool]
        has_gpu = bool(r.facts.gpus)
        sm_host = pool.subnet_manager == "host" and t.idx == 0
        pil = pillarmod.build(stack, pool, cluster=cluster, gpu=pool.gpu, has_gpu=has_gpu,
                              nvswitches=r.facts.nvswitches, subnet_manager_host=sm_host, index=t.idx,
                              collector=collector)
        if t.id in scheduler:
            pil["slurm"] = pillarmod.merge(scheduler[t.id], pil.get("slurm") or {})
        states = pil["gpufleet"]["states"]
        real, rehearse = pillarmod.split_for_host(states, has_gpu)
        r.digest = pillarmod.digest(pil, real + rehearse, tree, r.facts.identity)
        prev = known.get((t.pool, t.idx))
        if not force and prev and prev["state"] == "configured" and prev["digest"] == r.digest:
            r.state = "skipped"
            continue
        plan[t.id] = (real, rehearse, pil)
    if plan:
        roster = [saltrun.RosterHost.of(reports[i].target, p) for i, (_, _, p) in plan.items()]
        runner = (runner_factory or saltrun.SaltSsh)(cluster, roster)
        groups: dict[tuple[tuple[str, ...], bool], list[str]] = {}
        for hid, (real, rehearse, _) in plan.items():
            groups.setdefault((tuple(real), False), []).append(hid)
            if rehearse:
                groups.setdefault((tuple(rehearse), True), []).append(hid)
        runs_total = sum(len(g) for g in groups.values())
        runs_done = [0]

        def host_done(run) -> None:
            runs_done[0] += 1
            if progress:
                what = "rehearsed" if run.test else ("failed" if not run.ok else f"{len(run.changed)} changed")
                progress("salt", runs_done[0], runs_total, f"{run.host} {what}")

        if progress:
            progress("salt", 0, runs_total, f"applying states on {len(plan)} host(s)")
        # salt-ssh runs a group's hosts in parallel; groups of one phase hold different hosts and run at
        # once, the rehearsal (test=True) phase after the real one: two salt-ssh runs on one host at the
        # same time would unpack Salt's thin bundle over each other
        for test_phase in (False, True):
            phase = {k: v for k, v in groups.items() if k[1] == test_phase}
            if not phase:
                continue
            with ThreadPoolExecutor(max_workers=len(phase)) as ex:
                futures = [ex.submit(runner.apply, ids, list(states), test=test, on_host=host_done)
                           for (states, test), ids in phase.items()]
                for fut in futures:
                    for hid, run in fut.result().items():
                        reports[hid].runs.append(run)
        for hid in plan:
            r = reports[hid]
            bad = [x for x in r.runs if not x.ok]
            r.state = "failed" if bad else "configured"
            if bad:
                r.error = "; ".join(x.problem for x in bad)
                r.hint = "fix the failed states (or the host) shown above"
    if registry:  # every host's outcome in one write
        registry.set_hosts(cluster, {
            (r.target.pool, r.target.idx): {"address": r.target.address, "state": r.state, "digest": r.digest,
                                            "facts": r.facts.to_dict() if r.facts else None,
                                            "detail": r.error or json.dumps({"changed": r.changed,
                                                                             "rehearsed": r.rehearsed})}
            for r in reports.values() if r.state != "skipped"})
    return [reports[t.id] for t in targets]


def _slurm_pillars(stack, cluster: str, reports: dict[str, HostReport], pools: dict, health,
                   shared=None) -> dict[str, dict]:
    """Each reachable host's ``slurm`` pillar: one configuration rendered from all of them."""
    expectations, bundle = health or ({}, b"")
    reached = [r for r in reports.values() if r.facts is not None]
    as_node = {r.target.id: slurm.node(r.facts.hostname.split(".")[0] or r.target.id, r.target.address,
                                       pools[r.target.pool], cpus=r.facts.cpus, mem_gib=r.facts.mem_gib,
                                       gpus=len(r.facts.gpus), gpu=pools[r.target.pool].gpu,
                                       topology=r.facts.cpu_topology) for r in reached}
    ctl = [as_node[r.target.id] for r in reached if pools[r.target.pool].role == "controller"]
    if not ctl:
        raise GpufleetError("the Slurm controller's host cannot be reached: no slurm.conf can be written",
                            "bring the controller pool's host back, then run the same command again")
    compute = [as_node[r.target.id] for r in reached if pools[r.target.pool].role == "compute"]
    hosts_of = {r.target.id: (pools[r.target.pool].role, expectations.get(r.target.pool), len(r.facts.gpus))
                for r in reached}
    ctl_os = next(r.facts.osfinger for r in reached if pools[r.target.pool].role == "controller")
    return slurm.pillars(stack, cluster, ctl[0], compute, hosts_of, bundle=bundle,
                         key=slurm.munge_key(cluster, shared), controller_os=ctl_os)


def drain(cluster: str, targets: list[HostTarget], *, clean_states: dict[str, list[str]] | None = None,
          trust_new: bool = False, workers: int = 32, progress: Progress | None = None,
          runner_factory=None, pillars: dict[str, dict] | None = None) -> list[HostReport]:
    """Take hosts out of service (``hosts.mark_drained``); with ``clean_states`` (host id ->
    formulas) each formula's ``clean`` state runs afterwards, undoing what gpufleet installed.
    Nothing here erases data or reinstalls a machine."""
    reports = hosts.mark_drained(cluster, targets, trust_new=trust_new, workers=workers, progress=progress)
    if clean_states:
        ok = [r for r in reports if r.ok and clean_states.get(r.target.id)]
        if ok:
            roster = [saltrun.RosterHost.of(r.target, (pillars or {}).get(r.target.id, {})) for r in ok]
            runner = (runner_factory or saltrun.SaltSsh)(cluster, roster)
            groups: dict[tuple[str, ...], list[str]] = {}
            for r in ok:
                groups.setdefault(tuple(clean_states[r.target.id]), []).append(r.target.id)
            by_id = {r.target.id: r for r in ok}
            for states, ids in groups.items():
                for hid, run in runner.clean(ids, list(states)).items():
                    by_id[hid].runs.append(run)
                    if not run.ok:
                        by_id[hid].state = "failed"
                        by_id[hid].error = run.problem
    return reports

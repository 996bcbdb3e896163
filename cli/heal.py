"""`gpufleet heal [STACK|CLUSTER] [--once|--watch] [--dry-run]`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from gpufleet.cli import options, output
from gpufleet.cli.output import STATE
from gpufleet.errors import EXIT_FAILED, GpufleetError, InputError

HELP = ("Repair the nodes a health watch found faulty, under each pool's `health` rules: drain first; replace "
        "(through the pool's own request) only a drained node whose jobs ended, at most max_replacements per pool "
        "per hour, never on reserved capacity unless replace_reserved; otherwise isolate (left drained and named in "
        "`status`). A node whose health cannot be read is never touched. Every action is an event in `gpufleet log`. "
        "Cron-safe: one pass (--once, the default) under the cluster's lease in team mode, alone under this machine's "
        "lock of it. Exit 0 when the pass did "
        "its job, 1 when an action failed or no node's health could be read, 4 when another command holds the "
        "cluster.")


def _targets(target: str | None, reg, cat) -> list[tuple[object, str]]:
    """(stack, cluster) to heal: the one named, or every recorded cluster whose stack file is this machine's."""
    from gpufleet import stacks
    from gpufleet.state.recorded import recorded, stack_file_for

    if target is not None:
        if Path(target).exists():
            st = stacks.load(target, cat)
            return [(st, st.name)]
        rec = recorded(reg, target)
        return [(stacks.load(stack_file_for(rec, f"gpufleet heal STACK (the stack file of {target})"), cat), target)]
    out = []
    for rec in reg.list():
        if rec.own_stack_file is None:
            output.warn(f"{rec.name}: not healed, its stack file is not this machine's (pass it: gpufleet heal STACK)")
            continue
        out.append((stacks.load(rec.own_stack_file, cat), rec.name))
    return out


@output.handle_errors
def heal(
    target: Annotated[Optional[str], typer.Argument(help="Stack file or cluster name (default: every cluster "
                                                    "recorded with a stack file here).", metavar="[STACK|CLUSTER]")] = None,
    once: Annotated[bool, typer.Option("--once", help="One pass, then exit (the default; for cron).")] = False,
    watch: Annotated[bool, typer.Option("--watch", help="A pass every pool's shortest health.interval until "
                                        "stopped (Ctrl-C); each pass takes and gives back the lease.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would be done; do nothing, write nothing.")] = False,
    trust_new_hosts: options.TrustNewHosts = False,
):
    from gpufleet import catalog
    from gpufleet.fleet import team
    from gpufleet.fleet.heal import heal as one_pass

    if once and watch:
        raise InputError("--once and --watch contradict each other", "drop one of them")
    cat = catalog.load(STATE.config)
    reg = team.registry()
    chosen = _targets(target, reg, cat)
    every = min((p.health.interval for st, _ in chosen for p in st.pools), default=60)
    while True:
        results, failed = [], []
        for st, name in chosen:
            try:
                results.append(one_pass(st, cat, cluster=name, registry=reg, dry_run=dry_run,
                                        trust_new_hosts=trust_new_hosts))
            except GpufleetError as e:
                if target is not None and not watch:
                    raise
                failed.append(e)  # one cluster held or unreadable: the others are healed all the same
                output.warn(f"{name}: this pass did nothing: {e.message}")
        _show(results, dry_run)
        if not watch:
            break
        time.sleep(every)
    if failed:
        raise typer.Exit(failed[0].exit_code)
    if any(r.trouble or (r.nodes and len(r.unknown) == len(r.nodes)) for r in results):
        raise typer.Exit(EXIT_FAILED)


def _show(results: list, dry_run: bool) -> None:
    if STATE.json:
        output.emit_json({"dry_run": dry_run, "clusters": [r.to_dict() for r in results]})
        return
    from gpufleet.state.shared import shown

    for r in results:
        if r.left:
            output.warn(f"{r.cluster}: {r.left}")
            continue
        done = {x.node: x for x in r.repaired}
        rows = [[d.node, h.state, d.code or "", d.action + ("" if d.node not in done else
                                                            " (done)" if done[d.node].done else " (not done)"),
                 shown(done[d.node].detail if d.node in done else d.why, 300)]
                for h, d in zip(r.nodes, r.decisions) if d.action != "none"]
        title = f"Heal {r.cluster}" + (" (dry run: nothing done)" if dry_run else "")
        if rows:
            output.table(title, ["node", "health", "fault", "action", "why"], rows, wraps=("why",))
        for x in r.scaled:  # an elastic pool sized from Slurm's view (fleet.scale.Scaled)
            for line in [*x.would, *(f"kept {k}" for k in x.kept)]:
                output.console().print(f"{r.cluster}/{x.pool}: {'would ' if dry_run else ''}{line}")
            if x.refused or x.failed:
                output.warn(f"{r.cluster}/{x.pool}: {x.refused or x.failed}")
        if r.configure:
            output.warn(f"{r.cluster}: a node added to an elastic pool joins Slurm once slurm.conf names its slot: "
                        f"run `{r.configure}`")
        healthy = sum(1 for d in r.decisions if d.action == "none")
        output.console().print(f"{r.cluster}: {healthy} of {len(r.nodes)} node(s) need nothing; "
                               f"{len(r.unknown)} unknown; replacements so far: {sum(r.replacements.values())}.")

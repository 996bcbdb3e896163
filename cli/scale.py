"""`gpufleet scale CLUSTER POOL N [--dry-run] [--json]`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpufleet.cli import output
from gpufleet.cli.output import STATE
from gpufleet.errors import EXIT_FAILED

HELP = ("Make an elastic pool (nodes: {min, max}) N nodes big: more nodes through the pool's own request (recorded, "
        "so the next `up` keeps them), fewer by removing nodes that may go (broken first; with Slurm only nodes Slurm "
        "shows drained with no job), never by making the pool anew. Under the cluster's lease in team mode; every "
        "action is an event in `gpufleet log`. Exit 0 when the pool is N nodes big, 1 when the cloud refused or nodes "
        "could not go, 2 when N is outside the pool's bounds.")


@output.handle_errors
def scale(
    target: Annotated[str, typer.Argument(help="Cluster name or its stack file.", metavar="CLUSTER")],
    pool: Annotated[str, typer.Argument(help="The elastic pool.", metavar="POOL")],
    count: Annotated[int, typer.Argument(help="How many nodes it should have, within its nodes: {min, max}.",
                                         metavar="N")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would be done; do nothing, write nothing.")] = False,
):
    from gpufleet import catalog, stacks
    from gpufleet.fleet import team
    from gpufleet.fleet.scale import scale as resize
    from gpufleet.state.recorded import recorded, stack_file_for

    cat = catalog.load(STATE.config)
    reg = team.registry()
    if Path(target).exists():
        st = stacks.load(target, cat)
        name = st.name
    else:
        name = target
        st = stacks.load(stack_file_for(recorded(reg, target), f"gpufleet scale STACK (the stack file of {target})"),
                         cat)
    out = resize(st, cat, pool=pool, count=count, cluster=name, registry=reg, dry_run=dry_run)
    if STATE.json:
        output.emit_json(out.to_dict())
    else:
        c = output.console()
        head = f"{out.cluster}/{out.pool}: {out.before} node(s), {out.wanted} wanted" + (
            " (dry run: nothing done)" if dry_run else f", {out.after} now")
        c.print(head)
        for line in out.would:
            c.print(f"  {'would ' if dry_run else ''}{line}")
        for line in out.kept:
            c.print(f"  kept {line}")
        if out.refused:
            output.warn(f"the cloud refused: {out.refused}")
    if out.short:
        raise typer.Exit(EXIT_FAILED)

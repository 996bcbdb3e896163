"""`gpufleet capacity find`: the reservations a stack's pools could use and the capacity on sale."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from gpufleet.cli import options, output
from gpufleet.cli.output import STATE
from gpufleet.errors import EXIT_FAILED

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                  help="Reserved GPU capacity: what the account holds and what the clouds sell, for a stack's pools.")

FIND_HELP = ("For each cloud pool of STACK, at every place it may land (its own and its failover places, as `plan` "
             "lists them): the capacity the account holds there (AWS On-Demand Capacity Reservations and Capacity "
             "Blocks, GCP reservations, Azure capacity reservation groups), with the `reservations:` entry that makes "
             "`up` try it first, and the AWS Capacity Block offerings for the pool's nodes over --hours (with the "
             "command that buys one: gpufleet buys nothing). GCP and Azure have no read call for offerings. Exit 1 "
             "when a place could not be asked (no credentials, refused, unreachable: each named).")


@app.command("find", help=FIND_HELP)
@output.handle_errors
def find(
    stack: options.StackFile,
    pool: options.OnePool = None,
    hours: Annotated[int, typer.Option("--hours", help="How long a Capacity Block offering should run: whole days "
                                       "up to 14, then whole weeks up to 182 days.")] = 24,
    start: Annotated[Optional[str], typer.Option("--start", help="Earliest start of an offering, ISO 8601 (default: "
                                                 "now); offerings starting within two weeks of it are listed.")] = None,
):
    import datetime as dt

    from gpufleet import catalog, stacks
    from gpufleet.errors import GpufleetError, InputError
    from gpufleet.fleet import capacity

    if start is not None:
        try:
            dt.datetime.fromisoformat(start)
        except ValueError:
            raise InputError(f"--start {start!r} is not a date", "e.g. 2026-12-01 or 2026-12-01T08:00:00Z") from None
    cat = catalog.load(STATE.config)
    with output.steps("Asking the clouds for reserved capacity"):
        found = capacity.find(stacks.load(stack, cat), cat, pool=pool, hours=hours, start=start)
    unread = {f"{f.pool}: {where}": why for f in found for where, why in f.unread.items()}
    if STATE.json:
        output.emit_json({"hours": hours, "start": start, "pools": [f.to_dict() for f in found]})
    else:
        for f in found:
            _render(f, hours)
        for where, why in unread.items():
            output.warn(f"{where} could not be asked: {why}")
    if unread:
        if STATE.json:
            raise typer.Exit(EXIT_FAILED)
        if all(f"{a['provider']} {a['region']}" in f.unread for f in found for a in f.asked):  # none was asked
            raise GpufleetError("no place could be asked: nothing is known about the capacity there",
                                "each is named above with why; `gpufleet check` shows each cloud's credentials")
        raise GpufleetError(f"{len(unread)} place(s) could not be asked: the list is incomplete",
                            "each is named above with why; `gpufleet check` shows each cloud's credentials")


def _render(f, hours: int) -> None:
    c = output.console()
    if not f.capacity:
        read = [a for a in f.asked if f"{a['provider']} {a['region']}" not in f.unread]
        said = "no place could be asked" if not read else "nothing held or offered at " + ", ".join(
            f"{a['provider']} {a['region']} {a['instance_type']}" for a in read)
        c.print(f"Pool [bold]{f.pool}[/bold] ({f.nodes} nodes): {said}")
        return
    rows = []
    for x in f.capacity:
        window = f"{x.starts_at or '-'} to {x.ends_at or '-'}" if (x.starts_at or x.ends_at) else "open-ended"
        use = f"reservations: [{{id: {x.id}" + (f", zone: {x.zone}" if x.zone and "," not in x.zone else "") + "}]" \
            if x.held else x.buy
        rows.append([x.provider, x.kind, x.zone or x.region, x.instance_type, x.instances,
                     "yes" if f.fits(x) else "no", window,
                     output.money(x.upfront_usd) if x.upfront_usd is not None else "-", use])
    output.table(f"Pool {f.pool} ({f.nodes} nodes): held capacity, then offerings ({hours} h)",
                 ["provider", "kind", "zone", "instance", "free", "fits", "window", "up front", "use it with"], rows,
                 justify={"free": "right", "up front": "right"}, optional=("window", "provider", "fits", "up front"),
                 wraps=("use it with", "window"))
    for note in dict.fromkeys(x.note for x in f.capacity if x.note):
        c.print(f"[dim]{note}[/dim]")

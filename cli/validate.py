"""`gpufleet validate STACK...`: check stack files without touching any cloud."""

from __future__ import annotations

from typing import Annotated

import typer

from gpufleet.cli import output
from gpufleet.cli.output import STATE
from gpufleet.errors import EXIT_BAD_INPUT

HELP = "Validate stack files: shape, names, regions and capabilities against the catalog. Exit code 2 on bad input."


@output.handle_errors
def validate(
    stacks: Annotated[list[str], typer.Argument(help="Stack files (YAML).", metavar="STACK...")],
):
    from gpufleet import catalog
    from gpufleet.engine.plan import pool_costs
    from gpufleet.engine.program import layout
    from gpufleet.errors import InputError
    from gpufleet.stacks import load

    cat = catalog.load(STATE.config)
    results, failed = [], []
    for path in stacks:
        try:
            st = load(path, cat)
            costs = pool_costs(layout(st, cat), st, cat)  # layout: e.g. network.cidr too small for the subnets
        except InputError as e:  # SpecError(s) included
            failed.append(e)
            results.append({"stack": path, "ok": False, **e.to_dict()})
            continue
        pools = [{"pool": c.pool, "provider": c.provider, "where": c.where, "machine": c.machine, "nodes": c.nodes,
                  "gpus": c.gpus, "usd_per_hour": c.usd_per_hour, "price_note": c.note or None} for c in costs]
        results.append({"stack": path, "ok": True, "name": st.name, "owner": st.owner, "ttl": st.ttl, "pools": pools})
    if STATE.json:
        output.emit_json(results)
    else:
        for r, p in zip(results, stacks):
            if r["ok"]:
                priced = [x for x in r["pools"] if x["usd_per_hour"] is not None]
                unknown = [x for x in r["pools"] if x["usd_per_hour"] is None]
                cost = (f"{output.money(sum(x['usd_per_hour'] for x in priced))}/h" if priced else "no price")
                if priced and unknown:
                    cost += f" for {len(priced)} of {len(r['pools'])} pool(s)"
                output.console().print(f"[green]ok[/green] {p}: stack {r['name']}, {len(r['pools'])} pool(s), "
                                       f"{sum(x['nodes'] for x in r['pools'])} node(s), "
                                       f"{sum(x['gpus'] for x in r['pools'])} GPU(s), {cost}")
                for x in unknown:  # a pool without a price is never shown as costing $0.00
                    output.warn(f"{p}: pool {x['pool']} has no price: {x['price_note']}")
        for e in failed:
            output.error(e)
    if failed:
        raise typer.Exit(EXIT_BAD_INPUT)

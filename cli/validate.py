"""`gpufleet validate STACK...`: check stack files without touching any cloud."""

from __future__ import annotations

from typing import Annotated

import typer

from gpufleet.cli import output
from gpufleet.cli.output import STATE

HELP = "Validate stack files: shape, names, regions and capabilities against the catalog. Exit code 2 on bad input."


@output.handle_errors
def validate(
    stacks: Annotated[list[str], typer.Argument(help="Stack files (YAML).", metavar="STACK...")],
):
    from gpufleet import catalog, spec
    from gpufleet.errors import SpecError, SpecErrors

    cat = catalog.load(STATE.config)
    offers = {o.key: o for o in cat.offers()}
    results, failed = [], []
    for path in stacks:
        try:
            st = spec.load(path, cat)
        except (SpecError, SpecErrors) as e:
            failed.append(e)
            results.append({"stack": path, "ok": False, **e.to_dict()})
            continue
        pools = []
        for p in st.pools:
            if p.provider == "baremetal":
                price = None
                if p.site_costs:
                    from gpufleet.catalog.onprem import site_from_pool

                    price = site_from_pool(p, cat, path).usd_per_node_hour() * p.nodes
                pools.append({"pool": p.name, "provider": p.provider, "where": p.site, "machine": f"{p.gpus_per_node}x {cat.gpu(p.gpu).name}",
                              "nodes": p.nodes, "gpus": p.nodes * p.gpus_per_node, "usd_per_hour": price})
            else:
                it = spec.resolve_instance(p, cat)
                market = "spot" if p.spot else "ondemand"
                offer = offers.get(catalog.offer_key(p.provider, p.region, it.name, market))
                pools.append({"pool": p.name, "provider": p.provider, "where": p.region, "machine": it.name,
                              "nodes": p.nodes, "gpus": p.nodes * it.gpu_count,
                              "usd_per_hour": offer.usd_per_hour * p.nodes if offer else None})
        results.append({"stack": path, "ok": True, "name": st.name, "owner": st.owner, "ttl": st.ttl, "pools": pools})
    if STATE.json:
        output.emit_json(results)
    else:
        for r, p in zip(results, stacks):
            if r["ok"]:
                total = [x["usd_per_hour"] for x in r["pools"]]
                unknown = [x["pool"] for x in r["pools"] if x["usd_per_hour"] is None]
                known = sum(t for t in total if t is not None)
                cost = output.money(known) + "/h" + (f" (+ pools without a price: {', '.join(unknown)})" if unknown else "")
                output.console().print(f"[green]ok[/green] {p}: stack {r['name']}, {len(r['pools'])} pool(s), "
                                       f"{sum(x['nodes'] for x in r['pools'])} node(s), {sum(x['gpus'] for x in r['pools'])} GPU(s), {cost}")
        for e in failed:
            output.error(e)
    if failed:
        raise typer.Exit(2)

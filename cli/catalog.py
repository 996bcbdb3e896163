"""`gpufleet catalog gpus|instances|regions|workloads|show NAME|refresh|sources`."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from gpufleet.cli import options, output
from gpufleet.cli.output import STATE
from gpufleet.errors import EXIT_FAILED

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None)


def _age_line(cat) -> str:
    return f"prices as of {min(p.as_of for p in cat.prices)} ({cat.age_days()} days old); every row has its source (--json)"


@app.command("gpus", help="GPU specs: peak dense TFLOPS per precision, memory, bandwidth, NVLink, TDP.")
@output.handle_errors
def gpus():
    from gpufleet import catalog

    cat = catalog.load(STATE.config)
    rows = sorted(cat.gpus.values(), key=lambda g: g.tflops.get("fp32", 0))
    if STATE.json:
        output.emit_json({"catalog_age_days": cat.age_days(), "gpus": [g.__dict__ for g in rows]})
        return
    f = lambda v: "-" if v is None else f"{v:g}"  # noqa: E731
    output.table("GPUs", ["gpu", "arch", "mem GB", "GB/s", "FP32", "TF32", "FP16", "BF16", "FP8", "NVLink GB/s", "TDP W",
                          "as of"],
                 [[g.name, g.arch, f(g.memory_gb), f(g.memory_bw_gbs), f(g.tflops.get("fp32")), f(g.tflops.get("tf32")),
                   f(g.tflops.get("fp16")), f(g.tflops.get("bf16")), f(g.tflops.get("fp8")), f(g.nvlink_gbs), f(g.tdp_w), g.as_of]
                  for g in rows], caption="TFLOPS are dense peak (no sparsity). " + _age_line(cat),
                 optional=("NVLink GB/s", "TF32", "arch", "TDP W", "as of"))


@app.command("instances", help="Instance types with GPUs and fabric, one row each: the cheapest on-demand price and "
                                "its region, the cheapest spot price, in how many regions it is sold. `catalog show "
                                "NAME`, --region or --json give every region's prices.")
@output.handle_errors
def instances(
    provider: Annotated[Optional[str], typer.Option("--provider", "-p", help="aws, gcp, azure or baremetal.")] = None,
    gpu: Annotated[Optional[str], typer.Option(help="Only this GPU type.")] = None,
    region: Annotated[Optional[str], typer.Option("--region", "-r", help="Only this region.")] = None,
):
    from gpufleet import catalog
    from gpufleet.errors import NotFound
    from gpufleet.providers import PROVIDERS

    cat = catalog.load(STATE.config)
    if provider and provider not in PROVIDERS:
        raise NotFound("provider", provider, PROVIDERS)
    g = cat.gpu(gpu).name if gpu else None
    offers = [o for o in cat.offers() if (not provider or o.provider == provider) and (not g or o.gpu.name == g)
              and (not region or o.region == region)]
    offers.sort(key=lambda o: (o.provider, o.instance.gpu, o.instance.gpu_count, o.instance.name, o.region, o.market))
    if STATE.json:
        output.emit_json({"catalog_age_days": cat.age_days(), "offers": [{
            "provider": o.provider, "region": o.region, "instance": o.instance.__dict__, "market": o.market,
            "usd_per_hour": o.usd_per_hour, "discount": o.discount,
            "price_parts": [p.__dict__ for p in o.parts]} for o in offers]})
        return
    # one row per instance type (a type is sold in up to 30 regions, on demand and spot: a row each
    # would bury the types under their prices)
    by_type: dict[tuple[str, str], list] = {}
    for o in offers:
        by_type.setdefault((o.provider, o.instance.name), []).append(o)
    rows = []
    for mine in by_type.values():
        it = mine[0].instance
        listed = min((o for o in mine if o.market != "spot"), key=lambda o: o.usd_per_hour, default=None)
        spot = min((o for o in mine if o.market == "spot"), key=lambda o: o.usd_per_hour, default=None)
        shown = listed or spot
        rows.append([shown.provider, it.name, f"{it.gpu_count}x {it.gpu}", it.vcpus, f"{it.memory_gib:g}",
                     f"{it.network_gbps:g}", it.fabric + (f" x{it.efa_interfaces}" if it.efa_interfaces else ""),
                     f"{it.local_nvme_gb:g}", output.money(listed.usd_per_hour) if listed else "-", shown.region,
                     output.money(spot.usd_per_hour) if spot else "-", len({o.region for o in mine}),
                     " + ".join(f"{p.what} {p.usd_per_hour:.4g}" for p in shown.parts) if len(shown.parts) > 1 else "",
                     shown.as_of])
    output.table("Instance types", ["provider", "instance", "gpus", "vCPU", "mem GiB", "net Gbps", "fabric", "NVMe GB",
                                    "$/h", "region", "spot $/h", "regions", "price made of", "as of"], rows,
                 caption="$/h, region: the cheapest on-demand price and where (sold on spot only: the cheapest "
                         "spot's); spot $/h: the cheapest spot price anywhere; regions: how many sell it (`catalog "
                         "show NAME` lists them). " + _age_line(cat)
                         + (f"; discounts applied: {cat.discounts}" if cat.discounts else ""),
                 justify={c: "right" for c in ("vCPU", "mem GiB", "net Gbps", "NVMe GB", "$/h", "spot $/h", "regions")},
                 optional=("region", "spot $/h", "provider", "fabric", "regions", "vCPU", "mem GiB", "net Gbps",
                           "NVMe GB", "price made of", "as of"))


@app.command("regions", help="Where a GPU can be had: each region's cheapest offer per GPU-hour, on demand and spot; "
                              "cheapest on-demand $/GPU-hour first, then the regions that sell it on spot only, "
                              "cheapest spot first.")
@output.handle_errors
def regions(
    gpu: Annotated[Optional[str], typer.Option(help="Only offers of this GPU, e.g. H100.")] = None,
    provider: Annotated[Optional[str], typer.Option("--provider", "-p", help="aws, gcp or azure.")] = None,
):
    from gpufleet import catalog
    from gpufleet.catalog import market
    from gpufleet.errors import NotFound
    from gpufleet.providers import CLOUDS

    cat = catalog.load(STATE.config)
    if provider and provider not in CLOUDS:
        raise NotFound("provider", provider, CLOUDS)
    g = cat.gpu(gpu).name if gpu else None
    rows = market.regions(cat, g, [provider] if provider else [])
    for r in rows:
        r.zones = r.zones or list(cat.region_zones(r.provider, r.region))
    if STATE.json:
        output.emit_json({"gpu": g, "catalog_age_days": cat.age_days(), "regions": [r.to_dict() for r in rows]})
    else:
        def cell(o) -> list:
            if o is None:
                return ["-", "-"]
            return [f"{o.instance.name}", f"${market.RegionOffer.per_gpu(o):.2f}"]

        spot = min((r.spot.as_of for r in rows if r.spot), default=None)
        output.table(f"Regions with {g or 'GPU'} offers", ["provider", "region", "geo", "zones", "on demand",
                                                          "$/GPU-h", "spot", "spot $/GPU-h"],
                     [[r.provider, r.region, r.geo, len(r.zones), *cell(r.ondemand), *cell(r.spot)] for r in rows],
                     caption=_age_line(cat) + (f"; spot prices: a snapshot as of {spot}, they move hourly" if spot else ""),
                     justify={c: "right" for c in ("zones", "$/GPU-h", "spot $/GPU-h")},
                     optional=("on demand", "spot", "zones", "geo"))
    if not rows:
        output.warn(f"no region offers {g or 'a GPU'}" + (f" on {provider}" if provider else ""))
        raise typer.Exit(EXIT_FAILED)


@app.command("workloads", help="The workload library: parameters, FLOPs per sample, sources.")
@output.handle_errors
def workloads_cmd(
    workload_file: Annotated[Optional[str], typer.Option("--workload-file", help="YAML file with your own workloads.")] = None,
):
    from gpufleet.perf import workloads

    lib = workloads.library(workload_file)
    if STATE.json:
        output.emit_json([w.__dict__ | {"train_flops": w.train_flops} for w in lib.values()])
        return
    from rich.markup import escape  # sources cite as [hpe] [imagenet], which is not markup

    output.table("Workloads", ["workload", "family", "params", "train GFLOP/sample", "unit", "source"],
                 [[w.name, w.family, f"{w.params / 1e6:,.1f}M", f"{w.train_flops / 1e9:,.2f}", w.unit, escape(w.source)]
                  for w in lib.values()], justify={"params": "right", "train GFLOP/sample": "right"},
                 optional=("family",), wraps=("source",),
                 caption="Also: llm:<size>[:<seq>] for any decoder LLM, e.g. llm:8b (6N FLOPs per token + attention).")


@app.command("show", help="Everything about one GPU, instance type or workload, with sources.")
@output.handle_errors
def show(name: Annotated[str, typer.Argument(help="GPU, instance type or workload name.")]):
    from gpufleet import catalog
    from gpufleet.errors import NotFound
    from gpufleet.perf import workloads

    cat = catalog.load(STATE.config)
    found: dict = {}
    if cat.has_gpu(name):
        found["gpu"] = cat.gpu(name).__dict__
    for (prov, n), it in cat.instances.items():
        if n.lower() == name.lower():
            said = cat.facts.get((prov, it.name))
            found.setdefault("instances", []).append(
                it.__dict__ | ({"provider_api_says": {k: v for k, v in said.__dict__.items()
                                                      if v not in (None, {}) and k not in ("provider", "item")}}
                               if said else {})
                | {"offers": [{"region": o.region, "market": o.market, "usd_per_hour": o.usd_per_hour,
                               "parts": [p.__dict__ for p in o.parts]}
                              for o in cat.offers() if o.provider == prov and o.instance.name == it.name]})
    try:
        found["workload"] = workloads.get(name).__dict__
    except NotFound:
        pass
    if not found:
        choices = [g.name for g in cat.gpus.values()] + [n for _, n in cat.instances] + list(workloads.library())
        raise NotFound("GPU, instance type or workload", name, choices)
    if STATE.json:
        output.emit_json(found)
        return
    c = output.console()
    for kind, val in found.items():
        for item in (val if isinstance(val, list) else [val]):
            c.rule(f"{kind}: {item['name']}")
            for k, v in item.items():
                if k == "offers":
                    _print_offers(c, v)
                elif k == "provider_api_says":
                    zones = v.pop("zones", {})
                    c.print("  the provider's API says (last refresh): " + ", ".join(f"{a} {b}" for a, b in v.items()),
                            highlight=False)
                    for region, zs in zones.items():
                        c.print(f"    {region:<16} zones {', '.join(zs) or '(regional)'}", highlight=False)
                elif k != "name":
                    c.print(f"  {k}: {v}")


def _print_offers(c, offers: list[dict]) -> None:
    """One line per region and market; tens of prices share a source or two, each cited once, below,
    by number."""
    from rich.markup import escape
    from rich.padding import Padding

    sources: dict[tuple[str, str], int] = {}

    def cite(p) -> str:
        return f"[{sources.setdefault((p['source'], p['as_of']), len(sources) + 1)}]"

    for o in offers:
        parts = o["parts"]
        made_of = " + ".join(f"{p['what']} ${p['usd_per_hour']:.4g} {cite(p)}" for p in parts) if len(parts) > 1 \
            else cite(parts[0])
        price = f"${o['usd_per_hour']:.4g}/h"
        c.print(f"  {o['region']:<16} {o['market']:<9} {price:>10}  {made_of}", highlight=False)
    if sources:
        c.print("  sources:")
    for (source, as_of), n in sources.items():
        c.print(Padding(escape(f"[{n}] {source} (as of {as_of})"), (0, 0, 0, 4)), highlight=False)


def _refresh_rates(named: list[str] | None, asked: list[str]) -> None:
    from gpufleet.fleet import refresh_rates

    with output.steps("Refreshing rates", len(asked)) as update:
        res = refresh_rates.refresh(named, on_provider=lambda p, what: update(asked.index(p), len(asked), f"{p}: {what}"))
        update(len(asked), len(asked), "checked")
    held = [r.provider for r in res.results if r.failed]
    if STATE.json:
        output.emit_json(res.to_dict())
    else:
        output.table("Rates refresh", ["provider", "result", "rates", "changed", "note"],
                     [[r.provider, r.status, r.rows, r.changed if r.status == "updated" else "-", r.message]
                      for r in res.results], styles=[None if r.status == "updated" else "dim" if r.status == "skipped"
                                                     else "red" for r in res.results], wraps=("note",))
        c = output.console()
        for problem in res.problems[:20]:
            c.print(f"[red]{problem}[/red]", highlight=False)
        if res.written:
            c.print(f"Written to {res.path} (atomically); `gpufleet plan` prices every line from it"
                    + (f" [red]{', '.join(held)}: previous rates kept[/red]." if held else "."))
        else:
            c.print(f"Nothing was written; {res.path if res.path.exists() else 'the embedded rates'} stay.")
    if held:
        raise typer.Exit(EXIT_FAILED)


@app.command("refresh", help="Rebuild the prices from the providers' own APIs: AWS Price List, spot history and "
                             "instance types; GCP Cloud Billing Catalog SKUs priced onto machine and accelerator "
                             "types (vCPUs + RAM + GPUs, each part kept); Azure Retail Prices and, with credentials, "
                             "resource SKUs. The new prices replace the old only if their checks pass (no provider "
                             "shrinks by more than 25%, flagship SKUs present, sane prices, GPU model and count as in "
                             "the GPU table, every row with its source); a provider that cannot be fetched or fails a "
                             "check keeps its previous prices while the others update. Exit 1 when any provider failed.")
@output.handle_errors
def refresh_cmd(
    provider: Annotated[Optional[list[str]], typer.Option("--provider", "-p", help="Only this provider (repeatable); "
                                                          "default: every provider with a fetcher.")] = None,
    max_shrink: Annotated[float, typer.Option("--max-shrink", min=0.0, max=1.0, help="The largest fraction of a "
                                              "provider's prices a refresh may drop (you removed regions?).")] = 0.25,
    public: Annotated[bool, typer.Option("--public", help="Without credentials, from a provider's public price list "
                                         "where it has one: AWS's bulk offer files, streamed per region (on-demand "
                                         "prices only); GCP's Cloud Billing Catalog with an API key "
                                         "(GPUFLEET_GCP_API_KEY) on the catalog's machine shapes. Azure's Retail "
                                         "Prices are public anyway.")] = False,
    rates_: Annotated[bool, typer.Option("--rates", help="Refresh the rates of what is billed besides instances "
                                         "instead (volumes, NAT gateways, public addresses, traffic): AWS's Price List "
                                         "(credentials), Azure's Retail Prices; the same checks, kept rows and "
                                         "atomic write. Rows no fetcher covers keep their source and date.")] = False,
):
    from gpufleet import catalog
    from gpufleet.catalog import store
    from gpufleet.fleet import refresh
    from gpufleet.providers import CLOUDS

    named = options.clouds(provider)
    asked = named or list(CLOUDS)
    if rates_:
        _refresh_rates(named, asked)
        return
    try:
        cat = catalog.load(STATE.config)
    except store.StoreDamaged as e:  # the very file a refresh replaces
        output.warn(f"{e.message}; it is replaced (and kept aside) when a provider's new prices pass their checks")
        cat = catalog.load(STATE.config, refreshed=False)
    with output.steps("Refreshing prices", len(asked)) as update:
        def on_provider(p, what):
            update(asked.index(p), len(asked), f"{p}: {what}")

        res = refresh.refresh(cat, named, on_provider=on_provider, max_shrink=max_shrink, public=public)
        update(len(asked), len(asked), "checked")
    held = [r.provider for r in res.results if r.failed]  # kept (fetch failed) or rejected (a check)
    if STATE.json:
        output.emit_json(res.to_dict())
    else:
        rows = [[r.provider, r.status, r.rows, r.previous, r.message] for r in res.results]
        output.table("Catalog refresh", ["provider", "result", "prices", "before", "note"], rows,
                     styles=[None if r.status == "updated" else "red" for r in res.results], wraps=("note",))
        c = output.console()
        for r in res.results:
            for note in r.notes[:12]:
                c.print(f"[dim]{r.provider}: {note}[/dim]", highlight=False)
            if len(r.notes) > 12:
                c.print(f"[dim]{r.provider}: ... and {len(r.notes) - 12} more (--json)[/dim]")
        for problem in res.problems[:20]:
            c.print(f"[red]{problem}[/red]", highlight=False)
        if len(res.problems) > 20:
            c.print(f"[red]... and {len(res.problems) - 20} more (--json)[/red]")
        if res.set_aside:
            c.print(f"The damaged file is kept as {res.set_aside}.")
        if res.written:
            c.print(f"Written to {res.path} (atomically); `gpufleet catalog sources` shows where each provider's "
                    "prices come from." + (f" [red]{', '.join(held)}: previous prices kept[/red]." if held else ""))
        elif res.problems:
            c.print(f"[red]Checks failed: nothing was written[/red]; {res.path} is as it was.")
        else:
            c.print(f"Nothing was fetched; {res.path if res.path.exists() else 'the embedded catalog'} stays.")
    if held:
        raise typer.Exit(EXIT_FAILED)


@app.command("sources", help="Where each provider's prices come from now: the embedded catalog (and its age) or "
                             "the last refresh (when, which APIs, how many prices and instance facts).")
@output.handle_errors
def sources():
    from gpufleet import catalog
    from gpufleet.catalog import age_in_days, store
    from gpufleet.paths import prices_path
    from gpufleet.providers import CLOUDS

    stored = store.read_store()
    embedded = catalog.load(use_config=False)
    rows = []
    for p in CLOUDS:
        meta = (stored or {}).get("providers", {}).get(p)
        if meta and any(r.provider == p for r in stored["prices"]):
            rows.append({"provider": p, "from": "refresh", "as_of": (meta.get("fetched_at") or "")[:10],
                         "fetched_at": meta.get("fetched_at"), "prices": meta.get("rows"), "apis": meta.get("apis", []),
                         "facts": sum(1 for f in stored["facts"] if f.provider == p)})
        else:
            mine = [x for x in embedded.prices if x.provider == p]
            rows.append({"provider": p, "from": "embedded", "as_of": min(x.as_of for x in mine), "fetched_at": None,
                         "prices": len(mine), "apis": [], "facts": 0})
    for r in rows:
        r["age_days"] = age_in_days(r["as_of"])
    if STATE.json:
        output.emit_json({"store": str(prices_path()), "providers": rows})
        return
    output.table("Catalog sources", ["provider", "from", "as of", "days old", "prices", "facts", "APIs"],
                 [[r["provider"], r["from"], r["as_of"], r["age_days"], r["prices"], r["facts"], ", ".join(r["apis"])]
                  for r in rows], caption=f"refreshed prices: {prices_path()} (`gpufleet catalog refresh`)")

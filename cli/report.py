"""`gpufleet report`: the comparison as one file to put in front of a budget owner."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from gpufleet.cli import options, output
from gpufleet.cli.output import STATE
from gpufleet.errors import EXIT_FAILED

STDOUT = "-"  # --out -: the page to stdout, as a file name "-" means to most programs

HELP = """Write the cost comparison for a workload as one self-contained HTML file (inline CSS and SVG,
no script, readable offline, printable) or as Markdown with SVG charts beside it: the cheapest,
the fastest and the best trade-off, cost vs time of every offer with the Pareto frontier,
scaling curves, the ranked table, spot and negotiated prices, own vs rent with the break-even
utilisation of each rack, and how sure the numbers are. --clusters writes what the running
clusters have cost so far instead. Needs matplotlib: pip install 'gpufleet[report]'.

Examples: gpufleet report resnet50 --epochs 90 --out resnet50.html;  gpufleet report llm-7b
--tokens 1e11 --gpu H100,A100-80GB --markdown --out llm.md;  gpufleet report --stack
baremetal-rack.yaml (gpufleet examples --copy . writes it);  gpufleet report --clusters --out fleet.html"""


@output.handle_errors
@options.comparison_flags
def report(
    flags: options.ComparisonFlags,
    out: Annotated[Optional[str], typer.Option("--out", "-o", help="File to write (default report.html, or "
                                               "report.md with --markdown; charts go beside a Markdown file; "
                                               "- writes the HTML page to stdout).")] = None,
    markdown: Annotated[bool, typer.Option("--markdown", help="Markdown with SVG chart files beside it, for a wiki or "
                                           "a pull request (also chosen by an --out ending in .md).")] = False,
    clusters: Annotated[bool, typer.Option("--clusters", help="Report the running clusters' cost so far (from "
                                           "`status`) instead of a comparison.")] = False,
    local: Annotated[bool, typer.Option("--local", help="With --clusters: only the registry; do not ask the "
                                        "clouds.")] = False,
):
    from gpufleet import catalog
    from gpufleet.errors import GpufleetError, InputError
    from gpufleet.report import charts, files

    as_markdown = markdown or (out or "").lower().endswith((".md", ".markdown"))
    if out == STDOUT and (as_markdown or STATE.json):
        raise InputError("--out - writes the HTML page (its charts inline) to stdout: "
                         + ("Markdown's charts are files beside it" if as_markdown else "--json writes there too"),
                         "give --out a file name" + (", or leave out --markdown" if as_markdown else ""))
    asked = Path(out or ("report.md" if as_markdown else "report.html"))
    path = asked if out == STDOUT else files.check_writable(asked)
    charts.load()  # a missing extra is said before any work
    cat = catalog.load(STATE.config)
    if clusters:
        given = flags.given()
        if given:
            raise InputError(f"--clusters reports the running clusters; it takes no {', '.join(given)}",
                             "gpufleet report --clusters [--local] [--out FILE]")
        _clusters(cat, path, asked, as_markdown, local)
        return
    if local:
        raise InputError("--local goes with --clusters", "gpufleet report --clusters --local")
    from gpufleet import compare as cmp
    from gpufleet.report import model, render

    c = options.comparison(cat, flags, command="report")
    rep = cmp.compare(cat, c.request)
    rep.left_out = c.left_out
    for pool, why in c.left_out.items():
        output.warn(f"pool {pool} is left out of the comparison: {why}")
    if not any(r.feasible for r in rep.rows):
        why = "no offer matches these filters" if not rep.rows else \
            f"none of the {len(rep.rows)} matching offers can run {rep.workload} ({rep.rows[0].reason})"
        raise GpufleetError(f"{why}: nothing to report, no file written",
                            "widen the filters (--gpu, --provider, --region, --max-price, --nodes); "
                            "`gpufleet compare` lists what matches")
    bill = None
    if flags.stack:  # the offers price instances; the stack as planned has every line of its bill
        from gpufleet.cli.plan import stack_bill

        bill = stack_bill(flags.stack, cat)
    data = model.build(cat, c.request, report=rep, constraints=c.constraints, stack=c.stack, spend=bill)
    written = _write(render.report_files(data, path, as_markdown), path)
    if rep.stale and output.once_a_day("catalog-age"):  # the report itself always says the age
        output.warn(f"the catalog's prices are {rep.catalog_age_days} days old, past the {rep.max_age_days}-day limit: "
                    "run `gpufleet catalog refresh`, or add current quotes under `prices:` (said once a day)")
    if STATE.json:
        output.emit_json({"path": str(path), "files": [str(p) for p in written],
                          "format": "markdown" if as_markdown else "html", **data.to_dict()})
    else:
        output.console(stderr=not written).print(
            (f"Wrote {_through(path, asked)}" + (f" and {len(written) - 1} chart file(s)" if len(written) > 1 else "")
             + "\n" if written else "") + data.recommendation, highlight=False, markup=False)
    if c.left_out:  # a stack pool that cannot be compared is a comparison not done (as in `compare`)
        raise typer.Exit(EXIT_FAILED)


def _write(pages: dict[Path, str], path: Path) -> list[Path]:
    """The report's files written (all or none), or, for ``--out -``, its one page on stdout (no file)."""
    from gpufleet.report import files

    if str(path) != STDOUT:
        return files.write_all(pages)
    sys.stdout.write(pages[path])
    sys.stdout.flush()
    return []


def _through(path: Path, asked: Path) -> str:
    """The file written, and the link --out named when it was one (followed to that file)."""
    return str(path) if path == asked else f"{path} (the file the link {asked} points to)"


def _billed():
    """`gpufleet cost`'s report for the running clusters, when the clouds' bills can be read (a section of
    the report; a bill that cannot be read is said and leaves it out)."""
    from gpufleet import config
    from gpufleet.errors import GpufleetError
    from gpufleet.fleet import cost
    from gpufleet.paths import user_config

    path = user_config(STATE.config)
    settings = config.load(path).billing if path else config.Billing()
    try:
        with output.steps("Reading the clouds' bills"):
            got = cost.run(drift=settings.drift, settings=settings.model_dump())
    except GpufleetError as e:
        output.warn(f"the bills were not read: {e.message}")
        return None
    for p, why in got.failed.items():
        output.warn(f"{p}'s bill could not be read: {why}")
    return got


def _clusters(cat, path: Path, asked: Path, as_markdown: bool, local: bool) -> None:
    import datetime as dt

    from gpufleet.fleet import status as st
    from gpufleet.report import clusters, render

    with output.steps("Asking the clouds") as update:
        seen: list[str] = []
        status = st.run(None, cat, local=local,
                        on_region=lambda where: (seen.append(where), update(len(seen), None, where)))
    data = clusters.build(status, dt.datetime.now(dt.timezone.utc), None if local else _billed())
    written = _write(render.cluster_files(data, path, as_markdown), path)
    for where, why in data.unread.items():
        output.warn(f"{where}: {why}")
    if STATE.json:
        output.emit_json({"path": str(path), "files": [str(p) for p in written],
                          "format": "markdown" if as_markdown else "html", **data.to_dict()})
    else:
        past = f"; past their TTL: {', '.join(c.name for c in data.past_ttl)}" if data.past_ttl else ""
        output.console(stderr=not written).print(
            (f"Wrote {_through(path, asked)}: " if written else "") + f"{len(data.clusters)} cluster(s), "
            f"${data.total:,.2f} so far{past}", highlight=False, markup=False)
    if data.unread:  # as `status`: what should have been read and was not
        raise typer.Exit(EXIT_FAILED)

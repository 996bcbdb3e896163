"""A report's files: the HTML page (charts inline), or the Markdown with its charts beside it."""

from __future__ import annotations

from pathlib import Path

from gpufleet.report import charts, document, html, markdown
from gpufleet.report.charts import Chart
from gpufleet.report.clusters import ClustersData
from gpufleet.report.model import Data


def _files(blocks: list[document.Block], drawn: list[Chart], out: Path, as_markdown: bool) -> dict[Path, str]:
    if not as_markdown:
        return {out: html.render(blocks)}
    names = {c.name: f"{out.stem}-{c.name}.svg" for c in drawn}
    return {out: markdown.render(blocks, names), **{out.with_name(names[c.name]): c.svg for c in drawn}}


def report_files(data: Data, out: Path, as_markdown: bool = False) -> dict[Path, str]:
    drawn = charts.report_charts(data)
    return _files(document.report_blocks(data, {c.name: c for c in drawn}), drawn, out, as_markdown)


def cluster_files(data: ClustersData, out: Path, as_markdown: bool = False) -> dict[Path, str]:
    drawn = [charts.cluster_costs(data)] if data.clusters else []
    return _files(document.cluster_blocks(data, {c.name: c for c in drawn}), drawn, out, as_markdown)

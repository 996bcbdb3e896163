"""The report as one self-contained HTML file: inline CSS and SVG, no script, nothing fetched,
laid out for a screen and for printing to PDF."""

from __future__ import annotations

from html import escape

from gpufleet.report.document import Block, Figure, Heading, Items, Para, Table

CSS = """
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; color: #202124;
       max-width: 1320px; margin: 2rem auto; padding: 0 1.5rem; }
h1 { font-size: 1.6rem; margin: 0 0 1rem; }
h2 { font-size: 1.2rem; margin: 2rem 0 .6rem; border-bottom: 1px solid #dadce0; padding-bottom: .2rem; }
h3 { font-size: 1.02rem; margin: 1.3rem 0 .4rem; }
p.lead { font-size: 1.08rem; background: #e6f4ea; border-left: 4px solid #188038; padding: .6rem .9rem; }
p.warning { background: #fce8e6; border-left: 4px solid #d93025; padding: .5rem .9rem; }
p.note { color: #5f6368; }
ul { padding-left: 1.3rem; }
figure { margin: 1rem 0; break-inside: avoid; }
figure svg { width: 100%; height: auto; max-width: 100%; display: block; }
figcaption { color: #5f6368; font-size: .9rem; }
table { border-collapse: collapse; width: 100%; margin: .6rem 0 1rem; font-size: 12px; }
div.table { overflow-x: auto; }
th, td { border-bottom: 1px solid #e0e0e0; padding: .25rem .4rem; text-align: left; vertical-align: top;
         white-space: nowrap; }
td:last-child { white-space: normal; min-width: 8em; }
th { background: #f1f3f4; position: sticky; top: 0; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.pick td { background: #e6f4ea; font-weight: 600; }
tr.infeasible td { color: #9aa0a6; }
tr.alert td { background: #fce8e6; }
caption { caption-side: bottom; text-align: left; color: #5f6368; font-size: .85rem; padding-top: .3rem; }
details > summary { cursor: pointer; color: #1a73e8; margin: .2rem 0 .6rem; }
code { background: #f1f3f4; padding: 0 .2rem; border-radius: 3px; }
@media print {
  body { margin: 0; max-width: none; font-size: 11px; }
  h2 { break-after: avoid; }
  tr, figure { break-inside: avoid; }
  th { position: static; }
  div.table { overflow: visible; }
}
"""


def _inline(text: str) -> str:
    """Escaped text with `code` spans."""
    parts = escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _table(t: Table) -> str:
    head = "".join(f'<th class="num">{escape(c)}</th>' if c in t.numeric else f"<th>{escape(c)}</th>"
                   for c in t.columns)
    body = []
    for i, row in enumerate(t.rows):
        kind = t.row_kinds[i] if i < len(t.row_kinds) else ""
        ident = t.row_ids[i] if i < len(t.row_ids) else ""
        attrs = (f' class="{kind}"' if kind else "") + (f' data-offer="{escape(ident)}"' if ident else "")
        cells = "".join(f'<td class="num">{_inline(v)}</td>' if c in t.numeric else f"<td>{_inline(v)}</td>"
                        for c, v in zip(t.columns, row))
        body.append(f"<tr{attrs}>{cells}</tr>")
    caption = f"<caption>{_inline(t.caption)}</caption>" if t.caption else ""

    def table(rows: list[str], cap: str = "") -> str:
        return (f'<div class="table"><table>{cap}<thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody>'
                "</table></div>")

    if not t.fold_after or len(body) <= t.fold_after + 5:
        return table(body, caption)
    rest = len(body) - t.fold_after
    return (table(body[:t.fold_after], caption)
            + f"<details><summary>The other {rest} rows</summary>{table(body[t.fold_after:])}</details>")


def _block(b: Block) -> str:
    if isinstance(b, Heading):
        return f"<h{b.level}>{_inline(b.text)}</h{b.level}>"
    if isinstance(b, Para):
        return f'<p class="{b.kind}">{_inline(b.text)}</p>' if b.kind else f"<p>{_inline(b.text)}</p>"
    if isinstance(b, Items):
        return "<ul>" + "".join(f"<li>{_inline(x)}</li>" for x in b.items) + "</ul>"
    if isinstance(b, Table):
        return _table(b)
    if isinstance(b, Figure):
        return (f'<figure id="chart-{b.chart.name}">{b.chart.inline}'
                f"<figcaption>{_inline(b.caption)}</figcaption></figure>")
    raise TypeError(f"no HTML for {b!r}")


def render(blocks: list[Block]) -> str:
    title = next((b.text for b in blocks if isinstance(b, Heading)), "gpufleet report")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            "<meta name=\"generator\" content=\"gpufleet report\">"
            f"<title>{escape(title)}</title><style>{CSS}</style></head><body>\n"
            + "\n".join(_block(b) for b in blocks) + "\n</body></html>\n")

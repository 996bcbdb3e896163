"""The report as Markdown, for a wiki or a pull request: the same blocks, with each chart an SVG
file beside it (``<stem>-<chart>.svg``), linked by a relative path."""

from __future__ import annotations

from gpufleet.report.document import Block, Figure, Heading, Items, Para, Table


def _cell(v: str) -> str:
    return v.replace("|", "\\|").replace("\n", " ")


def _table(t: Table) -> str:
    lines = ["| " + " | ".join(t.columns) + " |",
             "|" + "|".join("---:" if c in t.numeric else "---" for c in t.columns) + "|"]
    for i, row in enumerate(t.rows):
        kind = t.row_kinds[i] if i < len(t.row_kinds) else ""
        cells = [_cell(v) for v in row]
        if kind in ("pick", "alert") and cells:
            cells = [f"**{c}**" if c else c for c in cells]
        lines.append("| " + " | ".join(cells) + " |")
    if t.caption:
        lines.append(f"\n_{t.caption}_")
    return "\n".join(lines)


def render(blocks: list[Block], chart_files: dict[str, str]) -> str:
    """``chart_files``: chart name -> the file name it is written to beside the Markdown."""
    out = []
    for b in blocks:
        if isinstance(b, Heading):
            out.append("#" * b.level + " " + b.text)
        elif isinstance(b, Para):
            out.append({"warning": "> **Warning:** ", "lead": "**", "note": "_"}.get(b.kind, "") + b.text
                       + {"lead": "**", "note": "_"}.get(b.kind, ""))
        elif isinstance(b, Items):
            out.append("\n".join(f"- {x}" for x in b.items))
        elif isinstance(b, Table):
            out.append(_table(b))
        elif isinstance(b, Figure):
            out.append(f"![{b.chart.title}]({chart_files[b.chart.name]})\n\n_{b.caption}_")
        else:
            raise TypeError(f"no Markdown for {b!r}")
    return "\n\n".join(out) + "\n"

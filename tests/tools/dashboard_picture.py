"""The README's picture of the fleet dashboard: the panels of the JSON gpufleet generates (their titles, types,
units and grid positions, as Grafana lays them out: 24 columns, 30 px a grid row), drawn as one HTML page with
SAMPLE data and photographed by headless Chromium (Debian's, through Playwright: nothing downloaded).

Grafana itself cannot run here (no Debian package, no container engine), so this is not Grafana's rendering and
says so in the image. Run: ``python tests/tools/dashboard_picture.py docs/monitoring-fleet-dashboard.png``.
"""

from __future__ import annotations

import html
import math
import shutil
import sys
from pathlib import Path

LABEL = "rendered by gpufleet from the dashboard definition with sample data, not a Grafana screenshot"
WIDTH = 1440
ROW_PX = 30  # Grafana's grid row height
COLORS = ["#73bf69", "#f2cc0c", "#5794f2", "#ff780a", "#b877d9", "#f2495c"]
HOURS = 6
POINTS = 73  # every 5 minutes over the dashboard's 6 hours

# SAMPLE data, made up to look like a small fleet and consistent with itself, nothing measured: two pools (GPUs,
# $/h of all their nodes), each GPU busy along a curve; the panels' numbers are derived from these
POOLS = {"h100": (32, 220.16), "a100": (16, 48.24)}
BUSY = {"h100": (25, 5, 0.0), "a100": (11, 3, 1.3)}  # level, swing, phase


def _curve(level: float, swing: float, phase: float) -> list[float]:
    return [round(level + swing * math.sin(phase + i / 9) * math.cos(i / 23)) for i in range(POINTS)]


def sample() -> tuple[dict[str, float], dict[str, dict[str, list[float]]]]:
    """(each stat panel's number, each time series panel's lines) by panel title."""
    busy = {p: _curve(*BUSY[p]) for p in POOLS}
    idle = {p: [POOLS[p][0] - b for b in busy[p]] for p in POOLS}
    idle_cost = {p: [i * POOLS[p][1] / POOLS[p][0] for i in idle[p]] for p in POOLS}
    hours = [i / 12 for i in range(POINTS)]
    spend = 3200 + sum(c for _, c in POOLS.values()) * hours[-1]  # what the cluster had cost 6 h ago, plus since
    stats = {"GPUs": sum(g for g, _ in POOLS.values()), "GPUs idle": sum(v[-1] for v in idle.values()),
             "$/h": sum(c for _, c in POOLS.values()), "$/h of idle GPUs": sum(v[-1] for v in idle_cost.values()),
             "$ so far": spend, "Drained nodes": 1}
    series = {"GPUs busy by pool": busy, "GPUs idle by pool": idle,
              "$/h by pool": {p: [c] * POINTS for p, (_, c) in POOLS.items()}, "$/h of idle GPUs by pool": idle_cost,
              "Nodes by health state": {"ok": [6] * 40 + [5] * (POINTS - 40), "faulty": [0] * 40 + [1] * (POINTS - 40)}}
    return stats, series


TABLES = {
    "Nodes not healthy, and their last fault": (["node", "pool", "state"], [["lab-h100-2", "h100", "faulty"]]),
    "Drained nodes (Slurm)": (["slurm_node", "state", "reason"],
                              [["lab-h100-2", "drained", "gpufleet: GF-XID-FATAL xid 79 on GPU 3"]]),
    "Targets down": (["job", "node"], []),
}


def _value(v: float, unit: str) -> str:
    return f"${v:,.2f}" if unit == "currencyUSD" else f"{v:,.0f}"


def _chart(lines: dict[str, list[float]], title: str, unit: str, w: int, h: int) -> str:
    top = max(max(v) for v in lines.values()) * 1.15 or 1
    left, bottom, cw, ch = 58, 22, w - 70, h - 40
    out = [f'<svg width="{w}" height="{h}" role="img" aria-label="{html.escape(title)}">']
    for k in range(5):
        y = 8 + ch - ch * k / 4
        out.append(f'<line x1="{left}" x2="{left + cw}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
                   f'<text x="{left - 6}" y="{y + 4:.1f}" class="tick" text-anchor="end">'
                   f'{html.escape(_value(top * k / 4, unit))}</text>')
    for k in range(HOURS + 1):
        x = left + cw * k / HOURS
        out.append(f'<text x="{x:.1f}" y="{h - bottom + 16}" class="tick" text-anchor="middle">'
                   f'{"now" if k == HOURS else f"-{HOURS - k}h"}</text>')
    for i, vals in enumerate(lines.values()):
        pts = " ".join(f"{left + cw * j / (POINTS - 1):.1f},{8 + ch - ch * v / top:.1f}" for j, v in enumerate(vals))
        out.append(f'<polyline points="{pts}" fill="none" stroke="{COLORS[i]}" stroke-width="1.6"/>')
    out.append("</svg>")
    legend = "".join(f'<span><i style="background:{COLORS[i]}"></i>{html.escape(n)}</span>' for i, n in enumerate(lines))
    return "".join(out) + f'<div class="legend">{legend}</div>'


def _table(title: str) -> str:
    head, rows = TABLES[title]
    if not rows:
        return '<div class="nodata">No data</div>'
    th = "".join(f"<th>{html.escape(c)}</th>" for c in head)
    trs = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{trs}</table>"


def page(dash: dict) -> str:
    """The dashboard's panels at their grid positions, each drawn from its type with the sample data."""
    col = WIDTH / 24
    stats, series = sample()
    cells = []
    for p in dash["panels"]:
        g = p["gridPos"]
        x, y, w, h = g["x"] * col, g["y"] * ROW_PX + 64, g["w"] * col - 8, g["h"] * ROW_PX - 8
        box = f'style="left:{x:.0f}px;top:{y}px;width:{w:.0f}px;height:{h}px"'
        title = html.escape(p["title"])
        if p["type"] == "row":
            cells.append(f'<div class="row" {box}>{title}</div>')
            continue
        unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit", "none")
        if p["type"] == "stat":
            body = f'<div class="stat">{html.escape(_value(stats[p["title"]], unit))}</div>'
        elif p["type"] == "timeseries":
            body = _chart(series[p["title"]], p["title"], unit, int(w) - 16, h - 56)
        elif p["type"] == "table":
            body = _table(p["title"])
        else:
            raise ValueError(f"no drawing for a {p['type']} panel ({p['title']})")
        cells.append(f'<div class="panel" data-type="{p["type"]}" {box}><h3>{title}</h3>{body}</div>')
    height = max(pp["gridPos"]["y"] + pp["gridPos"]["h"] for pp in dash["panels"]) * ROW_PX + 80
    return f"""<!doctype html><html><head><meta charset="utf-8"><style>
body{{margin:0;background:#111217;color:#ccccdc;font:13px 'DejaVu Sans',sans-serif;width:{WIDTH}px;height:{height}px;
position:relative}}
header{{position:absolute;left:0;top:0;width:{WIDTH - 16}px;padding:10px 8px;display:flex;justify-content:space-between}}
header b{{font-size:18px;color:#fff}} header span{{color:#ff9830;font-style:italic}}
.panel,.row{{position:absolute;box-sizing:border-box}} .panel{{background:#181b1f;border:1px solid #2c3235;border-radius:3px;
padding:6px 8px;overflow:hidden}}
.row{{font-size:15px;color:#fff;padding-top:4px;border-bottom:1px solid #2c3235}}
h3{{margin:0 0 4px;font-size:13px;font-weight:500;color:#ccccdc}}
.stat{{font-size:34px;color:#73bf69;font-weight:600;padding-top:8px}}
.grid{{stroke:#2c3235}} .tick{{fill:#8e8e8e;font-size:10px}}
.legend span{{margin-right:14px;font-size:11px}} .legend i{{display:inline-block;width:14px;height:3px;margin:0 5px 3px 0}}
table{{border-collapse:collapse;width:100%;font-size:12px}} th{{text-align:left;color:#6e9fff;border-bottom:1px solid #2c3235}}
td,th{{padding:3px 6px}} .nodata{{color:#8e8e8e;padding-top:20px;text-align:center}}
</style></head><body><header><b>{html.escape(dash['title'])}</b><span>{LABEL}</span></header>
{''.join(cells)}</body></html>"""


def shoot(dash: dict, png: Path, work: Path) -> list[str]:
    """The page as a PNG at ``png``; the browser's console errors (none expected)."""
    from playwright.sync_api import sync_playwright

    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        raise RuntimeError("Debian's chromium is not installed (`make sysdeps`, as root)")
    work.mkdir(parents=True, exist_ok=True)
    src = work / "fleet-dashboard.html"
    src.write_text(page(dash))
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=["--no-sandbox", "--disable-gpu"])
        try:
            view = browser.new_page(viewport={"width": WIDTH, "height": 600})
            view.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            view.on("pageerror", lambda e: errors.append(str(e)))
            view.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:") else r.abort())
            view.goto(src.as_uri())
            view.screenshot(path=str(png), full_page=True)
        finally:
            browser.close()
    return errors


def main(argv: list[str]) -> int:
    from gpufleet.monitoring import dashboards

    png = Path(argv[1] if len(argv) > 1 else "docs/monitoring-fleet-dashboard.png").absolute()
    errors = shoot(dashboards.build()["gpufleet-fleet"], png, png.parent / ".dashboard-picture")
    shutil.rmtree(png.parent / ".dashboard-picture", ignore_errors=True)
    print(f"wrote {png}" + (f"; console errors: {errors}" if errors else ""))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

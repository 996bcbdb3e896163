"""The report's charts, drawn with matplotlib as static SVG.

matplotlib is optional (``pip install 'gpufleet[report]'``) and imported only here, inside
:func:`load`, so that nothing else gpufleet does pays for it. Charts are drawn on a bare
``Figure`` (no pyplot, no global backend) with text kept as text (``svg.fonttype: none``: axis
labels can be searched and read by a screen reader), no date in the file and a fixed hash salt,
so the same data gives the same bytes. Every chart's ids carry its name, so several charts can be
inlined in one HTML page, and every point of data is a ``<g>`` with a ``<title>`` (the browser's
tooltip, no JavaScript) and a ``data-offer`` attribute naming what it is.
"""

from __future__ import annotations

import html
import io
import re
from dataclasses import dataclass
from types import SimpleNamespace

from gpufleet.errors import ExtraMissing
from gpufleet.providers import PROVIDERS
from gpufleet.report.clusters import ClustersData
from gpufleet.report.model import Data, Ownership, Series
from gpufleet.report.ownership import rented_usd_per_month

PALETTE = ["#e8710a", "#1a73e8", "#12a4af", "#5f6368", "#9334e6", "#d01884", "#188038", "#b06000"]
SERIES = ["#1a73e8", "#e8710a", "#188038", "#9334e6", "#d01884", "#12a4af"]
PICKS = {"cheapest": "#188038", "fastest": "#1a73e8", "trade-off": "#d01884"}
BOTTLENECK_MARKERS = {"compute": "o", "network": "^", "cpu": "s", "storage": "D", "memory-capacity": "v"}
RC = {"svg.fonttype": "none", "font.family": "sans-serif",
      "font.sans-serif": ["DejaVu Sans", "Liberation Sans", "Arial", "Helvetica"], "font.size": 9,
      "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True, "grid.color": "#e0e0e0",
      "grid.linewidth": 0.6, "axes.axisbelow": True, "legend.frameon": False}


def load() -> SimpleNamespace:
    """matplotlib (the module, its Figure, ticker and dates), or ExtraMissing naming the extra to install."""
    try:
        import matplotlib
        from matplotlib import dates, ticker
        from matplotlib.figure import Figure
    except ImportError:
        raise ExtraMissing("gpufleet report (its charts)", "matplotlib", "report") from None
    return SimpleNamespace(matplotlib=matplotlib, Figure=Figure, ticker=ticker, dates=dates)


@dataclass
class Chart:
    name: str  # file stem and id prefix: cost-time, scaling, own-dc1, ...
    title: str
    svg: str  # a standalone SVG document

    @property
    def inline(self) -> str:
        """The SVG element alone, for an HTML page."""
        return self.svg[self.svg.index("<svg"):]


def _provider_color(provider: str) -> str:
    i = PROVIDERS.index(provider) if provider in PROVIDERS else len(PROVIDERS)
    return PALETTE[i % len(PALETTE)]


def _money(v: float, _pos=None) -> str:
    if v >= 1e6:
        return f"${v / 1e6:g}M"
    if v >= 1e3:
        return f"${v / 1e3:g}k"
    return f"${v:g}"


def _hours(v: float, _pos=None) -> str:
    return f"{v:g} h"


def _render(fig, name: str, title: str, points: dict[str, tuple[str, dict[str, str]]]) -> Chart:
    """The figure as SVG with ids prefixed by ``name`` and each point's title and data attributes."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": "gpufleet report (matplotlib)", "Title": title})
    svg = buf.getvalue()
    svg = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{name}-{m.group(1)}"', svg)
    svg = re.sub(r'href="#([^"]+)"', lambda m: f'href="#{name}-{m.group(1)}"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{name}-{m.group(1)})", svg)
    for gid, (tip, attrs) in points.items():
        extra = "".join(f' data-{k}="{html.escape(v)}"' for k, v in attrs.items())
        svg = svg.replace(f'<g id="{name}-{gid}">', f'<g id="{name}-{gid}" class="point"{extra}>'
                          f"<title>{html.escape(tip)}</title>", 1)
    svg = svg.replace("<svg ", f'<svg role="img" aria-label="{html.escape(title)}" class="chart" ', 1)
    return Chart(name, title, svg)


def _draw(name: str, title: str, size: tuple[float, float], draw) -> Chart:
    mpl = load()
    with mpl.matplotlib.rc_context({**RC, "svg.hashsalt": name}):
        fig = mpl.Figure(figsize=size, layout="constrained")
        points = draw(fig, mpl)
        return _render(fig, name, title, points)


def _log_if_wide(ax, axis: str, values: list[float], ticker, fmt) -> None:
    lo, hi = min(values), max(values)
    setter = ax.set_xscale if axis == "x" else ax.set_yscale
    target = ax.xaxis if axis == "x" else ax.yaxis
    if lo > 0 and hi / lo > 8:
        setter("log")
        target.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        target.set_minor_formatter(ticker.NullFormatter())
    target.set_major_formatter(ticker.FuncFormatter(fmt))


def cost_time(data: Data) -> Chart:
    """Cost to train vs time to train for every offer that can run it, the Pareto frontier, the picks."""
    title = f"Cost vs time to train {data.workload}: every offer"

    def draw(fig, mpl):
        ax = fig.add_subplot()
        points = {}
        front = {e.id for e in data.frontier}
        for e in data.feasible:
            gid = f"offer-{e.id}"
            on = e.id in front
            ax.plot([e.time_to_train_h], [e.cost_to_train_usd], marker="o", linestyle="none",
                    markersize=6 if on else 4.5, alpha=1.0 if on else 0.55, color=_provider_color(e.row.provider),
                    markeredgecolor="#202124" if on else "none", markeredgewidth=0.6, gid=gid)
            points[gid] = (f"#{e.rank} {e.label}: ${e.cost_to_train_usd:,.2f} in {e.time_to_train_h:,.2f} h "
                           f"({e.basis}){' - on the frontier' if on else ''}", {"offer": e.id})
        if data.frontier:
            ax.plot([e.time_to_train_h for e in data.frontier], [e.cost_to_train_usd for e in data.frontier], "-",
                    color="#202124", linewidth=1.1, zorder=1, gid="frontier", label="Pareto frontier")
        _log_if_wide(ax, "x", [e.time_to_train_h for e in data.feasible], mpl.ticker, _hours)
        _log_if_wide(ax, "y", [e.cost_to_train_usd for e in data.feasible], mpl.ticker, _money)
        by_point: dict[str, list[str]] = {}
        for name, e in data.picks.items():
            by_point.setdefault(e.id, []).append(name)
        # fastest (left, high): label to its right; trade-off: below right; cheapest (right, low): above left
        offsets = {"fastest": (16, 12), "trade-off": (18, -28), "cheapest": (-16, 26)}
        for k, (ident, names) in enumerate(by_point.items()):
            e = next(x for x in data.entries if x.id == ident)
            color = PICKS[names[0]]
            ax.plot([e.time_to_train_h], [e.cost_to_train_usd], marker="o", markersize=11, markerfacecolor="none",
                    markeredgecolor=color, markeredgewidth=1.6, linestyle="none", zorder=4)
            dx, dy = offsets["fastest" if "fastest" in names else names[0]]
            ax.annotate(f"{' + '.join(names)}\n{e.label}", (e.time_to_train_h, e.cost_to_train_usd),
                        xytext=(dx, dy), textcoords="offset points", ha="left" if dx > 0 else "right",
                        va="bottom" if dy > 0 else "top", fontsize=8, color=color, fontweight="bold",
                        bbox={"boxstyle": "round,pad=0.25", "fc": "white", "ec": color, "lw": 0.6, "alpha": 0.9},
                        arrowprops={"arrowstyle": "-", "color": color, "lw": 0.8}, zorder=5, gid=f"pick-{k}")
        ax.set_xlabel("Time to train (hours)")
        ax.set_ylabel("Cost to train (USD)")
        handles = [ax.plot([], [], marker="o", linestyle="none", color=_provider_color(p), label=p)[0]
                   for p in sorted({e.row.provider for e in data.feasible}, key=lambda p: _provider_color(p))]
        frontier_line = [h for h in ax.get_lines() if h.get_gid() == "frontier"]
        fig.legend(handles=handles + frontier_line, loc="outside lower center", ncol=len(handles) + 1, fontsize=8)
        return points

    return _draw("cost-time", title, (8.2, 5.4), draw)


def scaling(series: list[Series], unit: str) -> Chart:
    """Throughput, scaling efficiency and cost to train against node count, per leading offer,
    each point marked with its bottleneck."""
    title = "Scaling: throughput, efficiency and cost vs node count"

    def draw(fig, mpl):
        axes = fig.subplots(1, 3)
        points = {}
        counts = sorted({p.nodes for s in series for p in s.points})
        for i, s in enumerate(series):
            color = SERIES[i % len(SERIES)]
            ok = [p for p in s.points if p.feasible]
            for ax, key in zip(axes, ("throughput", "efficiency", "cost")):
                ys = [p.throughput if key == "throughput" else p.efficiency * 100 if key == "efficiency"
                      else p.cost_to_train_usd for p in ok]
                ax.plot([p.nodes for p in ok], ys, "-", color=color, linewidth=1.3, label=s.offer if key ==
                        "throughput" else None)
                for p, y in zip(ok, ys):
                    gid = f"s{i}-{key}-n{p.nodes}"
                    ax.plot([p.nodes], [y], marker=BOTTLENECK_MARKERS.get(p.bottleneck, "X"), markersize=6,
                            color=color, markeredgecolor="white", markeredgewidth=0.6, linestyle="none", gid=gid)
                    points[gid] = (f"{s.offer}, {p.nodes} node(s), {p.gpus} GPUs: {p.throughput:,.0f} {unit}, "
                                   f"efficiency {p.efficiency:.0%}, ${p.cost_to_train_usd:,.2f} in "
                                   f"{p.time_to_train_h:,.2f} h; bottleneck {p.bottleneck}",
                                   {"offer": s.offer, "nodes": str(p.nodes), "bottleneck": p.bottleneck})
        labels = {"throughput": f"Throughput ({unit})", "efficiency": "Scaling efficiency (%)",
                  "cost": "Cost to train (USD)"}
        for ax, key in zip(axes, ("throughput", "efficiency", "cost")):
            ax.set_xscale("log", base=2)
            ax.set_xticks(counts or [1])
            ax.xaxis.set_major_formatter(mpl.ticker.FuncFormatter(lambda v, _p: f"{v:g}"))
            ax.xaxis.set_minor_formatter(mpl.ticker.NullFormatter())
            ax.set_xlabel("Nodes")
            ax.set_ylabel(labels[key])
            ax.set_title(labels[key].split(" (")[0], fontsize=9)
        axes[0].set_yscale("log")
        axes[0].yaxis.set_major_formatter(mpl.ticker.FuncFormatter(lambda v, _p: f"{v:,.0f}"))
        axes[1].set_ylim(0, 105)
        axes[2].yaxis.set_major_formatter(mpl.ticker.FuncFormatter(_money))
        seen = sorted({p.bottleneck for s in series for p in s.points if p.feasible})
        marks = [axes[0].plot([], [], marker=BOTTLENECK_MARKERS.get(b, "X"), linestyle="none", color="#5f6368",
                              label=f"bottleneck: {b}")[0] for b in seen]
        lines = [h for h in axes[0].get_lines() if h.get_label() and not h.get_label().startswith("_")
                 and h not in marks]
        fig.legend(handles=lines + marks, loc="outside lower center", ncol=min(4, len(lines) + len(marks)), fontsize=8)
        return points

    return _draw("scaling", title, (11.0, 4.4), draw)


def own_vs_rent(own: Ownership, index: int) -> Chart:
    """What the same work costs a month, owning the rack or renting each cloud offer, against utilisation."""
    site = own.site
    title = f"Own vs rent: {site.name}, cost per month vs utilisation"
    name = f"own-{index}"

    def draw(fig, mpl):
        ax = fig.add_subplot()
        points = {}
        us = [i / 100 for i in range(2, 101, 2)]
        ax.plot([u * 100 for u in us], [own.owned_usd_per_month] * len(us), "-", color="#202124", linewidth=2,
                label=f"own {site.name} ({own.nodes} node(s))", gid="owned")
        points["owned"] = (f"owning {site.name}: ${own.owned_usd_per_month:,.0f} a month at any utilisation",
                           {"offer": site.name})
        top = own.owned_usd_per_month
        for i, r in enumerate(own.rentals):
            color = SERIES[i % len(SERIES)]
            ys = [rented_usd_per_month(u, own.time_to_train_h, r.cost_to_train_usd) for u in us]
            top = max(top, min(ys[-1], 3 * own.owned_usd_per_month))
            gid = f"rent-{i}"
            ax.plot([u * 100 for u in us], ys, "-", color=color, linewidth=1.4, label=f"rent {r.offer}", gid=gid)
            points[gid] = (f"renting {r.offer} for the same work; owning wins above {r.break_even:.0%} utilisation"
                           if r.break_even <= 1 else f"renting {r.offer}: cheaper than owning at any utilisation",
                           {"offer": r.offer, "break-even": f"{r.break_even:.6f}"})
            if r.break_even <= 1:
                ax.axvline(r.break_even * 100, color=color, linestyle=":", linewidth=1)
                ax.annotate(f"{r.break_even:.0%}", (r.break_even * 100, own.owned_usd_per_month), xytext=(3, 6 + 11 * i),
                            textcoords="offset points", fontsize=8, color=color, fontweight="bold")
        ax.axvline(site.utilization * 100, color="#d93025", linestyle="--", linewidth=1.2,
                   label=f"your utilisation ({site.utilization:.0%})")
        ax.set_xlim(0, 100)
        ax.set_ylim(0, top * 1.1)
        ax.set_xlabel("Utilisation of the rack (%)")
        ax.set_ylabel("USD per month for the same work")
        ax.yaxis.set_major_formatter(mpl.ticker.FuncFormatter(_money))
        ax.legend(loc="upper left", fontsize=8)
        return points

    return _draw(name, title, (7.6, 4.4), draw)


def cluster_costs(data: ClustersData) -> Chart:
    """Each cluster's cost so far over time (a line from its start to now; red past its TTL), and
    the cost so far per provider."""
    title = "Running clusters: cost so far over time, and per provider"

    def draw(fig, mpl):
        ax, bx = fig.subplots(1, 2, width_ratios=[2.2, 1])
        points = {}
        for i, c in enumerate(data.clusters):
            start = c.start
            color = "#d93025" if c.past_ttl else SERIES[i % len(SERIES)]
            gid = f"cluster-{i}"
            ax.plot([start, data.now], [0, c.cost_so_far], "-o", color=color, markersize=3,
                    linewidth=2.2 if c.past_ttl else 1.3, label=c.name + (" (past TTL)" if c.past_ttl else ""), gid=gid)
            points[gid] = (f"{c.name}: ${c.cost_so_far:,.2f} so far at ${c.usd_per_hour:,.2f}/h"
                           + (" - past its TTL" if c.past_ttl else ""), {"offer": c.name})
            if c.past_ttl and c.expires_at is not None and c.expires_at > start:
                span = (data.now - start).total_seconds()
                at = c.cost_so_far * (c.expires_at - start).total_seconds() / span if span > 0 else 0
                ax.plot([c.expires_at], [at], marker="x", markersize=8, color="#d93025", linestyle="none")
        ax.set_ylabel("Cost so far (USD)")
        ax.set_xlabel("Time (UTC)")
        ax.yaxis.set_major_formatter(mpl.ticker.FuncFormatter(_money))
        locator = mpl.dates.AutoDateLocator()
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mpl.dates.ConciseDateFormatter(locator))
        if data.clusters:
            ax.legend(loc="upper left", fontsize=8)
        provs = data.by_provider
        names = list(provs)[::-1]
        bars = bx.barh(names, [provs[p] for p in names], color=[_provider_color(p) for p in names])
        for p, b in zip(names, bars):
            b.set_gid(f"provider-{p}")
            points[f"provider-{p}"] = (f"{p}: ${provs[p]:,.2f} so far", {"offer": p})
        bx.set_xlabel("Cost so far (USD)")
        bx.set_title("Per provider", fontsize=9)
        bx.xaxis.set_major_formatter(mpl.ticker.FuncFormatter(_money))
        return points

    return _draw("clusters", title, (10.0, 4.2), draw)


def report_charts(data: Data) -> list[Chart]:
    out = [cost_time(data)] if data.feasible else []
    if data.scaling:
        unit = data.entries[0].row.unit if data.entries else ""
        out.append(scaling(data.scaling, unit))
    out += [own_vs_rent(o, i) for i, o in enumerate(data.ownership) if o.feasible and o.rentals]
    return out


"""`gpufleet dashboard CLUSTER` (a tunnel to the cluster's Grafana or Prometheus) and `gpufleet dashboard export`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

from gpufleet.cli import output
from gpufleet.cli.output import STATE

OPEN_HELP = ("Open a tunnel to a cluster's Grafana (or, with --prometheus or where the stack runs no Grafana, its "
             "Prometheus) on its monitor host, through the route `gpufleet ssh` takes (Session Manager, IAP, Bastion, "
             "a bastion pool, or directly), and print the local URL; it runs until Ctrl-C. With --json, print the URL "
             "and the ssh command line instead. Exit 2 when the cluster has no monitor host (monitoring: "
             "{prometheus: true}), 1 when ssh cannot open the tunnel.")
EXPORT_HELP = ("Write gpufleet's Grafana dashboards (fleet, node, Slurm) and Grafana's provisioning files (a "
               "Prometheus data source, a dashboards provider) under --out, at the paths Grafana's packages read "
               "(etc/grafana/provisioning/..., var/lib/grafana/dashboards/gpufleet/): for a team's own Grafana. "
               "Needs the dashboards extra (pip install 'gpufleet[dashboards]').")


class DashboardGroup(TyperGroup):
    """`gpufleet dashboard CLUSTER ...` is `gpufleet dashboard open CLUSTER ...`: a first word that is no
    subcommand (nor an option) is the cluster."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        if args and not args[0].startswith("-") and args[0] not in self.commands:
            args = ["open", *args]
        return super().parse_args(ctx, args)


app = typer.Typer(cls=DashboardGroup, no_args_is_help=True, rich_markup_mode=None,
                  help="Grafana dashboards: `gpufleet dashboard CLUSTER` opens the cluster's, `gpufleet dashboard "
                       "export` writes them for your own Grafana.")


@app.command("open", help=OPEN_HELP)
@output.handle_errors
def open_(
    cluster: Annotated[str, typer.Argument(help="A cluster in the registry (`gpufleet status` lists them).",
                                           metavar="CLUSTER")],
    prometheus: Annotated[bool, typer.Option("--prometheus", help="Prometheus's own page, not Grafana.")] = False,
    port: Annotated[Optional[int], typer.Option("--port", min=1, max=65535, help="The local port (default: a free "
                                                "one).")] = None,
    stack: Annotated[Optional[Path], typer.Option("--stack", help="Read the access block and monitoring from this "
                                                  "stack file (default: the one `up` recorded).", metavar="FILE")] = None,
):
    from gpufleet import catalog
    from gpufleet.fleet import dashboard

    t = dashboard.tunnel(cluster, prometheus=prometheus, port=port, cat=catalog.load(STATE.config), stack_file=stack)
    for note in t.monitor.cfg.notes + ([t.note] if t.note else []):
        output.warn(note)
    if STATE.json:
        output.emit_json(t.to_dict())
        return
    opened = dashboard.start(t)
    name = "Grafana" if t.service == "grafana" else "Prometheus"
    dashboard.hold(opened, lambda: output.console().print(
        f"{name} of {cluster} ({t.monitor.entry.alias}, {t.monitor.address}): {t.url}  (Ctrl-C closes it)",
        soft_wrap=True, markup=False))


@app.command("export", help=EXPORT_HELP)
@output.handle_errors
def export(
    stack: Annotated[Optional[Path], typer.Argument(help="A stack file: its dashboards' folder is named after it.",
                                                    metavar="[STACK]")] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="The folder to write under (made when missing).")] = Path(
        "grafana"),
    prometheus_url: Annotated[Optional[str], typer.Option(
        "--prometheus-url", help="The data source's URL (default: http://127.0.0.1:9090, Prometheus's port here, "
        "where `gpufleet dashboard CLUSTER --prometheus --port 9090` forwards it).")] = None,
):
    from gpufleet import catalog
    from gpufleet.fleet import dashboard

    files = dashboard.export(out.expanduser().absolute(), stack_file=stack,
                             cat=catalog.load(STATE.config) if stack else None, prometheus_url=prometheus_url)
    if STATE.json:
        output.emit_json({"out": str(out), "files": [str(f) for f in files]})
        return
    con = output.console()
    con.print(f"Wrote {len(files)} files under {out}:", soft_wrap=True, markup=False)
    for f in files:
        con.print(f"  {f}", soft_wrap=True, markup=False)

"""`gpufleet ssh CLUSTER [NODE] [-- CMD]` and `gpufleet ssh-config CLUSTER`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperCommand

from gpufleet.cli import output
from gpufleet.cli.output import STATE

ROUTES = ("AWS: Systems Manager Session Manager (aws CLI + session-manager-plugin); GCP: IAP TCP forwarding (gcloud); "
          "Azure: Bastion's native client tunnel (az + its bastion extension); a stack's bastion pool: ProxyJump; "
          "rack hosts: directly.")
CONFIG_HELP = ("Write an OpenSSH config for a cluster's nodes: a Host per node named CLUSTER-POOL-INDEX and "
               "CLUSTER-login (the Slurm controller's first node, else the first node), each reached the way the "
               "stack's access.via says, without port 22 open to the world. " + ROUTES + " Prints the Include line "
               "to add to ~/.ssh/config; then ssh, scp, rsync and VS Code Remote-SSH reach the nodes by name. Exit 1 "
               "when a program the route needs is missing (named, with how to install it), 2 for an unknown cluster.")
SSH_HELP = ("Open a shell on a cluster's node (default: CLUSTER-login), or run `-- CMD` there, through ssh with the "
            "config `ssh-config` writes. NODE: CLUSTER-POOL-INDEX, POOL-INDEX or login. With --json, print the "
            "command and the route instead of connecting. Exit 1 when a program the route needs is missing, 2 for an "
            "unknown cluster or node.")


class AfterDashDash(TyperCommand):
    """Everything after ``--`` is the remote command (kept apart, so that it is never taken for NODE)."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        if "--" in args:
            i = args.index("--")
            ctx.meta["gpufleet.remote_command"] = args[i + 1:]
            args = args[:i]
        return super().parse_args(ctx, args)


Cluster = Annotated[str, typer.Argument(help="A cluster in the registry (`gpufleet status` lists them).",
                                        metavar="CLUSTER")]
StackFile = Annotated[Optional[Path], typer.Option(
    "--stack", help="Read the access block and rack hosts from this stack file (default: the one `up` recorded, "
    "or, where that is not here, what `up` recorded of it).", metavar="FILE")]


@output.handle_errors
def ssh_config(
    cluster: Cluster,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Write it here (default: "
                                                "~/.local/share/gpufleet/ssh/CLUSTER.config).")] = None,
    stack: StackFile = None,
):
    from gpufleet import catalog
    from gpufleet.fleet import ssh

    cfg = ssh.ssh_config(cluster, cat=catalog.load(STATE.config), path=out.expanduser().absolute() if out else None,
                         stack_file=stack)
    for note in cfg.notes:
        output.warn(note)
    if STATE.json:
        output.emit_json(cfg.to_dict())
        return
    output.table(f"{cfg.cluster}: ssh hosts ({cfg.path})", ["host", "route", "hostname"],
                 [[e.alias + (f" ({cfg.login_alias})" if e.alias == cfg.login else ""), e.route.route,
                   e.options.get("HostName", "")] for e in cfg.entries], wraps=("host", "route"))
    con = output.console()
    con.print("Add this line at the top of ~/.ssh/config (once):", soft_wrap=True)
    con.print(f"  {cfg.include_line()}", soft_wrap=True, markup=False)
    con.print(f"then: ssh {cfg.login_alias if cfg.login else cfg.entries[0].alias}", soft_wrap=True, markup=False)


@output.handle_errors
def ssh(
    ctx: typer.Context,
    cluster: Cluster,
    node: Annotated[Optional[str], typer.Argument(help="CLUSTER-POOL-INDEX, POOL-INDEX or login (default).",
                                                  metavar="[NODE]")] = None,
    stack: StackFile = None,
):
    from gpufleet import catalog
    from gpufleet.fleet import ssh as ssh_op

    command = ctx.meta.get("gpufleet.remote_command") or []
    conn = ssh_op.connection(cluster, node, command, cat=catalog.load(STATE.config), stack_file=stack)
    for note in conn.cfg.notes:
        output.warn(note)
    if STATE.json:
        output.emit_json(conn.to_dict())
        return
    ssh_op.run(conn)

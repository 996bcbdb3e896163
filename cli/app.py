"""Root of the gpufleet CLI: global options and the nouns mounted on one typer app."""

from __future__ import annotations

import io
import logging
import re
import sys
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

from gpufleet import __version__
from gpufleet.cli import bench as bench_cmd
from gpufleet.cli import budget as budget_cmd
from gpufleet.cli import capacity as capacity_cmd
from gpufleet.cli import catalog as catalog_cmd
from gpufleet.cli import cluster as cluster_cmd
from gpufleet.cli import compare as compare_cmd
from gpufleet.cli import cost as cost_cmd
from gpufleet.cli import dashboard as dashboard_cmd
from gpufleet.cli import examples as examples_cmd
from gpufleet.cli import heal as heal_cmd
from gpufleet.cli import image as image_cmd
from gpufleet.cli import lifecycle as lifecycle_cmd
from gpufleet.cli import plan as plan_cmd
from gpufleet.cli import report as report_cmd
from gpufleet.cli import scale as scale_cmd
from gpufleet.cli import setup as setup_cmd
from gpufleet.cli import ssh as ssh_cmd
from gpufleet.cli import team as team_cmd
from gpufleet.cli import validate as validate_cmd
from gpufleet.cli import verify as verify_cmd
from gpufleet.cli.output import STATE

GLOBAL_FLAGS = re.compile(r"^(--json|--wide|--verbose|-v+)$")


class RootGroup(TyperGroup):
    """The root command: its flags ``--json``, ``--wide`` and ``-v`` are accepted after the command too
    (``gpufleet compare resnet50 --json``, as people type them), not only before it."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        end = args.index("--") if "--" in args else len(args)
        flags = [a for a in args[:end] if GLOBAL_FLAGS.match(a)]
        rest = [a for a in args[:end] if not GLOBAL_FLAGS.match(a)] + args[end:]
        return super().parse_args(ctx, flags + rest)


app = typer.Typer(
    name="gpufleet",
    cls=RootGroup,
    help="Compare, bring up, configure and tear down GPU fleets on AWS, GCP, Azure and your own racks.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool):
    if value:
        typer.echo(f"gpufleet {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    json_: Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout (before or after the "
                                        "command).")] = False,
    wide: Annotated[bool, typer.Option("--wide", help="Every column of every table, however wide the terminal "
                                       "(by default a table shows the columns that fit).")] = False,
    verbose: Annotated[int, typer.Option("-v", "--verbose", count=True, help="More detail (repeat for more).")] = 0,
    config: Annotated[Optional[str], typer.Option("--config", help="User config file (default "
                                                  "~/.config/gpufleet/config.yaml).", envvar="GPUFLEET_CONFIG")] = None,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")] = False,
):
    STATE.json = json_
    STATE.wide = wide
    STATE.verbose = verbose
    STATE.config = config
    # the libraries' own log records (paramiko's traceback for a host that does not answer SSH, ...)
    # reach people as gpufleet's messages; -vv shows them as they come
    logging.basicConfig(level=logging.DEBUG if verbose >= 2 else logging.CRITICAL, format="%(name)s: %(message)s")


app.command("compare", help=compare_cmd.HELP)(compare_cmd.compare)
app.command("calibrate", help=compare_cmd.CALIBRATE_HELP)(compare_cmd.calibrate)
app.command("report", help=report_cmd.HELP)(report_cmd.report)
app.command("validate", help=validate_cmd.HELP)(validate_cmd.validate)
app.command("examples", help=examples_cmd.HELP)(examples_cmd.examples)
app.command("plan", help=plan_cmd.HELP)(plan_cmd.plan)
app.command("up", help=cluster_cmd.UP_HELP)(cluster_cmd.up)
app.command("down", help=cluster_cmd.DOWN_HELP)(cluster_cmd.down)
app.command("configure", help=cluster_cmd.CONFIGURE_HELP)(cluster_cmd.configure)
app.command("verify", help=verify_cmd.HELP)(verify_cmd.verify)
app.command("bench", help=bench_cmd.HELP)(bench_cmd.bench)
app.command("status", help=lifecycle_cmd.STATUS_HELP)(lifecycle_cmd.status)
app.command("reap", help=lifecycle_cmd.REAP_HELP)(lifecycle_cmd.reap)
app.command("heal", help=heal_cmd.HELP)(heal_cmd.heal)
app.command("scale", help=scale_cmd.HELP)(scale_cmd.scale)
app.command("check", help=lifecycle_cmd.CHECK_HELP)(lifecycle_cmd.check)
app.command("cost", help=cost_cmd.HELP)(cost_cmd.cost)
app.command("ssh", help=ssh_cmd.SSH_HELP, cls=ssh_cmd.AfterDashDash)(ssh_cmd.ssh)
app.command("ssh-config", help=ssh_cmd.CONFIG_HELP)(ssh_cmd.ssh_config)
app.command("unlock", help=team_cmd.UNLOCK_HELP)(team_cmd.unlock)
app.command("log", help=team_cmd.LOG_HELP)(team_cmd.log)
app.add_typer(catalog_cmd.app, name="catalog", help="List the GPU catalog: GPUs, instance types, prices, workloads.")
app.add_typer(lifecycle_cmd.registry_app, name="registry")
app.add_typer(capacity_cmd.app, name="capacity")
app.add_typer(image_cmd.app, name="image")
app.add_typer(team_cmd.app, name="team")
app.add_typer(budget_cmd.app, name="budget")
app.add_typer(setup_cmd.app, name="setup")
app.add_typer(dashboard_cmd.app, name="dashboard")


def _buffered_stdout() -> None:
    """Under PYTHONUNBUFFERED (or ``python -u``) stdout's text layer sits on the raw file, and a write
    into a pipe whose reader left returns short, which the text layer ignores (cpython gh-85393, open
    as of 3.13): `gpufleet compare resnet50 --csv | head` ended 0 with the rest silently dropped. A
    buffered layer between them writes everything or raises BrokenPipeError; flushing at each line
    keeps what the variable asks for, output as it comes."""
    raw = getattr(sys.stdout, "buffer", None)
    if isinstance(raw, io.RawIOBase):
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(raw), encoding=sys.stdout.encoding,
                                      errors=sys.stdout.errors, line_buffering=True, write_through=True)


def main() -> None:
    from gpufleet.cli.output import closed_pipe, interrupted

    _buffered_stdout()
    try:
        try:
            app()
        finally:
            sys.stdout.flush()  # a reader that went away shows here, not as a complaint at the interpreter's exit
    except BrokenPipeError:  # raised after the command, as its output is flushed
        try:
            closed_pipe()
        except typer.Exit as e:
            raise SystemExit(e.exit_code) from None
    except KeyboardInterrupt:  # while typer makes the commands, before a command handles its own
        try:
            interrupted()
        except typer.Exit as e:
            raise SystemExit(e.exit_code) from None

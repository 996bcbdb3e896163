"""`gpufleet setup salt`: install what gpufleet drives that pip cannot install with it."""

from __future__ import annotations

import typer

from gpufleet.cli import output
from gpufleet.cli.output import STATE

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                  help="Install the programs gpufleet drives that cannot come with `pip install gpufleet`.")

SALT_HELP = """Install the pinned Salt into a virtualenv of gpufleet's own (in its data folder,
~/.local/share/gpufleet/salt-venv), where `gpufleet up` finds the salt-ssh that configures rack
hosts. Salt cannot share gpufleet's environment (its `packaging` pin conflicts with Pulumi's), so
no pip extra carries it. Needs pip to reach its package index; does nothing when that Salt is
there already. GPUFLEET_SALT_SSH names another salt-ssh instead."""


@app.command("salt", help=SALT_HELP)
@output.handle_errors
def salt():
    from gpufleet.fleet import salt_setup

    err = output.console(stderr=True)
    collected = 0
    with output.steps("installing Salt") as update:

        def on_line(line: str) -> None:
            nonlocal collected
            collected += line.startswith("Collecting ")
            update(collected, detail=line[:80])

        done = salt_setup.install(on_step=lambda step: None if STATE.json else err.print(step), on_line=on_line)
    if STATE.json:
        output.emit_json(done.to_dict())
        return
    did = "installed" if done.installed else "already installed"
    output.console().print(f"Salt {done.version} {did}: {done.salt_ssh} (rack `up` and `configure` use it)")

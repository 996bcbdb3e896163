"""The gpufleet command line (typer). Thin commands over the library in gpufleet.*."""

import sys

from gpufleet.errors import EXIT_INTERRUPTED


def main() -> None:
    """The `gpufleet` program. Loading the commands takes a moment; a Ctrl-C then ends it as quietly
    as during a command (exit 130, no traceback), so nothing heavy is imported before this runs."""
    try:
        from gpufleet.cli.app import main as run
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise SystemExit(EXIT_INTERRUPTED) from None
    run()

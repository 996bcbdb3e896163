"""The gpufleet command line (typer). Thin commands over the library in gpufleet.*."""

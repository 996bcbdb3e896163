"""`gpufleet examples [NAME] [--copy DIR]`: the example stacks that ship with gpufleet."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from gpufleet.cli import output
from gpufleet.cli.output import STATE

HELP = """List the example stacks that ship with gpufleet (one per cloud, a bare-metal rack, a mixed
fleet), print one (NAME, to stdout), or copy them into a folder to edit (--copy DIR; a file there
that differs is refused unless --force). They name a throw-away public key (keys/example.pub)
that --copy writes beside them: point access.public_key at your own key before `gpufleet up`.

Examples: gpufleet examples;  gpufleet examples --copy .;  gpufleet examples aws-training > my.yaml"""


@output.handle_errors
def examples(
    name: Annotated[Optional[str], typer.Argument(help="One example stack: print it (with --copy: copy only it and "
                                                  "the files it names).", metavar="[NAME]")] = None,
    copy: Annotated[Optional[Path], typer.Option("--copy", metavar="DIR", help="Copy them into DIR (made if need be).")] = None,
    force: Annotated[bool, typer.Option("--force", help="With --copy: overwrite files that differ from the examples.")] = False,
):
    from gpufleet.fleet import examples as shipped

    if copy is not None:
        done = shipped.copy(copy, [name] if name else None, force=force)
        if STATE.json:
            output.emit_json({"folder": str(done.folder), "copied": done.copied, "unchanged": done.unchanged})
            return
        con = output.console()
        if done.copied:
            con.print(f"Copied into {done.folder}: {', '.join(done.copied)}")
        if done.unchanged:
            con.print(f"Already there, the same: {', '.join(done.unchanged)}")
        con.print(f"Next: gpufleet validate {Path(done.folder) / '*.yaml'}  (point access.public_key at your own key "
                  "before `gpufleet up`)")
        return
    if name is not None:
        one = shipped.find(name)
        if STATE.json:
            output.emit_json({**one.to_dict(), "text": one.path.read_text(encoding="utf-8")})
            return
        sys.stdout.write(one.path.read_text(encoding="utf-8"))
        if one.beside:  # stdout is the stack alone, for `> my.yaml`; what it needs beside it is said apart
            output.console(stderr=True).print(
                f"note: {one.name} names {', '.join(one.beside)} beside it: `gpufleet examples {one.name} --copy DIR` "
                "writes both, or point access.public_key at your own key")
        return
    rows = shipped.listing()
    if STATE.json:
        output.emit_json({"examples": [e.to_dict() for e in rows]})
        return
    output.table("Example stacks", ["name", "providers", "description"],
                 [[e.name, ", ".join(e.providers), e.description] for e in rows], wraps=("description",),
                 caption="gpufleet examples NAME prints one;  gpufleet examples --copy DIR writes them all to edit")

"""Options and argument checks several commands share, declared once."""

from __future__ import annotations

import datetime as dt
import sys
from typing import Annotated, Optional

import typer

Providers = Annotated[Optional[list[str]], typer.Option("--provider", "-p", help="Only this cloud (aws, gcp, azure); "
                                                        "repeat for several.")]
Regions = Annotated[Optional[list[str]], typer.Option("--region", "-r", help="Only this region (e.g. us-east-1, "
                                                      "us-central1, eastus); repeat for several. Default: all.")]
Cluster = Annotated[Optional[str], typer.Option("--cluster", help="Cluster name (default: the stack's name).")]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before changing anything.")]
TrustNewHosts = Annotated[bool, typer.Option("--trust-new-hosts", help="Record the host keys of rack hosts not yet "
                                             "in the site's known_hosts (trust on first use). A changed key is "
                                             "refused regardless.")]


def clouds(values: list[str] | None) -> list[str] | None:
    """``--provider`` values: known clouds, each once, in order (None when none was given)."""
    from gpufleet.errors import InputError, did_you_mean
    from gpufleet.providers import CLOUDS

    for v in values or []:
        if v not in CLOUDS:
            s = did_you_mean(v, CLOUDS)
            raise InputError(f"--provider {v!r} is not a cloud gpufleet manages",
                             f"did you mean {s!r}?" if s else f"choose from {', '.join(CLOUDS)}")
    return list(dict.fromkeys(values)) if values else None


def duration(flag: str, value: str | None) -> dt.timedelta | None:
    """A duration flag (90m, 8h, 2d, 1w; 0 for none)."""
    if value is None:
        return None
    if value.strip() in ("0", "0m", "0h", "0d"):
        return dt.timedelta(0)
    from gpufleet.errors import InputError
    from gpufleet.spec import HintedValueError, parse_ttl

    try:
        return parse_ttl(value)
    except HintedValueError as e:
        raise InputError(f"{flag} {e}", e.hint) from None


def confirm(question: str, yes: bool) -> bool:
    """True when ``--yes`` was given or the person at the terminal says so; no terminal is bad input."""
    if yes:
        return True
    if not sys.stdin.isatty():
        from gpufleet.errors import InputError

        raise InputError("no terminal to confirm on", "pass --yes to proceed without asking")
    return typer.confirm(question, default=False, err=True)


def passphrase_prompt():
    """A prompt for the Pulumi state's passphrase, when there is a terminal to ask on."""
    if not sys.stdin.isatty():
        return None
    return lambda: typer.prompt("Passphrase for the Pulumi state secrets", hide_input=True, err=True)

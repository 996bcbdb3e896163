"""`gpufleet up STACK` and `gpufleet down STACK|CLUSTER`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from gpufleet.cli import output
from gpufleet.cli.output import STATE

UP_HELP = ("Bring a stack up: validate, plan and price it, check credentials and the Pulumi CLI, ask, then create "
           "the cloud pools with Pulumi and record the cluster. Re-running updates it in place.")
DOWN_HELP = ("Destroy a cluster's cloud resources (by stack file or cluster name); it leaves the registry only once "
             "the destroy succeeded.")


def _confirm(question: str, yes: bool) -> bool:
    if yes:
        return True
    if not sys.stdin.isatty():
        from gpufleet.errors import InputError

        raise InputError("no terminal to confirm on", "pass --yes to proceed without asking")
    return typer.confirm(question, default=False, err=True)


def _passphrase() -> str:
    return typer.prompt("Passphrase for the Pulumi state secrets", hide_input=True, err=True)


def _prompt_or_none():
    return _passphrase if sys.stdin.isatty() else None


@output.handle_errors
def up(
    stack: Annotated[str, typer.Argument(help="Stack file (YAML).", metavar="STACK")],
    cluster: Annotated[Optional[str], typer.Option("--cluster", help="Cluster name (default: the stack's name).")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before creating resources.")] = False,
):
    from gpufleet import catalog, spec
    from gpufleet.engine import deploy

    cat = catalog.load(STATE.config)
    st = spec.load(stack, cat)

    def confirm(p) -> bool:
        if not STATE.json:
            from gpufleet.cli.plan import render

            render(p)
        return _confirm(f"Create these {len(p.cloud_resources)} resources for {output.money(p.usd_per_hour)}/h?", yes)

    with output.steps("Creating resources") as update:
        outcome = deploy.bring_up(st, cat, cluster=cluster, confirm=confirm, prompt=_prompt_or_none(),
                                  on_progress=lambda pr: update(pr.done, pr.total, _in_flight(pr)))
    rec = outcome.record
    if STATE.json:
        output.emit_json({"cluster": rec.to_dict(), "changes": outcome.progress.ops if outcome.progress else {},
                          "elapsed_s": round(outcome.progress.elapsed, 1) if outcome.progress else 0})
        return
    _render_nodes(rec, outcome.progress)


def _in_flight(pr) -> str:
    if not pr.in_flight:
        return ""
    urn = next(iter(pr.in_flight))
    return f"{pr.in_flight[urn]} {urn.rsplit('::', 1)[-1]}"


def _render_nodes(rec, progress) -> None:
    rows = [[n.pool, n.provider, n.location + (f"/{n.zone}" if n.zone else ""), n.machine, n.node_id or "-",
             n.private_ip or "-", n.ssh_endpoint or "", output.money(n.usd_per_hour) if n.usd_per_hour is not None else "-"]
            for n in rec.nodes]
    output.table(f"Cluster {rec.name} is up", ["pool", "provider", "where", "machine", "node", "private IP", "SSH",
                                                "$/h"], rows, justify={"$/h": "right"})
    changes = ", ".join(f"{k} {v}" for k, v in sorted((progress.ops if progress else {}).items())) or "no changes"
    took = f" in {progress.elapsed:.0f}s" if progress else ""
    cost = output.money(rec.usd_per_hour) + "/h" if rec.usd_per_hour is not None else "unpriced pools included"
    output.console().print(f"{changes}{took}. {len(rec.nodes)} node(s), {cost}; expires {rec.expires_at}. "
                           f"Recorded in the registry.")


@output.handle_errors
def down(
    target: Annotated[str, typer.Argument(help="Stack file or cluster name.", metavar="STACK|CLUSTER")],
    cluster: Annotated[Optional[str], typer.Option("--cluster", help="Cluster name, when STACK was brought up under another name.")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before destroying.")] = False,
):
    from gpufleet.engine import deploy

    name = cluster or _cluster_name(target)

    def confirm(rec) -> bool:
        if not STATE.json:
            output.console().print(f"Cluster [bold]{rec.name}[/bold] (stack {rec.stack}, {len(rec.nodes)} node(s), "
                                   f"state {rec.state}) will be destroyed.")
        return _confirm(f"Destroy cluster {rec.name}?", yes)

    with output.steps("Destroying resources") as update:
        rec, progress = deploy.tear_down(name, confirm=confirm, prompt=_prompt_or_none(),
                                         on_progress=lambda pr: update(pr.done, None, _in_flight(pr)))
    if STATE.json:
        output.emit_json({"cluster": rec.name, "destroyed": True, "changes": progress.ops if progress else {}})
        return
    deleted = progress.ops.get("delete", 0) if progress else 0
    output.console().print(f"Cluster {rec.name} destroyed ({deleted} resources deleted) and removed from the registry.")


def _cluster_name(target: str) -> str:
    """A stack file gives its `name`; anything else is a cluster name."""
    p = Path(target)
    if p.suffix in (".yaml", ".yml") or p.exists():
        from gpufleet import catalog, spec

        return spec.load(p, catalog.load(STATE.config)).name
    return target

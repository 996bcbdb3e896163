"""`gpufleet team init|show`, `gpufleet unlock CLUSTER` and `gpufleet log [CLUSTER]`."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from gpufleet.cli import options, output
from gpufleet.cli.output import STATE

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                  help="Share gpufleet through a store the team already has: a bucket, a PostgreSQL database or a "
                       "shared directory.")

STORE_URLS = ("s3://bucket/prefix, gs://bucket/prefix, azblob://account/container/prefix, "
              "postgres://user@host/db or file:///shared/dir")
INIT_HELP = (f"Make URL this user's team store ({STORE_URLS}): check that it is reachable and writable (a "
             "bucket's versioning too), then write the team setting. From then on `up`, `down` and `configure` hold "
             "the cluster's lease while they run, every such command is logged in the store, the registry of "
             "clusters lives there, and Pulumi keeps its state there (under pulumi/; in a database, its own table).")
SECRETS_HELP = ("What encrypts the secrets in the team's Pulumi state: passphrase (PULUMI_CONFIG_PASSPHRASE, the "
                "default) or a key the team holds: awskms://alias/NAME?region=R, gcpkms://projects/P/locations/L/"
                "keyRings/K/cryptoKeys/C, azurekeyvault://VAULT.vault.azure.net/keys/KEY, hashivault://KEY.")
UNLOCK_HELP = ("Break a cluster's lease whose holder died (its heartbeat stopped; expired after three missed "
               "heartbeats) and the Pulumi lock it guarded. A live lease is refused; --force breaks it anyway, "
               "naming the holder.")
LOG_HELP = "What happened to the team's clusters: who ran which command when, its outcome and launch price."


@app.command("init", help=INIT_HELP)
@output.handle_errors
def init(
    url: Annotated[str, typer.Argument(help=STORE_URLS)],
    secrets_provider: Annotated[str, typer.Option("--secrets-provider", help=SECRETS_HELP)] = "passphrase",
):
    from gpufleet.fleet import team

    got = team.init(url, secrets_provider=secrets_provider)
    for w in got.warnings:
        output.warn(w)
    if STATE.json:
        output.emit_json({"url": got.url, "versioning": got.versioning, "secrets_provider": got.secrets_provider,
                          "warnings": got.warnings})
        return
    output.console().print(f"Team store {got.url}: reachable and writable"
                           + ("" if got.versioning is None else f", versioning {'on' if got.versioning else 'off'}")
                           + ". Leases, the event log, the registry and Pulumi's state now live there; Pulumi's "
                           f"secrets are encrypted by {got.secrets_provider}.")


@app.command("show", help="The team store this user works in, if any.")
@output.handle_errors
def show():
    from gpufleet.state import team_config

    url = team_config.url()
    secrets = team_config.secrets_provider() if url else None
    if STATE.json:
        output.emit_json({"url": url, "secrets_provider": secrets})
        return
    output.console().print(f"{url} (Pulumi's secrets: {secrets})" if url else
                           "No team store: gpufleet works alone (gpufleet team init URL).")


@output.handle_errors
def unlock(
    cluster: Annotated[str, typer.Argument(help="The cluster whose lease to break.")],
    force: Annotated[bool, typer.Option("--force", help="Break a live lease too (its holder may still be changing "
                                        "the cluster).")] = False,
):
    from gpufleet.fleet import team

    got = team.unlock(cluster, force=force)
    if STATE.json:
        output.emit_json({"cluster": cluster, "broke": got.lease.__dict__ if got.lease else None,
                          "pulumi_locks": got.pulumi_locks})
        return
    if got.lease is None and not got.pulumi_locks:
        output.console().print(f"{cluster} has no lease and no Pulumi lock.")
        return
    if got.lease:
        output.console().print(f"Broke the lease of {cluster} held by {got.lease.holder} ({got.lease.command} on "
                               f"{got.lease.host}, pid {got.lease.pid}).")
    if got.pulumi_locks:
        output.console().print(f"Cleared {len(got.pulumi_locks)} Pulumi lock(s) of {cluster}.")


@output.handle_errors
def log(
    cluster: Annotated[Optional[str], typer.Argument(help="Only this cluster's events.")] = None,
    since: Annotated[Optional[str], typer.Option("--since", help="Only events this recent (e.g. 2d, 12h).")] = None,
):
    import datetime as dt

    from gpufleet.fleet import team

    span = options.duration("--since", since)
    after = dt.datetime.now(dt.timezone.utc) - span if span else None
    rows = team.log(cluster, after)
    if STATE.json:
        output.emit_json({"events": rows})
        return
    from gpufleet.cli.tables import person

    output.table("Team log" + (f": {cluster}" if cluster else ""), ["when", "who", "command", "cluster", "outcome", "$/h"],
                 [[e["at"][:16].replace("T", " "), person(e.get("who", "")), e.get("command", ""), e.get("cluster", ""),
                   e.get("outcome", ""), output.money(e["usd_per_hour"]) if e.get("usd_per_hour") is not None else ""]
                  for e in rows], wraps=("outcome",), optional=("cluster", "$/h"))

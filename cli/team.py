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
UNLOCK_HELP = ("Break a cluster's lease whose holder died and the Pulumi lock it guarded: the lease is watched "
               "until it has stayed unchanged for three heartbeats (about 95 s; a live holder renews it within 30 s, "
               "and the lease is refused; on the holder's own host, a holder whose process runs is refused at once). "
               "A Pulumi lock that lease's command did not write, or wrote while it was stopping, is shown and kept. "
               "--force breaks the lease and clears every Pulumi lock of the cluster at once, naming them, except "
               "one whose process still runs on this host.")
LOG_HELP = ("What happened to the team's clusters: who ran which command when, its outcome and launch price; "
            "alone, what `heal` did on this machine.")


@app.command("init", help=INIT_HELP)
@output.handle_errors
def init(
    url: Annotated[str, typer.Argument(help=STORE_URLS)],
    secrets_provider: Annotated[str, typer.Option("--secrets-provider", help=SECRETS_HELP)] = "passphrase",
):
    from gpufleet.fleet import team

    got = team.init(url, secrets_provider=secrets_provider, prompt=options.passphrase_prompt())
    for w in got.warnings:
        output.warn(w)
    if STATE.json:
        output.emit_json({"url": got.url, "versioning": got.versioning, "secrets_provider": got.secrets_provider,
                          "warnings": got.warnings, "carried": got.carried, "moved": got.moved})
        return
    output.console().print(f"Team store {got.url}: reachable and writable"
                           + ("" if got.versioning is None else f", versioning {'on' if got.versioning else 'off'}")
                           + ". Leases, the event log, the registry and Pulumi's state now live there; Pulumi's "
                           f"secrets are encrypted by {got.secrets_provider}."
                           + (f" Carried the {len(got.carried)} cluster(s) brought up alone on this machine into it: "
                              f"{', '.join(got.carried)}." if got.carried else "")
                           + (f" Their Pulumi state moved into the team's backend ({', '.join(got.moved)}); the copy "
                              "it came from is left as it was, and gpufleet no longer uses it." if got.moved else ""))


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

    def watching(lease, seconds: float) -> None:
        output.console(stderr=True).print(f"Watching the lease of {cluster} held by {lease.words()} for {seconds:.0f} s: "
                                          "a live holder renews it.", markup=False)
    got = team.unlock(cluster, force=force, on_watch=watching)
    if STATE.json:
        output.emit_json({"cluster": cluster, "broke": got.lease.__dict__ if got.lease else None,
                          "not_a_lease": got.not_a_lease, "pulumi_locks": got.pulumi_locks})
        return
    if got.not_a_lease:
        output.console().print(f"Deleted the lease object of {cluster}, which was not a gpufleet lease.")
    elif got.lease is None and not got.pulumi_locks:
        output.console().print(f"{cluster} has no lease and no Pulumi lock.")
        return
    if got.lease:
        output.console().print(f"Broke the lease of {cluster} held by {got.lease.words()}.", markup=False)
    if got.pulumi_locks:
        output.console().print(f"Cleared {len(got.pulumi_locks)} Pulumi lock(s) of {cluster}.")


@output.handle_errors
def log(
    cluster: Annotated[Optional[str], typer.Argument(help="Only this cluster's events.")] = None,
    since: Annotated[Optional[str], typer.Option("--since", help="Only events this recent (e.g. 2d, 12h).")] = None,
):
    import datetime as dt

    from gpufleet.fleet import team
    from gpufleet.state.shared import shown

    span = options.duration("--since", since)
    after = dt.datetime.now(dt.timezone.utc) - span if span else None
    skipped: dict[str, str] = {}
    rows = team.log(cluster, after, skipped)
    for key, why in skipped.items():
        output.warn(f"{shown(key, 200)} in the team's store is left out of the log: it {shown(why, 300)}")
    if STATE.json:
        output.emit_json({"events": rows, "skipped": skipped})
        return
    from gpufleet.cli.tables import person

    # every word of an event is the store's: sanitised (state.shared.shown)
    output.table("Team log" + (f": {cluster}" if cluster else ""), ["when", "who", "command", "cluster", "outcome", "$/h"],
                 [[shown(e["at"][:16].replace("T", " ")), shown(person(e.get("who", ""))), shown(e.get("command", "")),
                   shown(e.get("cluster", "")), shown(e.get("outcome", ""), 300),
                   output.money(e["usd_per_hour"]) if isinstance(e.get("usd_per_hour"), (int, float)) else ""]
                  for e in rows], wraps=("outcome",), optional=("cluster", "$/h"))

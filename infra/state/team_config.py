"""The team setting: the URL of the store a team shares (``gpufleet team init URL``), read by every
command. Without one, gpufleet works alone: registry, Pulumi state and no leases, on this machine."""

from __future__ import annotations

import errno
import json
import os
import urllib.parse

from gpufleet.errors import DiskFull, GpufleetError, InputError
from gpufleet.paths import make_dir, replace_atomically, team_path

SCHEMES = ("file", "s3", "gs", "azblob", "postgres")
BUCKETS = ("s3", "gs", "azblob")  # the schemes whose URL names a bucket (or a storage account) first
PASSPHRASE = "passphrase"
KMS_SCHEMES = ("awskms://", "gcpkms://", "azurekeyvault://", "hashivault://")
# libpq takes its connection parameters from a URL's query too, percent-decoded (postgresql.org/docs/current/
# libpq-connect.html#LIBPQ-CONNSTRING-URIS; psycopg's conninfo_to_dict gives {'password': ...} for
# ?password=): those that are secrets (#LIBPQ-PARAMKEYWORDS: password, sslpassword). passfile names a file.
QUERY_SECRETS = frozenset({"password", "sslpassword"})


def url() -> str | None:
    """``$GPUFLEET_TEAM`` when set, else the URL ``team init`` wrote, else None (no team)."""
    env = os.environ.get("GPUFLEET_TEAM")
    if env is not None:
        return check(env) if env else None  # GPUFLEET_TEAM= : alone, whatever the file says
    got = _setting()
    if got and "url" not in got:
        raise InputError(f"{team_path()}: not a gpufleet team setting (no url)", "run `gpufleet team init URL` again")
    return check(got["url"]) if got else None


def redacted(text: str) -> str:
    """``text`` with the password its URL may carry, in its user-info or its query (``QUERY_SECRETS``), as
    ``***`` (what an error may print)."""
    try:
        parts = urllib.parse.urlsplit(text)
        password = parts.password
    except ValueError:
        return text.split("://", 1)[0] + "://..."
    if password:
        text = text.replace(f":{password}@", ":***@", 1)
        parts = urllib.parse.urlsplit(text)
    if not _query_secrets(parts.query):
        return text
    query = "&".join(f"{pair.partition('=')[0]}=***" if urllib.parse.unquote_plus(pair.partition("=")[0])
                     in QUERY_SECRETS else pair for pair in parts.query.split("&"))
    return urllib.parse.urlunsplit(parts._replace(query=query))


def _query_secrets(query: str) -> list[str]:
    return sorted({k for k, _ in urllib.parse.parse_qsl(query, keep_blank_values=True)} & QUERY_SECRETS)


def check(text: str) -> str:
    """The store's URL, checked before anything is opened. It never carries a password: the URL is
    written to the team setting, printed by `team show`, and recorded as Pulumi's backend in every
    cluster's record in the store, which the whole team reads."""
    scheme = text.split("://", 1)[0] if "://" in text else ""
    if scheme not in SCHEMES:
        raise InputError(f"{redacted(text)!r} is not a team store's URL",
                         "write s3://bucket/prefix, gs://bucket/prefix, azblob://account/container, "
                         "postgres://host/db or file:///shared/dir")
    try:
        parts = urllib.parse.urlsplit(text)
        password = parts.password
    except ValueError as e:
        raise InputError(f"{redacted(text)!r} is not a team store's URL ({e})") from None
    secrets = _query_secrets(parts.query)
    if password is not None or secrets:
        where = f"its {' and '.join(secrets)} parameter" if secrets and password is None else "a password"
        raise InputError(f"{redacted(text)!r}: the URL carries {where}, which would be stored in the team setting "
                         "and in every cluster's record in the store",
                         "give it to PostgreSQL's client instead: PGPASSWORD, or a line in ~/.pgpass "
                         "(host:port:database:user:password, mode 0600)"
                         + ("; a client key's passphrase: keep the key unencrypted, mode 0600" if "sslpassword" in
                            secrets else "") + "; then write the URL without it, "
                         f"e.g. {scheme}://{parts.username}@{parts.hostname}{parts.path}")
    if scheme in BUCKETS and not parts.netloc:
        raise InputError(f"{text!r} names no bucket", f"write {scheme}://bucket/prefix")
    return text.rstrip("/")


def write(store_url: str, by: str, at: str, secrets_provider: str = PASSPHRASE) -> None:
    """The team setting, the user's alone (0600, whatever the umask): it names the store and its key."""
    path = team_path()
    make_dir(path.parent, "GPUFLEET_TEAM_FILE")
    doc = json.dumps({"url": store_url, "secrets_provider": secrets_provider, "by": by, "at": at}, indent=2) + "\n"
    try:
        replace_atomically(path, lambda f: f.write(doc), "GPUFLEET_TEAM_FILE", mode=0o600)
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise DiskFull(path.parent, f"the team setting {path} could not be written") from None
        raise GpufleetError(f"the team setting {path} could not be written ({e.strerror})",
                            "make its folder writable, or set GPUFLEET_TEAM_FILE to a file in one") from None


def _setting() -> dict:
    path = team_path()
    if not path.exists():
        return {}
    try:
        got = json.loads(path.read_text())
    except (ValueError, OSError) as e:
        raise InputError(f"{path}: not a gpufleet team setting ({e})", "run `gpufleet team init URL` again") from None
    if not isinstance(got, dict):
        raise InputError(f"{path}: not a gpufleet team setting (not an object)", "run `gpufleet team init URL` again")
    return got


def check_secrets_provider(text: str) -> str:
    """``passphrase`` or a key Pulumi encrypts the state's secrets with: ``awskms://``, ``gcpkms://``,
    ``azurekeyvault://``, ``hashivault://`` (pulumi.com/docs/iac/concepts/secrets, "Configuring
    secrets encryption")."""
    if text in ("passphrase", "default") or (text.startswith(KMS_SCHEMES) and text.split("://", 1)[1]):
        return PASSPHRASE if text == "default" else text
    raise InputError(f"{text!r} is not a Pulumi secrets provider",
                     "write passphrase, awskms://alias/NAME?region=R, gcpkms://projects/P/locations/L/keyRings/K/"
                     "cryptoKeys/C, azurekeyvault://VAULT.vault.azure.net/keys/KEY or hashivault://KEY")


def secrets_provider() -> str:
    """What encrypts the secrets in the team's Pulumi state: ``$GPUFLEET_SECRETS_PROVIDER``, else what
    ``team init --secrets-provider`` wrote, else the passphrase (``PULUMI_CONFIG_PASSPHRASE``)."""
    env = os.environ.get("GPUFLEET_SECRETS_PROVIDER")
    return check_secrets_provider(env) if env else _setting().get("secrets_provider", PASSPHRASE)

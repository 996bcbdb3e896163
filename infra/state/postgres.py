"""A team's store in PostgreSQL (``postgres://user@host:port/db[?table=name]``): the same five calls as
every store (``state.shared.SharedStore``), each one SQL statement, which PostgreSQL runs as one
transaction.

Objects are rows of ``gpufleet_team`` (``?table=`` names another; the rest of the URL is libpq's,
and ``PGPASSWORD``/``~/.pgpass`` supply a password the URL leaves out). A row's version comes from a
sequence, so a row deleted and created again never comes back at a version someone read before.
``create`` is ``INSERT ... ON CONFLICT DO NOTHING``; ``replace`` and ``delete`` name the version read
in their ``WHERE``: under READ COMMITTED a second writer waits on the first's row lock and then finds
the version gone, so it changes nothing and reads again
(postgresql.org/docs/15/transaction-iso.html#XACT-READ-COMMITTED).

Pulumi's own PostgreSQL backend (``pulumi login postgres://...?table=``, pulumi/pulumi#19581 of 2025,
pkg/backend/diy/postgres: rows of ``key, data, updated_at``) keeps its state in a table of its own,
``<table>_pulumi``. Its keys are the store's ``pulumi/...`` keys here, read and deleted at the
``updated_at`` read, so `unlock` clears Pulumi's lock in a database as it does in a bucket.
"""

from __future__ import annotations

import re
import urllib.parse

from gpufleet.errors import InputError, SdkMissing
from gpufleet.state import shared, team_config
from gpufleet.state.shared import StoreError

TABLE = "gpufleet_team"
PULUMI = "pulumi/"  # the keys that are Pulumi's, in its own table
_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,40}$")


def _psycopg():
    """psycopg 3, the one place it is imported (``pip install 'gpufleet[postgres]'``)."""
    try:
        import psycopg
    except ModuleNotFoundError:
        raise SdkMissing("postgres", "psycopg", "postgres") from None
    return psycopg


def split(url: str) -> tuple[str, str]:
    """``postgres://...?table=t&sslmode=require`` as (libpq's URL without ``table``, "t")."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    table = next((v for k, v in query if k == "table"), TABLE)
    if not _NAME.match(table):
        raise InputError(f"{url!r}: table {table!r} is not a plain table name",
                         "lowercase letters, digits and _, e.g. ?table=gpufleet_team")
    rest = urllib.parse.urlencode([(k, v) for k, v in query if k != "table"])
    return urllib.parse.urlunsplit(parts._replace(query=rest)), table


def pulumi_backend(url: str) -> str:
    """Pulumi's PostgreSQL backend in the same database, in the table beside the team's."""
    conninfo, table = split(url)
    sep = "&" if "?" in conninfo else "?"
    return f"{conninfo}{sep}table={table}_pulumi"


class PostgresStore:
    def __init__(self, url: str):
        self.url = url
        self._conninfo, self.table = split(url)
        self.pulumi_table = f"{self.table}_pulumi"
        pg = _psycopg()
        self._errors = pg.Error
        try:
            self._conn = pg.connect(self._conninfo, autocommit=True, connect_timeout=10)
        except pg.Error as e:
            raise StoreError(f"the team store {self._safe_url()} cannot be reached ({_first_line(e)})",
                             "check the host, the database, and the password (PGPASSWORD or ~/.pgpass)") from None
        self._sql(f"CREATE SEQUENCE IF NOT EXISTS {self.table}_version;"
                  f"CREATE TABLE IF NOT EXISTS {self.table} (key text PRIMARY KEY, body bytea NOT NULL, "
                  f"version bigint NOT NULL DEFAULT nextval('{self.table}_version'))")

    def _safe_url(self) -> str:
        """The URL without a password it may carry (never printed)."""
        return team_config.redacted(self.url)

    def _sql(self, query: str, args: tuple = ()):
        try:
            return self._conn.execute(query, args)
        except self._errors as e:
            raise StoreError(f"the team store {self._safe_url()} failed ({_first_line(e)})",
                             "check the database is up and this role may write the table") from None

    def _pulumi_table_exists(self) -> bool:
        return self._sql("SELECT to_regclass(%s) IS NOT NULL", (self.pulumi_table,)).fetchone()[0]

    def read(self, key: str) -> tuple[bytes, str] | None:
        """The row's body and version; a body over the cap is not sent (its size is, to name it)."""
        cap = shared.MAX_OBJECT_BYTES
        if key.startswith(PULUMI):
            if not self._pulumi_table_exists():
                return None
            row = self._sql(f"SELECT octet_length(data), CASE WHEN octet_length(data) <= %s THEN data END, "
                            f"updated_at::text FROM {self.pulumi_table} WHERE key = %s", (cap, key[len(PULUMI):])).fetchone()
        else:
            row = self._sql(f"SELECT octet_length(body), CASE WHEN octet_length(body) <= %s THEN body END, "
                            f"version::text FROM {self.table} WHERE key = %s", (cap, key)).fetchone()
        if row is None:
            return None
        shared.refuse_oversize(self.url, key, row[0])
        return bytes(row[1]), row[2]

    def create(self, key: str, body: bytes) -> bool:
        self._refuse_pulumi(key)
        cur = self._sql(f"INSERT INTO {self.table} (key, body) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING", (key, body))
        return cur.rowcount == 1

    def replace(self, key: str, body: bytes, version: str) -> bool:
        self._refuse_pulumi(key)
        cur = self._sql(f"UPDATE {self.table} SET body = %s, version = nextval('{self.table}_version') "
                        "WHERE key = %s AND version = %s", (body, key, int(version)))
        return cur.rowcount == 1

    def delete(self, key: str, version: str) -> bool:
        if key.startswith(PULUMI):
            if not self._pulumi_table_exists():
                return False
            cur = self._sql(f"DELETE FROM {self.pulumi_table} WHERE key = %s AND updated_at::text = %s",
                            (key[len(PULUMI):], version))
        else:
            cur = self._sql(f"DELETE FROM {self.table} WHERE key = %s AND version = %s", (key, int(version)))
        return cur.rowcount == 1

    def keys(self, prefix: str) -> list[str]:
        like = _like(prefix)
        if prefix.startswith(PULUMI):
            if not self._pulumi_table_exists():
                return []
            rows = self._sql(f"SELECT %s || key FROM {self.pulumi_table} WHERE key LIKE %s ORDER BY key",
                             (PULUMI, _like(prefix[len(PULUMI):])))
        else:
            rows = self._sql(f"SELECT key FROM {self.table} WHERE key LIKE %s ORDER BY key", (like,))
        return [r[0] for r in rows.fetchall()]

    @staticmethod
    def _refuse_pulumi(key: str) -> None:
        if key.startswith(PULUMI):  # Pulumi writes its own table; gpufleet only clears its locks
            raise InputError(f"{key!r} is Pulumi's: gpufleet does not write it")


def _like(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [e.__class__.__name__])[0][:300]

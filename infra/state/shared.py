"""A team's shared store: small JSON objects written only under a precondition, so that two writers
never lose an update.

Every store (a shared directory here; a bucket through its cloud's SDK, ``clouds/<cloud>/objects``)
answers the same five calls. ``read`` gives an object and its version (an S3 ETag, a GCS
generation, a Blob ETag; here a digest of the content); ``create`` writes only where nothing is
(S3 ``If-None-Match: *``); ``replace`` and ``delete`` only when the object is still at the version
read (S3 ``If-Match``). A call that loses the race returns False; the caller reads again.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Protocol

from gpufleet.errors import DiskFull, GpufleetError, InputError
from gpufleet.state import mounts


class SharedStore(Protocol):
    url: str

    def read(self, key: str) -> tuple[bytes, str] | None:
        """The object and its version, or None when there is none."""

    def create(self, key: str, body: bytes) -> bool:
        """Write ``key`` only if it does not exist; False when it does."""

    def replace(self, key: str, body: bytes, version: str) -> bool:
        """Write ``key`` only if it is still at ``version``; False otherwise (changed or gone)."""

    def delete(self, key: str, version: str) -> bool:
        """Delete ``key`` only if it is still at ``version``."""

    def keys(self, prefix: str) -> list[str]:
        """Every key under ``prefix``, sorted."""


def bucket_and_prefix(url: str) -> tuple[str, str]:
    """``scheme://bucket/some/prefix`` as ("bucket", "some/prefix/"); the prefix is "" when none."""
    bucket, _, prefix = url.split("://", 1)[1].partition("/")
    return bucket, prefix.strip("/") + "/" if prefix.strip("/") else ""


class InBucket:
    """What every bucket store shares: its URL, the key prefix inside the bucket, and the keys under it
    (``store``: the cloud's ``ObjectStore`` of the bucket, from ``store_of(bucket)``; ``parts`` splits the
    URL into the bucket and the prefix)."""

    def __init__(self, url: str, store_of, parts=bucket_and_prefix):
        self.url = url
        bucket, self.prefix = parts(url)
        self.store = store_of(bucket)

    def key_of(self, key: str) -> str:
        return self.prefix + key

    def keys(self, prefix: str) -> list[str]:
        found, _ = self.store.list(self.key_of(prefix))
        return sorted(k[len(self.prefix):] for k, _ in found)


class StoreError(GpufleetError):
    """The team's store could not be read or written."""


# The largest object read from a team's store (a registry record, the budgets, an event, a lease). The
# largest gpufleet writes is a cluster's record: 10,000 nodes with each host's status and facts come to
# some 40 MB. Anything larger is not ours: it is refused unread, named.
MAX_OBJECT_BYTES = 64 * 2**20


class BadObject(StoreError):
    """One object in the team's store is not what gpufleet writes there (too large, not JSON, another
    shape): named, so that it can be skipped or refused while the rest of the store works."""

    def __init__(self, url: str, key: str, problem: str, hint: str | None = None):
        self.key, self.problem = key, problem
        super().__init__(f"{url}/{key} {problem}", hint or f"look at it, then fix it or delete {key} in the store: "
                         "gpufleet never writes it so")


def refuse_oversize(url: str, key: str, size: int) -> None:
    """Every store's ``read`` asks this with the object's size before it reads the body."""
    if size > MAX_OBJECT_BYTES:
        raise BadObject(url, key, f"is {size:,} bytes, more than the {MAX_OBJECT_BYTES:,} an object of a team's "
                        "store may be; it was not read")


def shown(value, limit: int = 64) -> str:
    """Text from a team's store (or a node) as it may be shown to a person: it is not ours, so no control
    character, escape sequence or bidirectional override reaches the terminal (every character Python does
    not call printable), nor Rich's markup (``[``, ``]``, ``\\``), each replaced by ``?``; at most ``limit``
    characters. The one sanitiser for such text: leases, Pulumi's locks, the event log, a record's words."""
    text = "".join(c if c.isprintable() and c not in "[]\\" else "?" for c in str(value))
    return text[:limit]


def json_object(url: str, key: str, body: bytes) -> dict:
    """An object's body as the JSON object gpufleet writes, or BadObject naming it."""
    try:
        doc = json.loads(body)
    except ValueError as e:
        raise BadObject(url, key, f"is not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise BadObject(url, key, f"is not a JSON object (a {type(doc).__name__})")
    return doc


class DirectoryStore:
    """A shared directory (``file:///shared/gpufleet``, NFS or Lustre on a rack): each key a file,
    each conditional write made under an exclusive ``flock`` of the directory's lock file, each
    write atomic (a temporary file renamed over the key)."""

    def __init__(self, url: str):
        self.url = url
        self.root = Path(url.removeprefix("file://"))
        if not url.startswith("file:///"):
            raise InputError(f"{url!r} is not a shared directory's URL", "write an absolute path: file:///shared/gpufleet")
        if not self.root.is_dir():  # never made here: a folder made on an unmounted mount point is this disk's
            raise InputError(f"the team store {url} does not exist: {self.root} is not a folder",
                             "if it is on a shared file system, check that it is mounted here; to start a store, "
                             f"create the folder (mkdir -p {self.root}) and run `gpufleet team init {url}`")
        mounts.refuse_local_locks(self.root, url)

    def _path(self, key: str) -> Path:
        if ".." in key.split("/") or key.startswith("/"):
            raise InputError(f"{key!r} is not a key of the team store")
        return self.root / key

    @contextlib.contextmanager
    def _locked(self):
        try:
            fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o660)
        except OSError as e:
            raise StoreError(f"the team store {self.url} cannot be written ({e.strerror})",
                             "check the directory's permissions and that it is mounted") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError as e:  # Lustre mounted without -o flock: ENOSYS (state.mounts)
                raise StoreError(f"the team store {self.url} cannot be locked ({e.strerror})",
                                 "its file system must support flock(2) across machines: on Lustre mount it with "
                                 "-o flock, on NFS without nolock") from None
            yield
        finally:
            os.close(fd)  # closing releases the lock

    @staticmethod
    def _version(body: bytes) -> str:
        return hashlib.sha256(body).hexdigest()[:32]

    def read(self, key: str) -> tuple[bytes, str] | None:
        try:
            with open(self._path(key), "rb") as f:
                size = os.fstat(f.fileno()).st_size
                refuse_oversize(self.url, key, size)
                # its size and a byte, not the cap: a buffered read(n) allocates n bytes before it reads (CPython's
                # Modules/_io/bufferedio.c, _bufferedreader_read_generic, read 2026-11-28; tracemalloc on 3.11: 64 MiB
                # for each read of a small object)
                body = f.read(size + 1)
                if len(body) > size:  # grown since: read on, still no more than the cap
                    body += f.read(MAX_OBJECT_BYTES + 1 - len(body))
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StoreError(f"{self.url}/{key} cannot be read ({e.strerror})") from None
        refuse_oversize(self.url, key, len(body))
        return body, self._version(body)

    def _write(self, path: Path, body: bytes) -> None:
        tmp = path.parent / f".tmp-{uuid.uuid4().hex}"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # the team's to read through the folder's group (as the lock file), whatever else: 0660 less the umask
            with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o660), "wb") as f:
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            if e.errno == errno.ENOSPC:
                raise DiskFull(self.root, f"{self.url}/{path.relative_to(self.root)} could not be written") from None
            raise StoreError(f"{self.url}/{path.relative_to(self.root)} could not be written ({e.strerror})",
                             "check the directory's permissions and that it is mounted") from None

    def create(self, key: str, body: bytes) -> bool:
        path = self._path(key)
        with self._locked():
            if path.exists():
                return False
            self._write(path, body)
            return True

    def replace(self, key: str, body: bytes, version: str) -> bool:
        path = self._path(key)
        with self._locked():
            cur = self.read(key)
            if cur is None or cur[1] != version:
                return False
            self._write(path, body)
            return True

    def delete(self, key: str, version: str) -> bool:
        path = self._path(key)
        with self._locked():
            cur = self.read(key)
            if cur is None or cur[1] != version:
                return False
            path.unlink()
            return True

    def keys(self, prefix: str) -> list[str]:
        base = self._path(prefix.rstrip("/")) if prefix else self.root
        if not base.is_dir():
            return []
        return sorted(str(p.relative_to(self.root)) for p in base.rglob("*")
                      if p.is_file() and not p.name.startswith("."))

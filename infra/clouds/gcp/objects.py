"""The stack's GCS bucket through the Cloud Storage JSON API with google-auth's credentials
(``AuthorizedSession``): what `up` and `configure` publish for the nodes and read back.
https://cloud.google.com/storage/docs/json_api/v1/objects. ``GPUFLEET_GCS_ENDPOINT`` replaces
``https://storage.googleapis.com`` (a Private Service Connect endpoint, the tests' fake)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
import urllib.parse

import google.auth
import requests
from google.auth.exceptions import DefaultCredentialsError, RefreshError, TransportError
from google.auth.transport.requests import AuthorizedSession

from gpufleet.clouds.gcp.errors import CREDENTIAL_HINT
from gpufleet.errors import CloudUnreadable, CredentialsError
from gpufleet.state.shared import InBucket, refuse_oversize

PAGE = 1000
# Cloud Storage answers 429 to more than about one write a second to one object name, and 408/5xx when it
# is briefly unable to; the answer it asks for is to try again after an exponential backoff with jitter
# (cloud.google.com/storage/docs/retry-strategy; the object rate: cloud.google.com/storage/quotas). Every
# call of a store is retried so (a conditional write too: its precondition makes a repeat harmless), each
# wait drawn at random up to a ceiling that doubles ("full jitter"), at most ATTEMPTS tries. The same page
# lists socket timeouts and TCP disconnects among the errors to retry: a connection reset or a timeout is
# tried again too.
RETRIED = frozenset({408, 429, 500, 502, 503, 504})
ATTEMPTS = 6
BACKOFF_S = 1.0  # the first wait's ceiling
BACKOFF_MAX_S = 32.0


class Store:
    """``base.ObjectStore`` for one GCS bucket (``ref``: the pool export's ``bucket``)."""

    def __init__(self, ref: dict, session=None):
        self.bucket = ref["name"]
        self.endpoint = os.environ.get("GPUFLEET_GCS_ENDPOINT", "https://storage.googleapis.com").rstrip("/")
        self._session = session

    @property
    def session(self):
        if self._session is None:
            try:
                creds, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/devstorage.read_write"])
            except DefaultCredentialsError as e:
                raise CredentialsError("gcp", f"gcp: {str(e).splitlines()[0][:200]}", CREDENTIAL_HINT) from None
            self._session = AuthorizedSession(creds)
        return self._session

    def _object(self, key: str) -> str:
        return f"{self.endpoint}/storage/v1/b/{self.bucket}/o/{urllib.parse.quote(key, safe='')}"

    def _call(self, method: str, url: str, what: str, ok=(200,), **kw):
        for attempt in range(ATTEMPTS):
            if attempt:
                time.sleep(random.uniform(0, min(BACKOFF_MAX_S, BACKOFF_S * 2 ** (attempt - 1))))
            try:
                r = self.session.request(method, url, timeout=60, **kw)
            except (requests.ConnectionError, requests.Timeout) as e:  # a reset, a socket timeout: again
                if attempt + 1 < ATTEMPTS:
                    continue
                raise CloudUnreadable("gcp", "unreachable", str(e)[:300], f"gs://{self.bucket}/{what}") from None
            except (requests.RequestException, TransportError) as e:
                raise CloudUnreadable("gcp", "unreachable", str(e)[:300], f"gs://{self.bucket}/{what}") from None
            except RefreshError as e:
                raise CloudUnreadable("gcp", "refused", str(e)[:300], f"gs://{self.bucket}/{what}") from None
            if r.status_code not in RETRIED or r.status_code in ok:
                break
        if r.status_code not in ok:
            raise CloudUnreadable.http("gcp", r.status_code, r.text, f"gs://{self.bucket}/{what}")
        return r

    def put(self, key: str, body: bytes) -> None:
        self._call("POST", f"{self.endpoint}/upload/storage/v1/b/{self.bucket}/o", key,
                   params={"uploadType": "media", "name": key}, data=body,
                   headers={"Content-Type": "application/octet-stream"})

    def get(self, key: str) -> bytes:
        return self._call("GET", self._object(key), key, params={"alt": "media"}).content

    def exists(self, key: str) -> bool:
        return self._call("GET", self._object(key), key, ok=(200, 404)).status_code == 200

    def list(self, prefix: str) -> tuple[list[tuple[str, str]], int]:
        out, pages, token = [], 0, None
        while True:
            params = {"prefix": prefix, "maxResults": PAGE, "fields": "items(name,etag),nextPageToken"}
            if token:
                params["pageToken"] = token
            page = self._call("GET", f"{self.endpoint}/storage/v1/b/{self.bucket}/o", prefix, params=params).json()
            pages += 1
            out += [(o["name"], o["etag"]) for o in page.get("items", [])]
            token = page.get("nextPageToken")
            if not token:
                return out, pages

    def remove(self, key: str) -> None:
        # JSON API objects.delete: 204, or 404 when there is no such object (cloud.google.com/storage/docs/json_api/
        # v1/objects/delete, 2026-11-27)
        self._call("DELETE", self._object(key), key, ok=(200, 204, 404))

    def delete_all(self) -> int:
        keys, _ = self.list("")
        for key, _etag in keys:
            self._call("DELETE", self._object(key), key, ok=(200, 204, 404))
        return len(keys)


class Shared(InBucket):
    """``state.shared.SharedStore`` on a GCS bucket (``gs://bucket/prefix``): each object's generation
    is its version, and every write names the generation it expects (``ifGenerationMatch``; 0: the
    object must not exist), https://cloud.google.com/storage/docs/request-preconditions; Cloud
    Storage answers 412 Precondition Failed to the writer that lost."""

    def __init__(self, url: str, session=None):
        super().__init__(url, lambda bucket: Store({"name": bucket}, session))

    def read(self, key: str) -> tuple[bytes, str] | None:
        k = self.key_of(key)
        meta = self.store._call("GET", self.store._object(k), k, ok=(200, 404))
        if meta.status_code == 404:
            return None
        gen = meta.json()["generation"]
        refuse_oversize(self.url, key, int(meta.json().get("size", 0)))  # before the body is read
        body = self.store._call("GET", self.store._object(k), k, ok=(200, 404, 412),
                                params={"alt": "media", "ifGenerationMatch": gen})
        if body.status_code != 200:  # changed or deleted between the two reads: read it again
            return self.read(key)
        return body.content, str(gen)

    def _write(self, key: str, body: bytes, generation: str) -> bool:
        """A multipart upload (metadata + media, ``multipart/related``) under ``ifGenerationMatch``,
        https://cloud.google.com/storage/docs/uploading-objects#uploading-an-object (the emulator the
        tests run, fake-gcs-server, checks the precondition on this upload type)."""
        k = self.key_of(key)
        boundary = "gpufleet-" + hashlib.sha256(body).hexdigest()[:24]
        data = (f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n"
                f"{json.dumps({'name': k, 'contentType': 'application/json'})}\r\n"
                f"--{boundary}\r\nContent-Type: application/json\r\n\r\n").encode() + body + f"\r\n--{boundary}--".encode()
        r = self.store._call("POST", f"{self.store.endpoint}/upload/storage/v1/b/{self.store.bucket}/o", k,
                             ok=(200, 412), params={"uploadType": "multipart", "ifGenerationMatch": generation},
                             data=data, headers={"Content-Type": f"multipart/related; boundary={boundary}"})
        return r.status_code == 200

    def create(self, key: str, body: bytes) -> bool:
        return self._write(key, body, "0")

    def replace(self, key: str, body: bytes, version: str) -> bool:
        return self._write(key, body, version)

    def delete(self, key: str, version: str) -> bool:
        k = self.key_of(key)
        r = self.store._call("DELETE", self.store._object(k), k, ok=(200, 204, 404, 412),
                             params={"ifGenerationMatch": version})
        return r.status_code in (200, 204)

    def versioning(self, key: str) -> bool:
        """Whether the bucket keeps noncurrent generations (``versioning.enabled`` of the bucket's
        resource, cloud.google.com/storage/docs/json_api/v1/buckets); a bucket's setting, whatever ``key``."""
        b = self.store._call("GET", f"{self.store.endpoint}/storage/v1/b/{self.store.bucket}", "",
                             params={"fields": "versioning"}).json()
        return bool((b.get("versioning") or {}).get("enabled"))

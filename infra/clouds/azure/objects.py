"""The stack's Blob container through the Blob REST API with azure-identity's credential (Entra
ID tokens for ``https://storage.azure.com``; the account allows no shared keys): what `up`
and `configure` publish for the nodes and read back.
https://learn.microsoft.com/rest/api/storageservices/blob-service-rest-api.
``GPUFLEET_AZURE_BLOB_ENDPOINT`` replaces ``https://{account}.blob.core.windows.net`` (a
template with ``{account}``; the tests' fake)."""

from __future__ import annotations

import os
import time
import urllib.parse
import xml.etree.ElementTree as ET

from azure.core.exceptions import AzureError, ClientAuthenticationError
from azure.core.pipeline.transport import RequestsTransport
from azure.core.rest import HttpRequest

from gpufleet.clouds.azure import api
from gpufleet.errors import CloudUnreadable, InputError
from gpufleet.state import shared
from gpufleet.state.shared import InBucket

VERSION = "2021-08-06"  # x-ms-version
SCOPE = "https://storage.azure.com/.default"
PAGE = 1000
# the deployer's data role is assigned by the same `up` that publishes, and a role assignment takes
# a few minutes to take effect (up to 10: learn.microsoft.com/azure/role-based-access-control/
# troubleshooting, "role assignment changes are not being detected"); meanwhile Blob storage answers
# 403 AuthorizationPermissionMismatch, which is tried again for that long
PROPAGATION_S = 600
PROPAGATION_POLL_S = 10


class Store:
    """``base.ObjectStore`` for one container (``ref``: the pool export's ``bucket``)."""

    def __init__(self, ref: dict, credential=None):
        template = os.environ.get("GPUFLEET_AZURE_BLOB_ENDPOINT", "https://{account}.blob.core.windows.net")
        self.base = f"{template.format(account=ref['name']).rstrip('/')}/{ref.get('container', 'gpufleet')}"
        self._cred = credential
        self._transport = RequestsTransport()  # one connection pool for the store's life
        self._transport.open()

    def _call(self, method: str, url: str, what: str, ok=(200,), body: bytes | None = None, headers=None):
        deadline = time.monotonic() + PROPAGATION_S
        while True:
            resp = self._send(method, url, what, body, headers)
            if resp.status_code in ok:
                return resp
            if resp.headers.get("x-ms-error-code") != "AuthorizationPermissionMismatch" or time.monotonic() >= deadline:
                break
            time.sleep(PROPAGATION_POLL_S)
        err = CloudUnreadable.http("azure", resp.status_code, resp.text(), f"{self.base}/{what}")
        if resp.status_code == 403:
            err.hint = (f"the caller needs a data role on the container (Storage Blob Data Contributor; `up` assigns it "
                        f"to whoever runs it, and it takes up to {PROPAGATION_S // 60} minutes to take effect)")
        raise err

    def _send(self, method: str, url: str, what: str, body: bytes | None, headers):
        try:
            cred = self._cred = self._cred or api.default_credential()  # looked up when used: tests replace it
            token = cred.get_token(SCOPE).token
            req = HttpRequest(method, url, content=body, headers={
                "Authorization": f"Bearer {token}", "x-ms-version": VERSION, **(headers or {})})
            resp = self._transport.send(req)
            resp.read()
        except ClientAuthenticationError as e:
            raise CloudUnreadable("azure", "refused", str(e)[:300], f"{self.base}/{what}") from None
        except AzureError as e:
            raise CloudUnreadable("azure", "unreachable", str(e)[:300], f"{self.base}/{what}") from None
        return resp

    def _blob(self, key: str) -> str:
        return f"{self.base}/{urllib.parse.quote(key)}"

    def put(self, key: str, body: bytes) -> None:
        self._call("PUT", self._blob(key), key, ok=(201,), body=body,
                   headers={"x-ms-blob-type": "BlockBlob", "Content-Type": "application/octet-stream"})

    def get(self, key: str) -> bytes:
        return self._call("GET", self._blob(key), key).content

    def exists(self, key: str) -> bool:
        return self._call("HEAD", self._blob(key), key, ok=(200, 404)).status_code == 200

    def list(self, prefix: str) -> tuple[list[tuple[str, str]], int]:
        out, pages, marker = [], 0, ""
        while True:
            q = urllib.parse.urlencode({"restype": "container", "comp": "list", "prefix": prefix, "maxresults": PAGE,
                                        **({"marker": marker} if marker else {})})
            root = ET.fromstring(self._call("GET", f"{self.base}?{q}", prefix).content)
            pages += 1
            out += [(b.findtext("Name"), b.findtext("Properties/Etag")) for b in root.iter("Blob")]
            marker = root.findtext("NextMarker") or ""
            if not marker:
                return out, pages

    def remove(self, key: str) -> None:
        # Delete Blob: 202 Accepted, 404 BlobNotFound when there is none (learn.microsoft.com/rest/api/
        # storageservices/delete-blob, 2026-11-27)
        self._call("DELETE", self._blob(key), key, ok=(202, 404))

    def delete_all(self) -> int:
        keys, _ = self.list("")
        for key, _etag in keys:
            self._call("DELETE", self._blob(key), key, ok=(202, 404))
        return len(keys)


# what Blob storage answers to the writer whose precondition failed: 412 ConditionNotMet (If-Match), 409
# BlobAlreadyExists (If-None-Match: * on a blob that exists); both mean "read again"
# (learn.microsoft.com/rest/api/storageservices/specifying-conditional-headers-for-blob-service-operations,
# .../blob-service-error-codes)
LOST = {(412, "ConditionNotMet"), (409, "BlobAlreadyExists")}
# a 404 that is no race: the container is not there (a mistyped URL, a container deleted), which no
# reading again mends; only BlobNotFound means the blob is gone (the same page of error codes)
NO_CONTAINER = "ContainerNotFound"


class Shared(InBucket):
    """``state.shared.SharedStore`` on a Blob container (``azblob://account/container/prefix``): a blob's
    ETag is its version; Put Blob with ``If-None-Match: *`` creates, with ``If-Match: <ETag>`` replaces,
    and Delete Blob with ``If-Match`` deletes, each only when the blob is as read."""

    def __init__(self, url: str, credential=None):
        super().__init__(url, lambda bucket: Store({"name": bucket.split("/")[0], "container": bucket.split("/")[1]},
                                                   credential), parts=account_container_and_prefix)

    def read(self, key: str) -> tuple[bytes, str] | None:
        """The blob, no more of it than a store's object may be: Get Blob of the range up to one byte past the
        cap (206, its whole size after the slash of Content-Range; learn.microsoft.com/rest/api/
        storageservices/specifying-the-range-header-for-blob-service-operations). An empty blob has no
        such range (416): it is read whole."""
        k = self.key_of(key)
        r = self.store._call("GET", self.store._blob(k), k, ok=(200, 206, 404, 416),
                             headers={"x-ms-range": f"bytes=0-{shared.MAX_OBJECT_BYTES}"})
        if r.status_code == 416:
            r = self.store._call("GET", self.store._blob(k), k, ok=(200, 404))
        if r.status_code == 404:
            self._refuse_no_container(r)
            return None
        whole = r.headers.get("Content-Range", "").rpartition("/")[2]
        shared.refuse_oversize(self.url, key, int(whole) if whole.isdigit() else len(r.content))
        return r.content, r.headers["ETag"]

    def _conditional(self, method: str, key: str, condition: dict, ok: tuple, body: bytes | None = None) -> bool:
        k = self.key_of(key)
        headers = {**condition, **({"x-ms-blob-type": "BlockBlob", "Content-Type": "application/json"} if body is not None
                                   else {})}
        r = self.store._call(method, self.store._blob(k), k, ok=(*ok, 404, 409, 412), body=body, headers=headers)
        if r.status_code in ok:
            return True
        if r.status_code == 404:
            self._refuse_no_container(r)
        if r.status_code == 404 or (r.status_code, r.headers.get("x-ms-error-code")) in LOST:
            return False  # gone, or changed since it was read
        raise CloudUnreadable.http("azure", r.status_code, r.text(), f"{self.store.base}/{k}")

    def _refuse_no_container(self, r) -> None:
        if r.headers.get("x-ms-error-code") == NO_CONTAINER:
            raise InputError(f"the team store {self.url}: its container {self.store.base} does not exist",
                             "check the URL (azblob://account/container/prefix), or create the container "
                             "(az storage container create --auth-mode login)")

    def create(self, key: str, body: bytes) -> bool:
        return self._conditional("PUT", key, {"If-None-Match": "*"}, (201,), body)

    def replace(self, key: str, body: bytes, version: str) -> bool:
        return self._conditional("PUT", key, {"If-Match": version}, (201,), body)

    def delete(self, key: str, version: str) -> bool:
        return self._conditional("DELETE", key, {"If-Match": version}, (202,))

    def versioning(self, key: str) -> bool:
        """Whether the account keeps blob versions: Get Blob Properties names the version of ``key`` (a
        blob just written) in ``x-ms-version-id`` only then
        (learn.microsoft.com/rest/api/storageservices/get-blob-properties)."""
        k = self.key_of(key)
        return "x-ms-version-id" in self.store._call("HEAD", self.store._blob(k), k).headers


def account_container_and_prefix(url: str) -> tuple[str, str]:
    """``azblob://account/container/some/prefix`` as ("account/container", "some/prefix/")."""
    account, _, rest = url.split("://", 1)[1].partition("/")
    container, _, prefix = rest.partition("/")
    if not account or not container:
        raise InputError(f"{url!r} names no storage account and container", "write azblob://account/container/prefix")
    return f"{account}/{container}", prefix.strip("/") + "/" if prefix.strip("/") else ""

"""Stand-ins for the object stores the cloud nodes configure themselves from, where nothing real
can run here (moto covers S3): Google Cloud Storage's JSON API and Azure Blob storage's REST API,
each with the token endpoint a node asks for its identity's token.

* ``GcsFake``: ``GET /storage/v1/b?project=&prefix=`` (buckets with ``labels``, ``location``,
  ``timeCreated``), ``DELETE /storage/v1/b/{bucket}`` (``409`` while it holds objects),
  ``GET /storage/v1/b/{bucket}/o?prefix=&pageToken=&maxResults=`` (``{"items":
  [{"name", "etag", "generation"}], "nextPageToken"}``), ``GET .../o/{object}`` (metadata),
  ``GET .../o/{object}?alt=media`` (the bytes), ``POST /upload/storage/v1/b/{bucket}/o?
  uploadType=media&name=`` and ``DELETE .../o/{object}``, as
  https://cloud.google.com/storage/docs/json_api/v1/objects documents them; the metadata
  server's ``/computeMetadata/v1/instance/service-accounts/default/token`` (``Metadata-Flavor:
  Google`` required).
* ``BlobFake``: ``GET /{account}/{container}?restype=container&comp=list&prefix=&marker=&
  maxresults=`` (``EnumerationResults`` XML with ``Blobs/Blob/{Name, Properties/Etag}`` and
  ``NextMarker``), ``GET``/``HEAD``/``PUT`` (``x-ms-blob-type: BlockBlob``)/``DELETE`` of
  ``/{account}/{container}/{blob}``, as https://learn.microsoft.com/rest/api/storageservices/
  (List Blobs, Get/Put/Delete Blob) documents them; IMDS's ``/metadata/identity/oauth2/token``
  (``Metadata: true`` required).

Every object call must carry ``Authorization: Bearer <token>`` as the real services require.
"""

from __future__ import annotations

import hashlib
import urllib.parse
from xml.sax.saxutils import escape

from fakes.jsonserver import JsonServer

TOKEN = "fake-node-token"


class _Objects(JsonServer):
    parse_bodies = False

    def __init__(self, host: str = "127.0.0.1"):
        super().__init__(host=host)
        self.objects: dict[tuple[str, str], bytes] = {}  # (bucket or account/container, name) -> bytes
        self.buckets: dict[str, dict] = {}  # GCS: bucket name -> its resource (labels, location)
        self.requests: list[tuple[str, str]] = []

    def reset(self) -> None:
        with self.lock:
            self.objects.clear()
            self.buckets.clear()
            self.requests.clear()
            self.faults.clear()

    def etag(self, data: bytes) -> str:
        return hashlib.md5(data).hexdigest()  # noqa: S324 - what the services' ETags are made of


def _header(headers: dict, name: str) -> str:
    return next((v for k, v in headers.items() if k.lower() == name.lower()), "")


def _bearer(headers: dict) -> bool:
    return _header(headers, "Authorization").startswith("Bearer ")


class GcsFake(_Objects):
    def bucket(self, name: str, labels: dict, location: str = "US-CENTRAL1") -> None:
        with self.lock:
            self.buckets[name] = {"kind": "storage#bucket", "name": name, "labels": labels, "location": location,
                                  "timeCreated": "2026-11-22T06:00:00.000Z"}

    def route(self, method, path, query, body, headers):
        if path == "/computeMetadata/v1/instance/service-accounts/default/token":
            if _header(headers, "Metadata-Flavor") != "Google":
                return 403, {"error": "Missing Metadata-Flavor:Google header"}, {}
            return 200, {"access_token": TOKEN, "expires_in": 3599, "token_type": "Bearer"}, {}
        if not _bearer(headers):
            return 401, {"error": {"code": 401, "message": "Anonymous caller does not have storage.objects access"}}, {}
        self.requests.append((method, path))
        if path == "/storage/v1/b" and method == "GET":
            return 200, {"kind": "storage#buckets", "items": [
                b for n, b in sorted(self.buckets.items()) if n.startswith(query.get("prefix", ""))]}, {}
        m = path.removeprefix("/storage/v1/b/")
        if "/" not in m and method in ("GET", "DELETE") and not path.startswith("/upload"):
            if m not in self.buckets:
                return 404, {"error": {"code": 404, "message": "The specified bucket does not exist."}}, {}
            if method == "GET":
                return 200, self.buckets[m], {}
            if any(b == m for b, _ in self.objects):
                return 409, {"error": {"code": 409, "message": "The bucket you tried to delete is not empty."}}, {}
            del self.buckets[m]
            return 204, b"", {}
        up = path.startswith("/upload/storage/v1/b/")
        parts = path.removeprefix("/upload").removeprefix("/storage/v1/b/").split("/o", 1)
        bucket = parts[0]
        name = urllib.parse.unquote(parts[1].lstrip("/")) if len(parts) > 1 else ""
        if up and method == "POST":
            self.objects[(bucket, query["name"])] = body
            return 200, {"name": query["name"], "bucket": bucket, "etag": self.etag(body)}, {}
        if method == "GET" and not name:
            keys = sorted(k for b, k in self.objects if b == bucket and k.startswith(query.get("prefix", "")))
            start, size = int(query.get("pageToken") or 0), int(query.get("maxResults") or 1000)
            out = {"kind": "storage#objects", "items": [
                {"name": k, "etag": self.etag(self.objects[(bucket, k)]), "generation": "1"} for k in keys[start:start + size]]}
            if start + size < len(keys):
                out["nextPageToken"] = str(start + size)
            return 200, out, {}
        if (bucket, name) not in self.objects:
            return 404, {"error": {"code": 404, "message": f"No such object: {bucket}/{name}"}}, {}
        if method == "DELETE":
            del self.objects[(bucket, name)]
            return 204, b"", {}
        data = self.objects[(bucket, name)]
        if query.get("alt") == "media":
            return 200, data, {"Content-Type": "application/octet-stream"}
        return 200, {"name": name, "bucket": bucket, "etag": self.etag(data), "size": str(len(data))}, {}


class BlobFake(_Objects):
    def route(self, method, path, query, body, headers):
        if path == "/metadata/identity/oauth2/token":
            if _header(headers, "Metadata") != "true":
                return 400, {"error": "invalid_request", "error_description": "Required metadata header not specified"}, {}
            return 200, {"access_token": TOKEN, "expires_in": "3599", "token_type": "Bearer",
                         "client_id": query.get("client_id", "")}, {}
        if not _bearer(headers) or not _header(headers, "x-ms-version"):
            return 401, b"<Error><Code>NoAuthenticationInformation</Code></Error>", {"Content-Type": "application/xml"}
        self.requests.append((method, path))
        parts = path.strip("/").split("/", 2)
        account, container = parts[0], parts[1] if len(parts) > 1 else ""
        box = f"{account}/{container}"
        if query.get("comp") == "list" and query.get("restype") == "container":
            keys = sorted(k for b, k in self.objects if b == box and k.startswith(query.get("prefix", "")))
            start, size = int(query.get("marker") or 0), int(query.get("maxresults") or 5000)
            blobs = "".join(f"<Blob><Name>{escape(k)}</Name><Properties><Etag>0x{self.etag(self.objects[(box, k)])}"
                            "</Etag></Properties></Blob>" for k in keys[start:start + size])
            nxt = str(start + size) if start + size < len(keys) else ""
            xml = (f'<?xml version="1.0" encoding="utf-8"?><EnumerationResults ContainerName="{container}">'
                   f"<Blobs>{blobs}</Blobs><NextMarker>{nxt}</NextMarker></EnumerationResults>")
            return 200, xml.encode(), {"Content-Type": "application/xml"}
        name = urllib.parse.unquote(parts[2]) if len(parts) > 2 else ""
        if method == "PUT":
            self.objects[(box, name)] = body
            return 201, b"", {"ETag": f'"0x{self.etag(body)}"'}
        if (box, name) not in self.objects:
            return 404, b"<Error><Code>BlobNotFound</Code></Error>", {"Content-Type": "application/xml",
                                                                    "x-ms-error-code": "BlobNotFound"}
        if method == "DELETE":
            del self.objects[(box, name)]
            return 202, b"", {}
        return 200, self.objects[(box, name)], {"Content-Type": "application/octet-stream"}

"""The stack's S3 bucket through boto3: what `up` and `configure` publish to the nodes and read
back from them, and emptying it (every version and delete marker) before it is deleted.

boto3 honours ``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_S3``; a bucket reference that names an
``endpoint`` (an S3-compatible store the nodes were told about) uses it explicitly.
"""

from __future__ import annotations

import botocore
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from gpufleet.clouds.aws import credentials
from gpufleet.clouds.aws.api import empty_bucket, unreadable
from gpufleet.clouds.aws.errors import CREDENTIAL_HINT
from gpufleet.errors import EXIT_BAD_INPUT, CredentialsError, GpufleetError
from gpufleet.state.shared import InBucket, refuse_oversize

PAGE = 1000  # ListObjectsV2's largest page


class Store:
    """``base.ObjectStore`` for one S3 bucket (``ref``: the pool export's ``bucket``)."""

    def __init__(self, ref: dict, session=None):
        self.bucket = ref["name"]
        self.client = (session or credentials.session()).client(
            "s3", region_name=ref.get("region"), endpoint_url=ref.get("endpoint"),
            config=Config(retries={"mode": "standard", "max_attempts": 6}, connect_timeout=10, read_timeout=60))

    def _fail(self, e, what: str):
        if isinstance(e, NoCredentialsError):  # found before any request: running it again cannot help
            return CredentialsError("aws", f"aws: no credentials found to reach s3://{self.bucket}/{what}", CREDENTIAL_HINT)
        return unreadable(e, f"s3://{self.bucket}/{what}")

    def put(self, key: str, body: bytes) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=body)
        except (BotoCoreError, ClientError) as e:
            raise self._fail(e, key) from None

    def get(self, key: str) -> bytes:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except (BotoCoreError, ClientError) as e:
            raise self._fail(e, key) from None

    def exists(self, key: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=key)
            return True
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise self._fail(e, key) from None
        except BotoCoreError as e:
            raise self._fail(e, key) from None

    def list(self, prefix: str) -> tuple[list[tuple[str, str]], int]:
        """(key, ETag) of every object under ``prefix``, and how many list requests that took."""
        out, pages, token = [], 0, None
        try:
            while True:
                kw = {"Bucket": self.bucket, "Prefix": prefix, "MaxKeys": PAGE}
                if token:
                    kw["ContinuationToken"] = token
                page = self.client.list_objects_v2(**kw)
                pages += 1
                out += [(o["Key"], o["ETag"]) for o in page.get("Contents", [])]
                token = page.get("NextContinuationToken")
                if not page.get("IsTruncated"):
                    return out, pages
        except (BotoCoreError, ClientError) as e:
            raise self._fail(e, prefix) from None

    def remove(self, key: str) -> None:
        # DeleteObject answers 204 whether the key was there or not (S3 API reference, DeleteObject; 2026-11-27)
        try:
            self.client.delete_object(Bucket=self.bucket, Key=key)
        except (BotoCoreError, ClientError) as e:
            raise self._fail(e, key) from None

    def delete_all(self) -> int:
        try:
            return empty_bucket(self.client, self.bucket)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") == "NoSuchBucket":
                return 0
            raise self._fail(e, "") from None
        except BotoCoreError as e:
            raise self._fail(e, "") from None


PRECONDITION = ("PreconditionFailed", "ConditionalRequestConflict", "412")
# If-Match on a key that is gone (deleted since it was read) is answered 404 NoSuchKey, not 412
# (docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html, "Conditional write behavior";
# moto 5.2's server answers PutObject and DeleteObject so too): the race was lost as well
GONE = ("NoSuchKey", "404")
# The first botocore (and boto3, whose releases pin the botocore of their number) whose S3 model has every
# condition the store sends: PutObject IfNoneMatch and IfMatch, DeleteObject IfMatch. Read from the
# models in the wheels on PyPI (botocore/data/s3/2006-03-01/service-2.json.gz): 1.35.68's PutObject has
# no IfMatch yet, 1.35.69's (November 2024) has all three. pyproject's floor for boto3 is this.
CONDITIONAL_WRITES = "1.35.69"
CONDITIONS = {"PutObject": ("IfNoneMatch", "IfMatch"), "DeleteObject": ("IfMatch",)}


class Shared(InBucket):
    """``state.shared.SharedStore`` on an S3 bucket (``s3://bucket/prefix``): conditional writes as S3
    makes them (PutObject ``If-None-Match: *`` to create, ``If-Match: <ETag>`` to replace, DeleteObject
    ``If-Match``; S3 answers 412 PreconditionFailed, or 409 ConditionalRequestConflict when another
    write to the key is in flight: both mean "read again", as does 404 NoSuchKey when the key is gone),
    docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-requests.html."""

    def __init__(self, url: str, session=None):
        super().__init__(url, lambda bucket: Store({"name": bucket}, session))
        model = self.store.client.meta.service_model
        lacking = [f"{op} {member}" for op, members in CONDITIONS.items() for member in members
                   if member not in model.operation_model(op).input_shape.members]
        if lacking:  # every write would be refused by botocore itself ("Unknown parameter in input")
            raise GpufleetError(f"botocore {botocore.__version__} cannot write a team's store in S3: its S3 model has "
                                f"no {', '.join(lacking)} (S3's conditional writes)",
                                f"pip install 'boto3>={CONDITIONAL_WRITES}'", exit_code=EXIT_BAD_INPUT)

    def _conditional(self, call, **kw) -> bool:
        try:
            call(Bucket=self.store.bucket, **kw)
            return True
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code")
            if code in PRECONDITION or (code in GONE and "IfMatch" in kw):
                return False
            raise self.store._fail(e, kw["Key"]) from None
        except BotoCoreError as e:
            raise self.store._fail(e, kw["Key"]) from None

    def read(self, key: str) -> tuple[bytes, str] | None:
        try:
            got = self.store.client.get_object(Bucket=self.store.bucket, Key=self.key_of(key))
            with got["Body"] as body:  # the size is known before the body is read
                refuse_oversize(self.url, key, got["ContentLength"])
                return body.read(), got["ETag"]
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise self.store._fail(e, self.key_of(key)) from None
        except BotoCoreError as e:
            raise self.store._fail(e, self.key_of(key)) from None

    def create(self, key: str, body: bytes) -> bool:
        return self._conditional(self.store.client.put_object, Key=self.key_of(key), Body=body, IfNoneMatch="*")

    def replace(self, key: str, body: bytes, version: str) -> bool:
        return self._conditional(self.store.client.put_object, Key=self.key_of(key), Body=body, IfMatch=version)

    def delete(self, key: str, version: str) -> bool:
        return self._conditional(self.store.client.delete_object, Key=self.key_of(key), IfMatch=version)

    def versioning(self, key: str) -> bool:
        """Whether the bucket keeps old versions (a deleted or overwritten lease or event can be recovered);
        a bucket's setting, whatever ``key``."""
        try:
            return self.store.client.get_bucket_versioning(Bucket=self.store.bucket).get("Status") == "Enabled"
        except (BotoCoreError, ClientError) as e:
            raise self.store._fail(e, "") from None

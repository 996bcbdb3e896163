"""moto's HTTP server, plus the AWS APIs gpufleet uses that moto (5.2) lacks or only stubs.

Everything goes over HTTP: boto3 is pointed at this server with ``AWS_ENDPOINT_URL``. moto
answers EC2, STS and FSx itself. In front of it, a small WSGI layer answers, in AWS's
documented wire formats, what moto does not implement:

* EC2 placement groups (moto raises NotImplementedError for CreatePlacementGroup): the EC2
  Query API actions CreatePlacementGroup, DescribePlacementGroups (filters ``tag-key``,
  ``tag:<key>``, ``group-name``) and DeletePlacementGroup, answered in the EC2 XML
  format (``placementGroupSet/item`` with ``groupName``, ``groupId``, ``strategy``,
  ``state``, ``tagSet``), errors as ``Response/Errors/Error`` with EC2's codes
  (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribePlacementGroups.html);
* Service Quotas for EC2 (moto knows only the VPC quotas): the JSON 1.1 actions
  ``ServiceQuotasV20190624.GetServiceQuota`` and ``GetAWSDefaultServiceQuota`` answering
  ``{"Quota": {...}}`` as in the AWS CLI reference's example, ``NoSuchResourceException``
  for quotas a test did not set;
* the Price List API (moto has none): ``AWSPriceListService.GetProducts`` answering
  ``{"FormatVersion": "aws_v1", "PriceList": ["<product JSON>", ...], "NextToken"}`` with
  TERM_MATCH filters on the product attributes, from products a test puts in
  ``extras.products`` (the documented product/terms shape);
* spot price history with real-looking prices: moto answers DescribeSpotPriceHistory with a
  placeholder $0.00001; when a test puts rows in ``extras.spot[region]`` this layer answers
  instead, in the EC2 XML format (``spotPriceHistorySet/item``);
* refused credentials and denied permissions (moto accepts any key and allows everything): a
  request signed with an access key in ``extras.refused_keys`` gets STS's or EC2's
  ``InvalidClientTokenId`` / ``AuthFailure`` answer (HTTP 403, STS's ``ErrorResponse/Error``
  or EC2's ``Response/Errors/Error``); an EC2 action in ``extras.denied`` gets
  ``UnauthorizedOperation`` (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html,
  https://docs.aws.amazon.com/STS/latest/APIReference/CommonErrors.html);
* atomic conditional writes: moto checks an S3 PUT's or DELETE's If-Match/If-None-Match and then
  writes, without a lock, so two writers on one ETag could both succeed; S3 lets the first to
  finish win and answers the others 412
  (https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html). This layer
  hands moto S3's writes one at a time.

Tests set quota values on ``server.extras.quotas[(region, code)]``. Run standalone (the
benchmark does, in its own process): ``python tests/fakes/aws.py PORT``.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
import zlib
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

EC2_NS = "http://ec2.amazonaws.com/doc/2016-11-15/"
_REGION = re.compile(r"Credential=[^/]+/\d{8}/([a-z0-9-]+)/")
_KEY_SERVICE = re.compile(r"Credential=([^/]+)/\d{8}/[a-z0-9-]+/([a-z0-9-]+)/")


class Extras:
    """The WSGI layer: answers what moto lacks, hands everything else to moto."""

    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()
        self.s3_writes = threading.Lock()  # moto's check of a write's condition and the write, as one
        self.groups: dict[tuple[str, str], dict] = {}  # (region, name) -> group
        self.quotas: dict[tuple[str, str], float] = {}  # (region, quota code) -> value
        self.products: list[dict] = []  # Price List entries (product + terms)
        self.spot: dict[str, list[dict]] = {}  # region -> [{instance_type, zone, price}]
        self.refused_keys: set[str] = set()  # access keys AWS does not accept
        self.denied: set[str] = set()  # EC2 actions the credentials may not call
        self.page_size = 100

    def reset(self) -> None:
        with self.lock:
            self.groups.clear()
            self.quotas.clear()
            self.products.clear()
            self.spot.clear()
            self.refused_keys.clear()
            self.denied.clear()

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path == "/moto-api/reset":
            self.reset()
            return self.app(environ, start_response)
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        m = _KEY_SERVICE.search(environ.get("HTTP_AUTHORIZATION", ""))
        key, service = m.groups() if m else (None, None)
        if key in self.refused_keys:
            return _refused(start_response, service)
        if service == "s3" and environ.get("REQUEST_METHOD") in ("PUT", "DELETE"):
            with self.s3_writes:
                return self.app(environ, start_response)
        if environ.get("REQUEST_METHOD") != "POST" or not (
                target.startswith(("ServiceQuotasV20190624.", "AWSPriceListService.")) or
                "/ec2/" in environ.get("HTTP_AUTHORIZATION", "")):
            return self.app(environ, start_response)
        body = self._body(environ)
        region = (_REGION.search(environ.get("HTTP_AUTHORIZATION", "")) or [None, "us-east-1"])[1]
        if target.startswith("ServiceQuotasV20190624."):
            return self._quotas(target.split(".", 1)[1], json.loads(body or b"{}"), region, start_response)
        if target == "AWSPriceListService.GetProducts":
            return self._products(json.loads(body or b"{}"), start_response)
        form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
        action = form.get("Action", "")
        if action in self.denied:
            return _ec2_error(start_response, "UnauthorizedOperation", "You are not authorized to perform this "
                              "operation.", status="403 Forbidden")
        if action in ("CreatePlacementGroup", "DescribePlacementGroups", "DeletePlacementGroup"):
            return getattr(self, "_" + action)(form, region, start_response)
        if action == "DescribeSpotPriceHistory" and self.spot.get(region):
            return self._spot_history(form, region, start_response)
        environ["wsgi.input"] = _Replay(body)
        return self.app(environ, start_response)

    @staticmethod
    def _body(environ) -> bytes:
        n = int(environ.get("CONTENT_LENGTH") or 0)
        return environ["wsgi.input"].read(n) if n else b""

    # --- EC2 placement groups ---------------------------------------------------------------
    def _CreatePlacementGroup(self, form, region, start):
        name = form.get("GroupName", "")
        tags = {}
        i = 1
        while f"TagSpecification.1.Tag.{i}.Key" in form:
            tags[form[f"TagSpecification.1.Tag.{i}.Key"]] = form.get(f"TagSpecification.1.Tag.{i}.Value", "")
            i += 1
        with self.lock:
            if (region, name) in self.groups:
                return _ec2_error(start, "InvalidPlacementGroup.Duplicate", f"The Placement Group '{name}' already exists.")
            g = {"name": name, "id": "pg-" + uuid.uuid4().hex[:17], "strategy": form.get("Strategy", "cluster"),
                 "tags": tags}
            self.groups[(region, name)] = g
        return _ec2_ok(start, "CreatePlacementGroup", "<return>true</return><placementGroup>" + _group_xml(g, region)
                       + "</placementGroup>")

    def _DescribePlacementGroups(self, form, region, start):
        filters = {}
        i = 1
        while f"Filter.{i}.Name" in form:
            vals, j = [], 1
            while f"Filter.{i}.Value.{j}" in form:
                vals.append(form[f"Filter.{i}.Value.{j}"])
                j += 1
            filters[form[f"Filter.{i}.Name"]] = vals
            i += 1
        with self.lock:
            groups = [g for (r, _), g in self.groups.items() if r == region and _match(g, filters)]
        items = "".join(f"<item>{_group_xml(g, region)}</item>" for g in groups)
        return _ec2_ok(start, "DescribePlacementGroups", f"<placementGroupSet>{items}</placementGroupSet>")

    def _DeletePlacementGroup(self, form, region, start):
        name = form.get("GroupName", "")
        with self.lock:
            if (region, name) not in self.groups:
                return _ec2_error(start, "InvalidPlacementGroup.Unknown", f"The Placement Group '{name}' is unknown.")
            del self.groups[(region, name)]
        return _ec2_ok(start, "DeletePlacementGroup", "<return>true</return>")

    # --- Price List and spot prices -------------------------------------------------------
    def _products(self, req, start):
        match = {f["Field"]: f["Value"] for f in req.get("Filters", []) if f.get("Type") == "TERM_MATCH"}
        with self.lock:
            rows = [p for p in self.products if req.get("ServiceCode") == p.get("serviceCode", "AmazonEC2")
                    and all(p["product"]["attributes"].get(k) == v for k, v in match.items())]
        skip = int(req.get("NextToken") or 0)
        size = int(req.get("MaxResults") or self.page_size)
        out = {"FormatVersion": "aws_v1", "PriceList": [json.dumps(p) for p in rows[skip:skip + size]]}
        if skip + size < len(rows):
            out["NextToken"] = str(skip + size)
        start("200 OK", [("Content-Type", "application/x-amz-json-1.1")])
        return [json.dumps(out).encode()]

    def _spot_history(self, form, region, start):
        types = {v for k, v in form.items() if k.startswith("InstanceType.")}
        return _ec2_ok(start, "DescribeSpotPriceHistory", spot_history_xml(
            [h for h in self.spot[region] if not types or h["instance_type"] in types]))

    # --- Service Quotas -------------------------------------------------------------------
    def _quotas(self, action, req, region, start):
        code = req.get("QuotaCode", "")
        with self.lock:
            value = self.quotas.get((region, code))
        if action not in ("GetServiceQuota", "GetAWSDefaultServiceQuota") or req.get("ServiceCode") != "ec2" \
                or value is None:
            body = json.dumps({"__type": "NoSuchResourceException",
                               "message": f"The request failed because the specified resource does not exist: {code}"})
            start("400 Bad Request", [("Content-Type", "application/x-amz-json-1.1")])
            return [body.encode()]
        from gpufleet.clouds.aws.api import VCPU_QUOTAS

        name = next((n for c, n in VCPU_QUOTAS.values() if c == code), code)
        quota = {"ServiceCode": "ec2", "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
                 "QuotaArn": f"arn:aws:servicequotas:{region}:123456789012:ec2/{code}", "QuotaCode": code,
                 "QuotaName": name, "Value": value, "Unit": "None", "Adjustable": True, "GlobalQuota": False,
                 "UsageMetric": {"MetricNamespace": "AWS/Usage", "MetricName": "ResourceCount",
                                 "MetricDimensions": {"Resource": "vCPU", "Service": "EC2", "Type": "Resource"},
                                 "MetricStatisticRecommendation": "Maximum"}}
        start("200 OK", [("Content-Type", "application/x-amz-json-1.1")])
        return [json.dumps({"Quota": quota}).encode()]


def product(instance_type: str, region: str, usd: float, gpus: int, sku: str | None = None,
            location_type: str = "AWS Region") -> dict:
    """One Price List entry for a Linux, shared-tenancy, on-demand instance (the documented shape).

    ``location_type="AWS Local Zone"``: a Local Zone's entry, which carries its parent region's
    ``regionCode``."""
    sku = sku or f"SKU{zlib.crc32(f'{instance_type}/{region}/{location_type}'.encode()):010d}"
    return {"product": {"productFamily": "Compute Instance", "sku": sku, "attributes": {
                "instanceType": instance_type, "regionCode": region, "locationType": location_type,
                "operatingSystem": "Linux", "tenancy": "Shared",
                "preInstalledSw": "NA", "capacitystatus": "Used", "licenseModel": "No License required",
                "gpu": str(gpus), "servicecode": "AmazonEC2", "usagetype": f"BoxUsage:{instance_type}"}},
            "serviceCode": "AmazonEC2", "version": "20261120000000", "publicationDate": "2026-11-20T00:00:00Z",
            "terms": {"OnDemand": {f"{sku}.JRTCKXETXF": {
                "offerTermCode": "JRTCKXETXF", "sku": sku, "effectiveDate": "2026-11-01T00:00:00Z", "termAttributes": {},
                "priceDimensions": {f"{sku}.JRTCKXETXF.6YS6EN2CT7": {
                    "unit": "Hrs", "endRange": "Inf", "beginRange": "0", "rateCode": f"{sku}.JRTCKXETXF.6YS6EN2CT7",
                    "appliesTo": [], "description": f"${usd} per On Demand Linux {instance_type} Instance Hour",
                    "pricePerUnit": {"USD": f"{usd:.10f}"}}}}}}}


def spot_history_xml(records: list[dict]) -> str:
    """The inside of a DescribeSpotPriceHistoryResponse for ``{instance_type, zone, price, at}`` records."""
    items = "".join(
        f"<item><instanceType>{h['instance_type']}</instanceType><productDescription>Linux/UNIX"
        f"</productDescription><spotPrice>{h['price']:.6f}</spotPrice><timestamp>{h.get('at', '2026-11-22T08:00:00.000Z')}"
        f"</timestamp><availabilityZone>{h['zone']}</availabilityZone></item>" for h in records)
    return f"<spotPriceHistorySet>{items}</spotPriceHistorySet><nextToken></nextToken>"


class _Replay:
    def __init__(self, data: bytes):
        import io

        self._b = io.BytesIO(data)

    def read(self, *a):
        return self._b.read(*a)

    def readline(self, *a):
        return self._b.readline(*a)


def _match(g, filters) -> bool:
    for name, vals in filters.items():
        if name == "tag-key" and not any(v in g["tags"] for v in vals):
            return False
        if name.startswith("tag:") and g["tags"].get(name[4:]) not in vals:
            return False
        if name == "group-name" and g["name"] not in vals:
            return False
    return True


def _group_xml(g, region) -> str:
    tags = "".join(f"<item><key>{escape(k)}</key><value>{escape(v)}</value></item>" for k, v in g["tags"].items())
    return (f"<groupName>{escape(g['name'])}</groupName><strategy>{g['strategy']}</strategy><state>available</state>"
            f"<groupId>{g['id']}</groupId><groupArn>arn:aws:ec2:{region}:123456789012:placement-group/"
            f"{escape(g['name'])}</groupArn><tagSet>{tags}</tagSet>")


def _ec2_ok(start, action, inner):
    body = (f'<?xml version="1.0" encoding="UTF-8"?><{action}Response xmlns="{EC2_NS}"><requestId>'
            f"{uuid.uuid4()}</requestId>{inner}</{action}Response>")
    start("200 OK", [("Content-Type", "text/xml")])
    return [body.encode()]


def _ec2_error(start, code, message, status="400 Bad Request"):
    body = (f'<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>{code}</Code><Message>'
            f"{escape(message)}</Message></Error></Errors><RequestID>{uuid.uuid4()}</RequestID></Response>")
    start(status, [("Content-Type", "text/xml")])
    return [body.encode()]


def _refused(start, service):
    """A refused key as STS (Query API, ``ErrorResponse``) or EC2 (``Response/Errors``) answers it."""
    if service == "sts":
        body = ('<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type>'
                "<Code>InvalidClientTokenId</Code><Message>The security token included in the request is invalid."
                f"</Message></Error><RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>")
        start("403 Forbidden", [("Content-Type", "text/xml")])
        return [body.encode()]
    return _ec2_error(start, "AuthFailure", "AWS was not able to validate the provided access credentials",
                      status="401 Unauthorized")


class Server:
    """moto + Extras on 127.0.0.1 (or ``host``: the test rack's bridge) in a thread; ``url`` for
    AWS_ENDPOINT_URL."""

    def __init__(self, port: int = 0, host: str = "127.0.0.1"):
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
        from werkzeug.serving import make_server

        class Quiet(MotoRequestHandler):
            def log_request(self, *args, **kwargs):  # no line per request on stderr
                pass

        self.extras = Extras(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(host, port, self.extras, threaded=True, request_handler=Quiet)
        self.url = f"http://{host}:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> "Server":
        self._thread.start()
        return self

    def reset(self) -> None:
        import urllib.request

        urllib.request.urlopen(urllib.request.Request(self.url + "/moto-api/reset", method="POST"), timeout=30).read()

    def stop(self) -> None:
        self._server.shutdown()
        self._thread.join()


if __name__ == "__main__":
    import sys

    srv = Server(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    print(srv.url, flush=True)
    srv._server.serve_forever()

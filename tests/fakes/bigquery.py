"""A stand-in for BigQuery's REST API v2 as `gpufleet cost` reads the Cloud Billing export through it:
``POST /bigquery/v2/projects/{p}/queries`` (jobs.query) and ``GET .../queries/{jobId}``
(jobs.getQueryResults), answering the recorded payloads it is given (tests/data/billing, in the
documented QueryResponse / GetQueryResultsResponse formats) in order, and keeping each request.
"""

from __future__ import annotations

import re

from fakes.jsonserver import JsonServer


class BigQueryFake(JsonServer):
    def __init__(self):
        super().__init__()
        self.answers: list[dict] = []  # the responses, in the order they are asked for
        self.requests: list[tuple[str, str, dict, object]] = []  # (method, path, query, body)

    def reset(self) -> None:
        with self.lock:
            self.answers.clear()
            self.requests.clear()
            self.faults.clear()

    def route(self, method, path, query, body):
        self.requests.append((method, path, query, body))
        if not re.fullmatch(r"/bigquery/v2/projects/[^/]+/queries(/[^/]+)?", path):
            return 404, {"error": {"code": 404, "message": f"Not found: {path}", "status": "NOT_FOUND"}}, {}
        if not self.answers:
            return 500, {"error": {"code": 500, "message": "fake: no answer left"}}, {}
        return 200, self.answers.pop(0), {}

"""A small threaded HTTP(S) server for the cloud API fakes (GCP, Azure): JSON in, JSON out.

Subclasses implement ``route(method, path, query, body)`` and return ``(status, body,
headers)``. ``tls=True`` serves HTTPS with a self-signed certificate for 127.0.0.1 made at
start (Azure's SDK refuses bearer tokens over plain HTTP); ``ca_file`` is what clients
must trust. ``faults`` scripts failures: ``{(method, path-regex): [(status, body, headers), ...]}``,
each consumed once, in order, before the real answer.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


class JsonServer:
    parse_bodies = True  # False: ``route`` gets the request body as bytes (an object store's uploads)

    def __init__(self, *, tls: bool = False, host: str = "127.0.0.1"):
        self.lock = threading.RLock()
        self.calls: list[tuple[str, str]] = []
        self.faults: dict[tuple[str, str], list] = {}
        self.ca_file: str | None = None
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _serve(self):
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                u = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(u.query, keep_blank_values=True).items()}
                ctype = self.headers.get("Content-Type", "")
                if not fake.parse_bodies:
                    body = raw
                elif "json" in ctype and raw:
                    body = json.loads(raw)
                elif "x-www-form-urlencoded" in ctype:
                    body = {k: v[-1] for k, v in parse_qs(raw.decode()).items()}
                else:
                    body = raw
                status, out, headers = fake.dispatch(self.command, u.path, query, body, dict(self.headers))
                data = out if isinstance(out, bytes) else json.dumps(out).encode()
                self.send_response(status)
                if "Content-Type" not in (headers or {}):
                    self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                if self.command != "HEAD":  # HEAD answers the headers a GET would, without the body
                    self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = do_HEAD = _serve

        self._server = ThreadingHTTPServer((host, 0), Handler)
        self._server.daemon_threads = True
        scheme = "http"
        if tls:
            import ssl

            cert, key = _self_signed()
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(cert, key)
            self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True)
            self.ca_file = cert
            scheme = "https"
        self.url = f"{scheme}://{host}:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._thread.join()
        if getattr(self, "ca_file", None):  # the certificate's folder (clients may read ca_file until now)
            import shutil
            from pathlib import Path

            shutil.rmtree(Path(self.ca_file).parent, ignore_errors=True)

    def dispatch(self, method, path, query, body, headers=None):
        with self.lock:
            self.calls.append((method, path))
            for (m, pat), queue in self.faults.items():
                if m == method and queue and re.search(pat, path):
                    return queue.pop(0)
        try:
            if not self.parse_bodies:  # the object stores check the request's headers too
                return self.route(method, path, query, body, headers or {})
            return self.route(method, path, query, body)
        except Exception as e:  # noqa: BLE001 - a bug in the fake shows as a 500 with its text
            import traceback

            return 500, {"error": {"code": 500, "message": f"fake: {e!r}", "trace": traceback.format_exc()}}, {}

    def route(self, method, path, query, body):  # pragma: no cover - subclasses answer
        raise NotImplementedError


def _self_signed() -> tuple[str, str]:
    """A certificate and key for 127.0.0.1, written to a temporary directory."""
    import datetime as dt
    import ipaddress
    import tempfile
    from pathlib import Path

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                        x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    d = Path(tempfile.mkdtemp(prefix="gpufleet-fake-tls-"))
    (d / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (d / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()))
    return str(d / "cert.pem"), str(d / "key.pem")

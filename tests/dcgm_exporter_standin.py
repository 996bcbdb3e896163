#!/usr/bin/env python3
"""A stand-in for NVIDIA's DCGM exporter, for hosts without a GPU (the test rack). NOT the exporter.

It serves ``GET /metrics`` on a port (9400, the exporter's) in the Prometheus text exposition format
the exporter publishes: for each field of a counters file in dcgm-exporter's format (``DCGM field,
Prometheus type, help``; ``#`` comments; gpufleet ships salt/monitoring/files/gpufleet-counters.csv)
a ``# HELP`` and ``# TYPE`` line, then one sample per GPU with the exporter's label set on a bare host
(gpu, UUID, pci_bus_id, device, modelName, Hostname, DCGM_FI_DRIVER_VERSION: NVIDIA/dcgm-exporter's
README and test fixtures, dcgm-exporter 4.x, read 2026-11-27). What it says comes from a JSON state
file, read again at every scrape, so a test changes a GPU's value by rewriting the file:

    {"model": "NVIDIA L4", "gpus": 1, "driver": "570.133.20",
     "values": {"DCGM_FI_DEV_GPU_TEMP": 41},              # every GPU's (a field not named: 0)
     "gpu_values": {"0": {"DCGM_FI_DEV_XID_ERRORS": 79}}}  # one GPU's, over those

    python3 dcgm_exporter_standin.py --counters FILE --state FILE [--port 9400]

Standard library only: it runs on the rack hosts' own Python.
"""

import argparse
import csv
import json
import socket
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def fields(path: str) -> list[tuple[str, str, str]]:
    """(field, type, help) of each counter the file names, in its order."""
    with open(path, newline="") as f:
        return [(r[0].strip(), r[1].strip(), ",".join(r[2:]).strip()) for r in csv.reader(f)
                if r and not r[0].lstrip().startswith("#") and len(r) >= 3]


def _quoted(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def exposition(counters: list[tuple[str, str, str]], state: dict, hostname: str) -> str:
    out = []
    for name, type_, help_ in counters:
        out += [f"# HELP {name} {help_}", f"# TYPE {name} {type_}"]
        for i in range(int(state.get("gpus", 1))):
            labels = {"gpu": str(i), "UUID": f"GPU-{hostname}-{i:04d}", "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0",
                      "device": f"nvidia{i}", "modelName": state.get("model", "NVIDIA L4"), "Hostname": hostname,
                      "DCGM_FI_DRIVER_VERSION": state.get("driver", "570.133.20")}
            value = {**state.get("values", {}), **state.get("gpu_values", {}).get(str(i), {})}.get(name, 0)
            out.append(name + "{" + ",".join(f'{k}="{_quoted(v)}"' for k, v in labels.items()) + "}" + f" {value}")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--counters", required=True)
    ap.add_argument("--state", required=True)
    ap.add_argument("--port", type=int, default=9400)
    args = ap.parse_args()
    counters = fields(args.counters)
    hostname = socket.gethostname()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            with open(args.state) as f:
                body = exposition(counters, json.load(f), hostname).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    ThreadingHTTPServer(("0.0.0.0", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()

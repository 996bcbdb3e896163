"""Pure functions of the text GPU, fabric and storage tools print; no I/O.

Each is tested on captured outputs (tests/data/verify/captures/, with their sources). Formats
follow the tools' own documentation: ``nvidia-smi -q`` and ``--query-gpu`` (the nvidia-smi
manual page), the kernel's ``NVRM: Xid`` lines (NVIDIA "XID Errors" guide), ``dcgmi diag -j``
(DCGM user guide, 3.x and 4.x layouts), nccl-tests' performance table (nccl-tests
doc/PERFORMANCE.md), ``ibstat`` (infiniband-diags), ``fi_info`` (libfabric), perftest's
``ib_write_bw``, fio's JSON output and nvbandwidth's matrices. A parser given something else
(an error message, nothing) returns an empty result; the check then says what it saw.
"""

from __future__ import annotations

import csv
import io
import json
import re

NA = {"[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Unknown Error]", ""}


# --- nvidia-smi -------------------------------------------------------------------------------

def smi_query(text: str) -> list[dict]:
    """``nvidia-smi --query-gpu=... --format=csv`` (with its header, units kept or ``nounits``):
    one dict per GPU keyed by the query's field names; ``[N/A]``-like values are None, numbers
    lose their units ("350.00 W" -> 350.0)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines or "," not in lines[0]:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines)), skipinitialspace=True))
    header = [re.sub(r"\s*\[.*\]$", "", h.strip()) for h in rows[0]]  # "power.draw [W]" -> "power.draw"
    out = []
    for row in rows[1:]:
        if len(row) != len(header):
            continue
        out.append({h: _value(v) for h, v in zip(header, row)})
    return out


def _value(v: str):
    v = v.strip()
    if v in NA:
        return None
    m = re.fullmatch(r"(-?\d+(?:\.\d+)?)\s*(?:W|MiB|MHz|%|C|KB/s|GB/s)?", v)
    if m:
        return float(m.group(1)) if "." in m.group(1) else int(m.group(1))
    return v


def smi_q(text: str) -> dict:
    """``nvidia-smi -q``: the header fields (driver and CUDA versions, GPU count) and one nested
    dict per GPU (``gpus``), following the indentation: {"Product Name": ..., "ECC Mode":
    {"Current": ...}, "Remapped Rows": {"Pending": ...}, ...}. Values are kept as printed."""
    out: dict = {"gpus": []}
    stack: list[tuple[int, dict]] = [(-1, out)]
    for raw in text.splitlines():
        if not raw.strip() or raw.lstrip().startswith("="):
            continue
        indent = len(raw) - len(raw.lstrip())
        line = raw.strip()
        m = re.match(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])$", line)
        if m and indent == 0:
            gpu = {"bus_id": m.group(1)}
            out["gpus"].append(gpu)
            stack = [(-1, out), (0, gpu)]
            continue
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        if ":" in line:
            key, val = (s.strip() for s in line.split(":", 1))
            if val:
                parent[key] = val
                continue
            line = key
        child: dict = {}
        parent[line] = child
        stack.append((indent, child))
    return out


def nested(d: dict, *path: str, default=None):
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return default
        d = d[p]
    return d


def number(v) -> float | None:
    """The leading number of a value as nvidia-smi prints it ("16x", "2560 bank(s)", "0"), else None."""
    m = re.match(r"\s*(-?\d+(?:\.\d+)?)", str(v)) if v is not None else None
    return float(m.group(1)) if m else None


# Bits of clocks_event_reasons.active (formerly clocks_throttle_reasons.active): nvmlClocksEventReasons
# in NVML's nvml.h (GpuIdle 0x1, ApplicationsClocksSetting 0x2, SwPowerCap 0x4, HwSlowdown 0x8,
# SyncBoost 0x10, SwThermalSlowdown 0x20, HwThermalSlowdown 0x40, HwPowerBrakeSlowdown 0x80).
CLOCK_EVENTS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake"}


def clock_events(mask) -> list[str]:
    try:
        bits = int(str(mask), 16) if str(mask).lower().startswith("0x") else int(mask)
    except (TypeError, ValueError):
        return []
    return [name for bit, name in CLOCK_EVENTS.items() if bits & bit]


# --- kernel log -------------------------------------------------------------------------------

_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\): (\d+),\s*(.*)")


def xids(text: str) -> list[dict]:
    """``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.`` lines of a kernel log."""
    out = []
    for line in text.splitlines():
        m = _XID.search(line)
        if m:
            out.append({"pci": m.group(1).lower(), "xid": int(m.group(2)), "text": m.group(3).strip()[:200]})
    return out


_RECOVERY = re.compile(r"recovery action changed from .*? to (0x[0-9A-Fa-f]+)\s*(?:\(([^)]*)\))?")


def recovery_action(text: str) -> tuple[int, str] | None:
    """XID 154's new recovery action, ``(code, its name)``, from ``GPU recovery action changed from 0x0 (None) to
    0x1 (GPU Reset Required)``; None when the text says none."""
    m = _RECOVERY.search(text)
    return (int(m.group(1), 16), (m.group(2) or m.group(1)).strip()) if m else None


# --- DCGM -------------------------------------------------------------------------------------

def dcgm_diag(text: str) -> list[dict]:
    """``dcgmi diag -r N -j``: one row per test and GPU: {test, category, gpu, status, warnings}.

    DCGM 3.x nests ``{"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests": [{"name",
    "results": [{"gpu_ids" or "gpu_id", "status", "warnings"}]}]}]}}``; DCGM 4.x names the
    results' GPUs ``entity_id`` (with ``entity_group``) and adds a per-test ``test_summary``.
    Status words: Pass, Fail, Skip (a warning prints as Fail; tests not run are left out), per
    DCGM's dcgmi/Diag.cpp at v3.3.9 and 4.6. A run that could not start is ``runtime_error``.
    """
    try:
        doc = json.loads(text[text.index("{"):])
    except ValueError:
        return []
    err = _find(doc, "runtime_error")
    if err:
        return [{"test": "runtime", "category": None, "gpu": None, "status": "fail", "warnings": [str(err)]}]
    out = []
    for cat in _find(doc, "test_categories") or []:
        for test in cat.get("tests") or []:
            results = test.get("results") or ([test["test_summary"]] if "test_summary" in test else [])
            for r in results:
                gpu = r.get("gpu_ids", r.get("gpu_id"))
                if gpu is None and str(r.get("entity_group", "")).upper() == "GPU":
                    gpu = r.get("entity_id")
                # 3.x's deployment tests keep the message under "warnings" inside each warning
                warns = [(w.get("warning") or w.get("warnings") or str(w)) if isinstance(w, dict) else str(w)
                         for w in (r.get("warnings") or [])]
                out.append({"test": test.get("name"), "category": cat.get("category"),
                            "gpu": None if gpu in (None, "") else str(gpu),
                            "status": str(r.get("status", "")).lower(), "warnings": warns})
    return out


# DCGM's health watches (NVIDIA/DCGM v4.6.0, dcgmi/Health.cpp, read 2026-11-27; the layout is the same since
# v2.4.7): the systems' names as HelperSystemToString prints them. NvSwitch incidents have no name there (its
# default case prints "Internal error"); they come under the entity group "Switch".
DCGM_SYSTEMS = {"PCIe system": "PCIE", "NVLINK system": "NVLINK", "PMU system": "PMU", "MCU system": "MCU",
                "Memory system": "MEMORY", "SM system": "SM", "InfoROM system": "INFOROM",
                "Thermal system": "THERMAL", "Power system": "POWER", "Driver": "DRIVER",
                "ConnectX system": "CONNECTX"}
DCGM_HEALTH_WORDS = {"Healthy": "pass", "Warning": "warn", "Failure": "fail"}  # else "Internal error"


def dcgm_health(text: str) -> dict:
    """``dcgmi health -c -j``: {"overall": pass|warn|fail|None, "incidents": [{group, entity, system, status,
    message}]}; ``system`` is DCGM_SYSTEMS' short name ("NVSWITCH" for a switch's, "OTHER" for a name it does
    not know), ``status`` None where DCGM said "Internal error". {} when it printed no report (an error line:
    no host engine, the watches not set)."""
    try:
        body = json.loads(text[text.index("{"):])["body"]
        overall = body["Overall Health"]["value"]
    except (ValueError, KeyError, TypeError):
        return {}
    incidents = []
    for group, entities in body.items():
        if group == "Overall Health" or not isinstance(entities, dict):
            continue
        for entity, node in (entities.get("children") or {}).items():
            errors = ((node.get("children") or {}).get("Errors") or {}).get("children") or {}
            for name, said in errors.items():
                system = DCGM_SYSTEMS.get(name) or ("NVSWITCH" if group == "Switch" else "OTHER")
                incidents.append({"group": group, "entity": entity, "system": system,
                                  "status": DCGM_HEALTH_WORDS.get(said.get("value")),
                                  "message": " ".join(said.get("overflow") or ())})
    return {"overall": DCGM_HEALTH_WORDS.get(overall), "incidents": incidents}


def _find(doc, key):
    if isinstance(doc, dict):
        if key in doc:
            return doc[key]
        for v in doc.values():
            found = _find(v, key)
            if found is not None:
                return found
    elif isinstance(doc, list):
        for v in doc:
            found = _find(v, key)
            if found is not None:
                return found
    return None


# --- nccl-tests -------------------------------------------------------------------------------

def all_reduce(text: str) -> dict:
    """nccl-tests ``all_reduce_perf``: the table's rows, the largest size's bus bandwidth (GB/s),
    the average, wrong-value counts and the devices it ran on. The table's last eight columns are
    out-of-place and in-place (time, algbw, busbw, #wrong), whatever precedes them by version."""
    rows, devices = [], 0
    avg = oob = None
    errors = []
    for line in text.splitlines():
        s = line.strip()
        if re.match(r"#\s+Rank\s+\d+", s):
            devices += 1
        elif m := re.match(r"#\s*Avg bus bandwidth\s*:\s*([\d.]+)", s):
            avg = float(m.group(1))
        elif m := re.match(r"#\s*Out of bounds values\s*:\s*(\d+)", s):
            oob = int(m.group(1))
        elif "NCCL failure" in s or "Test failure" in s or "CUDA failure" in s:
            errors.append(s[:200])
        elif s and not s.startswith("#"):
            t = s.split()
            if len(t) >= 10 and t[0].isdigit():
                try:
                    rows.append({"bytes": int(t[0]), "busbw_oop": float(t[-6]), "busbw_ip": float(t[-2]),
                                 "wrong": _wrong(t[-5]) + _wrong(t[-1])})
                except ValueError:
                    continue
    last = rows[-1] if rows else None
    return {"rows": rows, "devices": devices, "avg_busbw": avg, "out_of_bounds": oob, "errors": errors,
            "max_bytes": last["bytes"] if last else None,
            "busbw": max(last["busbw_oop"], last["busbw_ip"]) if last else None,
            "wrong": sum(r["wrong"] for r in rows)}


def _wrong(v: str) -> int:
    return int(v) if v.isdigit() else 0  # "N/A" without -c; older versions print an error magnitude


# --- InfiniBand, EFA, perftest ----------------------------------------------------------------

def _ca_blocks(text: str, ca_re: str, port_re: str) -> list[tuple[str, dict, list[tuple[int, dict]]]]:
    """Split ``ibstat``/``ibv_devinfo`` text into (CA name, CA fields, [(port, port fields)])."""
    out: list[tuple[str, dict, list]] = []
    fields = None
    for raw in text.splitlines():
        line = raw.strip()
        m = re.match(ca_re, line)
        if m:
            out.append((m.group(1), {}, []))
            fields = out[-1][1]
            continue
        if not out or ":" not in line:
            continue
        m = re.match(port_re, line)
        if m:
            out[-1][2].append((int(m.group(1)), {}))
            fields = out[-1][2][-1][1]
            continue
        k, v = (x.strip() for x in line.split(":", 1))
        fields[k] = v
    return out


def _int(v: str):
    return int(v) if v.isdigit() else v


def ibstat(text: str) -> list[dict]:
    """``ibstat``: one block per CA with its ports (state, physical state, rate in Gb/s, link layer)."""
    ca_keys = {"CA type": "type", "Firmware version": "firmware", "Number of ports": "num_ports"}
    port_keys = {"State": "state", "Physical state": "phys_state", "Rate": "rate_gbps", "Base lid": "lid",
                 "SM lid": "sm_lid", "Link layer": "link_layer"}
    numeric = {"num_ports", "rate_gbps", "lid", "sm_lid"}
    out = []
    for name, ca, ports in _ca_blocks(text, r"^CA '([^']+)'", r"^Port (\d+):$"):
        d = {"name": name, "ports": []}
        d.update({ca_keys[k]: (_int(v) if ca_keys[k] in numeric else v) for k, v in ca.items() if k in ca_keys})
        for n, p in ports:
            d["ports"].append({"port": n, **{port_keys[k]: (_int(v) if port_keys[k] in numeric else v)
                                             for k, v in p.items() if k in port_keys}})
        out.append(d)
    return out


_IBV_STATE = {"PORT_ACTIVE": "Active", "PORT_DOWN": "Down", "PORT_INIT": "Initializing", "PORT_ARMED": "Armed"}


def ibv_devinfo(text: str) -> list[dict]:
    """``ibv_devinfo``, the fallback when ``ibstat`` (infiniband-diags) is absent; same shape as ibstat."""
    out = []
    for name, ca, ports in _ca_blocks(text, r"^hca_id:\s*(\S+)", r"^port:\s*(\d+)$"):
        d = {"name": name, "ports": []}
        if "fw_ver" in ca:
            d["firmware"] = ca["fw_ver"]
        if "vendor_part_id" in ca:
            d["type"] = f"MT{ca['vendor_part_id']}"
        for n, p in ports:
            port = {"port": n}
            if "state" in p:
                port["state"] = _IBV_STATE.get(p["state"].split()[0], p["state"])
            if "link_layer" in p:
                port["link_layer"] = p["link_layer"]
            if "sm_lid" in p:
                port["sm_lid"] = _int(p["sm_lid"])
            d["ports"].append(port)
        out.append(d)
    return out


def fi_info(text: str) -> list[str]:
    """``fi_info -p efa``: the EFA devices, by their RDM domains (``rdmap16s27-rdm``); each device also
    shows a datagram domain (``-dgrm``), so domains are counted once per device."""
    devices = []
    for m in re.finditer(r"^\s*domain:\s*(\S+)", text, re.M):
        dev = re.sub(r"-(rdm|dgrm)$", "", m.group(1))
        if dev not in devices:
            devices.append(dev)
    return devices


def ib_write_bw(text: str) -> dict | None:
    """perftest's ``ib_write_bw`` client table: the last row's average bandwidth in Gb/s
    (``--report_gbits``) or MB/s converted (perftest's MB is 2^20 bytes)."""
    unit = None
    last = None
    for line in text.splitlines():
        if "BW average" in line:
            unit = "gbit" if "Gb/sec" in line else "mb"
            continue
        t = line.split()
        if unit and len(t) >= 4 and t[0].isdigit():
            try:
                last = {"bytes": int(t[0]), "avg": float(t[3])}
            except ValueError:
                continue
    if not last:
        return None
    gbps = last["avg"] if unit == "gbit" else last["avg"] * 8 * 1048576 / 1e9
    return {"bytes": last["bytes"], "avg_gbps": round(gbps, 2)}


# --- storage and copies -----------------------------------------------------------------------

def fio_read_mbs(text: str) -> float | None:
    """fio ``--output-format=json``: the read bandwidth of all jobs together, MB/s (10^6 bytes)."""
    try:
        doc = json.loads(text[text.index("{"):])
    except ValueError:
        return None
    jobs = doc.get("jobs") or []
    if not jobs:
        return None
    total = 0.0
    for j in jobs:
        r = j.get("read") or {}
        total += r.get("bw_bytes", r.get("bw", 0) * 1024)
    return round(total / 1e6, 1)


def nvbandwidth(text: str) -> dict[str, dict]:
    """nvbandwidth: per test (``host_to_device_memcpy_ce`` ...) the per-GPU figures (GB/s) of its
    one-row matrix and its ``SUM`` line."""
    out: dict[str, dict] = {}
    test = None
    header_seen = False
    for line in text.splitlines():
        s = line.strip()
        if m := re.match(r"Running (\S+?)\.?$", s):
            test, header_seen = m.group(1), False
            out[test] = {"per_gpu": [], "sum": None}
        elif test and (m := re.match(rf"SUM {re.escape(test)}\s+([\d.]+)", s)):
            out[test]["sum"] = float(m.group(1))
        elif test and re.fullmatch(r"(\d+\s+)*\d+", s):
            header_seen = True
        elif test and header_seen and re.match(r"\d+\s+[\d.]", s):
            out[test]["per_gpu"] += [float(v) for v in s.split()[1:] if re.fullmatch(r"[\d.]+", v)]
    return out


def nvlink_status(text: str) -> dict[int, list[float | None]]:
    """``nvidia-smi nvlink -s``: per GPU index, each link's speed in GB/s (None: ``<inactive>``)."""
    out: dict[int, list[float | None]] = {}
    gpu = None
    for line in text.splitlines():
        if m := re.match(r"^GPU (\d+):", line):
            gpu = int(m.group(1))
            out[gpu] = []
        elif gpu is not None and (m := re.match(r"^\s*Link \d+:\s*(.*)$", line)):
            out[gpu].append(number(m.group(1)) if "inactive" not in m.group(1).lower() else None)
    return out


def nvlink_errors(text: str) -> dict[int, dict[str, int]]:
    """``nvidia-smi nvlink -e``: per GPU index, each error counter summed over its links."""
    out: dict[int, dict[str, int]] = {}
    gpu = None
    for line in text.splitlines():
        if m := re.match(r"^GPU (\d+):", line):
            gpu = int(m.group(1))
            out[gpu] = {}
        elif gpu is not None and (m := re.match(r"^\s*Link \d+:\s*([^:]+):\s*(\d+)\s*$", line)):
            name = m.group(1).strip()
            out[gpu][name] = out[gpu].get(name, 0) + int(m.group(2))
    return out

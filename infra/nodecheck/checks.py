"""The checks, each a function of the node's expectations and what its tools print.

Every result is ``{check, status, measured, expected, code, remedy, detail}``; status is
``pass``, ``warn``, ``fail`` or ``skip`` (not checked: the tool is missing or the check does not
apply, and the detail says which). A tool that is missing never makes a check pass.

Thresholds arrive in the expectations (``gpufleet.verify.expect``, from the catalog); the
judgement rules and their sources are here:
- fatal XIDs: azurehpc-health-checks' list (customTests/azure_gpu_xid.nhc @0e0a1ac) plus XIDs 46, 95,
  109 and 140, which NVIDIA resolves by resetting the GPU, and an XID 154 (the driver's recovery
  action) whose action is not None (faults.RECOVERY_XID); 94 (contained ECC error: restart the
  application) and the application XIDs (13, 31, 43, 45) only warn.
- memory: a pending row remap or page retirement, a remapping failure, SRAM uncorrectable
  errors fail (NVIDIA "GPU Memory Error Management"; azure_gpu_ecc.nhc); retired pages at or
  over the expected limit (62 on V100-class boards, as azure_gpu_ecc.nhc) fail.
- clocks: hardware slowdown, thermal and power-brake events under load fail; a software power
  cap warns (azure_gpu_clock_throttling.nhc only warns on any of them; a node that slows down
  under load is not one to train on).
- PCIe: the link's maximum generation (the current one drops while idle) and its current width.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time

from . import parsers
from .faults import RECOVERY_XID, remedy
from .tools import Tools

NCCL_SAMPLE_S = 2.0  # clocks/power sampled this often while the all-reduce runs
QUERY = ("index,pci.bus_id,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.max.sm,"
         "clocks_event_reasons.active,pcie.link.gen.current,pcie.link.width.current")
QUERY_OLD = QUERY.replace("clocks_event_reasons", "clocks_throttle_reasons")  # drivers before 535


def result(check, status, measured=None, expected=None, code=None, detail=None, gpu=None) -> dict:
    return {"check": check, "status": status, "measured": measured, "expected": expected,
            "code": code if status in ("fail", "warn") else None,
            "remedy": remedy(code) if status in ("fail", "warn") else None, "detail": detail, "gpu": gpu}


def skip(check, why, expected=None) -> dict:
    return result(check, "skip", expected=expected, detail=why)


class Node:
    """What the checks share: the expectations, the tools, and outputs read once."""

    def __init__(self, expect: dict, tools: Tools, root: str = "/"):
        self.expect = expect
        self.tools = tools
        self.root = root  # file reads (mounts, CUDA's version.json) go under here; tests point it elsewhere
        self._smi = None
        self.samples: list[dict] = []  # nvidia-smi queries taken under load
        self.nccl = None  # the all-reduce's Ran, once run
        self.ib_counters: dict[str, dict[str, int]] = {}  # "<ca>:<port>": the IB counters read (_ib_counters)

    def read(self, path: str) -> str | None:
        try:
            with open(os.path.join(self.root, path.lstrip("/"))) as f:
                return f.read()
        except OSError:
            return None

    def smi(self):
        """``nvidia-smi -q``, parsed (None: not installed; a dict with "error": it failed)."""
        if self._smi is None:
            ran = self.tools.run(["nvidia-smi", "-q"], timeout=60)
            if ran is None:
                self._smi = False
            elif not ran.ok or "gpus" not in (parsed := parsers.smi_q(ran.out)):
                self._smi = {"error": ran.why(), "gpus": []}
            else:
                self._smi = parsed
        return self._smi or None

    def gpus_expected(self) -> int:
        return int((self.expect.get("gpus") or {}).get("count") or 0)


def timeouts(node: Node) -> list[dict]:
    """The tools that did not answer in the time they had: whatever else was read, a node whose tools
    hang is not healthy (and its other checks may stand on nothing)."""
    tools = node.tools
    if not tools.late and not tools.hung:
        return []
    said = [f"{t} after {s:.0f} s" + (" and stuck after its kill" if t in tools.hung else "") for t, s in tools.late.items()]
    said += [f"{t} stuck after its kill" for t in tools.hung if t not in tools.late]
    return [result("health.timeout", "fail", ", ".join(said), "every tool answers", "GF-HEALTH-TIMEOUT")]


def _gpu_tool(node: Node, check: str):
    """(smi, None) or (None, the result that stands for the check when there is nothing to read)."""
    if not node.gpus_expected():
        return None, skip(check, "no GPU expected on this node")
    smi = node.smi()
    if smi is None:
        return None, skip(check, "nvidia-smi is not installed")
    if smi.get("error"):
        return None, result(check, "fail", measured=smi["error"], code="GF-GPU-DRIVER")
    return smi, None


def gpu_inventory(node: Node) -> list[dict]:
    smi, out = _gpu_tool(node, "gpu.count")
    if out:
        return [out]
    exp = node.expect["gpus"]
    gpus = smi["gpus"]
    res = [result("gpu.count", "pass" if len(gpus) == exp["count"] else "fail", len(gpus), exp["count"],
                  "GF-GPU-COUNT")]
    family = str(exp.get("family") or exp.get("model") or "").upper()
    names = sorted({g.get("Product Name", "?") for g in gpus})
    wrong = [n for n in names if family and family not in n.upper()]
    mem = exp.get("memory_gb")
    if mem and not wrong:  # 40 GB vs 80 GB boards of one family
        sizes = {parsers.number(parsers.nested(g, "FB Memory Usage", "Total")) for g in gpus} - {None}
        wrong = [f"{s / 1024:.0f} GiB" for s in sorted(sizes) if abs(s / 1024 - mem) > 0.15 * mem]
    res.append(result("gpu.model", "fail" if wrong else "pass", ", ".join(names), exp.get("model"), "GF-GPU-MODEL",
                      detail=f"not {exp.get('model')}: {', '.join(wrong)}" if wrong else None))
    return res


def gpu_software(node: Node) -> list[dict]:
    smi, out = _gpu_tool(node, "gpu.driver")
    if out:
        return [out]
    res = []
    driver, want = smi.get("Driver Version"), node.expect.get("driver")
    if want:
        ok = driver is not None and (driver == str(want) or driver.startswith(f"{want}."))
        res.append(result("gpu.driver", "pass" if ok else "fail", driver, str(want), "GF-DRIVER-VERSION"))
    want_cuda = node.expect.get("cuda")
    if want_cuda:
        top = parsers.number(smi.get("CUDA Version"))
        need = parsers.number(want_cuda)
        res.append(result("gpu.cuda_driver", "pass" if top is not None and top >= need else "fail",
                          smi.get("CUDA Version"), f">= {want_cuda}", "GF-CUDA-DRIVER",
                          detail="the highest CUDA version the driver supports"))
        text = node.read("/usr/local/cuda/version.json")
        if text is None:
            res.append(skip("gpu.cuda_toolkit", "no /usr/local/cuda/version.json (CUDA toolkit not installed)",
                            want_cuda))
        else:
            try:
                have = json.loads(text)["cuda"]["version"]
            except (ValueError, KeyError, TypeError):
                have = "?"
            ok = have == want_cuda or have.startswith(f"{want_cuda}.")
            res.append(result("gpu.cuda_toolkit", "pass" if ok else "fail", have, want_cuda, "GF-CUDA-VERSION"))
    off = [i for i, g in enumerate(smi["gpus"]) if g.get("Persistence Mode") != "Enabled"]
    res.append(result("gpu.persistence", "warn" if off else "pass", f"off on GPU {_ids(off)}" if off else "on",
                      "on", "GF-PERSISTENCE-OFF"))
    if (node.expect.get("gpus") or {}).get("nvswitch"):
        res.append(_fabric_manager(node, smi))
    return res


def _fabric_manager(node: Node, smi: dict) -> dict:
    ran = node.tools.run(["systemctl", "is-active", "nvidia-fabricmanager"], timeout=15)
    active = ran.out.strip() if ran else None
    # Hopper and newer report the GPU's fabric registration in nvidia-smi -q ("Fabric: State Completed, Status Success")
    bad = [i for i, g in enumerate(smi["gpus"]) if "Fabric" in g
           and (parsers.nested(g, "Fabric", "State") not in ("Completed", "N/A")
                or parsers.nested(g, "Fabric", "Status") not in ("Success", "N/A"))]
    if bad:
        g = smi["gpus"][bad[0]]
        return result("gpu.fabric_manager", "fail", f"GPU {_ids(bad)}: {parsers.nested(g, 'Fabric', 'State')}/"
                      f"{parsers.nested(g, 'Fabric', 'Status')}", "Completed/Success", "GF-FABRIC-MANAGER")
    if active is None:
        return skip("gpu.fabric_manager", "no systemctl to ask about nvidia-fabricmanager", "active")
    return result("gpu.fabric_manager", "pass" if active == "active" else "fail", active, "active", "GF-FABRIC-MANAGER")


def gpu_memory(node: Node) -> list[dict]:
    smi, out = _gpu_tool(node, "health.ecc")
    if out:
        return [out]
    lim = node.expect.get("ecc") or {}
    res = []
    off = [i for i, g in enumerate(smi["gpus"]) if parsers.nested(g, "ECC Mode", "Current") not in ("Enabled", None)]
    res.append(result("health.ecc_mode", "fail" if off else "pass", f"off on GPU {_ids(off)}" if off else "on",
                      "on", "GF-ECC-OFF"))
    unc = {i: _uncorrectable(parsers.nested(g, "ECC Errors", "Volatile", default={})) for i, g in enumerate(smi["gpus"])}
    bad = {i: n for i, n in unc.items() if n}
    res.append(result("health.ecc_uncorrectable", "fail" if bad else "pass",
                      ", ".join(f"GPU {i}: {n}" for i, n in bad.items()) or 0, 0, "GF-ECC-UNCORRECTABLE",
                      detail="volatile (since the driver loaded)"))
    pending = [i for i, g in enumerate(smi["gpus"]) if parsers.nested(g, "Remapped Rows", "Pending") == "Yes"]
    failed = [i for i, g in enumerate(smi["gpus"])
              if parsers.nested(g, "Remapped Rows", "Remapping Failure Occurred") == "Yes"]
    if any("Remapped Rows" in g and isinstance(g["Remapped Rows"], dict) for g in smi["gpus"]):
        res.append(result("health.row_remap", "fail" if pending or failed else "pass",
                          (f"failure on GPU {_ids(failed)}" if failed else f"pending on GPU {_ids(pending)}")
                          if pending or failed else "none pending",
                          "none pending, no failure", "GF-ROW-REMAP-FAILED" if failed else "GF-ROW-REMAP-PENDING"))
    retired = {}
    for i, g in enumerate(smi["gpus"]):
        rp = g.get("Retired Pages")
        if not isinstance(rp, dict):
            continue
        count = sum(int(parsers.number(parsers.nested(rp, k, "Retired Pages") or rp.get(k)) or 0)
                    for k in ("Single Bit ECC", "Double Bit ECC"))
        pend = any(rp.get(k) == "Yes" for k in ("Pending Page Blacklist", "Pending Page Retirement"))
        retired[i] = (count, pend)
    limit = lim.get("retired_pages_max")
    if retired and limit:
        bad = {i: c for i, (c, p) in retired.items() if p or c >= limit}
        res.append(result("health.retired_pages", "fail" if bad else "pass",
                          ", ".join(f"GPU {i}: {c}{' (pending)' if retired[i][1] else ''}" for i, c in bad.items())
                          or max(c for c, _ in retired.values()), f"< {limit}, none pending", "GF-RETIRED-PAGES"))
    return res


def _uncorrectable(volatile: dict) -> int:
    """Uncorrectable volatile errors however the driver groups them (SRAM/DRAM, or Double Bit -> Total)."""
    total = 0
    for key, val in volatile.items():
        if isinstance(val, dict):
            if "Double Bit" in key:
                total += int(parsers.number(val.get("Total")) or 0)
            continue
        if "Uncorrectable" in key:
            total += int(parsers.number(val) or 0)
    return total


def xid(node: Node) -> list[dict]:
    if not node.gpus_expected():
        return [skip("health.xid", "no GPU expected on this node")]
    ran = node.tools.run(["journalctl", "-k", "-b", "--no-pager", "-o", "short-iso"], timeout=60)
    source = "journalctl -k -b"
    if ran is None or not ran.ok:
        ran, source = node.tools.run(["dmesg", "-T"], timeout=30), "dmesg"
    if ran is None:
        return [skip("health.xid", "neither journalctl nor dmesg is installed")]
    if not ran.ok:
        return [skip("health.xid", f"cannot read the kernel log: {ran.why()}")]
    found = parsers.xids(ran.out)
    fatal = set(node.expect.get("fatal_xids") or ())
    bad = [x for x in found if x["xid"] in fatal]
    actions = {x["pci"]: (x, parsers.recovery_action(x["text"])) for x in found if x["xid"] == RECOVERY_XID}
    bad += [x for x, action in actions.values() if action and action[0] != 0]  # the driver asks for a reset or more
    seen = sorted({x["xid"] for x in found})
    if bad:
        first = bad[-1]
        action = actions.get(first["pci"], (None, None))[1] if first["xid"] == RECOVERY_XID else None
        return [result("health.xid", "fail", f"XID {', '.join(map(str, seen))}"
                       + (f" (recovery action: {action[1]})" if action else ""), "no fatal XID since boot",
                       "GF-XID-FATAL", detail=f"last: XID {first['xid']} on {first['pci']}: {first['text']} ({source})")]
    if found:
        return [result("health.xid", "warn", f"XID {', '.join(map(str, seen))}", "no fatal XID since boot", "GF-XID",
                       detail=f"{source}: {found[-1]['text']}")]
    return [result("health.xid", "pass", "none", "no fatal XID since boot", detail=source)]


def links(node: Node) -> list[dict]:
    res = []
    smi, out = _gpu_tool(node, "links.pcie")
    exp = node.expect.get("gpus") or {}
    if out:
        res.append(out)
    else:
        gen_bad, width_bad = [], []
        for i, g in enumerate(smi["gpus"]):
            info = parsers.nested(g, "PCI", "GPU Link Info", default={})
            gen = parsers.number(parsers.nested(info, "PCIe Generation", "Max"))
            width = parsers.number(parsers.nested(info, "Link Width", "Current"))
            wmax = parsers.number(parsers.nested(info, "Link Width", "Max"))
            if exp.get("pcie_gen") and gen is not None and gen < exp["pcie_gen"]:
                gen_bad.append((i, int(gen)))
            if width is not None and wmax is not None and width < wmax:
                width_bad.append((i, int(width), int(wmax)))
        res.append(result("links.pcie_width", "fail" if width_bad else "pass",
                          ", ".join(f"GPU {i}: x{w} of x{m}" for i, w, m in width_bad) or "full", "full width",
                          "GF-PCIE-WIDTH"))
        if exp.get("pcie_gen"):
            res.append(result("links.pcie_gen", "warn" if gen_bad else "pass",
                              ", ".join(f"GPU {i}: Gen{g}" for i, g in gen_bad) or f"Gen{exp['pcie_gen']}",
                              f"Gen{exp['pcie_gen']}", "GF-PCIE-GEN", detail="the link's maximum (host and GPU)"))
    if exp.get("nvlink") and node.gpus_expected() > 1:
        res += _nvlink(node)
    res += _fabric(node)
    return res


def _nvlink(node: Node) -> list[dict]:
    ran = node.tools.run(["nvidia-smi", "nvlink", "-s"], timeout=60)
    if ran is None:
        return [skip("links.nvlink", "nvidia-smi is not installed")]
    status = parsers.nvlink_status(ran.out)
    down = [i for i, ls in status.items() if not ls or any(v is None for v in ls)]
    res = [result("links.nvlink", "fail" if down or not status else "pass",
                  f"inactive links on GPU {_ids(down)}" if down else f"{len(status)} GPUs, all links active",
                  "all links active", "GF-NVLINK-DOWN", detail=None if status else ran.why())]
    errs = node.tools.run(["nvidia-smi", "nvlink", "-e"], timeout=60)
    counters = parsers.nvlink_errors(errs.out) if errs and errs.ok else {}
    if counters:
        bad = {i: {k: v for k, v in c.items() if v and ("Replay" in k or "Recovery" in k or "CRC" in k)}
               for i, c in counters.items()}
        bad = {i: c for i, c in bad.items() if c}
        res.append(result("links.nvlink_errors", "warn" if bad else "pass",
                          "; ".join(f"GPU {i}: " + ", ".join(f"{k} {v}" for k, v in c.items()) for i, c in bad.items())
                          or 0, 0, "GF-NVLINK-ERRORS"))
    return res


def _fabric(node: Node) -> list[dict]:
    res = []
    ib = node.expect.get("ib")
    if ib and ib.get("ports"):
        ran = node.tools.run(["ibstat"], timeout=30)
        cas = parsers.ibstat(ran.out) if ran and ran.ok else []
        if ran is None:
            alt = node.tools.run(["ibv_devinfo"], timeout=30)
            cas = parsers.ibv_devinfo(alt.out) if alt and alt.ok else []
            if alt is None:
                return [skip("links.ib", "neither ibstat nor ibv_devinfo is installed", f"{ib['ports']} ports")]
        ports = [(ca["name"], p) for ca in cas for p in ca["ports"] if p.get("link_layer", "InfiniBand") == "InfiniBand"]
        down = [f"{n}:{p['port']} {p.get('state')}" for n, p in ports if p.get("state") != "Active"]
        slow = [f"{n}:{p['port']} {p.get('rate_gbps')} Gb/s" for n, p in ports if p.get("state") == "Active"
                and ib.get("rate_gbps") and isinstance(p.get("rate_gbps"), int) and p["rate_gbps"] < ib["rate_gbps"]]
        active = len(ports) - len(down)
        if down:
            res.append(result("links.ib", "fail", "; ".join(down), f"{ib['ports']} ports Active", "GF-IB-PORT-DOWN"))
        elif len(ports) < ib["ports"]:
            res.append(result("links.ib", "fail", f"{len(ports)} ports", f"{ib['ports']} ports", "GF-IB-MISSING"))
        else:
            res.append(result("links.ib", "pass", f"{active} ports Active", f"{ib['ports']} ports Active"))
        if ib.get("rate_gbps"):
            res.append(result("links.ib_rate", "fail" if slow else "pass", "; ".join(slow) or f"{ib['rate_gbps']} Gb/s",
                              f"{ib['rate_gbps']} Gb/s", "GF-IB-RATE"))
        res += _ib_counters(node, ports)
    efa = node.expect.get("efa")
    if efa:
        ran = node.tools.run(["fi_info", "-p", "efa"], timeout=30)
        if ran is None:
            res.append(skip("links.efa", "fi_info (libfabric) is not installed", efa))
        else:
            devs = parsers.fi_info(ran.out) if ran.ok else []
            res.append(result("links.efa", "pass" if len(devs) >= efa else "fail", len(devs), efa, "GF-EFA-MISSING",
                              detail=None if ran.ok else ran.why()))
    tcpx = node.expect.get("tcpx")
    if tcpx:
        missing = [f for f in tcpx.get("files", []) if not os.path.exists(os.path.join(node.root, f.lstrip("/")))]
        running = _processes(node.root)
        missing += [f"process {p}" for p in tcpx.get("processes", []) if p not in running]
        res.append(result("links.tcpx", "fail" if missing else "pass", "; ".join(missing) or "all present",
                          "plugin and receive-datapath daemon", "GF-TCPX-MISSING"))
    return res


# The kernel's per-port InfiniBand counters, /sys/class/infiniband/<ca>/ports/<port>/counters/<name> (Linux
# Documentation/ABI/stable/sysfs-class-infiniband, read 2026-11-28; node_exporter's collector/infiniband_linux.go reads
# the same files): link_downed, "Number of times the link failed to recover from an error state and went down" (a
# flap: it fails); link_error_recovery, "Number of times the link successfully completed the link error recovery
# process", and symbol_error, "Total number of minor link errors detected on one or more physical lanes" (they
# warn). They count since the driver loaded; a port is judged on their growth since the last reading its caller kept
# (expect["ib_counters"], the node's watch and slurmd's health program keep the report's "ib_counters"), since the
# driver loaded where there is none, or where a counter went back (a reboot or a driver reload reset it).
IB_FLAP_COUNTERS = ("link_downed",)
IB_ERROR_COUNTERS = ("link_error_recovery", "symbol_error")
# Their widths: the PMA PortCounters' (Linux drivers/infiniband/core/sysfs.c, PORT_PMA_ATTR(symbol_error, 0, 16, 32),
# PORT_PMA_ATTR(link_error_recovery, 1, 8, 48), PORT_PMA_ATTR(link_downed, 2, 8, 56); read 2026-11-28), and the IBA's
# PortCounters stop at their maximum: a counter there can show no growth again, so it is judged "cannot judge" (a
# warning, GF-IB-SATURATED) until it is cleared (review rev51f finding 4). A driver that wraps instead reads as a reset.
IB_COUNTER_MAX = {"link_downed": 255, "link_error_recovery": 255, "symbol_error": 65535}
# A port that flapped fails until its link_downed stayed still this long (the port's "flapped_at" in the counters the
# caller keeps): a fault of one interval would be resumed before a heal pass saw it, and a port that flaps every ten
# minutes would be given jobs between flaps (review rev51f finding 5). An hour, as azurehpc-health-checks judges
# flapping over a window of hours (customTests/azure_ib_link_flapping.nhc), not a person's word: a flap from a
# switch's reboot or a reseated cable ends by itself, and every new flap starts the hour again.
IB_FLAP_WINDOW_S = 3600
_IB_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def _ib_counters(node: Node, ports: list[tuple[str, dict]]) -> list[dict]:
    before = node.expect.get("ib_counters") if isinstance(node.expect.get("ib_counters"), dict) else {}
    grew: dict[str, list[str]] = {"flap": [], "errors": []}
    saturated: dict[str, list[str]] = {"flap": [], "errors": []}
    now_s = int(time.time())
    for ca, p in ports:
        if not _IB_NAME.match(ca) or not str(p.get("port", "")).isdigit() or ca in (".", ".."):
            continue  # a name from a tool's output is never a path of its own
        key = f"{ca}:{p['port']}"
        now = {}
        for name in IB_FLAP_COUNTERS + IB_ERROR_COUNTERS:
            text = node.read(f"/sys/class/infiniband/{ca}/ports/{p['port']}/counters/{name}")
            if text is not None and text.strip().isdigit():
                now[name] = int(text.strip())
        if not now:
            continue
        node.ib_counters[key] = now
        was = before.get(key) if isinstance(before.get(key), dict) else {}
        for name, value in list(now.items()):
            kind = "flap" if name in IB_FLAP_COUNTERS else "errors"
            last = was.get(name) if isinstance(was.get(name), int) and was.get(name) <= value else 0
            if value > last:
                grew[kind].append(f"{key} {name} +{value - last}")
                if kind == "flap":
                    now["flapped_at"] = now_s
            if value >= IB_COUNTER_MAX[name]:
                saturated[kind].append(f"{key} {name} at {value}")
        flapped = was.get("flapped_at")
        if "flapped_at" not in now and isinstance(flapped, int) and 0 <= now_s - flapped < IB_FLAP_WINDOW_S:
            now["flapped_at"] = flapped  # still within the window: kept, and it fails
            grew["flap"].append(f"{key} flapped {now_s - flapped} s ago (still for {IB_FLAP_WINDOW_S} s first)")
    if not node.ib_counters:
        return [skip("links.ib_flaps", "the ports' counters (/sys/class/infiniband) could not be read")]
    since = "since the last check" if before else "since the driver loaded"
    out = []
    for kind, check, code, want in (("flap", "links.ib_flaps", "GF-IB-FLAP", f"no link_downed {since}"),
                                    ("errors", "links.ib_errors", "GF-IB-ERRORS",
                                     f"no symbol errors or link recoveries {since}")):
        full = [f"{w} (saturated: cannot judge)" for w in saturated[kind]]
        status = ("fail" if kind == "flap" else "warn") if grew[kind] else "warn" if full else "pass"
        out.append(result(check, status, "; ".join(grew[kind] + full) or "none", want,
                          code if grew[kind] or not full else "GF-IB-SATURATED"))
    return out


def _processes(root: str) -> set[str]:
    names = set()
    proc = os.path.join(root, "proc")
    for pid in os.listdir(proc) if os.path.isdir(proc) else []:
        try:
            with open(os.path.join(proc, pid, "comm")) as f:
                names.add(f.read().strip())
        except OSError:
            continue
    return names


def dcgm(node: Node) -> list[dict]:
    level = int(node.expect.get("dcgm_level") or 0)
    if not node.gpus_expected() or not level:
        return [skip("dcgm.diag", "no GPU expected on this node" if level else "not asked for")]
    ran = node.tools.run(["dcgmi", "diag", "-r", str(level), "-j"], timeout={1: 120, 2: 600, 3: 2400}.get(level, 3600))
    if ran is None:
        return [skip("dcgm.diag", "DCGM (dcgmi) is not installed", f"level {level}")]
    rows = parsers.dcgm_diag(ran.out)
    if not rows:
        return [result("dcgm.diag", "fail", ran.why(), f"level {level} passes", "GF-TOOL-FAILED")]
    failed = [r for r in rows if r["status"] == "fail"]
    warned = [r for r in rows if r["status"] == "warn"]
    bad = failed or warned
    measured = "; ".join(f"{r['test']}" + (f" GPU {r['gpu']}" if r["gpu"] is not None else "") + ": "
                         + (r["warnings"][0] if r["warnings"] else r["status"]) for r in bad[:4]) or \
        f"{sum(r['status'] == 'pass' for r in rows)} passed, {sum(r['status'] == 'skip' for r in rows)} skipped"
    status = "fail" if failed else "warn" if warned else "pass"
    return [result("dcgm.diag", status, measured, f"level {level} passes",
                   "GF-DCGM-FAIL" if failed else "GF-DCGM-WARN")]


# `dcgmi health` (NVIDIA/DCGM v4.6.0, dcgmi/CommandLineParser.cpp and Health.cpp, read 2026-11-27): `-s a` sets
# every watch (PCIe, memory, InfoROM, thermal and power, NVLink, NvSwitch, driver, ConnectX) on the default group of
# all GPUs; the host engine keeps them after dcgmi disconnects (SetPersistAfterDisconnect) until it restarts; `-c`
# before any is set prints "Error: Health watches not enabled", and the memory, NVLink, PCIe, thermal and ConnectX
# watches need 60 s of samples before their first answer. So they are set once, when `-c` says they are not (a
# fresh or restarted host engine), and that run judges nothing.
DCGM_HEALTH_S = 10  # `-c` reads what the host engine sampled: no GPU work, an answer in well under a second
DCGM_NOT_WATCHING = "Health watches not enabled"


def dcgm_health(node: Node) -> list[dict]:
    """DCGM's health watches: each system DCGM finds failing fails (GF-DCGM-<SYSTEM>, DCGM's message as the
    evidence), one warning warns. No DCGM: not checked; dcgmi failing or silent (no host engine, a restart): not
    checked either, never a failure (it says nothing of the GPUs)."""
    if not node.gpus_expected():
        return [skip("dcgm.health", "no GPU expected on this node")]
    ran = node.tools.run(["dcgmi", "health", "-c", "-j"], timeout=DCGM_HEALTH_S, judged=False)
    if ran is None:
        return [skip("dcgm.health", "DCGM (dcgmi) is not installed")]
    said = parsers.dcgm_health(ran.out) if ran.ok else {}
    if DCGM_NOT_WATCHING in ran.out:
        set_ = node.tools.run(["dcgmi", "health", "-s", "a"], timeout=DCGM_HEALTH_S, judged=False)
        return [skip("dcgm.health", "DCGM's health watches were not set: set now, read from the next run on"
                     if set_ is not None and set_.ok else f"DCGM's health watches could not be set: {set_ and set_.why()}")]
    if not said or said["overall"] is None:
        return [skip("dcgm.health", f"dcgmi health gave no report: {ran.why()}")]
    res = []
    for status in ("fail", "warn"):
        for inc in (i for i in said["incidents"] if i["status"] == status):
            where = f"{inc['group']} {inc['entity']}"
            res.append(result(f"dcgm.health:{inc['system'].lower()}", status, f"{where}: {inc['message']}", "Healthy",
                              f"GF-DCGM-{inc['system']}", gpu=inc["entity"] if inc["group"] == "GPU" else None))
    return res or [result("dcgm.health", "pass", "Healthy", "Healthy")]


def nccl(node: Node) -> list[dict]:
    """Single-node all-reduce across the node's GPUs, with clocks and power sampled meanwhile."""
    spec = node.expect.get("nccl") or {}
    n = node.gpus_expected()
    if not n or not spec:
        return [skip("bw.nccl", "no GPU expected on this node" if not n else "no all-reduce asked for")]
    size = spec.get("bytes", "8G")
    argv = ["all_reduce_perf", "-b", spec.get("min_bytes", size), "-e", size, "-f", "2", "-g", str(n),
            "-w", "5", "-n", str(spec.get("iters", 20))]
    want, warn_below = spec.get("min_busbw_gbs"), spec.get("warn_below_gbs")
    best, runs = None, 0  # (busbw, its parsed output)
    while runs <= int(spec.get("retries", 0)):
        runs += 1
        # below the threshold, once more before judging (as azurehpc-health-checks' check_nccl_allreduce
        # repeats): one slow run is often another job or a clock ramp, not the node
        p = node.tools.start(argv)
        if p is None:
            node.samples = _sample(node)
            return [skip("bw.nccl", "all_reduce_perf (nccl-tests) is not installed", want)]
        while True:
            node.samples += _sample(node)
            ran = node.tools.finish(p, timeout=float(spec.get("timeout_s", 600)), wait=NCCL_SAMPLE_S)
            if ran is not None:
                break
        node.nccl = ran
        out = parsers.all_reduce(ran.out)
        if ran.rc != 0 or out["errors"] or out["busbw"] is None:
            why = out["errors"][0] if out["errors"] else ran.why()
            return [result("bw.nccl", "fail", why, f">= {want} GB/s", "GF-NCCL-ERROR")]
        if best is None or out["busbw"] > best[0]:
            best = (out["busbw"], out)
        if want is None or best[0] >= want:
            break
    busbw, out = best
    res = []
    if out["wrong"] or out["out_of_bounds"]:
        res.append(result("bw.nccl_correct", "fail", f"{out['wrong']} wrong, {out['out_of_bounds']} out of bounds", 0,
                          "GF-NCCL-WRONG"))
    measured = f"{busbw:.1f} GB/s at {_bytes(out['max_bytes'])}" + (f" (best of {runs} runs)" if runs > 1 else "")
    if want is None:
        res.append(result("bw.nccl", "pass", measured, None, detail="no threshold in the catalog for this GPU"))
    elif busbw < want:
        res.append(result("bw.nccl", "fail", measured, f">= {want} GB/s", "GF-NCCL-BUSBW", detail=spec.get("source")))
    elif warn_below is not None and busbw < warn_below:
        res.append(result("bw.nccl", "warn", measured, f">= {warn_below} GB/s with NVLink SHARP, >= {want} without",
                          "GF-NCCL-NVLS", detail=spec.get("warn_source")))
    else:
        res.append(result("bw.nccl", "pass", measured, f">= {warn_below or want} GB/s", detail=spec.get("source")))
    return res


def _sample(node: Node) -> list[dict]:
    ran = node.tools.run(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,nounits"], timeout=15)
    if ran is not None and not ran.ok and "clocks_event_reasons" in (ran.out + ran.err):
        ran = node.tools.run(["nvidia-smi", f"--query-gpu={QUERY_OLD}", "--format=csv,nounits"], timeout=15)
    return parsers.smi_query(ran.out) if ran is not None and ran.ok else []


def clocks(node: Node) -> list[dict]:
    """Clock events, power and temperature, from the samples under the all-reduce (or one at rest)."""
    if not node.gpus_expected():
        return [skip("health.clocks", "no GPU expected on this node")]
    samples = node.samples or _sample(node)
    if not samples:
        return [skip("health.clocks", "no nvidia-smi query answered")]
    under = "under load" if node.nccl is not None else "at rest (no load ran)"
    events: dict[str, set[int]] = {}
    hottest, peak, limits = None, {}, {}
    for s in samples:
        reasons = s.get("clocks_event_reasons.active", s.get("clocks_throttle_reasons.active"))
        for e in parsers.clock_events(reasons):
            events.setdefault(e, set()).add(s.get("index"))
        if isinstance(s.get("temperature.gpu"), (int, float)):
            hottest = max(hottest or 0, s["temperature.gpu"])
        if isinstance(s.get("power.draw"), (int, float)):
            peak[s.get("index")] = max(peak.get(s.get("index"), 0), s["power.draw"])
        if isinstance(s.get("power.limit"), (int, float)):
            limits[s.get("index")] = s["power.limit"]
    hard = {k: v for k, v in events.items() if k != "sw_power_cap"}
    summary = f"{max(peak.values()):.0f} W peak, {hottest} C" if peak and hottest is not None else None
    res = []
    if hard:
        res.append(result("health.clocks", "fail", "; ".join(f"{k} on GPU {_ids(sorted(v))}" for k, v in hard.items()),
                          "no slowdown", "GF-THROTTLE-THERMAL", detail=f"{under}; {summary}"))
    elif "sw_power_cap" in events and node.nccl is not None:
        res.append(result("health.clocks", "warn", f"power cap on GPU {_ids(sorted(events['sw_power_cap']))}",
                          "no slowdown", "GF-THROTTLE-POWER", detail=f"{under}; {summary}"))
    else:
        res.append(result("health.clocks", "pass", summary or "no slowdown", "no slowdown", detail=under))
    tdp = (node.expect.get("gpus") or {}).get("tdp_w")
    if tdp and limits:
        low = {i: v for i, v in limits.items() if v < 0.9 * tdp}
        res.append(result("health.power_limit", "warn" if low else "pass",
                          ", ".join(f"GPU {i}: {v:.0f} W" for i, v in low.items()) or f"{min(limits.values()):.0f} W",
                          f"{tdp:.0f} W (TDP)", "GF-POWER-LIMIT"))
    return res


def copy_bandwidth(node: Node) -> list[dict]:
    spec = node.expect.get("copy") or {}
    if not node.gpus_expected() or not spec:
        return [skip("bw.copy", "no GPU expected on this node" if spec else "no copy check asked for")]
    ran = node.tools.run(["nvbandwidth", "-t", "host_to_device_memcpy_ce", "device_to_host_memcpy_ce"], timeout=300)
    if ran is None:
        return [skip("bw.copy", "nvbandwidth is not installed", spec.get("min_gbs"))]
    tests = parsers.nvbandwidth(ran.out)
    res = []
    for test, label in (("host_to_device_memcpy_ce", "bw.copy_h2d"), ("device_to_host_memcpy_ce", "bw.copy_d2h")):
        vals = (tests.get(test) or {}).get("per_gpu") or []
        if not vals:
            res.append(result(label, "fail", ran.why(), f">= {spec.get('min_gbs')} GB/s", "GF-TOOL-FAILED"))
            continue
        low = [(i, v) for i, v in enumerate(vals) if spec.get("min_gbs") and v < spec["min_gbs"]]
        res.append(result(label, "fail" if low else "pass",
                          ", ".join(f"GPU {i}: {v:.1f}" for i, v in low) or f"{min(vals):.1f} GB/s (slowest GPU)",
                          f">= {spec.get('min_gbs')} GB/s", "GF-COPY-BW", detail=spec.get("source")))
    return res


def storage(node: Node, read_test: bool) -> list[dict]:
    mounts = node.expect.get("mounts") or []
    if not mounts:
        return []
    table = node.read("/proc/mounts") or ""
    have = {parts[1]: parts[2] for parts in (ln.split() for ln in table.splitlines()) if len(parts) > 2}
    res = []
    for m in mounts:
        fstype = have.get(m["path"])
        ok = fstype is not None and (not m.get("fstype") or fstype.startswith(m["fstype"]))
        res.append(result(f"storage.mount:{m['path']}", "pass" if ok else "fail", fstype or "not mounted",
                          m.get("fstype") or "mounted", "GF-MOUNT-MISSING"))
        if ok and read_test and m.get("min_read_mbs"):
            res.append(_fio(node, m))
    return res


def _fio(node: Node, m: dict) -> dict:
    check = f"storage.read:{m['path']}"
    work = os.path.join(m["path"], f".gpufleet-verify-{os.uname().nodename}")
    # four readers of 1 GiB files each, direct I/O (no page cache), 20 s: the files are written first
    argv = ["fio", "--name=gpufleet-verify", f"--directory={work}", "--rw=read", "--bs=1M", "--size=1G",
            "--numjobs=4", "--direct=1", "--ioengine=libaio", "--group_reporting", "--runtime=20",
            "--time_based", "--output-format=json"]
    os.makedirs(work, exist_ok=True)
    try:
        ran = node.tools.run(argv, timeout=300)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if ran is None:
        return skip(check, "fio is not installed", f">= {m['min_read_mbs']} MB/s")
    mbs = parsers.fio_read_mbs(ran.out)
    if mbs is None:
        return result(check, "fail", ran.why(), f">= {m['min_read_mbs']} MB/s", "GF-TOOL-FAILED")
    return result(check, "pass" if mbs >= m["min_read_mbs"] else "fail", f"{mbs:.0f} MB/s",
                  f">= {m['min_read_mbs']} MB/s", "GF-STORAGE-SLOW")


def _ids(ids) -> str:
    return ",".join(str(i) for i in ids)


def _bytes(n: int | None) -> str:
    if n is None:
        return "?"
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n} B"

#!/usr/bin/env python3
"""A stand-in for the GPU node's tools, for hosts without a GPU (the test rack, unit tests).

NOT a real tool: installed (or linked) under a tool's name (nvidia-smi, dcgmi, all_reduce_perf,
nvbandwidth, ibstat, fi_info, journalctl, systemctl, fio), it prints the capture that tool would
print, from the folder ``captures/`` beside its real path (or $GPUFLEET_STANDIN_DIR): the
files of tests/data/verify/ (see the README there for what they are). A capture that is missing
fails as the tool would with nothing to report; ``systemctl`` answers only ``is-active
nvidia-fabricmanager`` and hands everything else to the real one. A file ``<tool>.hang`` among the
captures makes that tool hang without a word, as nvidia-smi does on a GPU that fell off the bus.
``dcgmi health`` plays DCGM's host engine: ``-c`` before a ``-s`` prints what dcgmi prints then (exit 253: its
DCGM_ST_GENERIC_ERROR, -3, as main returns it), ``-s`` remembers that the watches are set (a file
``.dcgmi-health-set``, which ``dcgmi-health.restart`` among the captures removes, as a host engine restart does).
"""

import os
import shutil
import sys
import time
from pathlib import Path

HANG_S = 3600  # a hung tool: longer than anything waits for it
TOOLS = ("nvidia-smi", "dcgmi", "all_reduce_perf", "nvbandwidth", "ibstat", "fi_info", "journalctl", "systemctl",
         "fio")

CAPTURES = {
    ("nvidia-smi", "-q"): "nvidia-smi-q.txt",
    ("nvidia-smi", "--query-gpu"): "query.csv",
    ("nvidia-smi", "--query-compute-apps"): "compute-apps.csv",
    ("nvidia-smi", "nvlink", "-s"): "nvlink-s.txt",
    ("nvidia-smi", "nvlink", "-e"): "nvlink-e.txt",
    ("dcgmi", "diag"): "dcgmi-diag-r{level}.json",
    ("all_reduce_perf",): "all_reduce_perf.txt",
    ("nvbandwidth",): "nvbandwidth.txt",
    ("ibstat",): "ibstat.txt",
    ("fi_info",): "fi_info.txt",
    ("journalctl",): "journal.txt",
    ("fio",): "fio.json",
}


def standins(tmp_path: Path, captures: Path, changes: dict | None = None, tools=TOOLS) -> Path:
    """A folder of stand-in tools replaying ``captures`` (``changes``: file -> new text, None removes it)."""
    cap = tmp_path / "captures"
    shutil.copytree(captures, cap)
    for name, text in (changes or {}).items():
        (cap / name).unlink(missing_ok=True)
        if text is not None:
            (cap / name).write_text(text)
    shutil.copy(os.path.realpath(__file__), tmp_path / "standin.py")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for t in tools:
        (bin_dir / t).symlink_to(tmp_path / "standin.py")
    return bin_dir


def dcgmi_health(here, args):
    """`dcgmi health -s FLAGS` / `-c [-j]` as NVIDIA/DCGM v4.6.0's dcgmi/Health.cpp answers them."""
    watched = os.path.join(here, ".dcgmi-health-set")
    if os.path.exists(os.path.join(here, "dcgmi-health.restart")):
        os.unlink(os.path.join(here, "dcgmi-health.restart"))
        if os.path.exists(watched):
            os.unlink(watched)
    if args[:1] == ["-s"]:
        with open(os.path.join(here, "dcgmi-health.log"), "a") as f:
            f.write(" ".join(args) + "\n")
        open(watched, "w").close()
        print("Health monitor systems set successfully.")
        return 0
    if args[:1] == ["-c"] and not os.path.exists(watched):
        print("Error: Health watches not enabled. Please enable watches. ")
        return 253
    path = os.path.join(here, "dcgmi-health.json")
    if args[:1] != ["-c"] or not os.path.exists(path):
        print("Error: unable to establish a connection to the specified host: localhost")
        return 253
    with open(path) as f:
        sys.stdout.write(f.read())
    return 0


def main(argv):
    tool = os.path.basename(argv[0])
    here = os.environ.get("GPUFLEET_STANDIN_DIR") or os.path.join(os.path.dirname(os.path.realpath(argv[0])), "captures")
    if os.path.exists(os.path.join(here, f"{tool}.hang")):
        time.sleep(HANG_S)  # until its caller gives up on it
        return 124
    if tool == "systemctl":
        if argv[1:] == ["is-active", "nvidia-fabricmanager"]:
            print("active")
            return 0
        for real in ("/usr/bin/systemctl", "/bin/systemctl"):
            if os.path.exists(real):
                os.execv(real, [real, *argv[1:]])
        return 1
    if tool == "dcgmi" and argv[1:2] == ["health"]:
        return dcgmi_health(here, argv[2:])
    args = [a.split("=")[0] for a in argv[1:]]
    level = argv[argv.index("-r") + 1] if "-r" in argv else "1"
    for key in sorted((k for k in CAPTURES if k[0] == tool), key=len, reverse=True):
        if all(part in args for part in key[1:]):
            path = os.path.join(here, CAPTURES[key].format(level=level))
            if tool == "all_reduce_perf":  # a second run replays <capture>.2 where there is one (a retried check)
                runs = os.path.join(here, ".all_reduce_runs")
                n = int(open(runs).read()) + 1 if os.path.exists(runs) else 1
                with open(runs, "w") as f:
                    f.write(str(n))
                if n > 1 and os.path.exists(path + ".2"):
                    path += ".2"
            if not os.path.exists(path):
                print(f"{tool}: nothing to report here", file=sys.stderr)
                return 1
            if tool == "all_reduce_perf":
                time.sleep(float(os.environ.get("GPUFLEET_STANDIN_LOAD_S", "0.5")))  # the load clocks are sampled under
            with open(path) as f:
                sys.stdout.write(f.read())
            return 0
    print(f"{tool}: unsupported arguments {argv[1:]}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))

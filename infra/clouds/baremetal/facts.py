"""Facts about a host: what it runs and what hardware it has.

One SSH round trip runs ``PROBE`` (a POSIX shell script printing marked sections); the
parsers below are pure functions of the text each command prints, tested on captured output.
A command that is missing on the host (no ``nvidia-smi`` before the driver is in, no
``ibstat`` without rdma tools) leaves its section empty; the parsers then fall back (sysfs PCI
ids instead of ``lspci``, ``ibv_devinfo`` instead of ``ibstat``).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field

from gpufleet.clouds.baremetal.ssh import CommandFailed
from gpufleet.nodecheck.parsers import ibstat as parse_ibstat
from gpufleet.nodecheck.parsers import ibv_devinfo as parse_ibv_devinfo

MARK = "@@gpufleet:"

# Every section prints nothing when its tool is missing; stderr is dropped.
PROBE = r"""
s() { echo "@@gpufleet:$1"; }
s os-release; cat /etc/os-release 2>/dev/null
s uname; uname -srm 2>/dev/null
s hostname; hostname 2>/dev/null || cat /etc/hostname
s machine-id; cat /etc/machine-id 2>/dev/null
s nproc; nproc 2>/dev/null
s lscpu; command -v lscpu >/dev/null && lscpu -p=SOCKET,CORE 2>/dev/null
s meminfo; cat /proc/meminfo 2>/dev/null
s lspci; command -v lspci >/dev/null && lspci -nn 2>/dev/null
s sysfs-pci; for d in /sys/bus/pci/devices/*; do
  [ -r "$d/vendor" ] && echo "${d##*/} $(cat $d/vendor) $(cat $d/device) $(cat $d/class)"; done 2>/dev/null
s nvidia-smi; command -v nvidia-smi >/dev/null && nvidia-smi \
  --query-gpu=index,name,uuid,memory.total,driver_version,pci.bus_id --format=csv,noheader,nounits 2>/dev/null
s ibstat; command -v ibstat >/dev/null && ibstat 2>/dev/null
s ibv_devinfo; command -v ibv_devinfo >/dev/null && ibv_devinfo 2>/dev/null
s lsblk; command -v lsblk >/dev/null && lsblk -J -b -d -o NAME,TYPE,SIZE,MODEL,TRAN 2>/dev/null
s mounts; cat /proc/mounts 2>/dev/null
s ip-addr; ip -o -4 addr show 2>/dev/null
s end
"""


def sections(text: str) -> dict[str, str]:
    """Split the probe's output into its named sections."""
    out: dict[str, str] = {}
    name = None
    buf: list[str] = []
    for line in text.splitlines():
        if line.startswith(MARK):
            if name is not None:
                out[name] = "\n".join(buf)
            name, buf = line[len(MARK):].strip(), []
        elif name is not None:
            buf.append(line)
    if name is not None:
        out[name] = "\n".join(buf)
    return out


def parse_os_release(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip().strip('"').strip("'")
    return out


_FAMILY = {"debian": "Debian", "ubuntu": "Debian", "rhel": "RedHat", "rocky": "RedHat", "almalinux": "RedHat",
           "centos": "RedHat", "fedora": "RedHat", "amzn": "RedHat"}


def os_family(osr: dict[str, str]) -> str:
    """Salt's os_family for an os-release: Debian, RedHat, or the ID as given."""
    ids = [osr.get("ID", "")] + osr.get("ID_LIKE", "").split()
    for i in ids:
        if i in _FAMILY:
            return _FAMILY[i]
    return osr.get("ID", "unknown")


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo as bytes per key."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(\S+):\s+(\d+)(?:\s+kB)?", line)
        if m:
            out[m.group(1)] = int(m.group(2)) * (1024 if line.rstrip().endswith("kB") else 1)
    return out


NVIDIA_VENDOR = "10de"
MELLANOX_VENDOR = "15b3"


def parse_lscpu(text: str) -> list[int]:
    """``lscpu -p=SOCKET,CORE`` (one line per online CPU): [sockets, cores per socket, threads per
    core], as slurm.conf's node line and ``slurmd -C`` give them; [] when they do not divide evenly."""
    cpus = [tuple(line.split(",")) for line in text.splitlines() if line and not line.startswith("#")]
    sockets, cores = len({c[0] for c in cpus}), len(set(cpus))
    if not cpus or cores % sockets or len(cpus) % cores:
        return []
    return [sockets, cores // sockets, len(cpus) // cores]


def parse_lspci(text: str) -> list[dict]:
    """``lspci -nn`` lines: ``18:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] (rev a1)``."""
    out = []
    for line in text.splitlines():
        m = re.match(r"^(\S+)\s+(.+?)\s+\[([0-9a-f]{4})\]:\s+(.+?)\s+\[([0-9a-f]{4}):([0-9a-f]{4})\]", line)
        if m:
            out.append({"bus": m.group(1), "class_name": m.group(2), "class": m.group(3), "name": m.group(4),
                        "vendor": m.group(5), "device": m.group(6)})
    return out


def parse_sysfs_pci(text: str) -> list[dict]:
    """The probe's ``<address> 0x<vendor> 0x<device> 0x<class>`` lines from /sys/bus/pci/devices."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 4 and all(p.startswith("0x") for p in parts[1:]):
            out.append({"bus": parts[0], "vendor": parts[1][2:].lower(), "device": parts[2][2:].lower(),
                        "class": parts[3][2:6].lower(), "name": "", "class_name": ""})
    return out


def gpu_devices(pci: list[dict]) -> list[dict]:
    """NVIDIA display/3D controllers (class 03xx), not their audio functions or NVSwitches (0680)."""
    return [d for d in pci if d["vendor"] == NVIDIA_VENDOR and d["class"].startswith("03")]


def nvswitch_count(pci: list[dict]) -> int:
    return sum(1 for d in pci if d["vendor"] == NVIDIA_VENDOR and d["class"] == "0680")


def parse_nvidia_smi_csv(text: str) -> list[dict]:
    """``nvidia-smi --query-gpu=index,name,uuid,memory.total,driver_version,pci.bus_id --format=csv,noheader,nounits``."""
    out = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 6 or not parts[0].isdigit():
            continue
        mem = parts[3]
        out.append({"index": int(parts[0]), "name": parts[1], "uuid": parts[2],
                    "memory_mib": int(mem) if mem.isdigit() else None, "driver": parts[4], "bus": parts[5]})
    return out


def parse_lsblk(text: str) -> list[dict]:
    """NVMe disks from ``lsblk -J -b -d -o NAME,TYPE,SIZE,MODEL,TRAN``."""
    try:
        devs = json.loads(text or "{}").get("blockdevices", [])
    except json.JSONDecodeError:
        return []
    out = []
    for d in devs:
        if d.get("type") == "disk" and (str(d.get("name", "")).startswith("nvme") or d.get("tran") == "nvme"):
            size = d.get("size")
            out.append({"name": d["name"], "size_bytes": int(size) if size is not None else None,
                        "model": (d.get("model") or "").strip()})
    return out


NETWORK_FS = {"lustre", "nfs", "nfs4", "beegfs", "gpfs", "cifs", "fuse.gcsfuse"}


def parse_mounts(text: str) -> list[dict]:
    """/proc/mounts, keeping the root file system and network/parallel file systems."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        src, target, fstype = parts[0], parts[1].replace("\\040", " "), parts[2]
        if target == "/" or fstype in NETWORK_FS:
            out.append({"source": src, "target": target, "fstype": fstype})
    return out


def parse_cgroup(text: str) -> str:
    """Which cgroup hierarchy a host runs, from /proc/mounts, as Slurm's autodetect reads /sys/fs/cgroup
    (``_autodetect_cgroup_version``, src/common/cgroup.c, 21.08.5; the same rule in 22.05 and 23.11):
    ``v2`` a cgroup2 file system there, or a tmpfs whose ``systemd`` hierarchy is cgroup2 (with
    ``unified``); ``v1`` a tmpfs whose ``systemd`` hierarchy is cgroup v1 (a host booted with
    systemd.unified_cgroup_hierarchy=0); "" anything else. Of two mounts at one place the later is on top."""
    top: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            top[parts[1]] = parts[2]
    root = top.get("/sys/fs/cgroup")
    if root == "cgroup2":
        return "v2"
    if root == "tmpfs":
        return {"cgroup": "v1", "cgroup2": "v2"}.get(top.get("/sys/fs/cgroup/systemd", ""), "")
    return ""


def parse_ip_addr(text: str) -> list[dict]:
    """``ip -o -4 addr show``: interface and address/prefix, loopback left out."""
    out = []
    for line in text.splitlines():
        m = re.match(r"^\d+:\s+(\S+?)(?:@\S+)?\s+inet\s+(\S+)", line)
        if m and m.group(1) != "lo":
            out.append({"interface": m.group(1), "address": m.group(2)})
    return out


@dataclass
class Facts:
    hostname: str = ""
    os_id: str = ""
    os_version: str = ""
    os_family: str = ""
    os_name: str = ""
    kernel: str = ""
    arch: str = ""
    cpus: int = 0
    cpu_topology: list[int] = field(default_factory=list)  # [sockets, cores per socket, threads per core]
    mem_gib: float = 0.0
    gpus: list[dict] = field(default_factory=list)  # from nvidia-smi when the driver runs, else PCI ids
    driver: str | None = None
    nvswitches: int = 0
    ib: list[dict] = field(default_factory=list)
    nvme: list[dict] = field(default_factory=list)
    mounts: list[dict] = field(default_factory=list)
    cgroup: str = ""  # the cgroup hierarchy it runs: v1, v2, "" unknown (parse_cgroup)
    addresses: list[dict] = field(default_factory=list)
    machine_id: str = ""
    host_key: str = ""  # the SSH host key fingerprint it was reached with

    @property
    def identity(self) -> str:
        """Changes when the machine is reinstalled: a configured host must then be configured again."""
        return f"{self.machine_id}/{self.host_key}"

    @property
    def osfinger(self) -> str:
        """Salt's osfinger form, e.g. Ubuntu-22.04, Rocky-9, Debian-12."""
        name = {"ubuntu": "Ubuntu", "debian": "Debian", "rocky": "Rocky", "rhel": "Red Hat Enterprise Linux",
                "almalinux": "AlmaLinux"}.get(self.os_id, self.os_id)
        ver = self.os_version if self.os_id == "ubuntu" else self.os_version.split(".")[0]
        return f"{name}-{ver}"

    def to_dict(self) -> dict:
        return {**asdict(self), "osfinger": self.osfinger}

    def summary(self) -> str:
        gpu = f"{len(self.gpus)}x {self.gpus[0]['name']}" if self.gpus else "no GPU"
        ib = sum(len(c["ports"]) for c in self.ib)
        return (f"{self.os_name or self.os_id} {self.os_version}, kernel {self.kernel}, {self.cpus} CPUs, "
                f"{self.mem_gib:.0f} GiB, {gpu}" + (f", {ib} IB port(s)" if ib else ""))


def parse_probe(text: str) -> Facts:
    """All facts from one run of ``PROBE``."""
    sec = sections(text)
    osr = parse_os_release(sec.get("os-release", ""))
    uname = sec.get("uname", "").split()
    mem = parse_meminfo(sec.get("meminfo", ""))
    pci = parse_lspci(sec.get("lspci", "")) or parse_sysfs_pci(sec.get("sysfs-pci", ""))
    smi = parse_nvidia_smi_csv(sec.get("nvidia-smi", ""))
    gpus = smi or [{"index": i, "name": d["name"] or f"NVIDIA [10de:{d['device']}]", "bus": d["bus"],
                    "pci_id": f"10de:{d['device']}"} for i, d in enumerate(gpu_devices(pci))]
    ib = parse_ibstat(sec.get("ibstat", "")) or parse_ibv_devinfo(sec.get("ibv_devinfo", ""))
    nproc = sec.get("nproc", "").strip()
    return Facts(
        hostname=sec.get("hostname", "").strip(),
        os_id=osr.get("ID", ""), os_version=osr.get("VERSION_ID", ""), os_family=os_family(osr),
        os_name=osr.get("NAME", ""),
        kernel=uname[1] if len(uname) > 1 else "", arch=uname[2] if len(uname) > 2 else "",
        cpus=int(nproc) if nproc.isdigit() else 0, cpu_topology=parse_lscpu(sec.get("lscpu", "")),
        mem_gib=round(mem.get("MemTotal", 0) / 2**30, 1),
        gpus=gpus, driver=smi[0]["driver"] if smi else None, nvswitches=nvswitch_count(pci),
        ib=ib, nvme=parse_lsblk(sec.get("lsblk", "")), mounts=parse_mounts(sec.get("mounts", "")),
        cgroup=parse_cgroup(sec.get("mounts", "")),
        addresses=parse_ip_addr(sec.get("ip-addr", "")), machine_id=sec.get("machine-id", "").strip(),
    )


def gather(session) -> Facts:
    """Run the probe over an open ``ssh.Session`` and parse it."""
    res = session.run(PROBE, timeout=60)
    if MARK + "end" not in res.stdout:
        raise CommandFailed(session.target.name, f"the fact probe did not finish (exit {res.rc}): "
                                                 f"{res.stderr.strip()[-300:]}")
    f = parse_probe(res.stdout)
    f.host_key = getattr(session, "host_key", "")
    return f

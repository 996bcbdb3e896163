"""Which NVIDIA driver, CUDA, NCCL and framework builds go together, and on which OS.

Checked before any host is touched. Figures and their sources (read 2026-11-22):

- Minimum Linux driver per CUDA toolkit: CUDA Toolkit release notes, table "CUDA Toolkit and
  Corresponding Driver Versions" (docs.nvidia.com/cuda/cuda-toolkit-release-notes). A toolkit
  runs on older drivers of the same major only under minor-version compatibility (no PTX JIT
  of newer code), so gpufleet refuses a driver below the major's floor and warns below the
  toolkit's own.
- CUDA repositories per OS: developer.download.nvidia.com/compute/cuda/repos/<distro>/ (Ubuntu
  24.04 from CUDA 12.5, Debian 12 from 12.2, RHEL/Rocky 9 and Ubuntu 22.04 for all 12.x/13.x).
- Minimum driver branch per GPU architecture and open kernel modules: NVIDIA data center
  driver release notes and the driver installation guide ("Kernel Modules": open modules for
  Turing and newer, required on Blackwell; proprietary modules for Volta and older). Branch
  pinning: ``nvidia-driver-pinning-<branch>`` (apt) and ``dnf module enable
  nvidia-driver:<branch>-open`` (RHEL 9).
- PyTorch wheel variants per release: pytorch.org "previous versions" install matrix.
- Framework releases: the release histories of torch, tensorflow and jax on PyPI.
- Slurm per OS and which daemons talk to which: see ``SLURM_OF_OS`` and ``slurm_check``.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field

# CUDA toolkit -> minimum Linux driver (major.minor of the GA driver)
CUDA_MIN_DRIVER: dict[str, float] = {
    "11.8": 520.61, "12.0": 525.60, "12.1": 530.30, "12.2": 535.54, "12.3": 545.23, "12.4": 550.54,
    "12.5": 555.42, "12.6": 560.28, "12.8": 570.26, "12.9": 575.51, "13.0": 580.65,
}
# major-version floor (minor-version compatibility)
CUDA_MAJOR_FLOOR = {"11": 450.80, "12": 525.60, "13": 580.65}

# distro key of NVIDIA's repositories, by Salt osfinger
DISTROS = {"Ubuntu-22.04": "ubuntu2204", "Ubuntu-24.04": "ubuntu2404", "Debian-12": "debian12",
           "Rocky-9": "rhel9", "Red Hat Enterprise Linux-9": "rhel9", "AlmaLinux-9": "rhel9"}
# first CUDA toolkit with packages in that repository
DISTRO_FIRST_CUDA = {"ubuntu2204": "11.7", "ubuntu2404": "12.5", "debian12": "12.2", "rhel9": "11.7"}
# first driver branch with packages in that repository
DISTRO_FIRST_DRIVER = {"ubuntu2204": 515, "ubuntu2404": 550, "debian12": 535, "rhel9": 515}

# GPU (catalog name prefix) -> (architecture, first driver branch that supports it)
GPU_ARCH: dict[str, tuple[str, int]] = {
    "V100": ("volta", 384), "T4": ("turing", 410), "A10G": ("ampere", 460), "A10": ("ampere", 460),
    "A100": ("ampere", 450), "L4": ("ada", 525), "L40S": ("ada", 525), "L40": ("ada", 525),
    "H100": ("hopper", 525), "H200": ("hopper", 550), "GH200": ("hopper", 550),
    "B200": ("blackwell", 570), "GB200": ("blackwell", 570), "B300": ("blackwell", 575),
    "MI300X": ("cdna3", 0), "RTX 6000": ("ada", 525),
}
# GPUs whose 8-GPU boards use NVSwitch (fabric manager needed)
NVSWITCH_GPUS = ("A100", "H100", "H200", "B200")

# PyTorch release -> CUDA wheel variants it was published for
TORCH_CUDA = {
    "2.4": ["11.8", "12.1", "12.4"], "2.5": ["11.8", "12.1", "12.4"], "2.6": ["11.8", "12.4", "12.6"],
    "2.7": ["11.8", "12.6", "12.8"], "2.8": ["12.6", "12.8", "12.9"], "2.9": ["12.6", "12.8", "13.0"],
}
FRAMEWORKS = ("pytorch", "tensorflow", "jax")
# Releases on PyPI (pypi.org/project/torch|tensorflow|jax, release history, read 2026-11-24) since July
# 2024. A version not listed is refused with the nearest, so that a typo never reaches pip on every
# node; a PyTorch release newer than TORCH_CUDA knows is installed as its CUDA pairing says (torch_variant).
RELEASES = {
    "pytorch": ("2.4.0", "2.4.1", "2.5.0", "2.5.1", "2.6.0", "2.7.0", "2.7.1", "2.8.0", "2.9.0", "2.9.1", "2.10.0",
                "2.11.0", "2.12.0", "2.12.1", "2.13.0", "2.14.0", "2.14.1", "2.15.0"),
    "tensorflow": ("2.17.0", "2.17.1", "2.18.0", "2.18.1", "2.19.0", "2.19.1", "2.20.0", "2.21.0"),
    "jax": ("0.4.31", "0.4.33", "0.4.34", "0.4.35", "0.4.36", "0.4.37", "0.4.38", "0.5.0", "0.5.1", "0.5.2",
            "0.5.3", "0.6.0", "0.6.1", "0.6.2", "0.7.0", "0.7.1", "0.7.2", "0.8.0", "0.8.1", "0.8.2", "0.8.3",
            "0.9.0", "0.9.0.1", "0.9.1", "0.9.2", "0.10.0", "0.10.1", "0.10.2"),
}
FRAMEWORK_NAMES = {"pytorch": "PyTorch", "tensorflow": "TensorFlow", "jax": "JAX"}

# The Slurm release each OS's own packages install (the `slurm` formula takes the distribution's), read
# 2026-11-27: Debian 12 slurm-wlm 22.05.8-4+deb12u3 (`apt-cache policy slurm-wlm`, bookworm and
# bookworm-security), Ubuntu 22.04 slurmd 21.08.5-2ubuntu1 and 24.04 slurm-wlm 23.11.4-1.2ubuntu5
# (packages.ubuntu.com/jammy/slurmd, /noble/slurm-wlm), EL 9 slurm 22.05.9-1.el9 from EPEL 9
# (packages.fedoraproject.org/pkgs/slurm).
SLURM_OF_OS = {"Debian-12": "22.05", "Ubuntu-22.04": "21.08", "Ubuntu-24.04": "23.11", "Rocky-9": "22.05",
               "Red Hat Enterprise Linux-9": "22.05", "AlmaLinux-9": "22.05"}
# Slurm's major releases, oldest first (slurm.schedmd.com/upgrades.html, "Compatibility Window")
SLURM_RELEASES = ("20.11", "21.08", "22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11")
# The first with a cgroup v2 plugin: src/plugins/cgroup/v2 is in slurm-22-05-0-1, not in slurm-21-08-5-1,
# whose autodetect (src/common/cgroup.c) still picks "cgroup/v2" on a cgroup2 /sys/fs/cgroup and then fails
# to load it. Every OS above boots with cgroup v2 only (unified hierarchy), so an older Slurm runs no job
# with cgroups on: the rule where only the OS is known (plan, from the image). A host booted with cgroup v1
# (systemd.unified_cgroup_hierarchy=0) runs 21.08's cgroup/v1 plugin, which autodetect picks there: where
# a host's mounts are known (a rack's facts), they decide.
SLURM_FIRST_CGROUP_V2 = "22.05"
# The one fix for a Slurm cluster whose daemons' OSes do not go together, said for the controller and the
# compute pools alike (a fix of one side alone meets the release window on the other): one OS for all
SAME_OS = ("give the controller and every compute pool the same OS: on a cloud leave image out of every pool "
           "or name one image on all of them; on a rack, one OS on every host")
CGROUP_OS = ("give the controller and every compute pool one OS whose Slurm is 22.05 or newer: on a cloud leave "
             "image out of every pool (a Slurm stack's pools boot ubuntu-24.04, Slurm 23.11) or name ubuntu-24.04 "
             "or rocky-9 on each; on a rack, Debian 12, Ubuntu 24.04 or EL 9 on every host")



def _v(s: str) -> tuple[int, ...]:
    return tuple(int(p) for p in str(s).split(".") if p.isdigit())


def installs_slurm_since(osfinger: str | None, release: str) -> bool:
    """Whether the Slurm ``osfinger``'s OS installs (SLURM_OF_OS) is ``release`` or newer; False where unknown."""
    ver = SLURM_OF_OS.get(osfinger or "")
    return ver is not None and _v(ver) >= _v(release)


@dataclass
class Problem:
    key: str  # the stack key the problem is about (software.cuda, ...)
    message: str
    hint: str | None = None
    warning: bool = False


def check(*, driver: str, cuda: str, osfinger: str | None = None, gpu: str | None = None,
          open_modules: bool | None = None, frameworks: dict[str, str] | None = None) -> list[Problem]:
    """Every incompatibility between the chosen driver branch, CUDA, OS, GPU and frameworks."""
    out: list[Problem] = []
    branch = int(str(driver).split(".")[0])
    if cuda not in CUDA_MIN_DRIVER:
        out.append(Problem("software.cuda", f"CUDA {cuda} is not a toolkit gpufleet knows",
                           f"choose one of {', '.join(CUDA_MIN_DRIVER)}"))
    else:
        floor = CUDA_MAJOR_FLOOR[cuda.split(".")[0]]
        need = CUDA_MIN_DRIVER[cuda]
        if branch < int(floor):
            out.append(Problem("software.driver", f"driver branch {branch} cannot run CUDA {cuda} "
                                                  f"(CUDA {cuda.split('.')[0]}.x needs {int(floor)} or newer)",
                               f"use driver {int(need)} or newer, or an older CUDA"))
        elif branch < int(need):
            out.append(Problem("software.driver", f"driver branch {branch} is older than CUDA {cuda}'s own driver "
                                                  f"({need}); it runs only under minor-version compatibility "
                                                  "(no PTX JIT of newer code)", f"use driver {int(need)} or newer",
                               warning=True))
    if osfinger is not None:
        distro = DISTROS.get(osfinger)
        if distro is None:
            out.append(Problem("os", f"{osfinger} is not a supported OS for the NVIDIA states",
                               "supported: Ubuntu 22.04/24.04, Debian 12, Rocky/RHEL/AlmaLinux 9"))
        else:
            if cuda in CUDA_MIN_DRIVER and _v(cuda) < _v(DISTRO_FIRST_CUDA[distro]):
                out.append(Problem("software.cuda", f"NVIDIA publishes no CUDA {cuda} for {osfinger} "
                                                    f"(first: {DISTRO_FIRST_CUDA[distro]})",
                                   f"use CUDA {DISTRO_FIRST_CUDA[distro]} or newer, or an older OS image"))
            if branch < DISTRO_FIRST_DRIVER[distro]:
                out.append(Problem("software.driver", f"NVIDIA publishes no driver {branch} for {osfinger} "
                                                      f"(first branch: {DISTRO_FIRST_DRIVER[distro]})",
                                   f"use driver {DISTRO_FIRST_DRIVER[distro]} or newer"))
    arch = gpu_arch(gpu)
    if arch:
        name, first = arch
        if name == "cdna3":
            out.append(Problem("gpu", f"{gpu} is an AMD GPU; the NVIDIA states do not apply",
                               "ROCm states are not part of gpufleet yet"))
        elif branch < first:
            out.append(Problem("software.driver", f"{gpu} ({name}) needs driver branch {first} or newer, not {branch}",
                               f"set software.driver to {max(first, branch)} or newer"))
        if open_modules is True and name in ("volta", "pascal"):
            out.append(Problem("software.open_kernel_modules", f"the open kernel modules do not support {gpu} ({name})",
                               "set open_kernel_modules: false (or auto)"))
        if open_modules is False and name == "blackwell":
            out.append(Problem("software.open_kernel_modules", f"{gpu} (Blackwell) works only with the open kernel modules",
                               "set open_kernel_modules: true (or auto)"))
    for fw, ver in (frameworks or {}).items():
        known = RELEASES[fw]
        if not re.fullmatch(r"\d+(\.\d+)*", ver):
            out.append(Problem(f"software.frameworks.{fw}", f"{ver!r} is not a {FRAMEWORK_NAMES[fw]} version",
                               f"releases gpufleet knows: {', '.join(known)}"))
        elif release(fw, ver) is None:
            out.append(Problem(f"software.frameworks.{fw}", f"{FRAMEWORK_NAMES[fw]} {ver} is not a release gpufleet "
                                                            "knows",
                               f"the nearest is {nearest_release(fw, ver)}; releases gpufleet knows: {', '.join(known)}"))
        elif fw == "pytorch" and cuda in CUDA_MIN_DRIVER and torch_variant(ver, cuda) is None:
            mm = ".".join(str(ver).split(".")[:2])
            out.append(Problem("software.frameworks.pytorch", f"PyTorch {ver} has no wheel for CUDA {cuda} or older "
                                                              f"(published: {', '.join(TORCH_CUDA.get(mm, []))})",
                               "choose another PyTorch or CUDA version"))
    return out


def _padded(version: str, n: int) -> tuple[int, ...]:
    v = _v(version)
    return v + (0,) * (n - len(v))


def release(framework: str, version: str) -> str | None:
    """The known release a version names, as pip reads ``==``: 2.7 is 2.7.0."""
    return next((r for r in RELEASES[framework] if _padded(r, 4) == _padded(version, 4)), None)


def nearest_release(framework: str, version: str) -> str:
    """The newest known release not newer than ``version``, else the oldest."""
    older = [r for r in RELEASES[framework] if _padded(r, 4) <= _padded(version, 4)]
    return older[-1] if older else RELEASES[framework][0]


def gpu_arch(gpu: str | None) -> tuple[str, int] | None:
    if not gpu:
        return None
    for prefix in sorted(GPU_ARCH, key=len, reverse=True):
        if gpu.upper().startswith(prefix.upper()):
            return GPU_ARCH[prefix]
    return None


def use_open_modules(gpu: str | None, setting: bool | None) -> bool:
    """``auto`` (None): open modules from Turing on, proprietary for Volta and older."""
    if setting is not None:
        return setting
    arch = gpu_arch(gpu)
    return not (arch and arch[0] in ("volta", "pascal"))


def torch_variant(version: str, cuda: str) -> str | None:
    """The newest PyTorch CUDA wheel variant (e.g. ``cu126``) not newer than the installed CUDA."""
    mm = ".".join(str(version).split(".")[:2])
    if mm not in TORCH_CUDA:
        return "cu" + cuda.replace(".", "")  # a release gpufleet does not know: trust the user's pairing
    variants = [v for v in TORCH_CUDA[mm] if _v(v) <= _v(cuda) and v.split(".")[0] == cuda.split(".")[0]]
    return ("cu" + max(variants, key=_v).replace(".", "")) if variants else None


@dataclass
class Env:
    """A pinned Python environment for one framework."""

    name: str
    packages: list[str]
    index_url: str | None = None
    extra_index_urls: list[str] = field(default_factory=list)


def framework_env(name: str, version: str, cuda: str, gpu: bool) -> Env:
    """The pinned packages for a framework; a host without a GPU gets the CPU build."""
    if name == "pytorch":
        variant = torch_variant(version, cuda) if gpu else "cpu"
        return Env("pytorch", [f"torch=={version}"], f"https://download.pytorch.org/whl/{variant}")
    if name == "jax":
        extra = f"[cuda{cuda.split('.')[0]}]" if gpu else ""
        return Env("jax", [f"jax{extra}=={version}"])
    if name == "tensorflow":
        return Env("tensorflow", [f"tensorflow{'[and-cuda]' if gpu else '-cpu'}=={version}"])
    raise ValueError(name)


def slurm_window(controller: str) -> int:
    """How many releases older than slurmctld a slurmd may be: two, three from 24.11 (upgrades.html:
    "Upgrades from the previous two major releases are compatible"; 24.11's table lists 24.05, 23.11, 23.02)."""
    return 3 if _v(controller) >= _v("24.11") else 2


def slurm_check(hosts: list[tuple[str, str, str | None]], *, cgroups: bool,
                cgroup_v1: Collection[str] = ()) -> list[tuple[str, Problem]]:
    """Whether the Slurm each host's OS installs can run this cluster (``hosts``: where, its role
    ``controller`` or ``compute``, its OS as Salt's osfinger, None when unknown): with cgroups, a
    release that has cgroup v2, unless the host is seen to run cgroup v1 (``cgroup_v1``); every
    slurmd no newer than slurmctld and at most ``slurm_window`` releases older (slurmd <= slurmctld:
    "Rolling upgrades are also possible if the slurmctld is upgraded first", upgrades.html; slurmdbd
    runs beside slurmctld, so the same release). Hosts whose OS gpufleet has no Slurm figure for are
    not judged. Each problem comes with the host it is about; its key is ``os``: the host's OS is what
    to change."""
    known = [(where, role, os_, SLURM_OF_OS[os_]) for where, role, os_ in hosts if os_ in SLURM_OF_OS]
    out: list[tuple[str, Problem]] = []
    if cgroups:
        for where, role, os_, ver in known:
            if role == "compute" and _v(ver) < _v(SLURM_FIRST_CGROUP_V2) and where not in cgroup_v1:
                out.append((where, Problem("os", f"{os_} installs Slurm {ver}, which has no cgroup v2 support, and "
                                                 f"{os_} boots with cgroup v2 only: slurmd would start no job with cgroups on",
                                           f"{CGROUP_OS}; or set slurm: {{cgroups: false}}")))
    ctl = next(((where, os_, ver) for where, role, os_, ver in known if role == "controller"), None)
    if ctl is None:
        return out
    ctl_where, ctl_os, ctl_ver = ctl
    hint = CGROUP_OS if cgroups else SAME_OS
    for where, role, os_, ver in known:
        if role != "compute":
            continue
        behind = SLURM_RELEASES.index(ctl_ver) - SLURM_RELEASES.index(ver)
        if behind < 0:
            out.append((where, Problem("os", f"slurmd {ver} ({os_}) is newer than slurmctld {ctl_ver} on {ctl_where} "
                                             f"({ctl_os}): slurmctld cannot read its messages and the node never "
                                             "registers", hint)))
        elif behind > slurm_window(ctl_ver):
            out.append((where, Problem("os", f"slurmd {ver} ({os_}) is {behind} releases older than slurmctld "
                                             f"{ctl_ver} on {ctl_where} ({ctl_os}), which speaks to slurmd "
                                             f"{slurm_window(ctl_ver)} releases back at most: the node never "
                                             "registers", hint)))
    return out

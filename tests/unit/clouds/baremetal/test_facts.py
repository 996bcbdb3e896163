"""Fact parsers on captured output (see tests/data/facts/README.md)."""

import shutil
import subprocess

import pytest

from gpufleet.clouds import node_agent
from gpufleet.clouds.baremetal import facts

from conftest import ROOT

DATA = ROOT / "tests" / "data" / "facts"


def test_probe_of_a_test_rack_host():
    f = facts.parse_probe((DATA / "debian12-testrack.txt").read_text())
    assert (f.os_id, f.os_version, f.os_family, f.osfinger) == ("debian", "12", "Debian", "Debian-12")
    assert f.hostname == "h1"
    assert f.arch == "x86_64" and f.kernel
    assert f.cpus >= 1 and f.mem_gib > 1
    assert f.gpus == [] and f.ib == [] and f.driver is None
    assert {"interface": "eth0", "address": "10.77.0.11/24"} in f.addresses
    assert [m["target"] for m in f.mounts] == ["/"]
    assert len(f.machine_id) == 32  # /etc/machine-id: part of the host's identity


def test_probe_of_an_hgx_h100_server():
    f = facts.parse_probe((DATA / "hgx-h100.txt").read_text())
    assert f.osfinger == "Ubuntu-22.04" and f.os_family == "Debian"
    assert len(f.gpus) == 8 and {g["name"] for g in f.gpus} == {"NVIDIA H100 80GB HBM3"}
    assert f.gpus[3]["memory_mib"] == 81559 and f.gpus[0]["bus"] == "00000000:18:00.0"
    assert f.driver == "570.133.20"
    assert f.nvswitches == 4
    assert [c["name"] for c in f.ib] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    port = f.ib[0]["ports"][0]
    assert port == {"port": 1, "state": "Active", "phys_state": "LinkUp", "rate_gbps": 400, "lid": 11, "sm_lid": 1,
                    "link_layer": "InfiniBand"}
    assert [d["name"] for d in f.nvme] == ["nvme0n1", "nvme1n1"] and f.nvme[0]["size_bytes"] == 3840755982336
    assert {m["fstype"] for m in f.mounts} == {"ext4", "lustre", "nfs4"}
    assert f.mem_gib == 2015.3 and f.cpus == 224
    assert "8x NVIDIA H100 80GB HBM3" in f.summary() and "4 IB port(s)" in f.summary()


def test_gpus_from_pci_ids_before_the_driver_is_installed():
    text = (DATA / "hgx-h100.txt").read_text()
    secs = facts.sections(text)
    secs["nvidia-smi"] = ""
    f = facts.parse_probe("".join(f"{facts.MARK}{k}\n{v}\n" for k, v in secs.items()))
    assert len(f.gpus) == 8 and f.driver is None
    assert f.gpus[0]["pci_id"] == "10de:2330" and "H100 SXM5" in f.gpus[0]["name"]
    # NVSwitch bridges and the InfiniBand cards are not GPUs
    assert all(g["bus"] not in ("05:00.0", "1a:00.0") for g in f.gpus)


def test_sysfs_pci_fallback_finds_nvidia_functions():
    rows = facts.parse_sysfs_pci("0000:18:00.0 0x10de 0x2330 0x030200\n0000:05:00.0 0x10de 0x22a3 0x068000\n"
                                 "0000:00:01.0 0x1af4 0x1000 0x020000\n")
    assert [d["bus"] for d in facts.gpu_devices(rows)] == ["0000:18:00.0"]
    assert facts.nvswitch_count(rows) == 1


def test_ibv_devinfo_fallback():
    cas = facts.parse_ibv_devinfo((DATA / "ibv_devinfo-cx7.txt").read_text())
    assert [c["name"] for c in cas] == ["mlx5_0", "mlx5_1"]
    assert cas[0]["type"] == "MT4129" and cas[0]["firmware"] == "28.39.2048"
    assert cas[0]["ports"][0]["state"] == "Active" and cas[1]["ports"][0]["state"] == "Down"
    assert cas[1]["ports"][0]["link_layer"] == "Ethernet"


def test_os_family_of_derivatives():
    assert facts.os_family({"ID": "rocky", "ID_LIKE": "rhel centos fedora"}) == "RedHat"
    assert facts.os_family({"ID": "pop", "ID_LIKE": "ubuntu debian"}) == "Debian"
    assert facts.Facts(os_id="rocky", os_version="9.4").osfinger == "Rocky-9"
    assert facts.Facts(os_id="ubuntu", os_version="24.04").osfinger == "Ubuntu-24.04"


def test_malformed_output_gives_empty_facts_not_errors():
    assert facts.parse_lsblk("not json") == []
    assert facts.parse_nvidia_smi_csv("NVIDIA-SMI has failed because it couldn't communicate with the driver") == []
    assert facts.parse_ibstat("ibpanic: no CA found") == []


def test_sockets_cores_and_threads_from_lscpu():
    """``lscpu -p=SOCKET,CORE``: one line per online CPU, what slurm.conf's node line is told."""
    assert facts.parse_lscpu((DATA / "lscpu-h200-vm.txt").read_text()) == [1, 16, 1]
    assert facts.parse_lscpu((DATA / "lscpu-testrack.txt").read_text()) == [1, 2, 1]
    # two sockets of two cores with two hyper-threads each (CPUs numbered as Linux does: siblings last)
    smt = "# Socket,Core\n" + "\n".join(f"{s},{c}" for _ in range(2) for s in range(2) for c in (2 * s, 2 * s + 1))
    assert facts.parse_lscpu(smt) == [2, 2, 2]
    assert facts.parse_lscpu("# Socket,Core\n0,0\n0,1\n1,2\n") == []  # uneven: no shape to tell Slurm
    assert facts.parse_lscpu("") == []


def test_the_cgroup_hierarchy_a_host_runs_as_slurm_reads_it():
    """The review of issue 48: whether Slurm 21.08 (no cgroup v2 plugin) can confine jobs was judged by
    the OS's name, while its autodetect reads /sys/fs/cgroup (src/common/cgroup.c, 21.08.5): cgroup v1
    on the test rack's hosts (a tmpfs over this machine's own, whose systemd hierarchy is v1: the later
    mount is on top), v2 on the lent H200 (Ubuntu 24.04, cgroup2)."""
    assert facts.parse_cgroup((DATA / "mounts-cgroup-testrack.txt").read_text()) == "v1"
    assert facts.parse_cgroup((DATA / "mounts-cgroup-h200-vm.txt").read_text()) == "v2"
    hybrid = "tmpfs /sys/fs/cgroup tmpfs rw 0 0\ncgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n" \
             "cgroup2 /sys/fs/cgroup/systemd cgroup2 rw 0 0\n"
    assert facts.parse_cgroup(hybrid) == "v2" and facts.parse_cgroup("sysfs /sys sysfs rw 0 0\n") == ""
    assert facts.parse_probe((DATA / "debian12-testrack.txt").read_text()).cgroup == "v1"


def test_the_node_agent_counts_the_cpus_as_lscpu_does():
    """The cloud node agent (standard library only) reads sysfs; lscpu reads the same: one answer."""
    if shutil.which("lscpu") is None:
        pytest.skip("lscpu (util-linux) is not installed")
    out = subprocess.run(["lscpu", "-p=SOCKET,CORE"], capture_output=True, text=True, check=True).stdout
    assert node_agent.cpu_topology() == facts.parse_lscpu(out) != []

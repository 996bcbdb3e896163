"""Stable fault codes and what an operator does about each.

A code names a kind of fault, never a node or a value, so alerts and runbooks can key on it
(as azurehpc-health-checks' and DeepOps' validators do). Remedies follow NVIDIA's guidance:
the XID catalog (docs.nvidia.com/deploy/xid-errors), "GPU Memory Error Management" (row
remapping and page retirement: a pending remap or retirement clears with a GPU reset, a
remapping failure or too many retired pages is an RMA), the Fabric Manager user guide.
"""

from __future__ import annotations

# XIDs that take a GPU out of service until it is reset (a node check fails, an alert fires): azurehpc-health-checks'
# list (customTests/azure_gpu_xid.nhc @0e0a1ac: 48 56 57 58 62 63 64 65 68 69 73 74 79 80 81 92 119 120) less 92, plus
# 95, 109 and 140, which NVIDIA's XID catalog (docs.nvidia.com/deploy/xid-errors; NVSentinel's xiderrorsmapping.csv)
# resolves by resetting the GPU. Any other XID (13, 31, 43, 94: application faults or a contained ECC error) is not
# fatal, nor 92, "High single-bit ECC error rate": the GPU corrects single-bit errors, and the catalog
# (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, its Resolution Bucket columns) asks no reset for it.
# 46 ("GPU stopped processing") added: NVIDIA Health Validation's xid checks (docs.nvidia.com/health-validation/
# reference/checks/xid.md, read 2026-11-28) rate it CRITICAL, "drain: reset_gpu". The Blackwell NVLink5 XIDs (144-150)
# are not listed whole: the catalog resolves them per sub-code (some need no reset), and where one does need a reset the
# driver says so in the XID 154 that follows it (the catalog's "Xid 154 linkage" column): see RECOVERY_XID.
FATAL_XIDS = (46, 48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 95, 109, 119, 120, 140)
# XID 154 is the driver's own verdict on what a GPU needs: "NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action
# changed from 0x0 (None) to 0x1 (GPU Reset Required)" (drivers 580.126.09 / 595.58.03, forums.developer.nvidia.com
# t/364958; the XID catalog, docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, its "Xid 154 linkage"
# column, read 2026-11-28). Its action is NVML's nvmlDeviceGpuRecoveryAction_t: 0 None, 1 GPU reset, 2 node reboot,
# 3 drain P2P, 4 drain and reset (cuda-bindings' nvml.DeviceGpuRecoveryAction; NVIDIA "Error Recovery and Response
# Flags"). The GPU's last 154 decides: any action but None is fatal, 0x0 (back to None after a reset) is not.
RECOVERY_XID = 154

REMEDIES: dict[str, str] = {
    "GF-TOOL-FAILED": "the tool itself failed; run it by hand on the node to see why",
    "GF-HEALTH-TIMEOUT": "a tool did not answer in time (a GPU that fell off the bus hangs nvidia-smi): drain the "
                         "node, look for NVRM errors and XIDs in `dmesg`, then reset the GPU or reboot",
    "GF-GPU-DRIVER": "nvidia-smi cannot talk to the driver: check `dmesg` for NVRM errors, reinstall the driver "
                     "(`gpufleet configure --force`) or reboot",
    "GF-GPU-COUNT": "a GPU is missing (fallen off the bus, or not enumerated): reboot; if it stays missing, "
                    "drain the node and open a hardware ticket",
    "GF-GPU-MODEL": "the node's GPUs are not the ones the stack asked for: check the instance type or the rack's pool",
    "GF-DRIVER-VERSION": "the driver is not the stack's: `gpufleet configure --force` installs the stack's branch",
    "GF-CUDA-VERSION": "the CUDA toolkit is not the stack's: `gpufleet configure --force`",
    "GF-CUDA-DRIVER": "the driver is too old for the stack's CUDA: raise software.driver",
    "GF-PERSISTENCE-OFF": "enable persistence (`nvidia-smi -pm 1`, or the nvidia-persistenced service)",
    "GF-FABRIC-MANAGER": "NVSwitch systems need nvidia-fabricmanager running at the driver's exact version: "
                         "`systemctl status nvidia-fabricmanager`, then `gpufleet configure --force`",
    "GF-ECC-OFF": "enable ECC (`nvidia-smi -e 1`) and reset the GPU or reboot",
    "GF-ECC-UNCORRECTABLE": "uncorrectable memory errors since the driver loaded: drain the node, reset the GPU; "
                            "if they recur, open a hardware ticket",
    "GF-ROW-REMAP-PENDING": "a row remap is pending: drain the node and reset the GPU (or reboot) to apply it",
    "GF-ROW-REMAP-FAILED": "row remapping failed: the GPU has run out of spare rows; drain it and open an RMA",
    "GF-RETIRED-PAGES": "page retirement pending or over the limit: reset the GPU to apply; over the limit is an RMA",
    "GF-XID-FATAL": "a fatal XID since boot: drain the node; reset the GPU or reboot; if it recurs, open a hardware "
                    "ticket with `nvidia-bug-report.sh`",
    "GF-XID": "a non-fatal XID since boot (often an application fault): look at what ran at that time",
    "GF-THROTTLE-THERMAL": "the GPU slowed down for heat or a hardware signal under load: check cooling, fans and "
                           "the BMC's event log",
    "GF-THROTTLE-POWER": "the GPU hit its power cap under load: check `nvidia-smi -q -d POWER` and the power limit",
    "GF-POWER-LIMIT": "the power limit is below the GPU's TDP: `nvidia-smi -pl` or the BMC's power policy",
    "GF-PCIE-GEN": "the GPU links at a lower PCIe generation than it supports: check BIOS settings and the riser",
    "GF-PCIE-WIDTH": "the GPU links with fewer PCIe lanes than it has: reseat it or open a hardware ticket",
    "GF-NVLINK-DOWN": "an NVLink is inactive: reset the GPUs (or reboot); if it stays down, open a hardware ticket",
    "GF-NVLINK-ERRORS": "NVLink error counters are rising: watch them; replay/recovery errors that grow are a "
                        "hardware ticket",
    "GF-IB-PORT-DOWN": "an InfiniBand port is not Active: check the cable, the switch port and the subnet manager",
    "GF-IB-RATE": "an InfiniBand port runs below the fabric's rate: check the cable and the switch port's speed",
    "GF-IB-FLAP": "an InfiniBand port went down and came back (its link_downed counter grew): check the cable, "
                  "the transceiver and the switch port (`ibstat`, the switch's log); a port that keeps flapping is a "
                  "hardware ticket",
    "GF-IB-ERRORS": "an InfiniBand port counts symbol errors or link recoveries: watch them; a count that keeps "
                    "growing is a cable or transceiver to replace",
    "GF-IB-SATURATED": "an InfiniBand port counter stopped at its maximum (link_downed and link_error_recovery are "
                       "8 bits, symbol_error 16): it can show no growth; clear the port's counters (`perfquery -R`, "
                       "infiniband-diags) and find why it counted so much",
    "GF-IB-MISSING": "fewer InfiniBand ports than the fabric promises: check the HCA driver (`ibstat`, `lspci`)",
    "GF-EFA-MISSING": "fewer EFA devices than the instance type has: check the EFA driver and the launch's "
                      "network interfaces (`fi_info -p efa`)",
    "GF-TCPX-MISSING": "a GPUDirect-TCPX component is missing: rerun `gpufleet configure --force` (fabric state)",
    "GF-DCGM-FAIL": "a DCGM diagnostic failed: see its message; drain the node and reset the GPU",
    "GF-DCGM-WARN": "a DCGM diagnostic warned: see its message",
    # DCGM's health watches (`dcgmi health -c`): one code per system DCGM watches
    "GF-DCGM-MEMORY": "DCGM's memory watch: ECC errors or row remapping (see its message): drain the node, reset the "
                      "GPU; a remapping failure is an RMA",
    "GF-DCGM-PCIE": "DCGM's PCIe watch: replays over its limit: reseat the GPU or check the riser and link",
    "GF-DCGM-NVLINK": "DCGM's NVLink watch: link errors or a link down: reset the GPUs; if it recurs, a hardware ticket",
    "GF-DCGM-NVSWITCH": "DCGM's NvSwitch watch: check nvidia-fabricmanager's log and the switch; reboot the node",
    "GF-DCGM-THERMAL": "DCGM's thermal watch: the GPU slowed down for heat: check cooling and fans",
    "GF-DCGM-POWER": "DCGM's power watch: power capping or a power-brake event: check the power supply and limit",
    "GF-DCGM-INFOROM": "DCGM's InfoROM watch: the InfoROM is corrupt: open a hardware ticket",
    "GF-DCGM-DRIVER": "DCGM's driver watch: the driver reports an error: check `dmesg`, reinstall or reboot",
    "GF-DCGM-SM": "DCGM's SM watch: see its message; drain the node and reset the GPU",
    "GF-DCGM-CONNECTX": "DCGM's ConnectX watch: the NIC reports errors: check the cable and the HCA",
    "GF-DCGM-PMU": "DCGM's PMU watch: see its message",
    "GF-DCGM-MCU": "DCGM's MCU watch: see its message",
    "GF-DCGM-OTHER": "DCGM's health watches report a system gpufleet does not name: see its message",
    "GF-NCCL-ERROR": "the NCCL all-reduce did not complete: check the fabric manager, NVLink and the driver",
    "GF-NCCL-WRONG": "the all-reduce produced wrong values: a GPU or link corrupts data; drain the node",
    "GF-NCCL-BUSBW": "NCCL all-reduce bandwidth is below the threshold: check NVLink, the fabric manager, "
                     "PCIe/ACS settings and other jobs on the node",
    "GF-NCCL-NVLS": "the all-reduce reaches what NVLink carries without NVLink SHARP, not what NVLS gives: check "
                    "that the fabric manager runs and NCCL_NVLS_ENABLE is not 0 (a VM may not expose NVLS)",
    "GF-COPY-BW": "host<->device copy bandwidth is low: check PCIe link, NUMA/IOMMU settings and other jobs",
    "GF-MOUNT-MISSING": "a file system the stack asked for is not mounted: `gpufleet configure --force`, then "
                        "check the storage client's log",
    "GF-SPOT-NOTICE": "the cloud announced it takes the VM back (spot eviction, preemption, rebalance): the node "
                      "is drained; the pool's health.on_fault rules replace it once it is gone",
    "GF-GATE": "the node has not passed its pool's boot gate (health.gate) yet: it takes no work until it does; "
               "see its health faults in `gpufleet status`",
    "GF-ACTIVE": "the node failed its active checks (health.active_every: DCGM's diagnostic at level 2, the single-node "
                 "all-reduce, run while it was idle): it stays drained until they pass (tried again each hour)",
    "GF-STORAGE-SLOW": "read throughput from a mount is below what the stack asked for: check the file "
                       "system's capacity/throughput tier and the client's network",
}


def remedy(code: str | None) -> str | None:
    return REMEDIES.get(code) if code else None

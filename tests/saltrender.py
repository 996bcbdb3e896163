"""Rendering the Salt formulas with real Salt (salt-call --local from .salt-venv, grains overridden)
for the supported OSes, with the pillar gpufleet builds for representative stacks."""

import json
import subprocess
from pathlib import Path

from gpufleet import stacks
from gpufleet.configure import pillar, saltrun
from tests.conftest import ROOT

SALT = ROOT / "salt"
OSES = {
    "Ubuntu-22.04": {"os_family": "Debian", "os": "Ubuntu", "osfinger": "Ubuntu-22.04", "oscodename": "jammy",
                     "kernelrelease": "5.15.0-105-generic"},
    "Ubuntu-24.04": {"os_family": "Debian", "os": "Ubuntu", "osfinger": "Ubuntu-24.04", "oscodename": "noble",
                     "kernelrelease": "6.8.0-45-generic"},
    "Debian-12": {"os_family": "Debian", "os": "Debian", "osfinger": "Debian-12", "oscodename": "bookworm",
                  "kernelrelease": "6.1.0-25-amd64"},
    "Rocky-9": {"os_family": "RedHat", "os": "Rocky", "osfinger": "Rocky-9", "oscodename": "Blue Onyx",
                "kernelrelease": "5.14.0-427.13.1.el9_4.x86_64"},
}

STACKS = {
    "rack-ib": """
name: rack-ib
owner: t@example.com
pools:
  - name: dc1
    provider: baremetal
    site: dc1
    gpu: H100
    gpus_per_node: 8
    interconnect: infiniband-ndr
    subnet_manager: host
    hosts: [{address: 10.0.0.1}]
    storage:
      - {type: lustre, mgs_nids: ["10.10.1.1@o2ib", "10.10.1.2@o2ib"], fsname: scratch, mount: /lustre}
      - {type: nfs, server: nfs01, export: /export/home, mount: /home/shared}
    salt:
      pillar:
        lustre_client: {repo: "https://mirror.example.com/lustre/ jammy main"}
""",
    "aws-efa": """
name: aws-efa
owner: t@example.com
software: {frameworks: {pytorch: "2.7.1", jax: "0.5.0", tensorflow: "2.18.0"}, container_runtime: containerd}
pools:
  - {name: p5, provider: aws, region: us-east-1, instance_type: p5.48xlarge, interconnect: efa,
     storage: [{type: lustre, capacity_tib: 2.4, mount: /fsx}]}
""",
    "gcp-tcpx": """
name: gcp-tcpx
owner: t@example.com
pools:
  - {name: a3, provider: gcp, region: us-central1, zone: us-central1-a, instance_type: a3-highgpu-8g,
     interconnect: gpudirect-tcpx}
""",
    "azure-ib": """
name: azure-ib
owner: t@example.com
software: {driver: "580", cuda: "13.0", frameworks: {pytorch: "2.9.0"}}
access: {public_key: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpufleetTestKeyOnlyNotARealKeyAAAAAAAAAAA t@example.com"}
pools:
  - {name: nd, provider: azure, region: eastus, instance_type: Standard_ND96isr_H100_v5, interconnect: infiniband-ndr,
     storage: [{type: lustre, capacity_tib: 16, mount: /amlfs}]}
""",
}


def stack_pillar(name: str, cat, tmp_path) -> dict:
    p = tmp_path / f"{name}.yaml"
    p.write_text(STACKS[name])
    st = stacks.load(p, cat)
    pool = st.pools[0]
    gpu, count = pillar.gpu_of(pool, cat)
    return pillar.build(st, pool, cluster=name, gpu=gpu, gpu_count=count, subnet_manager_host=pool.subnet_manager == "host")


def render(exe: Path, work: Path, grains: dict, pil: dict, sls: list[str]) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    (work / "pillar").mkdir(exist_ok=True)
    (work / "pillar" / "top.sls").write_text("base:\n  '*': [gpufleet]\n")
    (work / "pillar" / "gpufleet.sls").write_text(saltrun.pillar_sls(pil))  # as gpufleet writes it
    (work / "minion").write_text(json.dumps({
        "file_client": "local", "file_roots": {"base": [str(SALT)]}, "pillar_roots": {"base": [str(work / "pillar")]},
        "root_dir": str(work / "root"), "cachedir": str(work / "cache"), "log_file": str(work / "minion.log"),
        "grains": grains}))
    r = subprocess.run([str(exe), "--local", "-c", str(work), "--out=json", "state.show_sls", ",".join(sls)],
                       capture_output=True, text=True, timeout=300)
    # salt-call prints nothing on stdout when it dies before its outputter (a traceback on stderr):
    # say why, so that a CI log shows it
    log = work / "minion.log"
    why = f"salt-call exited {r.returncode}: {r.stderr[-2000:]}\n{log.read_text()[-2000:] if log.exists() else ''}"
    assert r.stdout.strip(), f"render failed for {grains['osfinger']}: {why}"
    out = json.loads(r.stdout)["local"]
    assert isinstance(out, dict), f"render failed for {grains['osfinger']}: {out}"
    return out

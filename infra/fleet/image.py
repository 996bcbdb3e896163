"""`gpufleet image plan` and `image build`: what a golden image of each cloud pool is built from,
written where Packer reads it, and Packer run on it.

For each cloud pool: a bake bundle (the state tree archive that `up` publishes, so a node can tell
the image is its pool's; ``bake.json``, the spec of ``configure.bake``; the node agent and
``node_bake.py``, the bootstrap's bake mode) and the variable file of its cloud's template under
``images/`` (``<pool>.<cloud>.pkrvars.json``: region, base image, builder, the image's name and
gpufleet tags). ``packer build -var-file=... images/<cloud>.pkr.hcl`` builds it as written.

``build`` runs that Packer command (``-machine-readable``: one ``timestamp,target,type,data...``
line per event, commas in data written ``%!(PACKER_COMMA)``; developer.hashicorp.com/packer/docs/
commands#machine-readable-output, read 2026-11), tells each ``ui`` line as it comes, and records
each ``artifact ... id`` in the manifest (``state.images``), read per cloud (``images.artifacts``).
No Packer is installed by gpufleet: without one, or with one too old for HCL2 plugins, it says so.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gpufleet import nodes
from gpufleet.catalog.images import DEFAULT_IMAGE, IMAGES
from gpufleet.clouds import bootstrap, cloud, held_images, inventory
from gpufleet.clouds.pools import pair_digest
from gpufleet.clouds.tags import expiry_from, format_expiry
from gpufleet.configure import bake
from gpufleet.errors import GpufleetError, InputError, ToolMissing
from gpufleet.paths import make_dir
from gpufleet.stacks import cloud_pools
from gpufleet.state.images import BuiltImage, Manifest

AGENT_FILES = ("node_agent.py", "node_bake.py")


@dataclass
class ImagePlan:
    pool: str
    provider: str
    name: str  # the image's name: the AMI's and GCP image's name, the Azure version's gpufleet:image tag
    template: str
    var_file: str
    bundle: str
    tree: str  # the state tree's SHA-256: a node booting from the image compares it with its pool's
    states: list[str]
    unset: list[str] = field(default_factory=list)  # variables the template needs that are not known here

    @property
    def command(self) -> str:
        return f"packer init {self.template} && packer build -var-file={self.var_file} {self.template}"

    def to_dict(self) -> dict:
        return {**asdict(self), "command": self.command}


def templates_dir() -> Path:
    """The image templates: the checkout's ``images/``, or the wheel's copy."""
    here = Path(__file__).resolve().parents[1]
    for p in (here.parent / "images", here / "images"):
        if (p / "aws.pkr.hcl").exists():
            return p
    raise ToolMissing("the image templates are not installed with gpufleet", "reinstall gpufleet")


def write_bundle(folder: Path, archive: bytes, spec: dict) -> None:
    """A bake bundle in ``folder``: the state tree archive, the bake spec, the node agent and its bake mode."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / bake.ARCHIVE).write_bytes(archive)
    (folder / "bake.json").write_text(json.dumps(spec, indent=1, sort_keys=True, default=str) + "\n")
    for f in AGENT_FILES:
        shutil.copyfile(bootstrap.AGENT.with_name(f), folder / f)


def image_name(stack, pool, tree: str) -> str:
    """Named for the stack and the pool, ended by a digest of them with the state tree it holds (a new
    tree, a new image; two pairs that read alike, two names): what a pool boots as
    ``gpufleet:<name>``, the newest build of it. Each build's own name in the cloud adds its
    ``build_stamp``."""
    return f"gpufleet-{stack.name}-{pool.name}-{pair_digest(stack.name, pool.name, tree, size=10)}"


def build_stamp() -> str:
    """This build's UTC second: AWS and GCP refuse an image name twice, Azure a gallery version."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d%H%M%S")


def plan(stack, cat, out: Path, *, pool: str | None = None, expires: dt.timedelta | None = None) -> list[ImagePlan]:
    """Write each cloud pool's (or ``pool``'s) bake bundle and template variables under ``out``;
    ``expires``: the images are tagged to be deleted by `reap` that long after they are planned."""
    pools = cloud_pools(stack, pool, without=": a rack's hosts are configured in place")
    for p in pools:
        if p.image and p.image not in IMAGES:
            raise InputError(f"pool {p.name} boots {p.image}: an image is baked from one of gpufleet's base images",
                             f"set its image to one of {', '.join(IMAGES)} (or leave it out) to plan its golden image")
    archive, tree = nodes.state_tree(stack, cat)
    templates = templates_dir()
    stamp = build_stamp()
    tags = {p.name: image_tags(stack, p, tree, expires) for p in pools}  # each cloud takes them, before any write
    builder = {p.name: {**tags[p.name], **held_images.builder_tags(stack.name)} for p in pools}
    planned = []  # every pool's variables before anything is written: a pool that cannot be planned leaves no files
    for p in pools:
        c = cloud(p.provider)
        bundle = out / p.name / "bundle"
        spec = bake.spec(stack, p, cat, tree=tree, base_image=p.image or DEFAULT_IMAGE)
        try:
            settings = c.program_settings(plan=False)
        except Exception:  # noqa: BLE001 - no credentials here: the account's own values stay unset, and said
            settings = {}
        variables = c.image_vars(p, name=tags[p.name]["gpufleet:image"], tags=tags[p.name], builder_tags=builder[p.name],
                                 bundle=str(bundle.resolve()), settings=settings,
                                 zones=cat.region_zones(p.provider, p.region), build=stamp)
        planned.append((p, c, bundle, spec, variables))
    made = []
    with writing_in(out):
        for p, c, bundle, spec, variables in planned:
            write_bundle(bundle, archive, spec)
            var_file = out / f"{p.name}.{p.provider}.pkrvars.json"
            var_file.write_text(json.dumps(variables, indent=1, sort_keys=True) + "\n")
            template = templates / c.image_template
            made.append(ImagePlan(p.name, p.provider, tags[p.name]["gpufleet:image"], str(template), str(var_file),
                                  str(bundle), tree, spec["states"], unset=_unset(template, variables)))
    return made


def image_tags(stack, pool, tree: str, expires: dt.timedelta | None) -> dict[str, str]:
    """The tags of the pool's image; InputError when its cloud would refuse one, or one of its
    builder's (GCP: a label over 63 characters, which the image's name, made of the stack's and the
    pool's, can be)."""
    tags = {"gpufleet:image": image_name(stack, pool, tree), "gpufleet:stack": stack.name, "gpufleet:pool": pool.name,
            "gpufleet:owner": stack.owner, "gpufleet:tree": tree[:16]}
    if expires is not None:
        tags["gpufleet:expires-at"] = format_expiry(expiry_from(dt.datetime.now(dt.timezone.utc), expires))
    refused = cloud(pool.provider).tag_problems({**tags, **held_images.builder_tags(stack.name)})
    if refused:
        raise InputError(f"pool {pool.name}'s image: {refused[0][1]}", "the image is named for the stack and the "
                         "pool: shorten their names")
    return tags


@contextlib.contextmanager
def writing_in(out: Path):
    """Writing under ``--out``: a folder that cannot be there (a file or a device on its way) is bad
    input (exit 2), and a write the disk refuses (read-only, full) is work not done (exit 1), each
    with the path, never an OSError."""
    make_dir(out, "--out")
    try:
        yield
    except OSError as e:  # a copy's error names its source first, the file it writes second
        raise GpufleetError(f"could not write {e.filename2 or e.filename or out}: {e.strerror or e}",
                            "free some space there, or give --out a folder you can write") from None



def _unset(template: Path, variables: dict) -> list[str]:
    """The template's variables without a default that ``variables`` leaves out."""
    text = template.read_text()
    declared = re.findall(r'^variable "(\w+)" \{(.*?)^\}', text, re.S | re.M)
    return [n for n, body in declared if "default" not in body and n not in variables]


PACKER_HINT = ("install Packer 1.10 or newer (https://developer.hashicorp.com/packer/install; Debian's 1.6 cannot "
               "load HCL2 plugins), or set GPUFLEET_PACKER; without it, run the commands `gpufleet image plan` prints")
COMMA = "%!(PACKER_COMMA)"


def packer() -> str:
    """The Packer binary: ``$GPUFLEET_PACKER`` or ``packer`` on the PATH, 1.10 or newer."""
    exe = os.environ.get("GPUFLEET_PACKER") or shutil.which("packer")
    if not exe:
        raise ToolMissing("Packer is not installed: `gpufleet image build` runs it", PACKER_HINT)
    try:
        out = subprocess.run([exe, "version"], capture_output=True, text=True, timeout=60).stdout
    except OSError as e:  # not there, not executable, not a program
        named = " (GPUFLEET_PACKER)" if os.environ.get("GPUFLEET_PACKER") else ""
        raise ToolMissing(f"{exe}{named} cannot be run: {e.strerror or e}", PACKER_HINT) from None
    m = re.search(r"v?(\d+)\.(\d+)", out)
    if not m or (int(m[1]), int(m[2])) < (1, 10):
        raise ToolMissing(f"{exe} is {out.strip() or 'not a Packer'}: HCL2 templates with plugins need 1.10 or newer",
                          PACKER_HINT)
    return exe


def build(stack, cat, out: Path, *, pool: str | None = None, expires: dt.timedelta | None = None, tell=None,
          manifest: Manifest | None = None) -> list:
    """Plan, then run Packer on each pool's template; the images built (recorded in the manifest)."""
    plans = plan(stack, cat, out, pool=pool, expires=expires)
    unset = [f"{m.pool}: {', '.join(m.unset)} in {m.var_file}" for m in plans if m.unset]
    if unset:
        raise InputError("variables only the account knows are not set: " + "; ".join(unset),
                         "set them in the variable files (or log in to the cloud so gpufleet can read them)")
    exe = packer()
    manifest = manifest or Manifest()
    made = []
    for m in plans:
        variables = json.loads(Path(m.var_file).read_text())
        cloud(m.provider).image_destination(variables)  # what the plugin needs to exist before it builds
        init = subprocess.run([exe, "init", m.template], capture_output=True, text=True)
        if init.returncode != 0:
            raise GpufleetError(f"packer init {m.template} failed: {(init.stderr or init.stdout).strip()[-500:]}",
                                "it downloads the template's plugins: check the network or a plugin mirror")
        cmd = [exe, "build", "-machine-readable", f"-var-file={m.var_file}", m.template]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        ids, errors = [], []
        for line in proc.stdout:
            fields = [f.replace(COMMA, ",") for f in line.rstrip("\n").split(",")]
            if len(fields) < 4:
                continue
            kind, data = fields[2], fields[3:]
            if kind == "ui" and len(data) >= 2:
                (tell or (lambda _p, _t: None))(m.pool, data[-1].replace("\\n", " ").strip())
                if data[0] == "error":
                    errors.append(data[-1].strip())
            elif kind == "artifact" and len(data) >= 3 and data[1] == "id":
                ids.append(data[2])
        if proc.wait() != 0 or not ids:
            raise GpufleetError(f"packer build of pool {m.pool}'s image failed (exit {proc.returncode})"
                                + (f": {errors[-1][:400]}" if errors else ""),
                                f"the lines above say where; to run it by hand: {m.command}")
        now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        c = cloud(m.provider)
        for region, cloud_id in c.image_artifacts(ids, variables):
            image = BuiltImage(m.name, m.provider, region, cloud_id, stack.name, m.pool, m.tree, now,
                               c.image_purchase_plan(variables))
            manifest.record(image)
            made.append(image)
    return made


@dataclass
class Listing:
    """The golden images the clouds hold (found by tag), the builds the manifest records, and what
    could not be read."""

    images: list = field(default_factory=list)  # clouds.base.FoundImage
    recorded: set = field(default_factory=set)  # lowercased ids of the builds the manifest records
    clouds: object = None  # clouds.inventory.Clouds
    unread: dict = field(default_factory=dict)

    def is_recorded(self, i) -> bool:
        return i.id.lower() in self.recorded

    def to_dict(self) -> dict:
        return {"images": [i.to_dict() | {"recorded": self.is_recorded(i)} for i in self.images],
                "unread": self.unread}


def listed(providers: list[str] | None = None, regions: list[str] | None = None) -> Listing:
    """Every golden image of the clouds that can be asked here (or of ``providers``), by tag."""
    clouds = inventory.open_clouds(providers, required=bool(providers), regions=regions)
    images, unread = held_images.held(clouds)
    return Listing(images, {e.id.lower() for e in Manifest().entries()}, clouds, clouds.unread(unread))


def delete(target: str, *, yes: bool, every: bool = False, providers: list[str] | None = None,
           regions: list[str] | None = None):
    """The builds ``target`` names (a dry run unless ``yes``: nothing removed), those of them kept,
    what became of each removed, and the listing. ``target`` is one build's id, or an image's name: its builds but the one
    pools boot (``held_images.booted``), kept unless ``every``. InputError when no cloud asked holds
    one, or when what is asked is only a build pools boot."""
    found = listed(providers, regions)
    named = [i for i in found.images if target.lower() in (i.name.lower(), i.id.lower())]
    if not named:
        raise InputError(f"no golden image {target!r} in the clouds asked ({', '.join(found.clouds.open) or 'none'})",
                         "`gpufleet image list` shows the images each cloud holds and each build's id")
    kept = set() if every else held_images.booted(found.images, Manifest())
    mine = [i for i in named if i.id.lower() not in kept]
    if not mine:
        booted = ", ".join(i.id for i in named)
        raise InputError(f"{target} is what pools naming gpufleet:{named[0].name} boot ({booted}): kept",
                         "add --all to delete it too (those pools then need `gpufleet image build` first)")
    return mine, [i for i in named if i not in mine], (held_images.remove(found.clouds, mine) if yes else []), found

"""`gpufleet image plan`: what a golden image of each cloud pool is built from, written where
Packer reads it.

For each cloud pool: a bake bundle (the state tree archive that `up` publishes, so a node can tell
the image is its pool's; ``bake.json``, the spec of ``configure.bake``; the node agent and
``node_bake.py``, the bootstrap's bake mode) and the variable file of its cloud's template under
``images/`` (``<pool>.<cloud>.pkrvars.json``: region, base image, builder, the image's name and
gpufleet tags). ``packer build -var-file=... images/<cloud>.pkr.hcl`` builds it as written.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gpufleet.clouds import bootstrap, cloud
from gpufleet.configure import bake, cloudnodes
from gpufleet.errors import InputError, ToolMissing
from gpufleet.nodes import cloud as cloud_nodes

AGENT_FILES = ("node_agent.py", "node_bake.py")


@dataclass
class ImagePlan:
    pool: str
    provider: str
    name: str  # the image's name (AMI name, GCP image, Azure gallery image version's source)
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


def image_name(stack, pool, tree: str) -> str:
    """Named for the stack, the pool and the state tree it holds (a new tree, a new image)."""
    return f"gpufleet-{stack.name}-{pool.name}-{tree[:10]}"


def plan(stack, cat, out: Path, *, pool: str | None = None) -> list[ImagePlan]:
    """Write each cloud pool's (or ``pool``'s) bake bundle and template variables under ``out``."""
    pools = [p for p in stack.pools if not p.on_rack and (pool is None or p.name == pool)]
    if not pools:
        names = [p.name for p in stack.pools if not p.on_rack]
        raise InputError(f"no cloud pool {pool!r} in stack {stack.name}" if pool else
                         f"stack {stack.name} has no cloud pool: a rack's hosts are configured in place",
                         f"its cloud pools: {', '.join(names) or 'none'}")
    archive, tree = cloudnodes.tree_archive(extra=cloud_nodes.tree_extras(stack, cat, verify=False)["extra"])
    templates = templates_dir()
    out.mkdir(parents=True, exist_ok=True)
    made = []
    for p in pools:
        c = cloud(p.provider)
        bundle = out / p.name / "bundle"
        bundle.mkdir(parents=True, exist_ok=True)
        (bundle / bake.ARCHIVE).write_bytes(archive)
        spec = bake.spec(stack, p, cat, tree=tree, base_image=p.image or "default")
        (bundle / "bake.json").write_text(json.dumps(spec, indent=1, sort_keys=True, default=str) + "\n")
        for f in AGENT_FILES:
            shutil.copyfile(bootstrap.AGENT.with_name(f), bundle / f)
        name = image_name(stack, p, tree)
        tags = {"gpufleet:image": name, "gpufleet:stack": stack.name, "gpufleet:pool": p.name,
                "gpufleet:owner": stack.owner, "gpufleet:tree": tree[:16]}
        try:
            settings = c.program_settings(plan=False)
        except Exception:  # noqa: BLE001 - no credentials here: the account's own values stay unset, and said
            settings = {}
        variables = c.image_vars(p, name=name, tags=tags, bundle=str(bundle.resolve()), settings=settings)
        var_file = out / f"{p.name}.{p.provider}.pkrvars.json"
        var_file.write_text(json.dumps(variables, indent=1, sort_keys=True) + "\n")
        template = templates / c.image_template
        made.append(ImagePlan(p.name, p.provider, name, str(template), str(var_file), str(bundle), tree,
                              spec["states"], unset=_unset(template, variables)))
    return made


def _unset(template: Path, variables: dict) -> list[str]:
    """The template's variables without a default that ``variables`` leaves out."""
    import re

    text = template.read_text()
    declared = re.findall(r'^variable "(\w+)" \{(.*?)^\}', text, re.S | re.M)
    return [n for n, body in declared if "default" not in body and n not in variables]

"""`gpufleet image plan --container` and `image build --container`: a pool's training container,
baked from ``images/Dockerfile`` by the same bootstrap the nodes run (``node_bake.py``) with only
what a container holds (``configure.bake.CONTAINER_STATES``: NCCL and the frameworks).

``plan`` writes the build context (``<out>/<pool>/container/``: the state tree archive, the bake
spec, the node agent and its bake mode) and the build arguments (``<pool>.container.args.json``:
the CUDA base image for the stack's CUDA and the pool's Ubuntu, and the bundle's path in the
context). ``build`` runs Docker or Podman on it (``build -f ... --build-arg ... --iidfile F -t
NAME CONTEXT``; both write the built image's ID, ``sha256:<digest>``, to ``--iidfile``:
docs.docker.com/reference/cli/docker/buildx/build/#iidfile, docs.podman.io podman-build
``--iidfile``, read 2026-11), tells each line of its output as it comes, and records the ID in the
image manifest under ``container``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from gpufleet import nodes
from gpufleet.configure import bake
from gpufleet.errors import GpufleetError, InputError, ToolMissing
from gpufleet.fleet.image import image_name, templates_dir, write_bundle, writing_in
from gpufleet.state.images import BuiltImage, Manifest

# The CUDA toolkit version a stack names -> NVIDIA's base image tag of it (nvidia/cuda on Docker Hub
# publishes each minor version at its last patch release; these tags are the ones in use in public
# Dockerfiles read 2026-11). Another version is given with --cuda-image.
CUDA_TAGS = {"12.8": "12.8.1", "12.6": "12.6.3"}
UBUNTU = {"ubuntu-24.04": "ubuntu24.04"}  # the pool's image -> the base image's OS (default ubuntu22.04)
BUILDER_HINT = ("install Docker or Podman, or set GPUFLEET_CONTAINER_BUILDER to one; without it, run the command "
                "`gpufleet image plan --container` prints")


@dataclass
class ContainerPlan:
    pool: str
    name: str
    dockerfile: str
    context: str
    args_file: str
    args: dict
    tree: str
    states: list[str]

    def command(self, builder: str = "docker", iidfile: str | None = None) -> str:
        args = " ".join(f"--build-arg {k}={v}" for k, v in sorted(self.args.items()))
        return (f"{builder} build -f {self.dockerfile} {args}" + (f" --iidfile {iidfile}" if iidfile else "")
                + f" -t {self.name} {self.context}")

    def to_dict(self) -> dict:
        return {**asdict(self), "command": self.command()}


def cuda_image(cuda: str, os_image: str | None) -> str:
    tag = CUDA_TAGS.get(cuda)
    if tag is None:
        raise InputError(f"no CUDA base image is known for CUDA {cuda}",
                         f"give --cuda-image nvidia/cuda:<tag> (known here: {', '.join(sorted(CUDA_TAGS))})")
    return f"nvidia/cuda:{tag}-cudnn-devel-{UBUNTU.get(os_image or '', 'ubuntu22.04')}"


def plan(stack, cat, out: Path, *, pool: str | None = None, base: str | None = None) -> list[ContainerPlan]:
    """Write each pool's (or ``pool``'s) container build context and arguments under ``out``."""
    pools = [p for p in stack.pools if pool is None or p.name == pool]
    if not pools:
        raise InputError(f"no pool {pool!r} in stack {stack.name}", f"its pools: {', '.join(p.name for p in stack.pools)}")
    archive, tree = nodes.state_tree(stack, cat)
    dockerfile = templates_dir() / "Dockerfile"
    made = []
    with writing_in(out):
        for p in pools:
            image = base or cuda_image(stack.software.cuda, p.image)
            spec = bake.spec(stack, p, cat, tree=tree, base_image=image, container=True)
            write_bundle(out / p.name / "container", archive, spec)
            args = {"CUDA_IMAGE": image, "BUNDLE": f"{p.name}/container"}
            args_file = out / f"{p.name}.container.args.json"
            args_file.write_text(json.dumps(args, indent=1, sort_keys=True) + "\n")
            made.append(ContainerPlan(p.name, image_name(stack, p, tree), str(dockerfile), str(out), str(args_file),
                                      args, tree, spec["states"]))
    return made


def builder() -> str:
    """``$GPUFLEET_CONTAINER_BUILDER``, else Docker or Podman on the PATH."""
    exe = os.environ.get("GPUFLEET_CONTAINER_BUILDER") or shutil.which("docker") or shutil.which("podman")
    if not exe:
        raise ToolMissing("no container builder is installed: `gpufleet image build --container` runs Docker or "
                          "Podman", BUILDER_HINT)
    return exe


def build(stack, cat, out: Path, *, pool: str | None = None, base: str | None = None, tell=None,
          manifest: Manifest | None = None) -> list[BuiltImage]:
    """Plan, then build each pool's container; the images built (their IDs recorded in the manifest)."""
    plans = plan(stack, cat, out, pool=pool, base=base)
    exe = builder()
    manifest = manifest or Manifest()
    made = []
    for m in plans:
        iidfile = out / f"{m.pool}.container.iid"
        iidfile.unlink(missing_ok=True)
        cmd = [exe, "build", "-f", m.dockerfile, *[a for k, v in sorted(m.args.items()) for a in ("--build-arg", f"{k}={v}")],
               "--iidfile", str(iidfile), "-t", m.name, m.context]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        last = ""
        for line in proc.stdout:
            if line.strip():
                last = line.strip()
                (tell or (lambda _p, _t: None))(m.pool, last)
        digest = iidfile.read_text().strip() if iidfile.exists() else ""
        if proc.wait() != 0 or not digest.startswith("sha256:"):
            raise GpufleetError(f"the container build of pool {m.pool} failed (exit {proc.returncode})"
                                + (f": {last[:400]}" if last else ""),
                                f"the lines above say where; to run it by hand: {m.command(exe)}")
        now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        image = BuiltImage(m.name, "container", "local", digest, stack.name, m.pool, m.tree, now)
        manifest.record(image)
        made.append(image)
    return made

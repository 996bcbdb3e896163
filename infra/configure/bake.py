"""What a golden image bakes for a pool, as ``clouds/node_bake.py`` reads it: the state tree that
`up` publishes (so a booting node can tell the image is its pool's), the pool's formulas but its
node states (``configure.NODE_STATES``), and the pool's pillar built by the same code as a node's.
A container image bakes only what a training environment holds (``CONTAINER_STATES``)."""

from __future__ import annotations

from gpufleet.clouds import bootstrap
from gpufleet.configure import NODE_STATES
from gpufleet.configure import pillar as pillarmod

ARCHIVE = "tree.tar.gz"  # beside the spec in the bundle: node_bake.py reads it relative to the spec
CONTAINER_STATES = ("nccl", "frameworks")  # a container has no driver, kernel settings or mounts of its own


def spec(stack, pool, cat, *, tree: str, base_image: str | None, container: bool = False) -> dict:
    """The bake spec of ``pool``'s image (``container``: its training container's)."""
    gpu, count = pillarmod.gpu_of(pool, cat)
    pil = pillarmod.build(stack, pool, cluster=stack.name, gpu=gpu, gpu_count=count, index=None)
    states = [s for s in pil["gpufleet"]["states"] if s not in NODE_STATES]
    if container:
        states = [s for s in states if s in CONTAINER_STATES]
    sw = stack.software
    return {"archive": ARCHIVE, "tree": tree, "states": states, "pillar": pil,
            "salt": {"version": bootstrap.SALT_VERSION, "venv": bootstrap.SALT_VENV, "pip_args": []},
            "software": {"driver": sw.driver, "cuda": sw.cuda, "nccl": sw.nccl, "frameworks": dict(sw.frameworks)},
            "base_image": base_image}

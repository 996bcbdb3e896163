"""The manifest of golden images built (``gpufleet image build``): one JSON file in the data
directory, an entry per image name and place (its newest build), so a pool naming ``image:
gpufleet:<name>`` boots the build made for its cloud and region, and `plan` can say whether it holds
the pool's state tree."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from gpufleet import paths
from gpufleet.errors import GpufleetError

PREFIX = "gpufleet:"  # how a pool names a built image: image: gpufleet:<name>


@dataclass(frozen=True)
class BuiltImage:
    name: str  # gpufleet's name (image_name: stack, pool, tree)
    provider: str
    region: str
    id: str  # what the cloud calls it: ami-..., projects/P/global/images/NAME, a gallery image version id
    stack: str
    pool: str
    tree: str  # the state tree it holds (SHA-256)
    built_at: str
    plan: dict | None = None  # the purchase plan its VMs must name (a build from an Azure Marketplace image sold with one)

    def to_dict(self) -> dict:
        return asdict(self)


class Manifest:
    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path else paths.images_path()

    def entries(self) -> list[BuiltImage]:
        if not self.path.exists():
            return []
        try:
            return [BuiltImage(**e) for e in json.loads(self.path.read_text())["images"]]
        except (ValueError, KeyError, TypeError) as e:
            raise GpufleetError(f"the image manifest {self.path} is damaged ({e})",
                                "move it aside; `gpufleet image build` writes a new one") from None

    def record(self, image: BuiltImage) -> None:
        """Add ``image``, a new build (replacing the older build of the same name and place)."""
        self._write([e for e in self.entries() if (e.name, e.provider, e.region) != (image.name, image.provider,
                                                                                    image.region)] + [image])

    def forget(self, provider: str, image_id: str) -> None:
        """Drop the entry of the build ``image_id`` on ``provider`` (it was deleted); ids compared
        without case, as ARM's are."""
        if self.path.exists():
            self._write([e for e in self.entries() if (e.provider, e.id.lower()) != (provider, image_id.lower())])

    def _write(self, entries: list[BuiltImage]) -> None:
        """The manifest, written whole or not at all."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"images": [e.to_dict() for e in entries]}, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, self.path)

    def find(self, name: str, provider: str, region: str | None) -> BuiltImage | None:
        """The newest image called ``name`` built for ``provider`` in ``region`` (None: in any region)."""
        found = [e for e in self.entries() if (e.name, e.provider) == (name, provider) and region in (None, e.region)]
        return max(found, key=lambda e: e.built_at) if found else None

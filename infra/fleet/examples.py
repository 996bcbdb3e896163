"""`gpufleet examples`: the example stacks that ship with gpufleet, listed, printed and copied.

They are the checkout's ``stacks/examples/`` or, installed from a wheel, its copy in
``gpufleet/examples`` (pyproject.toml package-dir), with what they name beside them: ``keys/``
holds a throw-away public key (its private half was never kept), so that they validate anywhere.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from gpufleet.errors import GpufleetError, InputError, NotFound, ToolMissing

# the first sentence of a header comment: up to a full stop that ends the text or comes before a space
FIRST_SENTENCE = re.compile(r"^.*?\.(?=\s|$)")


@dataclass(frozen=True)
class Example:
    name: str
    path: Path
    providers: list[str]  # of its pools, in their order
    description: str  # the first sentence of the file's own header comment
    beside: list[str]  # files beside it that it names (relative paths): they go where it goes

    def to_dict(self) -> dict:
        return {"name": self.name, "file": self.path.name, "providers": self.providers,
                "description": self.description, "beside": self.beside}


def examples_dir() -> Path:
    """The example stacks: the checkout's ``stacks/examples/``, or the wheel's copy."""
    here = Path(__file__).resolve().parents[1]
    for p in (here.parent / "stacks" / "examples", here / "examples"):
        if any(p.glob("*.yaml")):
            return p
    raise ToolMissing("the example stacks are not installed with gpufleet", "reinstall gpufleet")


def listing() -> list[Example]:
    """Every example stack, by name."""
    return [_read(p) for p in sorted(examples_dir().glob("*.yaml"))]


def find(name: str) -> Example:
    """The example called ``name`` (its file name without .yaml; the file name too)."""
    examples = {e.name: e for e in listing()}
    found = examples.get(name.removesuffix(".yaml"))
    if found is None:
        raise NotFound("example stack", name, examples, listed_by="gpufleet examples")
    return found


def _read(path: Path) -> Example:
    text = path.read_text(encoding="utf-8")
    header = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        header.append(line.lstrip("#").strip())
    joined = " ".join(header)
    match = FIRST_SENTENCE.match(joined)
    doc = yaml.safe_load(text) or {}
    providers = list(dict.fromkeys(p.get("provider") for p in doc.get("pools") or [] if p.get("provider")))
    key = (doc.get("access") or {}).get("public_key")
    # a key given as a relative path is read beside the stack (spec._check_access); an inline key names no file
    beside = [key] if isinstance(key, str) and (path.parent / key).is_file() and not Path(key).is_absolute() else []
    return Example(path.stem, path, providers, match.group(0) if match else joined, beside)


@dataclass
class Copied:
    folder: Path
    copied: list[str]  # relative paths written
    unchanged: list[str]  # relative paths already there with the same content


def copy(dest: Path, names: list[str] | None = None, *, force: bool = False) -> Copied:
    """Copy the example stacks (``names``, else every one) and the files they name into ``dest``,
    made if need be. A file already there with other content is refused (bad input, the files
    named) unless ``force``; then nothing at all is written."""
    root = examples_dir()
    chosen = [find(n) for n in names] if names else listing()
    files = sorted({e.path.name for e in chosen} | {b for e in chosen for b in e.beside})
    changed, unchanged = [], []
    for rel in files:
        target = dest / rel
        blocker = next((p for p in target.parents if p.exists() and not p.is_dir()), None)
        if blocker is not None:
            raise InputError(f"cannot copy {rel} into {dest}: {blocker} is a file", "give --copy a folder")
        if target.is_dir():
            raise InputError(f"cannot copy {rel}: {target} is a folder", "move it aside, or give --copy another folder")
        if os.path.lexists(target):
            if _same(target, root / rel):
                unchanged.append(rel)
            else:
                changed.append(target)
    if changed and not force:
        it = "it differs from the example" if len(changed) == 1 else "they differ from the examples"
        raise InputError(f"not overwriting {', '.join(map(str, changed))}: {it}",
                         "--force overwrites, or give --copy another folder")
    written = [rel for rel in files if rel not in unchanged]
    try:
        for rel in written:
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            if os.path.lexists(target):
                target.unlink()  # a link is replaced, never written through
            shutil.copyfile(root / rel, target)
    except OSError as e:
        raise GpufleetError(f"cannot write {e.filename or dest}: {e.strerror or e}",
                            "give --copy a folder you can write") from None
    return Copied(dest, written, unchanged)


def _same(path: Path, shipped: Path) -> bool:
    try:
        return path.is_file() and path.read_bytes() == shipped.read_bytes()
    except OSError:  # unreadable: not known to be the same, so never overwritten without --force
        return False

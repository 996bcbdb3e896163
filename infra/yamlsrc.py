"""YAML loading that remembers where every key came from (for file:line errors)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.errors import SpecError

Path_ = tuple  # a key path such as ("pools", 0, "gpu")


@dataclass
class Located:
    """Plain data from a YAML document plus the line of every key path (1-based)."""

    data: object
    path: str
    lines: dict[Path_, int] = field(default_factory=dict)

    def line(self, keys: Path_) -> int | None:
        """Line of the deepest known prefix of ``keys``."""
        keys = tuple(keys)
        while keys:
            if keys in self.lines:
                return self.lines[keys]
            keys = keys[:-1]
        return self.lines.get((), 1)


def load_file(path: str | Path) -> Located:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(str(path), None, "", "file not found",
                        "check the path; example stacks live in stacks/examples/") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as e:
        raise SpecError(str(path), None, "", f"cannot read: {e}") from None
    return load_text(text, str(path))


def load_text(text: str, path: str = "<string>") -> Located:
    import yaml

    loader_cls = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        loader = loader_cls(text)
        try:
            node = loader.get_single_node()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else None
        what = " ".join(x for x in (e.context, e.problem) if x)
        raise SpecError(path, line, "", f"YAML syntax error: {what}",
                        "check indentation and quoting around this line") from None
    except yaml.YAMLError as e:
        raise SpecError(path, None, "", f"YAML error: {e}") from None
    out = Located(data=None, path=path)
    if node is None:
        out.data = {}
        return out
    constructor = yaml.SafeLoader("")  # for scalar resolution only
    out.data = _walk(node, (), out, constructor)
    return out


def _walk(node, keys: Path_, out: Located, ctor):
    import yaml

    out.lines.setdefault(keys, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        result: dict = {}
        for k_node, v_node in node.value:
            k = ctor.construct_object(k_node, deep=True)
            if isinstance(k, (list, dict)):
                raise SpecError(out.path, k_node.start_mark.line + 1, _dotted(keys), "a key must be a plain value")
            if k in result:
                raise SpecError(out.path, k_node.start_mark.line + 1, _dotted(keys + (k,)),
                                "duplicate key", "remove one of the two entries")
            out.lines[keys + (k,)] = k_node.start_mark.line + 1
            result[k] = _walk(v_node, keys + (k,), out, ctor)
            out.lines[keys + (k,)] = k_node.start_mark.line + 1
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_walk(v, keys + (i,), out, ctor) for i, v in enumerate(node.value)]
    return ctor.construct_object(node, deep=True)


def _dotted(keys: Path_) -> str:
    s = ""
    for k in keys:
        s += f"[{k}]" if isinstance(k, int) else (f".{k}" if s else str(k))
    return s


dotted = _dotted

"""YAML loading that remembers where every key came from (for file:line errors)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.errors import SpecError
from gpufleet.userfiles import MB, YAML_BYTES, FileRefused, read_text

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


# Limits on what a stack, config or workload file may be: far above any real file, low enough
# that a hostile or broken one fails at once with its file and line instead of eating the
# machine ("billion laughs": aliases that expand to a billion values; nesting a thousand deep).
# Its size is capped where every user file is read (``userfiles.YAML_BYTES``).
MAX_DEPTH = 64
MAX_VALUES = 200_000  # scalars, mappings and sequences, counting each alias as often as it is used
MERGE = "tag:yaml.org,2002:merge"
PLAIN_COLLECTIONS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq")


def load_file(path: str | Path) -> Located:
    """A YAML file, read as every user file is (a regular file under its cap), with every
    refusal said as a SpecError naming the file."""
    try:
        text = read_text(path, "a YAML file", YAML_BYTES)
    except FileNotFoundError:
        raise SpecError(str(path), None, "", "file not found",
                        "check the path; `gpufleet examples --copy DIR` writes the example stacks into DIR") from None
    except FileRefused as e:
        raise SpecError(str(path), None, "", e.problem, e.hint) from None
    except (PermissionError, UnicodeDecodeError) as e:
        raise SpecError(str(path), None, "", f"cannot read: {e}") from None
    return load_text(text, str(path))


def load_text(text: str, path: str = "<string>") -> Located:
    import yaml

    if len(text) > YAML_BYTES:
        raise SpecError(path, None, "", f"the text is {len(text) / MB:,.1f} MB; at most {YAML_BYTES / MB:,.0f} MB of "
                        "YAML is read")
    loader_cls = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        _check_depth(loader_cls, text, path)
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
    walk = _Walk(out, yaml.SafeLoader(""))  # the constructor resolves scalars only
    out.data = walk.value(node, ())
    return out


def _check_depth(loader_cls, text: str, path: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH from the event stream, before any node is built: the
    composer recurses, and libyaml (PyYAML 6.0.4 on) refuses 1000 levels in its own words.
    libyaml reads ahead up to a line, so on a line that opens hundreds of flow collections ([ {)
    its refusal comes before the events that say how deep the text is: then the pure-Python
    parser, which has no such limit, tells (libyaml holds back no events for block collections)."""
    import yaml

    try:
        line = _too_deep(loader_cls, text)
    except yaml.MarkedYAMLError:
        if loader_cls is yaml.SafeLoader or text.count("[") + text.count("{") <= MAX_DEPTH:
            raise
        try:
            line = _too_deep(yaml.SafeLoader, text)
        except yaml.MarkedYAMLError:
            line = None
        if line is None:
            raise
    if line is not None:
        raise SpecError(path, line, "", f"nested more than {MAX_DEPTH} levels deep",
                        "a stack file is a few levels deep: is this the right file?")


def _too_deep(loader_cls, text: str) -> int | None:
    """The line of the first node inside more than MAX_DEPTH collections, or None."""
    import yaml

    loader = loader_cls(text)
    try:
        depth = 0
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, yaml.NodeEvent) and depth > MAX_DEPTH:
                return event.start_mark.line + 1
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        return None
    finally:
        loader.dispose()


class _Walk:
    """Plain data from the node graph, remembering each key path's line, within the limits above.
    Merge keys (``<<: *defaults``) merge like YAML 1.1 says: the mapping's own keys win."""

    def __init__(self, out: Located, ctor):
        self.out, self.ctor, self.count = out, ctor, 0

    def _fail(self, node, keys: Path_, problem: str, hint: str | None = None):
        raise SpecError(self.out.path, node.start_mark.line + 1, _dotted(keys), problem, hint)

    def value(self, node, keys: Path_):
        import yaml

        self.count += 1
        if self.count > MAX_VALUES:
            self._fail(node, keys, f"the document holds more than {MAX_VALUES:,} values (each use of an alias "
                       "counts again)", "far more than any stack or config needs: is this the right file? Aliases "
                       "(*name) that repeat other aliases multiply")
        if len(keys) > MAX_DEPTH:
            self._fail(node, keys, f"nested more than {MAX_DEPTH} levels deep")
        self.out.lines.setdefault(keys, node.start_mark.line + 1)
        if not isinstance(node, yaml.ScalarNode) and node.tag not in PLAIN_COLLECTIONS:
            self._fail(node, keys, f"unsupported YAML tag {node.tag}", "stack and config files are plain YAML: "
                       "mappings, lists, strings, numbers, booleans")
        if isinstance(node, yaml.MappingNode):
            return self.mapping(node, keys)
        if isinstance(node, yaml.SequenceNode):
            return [self.value(v, keys + (i,)) for i, v in enumerate(node.value)]
        return self.scalar(node, keys)

    def scalar(self, node, keys: Path_):
        import yaml

        try:
            return self.ctor.construct_object(node, deep=True)
        except yaml.YAMLError as e:
            self._fail(node, keys, f"cannot read this value: {getattr(e, 'problem', None) or e}")
        except ValueError as e:  # what YAML takes for a date but is none (2030-13-45): datetime's refusal
            self._fail(node, keys, f"{node.value!r} is not a date ({e})", "write a date as YYYY-MM-DD, e.g. 2026-11-20")

    def mapping(self, node, keys: Path_) -> dict:
        import yaml

        result: dict = {}
        merged: list = []
        for k_node, v_node in node.value:
            if k_node.tag == MERGE:
                sources = v_node.value if isinstance(v_node, yaml.SequenceNode) else [v_node]
                if not all(isinstance(s, yaml.MappingNode) for s in sources):
                    self._fail(k_node, keys, "a merge key (<<) takes a mapping or a list of mappings",
                               "write <<: *name, where &name marks a mapping")
                merged += sources
                continue
            k = self.value(k_node, keys + ("<key>",)) if not isinstance(k_node, yaml.ScalarNode) else \
                self.scalar(k_node, keys)
            if isinstance(k, (list, dict)):
                self._fail(k_node, keys, "a key must be a plain value")
            if k in result:
                self._fail(k_node, keys + (k,), "duplicate key", "remove one of the two entries")
            self.out.lines[keys + (k,)] = k_node.start_mark.line + 1
            result[k] = self.value(v_node, keys + (k,))
            self.out.lines[keys + (k,)] = k_node.start_mark.line + 1
        for source in merged:  # earlier sources win over later ones, the mapping's own keys over all
            for k, v in self.mapping(source, keys).items():
                result.setdefault(k, v)
        return result


def _dotted(keys: Path_) -> str:
    s = ""
    for k in keys:
        s += f"[{k}]" if isinstance(k, int) else (f".{k}" if s else str(k))
    return s


dotted = _dotted

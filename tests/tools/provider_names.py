"""An import-linter contract type: cross-cloud code never branches on a provider's name.

DESIGN.md's rule ("cross-cloud code goes through the protocol and the registry, never an if/elif
on provider names") is not about imports, so none of import-linter's own types can check it. This
one reads the source of every module of the contract's package outside ``allowed_modules`` and
reports each comparison (``==``, ``!=``, ``in``, ``not in``) with a provider's name as a literal
(``gpufleet.providers.PROVIDERS``), alone or in a tuple, list or set. Naming a provider to build
a record (``Offer("baremetal", ...)``) is not branching and passes.

Registered in pyproject.toml under ``contract_types``; `make lint` runs it with the others.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

from importlinter import Contract, ContractCheck, fields, output

_OPS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)


class ProviderNamesContract(Contract):
    type_name = "provider_names"

    containers = fields.ListField(subfield=fields.StringField())
    allowed_modules = fields.ListField(subfield=fields.StringField(), required=False)
    names_from = fields.StringField()  # "module:ATTRIBUTE" holding the provider names

    def check(self, graph, verbose: bool) -> ContractCheck:
        module, attr = self.names_from.split(":")
        names = set(getattr(importlib.import_module(module), attr))
        allowed = list(self.allowed_modules or [])
        found = []
        for name in sorted(graph.modules):
            if not any(name == c or name.startswith(c + ".") for c in self.containers):
                continue
            if any(name == a or name.startswith(a + ".") for a in allowed):
                continue
            path = _source(name)
            if path is None:
                continue
            for line, text in branches(path.read_text(encoding="utf-8"), names):
                found.append({"module": name, "line": line, "text": text})
        return ContractCheck(kept=not found, metadata={"found": found})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for f in check.metadata["found"]:
            output.print_error(f"{f['module']}:{f['line']}: compares with a provider's name: {f['text']}", bold=False)
            output.new_line()
        output.print("Dispatch through gpufleet.clouds.provider(name) / cloud(name) and an attribute or method of "
                     "the provider, or ask pool.on_rack / `in CLOUDS` for the kind of node.")


def branches(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, source text) of each comparison in ``source`` with one of ``names`` as a literal."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare) or not any(isinstance(op, _OPS) for op in node.ops):
            continue
        if any(_names_a_provider(x, names) for x in (node.left, *node.comparators)):
            out.append((node.lineno, ast.get_source_segment(source, node) or ""))
    return out


def _names_a_provider(node, names: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in names
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(isinstance(e, ast.Constant) and e.value in names for e in node.elts)
    return False


def _source(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    return Path(spec.origin) if spec and spec.origin and spec.origin.endswith(".py") else None

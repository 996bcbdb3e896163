"""The floor plan holds: every provider behind the interface, imports at the top of modules
(the contracts in pyproject.toml see them), no module reaching into another's private names,
and the import contracts themselves able to fail."""

import ast
import os
import shutil
import subprocess
import sys

import pytest

from gpufleet import clouds
from gpufleet.clouds.base import Cloud, CloudApi, Provider
from gpufleet.providers import CLOUDS, PROVIDERS

from conftest import ROOT

LIBRARY = ROOT / "infra"
# Imports of gpufleet modules that stay inside a function, and why: each pulls in something
# heavy that most commands never need.
LAZY = {("catalog/__init__.py", "gpufleet"): "pydantic, only when there is a user config to read",
        ("engine/program.py", "gpufleet.clouds.baremetal"): "the rack's Pulumi dynamic resource, inside the program"}


def _modules(root):
    for path in sorted(root.rglob("*.py")):
        yield path, ast.parse(path.read_text(), str(path))


def test_every_provider_is_one_folder_behind_the_interface():
    assert sorted(p.name for p in (LIBRARY / "clouds").iterdir() if (p / "__init__.py").exists()) == sorted(PROVIDERS)
    for name in PROVIDERS:
        impl = clouds.provider(name)
        assert isinstance(impl, Provider) and impl.name == name
    for name in CLOUDS:
        c = clouds.cloud(name)
        assert isinstance(c, Cloud)
        assert isinstance(c.api(), CloudApi)
        mocks = c.mocks()
        assert all(hasattr(mocks, a) for a in ("ID_PREFIX", "COLUMNS", "resource", "call", "summary"))
        assert hasattr(c.program(), "build_region") and hasattr(c.prices(), "FLAGSHIPS")


def test_library_modules_import_gpufleet_at_the_top():
    found = {}
    for path, tree in _modules(LIBRARY):
        for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gpufleet"):
                    found[(str(path.relative_to(LIBRARY)), node.module)] = node.lineno
                elif isinstance(node, ast.Import):
                    found.update({(str(path.relative_to(LIBRARY)), a.name): node.lineno
                                  for a in node.names if a.name.startswith("gpufleet")})
    assert set(found) == set(LAZY), {k: v for k, v in found.items() if k not in LAZY}


def test_matplotlib_is_imported_by_the_report_charts_alone_and_only_when_drawing():
    """`gpufleet --help` and `compare` never pay for matplotlib (test_cli checks it at run time):
    one module imports it, inside its loader, which names the extra when it is missing."""
    found = []
    for root in (LIBRARY, ROOT / "cli"):
        for path, tree in _modules(root):
            top = {id(n) for n in tree.body}
            for node in ast.walk(tree):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                if any(n.split(".")[0] == "matplotlib" for n in names):
                    found.append((str(path.relative_to(ROOT)), id(node) in top))
    assert found and {f for f, _ in found} == {"infra/report/charts.py"} and not any(t for _, t in found), found


def test_no_module_uses_another_modules_private_names():
    bad = []
    for root in (LIBRARY, ROOT / "cli"):
        for path, tree in _modules(root):
            aliases = set()
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gpufleet"):
                    bad += [f"{path.name}: from {node.module} import {a.name}" for a in node.names
                            if a.name.startswith("_") and not a.name.startswith("__")]
                    aliases |= {a.asname or a.name for a in node.names}
                elif isinstance(node, ast.Import):
                    aliases |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.startswith("gpufleet")}
            bad += [f"{path.name}:{n.lineno}: {n.value.id}.{n.attr}" for n in ast.walk(tree)
                    if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in aliases
                    and n.attr.startswith("_") and not n.attr.startswith("__")]
    assert bad == []


BROKEN = {
    "an upward import": ("spec.py", "from gpufleet.fleet import up  # noqa: E402\n",
                         "gpufleet.spec is not allowed to import gpufleet.fleet"),
    "a branch on a provider's name": ("fleet/up.py", "if __name__ in ('aws', 'x'):\n    pass\n",
                                      "gpufleet.fleet.up:"),
    "the node agent importing gpufleet": ("clouds/node_agent.py", "from gpufleet import errors  # noqa: E402\n",
                                          "gpufleet.clouds.node_agent is not allowed to import gpufleet.errors"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", BROKEN)
def test_each_contract_can_fail(tmp_path, case):
    """The contracts can fail: the same tree with one module changed does, and says where."""
    lint = shutil.which("lint-imports", path=os.path.dirname(sys.executable))
    if lint is None:
        pytest.skip("import-linter is not installed (the test extra installs it)")
    tree = tmp_path / "gpufleet"
    shutil.copytree(LIBRARY, tree, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "cli", tree / "cli", ignore=shutil.ignore_patterns("__pycache__"))
    args = [lint, "--config", str(ROOT / "pyproject.toml"), "--no-cache"]
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{ROOT / 'tests' / 'tools'}"}
    assert subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True).returncode == 0
    path, added, said = BROKEN[case]
    with (tree / path).open("a") as f:
        f.write("\n" + added)
    r = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 1 and said in r.stdout, r.stdout

"""The suite runs against pinned versions (tests/constraints.txt, what `make test` installs with)
while users get pyproject's ranges: every pin must satisfy its range, and every dependency gpufleet
declares must be pinned, or a new release could change what `plan` emits unseen (issue 29)."""

import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import ROOT


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "tests" / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"not a pin: {line!r}"
            pins[canonicalize_name(name)] = version
    return pins


def _declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        reqs += extra
    return [Requirement(r) for r in reqs]


def test_every_declared_dependency_is_pinned_inside_its_range():
    pins = _pins()
    for req in _declared():
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not pinned in tests/constraints.txt"
        assert req.specifier.contains(pins[name], prereleases=True), \
            f"{req.name}=={pins[name]} (tests/constraints.txt) is outside pyproject's {req.specifier}"


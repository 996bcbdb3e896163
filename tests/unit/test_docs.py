"""The README and the pages of docs/ hold together: every relative link reaches a file and, with an
#anchor, a heading of it; every page is linked from the README; a heading is written once; a shell
example pipes only into programs; the README's set-up is its two commands; the exit codes the
docs list are the ones the code has; and every module, test or folder of the code a page names is there.

Anchors follow GitHub's rule (github-slugger, as GitHub renders a Markdown heading; read 2026-11):
the heading's text lowercased, every character that is not a letter, digit, `_`, `-` or space
dropped, spaces made `-`; a second heading with the same anchor gets `-1`, a third `-2`."""

import functools
import re
import shutil
from collections import Counter

import pytest

from conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```.*?^```[ \t]*$", re.M | re.S)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def prose(text: str) -> str:
    """The page without its fenced code blocks and inline code, where `#` and `[x](y)` are not Markdown."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def headings(text: str) -> list[str]:
    return [m.group(2) for m in re.finditer(r"^(#{1,6}) +(.+?) *$", FENCE.sub("", text), re.M)]


def anchors(text: str) -> set[str]:
    seen: Counter[str] = Counter()
    out = set()
    for title in headings(text):
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)  # a link in a heading: its text
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        out.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
        seen[slug] += 1
    return out


def page_id(path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_relative_link_reaches_a_file_and_a_heading(page):
    text = page.read_text()
    broken = []
    for target in LINK.findall(prose(text)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...: not ours to check here
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest.read_text())):
            broken.append(f"{target}: no heading with that anchor in {dest.name}")
    assert not broken, f"{page_id(page)}: " + "; ".join(broken)


# The project's own folders: a path that starts with one of them is read from the checkout's root.
TOP = ("infra", "cli", "tests", "salt", "images", "stacks", "docs")
# Every Markdown page of the project: the README, docs/, and the notes beside the code and data
# (CAPACITY.md of each cloud, salt/README.md, the READMEs of tests/data/...).
NOTES = [ROOT / "README.md", *sorted(p for top in TOP for p in (ROOT / top).rglob("*.md"))]
PY_PATH = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w-]+\.py)\b")
FOLDER = re.compile(r"`((?:%s)/[\w./-]*/)`" % "|".join(TOP))
MODULE = re.compile(r"(?<![\w./-])gpufleet((?:\.\w+)+)")


@functools.cache
def project_files() -> tuple[str, ...]:
    return tuple(p.relative_to(ROOT).as_posix() for top in TOP for p in (ROOT / top).rglob("*")
                 if p.is_file() and "__pycache__" not in p.parts)


def missing_module(dotted: str) -> str | None:
    """Why ``gpufleet<dotted>`` names nothing, else None: its longest prefix that is a module of the
    checkout (``gpufleet.cli`` is cli/, the rest infra/), and the next name defined in that module."""
    parts = dotted.strip(".").split(".")
    base, parts = (ROOT / "cli", parts[1:]) if parts[0] == "cli" else (ROOT / "infra", parts)
    for i in range(len(parts), -1, -1):
        here = base.joinpath(*parts[:i])
        source = here / "__init__.py" if (here / "__init__.py").exists() else here.with_suffix(".py")
        if i and not source.exists():
            continue
        if i == len(parts):
            return None
        name = parts[i]
        defined = rf"^\s*(?:async\s+)?(?:def|class)\s+{name}\b|^{name}\s*[:=]|^(?:from|import)\s.*\b{name}\b"
        if re.search(defined, source.read_text(), re.M):
            return None
        return f"gpufleet{dotted}: no module or name {name!r} in {source.relative_to(ROOT)}"
    return None


@pytest.mark.parametrize("page", NOTES, ids=page_id)
def test_every_module_path_a_page_names_exists(page):
    """A page that names a module, a test or a folder of the code (``infra/stacks/``, ``tests/unit/
    catalog/test_catalog.py``, ``clouds/aws/bulk_prices.py``, ``gpufleet.stacks.pools``) names one
    that is there: a module moved (issue 50: the stack loader out of fleet/, the tests under the
    code's folders) leaves no page pointing at where it was. A path from one of the project's folders
    is read from the root; a shorter one (``clouds/aws/bulk_prices.py``) is the end of a file's path."""
    text, files = page.read_text(), project_files()
    gone = []
    for path in PY_PATH.findall(text):
        there = (ROOT / path).is_file() if path.startswith(tuple(f"{top}/" for top in TOP)) else \
            any(f == path or f.endswith("/" + path) for f in files)
        if not there:
            gone.append(f"{path}: no such file")
    gone += [f"{folder}: no such folder" for folder in FOLDER.findall(text) if not (ROOT / folder).is_dir()]
    gone += [why for dotted in MODULE.findall(text) if (why := missing_module(dotted))]
    assert not gone, f"{page_id(page)}: " + "; ".join(gone)


def test_every_page_of_docs_is_linked_from_the_readme():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in LINK.findall(prose((ROOT / "README.md").read_text()))}
    assert [page_id(p) for p in PAGES[1:] if p.resolve() not in linked] == []


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_a_heading_is_written_once(page):
    """A heading that repeats itself on its line ("### Verify ...### Verify ...") or twice in a page
    gives a reader two of the same and a link an anchor it did not mean."""
    titles = headings(page.read_text())
    assert [t for t in titles if re.search(r"#{1,6} ", t)] == []
    assert [t for t, n in Counter(titles).items() if n > 1] == []


def shell_lines(text: str):
    for block in re.findall(r"^```(?:sh|bash|console)\n(.*?)^```", text, re.M | re.S):
        for line in block.splitlines():
            words = re.sub(r"'[^']*'|\"[^\"]*\"", "''", line)  # quoted text: never a pipe
            yield line, re.split(r"\s#", words, maxsplit=1)[0]


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_a_shell_example_pipes_only_into_programs(page):
    """`gpufleet catalog gpus | instances` read as a shell line runs a program called `instances`:
    an example written as a pipe must pipe into a program (head, jq ...), or be two commands."""
    wrong = []
    for line, code in shell_lines(page.read_text()):
        for stage in code.split("|")[1:]:
            program = stage.split()[0] if stage.split() else ""
            if shutil.which(program) is None:
                wrong.append(line.strip())
    assert wrong == [], f"{page_id(page)}: a pipe into no program"


def test_the_readme_sets_up_with_its_two_commands():
    """The product owner's rule: one command installs and runs the main job on the embedded
    defaults, one installs and runs the tests; `make test-fast` is no third set-up."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Set-up"):]
    section = section[:section.index("\n## ", 1)]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    commands = [code.strip() for line, code in shell_lines(f"```sh\n{block}```\n") if code.strip()]
    assert commands == ["make demo", "make test"]
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)


def test_the_exit_codes_listed_are_the_ones_the_code_has():
    """docs/cli.md lists every exit code cron and CI may see, and the README's summary names each: the
    code's are the one table in gpufleet.errors (no other module writes a code as a number:
    test_exit_codes.py)."""
    from gpufleet import errors

    table = {v for k, v in vars(errors).items() if k.startswith("EXIT_")}
    listed = {int(n) for n in re.findall(r"^- (\d+): ", (ROOT / "docs" / "cli.md").read_text(), re.M)}
    assert listed == table
    readme = (ROOT / "README.md").read_text()
    summary = readme[readme.index("Exit codes: "):readme.index("Each is explained in")]
    assert {int(n) for n in re.findall(r"(?<![\w-])(\d+)\s", summary)} == table, summary

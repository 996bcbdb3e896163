"""Property-based: the example stacks, mutated (wrong types, unknown, renamed and duplicate keys,
extreme numbers, odd strings, YAML features: anchors, merges, tags, several documents, alias
bombs), go through `validate`, `plan` and `compare --stack`. Never a traceback, never a hang,
exit 0 or 2 (compare also 1, when a valid stack's pool has no offer), and every exit 2 names the
file and line. The examples run in a fixed budget (`derandomize`: the same ones every run)."""

import re
import shutil
import signal

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import EXAMPLES, ROOT, cli

BASES = {p.stem: p.read_text() for p in EXAMPLES}
KEYS = ROOT / "stacks" / "examples" / "keys"
ODD = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40), st.just("x" * 5000), st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.sampled_from(["a", "name", "nodes", "<<"]), st.integers(-3, 3), max_size=2),
    st.sampled_from(["0.0.0.0/0", "::/0", "10.0.0.0/0", "999.1.1.1", "", "10.0.0.1; rm -rf /", "us-east-1",
                     "p5.48xlarge", "H100", "-1", "1e400", "../x", "null", "99999999999d", "llm:70b", "efa", "true"]))


def _paths(data, prefix=()):
    yield prefix
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _paths(v, prefix + (i,))


def _parent(data, path):
    for k in path[:-1]:
        data = data[k]
    return data


CONFIG = """
discounts: {aws: 0.12, gcp: 0.20}
prices:
  - {provider: aws, item: p4d.24xlarge, region: us-east-1, market: spot, usd_per_hour: 9.80, source: console,
     as_of: 2026-11-20}
sites:
  - {name: dc1, gpu: H100, gpus_per_node: 8, nodes: 4, purchase_usd_per_node: 250000, depreciation_years: 4,
     utilization: 0.6, power_kw_per_node: 10.2, usd_per_kwh: 0.12, pue: 1.4}
catalog_max_age_days: 90
"""


@st.composite
def mutated(draw, bases: dict[str, str]) -> str:
    data = yaml.safe_load(bases[draw(st.sampled_from(sorted(bases)))])
    for _ in range(draw(st.integers(0, 3))):
        path = draw(st.sampled_from([p for p in _paths(data) if p]))
        parent, key = _parent(data, path), path[-1]
        op = draw(st.sampled_from(["tweak", "replace", "delete", "add", "rename"]))
        if op == "tweak":  # a value of the same type: a stack that may well be valid, but odd
            v = parent[key]
            parent[key] = (not v if isinstance(v, bool) else draw(st.integers(1, 64)) if isinstance(v, int)
                           else v * draw(st.sampled_from([0.5, 3, 1000])) if isinstance(v, float) else v)
        elif op == "replace":
            parent[key] = draw(ODD)
        elif op == "delete":
            del parent[key]
        elif op == "add" and isinstance(parent, dict):
            parent[draw(st.sampled_from(["nodez", "x-note", "spot", "zone", "interconnect", "ttl"]))] = draw(ODD)
        elif op == "rename" and isinstance(parent, dict) and isinstance(key, str):
            parent[key[:-1] or "k"] = parent.pop(key)
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    feature = draw(st.sampled_from(["", "duplicate", "bomb", "tag", "merge", "second-document", "tab", "cut"]))
    lines = text.splitlines()
    if feature == "duplicate" and len(lines) > 1:
        i = draw(st.integers(0, len(lines) - 1))
        lines.insert(i, lines[i])
    elif feature == "bomb":
        lines = ['x-a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]'] + [
            f"x-{c}: &{c} [" + ", ".join([f"*{p}"] * 9) + "]" for p, c in zip("abcdefgh", "bcdefghi")] + lines
    elif feature == "tag":
        lines.append("x-evil: !!python/object/apply:os.system ['true']")
    elif feature == "merge" and "pools:" in text:
        lines = ["x-defaults: &d {spot: true, nodes: 2}"] + [
            re.sub(r"^(\s*)- name:", lambda m: f"{m[1]}- <<: *d\n{m[1]}  name:", ln) for ln in lines]
    elif feature == "second-document":
        lines += ["---", "name: another"]
    elif feature == "tab" and lines:
        lines[-1] = "\t" + lines[-1]
    elif feature == "cut":
        lines = lines[: draw(st.integers(0, len(lines)))]
    return "\n".join(lines) + "\n"


# the fixed budget: the same examples every run (derandomize), no example database between runs
BUDGET = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                         HealthCheck.data_too_large])


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang("no answer within 30 s")


@pytest.mark.slow
@pytest.mark.parametrize("command", [["validate"], ["plan"], ["compare", "--stack"]], ids=["validate", "plan", "compare"])
@BUDGET
@given(text=mutated(BASES))
def test_mutated_stacks_end_in_a_clear_answer(command, text, tmp_path_factory):
    where = tmp_path_factory.mktemp("stack")
    shutil.copytree(KEYS, where / "keys")  # the examples' relative key paths
    path = where / "stack.yaml"
    path.write_text(text)
    _clear_answer([*command, str(path)], path, text, {0, 1, 2} if command[0] == "compare" else {0, 2})


@pytest.mark.slow
@BUDGET
@given(text=mutated({"config": CONFIG}))
def test_mutated_configs_end_in_a_clear_answer(text, tmp_path_factory):
    path = tmp_path_factory.mktemp("config") / "config.yaml"
    path.write_text(text)
    _clear_answer(["--config", str(path), "compare", "resnet50", "--top", "3"], path, text, {0, 2})


def _clear_answer(args: list[str], path, text: str, allowed: set[int]) -> None:
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(30)
    try:
        r = cli(*args)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert r.exception is None or isinstance(r.exception, SystemExit), (text, repr(r.exception))
    assert "Traceback" not in r.output and "internal error" not in r.output, (text, r.output)
    assert r.exit_code in allowed, (text, r.output)
    if r.exit_code == 1:
        assert re.search(r"left out of the comparison|no offer matches", r.output), (text, r.output)
    if r.exit_code == 2:
        assert re.search(re.escape(str(path)) + r":\d+", r.output), (text, r.output)

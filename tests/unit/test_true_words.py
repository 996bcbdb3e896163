"""What gpufleet says is true and said once (issue 47, items 9 and 10): a file that is not a prices
file says what it is instead of "(schema None)" and exits 1 as the README says; nothing read is
never "nothing billed"; a cloud's name is not said twice; `report --out -` writes to stdout."""

import pytest

from conftest import cli


@pytest.mark.parametrize("text,said", [
    ("{}", "no schema: not a prices file of gpufleet's"),
    ("[1, 2]", "a JSON list, not gpufleet's prices"),
    ('{"schema": 9, "prices": []}', "schema 9, where this gpufleet reads 1 and 2"),
])
def test_a_file_that_is_not_a_prices_file_says_what_it_is_and_exits_1(tmp_path, monkeypatch, text, said):
    path = tmp_path / "prices.json"
    path.write_text(text)
    monkeypatch.setenv("GPUFLEET_PRICES", str(path))
    r = cli("compare", "resnet50")
    assert r.exit_code == 1 and f"{path}: the refreshed prices cannot be read ({said}" in r.output, r.output
    assert "None" not in r.output and "Traceback" not in r.output, r.output

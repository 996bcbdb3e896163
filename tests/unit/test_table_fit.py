"""Tables fit the terminal they are printed in, and never cut a name in half (issue 29, item 4)."""

import pytest

from conftest import assert_fits, cli_at, table_cells

NAMES = ["Standard_ND96isr_H100_v5", "australia-southeast1", "a3-ultragpu-8g", "p5.48xlarge"]


def _draw(wide: bool = False):
    """A table as a command draws it: names that must stay whole, a free-text note that may wrap,
    and two columns the narrow view can do without."""
    from gpufleet.cli import output
    from gpufleet.cli.output import STATE

    STATE.wide = wide
    try:
        output.table("offers", ["instance", "region", "vCPU", "price made of", "$/h", "note"],
                     [[n, NAMES[(i + 1) % 4], 192, "machine 10.2 + gpu 3.4 + local ssd 0.11", "$98.32",
                       "the only offer with eight H100 in this region, say"] for i, n in enumerate(NAMES)],
                     optional=("vCPU", "price made of"), wraps=("note",))
    finally:
        STATE.wide = False


@pytest.mark.parametrize("columns", [100, 80])
def test_a_narrow_terminal_drops_optional_columns_and_cuts_no_name(columns, capsys, monkeypatch):
    from gpufleet.cli import output

    monkeypatch.setenv("COLUMNS", str(columns))
    output.console.cache_clear()
    _draw()
    out = capsys.readouterr().out
    output.console.cache_clear()
    assert_fits(out, columns, NAMES + ["$98.32"])
    assert "price made of" not in table_cells(out)[0] and "--wide shows every column" in out
    # the note wraps at spaces: every word of it is still whole somewhere
    words = {w for row in table_cells(out) for c in row for w in c.split()}
    assert {"eight", "H100", "region,"} <= words


def test_wide_shows_every_column_on_one_line_per_row(capsys, monkeypatch):
    from gpufleet.cli import output

    monkeypatch.setenv("COLUMNS", "80")
    output.console.cache_clear()
    _draw(wide=True)
    out = capsys.readouterr().out
    output.console.cache_clear()
    rows = table_cells(out)
    assert len(rows) == len(NAMES)  # one printed line per row
    assert "machine 10.2 + gpu 3.4 + local ssd 0.11" in rows[0] and "not shown" not in out


def test_the_wide_flag_is_accepted_after_the_command():
    r = cli_at(100, "catalog", "gpus", "--wide")
    assert r.exit_code == 0, r.output


# `COLUMNS=abc gpufleet compare resnet50` printed two tracebacks (issue 47, item 7): a width that is not
# a positive whole number is treated as unset, with one warning, as the installed program runs
@pytest.mark.parametrize("columns", ["abc", "-5", "80.5"])
def test_an_unusable_columns_is_ignored_with_a_warning(columns):
    import subprocess

    from conftest import gpufleet_exe

    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "COLUMNS": columns}
    r = subprocess.run([gpufleet_exe(), "compare", "resnet50"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.count(f"COLUMNS={columns!r}") == 1, r.stderr
    assert "p5.48xlarge" in r.stdout  # the table as a pipe gets it

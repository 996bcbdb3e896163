"""The one output module: tables and progress for people, JSON/CSV/Markdown for machines.

Results go to stdout; progress, warnings and errors for people go to stderr. rich is
imported only when something is rendered.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import json
import sys
from dataclasses import dataclass

import typer

from gpufleet.errors import EXIT_CLOSED_PIPE, EXIT_FAILED, EXIT_INTERRUPTED


@dataclass
class State:
    json: bool = False
    verbose: int = 0
    config: str | None = None
    wide: bool = False  # every column of every table, however wide the terminal


STATE = State()


@functools.lru_cache(maxsize=4)
def _width_said(said: str) -> int:
    """The width COLUMNS says, 0 for none. A value that is no width (``abc``, ``-5``) is treated as unset,
    with one warning: a typo in the environment must not stop a command (issue 47, item 7). Written to
    stderr as it is: this runs while the consoles that warn() uses are being made."""
    if said.strip().isdigit():
        return int(said)
    if said.strip() and not STATE.json:
        sys.stderr.write(f"warning: COLUMNS={said!r} is not a number of columns: ignored\n")
    return 0


@functools.lru_cache(maxsize=2)
def console(stderr: bool = False):
    import os

    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    columns = _width_said(os.environ.get("COLUMNS", ""))
    # a pipe or a log with no width said: tables 200 wide, and sentences one line each (as git writes
    # them), so that a message is never split where grep or a test looks for it
    pipe = not columns and not stream.isatty()
    # rich reads COLUMNS itself when given no width; it sees it only when it is a width
    environ = {k: v for k, v in os.environ.items() if k != "COLUMNS" or columns}
    con = Console(stderr=stderr, highlight=False, soft_wrap=pipe, width=columns or (200 if pipe else None),
                  _environ=environ)
    con.on_broken_pipe = closed_pipe  # rich's own handler exits 1, which reads as a failure
    return con


def emit_json(data) -> None:
    # indented for a person at a terminal; one line for a pipe: json's C encoder only writes
    # without indent, and a whole-catalog comparison indented takes a quarter of a second
    indent = 2 if sys.stdout.isatty() else None
    sys.stdout.write(json.dumps(data, indent=indent, default=str) + "\n")


def once_a_day(key: str) -> bool:
    """True the first time today that ``key`` asks (a reminder people would otherwise learn to skip);
    the day is kept in the data folder. Where that cannot be written, every time."""
    import datetime as dt

    from gpufleet.paths import data_dir

    path = data_dir() / "said" / key
    today = dt.date.today().isoformat()
    try:
        if path.read_text().strip() == today:
            return False
    except OSError:
        pass
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(today + "\n")
    except OSError:
        pass
    return True


def warn(message: str) -> None:
    if STATE.json:
        return
    from rich.markup import escape  # messages quote things like gpufleet[gcp], which is not markup

    console(stderr=True).print(f"[yellow]warning:[/yellow] {escape(message)}")


def error(exc) -> None:
    """Render an expected error (GpufleetError) for people or machines."""
    if STATE.json:
        emit_json(exc.to_dict())
        return
    from rich.markup import escape

    c = console(stderr=True)
    c.print(f"[bold red]error:[/bold red] {escape(exc.message)}")
    if exc.hint and "\n" not in exc.message:
        c.print(f"  [dim]hint:[/dim] {escape(exc.hint)}")


def handle_errors(fn):
    """Map library errors to messages and exit codes. An expected error (GpufleetError) is its
    message and hint; an interrupt is exit 130; anything else is a bug, said in one line with
    exit 1 (the traceback with -v), so that a failure always says so and never looks like output."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from gpufleet.errors import GpufleetError

        try:
            return fn(*args, **kwargs)
        except GpufleetError as e:
            error(e)
            raise typer.Exit(e.exit_code) from None
        except KeyboardInterrupt:
            interrupted()
        except BrokenPipeError:
            closed_pipe()
        except (typer.Exit, typer.Abort, SystemExit):
            raise
        except Exception as e:  # noqa: BLE001 - a bug: one clear line (and the traceback with -v)
            if STATE.verbose:
                import traceback

                traceback.print_exc()
            error(GpufleetError(f"internal error: {type(e).__name__}: {e}",
                                "this is a bug in gpufleet: run the same command with -v and report what it prints"))
            raise typer.Exit(EXIT_FAILED) from None

    return wrapper


# rich draws "│ cell │": each column costs its text plus a space either side and one rule, the
# table one rule more
_COLUMN_FRAME = 3
# the narrowest a free-text column gets when even its longest word does not fit: a path or an id in a
# note then breaks across lines (a name in any other column never does)
_WRAP_FLOOR = 12


def _cell_width(text: str) -> int:
    from rich.cells import cell_len

    if "[" not in text:
        return max(cell_len(line) for line in text.split("\n"))
    from rich.text import Text

    return max(cell_len(line) for line in Text.from_markup(text).plain.split("\n"))


def _needed_width(header: str, cells: list[str], wraps: bool) -> int:
    """The narrowest a column can be without cutting a word: a column that wraps needs its longest
    word (it breaks at spaces), any other column its longest cell (names and numbers stay whole)."""
    parts = [header, *cells]
    if wraps:
        parts = [w for c in parts for w in c.split()] or [""]
    return max(_cell_width(p) for p in parts)


def _frame(widths) -> int:
    """A table's width from its columns' text widths."""
    widths = list(widths)
    return sum(widths) + _COLUMN_FRAME * len(widths) + 1


def _widths(shown: list[str], least: dict[str, int], natural: dict[str, int], wraps, room: int) -> dict[str, int]:
    """Each column's text width, so that the table fits ``room``: every column that does not wrap as
    wide as its widest cell; the free-text ones share what is left, each at least its longest word
    (below that, down to _WRAP_FLOOR, only when nothing else fits), at most its widest cell. rich is
    given these widths rather than left to share the room itself: its own sharing cut the last column
    at the terminal's edge (`plan`'s bill, issue 47 item 12)."""
    width = {c: least[c] for c in shown}
    free = [c for c in shown if c in wraps]
    spare = room - _frame(width.values())
    if spare < 0:  # break the longest words of free text, the widest column first
        for c in sorted(free, key=lambda c: -width[c]):
            cut = min(-spare, max(0, width[c] - max(_WRAP_FLOOR, _cell_width(c))))
            width[c] -= cut
            spare += cut
        return width
    while spare > 0:  # then widen free text towards one line per cell, the most wanting first
        wanting = [c for c in free if width[c] < natural[c]]
        if not wanting:
            break
        share = max(1, spare // len(wanting))
        for c in sorted(wanting, key=lambda c: width[c] - natural[c]):
            give = min(share, natural[c] - width[c], spare)
            width[c] += give
            spare -= give
    return width


def interrupted():
    """Ctrl-C: one word on stderr, no traceback, exit 130, soon. Python frees every object at exit,
    collecting the cycles among them: seconds after a plan (its catalog and Pulumi's runtime) on a
    busy machine, so what exists now is left to the system, which takes the memory back at once
    (gc.freeze). A second Ctrl-C while the process winds down ends it at once, by the signal,
    without the traceback Python would print from wherever it was then."""
    import gc
    import signal
    import threading

    gc.freeze()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    console(stderr=True).print("interrupted")
    raise typer.Exit(EXIT_INTERRUPTED)


def closed_pipe():
    """The reader of stdout went away (`| head`): stop quietly, as git, ls and grep do. What is still
    buffered goes to /dev/null, so that Python's own flush at exit does not complain either."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    raise typer.Exit(EXIT_CLOSED_PIPE)


def table(title: str, columns: list[str], rows: list[list], caption: str | None = None,
          justify: dict[str, str] | None = None, styles: list[str | None] | None = None,
          optional: tuple[str, ...] = (), wraps: tuple[str, ...] = ()) -> None:
    """Print a table that fits the console without cutting a name: columns in ``wraps`` (free text)
    break at spaces, every other cell stays on one line whole. When the table is too wide, the
    ``optional`` columns are left out, the last named first, and the caption says which ones
    ``--wide`` shows; then free text breaks its longest words. With ``--wide`` (or when even the kept
    columns do not fit) the table is as wide as its cells and the terminal folds the lines, which
    still cuts no name in half. Every table of every command goes through here (a test draws each
    command's at 80 and 100 columns)."""
    from rich.table import Table

    texts = [[str(x) for x in r] for r in rows]
    wraps = () if STATE.wide else wraps  # --wide: one line per row
    least = {c: _needed_width(c, [r[i] for r in texts], c in wraps) for i, c in enumerate(columns)}
    natural = {c: _needed_width(c, [r[i] for r in texts], False) for i, c in enumerate(columns)}
    con = console()
    room = con.width
    shown = list(columns)
    if not STATE.wide:
        for c in reversed(optional):
            if _frame(least[x] for x in shown) <= room:
                break
            shown.remove(c)
    hidden = [c for c in columns if c not in shown]
    if hidden:
        note = f"not shown at {room} columns: {', '.join(hidden)} (--wide shows every column)"
        caption = f"{caption}\n{note}" if caption else note
    width = _widths(shown, least, natural, wraps, room) if not STATE.wide else {c: natural[c] for c in shown}
    t = Table(title=title, caption=caption, caption_justify="left", header_style="bold")
    for c in shown:
        t.add_column(c, justify=(justify or {}).get(c, "left"), no_wrap=c not in wraps, overflow="fold",
                     width=width[c])
    keep = [columns.index(c) for c in shown]
    for i, r in enumerate(texts):
        t.add_row(*[r[k] for k in keep], style=(styles[i] if styles else None))
    drawn = _frame(width.values())
    if drawn <= room:
        con.print(t)
        return
    # too wide even so: print at the table's own width rather than let rich squeeze names apart
    # (print's own width= cannot exceed the console's)
    con.width = drawn
    try:
        con.print(t, crop=False)
    finally:
        con.width = room


def write_csv(columns: list[str], rows: list[list]) -> None:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    w.writerows(rows)
    sys.stdout.write(buf.getvalue())


def write_markdown(columns: list[str], rows: list[list], title: str | None = None) -> None:
    out = []
    if title:
        out.append(f"### {title}\n")
    out.append("| " + " | ".join(columns) + " |")
    out.append("|" + "|".join("---" for _ in columns) + "|")
    for r in rows:
        out.append("| " + " | ".join(str(x).replace("|", "\\|") for x in r) + " |")
    sys.stdout.write("\n".join(out) + "\n")


@contextlib.contextmanager
def progress(description: str, total: int | None = None):
    """A progress bar on stderr for people; silent under --json or without a terminal."""
    if STATE.json or not sys.stderr.isatty():
        yield lambda n=1: None
        return
    from rich.progress import Progress

    with Progress(console=console(stderr=True), transient=True) as p:
        task = p.add_task(description, total=total)
        yield lambda n=1: p.advance(task, n)


@contextlib.contextmanager
def steps(description: str, total: int | None = None):
    """Progress of a long operation: a live bar on a terminal, a line every few seconds
    in logs, nothing under --json. Yields ``update(done, total=None, detail="")``."""
    import time

    if STATE.json:
        yield lambda done, total=None, detail="": None
        return
    if sys.stderr.isatty():
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("{task.fields[detail]}"), console=console(stderr=True), transient=True) as p:
            task = p.add_task(description, total=total, detail="")

            def update(done, total=None, detail=""):
                p.update(task, completed=done, total=total or p.tasks[0].total, detail=detail)

            yield update
        return
    start = time.monotonic()
    last = [0.0]
    err = console(stderr=True)

    def update(done, total=None, detail=""):
        now = time.monotonic()
        if now - last[0] >= 2.0 or (total and done >= total):
            last[0] = now
            of = f"/{total}" if total else ""
            err.print(f"{description}: {done}{of} after {now - start:.0f}s {detail}".rstrip())

    yield update


def money(v: float) -> str:
    if v >= 1e6:
        return f"${v / 1e6:,.2f}M"
    if v >= 100:
        return f"${v:,.0f}"
    return f"${v:,.2f}"


def duration(hours: float) -> str:
    if hours < 1:
        return f"{hours * 60:.0f} min"
    if hours < 48:
        return f"{hours:.1f} h"
    return f"{hours / 24:.1f} d"


def rate(v: float, unit: str) -> str:
    for div, suf in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= div:
            return f"{v / div:,.2f}{suf} {unit}"
    return f"{v:,.1f} {unit}"

"""Faults of the file system around gpufleet (a data folder that is a file, no home, a read-only
disk, an empty registry, an --out that is a device or a link) are said as the user's to fix or as
work not done, with the path and the way out: never as "a bug in gpufleet", and nothing is written
where it must not be."""

import errno
import os
import sqlite3
from pathlib import Path

import pytest

from gpufleet.errors import GpufleetError
from gpufleet.state.registry import Registry, RegistryError

from conftest import EXAMPLES, cli

RACK = next(p for p in EXAMPLES if p.name == "local-rack.yaml")


def _no_bug(r) -> None:
    assert "internal error" not in r.output and "a bug in gpufleet" not in r.output and "Traceback" not in r.output, \
        r.output


@pytest.mark.parametrize("args", [["status", "--local"], ["up", str(RACK), "--yes"], ["down", str(RACK), "--yes"],
                                  ["registry", "rebuild", "--yes"]])
def test_a_data_folder_that_is_a_file_is_bad_input_naming_it(args, tmp_path, monkeypatch):
    afile = tmp_path / "not-a-folder"
    afile.write_text("mine\n")
    monkeypatch.setenv("XDG_DATA_HOME", str(afile))
    monkeypatch.delenv("GPUFLEET_REGISTRY", raising=False)
    r = cli(*args)
    _no_bug(r)
    assert r.exit_code == 2 and f"{afile} is a file" in r.output and "XDG_DATA_HOME" in r.output, r.output
    assert afile.read_text() == "mine\n"


def test_with_no_home_the_catalog_is_read_and_only_writing_fails(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", "/dev/null")
    for var in ("XDG_DATA_HOME", "GPUFLEET_REGISTRY", "GPUFLEET_PRICES"):
        monkeypatch.delenv(var, raising=False)
    r = cli("--json", "compare", "resnet50")
    assert r.exit_code == 0 and '"offers"' in r.stdout, r.output
    r = cli("status", "--local")
    _no_bug(r)
    assert r.exit_code == 2 and "/dev/null is not a folder" in r.output and "XDG_DATA_HOME" in r.output, r.output


def test_a_registry_path_under_a_file_names_the_file_and_the_variable(tmp_path, monkeypatch):
    afile = tmp_path / "passwd"
    afile.write_text("root:x:0:0\n")
    monkeypatch.setenv("GPUFLEET_REGISTRY", str(afile / "x" / "registry.db"))
    r = cli("status", "--local")
    _no_bug(r)
    assert r.exit_code == 2 and f"{afile} is a file" in r.output and "GPUFLEET_REGISTRY" in r.output, r.output


def test_a_data_folder_on_a_read_only_disk_is_work_not_done(tmp_path, monkeypatch):
    """What `mount -o ro` gives (simulated: root may write anywhere else): a folder that cannot be
    made, or one that is there but cannot be written in."""
    real_mkdir = Path.mkdir

    def read_only(self, *a, **k):
        if str(self).startswith(str(tmp_path / "ro")):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
        return real_mkdir(self, *a, **k)

    monkeypatch.setattr(Path, "mkdir", read_only)
    monkeypatch.setenv("GPUFLEET_REGISTRY", str(tmp_path / "ro" / "new" / "registry.db"))
    r = cli("status", "--local")
    _no_bug(r)
    assert r.exit_code == 1 and str(tmp_path / "ro" / "new") in r.output and "Read-only file system" in r.output, \
        r.output
    monkeypatch.undo()

    there = tmp_path / "there"
    Registry(there / "registry.db")
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **k: not (str(p) == str(there) and mode & os.W_OK)
                        and real_access(p, mode, **k))
    monkeypatch.setenv("GPUFLEET_REGISTRY", str(there / "registry.db"))
    r = cli("status", "--local")
    _no_bug(r)
    assert r.exit_code == 1 and f"cannot write in the folder {there}" in r.output, r.output
    assert "registry rebuild" not in r.output  # the registry is not damaged: rebuilding would not help


def test_an_empty_registry_file_is_damaged_and_left_alone(tmp_path, monkeypatch):
    path = tmp_path / "registry.db"
    path.write_bytes(b"")
    with pytest.raises(RegistryError) as e:
        Registry(path)
    assert str(path) in e.value.message and "empty" in e.value.message and "registry rebuild" in e.value.hint
    monkeypatch.setenv("GPUFLEET_REGISTRY", str(path))
    r = cli("status", "--local")
    assert r.exit_code == 1 and str(path) in r.output and "registry rebuild" in r.output, r.output
    assert path.read_bytes() == b""


def test_a_new_registry_is_never_seen_empty(tmp_path, monkeypatch):
    """SQLite starts a database as an empty file, which is taken as damaged: a new registry is made
    aside and linked into place whole, so that another gpufleet starting at that moment never meets
    it empty (and of two made at once, the first is kept)."""
    path = tmp_path / "registry.db"
    real_connect = sqlite3.connect

    def connect(p, *a, **k):
        assert Path(p) != path or path.exists(), "SQLite would create the registry empty where others look"
        return real_connect(p, *a, **k)

    monkeypatch.setattr(sqlite3, "connect", connect)
    a, b = Registry(path), Registry(path)
    a.record(name="c", stack="s", stack_file="s.yaml", owner="ops", expires_at="2026-01-01T00:00:00Z", backend=None,
             nodes=[])
    assert [c.name for c in b.list()] == ["c"]
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # nothing left aside


def test_refreshed_prices_under_a_file_are_bad_input(tmp_path):
    from gpufleet.catalog import store
    from gpufleet.errors import InputError

    afile = tmp_path / "a-file"
    afile.write_text("")
    with pytest.raises(InputError) as e:
        store.write(afile / "catalog" / "prices.json", {"schema": store.SCHEMA, "providers": {}, "prices": []})
    assert f"{afile} is a file" in e.value.message


# --- report --out: only a regular file (or a new one), a link followed only to one, said ---------------------

@pytest.fixture
def empty_registry(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUFLEET_REGISTRY", str(tmp_path / "registry.db"))


def test_out_through_a_link_to_a_file_writes_the_file_and_says_so(tmp_path, empty_registry):
    target = tmp_path / "reports" / "fleet.html"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "link.html"
    link.symlink_to(target)
    r = cli("report", "--clusters", "--local", "--out", str(link))
    assert r.exit_code == 0, r.output
    assert link.is_symlink() and "No clusters" in target.read_text()
    assert f"Wrote {target}" in r.output and str(link) in r.output, r.output
    assert list(tmp_path.glob(".*.tmp")) == [] and list(target.parent.glob(".*.tmp")) == []


@pytest.mark.parametrize("kind", ["fifo", "link-to-device", "dangling-link", "link-to-folder"])
def test_out_that_is_not_a_regular_file_is_refused_and_left_as_it_is(kind, tmp_path, empty_registry):
    out = tmp_path / "out.html"
    if kind == "fifo":
        os.mkfifo(out)
    elif kind == "link-to-device":
        out.symlink_to("/dev/null")
    elif kind == "dangling-link":
        out.symlink_to(tmp_path / "missing.html")
    else:
        out.symlink_to(tmp_path)
    before = os.lstat(out)
    r = cli("report", "--clusters", "--local", "--out", str(out))
    _no_bug(r)
    assert r.exit_code == 2 and f"--out {out}" in r.output, r.output
    said = {"fifo": "not a regular file", "link-to-device": "a link to /dev/null, which is not a regular file",
            "dangling-link": "a link to", "link-to-folder": "a link to"}[kind]
    assert said in r.output, r.output
    after = os.lstat(out)
    assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.html"]



# --- a full disk, and a registry where no file can be (issue 47, items 5 and 7) ---------------------------

@pytest.fixture
def small_disk(tmp_path):
    """A real file system of 1 MiB (a tmpfs; root may mount one), and a way to fill it to the last byte."""
    import subprocess

    point = tmp_path / "disk"
    point.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "gpufleet-full", str(point)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")

    def fill():
        with open(point / "filler", "wb", buffering=0) as f:
            with pytest.raises(OSError) as e:
                while True:
                    f.write(b"\0" * 4096)
        assert e.value.errno == errno.ENOSPC

    try:
        yield point, fill
    finally:
        subprocess.run(["umount", str(point)], check=True)


def test_a_full_disk_is_said_so_and_the_good_registry_never_called_damaged(small_disk, monkeypatch):
    point, fill = small_disk
    path = point / "registry.db"
    Registry(path).record(name="c1", stack="s", stack_file="s.yaml", owner="ops", expires_at="2030-01-01T00:00:00Z",
                          backend=None, nodes=[])
    fill()
    monkeypatch.setenv("GPUFLEET_REGISTRY", str(path))
    r = cli("status", "--local")
    _no_bug(r)
    assert r.exit_code == 1 and f"the disk is full at {point}" in r.output, r.output
    assert "damaged" not in r.output and "move it aside" not in r.output and "registry rebuild" not in r.output
    (point / "filler").unlink()  # space again: the registry was good all along
    assert [c.name for c in Registry(path).list()] == ["c1"]


def test_a_new_registry_on_a_full_disk_is_said_so(small_disk, monkeypatch):
    point, fill = small_disk
    fill()
    monkeypatch.setenv("GPUFLEET_REGISTRY", str(point / "registry.db"))
    r = cli("status", "--local")
    _no_bug(r)
    assert r.exit_code == 1 and f"the disk is full at {point}" in r.output, r.output
    assert not (point / "registry.db").exists()


def test_team_init_on_a_full_disk_is_said_so(small_disk, tmp_path, monkeypatch):
    point, fill = small_disk
    (tmp_path / "shared").mkdir()
    monkeypatch.setenv("GPUFLEET_TEAM_FILE", str(point / "team.json"))
    fill()
    r = cli("team", "init", f"file://{tmp_path / 'shared'}")
    _no_bug(r)
    assert r.exit_code == 1 and f"the disk is full at {point}" in r.output, r.output


def test_a_full_disk_under_a_shared_directory_store_is_said_so(small_disk):
    from gpufleet.state.shared import DirectoryStore

    point, fill = small_disk
    store = DirectoryStore(f"file://{point}")
    fill()
    with pytest.raises(GpufleetError, match=f"the disk is full at {point}"):
        store.create("events/e.json", b"{}" * 4096)
    assert sorted(p.name for p in point.rglob("*") if p.is_file()) == [".lock", "filler"]  # nothing half-written left


def test_a_registry_where_no_file_can_be_is_said_with_the_variable(monkeypatch):
    monkeypatch.setenv("GPUFLEET_REGISTRY", "/proc/registry.db")
    r = cli("status", "--local")
    _no_bug(r)
    assert r.exit_code == 1 and "/proc/registry.db" in r.output and "GPUFLEET_REGISTRY" in r.output, r.output
    assert "damaged" not in r.output

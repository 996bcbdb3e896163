"""Whether a shared directory's locks reach every machine that uses it, read from its mount's options.

A team's store in a directory (``state.shared.DirectoryStore``) lets one writer at a time change an
object, under ``flock(2)`` on its lock file. On a network or cluster file system that lock is only as
wide as the mount makes it; a lock that stays on one machine lets two machines write at once, and one
update is lost without a word:

- NFS, nfs(5) ("lock / nolock", "local_lock=mechanism"): ``nolock``, ``local_lock=all`` and
  ``local_lock=flock`` keep flock locks on this client (``local_lock=posix`` does so for POSIX locks
  only). The kernel names the setting in every NFS mount's options, ``local_lock=none|all|flock|posix``
  (linux fs/nfs/super.c, nfs_show_mount_options), and ``nolock`` as itself.
- Lustre, mount.lustre(8): ``flock`` is coherent across clients, ``localflock`` is this node's alone,
  and without either (``noflock``) flock(2) fails with ENOSYS (lustre-release lustre/llite/file.c,
  ll_file_noflock); the client names ``flock`` or ``localflock`` in its options (llite_lib.c,
  ll_show_options).
- GFS2, gfs2(5), and OCFS2 (linux Documentation/filesystems/ocfs2.rst): ``localflocks``.
- CephFS: the kernel client sends flock(2) to the metadata server (linux fs/ceph/locks.c, ceph_flock).

Any other file system is refused unless it is a local disk's (``LOCAL``), where there is no other
machine: FUSE file systems (gcsfuse, s3fs, sshfs, ...) take flock(2) on this machine alone unless the
file system implements it (linux fs/fuse/file.c, fuse_file_flock: ``fc->no_flock``); BeeGFS clients
keep it on this machine unless ``tuneUseGlobalFileLocks`` is set in the client's configuration, which the
mount does not show (ThinkParQ/beegfs client_module/source/app/config/Config.c: false by default); for
the rest (SMB, 9p, virtiofs, GPFS, ...) gpufleet does not know, and a store that loses updates is
worse than one refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from gpufleet.errors import InputError

MOUNTINFO = Path("/proc/self/mountinfo")  # proc(5): this process's mounts, with each one's options
# file systems of one machine's own disks or memory: no other machine writes there
LOCAL = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "jfs", "reiserfs", "bcachefs", "nilfs2",
                   "tmpfs", "ramfs", "overlay", "vfat", "exfat", "ntfs3", "hfsplus"})
SHARED = ("nfs", "lustre", "gfs2", "ocfs2", "ceph")  # network or cluster file systems whose flock reaches every client


@dataclass(frozen=True)
class Mount:
    point: Path
    fstype: str
    options: frozenset[str]  # the mount's and its file system's, as the kernel shows them

    def local_locks(self) -> str | None:
        """On a file system whose flock(2) reaches every client (``SHARED``), the options of this mount
        that keep it on this machine, or None."""
        if self.fstype.startswith("nfs"):
            found = self.options & {"nolock", "local_lock=all", "local_lock=flock"}
        elif self.fstype == "lustre":
            found = self.options & {"localflock", "noflock"} or ({"noflock"} if "flock" not in self.options else set())
        elif self.fstype in ("gfs2", "ocfs2"):
            found = self.options & {"localflocks"}
        else:
            return None
        return ", ".join(sorted(found)) or None

    def refused(self) -> str | None:
        """Why a team's store may not be on this mount (flock(2) there would not hold across machines, or
        it is not known to), or None."""
        if self.fstype in LOCAL:
            return None
        if self.fstype.startswith(SHARED):
            found = self.local_locks()
            return f"with {found}, its locks hold only on this machine" if found else None
        if self.fstype.startswith("fuse"):
            return ("a FUSE file system: flock(2) there holds only on this machine unless the file system "
                    "implements it, which gcsfuse, s3fs and sshfs do not")
        if self.fstype == "beegfs":
            return ("BeeGFS keeps flock(2) on this machine unless tuneUseGlobalFileLocks is set in the client's "
                    "configuration, which the mount does not show")
        return "gpufleet does not know whether flock(2) there holds across machines"


def _unescape(field: str) -> str:
    """A mountinfo field: space, tab, newline and backslash are written as octal escapes (\\040 ...)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse(text: str) -> list[Mount]:
    """The mounts of a ``/proc/<pid>/mountinfo`` (proc(5)): mount point in field 5, the mount's options in
    field 6, then optional fields up to ``-``, then the file system type, its source and its own options."""
    out = []
    for line in text.splitlines():
        fields = line.split(" ")
        if "-" not in fields[6:] or len(fields) < 10:
            continue
        sep = fields.index("-", 6)
        options = fields[5].split(",") + (fields[sep + 3].split(",") if len(fields) > sep + 3 else [])
        out.append(Mount(Path(_unescape(fields[4])), fields[sep + 1], frozenset(options)))
    return out


def mount_of(path: Path, mounts: list[Mount]) -> Mount | None:
    """The mount ``path`` is on: the deepest mount point above it (of two at one point, the later one,
    which hides the first)."""
    best = None
    for m in mounts:
        if (m.point == path or m.point in path.parents) and (best is None or len(m.point.parts) >= len(best.point.parts)):
            best = m
    return best


def refuse_local_locks(folder: Path, url: str) -> None:
    """Refuse a store folder whose mount keeps its locks on this machine (InputError, naming the option).
    Where there is no mountinfo to read (not Linux), nothing is said."""
    try:
        text = MOUNTINFO.read_text()
    except OSError:
        return
    mount = mount_of(folder.resolve(), parse(text))
    why = mount.refused() if mount else None
    if why:
        raise InputError(f"the team store {url} is on {mount.fstype} mounted at {mount.point}: {why}; two machines "
                         "could write at once and lose an update",
                         "put it on a file system whose locks the server keeps: NFS without nolock and with "
                         "local_lock=none (or posix), Lustre with -o flock, GFS2, OCFS2, CephFS; or use a bucket or "
                         "PostgreSQL for the team's store")

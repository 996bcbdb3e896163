#!/usr/bin/env python3
"""A local rack of real SSH hosts for gpufleet's end-to-end tests.

Each host is a network namespace on one Linux bridge (the rack's "10GbE fabric"), with its own
Debian root file system (an overlay on one cached debootstrap), its own UTS name, its own PID
space (its sshd is its PID 1: a host sees only its own processes), its own cgroup tree (a cgroup
namespace rooted in a cgroup of its own in each of this machine's hierarchies, mounted afresh at
/sys/fs/cgroup: what slurmd makes there is the host's alone), its own /dev (the basic devices;
device files made there, such as a GPU's, are the host's alone) and its own OpenSSH sshd. The
bridge is NATed so the hosts can reach the Debian and PyPI registries, as a real rack reaches its
mirrors. Needs root, iproute2, debootstrap and openssh-server.

    python3 tests/rack/rack.py up --hosts 4        # create (idempotent) and print the hosts as JSON
    python3 tests/rack/rack.py status
    python3 tests/rack/rack.py stop-sshd 2         # fault: host 2 refuses connections
    python3 tests/rack/rack.py start-sshd 2
    python3 tests/rack/rack.py rekey 3             # fault: host 3 gets new host keys
    python3 tests/rack/rack.py reset 1 2           # fresh root file systems for hosts 1 and 2
    python3 tests/rack/rack.py down                # remove everything but the debootstrap cache
    GPUFLEET_RACK_ID=1 python3 tests/rack/rack.py up   # a second rack beside it (10.77.1.11-14; see layout)

The hosts share the machine's kernel: gpufleet's test stack tells the Salt states not to
apply kernel-wide settings (sysctl, hugepages) live, and no init system runs in them.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

SUITE = "bookworm"
MIRROR = os.environ.get("GPUFLEET_RACK_MIRROR", "http://deb.debian.org/debian")
# what every host has before gpufleet touches it: sshd and the python3 salt-ssh needs
PACKAGES = ["openssh-server", "python3", "python3-venv", "iproute2", "procps", "kmod", "ca-certificates",
            "util-linux"]
CACHE = Path(os.environ.get("GPUFLEET_RACK_CACHE", "/var/cache/gpufleet-rack"))
RACKS = 16  # how many racks one machine may hold side by side (ids 0-15)
HOST_TMPFS = "4g"  # the most a host's own files may take (its Slurm, MariaDB, jax: under 0.5 GB)


class Layout(NamedTuple):
    """What one rack owns on this machine, nothing shared with another rack but the debootstrap cache."""

    state: Path  # its hosts' root file systems, its ssh key
    bridge: str
    subnet: str  # the first three octets: the bridge is .1, host i is .(10 + i)
    prefix: str  # its hosts' network namespaces: PREFIX + i
    veth: str  # this machine's end of host i's link: VETH + i
    cgroup: str  # host i's cgroups: CGROUP_NAME + i


def layout(rack_id: int) -> Layout:
    """Rack ``rack_id``'s names: rack 0 those the rack always had; rack N its own bridge, subnet 10.77.N,
    namespaces, links, cgroups and state folder (GPUFLEET_RACK_DIR with N appended), so that two test
    workers drive a rack each at once."""
    if not 0 <= rack_id < RACKS:
        raise SystemExit(f"rack: GPUFLEET_RACK_ID={rack_id}: a rack id is 0 to {RACKS - 1}")
    state = Path(os.environ.get("GPUFLEET_RACK_DIR", "/var/tmp/gpufleet-rack"))
    if rack_id == 0:
        return Layout(state, "gfrack0", "10.77.0", "gfrack-h", "gfr", "gpufleet-rack-h")
    n = str(rack_id)  # a link name is at most 15 characters (IFNAMSIZ): "gfr15-4" is 7
    return Layout(state.with_name(state.name + n), f"gfrack{n}", f"10.77.{n}", f"gfrack{n}-h", f"gfr{n}-",
                  f"gpufleet-rack{n}-h")


def rack_id_from_env() -> int:
    raw = os.environ.get("GPUFLEET_RACK_ID", "0")
    if not raw.isdigit():
        raise SystemExit(f"rack: GPUFLEET_RACK_ID={raw!r}: a rack id is a number, 0 to {RACKS - 1}")
    return int(raw)


STATE, BRIDGE, SUBNET, PREFIX, VETH, CGROUP_NAME = layout(rack_id_from_env())


def sh(*cmd: str, check: bool = True, quiet: bool = False, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(list(cmd), text=True, capture_output=True, **kw)
    if check and r.returncode != 0:
        raise SystemExit(f"rack: {' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    if not quiet and r.returncode != 0:
        print(f"rack: {' '.join(cmd)}: {r.stderr.strip()}", file=sys.stderr)
    return r


def need_root() -> None:
    if os.geteuid() != 0:
        raise SystemExit("rack: needs root (network namespaces, mounts, chroot)")
    missing = [t for t in ("ip", "debootstrap", "chroot", "unshare") if shutil.which(t) is None]
    if missing:
        raise SystemExit(f"rack: missing {', '.join(missing)}: apt-get install iproute2 debootstrap openssh-server")


def base_root() -> Path:
    """The cached debootstrap root every host overlays (built once per package list)."""
    key = hashlib.sha256(" ".join([SUITE, MIRROR, *PACKAGES]).encode()).hexdigest()[:12]
    root = CACHE / f"{SUITE}-{key}"
    if (root / ".complete").exists():
        return root
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:  # two racks coming up at once build it once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / ".complete").exists():
            build_base(root)
    return root


def build_base(root: Path) -> None:
    tmp = CACHE / f".{root.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"rack: debootstrap {SUITE} into {root} (once; cached)", file=sys.stderr)
    sh("debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(tmp), MIRROR)
    for k in (tmp / "etc/ssh").glob("ssh_host_*"):
        k.unlink()  # every host makes its own
    # no daemons start from package scripts: there is no init system in a host
    pol = tmp / "usr/sbin/policy-rc.d"
    pol.write_text("#!/bin/sh\nexit 101\n")
    pol.chmod(0o755)
    (tmp / "etc/ssh/sshd_config.d/gpufleet-rack.conf").write_text(
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\nUseDNS no\nPidFile /run/sshd.pid\n"
        "MaxStartups 64:30:128\nMaxSessions 64\n")
    (tmp / ".complete").write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    tmp.rename(root)


def host_dir(i: int) -> Path:
    return STATE / f"h{i}"


def address(i: int) -> str:
    return f"{SUBNET}.{10 + i}"


def rack_key() -> Path:
    key = STATE / "id_ed25519"
    if not key.exists():
        STATE.mkdir(parents=True, exist_ok=True)
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpufleet-test-rack", "-f", str(key))
    return key


def mounted(path: Path) -> bool:
    return any(line.split()[1] == str(path) for line in Path("/proc/mounts").read_text().splitlines())


def network() -> None:
    if sh("ip", "link", "show", BRIDGE, check=False, quiet=True).returncode != 0:
        sh("ip", "link", "add", BRIDGE, "type", "bridge")
        sh("ip", "addr", "add", f"{SUBNET}.1/24", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n")
    if shutil.which("iptables"):
        rule = ["-t", "nat", "POSTROUTING", "-s", f"{SUBNET}.0/24", "!", "-o", BRIDGE, "-j", "MASQUERADE"]
        if sh("iptables", rule[0], rule[1], "-C", *rule[2:], check=False, quiet=True).returncode != 0:
            sh("iptables", rule[0], rule[1], "-A", *rule[2:])
        for chain_rule in (["-i", BRIDGE], ["-o", BRIDGE]):
            if sh("iptables", "-C", "FORWARD", *chain_rule, "-j", "ACCEPT", check=False, quiet=True).returncode != 0:
                sh("iptables", "-I", "FORWARD", *chain_rule, "-j", "ACCEPT")
    else:
        print("rack: iptables not found: hosts cannot reach package registries", file=sys.stderr)


def create_host(i: int, base: Path, pub: str) -> None:
    d = host_dir(i)
    root = d / "root"
    ns = f"{PREFIX}{i}"
    if not d.exists():  # what a host writes stays in memory: dpkg's fsyncs cost nothing, and its removal is an unmount
        d.mkdir(parents=True)  # (a host that is there already keeps its files where they are)
        sh("mount", "-t", "tmpfs", "-o", f"mode=755,size={HOST_TMPFS}", f"{PREFIX}{i}", str(d))
    for sub in ("upper", "work", "root"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    if not mounted(root):
        sh("mount", "-t", "overlay", "overlay", "-o",
           f"lowerdir={base},upperdir={d / 'upper'},workdir={d / 'work'}", str(root))
    for sub, args in (("proc", ["-t", "proc", "proc"]), ("dev", ["--rbind", "/dev"]), ("sys", ["--rbind", "/sys"]),
                      ("run", ["-t", "tmpfs", "tmpfs"])):
        if not mounted(root / sub):
            sh("mount", *args, str(root / sub))
    (root / "run/sshd").mkdir(parents=True, exist_ok=True)
    # what a booted Debian has in /run (systemd-tmpfiles makes it): init scripts lock under /var/lock
    (root / "run/lock").mkdir(mode=0o1777, exist_ok=True)
    # a host without systemd is a SysV-init host, whose `runlevel` (sysvinit-utils on Debian 11, not
    # in 12's minbase) says "unknown" where init keeps no record, as in a container: Salt's Debian
    # service module then takes runlevel 2 to check and enable init scripts
    shim = root / "usr/sbin/runlevel"
    if not shim.exists():
        shim.write_text("#!/bin/sh\necho unknown\nexit 1\n")
        shim.chmod(0o755)
    (root / "etc/hostname").write_text(f"h{i}\n")
    mid = root / "etc/machine-id"
    if not mid.exists() or not mid.read_text().strip():  # as an installer does: one id per machine
        import uuid

        mid.write_text(uuid.uuid4().hex + "\n")
    (root / "etc/hosts").write_text(f"127.0.0.1 localhost\n{address(i)} h{i}\n")
    shutil.copy("/etc/resolv.conf", root / "etc/resolv.conf")
    # this machine reaches the registries through a TLS proxy whose CA is in its bundle: the
    # hosts trust the same bundle, as a site's hosts trust its proxy
    shutil.copy("/etc/ssl/certs/ca-certificates.crt", root / "etc/ssl/certs/gpufleet-rack-upstream.pem")
    (root / "etc/pip.conf").write_text("[global]\ncert = /etc/ssl/certs/gpufleet-rack-upstream.pem\n")
    ssh_dir = root / "root/.ssh"
    ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    (ssh_dir / "authorized_keys").write_text(pub)
    if not list((root / "etc/ssh").glob("ssh_host_*_key")):
        sh("chroot", str(root), "ssh-keygen", "-A")
    if sh("ip", "netns", "pids", ns, check=False, quiet=True).returncode != 0:
        sh("ip", "netns", "add", ns)
    if sh("ip", "link", "show", f"{VETH}{i}", check=False, quiet=True).returncode != 0:
        sh("ip", "link", "add", f"{VETH}{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "link", "set", f"{VETH}{i}", "master", BRIDGE, "up")
        sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{address(i)}/24", "dev", "eth0")
        sh("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up")
        sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        sh("ip", "netns", "exec", ns, "ip", "route", "add", "default", "via", f"{SUBNET}.1")
    start_sshd(i)


def sshd_pid(i: int) -> int | None:
    """The host's first process as this machine sees it (``unshare``, whose child is the host's PID 1,
    its sshd), while it runs. A zombie has stopped: killed, it waits for this machine's PID 1 to reap it,
    which may take seconds."""
    pidfile = host_dir(i) / "init.pid"
    try:
        pid = int(pidfile.read_text().strip())
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    return None if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X") else pid


# what a host's /dev holds (name, type, major, minor, mode), as a container runtime gives one
DEVICES = (("null", "c", 1, 3, "666"), ("zero", "c", 1, 5, "666"), ("full", "c", 1, 7, "666"),
           ("random", "c", 1, 8, "666"), ("urandom", "c", 1, 9, "666"), ("tty", "c", 5, 0, "666"),
           ("kmsg", "c", 1, 11, "644"))
CGROUP = "/sys/fs/cgroup"
# mount options that say how a cgroup file system is mounted, not which hierarchy it is
MOUNT_OPTIONS = {"rw", "ro", "relatime", "noatime", "nosuid", "nodev", "noexec", "xattr", "nsdelegate",
                 "memory_recursiveprot", "clone_children", "noprefix"}


def hierarchies() -> list[tuple[str, str, str]]:
    """This machine's cgroup hierarchies: (where under /sys/fs/cgroup it is mounted, its mount options
    (its controllers, or ``cgroup2``), the cgroup this process is in there)."""
    mine = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        mine[frozenset(controllers.split(",")) if controllers else frozenset({"cgroup2"})] = path
    out = []
    for line in Path("/proc/mounts").read_text().splitlines():
        _, target, fstype, opts = line.split()[:4]
        if fstype not in ("cgroup", "cgroup2") or not target.startswith(CGROUP):
            continue
        which = frozenset({"cgroup2"}) if fstype == "cgroup2" else frozenset(set(opts.split(",")) - MOUNT_OPTIONS)
        if which in mine:
            out.append((target[len(CGROUP):].lstrip("/"), ",".join(sorted(which)), mine[which]))
    return out


def host_cgroups(i: int) -> list[tuple[str, str, Path]]:
    """A cgroup of host ``i``'s own in each hierarchy, under this process's (made, with the cpus and
    memory nodes a cpuset needs before it takes a process): (mount point, options, its folder)."""
    out = []
    for sub, opts, path in hierarchies():
        parent = Path(CGROUP, sub) / path.lstrip("/")
        d = parent / f"{CGROUP_NAME}{i}"
        d.mkdir(exist_ok=True)
        for knob in ("cpuset.cpus", "cpuset.mems"):
            if (d / knob).exists() and not (d / knob).read_text().strip() and opts != "cgroup2":
                (d / knob).write_text((parent / knob).read_text())
        out.append((sub, opts, d))
    (host_dir(i) / "cgroups").write_text("".join(f"{d}\n" for _, _, d in out))
    return out


def remove_cgroups(i: int) -> None:
    """Host ``i``'s cgroups and whatever its daemons made in them, innermost first (its processes are gone)."""
    listed = host_dir(i) / "cgroups"
    for top in listed.read_text().split() if listed.exists() else []:
        for _ in range(50):  # a killed process leaves its cgroup a moment after the kill
            for d, _, _ in sorted(os.walk(top), key=lambda w: -len(w[0])):
                try:
                    os.rmdir(d)
                except OSError:
                    pass
            if not os.path.exists(top):
                break
            time.sleep(0.1)


def start_sshd(i: int) -> None:
    """sshd as the host's PID 1, in PID, mount, UTS and cgroup namespaces of its own: a host sees its
    own processes only (an init script's `status` finds its own daemon, not another host's) and its own
    cgroups, as a machine does. ``--kill-child``: stopping it stops the whole host, as switching a
    machine off does."""
    if sshd_pid(i):
        return
    root = host_dir(i) / "root"
    cgroups = host_cgroups(i)
    inside = [f"hostname h{i}", f"mount -t proc proc {root}/proc"]
    if [sub for sub, _, _ in cgroups] != [""]:  # v1 hierarchies (and cgroup2's) under a tmpfs
        inside.append(f"mount -t tmpfs -o mode=755,nosuid,nodev,noexec cgroup {root}{CGROUP}")
    for sub, opts, _ in cgroups:
        at = f"{root}{CGROUP}/{sub}".rstrip("/")
        named = all(o.startswith("name=") for o in opts.split(","))  # a hierarchy without controllers
        kind = "-t cgroup2" if opts == "cgroup2" else f"-t cgroup -o {'none,' if named else ''}{opts}"
        inside += [f"mkdir -p {at}", f"mount {kind} cgroup {at}"]
    dev = f"{root}/dev"
    inside += [f"mount -t tmpfs -o mode=755,nosuid dev {dev}",
               *(f"mknod -m {mode} {dev}/{name} {kind} {major} {minor}" for name, kind, major, minor, mode in DEVICES),
               f"mkdir {dev}/pts {dev}/shm", f"mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts {dev}/pts",
               f"ln -s pts/ptmx {dev}/ptmx", f"mount -t tmpfs -o mode=1777,nosuid,nodev shm {dev}/shm",
               f"ln -s /proc/self/fd {dev}/fd", *(f"ln -s /proc/self/fd/{n} {dev}/{name}"
                                                 for n, name in enumerate(("stdin", "stdout", "stderr")))]
    # sh joins the host's cgroups and becomes unshare, which roots a cgroup namespace there and forks
    # the host's first process; nsenter joins the host's network namespace and execs (so that sshd,
    # not a waiting parent, is PID 1 and reaps what is left to it)
    join = "".join(f"echo $$ > {d}/cgroup.procs && " for _, _, d in cgroups)
    script = (f"{join}exec unshare --uts --pid --mount --cgroup --fork --kill-child nsenter "
              f"--net=/run/netns/{PREFIX}{i} sh -c '{' && '.join(inside)} && "
              f"exec chroot {root} /usr/sbin/sshd -D -E /var/log/sshd.log'")
    init = subprocess.Popen(["sh", "-c", script], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    (host_dir(i) / "init.pid").write_text(f"{init.pid}\n")
    for _ in range(50):
        if init.poll() is None and sh("ip", "netns", "exec", f"{PREFIX}{i}", "ss", "-ltnH", "sport = :22",
                                      check=False, quiet=True).stdout.strip():
            return
        time.sleep(0.1)
    raise SystemExit(f"rack: sshd on h{i} did not start (see {root}/var/log/sshd.log)")


def stop_sshd(i: int) -> None:
    pid = sshd_pid(i)
    if pid:  # unshare ignores SIGTERM while it waits: SIGKILL, and --kill-child takes the host's PID 1 with it
        os.kill(pid, signal.SIGKILL)
        for _ in range(50):
            if not sshd_pid(i):
                break
            time.sleep(0.1)


def kill_inside(root: Path) -> None:
    """Stop every process whose root directory is this host's root (sshd and what it started)."""
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            if os.readlink(p / "root") == str(root):
                os.kill(int(p.name), signal.SIGKILL)
        except OSError:
            continue


def remove_hosts(hosts: list[int]) -> None:
    """Hosts ``hosts`` gone: every one stopped first, then each taken apart (its cgroups go once this
    machine's PID 1 has reaped its processes: the hosts' reaping overlaps)."""
    for i in hosts:
        stop_sshd(i)
        kill_inside(host_dir(i) / "root")
    for i in hosts:
        take_apart(i)


def take_apart(i: int) -> None:
    d = host_dir(i)
    root = d / "root"
    for sub in ("run", "sys", "dev", "proc", ""):
        target = root / sub if sub else root
        if mounted(target):
            sh("umount", "-R" if sub in ("sys", "dev") else "-l", str(target), check=False)
    remove_cgroups(i)
    sh("ip", "link", "del", f"{VETH}{i}", check=False, quiet=True)
    sh("ip", "netns", "del", f"{PREFIX}{i}", check=False, quiet=True)
    if mounted(d):
        sh("umount", "-l", str(d), check=False)  # its memory is freed once the overlay above it has gone
    shutil.rmtree(d, ignore_errors=True)


def hosts_json(n: int) -> list[dict]:
    key = rack_key()
    return [{"name": f"h{i}", "address": address(i), "port": 22, "user": "root", "key": str(key),
             "sshd": bool(sshd_pid(i))} for i in range(1, n + 1)]


def count() -> int:
    return len([p for p in STATE.glob("h*") if p.name[1:].isdigit()]) if STATE.exists() else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up")
    up.add_argument("--hosts", type=int, default=4)
    sub.add_parser("status")
    sub.add_parser("down")
    for c in ("stop-sshd", "start-sshd", "rekey"):
        sub.add_parser(c).add_argument("host", type=int)
    sub.add_parser("reset").add_argument("host", type=int, nargs="+")
    args = ap.parse_args(argv)
    need_root()
    if args.cmd == "up":
        base = base_root()
        pub = (rack_key().with_suffix(".pub")).read_text()
        network()
        remove_hosts(list(range(args.hosts + 1, count() + 1)))
        for i in range(1, args.hosts + 1):
            create_host(i, base, pub)
        print(json.dumps(hosts_json(args.hosts), indent=2))
    elif args.cmd == "status":
        print(json.dumps(hosts_json(count()), indent=2))
    elif args.cmd == "stop-sshd":
        stop_sshd(args.host)
    elif args.cmd == "start-sshd":
        start_sshd(args.host)
    elif args.cmd == "rekey":
        root = host_dir(args.host) / "root"
        stop_sshd(args.host)
        for k in (root / "etc/ssh").glob("ssh_host_*"):
            k.unlink()
        sh("chroot", str(root), "ssh-keygen", "-A")
        start_sshd(args.host)
    elif args.cmd == "reset":
        remove_hosts(args.host)
        for i in args.host:
            create_host(i, base_root(), rack_key().with_suffix(".pub").read_text())
    elif args.cmd == "down":
        remove_hosts(list(range(1, count() + 1)))
        sh("ip", "link", "del", BRIDGE, check=False, quiet=True)
        if shutil.which("iptables"):
            sh("iptables", "-t", "nat", "-D", "POSTROUTING", "-s", f"{SUBNET}.0/24", "!", "-o", BRIDGE, "-j",
               "MASQUERADE", check=False, quiet=True)
            for chain_rule in (["-i", BRIDGE], ["-o", BRIDGE]):
                sh("iptables", "-D", "FORWARD", *chain_rule, "-j", "ACCEPT", check=False, quiet=True)
        shutil.rmtree(STATE, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

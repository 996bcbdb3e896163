"""`gpufleet ssh-config CLUSTER` and `gpufleet ssh CLUSTER [NODE] [-- CMD]`: a cluster's nodes reached
the way its stack says (``access.via``), without port 22 open to the world.

The nodes come from the registry (as `gpufleet status` reads them); how each is reached comes from
its provider (``clouds.provider(name).ssh_route``): a cloud's private route (AWS Session Manager, GCP
IAP TCP forwarding, Azure Bastion) under ``via: cloud``, rack hosts always directly. ``via: bastion``
jumps through the first node of ``access.bastion_pool`` (``ProxyJump``), ``via: direct`` goes to the
nodes' own addresses. The result is one OpenSSH config file with a ``Host`` per node, named
``<cluster>-<pool>-<index>``, and ``<cluster>-login`` on the first node of the Slurm controller (or
login) pool, else on the first node: ``Include`` it from ~/.ssh/config and plain ssh, scp, rsync and
VS Code Remote-SSH reach them; `gpufleet ssh` runs ssh with it (``-F``).

The registry's records (in team mode, the team's store's) are not trusted as they are: each cloud's
route checks its ids and places against their formats and shell-quotes its ProxyCommand
(``clouds.base.command_line``), and every value is checked again as it is written (``config_value``):
no control character (a newline would add config lines), no whitespace or ``%`` outside the
ProxyCommand's own tokens, local paths quoted. A value that fails is refused before anything is
written, naming the node and the field. A record from the team's store names no file of this machine:
the key and known_hosts file it names are dropped (a rack host is pinned by this machine's known_hosts
file of its site, the key is the operator's own ssh config) and the stack file it names is read only
when passed (``--stack``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet import netnames, stacks
from gpufleet.clouds import provider
from gpufleet.clouds.base import SshRoute, Tool
from gpufleet.errors import EXIT_FAILED, GpufleetError, InputError, ToolMissing, UntrustedValue, did_you_mean
from gpufleet.fleet import team
from gpufleet.paths import replace_atomically, ssh_config_path
from gpufleet.providers import CLOUDS
from gpufleet.state.recorded import recorded
from gpufleet.state.registry import Node, Registry

SSH = Tool("ssh", "install the OpenSSH client (Debian/Ubuntu: apt install openssh-client; macOS and Windows 10+ "
           "ship it)")
LOGIN_ROLES = ("controller", "login")  # a pool of these roles holds `<cluster>-login`
DEFAULT_USER = "ubuntu"  # access.user's default, for a cluster whose stack file is gone
# ssh_config(5): these take local paths, in which OpenSSH expands % tokens ("%%" is a "%") and which
# may hold spaces (written in double quotes)
PATH_OPTIONS = ("IdentityFile", "UserKnownHostsFile")
VIAS = ("cloud", "bastion", "direct")  # access.via's choices (spec.Access)
LINUX_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")  # as spec.Access.user takes it
RACK_OPTIONS = frozenset({"HostName", "Port", "User", "IdentityFile", "UserKnownHostsFile", "StrictHostKeyChecking"})
# a ProxyCommand's % may only be one of the tokens gpufleet writes (%h, %p) or an escaped "%%"
_PROXY_PERCENT = re.compile(r"(?:[^%]|%[hp%])*")


def config_value(key: str, value: str, where: str) -> str:
    """``value`` as the config line of ``key`` writes it, or UntrustedValue naming ``where``."""
    value = str(value)
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise UntrustedValue(key, value, "free of newlines and control characters", where)
    if key == "ProxyCommand":
        if not _PROXY_PERCENT.fullmatch(value):
            raise UntrustedValue(key, value, "free of % but its own tokens %h and %p", where)
        return value
    if key in PATH_OPTIONS:
        # OpenSSH 9.2 readconf.c splits the rest of every line with argv_split (misc.c), whichever host
        # the line is for: a lone ' or " is `invalid quotes` for the whole file, a leading # a comment,
        # a leading = the keyword's separator; within double quotes \\ and \" are its only escapes. It
        # expands % tokens (%% is a %) and ${VAR} from the environment (no escape) in these paths.
        if not value or "${" in value:
            raise UntrustedValue(key, value, "a path, with no ${", where)
        quoted = value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
        return f'"{quoted}"'
    if key == "Port":
        if not (value.isdigit() and 0 < int(value) < 65536):  # readconf's a2port: "Bad port" ends the file
            raise UntrustedValue(key, value, "a TCP port (1 to 65535)", where)
        return value
    if not value or any(c.isspace() or c in "\"'%#\\" for c in value):
        raise UntrustedValue(key, value, "one word without quotes, % or #", where)
    return value


@dataclass
class Entry:
    """One node as a ``Host`` of the config."""

    alias: str  # <cluster>-<pool>-<index>
    pool: str
    idx: int
    provider: str
    route: SshRoute

    @property
    def options(self) -> dict[str, str]:
        return self.route.options

    def to_dict(self) -> dict:
        return {"alias": self.alias, "pool": self.pool, "index": self.idx, "provider": self.provider,
                **self.route.to_dict()}


@dataclass
class SshConfig:
    """A cluster's nodes as OpenSSH config, and where it is (or will be) written."""

    cluster: str
    via: str
    entries: list[Entry]
    login: str | None  # the alias `<cluster>-login` also names
    path: Path
    notes: list[str] = field(default_factory=list)
    monitor: dict | None = None  # the monitor host's pool and whether it runs Grafana (Access.monitor)

    @property
    def login_alias(self) -> str:
        return f"{self.cluster}-login"

    def text(self) -> str:
        lines = [f"# gpufleet ssh-config {self.cluster}: written by gpufleet from its registry; run it again after",
                 "# `up`, not by hand. Include it from ~/.ssh/config (above any Host line):",
                 f"# {self.include_line()}", ""]
        for e in self.entries:
            names = [e.alias] + ([self.login_alias] if e.alias == self.login else [])
            where = f"the ssh config of {self.cluster}, host {e.alias}"
            lines.append(f"Host {' '.join(config_value('Host', n, where) for n in names)}")
            lines += [f"    {k} {config_value(k, v, where)}" for k, v in e.options.items()]
            lines.append("")
        return "\n".join(lines)

    def include_line(self) -> str:
        home = Path.home()
        try:
            shown = "~/" + str(self.path.relative_to(home))
        except ValueError:
            shown = str(self.path)
        return f"Include {shown}" if " " not in shown else f'Include "{shown}"'

    def tools(self, entries: list[Entry] | None = None) -> list[tuple[Tool, str]]:
        """Each program the entries need, once, with the route that needs it (ssh first)."""
        seen: dict[str, tuple[Tool, str]] = {SSH.command: (SSH, "ssh")}
        for e in entries if entries is not None else self.entries:
            for t in e.route.tools:
                seen.setdefault(t.command, (t, e.route.route))
        return list(seen.values())

    def names(self) -> list[str]:
        """Every name a node may be given by: its alias, ``pool-index``, and the login alias."""
        out = [e.alias for e in self.entries] + [f"{e.pool}-{e.idx}" for e in self.entries]
        return out + ([self.login_alias, "login"] if self.login else [])

    def find(self, node: str | None) -> Entry:
        """The node named ``node`` (its alias, ``pool-index`` as `status` names it, ``login`` or the
        login alias; None: the login node). Bad input names the near miss and the known names."""
        if not self.entries:
            raise InputError(f"cluster {self.cluster} has no node gpufleet can reach in the registry",
                             "`gpufleet status " + self.cluster + "` shows its nodes; `gpufleet up` records them")
        want = self.login if node in (None, "login", self.login_alias) else node
        for e in self.entries:
            if want in (e.alias, f"{e.pool}-{e.idx}"):
                return e
        known = self.names()
        near = did_you_mean(node or "", known)
        raise InputError(f"no node {node!r} in cluster {self.cluster}",
                         (f"did you mean {near!r}? " if near else "") + "its nodes: "
                         + ", ".join(e.alias for e in self.entries[:8]) + (" ..." if len(self.entries) > 8 else ""))

    def to_dict(self) -> dict:
        return {"cluster": self.cluster, "via": self.via, "path": str(self.path), "include": self.include_line(),
                "login": self.login, "login_alias": self.login_alias if self.login else None,
                "hosts": [e.to_dict() for e in self.entries], "notes": self.notes}


def alias(cluster: str, pool: str, idx: int) -> str:
    return f"{cluster}-{pool}-{idx}"


@dataclass
class Access:
    """What ssh needs of a cluster's stack: how the nodes are reached, as whom, which pools hold the
    login node, and each rack host's route (address, port, user, key, known_hosts file). From the
    stack file (``--stack``, or the one `up` recorded) or, where that file is not here (another
    folder, a teammate's machine), from the registry's record of it (``access_record``)."""

    via: str = "cloud"
    user: str = DEFAULT_USER
    bastion_pool: str | None = None
    pools: list[str] = field(default_factory=list)  # in the stack's order
    login_pools: list[str] = field(default_factory=list)
    racks: dict[str, dict[str, str]] = field(default_factory=dict)  # "pool-index" -> the rack host's route
    # where Prometheus runs (`gpufleet dashboard`): {"pool": the pool whose first node it is, "grafana": bool}
    monitor: dict | None = None

    @classmethod
    def of_stack(cls, stack, cluster: str, nodes: list[Node]) -> "Access":
        a = stack.access
        on_rack = {p.name for p in stack.pools if p.on_rack}
        racks = {}
        for n in nodes:
            if n.pool in on_rack:
                options = dict(provider(n.provider).ssh_route(n, cluster=cluster, stack=stack).options)
                for k in PATH_OPTIONS:  # what was relative to the folder `up` ran in
                    if k in options:
                        options[k] = str(Path(options[k]).expanduser().absolute())
                racks[f"{n.pool}-{n.idx}"] = options
        return cls(a.via, a.user, a.bastion_pool, [p.name for p in stack.pools],
                   [p.name for p in stack.pools if p.role in LOGIN_ROLES], racks, _monitor(stack))

    @classmethod
    def of_record(cls, doc: dict, where: str, *, own: bool) -> "Access":
        """The registry's record (in team mode, the team's store's), each value checked. ``own``: a
        record this machine wrote alone; one from a store names no file of this machine (its key and
        known_hosts file are dropped: the host's site file here and the operator's own keys are used)."""
        via = doc.get("via", "cloud")
        if via not in VIAS:
            raise UntrustedValue("access.via", via, "one of " + ", ".join(VIAS), where)
        user = netnames.matching(doc.get("user", DEFAULT_USER), LINUX_USER, "access.user", "a Linux user name", where)
        pools, login_pools = _typed(doc, "pools", list, where), _typed(doc, "login_pools", list, where)
        for name in [*pools, *login_pools] + ([doc["bastion_pool"]] if doc.get("bastion_pool") else []):
            netnames.label(name, "pool name", where)
        racks = {}
        for host, options in _typed(doc, "racks", dict, where).items():
            if not isinstance(options, dict) or set(options) - RACK_OPTIONS:
                raise UntrustedValue(f"racks.{host}", options, "options of " + ", ".join(sorted(RACK_OPTIONS)), where)
            for k, v in options.items():
                if not isinstance(v, str):  # a list would be written as Python's repr of it
                    raise UntrustedValue(f"racks.{host}.{k}", v, "a text value", where)
            netnames.host(options.get("HostName"), f"racks.{host}.HostName", where)
            port = str(options.get("Port", "22"))
            if not (port.isdigit() and 0 < int(port) < 65536):
                raise UntrustedValue(f"racks.{host}.Port", options.get("Port"), "a TCP port (1 to 65535)", where)
            netnames.matching(options.get("User", "root"), LINUX_USER, f"racks.{host}.User", "a Linux user name", where)
            kept = {k: v for k, v in options.items() if own or k not in PATH_OPTIONS}
            racks[host] = {**kept, "StrictHostKeyChecking": "yes"}  # a record may not turn host keys off
        monitor = _typed(doc, "monitor", dict, where) or None
        if monitor is not None:
            netnames.label(monitor.get("pool"), "access.monitor.pool", where)
            if not isinstance(monitor.get("grafana", False), bool):
                raise UntrustedValue("access.monitor.grafana", monitor.get("grafana"), "true or false", where)
            monitor = {"pool": monitor["pool"], "grafana": monitor.get("grafana", False)}
        return cls(via, user, doc.get("bastion_pool"), list(pools), list(login_pools), racks, monitor)

    def to_dict(self) -> dict:
        return {"via": self.via, "user": self.user, "bastion_pool": self.bastion_pool, "pools": self.pools,
                "login_pools": self.login_pools, "racks": self.racks, **({"monitor": self.monitor} if self.monitor else {})}


def _monitor(stack) -> dict | None:
    """Where the stack's Prometheus runs: the first node of its controller pool or of the pool it names."""
    m = stack.monitoring
    if m is None or not m.prometheus:
        return None
    pool = next((p.name for p in stack.pools if p.role == "controller"), None) if m.host == "controller" else m.host
    return {"pool": pool, "grafana": m.grafana} if pool else None


def _typed(doc: dict, key: str, kind: type, where: str):
    """``doc[key]`` when it is a ``kind`` (an empty one when missing), else UntrustedValue."""
    value = doc.get(key) or kind()
    if not isinstance(value, kind):
        raise UntrustedValue(f"access.{key}", value, f"a {kind.__name__}", where)
    return value


def access_record(stack, cluster: str, nodes: list[Node]) -> dict:
    """What `up` records of the stack for ssh and ssh-config (``ClusterRecord.access``)."""
    return Access.of_stack(stack, cluster, nodes).to_dict()


def _access(rec, cat, stack_file: str | Path | None, notes: list[str]) -> tuple[Access, object]:
    """(the access, the stack when read): ``stack_file`` when given, else the stack file `up` recorded
    when this machine recorded it and it is here, else the registry's record of it."""
    own = rec.own_stack_file
    if stack_file or (own and Path(own).exists()):
        stack = stacks.load(stack_file or own, cat)
        return Access.of_stack(stack, rec.name, rec.nodes), stack
    if rec.store is not None and rec.stack_file:
        notes.append(rec.stack_hint("--stack FILE"))
    if rec.access:
        if own:
            notes.append(f"the stack file {own} is not here: its access and rack hosts are as `up` recorded them "
                         "(`--stack FILE` reads a copy of the stack instead)")
        return Access.of_record(rec.access, f"the registry's record of {rec.name}'s access", own=rec.store is None), None
    notes.append(f"the stack file {rec.stack_file or '(none)'} is not read, and the registry recorded no access: the "
                 f"cloud's own route and user {DEFAULT_USER} are assumed, rack hosts as the registry recorded them "
                 "(`--stack FILE` reads a copy of the stack)")
    return Access(), None


def access_of(name: str, *, registry: Registry, cat=None, stack_file: str | Path | None = None) -> Access:
    """What ssh needs of cluster ``name``'s stack (as ``config`` reads it), without building its config."""
    return _access(recorded(registry, name), cat, stack_file, [])[0]


def _direct(node: Node, cluster: str, where: str) -> dict[str, str]:
    """A cloud node's own address: the first node's SSH endpoint (its public address where the pool
    has one), the others' private addresses (each checked: the registry may be the team's store); its
    host key filed under its cloud's unique id, as on the cloud's own route (an address comes back
    with the next cluster's VMs)."""
    host, port = netnames.endpoint(node.ssh_endpoint if node.idx == 0 else None, node.private_ip, where)
    alias = provider(node.provider).host_key_alias(node, cluster=cluster)
    return {"HostName": host, "Port": port, **({"HostKeyAlias": alias} if alias else {})}


def config(name: str, *, registry: Registry | None = None, cat=None, path: Path | None = None,
           stack_file: str | Path | None = None) -> SshConfig:
    """The OpenSSH config of cluster ``name``'s recorded nodes (nothing is written); ``stack_file``:
    the stack to read the access block and rack hosts from, instead of the one `up` recorded."""
    reg = registry or team.registry()
    rec = recorded(reg, name)
    notes: list[str] = []
    access, stack = _access(rec, cat, stack_file, notes)
    via = access.via
    order = {p: i for i, p in enumerate(access.pools)}
    nodes = sorted(rec.nodes, key=lambda n: (order.get(n.pool, len(order)), n.pool, n.idx))
    bastion = access.bastion_pool if via == "bastion" else None
    entries: list[Entry] = []
    for n in nodes:
        where = f"the registry's record of {rec.name} node {n.pool}-{n.idx}"
        netnames.host_name(alias(rec.name, n.pool, n.idx), "host alias (cluster-pool-index)", where)
        on_rack = n.provider not in CLOUDS
        if on_rack or via == "cloud":
            route = provider(n.provider).ssh_route(n, cluster=rec.name, stack=stack)
            if on_rack and stack is None:  # the recorded route, over the site's known_hosts file of this machine
                route.options.update(access.racks.get(f"{n.pool}-{n.idx}", {}))
        elif bastion and n.pool != bastion:
            route = SshRoute(f"through the bastion {alias(rec.name, bastion, 0)}",
                             {**_direct(n, rec.name, where), "ProxyJump": alias(rec.name, bastion, 0)})
        else:
            route = SshRoute("direct", _direct(n, rec.name, where))
        if not route.options.get("HostName"):
            notes.append(f"{alias(rec.name, n.pool, n.idx)}: no id or address recorded (did `up` finish?); left out")
            continue
        if not on_rack:
            route.options.setdefault("User", access.user)
        entries.append(Entry(alias(rec.name, n.pool, n.idx), n.pool, n.idx, n.provider, route))
    if bastion and not any(e.pool == bastion and e.idx == 0 for e in entries):
        notes.append(f"the bastion pool {bastion} has no recorded node: the nodes behind it cannot be reached")
    login = next((e.alias for e in entries if e.pool in access.login_pools and e.idx == 0), None) or (
        entries[0].alias if entries else None)
    cfg = SshConfig(rec.name, via, entries, login, path or ssh_config_path(rec.name), notes, access.monitor)
    cfg.text()  # every value checked as it will be written: refused here, before anything is written
    return cfg


def check_tools(cfg: SshConfig, entries: list[Entry] | None = None, which=None) -> None:
    """Every program the entries' routes need is on PATH; else exit 1 naming it and how to install it."""
    for tool, route in cfg.tools(entries):
        if (which or shutil.which)(tool.command) is None:
            raise ToolMissing(f"{route} needs `{tool.command}`, which is not on PATH", tool.install,
                              exit_code=EXIT_FAILED)


def write(cfg: SshConfig) -> Path:
    """The config written (owner-only, replaced whole) where ``cfg.path`` says, once the real ssh reads it."""
    text = cfg.text()
    check_with_ssh(text, cfg)
    replace_atomically(cfg.path, lambda f: f.write(text), "XDG_DATA_HOME", mode=0o600)
    return cfg.path


def check_with_ssh(text: str, cfg: SshConfig) -> None:
    """``text`` as OpenSSH reads it (``ssh -G``: every line parsed, whichever host it is for) when ssh is
    here: a file it refuses would break every host once Included from ~/.ssh/config, so it is never
    installed (GpufleetError with ssh's own words)."""
    ssh = shutil.which(SSH.command)
    if ssh is None or not cfg.entries:
        return
    r = subprocess.run([ssh, "-G", "-F", "/dev/stdin", cfg.entries[0].alias], input=text, capture_output=True,
                       text=True, timeout=60)
    if r.returncode != 0:
        said = "; ".join(line for line in r.stderr.splitlines() if line and "Pseudo-terminal" not in line)
        raise GpufleetError(f"OpenSSH refuses the ssh config gpufleet made for {cfg.cluster}: {said}",
                            f"nothing was written ({cfg.path} is as it was); the registry's record of "
                            f"{cfg.cluster} holds a value gpufleet did not foresee: please report it")


def ssh_config(name: str, *, registry: Registry | None = None, cat=None, path: Path | None = None,
               which=None, stack_file: str | Path | None = None) -> SshConfig:
    """`gpufleet ssh-config`: the cluster's config, its tools checked, written."""
    cfg = config(name, registry=registry, cat=cat, path=path, stack_file=stack_file)
    if not cfg.entries:
        raise GpufleetError(f"cluster {cfg.cluster} has no node gpufleet can reach in the registry",
                            "; ".join(cfg.notes) or f"`gpufleet status {cfg.cluster}` shows what is recorded")
    check_tools(cfg, which=which)
    write(cfg)
    return cfg


@dataclass
class Connection:
    """What `gpufleet ssh` runs: ``argv``, to ``entry``, with the config at ``cfg.path``."""

    cfg: SshConfig
    entry: Entry
    argv: list[str]

    def to_dict(self) -> dict:
        return {"cluster": self.cfg.cluster, "node": self.entry.alias, "config": str(self.cfg.path),
                "argv": self.argv, **self.entry.to_dict()}


def connection(name: str, node: str | None = None, command: list[str] | None = None, *,
               registry: Registry | None = None, cat=None, path: Path | None = None,
               which=None, stack_file: str | Path | None = None) -> Connection:
    """The ssh command line into ``node`` (default: the login node), the config it reads written."""
    cfg = config(name, registry=registry, cat=cat, path=path, stack_file=stack_file)
    entry = cfg.find(node)
    needed = [entry] + [e for e in cfg.entries if e.alias == entry.options.get("ProxyJump")]
    check_tools(cfg, needed, which=which)
    write(cfg)
    return Connection(cfg, entry, ["ssh", "-F", str(cfg.path), entry.alias, *(command or [])])


def run(conn: Connection, exec_=None) -> None:
    """Become ssh (it owns the terminal, and its exit status is ours)."""
    (exec_ or os.execvp)(conn.argv[0], conn.argv)

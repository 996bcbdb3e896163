"""`up` and `down` through Pulumi's Automation API with an inline program.

State lives in a local file backend under the user's data directory unless
``PULUMI_BACKEND_URL`` names another (S3, GCS, Azure Blob, PostgreSQL, Pulumi Cloud) or a team shares a
store (``clouds.team_store``: its ``pulumi/`` folder, or a table of its own). Secrets on a self-managed
backend are encrypted with the team's KMS key when it named one, else the passphrase. Engine events drive progress; engine and CLI
failures become gpufleet errors with a hint. Pulumi is imported only here, inside functions.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.clouds import by_pulumi_package, cloud, team_store
from gpufleet.clouds.base import Refusal, refusal_in, strip_color, unknown_refusal, worded_refusal
from gpufleet.engine.plan import DYNAMIC_TYPE, READER_KIND
from gpufleet.errors import (
    CapacityError,
    CredentialsError,
    DeployError,
    GpufleetError,
    InputError,
    QuotaError,
    SdkMissing,
    ToolMissing,
)
from gpufleet.paths import make_dir, pulumi_state_dir
from gpufleet.providers import CLOUDS
from gpufleet.state import leases, team_config

PROJECT = "gpufleet"
INSTALL_HINT = ("install the Pulumi CLI: curl -fsSL https://get.pulumi.com | sh (or brew install pulumi), "
                "then open a new shell; `gpufleet plan` works without it")


def backend_url() -> str:
    """``PULUMI_BACKEND_URL`` when set, else the team's store (``gpufleet team init``: Pulumi's
    self-managed backend under its ``pulumi/``), else a file backend under the user's data directory."""
    return backend_for(team_config.url())[0]


def backend_for(team: str | None) -> tuple[str, dict[str, str]]:
    """The backend a member of the team whose store is ``team`` (None: alone) uses, and what the Pulumi
    CLI needs for it (``team_env``)."""
    url = os.environ.get("PULUMI_BACKEND_URL")
    own = team_store.pulumi_backend(team) if team else None
    if url:
        return url, own[1] if own and own[0] == url else {}
    if own:
        return own
    path = make_dir(pulumi_state_dir(), "XDG_DATA_HOME (or PULUMI_BACKEND_URL, for another backend)")
    return "file://" + str(path), {}


def team_env(url: str) -> dict[str, str]:
    """What the Pulumi CLI needs for the team's backend when ``url`` is it (Blob storage: the account)."""
    team = team_config.url()
    if not team:
        return {}
    backend, env = team_store.pulumi_backend(team)
    return env if url == backend else {}


def secrets_provider(url: str) -> str | None:
    """What encrypts a new stack's secrets: none on Pulumi Cloud (it keeps them); on a self-managed
    backend the team's KMS key when it named one (``team init --secrets-provider``), else the passphrase."""
    if not self_managed(url):
        return None
    return team_config.secrets_provider() if team_config.url() else team_config.PASSPHRASE


def self_managed(url: str) -> bool:
    return not url.startswith(("https://", "http://"))  # Pulumi Cloud / self-hosted service manage secrets


def passphrase_env(url: str, prompt: Callable[[], str] | None) -> dict[str, str]:
    """The passphrase for a self-managed backend: environment, else a prompt, else a clear error."""
    if not self_managed(url):
        return {}
    if os.environ.get("PULUMI_CONFIG_PASSPHRASE") is not None or os.environ.get("PULUMI_CONFIG_PASSPHRASE_FILE"):
        return {}
    if prompt is None:
        raise InputError("the Pulumi state secrets need a passphrase",
                         "set PULUMI_CONFIG_PASSPHRASE (or PULUMI_CONFIG_PASSPHRASE_FILE); it protects secrets "
                         "in the state file, keep it with the state")
    return {"PULUMI_CONFIG_PASSPHRASE": prompt()}


def find_pulumi():
    """The installed Pulumi CLI (``Cli``), or ToolMissing naming how to install it (SdkMissing
    naming the extra when not even Pulumi's Python SDK is installed)."""
    try:
        from pulumi.automation import PulumiCommand
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] != "pulumi":
            raise
        raise SdkMissing("pulumi", e.name, "pulumi") from None

    root = None
    if shutil.which("pulumi") is None:
        home = Path.home() / ".pulumi"
        if (home / "bin" / "pulumi").exists():
            root = str(home)
        else:
            raise ToolMissing("the Pulumi CLI is not installed (`pulumi` is not on PATH or in ~/.pulumi/bin)", INSTALL_HINT)
    try:
        return Cli(PulumiCommand(root=root))
    except FileNotFoundError:
        raise ToolMissing("the Pulumi CLI could not be started", INSTALL_HINT) from None


# Ctrl-C during a Pulumi run: the first asks the CLI to cancel, and gpufleet waits for it (its lease kept)
# at most this long before it asks the CLI to stop at once; then at most STOP_WAIT_S for the CLI to exit
CANCEL_WAIT_S = 900.0
STOP_WAIT_S = 30.0
CANCELLING = ("cancelling: waiting for Pulumi to finish its in-flight operations and save its state "
              "(Ctrl-C again stops it at once, which may leave what it was creating outside its state)")
STOPPING = "stopping Pulumi at once: waiting for it to exit"
LEFT = ("Pulumi is still running (pid {pid}): gpufleet stops waiting; the cluster's lease is left to expire and "
        "Pulumi's lock stays until it exits")


def _tell(line: str) -> None:
    """One line for the person at the terminal while Ctrl-C is being handled (the CLI's output module is
    out of reach here: the engine is below it)."""
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


class Cli:
    """The Pulumi CLI as the Automation API runs it (a ``PulumiCommand``: ``version``, and ``run`` of one
    command line, its output streamed to the callbacks, a CommandError when it fails), each run a process
    held here so that ``interrupt`` can stop the one in flight as Ctrl-C does. On SIGINT the CLI cancels
    its update: the engine starts no further step, finishes those in flight and saves its checkpoint, then
    exits non-zero; a second SIGINT makes it stop at once (pulumi/pulumi pkg/backend cancellation scope,
    ``NewScope``; sdk/go/common/util/cancel). ``Stack.cancel`` (`pulumi cancel`) is no way to stop it: on a
    self-managed backend it only deletes the stack's lock files while the update goes on
    (pkg/backend/diy/backend.go, ``CancelCurrentUpdate``).

    The CLI runs in a process group of its own, so that a terminal's Ctrl-C reaches gpufleet alone, which
    forwards it (``_cancel``): one SIGINT for the first Ctrl-C, and gpufleet keeps reading the CLI's output
    and waits for it to end (``CANCEL_WAIT_S``) before the KeyboardInterrupt goes on to the team session,
    which only then releases the cluster's lease. Left in gpufleet's group, the CLI would get every Ctrl-C
    as well, and gpufleet, leaving at once, would close the pipe the CLI writes to: Go programs die of
    SIGPIPE on a write to a closed stdout, in the middle of creating resources."""

    def __init__(self, found):
        self.command, self.version = found.command, found.version
        self._running: dict[subprocess.Popen, int] = {}  # each run in flight, and the SIGINTs sent to it
        self._interrupted = False
        self._lock = threading.Lock()

    def run(self, args: list[str], cwd: str, additional_env, on_output=None, on_error=None):
        from pulumi.automation import CommandResult
        from pulumi.automation.errors import create_command_error

        # never a prompt (the CLI fails instead of waiting for input), as the Automation API asks: the flag
        # goes before a `--` that ends the CLI's own flags
        end = args.index("--") if "--" in args else len(args)
        if "--non-interactive" not in args[:end]:
            args = ["--non-interactive", *args]
        env = {**os.environ, **additional_env, "PULUMI_AUTOMATION_API": "true"}
        if os.path.isabs(self.command):  # the plugins installed beside the CLI come first
            env["PATH"] = os.pathsep.join([os.path.dirname(self.command), env.get("PATH", "")])
        with self._lock:
            if self._interrupted:  # interrupted before it began: it does not begin
                raise create_command_error(CommandResult("", "error: interrupted before it started", 255))
            proc = subprocess.Popen([self.command, *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, encoding="utf-8",
                                    errors="replace", process_group=0)
            self._running[proc] = 0
            leases.CHILDREN.add(proc)  # a lease is kept while it runs
        err: list[str] = []
        out: list[str] = []
        try:
            reader = threading.Thread(target=_lines, args=(proc.stderr, on_error, err), daemon=True)
            reader.start()
            try:
                _lines(proc.stdout, on_output, out)
                reader.join()
                code = proc.wait()
            except KeyboardInterrupt:
                self._cancel(proc, on_output, out)
                raise  # only once the CLI has ended (or gpufleet stopped waiting for it)
        finally:
            with self._lock:
                self._running.pop(proc, None)
            if proc.poll() is not None:
                leases.CHILDREN.discard(proc)
        result = CommandResult(stdout="\n".join(out), stderr="\n".join(err), code=code)
        if code != 0:
            raise create_command_error(result)
        return result

    def _signal(self, proc: subprocess.Popen) -> int:
        """Send the run one SIGINT; how many it has had."""
        with self._lock:
            self._running[proc] = sent = self._running.get(proc, 0) + 1
        try:
            proc.send_signal(signal.SIGINT)
        except (ProcessLookupError, OSError):
            pass  # it ended meanwhile
        return sent

    def _cancel(self, proc: subprocess.Popen, on_output, out: list[str]) -> None:
        """Ctrl-C reached gpufleet while ``proc`` runs: forward it (the first asks for a graceful cancel,
        a later one, or ``CANCEL_WAIT_S`` gone by, for a stop at once), keep reading the CLI's output so that
        it is never blocked nor cut off, and wait for it to exit. A Ctrl-C after the stop, or
        ``STOP_WAIT_S`` gone by, ends the wait with the CLI still running (said; ``leases.CHILDREN`` keeps
        the lease then)."""
        threading.Thread(target=_lines, args=(proc.stdout, on_output, out), daemon=True).start()
        sent = self._signal(proc)
        _tell(CANCELLING if sent == 1 else STOPPING)
        deadline = time.monotonic() + (CANCEL_WAIT_S if sent == 1 else STOP_WAIT_S)
        while True:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                return
            except (subprocess.TimeoutExpired, KeyboardInterrupt):
                pass
            if sent > 1:  # asked to stop at once already: wait no longer
                _tell(LEFT.format(pid=proc.pid))
                return
            sent = self._signal(proc)
            _tell(STOPPING)
            deadline = time.monotonic() + STOP_WAIT_S

    def interrupt(self) -> None:
        """Ask every run in flight to stop, as Ctrl-C does (once: the CLI then cancels gracefully), and
        start no other."""
        with self._lock:
            self._interrupted = True
            running = [p for p, sent in self._running.items() if not sent]
        for proc in running:
            self._signal(proc)


def _lines(stream, callback, into: list[str]) -> None:
    for line in stream:
        line = line.rstrip("\n")
        if callback:
            callback(line)
        into.append(line)
    stream.close()


def state_stacks(url: str | None = None, pulumi_command=None) -> set[str] | None:
    """The clusters (stacks of the gpufleet project) in the Pulumi state; None when it cannot be read.

    A file backend is read directly (``.pulumi/stacks/gpufleet/<stack>.json``, Pulumi's
    project-scoped layout, or the older ``.pulumi/stacks/<stack>.json``); any other backend
    through the Pulumi CLI, when there is one.
    """
    url = url or backend_url()
    if url.startswith("file://"):
        return set(_state_files(url))
    try:
        ws = _workspace(url, pulumi_command or find_pulumi(), team_env(url))
        return {s.name.rsplit("/", 1)[-1] for s in ws.list_stacks()}
    except Exception:  # noqa: BLE001 - no CLI, no access: the caller says the state was not read
        return None


def _state_files(url: str) -> dict[str, Path]:
    """The stack files of a file backend, by stack name (a project-scoped file wins over an old one)."""
    root = Path(url[len("file://"):]).expanduser() / ".pulumi" / "stacks"
    out: dict[str, Path] = {}
    for d in (root, root / PROJECT):
        if d.is_dir():
            for f in d.iterdir():
                for suffix in (".json", ".json.gz"):
                    if f.is_file() and f.name.endswith(suffix):
                        out[f.name[: -len(suffix)]] = f
    return out


def state_outputs(url: str | None = None) -> dict[str, dict]:
    """Each stack's outputs (``cluster``, ``pools``: see ``engine.program``) as a file backend holds
    them in its checkpoint (the root ``pulumi:pulumi:Stack`` resource); empty for another backend
    or a file that cannot be read (the tags still tell what exists)."""
    url = url or backend_url()
    if not url.startswith("file://"):
        return {}
    out = {}
    for name, f in _state_files(url).items():
        try:
            raw = gzip.decompress(f.read_bytes()) if f.name.endswith(".gz") else f.read_bytes()
            resources = json.loads(raw)["checkpoint"]["latest"].get("resources") or []
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        root = next((r for r in resources if r.get("type") == "pulumi:pulumi:Stack"), None)
        if root is not None:
            out[name] = root.get("outputs") or {}
    return out


@dataclass
class Progress:
    """What the engine has told us so far; ``on_change`` is called after every step."""

    total: int | None = None
    started: float = field(default_factory=time.monotonic)
    done: int = 0
    in_flight: dict[str, str] = field(default_factory=dict)  # urn -> op
    ops: dict[str, int] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    error_urns: list[str] = field(default_factory=list)  # the resources the error diagnostics name
    summary: dict | None = None
    on_change: Callable[["Progress"], None] | None = None

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def __call__(self, event) -> None:  # an automation.events.EngineEvent
        if event.resource_pre_event is not None:
            md = event.resource_pre_event.metadata
            op = md.op.value if hasattr(md.op, "value") else str(md.op)
            if op != "same" and not md.type.startswith("pulumi:"):
                self.in_flight[md.urn] = op
        elif event.res_outputs_event is not None:
            md = event.res_outputs_event.metadata
            op = md.op.value if hasattr(md.op, "value") else str(md.op)
            if md.urn in self.in_flight:
                self.in_flight.pop(md.urn)
                self.done += 1
                self.ops[op] = self.ops.get(op, 0) + 1
        elif event.res_op_failed_event is not None:
            md = event.res_op_failed_event.metadata
            self.in_flight.pop(md.urn, None)
            self.failed.append(md.urn)
        elif event.diagnostic_event is not None and event.diagnostic_event.severity == "error":
            msg = strip_color(event.diagnostic_event.message).strip()
            if msg:
                self.errors.append(msg)
            if getattr(event.diagnostic_event, "urn", None):
                self.error_urns.append(event.diagnostic_event.urn)
        elif event.summary_event is not None:
            s = event.summary_event
            self.summary = {"duration_seconds": s.duration_seconds,
                            "resource_changes": {str(getattr(k, "value", k)): v for k, v in (s.resource_changes or {}).items()}}
        else:
            return
        if self.on_change:
            self.on_change(self)


@dataclass
class DeployResult:
    cluster: str
    outputs: dict
    progress: Progress
    stdout: str = ""


def _scratch_workspace(make):
    """``make(work_dir)``'s workspace, whose folder (Pulumi.yaml and the stack's settings, all it holds)
    goes with it. Left to choose, LocalWorkspace makes one with tempfile.mkdtemp and never removes it
    (pulumi/automation/_local_workspace.py, 3.x): every command would leave a folder in the temp dir."""
    folder = tempfile.mkdtemp(prefix="gpufleet-pulumi-")
    ws = make(folder)
    weakref.finalize(ws, shutil.rmtree, folder, True)
    return ws


def _stack(cluster: str, program, pulumi_command, prompt, backend: str | None):
    """The cluster's stack in a LocalWorkspace on the backend, with the passphrase in place (``pulumi_command``:
    the CLI, ``find_pulumi()``'s or a stand-in)."""
    from pulumi import automation as auto

    url = backend or backend_url()
    provider = secrets_provider(url)
    env = {**team_env(url), **(passphrase_env(url, prompt) if provider == team_config.PASSPHRASE else {})}
    ws = _scratch_workspace(lambda folder: auto.LocalWorkspace(
        work_dir=folder, program=program, secrets_provider=provider, pulumi_command=pulumi_command,
        # main: the inline program's folder, as create_or_select_stack sets it (_inline_source_stack_helper)
        project_settings=auto.ProjectSettings(name=PROJECT, runtime="python", main=os.getcwd(),
                                              backend=auto.ProjectBackend(url=url)),
        env_vars={"PULUMI_SKIP_UPDATE_CHECK": "true", **env}))
    return auto.Stack.create_or_select(cluster, ws)


def up(cluster: str, program, *, pulumi_command=None, progress: Progress | None = None,
       prompt: Callable[[], str] | None = None, backend: str | None = None) -> DeployResult:
    """Create or update the cluster's Pulumi stack; return its outputs (plain values)."""
    progress = progress or Progress()
    try:
        cmd = pulumi_command or find_pulumi()
        with _stopped_with_the_lease(cmd):
            stack = _stack(cluster, program, cmd, prompt, backend)
            res = stack.up(on_event=progress, color="never")
    except Exception as e:  # noqa: BLE001 - every engine failure is translated below
        raise translate(e, progress) from None
    return DeployResult(cluster, {k: v.value for k, v in res.outputs.items()}, progress, res.stdout)


# the steps of a replacement (Pulumi's OpType): its create and delete halves and the logical step
REPLACING = ("replace", "create-replacement", "delete-replaced")
DELETING = "delete"  # a resource the program no longer registers (or registers under another name)


@dataclass
class Replacement:
    """A resource an update would replace (``op`` "replace") or delete (``op`` "delete"), and the inputs
    whose change makes it replaced (the steps' ``keys``)."""

    urn: str
    kind: str  # its type, or a dynamic resource's own ``gpufleet_kind`` (clouds.aws.pool_vms.FleetNodes)
    op: str = "replace"
    keys: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.urn.rsplit("::", 1)[-1]


def preview(cluster: str, program, *, pulumi_command=None, prompt: Callable[[], str] | None = None,
            backend: str | None = None) -> list[Replacement]:
    """What an `up` of ``program`` would replace or delete in the cluster's stack, from Pulumi's preview
    (the engine's steps, streamed as events; Automation API ``Stack.preview``): nothing is changed."""
    found: dict[str, Replacement] = {}

    def on_event(event) -> None:
        pre = event.resource_pre_event
        if pre is None:
            return
        md = pre.metadata
        op = md.op.value if hasattr(md.op, "value") else str(md.op)
        if op not in (*REPLACING, DELETING):
            return
        state = md.new or md.old
        kind = ((state.inputs or {}).get(READER_KIND) if state and md.type == DYNAMIC_TYPE else None) or md.type
        r = found.setdefault(md.urn, Replacement(md.urn, kind, DELETING if op == DELETING else "replace"))
        r.keys = sorted(set(r.keys) | set(md.keys or []))

    try:
        cmd = pulumi_command or find_pulumi()
        with _stopped_with_the_lease(cmd):
            _stack(cluster, program, cmd, prompt, backend).preview(on_event=on_event, color="never")
    except Exception as e:  # noqa: BLE001 - every engine failure is translated below
        raise translate(e) from None
    return list(found.values())


def outputs(cluster: str, *, pulumi_command=None, prompt: Callable[[], str] | None = None,
            backend: str | None = None) -> dict:
    """The cluster's stack outputs as the backend holds them (``pulumi stack output --json``)."""
    try:
        stack = _stack(cluster, lambda: None, pulumi_command or find_pulumi(), prompt, backend)
        return {k: v.value for k, v in stack.outputs().items()}
    except Exception as e:  # noqa: BLE001
        raise translate(e) from None


def destroy(cluster: str, *, pulumi_command=None, progress: Progress | None = None,
            prompt: Callable[[], str] | None = None, backend: str | None = None) -> Progress:
    """Destroy every resource of the cluster's stack, then remove the stack from the backend."""
    progress = progress or Progress()
    try:
        cmd = pulumi_command or find_pulumi()
        with _stopped_with_the_lease(cmd):
            stack = _stack(cluster, lambda: None, cmd, prompt, backend)
            stack.destroy(on_event=progress, color="never")
            stack.workspace.remove_stack(cluster)
    except Exception as e:  # noqa: BLE001
        raise translate(e, progress) from None
    return progress


def _workspace(url: str, cmd, env: dict[str, str], provider: str | None = None):
    """A workspace of the gpufleet project on the backend ``url`` (no program: for the stack commands)."""
    from pulumi import automation as auto

    return _scratch_workspace(lambda folder: auto.LocalWorkspace(
        work_dir=folder, secrets_provider=provider, pulumi_command=cmd, env_vars={"PULUMI_SKIP_UPDATE_CHECK": "true", **env},
        project_settings=auto.ProjectSettings(name=PROJECT, runtime="python", backend=auto.ProjectBackend(url=url))))


def _resources(state) -> dict[str, str | None]:
    """A stack's exported state (``Deployment``) as its resources: URN -> the cloud's id."""
    return {r["urn"]: r.get("id") for r in (state.deployment or {}).get("resources") or []}


@dataclass
class Moved:
    cluster: str
    resources: int  # in the stack moved
    created: bool  # the stack was made in the target now (False: it was there already, as moved before)


def move_stack(cluster: str, source: str, target: str, *, target_env: dict[str, str], provider: str,
               pulumi_command=None, prompt: Callable[[], str] | None = None) -> Moved | None:
    """Move the cluster's stack from the backend ``source`` into ``target`` as Pulumi documents a change of
    backend (pulumi.com/docs/iac/concepts/state-and-backends, "Migrating between state backends": `pulumi
    stack export --show-secrets`, `pulumi stack init` on the new backend, `pulumi stack import`), through
    the Automation API's ``export_stack``, ``create_stack`` (with the team's secrets ``provider``, which
    encrypts the secrets again on import) and ``import_stack``; then the stack is exported from ``target``
    and must hold the same resources (URN and id), else it is removed there again and the move fails.
    ``source`` is left as it was (Pulumi's `stack migrate` does the same), a copy to fall back on that
    gpufleet no longer uses. None when ``source`` has no such stack: there is nothing to move. A stack
    ``target`` has already is taken as moved when it holds the same resources, refused otherwise."""
    from pulumi import automation as auto

    cmd = pulumi_command or find_pulumi()
    asked = passphrase_env(source, prompt)  # the source's secrets are shown to be encrypted again
    try:
        try:
            state = _workspace(source, cmd, asked).export_stack(cluster)
        except auto.StackNotFoundError:
            return None
        env = {**target_env, **((asked or passphrase_env(target, prompt)) if provider == team_config.PASSPHRASE
                                else {})}
        there = _workspace(target, cmd, env, provider)
        want = _resources(state)
        try:
            there.create_stack(cluster)
        except auto.StackAlreadyExistsError:
            if _resources(there.export_stack(cluster)) == want:
                return Moved(cluster, len(want), created=False)
            raise InputError(f"the team's Pulumi backend {target} already has a stack {cluster} holding other "
                             "resources", "the team has a cluster of that name: take this machine's down first, "
                             "or bring it up under another name") from None
        try:
            there.import_stack(cluster, state)
            if _resources(there.export_stack(cluster)) != want:
                raise DeployError(f"the Pulumi state of {cluster} imported into {target} does not hold the "
                                  "resources exported", "run it again, or ask Pulumi (pulumi stack export)")
        except BaseException:
            with contextlib.suppress(Exception):  # the stack made now goes: the source holds the state
                there.remove_stack(cluster, force=True)
            raise
    except Exception as e:  # noqa: BLE001 - every engine failure is translated
        raise translate(e) from None
    return Moved(cluster, len(want), created=True)


def forget_stack(cluster: str, backend: str, *, env: dict[str, str], pulumi_command=None) -> None:
    """Remove the cluster's stack from ``backend`` without touching its resources (`pulumi stack rm
    --force`): what undoes a move whose record could not follow it (the source keeps them)."""
    _workspace(backend, pulumi_command or find_pulumi(), env).remove_stack(cluster, force=True)


@contextlib.contextmanager
def _stopped_with_the_lease(cmd):
    """A Pulumi run inside the cluster's lease (team mode): none starts once the lease is lost, and the one
    in flight is interrupted when it is (``Cli.interrupt``); its failure is then the lost lease's."""
    with leases.stopping(getattr(cmd, "interrupt", None)):
        try:
            yield
        except Exception:
            leases.ensure_held()  # lost meanwhile: that, not the cancelled update, is what happened
            raise


# --- errors -----------------------------------------------------------------------------------

QUOTA_HINT = ("run `gpufleet check STACK` and request an increase, or make the pool smaller; "
              "this is not a capacity shortage, retrying will not help")
CAPACITY_HINT = "try another zone or region, a capacity reservation, or retry later; this is not a quota problem"
DEPLOY_HINT = ("the resources created so far stay in the state; fix the cause and run `gpufleet up` again, "
               "or `gpufleet down` to remove them")


def translate(exc: Exception, progress: Progress | None = None) -> GpufleetError:
    """A Pulumi CLI / engine failure as a gpufleet error with the most useful hint, and, in its
    ``refusal``, what the failure rules out for another attempt (``clouds.base.Refusal``; None
    where the failure is not the cloud's: a missing CLI, a concurrent update)."""
    if isinstance(exc, GpufleetError):
        return exc
    if isinstance(exc, FileNotFoundError):
        return ToolMissing("the Pulumi CLI is not installed", INSTALL_HINT)
    from pulumi.automation import errors as auto_errors

    text = "\n".join([*(progress.errors if progress else []), str(getattr(exc, "stderr", "") or ""),
                      str(getattr(exc, "stdout", "") or ""), str(exc)])
    failed = list(progress.failed) if progress else []
    if isinstance(exc, auto_errors.ConcurrentUpdateError):
        return DeployError("another update of this cluster is running", "wait for it, or run `pulumi cancel` "
                           "in the gpufleet project if it died", resources=failed)
    c, refusal = classify(text, _clouds_of([*failed, *(progress.error_urns if progress else [])]))
    return _error(c, refusal, text, progress, failed)


def classify(text: str, failing: list | None = None) -> tuple[object | None, Refusal]:
    """Which cloud refused, and what its refusal rules out for another attempt. First a documented
    error code of the ``failing`` clouds (of every cloud when none is known), in the order of each
    cloud's table; then the SDKs' own words for missing credentials, a quota or no capacity (no
    code); else an unknown failure, which stops (no cloud)."""
    clouds = [cloud(p) for p in CLOUDS]
    for c in failing or clouds:
        refusal = refusal_in(c.errors.rules, text)
        if refusal is not None:
            return c, refusal
    for kind in ("credentials", "quota", "capacity"):
        for c in clouds:
            pattern = getattr(c.errors, kind)
            if pattern.search(text):
                return c, refusal_in([r for r in c.errors.rules if r.kind == kind], text) or \
                    worded_refusal(kind, pattern, text)
    return None, unknown_refusal(_last_error_line(text))


def _error(c, refusal: Refusal, text: str, progress: Progress | None, failed: list[str]) -> GpufleetError:
    """The gpufleet error for a refusal, with the refusal attached."""
    if refusal.kind == "credentials":
        err = CredentialsError(c.name, f"{c.name}: no usable credentials ({refusal.message})", c.credential_hint)
    elif refusal.kind == "quota":
        err = QuotaError(c.name, None, refusal.message, None, None, QUOTA_HINT,
                         message=f"a quota stopped the deployment: {refusal.message}")
    elif refusal.kind == "capacity":
        err = CapacityError(f"the cloud has no capacity for this request right now: {refusal.message}", CAPACITY_HINT)
    else:
        detail = _detail(text, progress)
        err = DeployError(f"Pulumi failed: {detail}", DEPLOY_HINT, resources=failed)
        if refusal.kind == "unknown":
            refusal = unknown_refusal(detail)
    err.refusal = refusal
    return err


def _detail(text: str, progress: Progress | None) -> str:
    errors = progress.errors if progress else []
    return errors[-1] if errors else _last_error_line(text)


def _clouds_of(urns: list[str]) -> list:
    """The clouds whose resources these URNs name (``urn:pulumi:STACK::PROJECT::TYPE::NAME``, the type
    qualified by its parents' with ``$``; a provider's own resource is ``pulumi:providers:PACKAGE``)."""
    out = []
    for urn in urns:
        parts = urn.split("::")
        typ = parts[2].split("$")[-1] if len(parts) >= 4 else ""
        package = typ.split(":")[2] if typ.startswith("pulumi:providers:") and typ.count(":") >= 2 else \
            typ.split(":")[0]
        c = by_pulumi_package(package) if package else None
        if c is not None and c not in out:
            out.append(c)
    return out


def _last_error_line(text: str) -> str:
    lines = [ln.strip() for ln in strip_color(text).splitlines() if ln.strip()]
    errs = [ln for ln in lines if ln.lower().startswith("error")]
    return (errs or lines or ["unknown error"])[-1][:300]

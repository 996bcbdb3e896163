"""A stand-in for the Pulumi CLI, which cannot be installed on these machines.

It is a ``pulumi.automation.PulumiCommand`` whose ``run`` answers the commands the
Automation API's LocalWorkspace issues, in the CLI's documented formats:

* ``up`` / ``preview`` / ``destroy``: engine events as JSON objects of the EngineEvent schema
  (``preludeEvent``, ``resourcePreEvent``, ``resOutputsEvent``, ``resOpFailedEvent``,
  ``diagnosticEvent``, ``summaryEvent``, ``cancelEvent``) streamed to the
  ``pulumirpc.Events/StreamEvents`` gRPC service that the Automation API opens for CLIs
  newer than 3.205 (``--event-log tcp://...``), then stdout and the exit code;
* ``stack select`` / ``stack init`` / ``stack rm``: the CLI's stderr texts that the
  Automation API matches ("no stack named 'x' found", "stack 'x' already exists");
* ``stack output --json`` and ``stack history --json``: the JSON the CLI prints;
* ``stack export`` / ``stack import --file``: a deployment as ``apitype.UntypedDeployment`` (``version``,
  ``deployment`` with its ``resources``, the root ``pulumi:pulumi:Stack`` holding the outputs), and the
  import's refusal of a resource of another stack (pkg/cmd/pulumi/stack/stack_import.go).

Each backend has stacks of its own, as Pulumi's do: the backend of a command is its project's
(``backend.url`` in the ``Pulumi.yaml`` the Automation API writes into the workspace it runs the CLI in).

It does not run the program: the resources it reports are those the same program
registered under Pulumi's mock runtime (``gpufleet plan``), so their URNs, types and the
stack outputs are the program's own. Each resource's step is the engine's decision from the
program's own inputs and options against those the stack's state holds: ``create`` (not in the
state), ``same`` (equal inputs), ``replace`` (a changed input its ``replaceOnChanges`` names,
``delete-replaced`` first with ``deleteBeforeReplace``; a provider's own ForceNew is not run
here), else ``update``; a step's ``keys`` are the inputs forcing its replacement and ``diffs``
the changed ones (pulumi/pulumi pkg/resource/deploy/step_generator.go). Failures are scripted
with the error texts the cloud APIs return (e.g. EC2's InsufficientInstanceCapacity), as the
CLI prints them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
from dataclasses import dataclass, field

from pulumi.automation import PulumiCommand
from pulumi.automation._cmd import CommandResult
from semver import VersionInfo


@dataclass
class Failure:
    """A scripted failure: events sent before it, the diagnostic, stderr and exit code."""

    message: str  # the engine's diagnostic (what the provider returned)
    after: int = 0  # resources created before it fails
    stderr: str = "error: update failed\n"
    code: int = 255
    urn_index: int | None = None  # the resource that fails (default: the next one)
    at: str | None = None  # or: the first resource of this type fails (``after`` then counts nothing)
    then: object = None  # called when it fails: what the cloud did that the state does not know (tests)


@dataclass
class FakeStack:
    resources: list = field(default_factory=list)  # [(urn, type)]
    inputs: dict = field(default_factory=dict)  # urn -> the inputs the state holds
    outputs: dict = field(default_factory=dict)
    history: list = field(default_factory=list)
    secrets_provider: str = "default"  # what `stack init --secrets-provider` named


class FakePulumiCLI(PulumiCommand):
    def __init__(self, plan=None, version: str = "3.207.0"):
        # no subprocess: this CLI is not installed
        self.command = "pulumi"
        self.version = VersionInfo.parse(version)
        self.plan = plan  # gpufleet.engine.plan.Plan: what the program registers, and its outputs
        self.backends: dict[str | None, dict[str, FakeStack]] = {}  # backend URL -> its stacks
        self.backend: str | None = None  # the backend of the last command
        self.calls: list[list[str]] = []
        self.env: list[dict] = []
        self.fail_up: Failure | None = None
        self.fail_ups: list[Failure | None] = []  # one per `up`, in order (then fail_up)
        self.fail_destroy: Failure | None = None
        self.survivors_on_destroy: int = 0  # resources that refuse to die
        self.on_up = None  # called as an `up` starts (tests: to hold it there while another command runs)
        self.interrupted = threading.Event()  # set by ``interrupt``, as SIGINT reaching the real CLI

    @property
    def stacks(self) -> dict[str, FakeStack]:
        """The stacks of the backend the last command used."""
        return self.backends.setdefault(self.backend, {})

    def interrupt(self) -> None:
        """What the CLI does on SIGINT (Ctrl-C) during an update: it cancels it (the engine starts no further
        step, finishes those in flight and saves its checkpoint) and exits non-zero; here the `up` held in
        ``on_up`` ends so."""
        self.interrupted.set()

    # -- the one entry point the Automation API uses -----------------------------------------
    def run(self, args, cwd, additional_env, on_output=None, on_error=None) -> CommandResult:
        args = [a for a in args if a != "--non-interactive"]
        self.calls.append(args)
        self.env.append(dict(additional_env))
        self.backend = _backend_of(cwd)
        head = args[:2]
        if head == ["stack", "select"]:
            name = _flag(args, "--stack")
            if name not in self.stacks:
                return self._err(f"error: no stack named '{name}' found\n")
            return CommandResult("", "", 0)
        if head == ["stack", "init"]:
            name = args[2]
            if name in self.stacks:
                return self._err(f"error: stack '{name}' already exists\n")
            provider = _flag(args, "--secrets-provider") or "default"
            env = {**os.environ, **additional_env}
            if provider in ("default", "passphrase") and not (env.get("PULUMI_CONFIG_PASSPHRASE") is not None
                                                              or env.get("PULUMI_CONFIG_PASSPHRASE_FILE")):
                # what the CLI's passphrase secrets manager says (pkg/secrets/passphrase)
                return self._err("error: passphrase must be set with PULUMI_CONFIG_PASSPHRASE or "
                                 "PULUMI_CONFIG_PASSPHRASE_FILE environment variables\n")
            self.stacks[name] = FakeStack(secrets_provider=provider)
            return CommandResult(f"Created stack '{name}'\n", "", 0)
        if head == ["stack", "rm"]:
            name = _flag(args, "--stack") or args[-1]
            self.stacks.pop(self._current(name), None)
            return CommandResult(f"Stack '{name}' has been removed!\n", "", 0)
        if head == ["stack", "output"]:
            return CommandResult(json.dumps(self.stacks[_flag(args, "--stack")].outputs), "", 0)
        if head == ["stack", "export"]:
            name = _flag(args, "--stack")
            if name not in self.stacks:
                return self._err(f"error: no stack named '{name}' found\n")
            return CommandResult(json.dumps(self._deployment(name)), "", 0)
        if head == ["stack", "import"]:
            return self._import(_flag(args, "--stack"), _flag(args, "--file"))
        if head == ["stack", "history"]:
            st = self.stacks[self._current(_flag(args, "--stack"))]
            return CommandResult(json.dumps(st.history[-1:]), "", 0)
        if args[0] == "up":
            return self._up(args, on_output)
        if args[0] == "preview":
            return self._preview(args, on_output)
        if args[0] == "destroy":
            return self._destroy(args, on_output)
        if args[0] == "config":
            return CommandResult("{}", "", 0)
        return self._err(f"error: fake pulumi does not know `{' '.join(args)}`\n")

    def _deployment(self, name: str) -> dict:
        st = self.stacks[name]
        root = {"urn": f"urn:pulumi:{name}::gpufleet::pulumi:pulumi:Stack::gpufleet-{name}", "custom": False,
                "type": "pulumi:pulumi:Stack", "outputs": st.outputs}
        return {"version": 3, "deployment": {
            "manifest": {"time": dt.datetime.now(dt.timezone.utc).isoformat(), "magic": "", "version": "v3.207.0"},
            "secrets_providers": {"type": st.secrets_provider},
            "resources": [root, *({"urn": u, "custom": True, "type": t, "id": _id(u), "parent": root["urn"]}
                                  for u, t in st.resources)]}}

    def _import(self, name: str, file: str) -> CommandResult:
        if name not in self.stacks:
            return self._err(f"error: no stack named '{name}' found\n")
        with open(file, encoding="utf-8") as f:
            doc = json.load(f)
        resources = doc["deployment"]["resources"]
        for r in resources:
            if not r["urn"].startswith(f"urn:pulumi:{name}::"):
                return self._err(f"error: resource '{r['urn']}' is from a different stack\n")
        st = self.stacks[name]
        st.resources = [(r["urn"], r["type"]) for r in resources if r["type"] != "pulumi:pulumi:Stack"]
        st.outputs = next((r.get("outputs") or {} for r in resources if r["type"] == "pulumi:pulumi:Stack"), {})
        return CommandResult("Import complete.\n", "", 0)

    # -- operations ---------------------------------------------------------------------------
    def _current(self, name: str | None) -> str:
        return name or next(iter(self.stacks))

    def _up(self, args, on_output) -> CommandResult:
        if self.on_up:
            self.on_up()
        if self.interrupted.is_set():
            return self._err("error: update canceled\n")
        name = _flag(args, "--stack") or self._current(None)
        st = self.stacks[name]
        start = dt.datetime.now(dt.timezone.utc)
        resources = [(_urn(name, r), r.type, r) for r in self.plan.cloud_resources]
        fail = self.fail_ups.pop(0) if self.fail_ups else self.fail_up
        known = {u for u, _ in st.resources}
        events = [{"preludeEvent": {"config": {}}}]
        created, failed = [], None
        # what the program no longer registers is deleted, as Pulumi's `up` does (this stand-in
        # deletes first; Pulumi deletes after creating, which matters only for replacements)
        wanted = {u for u, _, _ in resources}
        for urn, typ in [x for x in st.resources if x[0] not in wanted]:
            meta = {"op": "delete", "urn": urn, "type": typ, "provider": "", "old": {"type": typ, "urn": urn, "custom": True}}
            events += [{"resourcePreEvent": {"metadata": meta}}, {"resOutputsEvent": {"metadata": meta}}]
            st.resources.remove((urn, typ))
            st.inputs.pop(urn, None)
            created.append((urn, typ, "delete"))
        for i, (urn, typ, r) in enumerate(resources):
            if fail and (typ == fail.at if fail.at else i == fail.after):
                failed = (urn, typ)
                break
            steps = _steps(st, urn, typ, r)
            for meta in steps:
                events.append({"resourcePreEvent": {"metadata": meta}})
                events.append({"resOutputsEvent": {"metadata": meta}})
            op = "replace" if steps[-1]["op"] == "create-replacement" else steps[-1]["op"]
            created.append((urn, typ, op))
            st.inputs[urn] = r.inputs
        for urn, typ, op in created:
            if urn not in known and op != "delete":
                st.resources.append((urn, typ))
        changes: dict[str, int] = {}
        for _, _, op in created:
            changes[op] = changes.get(op, 0) + 1
        if failed:
            urn, typ = failed
            events.append({"resourcePreEvent": {"metadata": {"op": "create", "urn": urn, "type": typ, "provider": ""}}})
            events.append({"diagnosticEvent": {"urn": urn, "prefix": "error: ", "message": fail.message + "\n",
                                               "color": "never", "severity": "error"}})
            events.append({"resOpFailedEvent": {"metadata": {"op": "create", "urn": urn, "type": typ, "provider": ""},
                                                "status": 0, "steps": 0}})
        events.append({"summaryEvent": {"maybeCorrupt": False, "durationSeconds": 1,
                                        "resourceChanges": changes, "PolicyPacks": {}}})
        events.append({"cancelEvent": {}})
        self._stream(args, events)
        result = "failed" if failed else "succeeded"
        st.history.append(_summary("update", start, result, changes))
        if failed:
            if fail.then:
                fail.then()
            return self._err(fail.stderr, code=fail.code, stdout=f"Updating ({name}):\n  error: {fail.message}\n")
        st.outputs = json.loads(json.dumps(self.plan.outputs))
        out = f"Updating ({name}):\nResources:\n    + {changes.get('create', 0)} created\n"
        if on_output:
            on_output(out)
        return CommandResult(out, "", 0)

    def _preview(self, args, on_output) -> CommandResult:
        """What `up` would do, as its events say it, changing nothing."""
        name = _flag(args, "--stack") or self._current(None)
        st = self.stacks[name]
        events = [{"preludeEvent": {"config": {}}}]
        changes: dict[str, int] = {}
        wanted = set()
        for r in self.plan.cloud_resources:
            urn = _urn(name, r)
            wanted.add(urn)
            steps = _steps(st, urn, r.type, r)
            events += [{"resourcePreEvent": {"metadata": meta}} for meta in steps]
            op = "replace" if steps[-1]["op"] == "create-replacement" else steps[-1]["op"]
            changes[op] = changes.get(op, 0) + 1
        for urn, typ in st.resources:
            if urn not in wanted:
                events.append({"resourcePreEvent": {"metadata": {"op": "delete", "urn": urn, "type": typ, "provider": "",
                                                                 "old": {"type": typ, "urn": urn, "custom": True}}}})
                changes["delete"] = changes.get("delete", 0) + 1
        events.append({"summaryEvent": {"maybeCorrupt": False, "durationSeconds": 1, "resourceChanges": changes,
                                        "PolicyPacks": {}}})
        events.append({"cancelEvent": {}})
        self._stream(args, events)
        out = f"Previewing update ({name}):\nResources:\n" + "".join(f"    {n} to {op}\n" for op, n in changes.items())
        if on_output:
            on_output(out)
        return CommandResult(out, "", 0)

    def _destroy(self, args, on_output) -> CommandResult:
        name = _flag(args, "--stack") or self._current(None)
        st = self.stacks[name]
        start = dt.datetime.now(dt.timezone.utc)
        events = [{"preludeEvent": {"config": {}}}]
        keep = st.resources[: self.survivors_on_destroy]
        deleted = 0
        for urn, typ in reversed(st.resources[self.survivors_on_destroy:]):
            meta = {"op": "delete", "urn": urn, "type": typ, "provider": "",
                    "old": {"type": typ, "urn": urn, "custom": True}}
            events.append({"resourcePreEvent": {"metadata": meta}})
            events.append({"resOutputsEvent": {"metadata": meta}})
            deleted += 1
        for urn, typ in keep:
            events.append({"resourcePreEvent": {"metadata": {"op": "delete", "urn": urn, "type": typ, "provider": ""}}})
            events.append({"diagnosticEvent": {"urn": urn, "prefix": "error: ", "color": "never", "severity": "error",
                                               "message": self.fail_destroy.message + "\n" if self.fail_destroy else
                                               "deleting failed\n"}})
            events.append({"resOpFailedEvent": {"metadata": {"op": "delete", "urn": urn, "type": typ, "provider": ""},
                                                "status": 0, "steps": 0}})
        changes = {"delete": deleted}
        events.append({"summaryEvent": {"maybeCorrupt": False, "durationSeconds": 1, "resourceChanges": changes,
                                        "PolicyPacks": {}}})
        events.append({"cancelEvent": {}})
        self._stream(args, events)
        st.resources = keep
        st.inputs = {u: st.inputs[u] for u, _ in keep if u in st.inputs}
        st.history.append(_summary("destroy", start, "failed" if keep else "succeeded", changes))
        if keep:
            f = self.fail_destroy or Failure("deleting failed")
            return self._err(f.stderr, code=f.code)
        return CommandResult(f"Destroying ({name}):\nResources:\n    - {deleted} deleted\n", "", 0)

    # -- plumbing -----------------------------------------------------------------------------
    def _stream(self, args, events) -> None:
        target = _flag(args, "--event-log")
        if not target:
            return
        stamped = [{"sequence": i, "timestamp": int(dt.datetime.now().timestamp()), **e} for i, e in enumerate(events)]
        if target.startswith("tcp://"):
            import grpc
            from pulumi.runtime.proto import events_pb2, events_pb2_grpc

            with grpc.insecure_channel(target[len("tcp://"):]) as ch:
                events_pb2_grpc.EventsStub(ch).StreamEvents(
                    iter([events_pb2.EventRequest(event=json.dumps(e)) for e in stamped]))
        else:
            with open(target, "a", encoding="utf-8") as f:
                for e in stamped:
                    f.write(json.dumps(e) + "\n")

    def _err(self, stderr: str, code: int = 255, stdout: str = "") -> CommandResult:
        from pulumi.automation.errors import create_command_error

        raise create_command_error(CommandResult(stdout, stderr, code))


def _flag(args, name):
    if name in args:
        i = args.index(name)
        return args[i + 1] if i + 1 < len(args) else None
    for a in args:
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def _backend_of(cwd: str | None) -> str | None:
    """The backend a command runs against: its project's (``Pulumi.yaml`` in the workspace)."""
    import yaml

    path = os.path.join(cwd or "", "Pulumi.yaml")
    if not cwd or not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return ((yaml.safe_load(f) or {}).get("backend") or {}).get("url")


def _id(urn: str) -> str:
    """The cloud's id of a resource the stand-in created (stable for its URN)."""
    import hashlib

    return "id-" + hashlib.sha256(urn.encode()).hexdigest()[:12]


def _steps(st: FakeStack, urn: str, typ: str, r) -> list[dict]:
    """The engine's steps for one registered resource against the state (see the module's docstring)."""
    new = {"type": typ, "urn": urn, "custom": True, "inputs": r.inputs, "outputs": r.inputs}
    meta = {"urn": urn, "type": typ, "provider": "", "new": new}
    old = st.inputs.get(urn)
    if urn not in {u for u, _ in st.resources}:
        return [{**meta, "op": "create"}]
    if old is None or old == r.inputs:
        return [{**meta, "op": "same"}]
    diffs = sorted(k for k in set(old) | set(r.inputs) if old.get(k) != r.inputs.get(k))
    forced = r.options.get("replaceOnChanges") or []
    keys = diffs if "*" in forced else [k for k in diffs if k in forced]
    if not keys:
        return [{**meta, "op": "update", "diffs": diffs}]
    was = {"type": typ, "urn": urn, "custom": True, "inputs": old, "outputs": old}
    steps = [{**meta, "op": "replace", "old": was, "keys": keys, "diffs": diffs},
             {**meta, "op": "create-replacement", "old": was, "keys": keys, "diffs": diffs}]
    if r.options.get("deleteBeforeReplace"):
        steps.insert(0, {"urn": urn, "type": typ, "provider": "", "op": "delete-replaced", "old": was})
    return steps


def _urn(stack: str, r) -> str:
    return f"urn:pulumi:{stack}::gpufleet::{r.type}::{r.name}"


def _summary(kind, start, result, changes):
    fmt = "%Y-%m-%dT%H:%M:%S.%fZ"
    return {"version": 1, "kind": kind, "startTime": start.strftime(fmt), "message": "", "environment": {},
            "config": {}, "result": result, "endTime": dt.datetime.now(dt.timezone.utc).strftime(fmt),
            "resourceChanges": changes}

"""The error hierarchy. Only the CLI turns these into exit codes and messages."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

# Every exit code gpufleet's commands end with, declared here only (docs/cli.md explains each; the CLI
# maps errors to them, and no module writes one as a number).
EXIT_OK = 0  # the command did its job
EXIT_FAILED = 1  # it could not
EXIT_BAD_INPUT = 2  # bad input, nothing created
EXIT_PARTIAL = 3  # some hosts or nodes failed while the others completed (a rerun retries them)
EXIT_HELD = 4  # another command holds the cluster (--no-wait, or it was not released in time), or this one lost it
EXIT_OVER_BUDGET = 5  # `up` of a cluster whose projected spend exceeds what a budget has left
EXIT_INTERRUPTED = 130  # Ctrl-C: what a shell reports for a command stopped so, 128 + SIGINT
EXIT_CLOSED_PIPE = 141  # the reader of stdout went away (`| head`): 128 + SIGPIPE, as for git or ls


class GpufleetError(Exception):
    """Root of every error gpufleet expects; carries a message, a hint and an exit code."""

    exit_code = EXIT_FAILED
    # What a cloud's refusal rules out for another attempt (a ``gpufleet.clouds.base.Refusal``, which
    # this bottom layer does not import), set by ``engine.automation.translate`` on the errors it
    # makes of Pulumi failures; None where there was no refusal to read.
    refusal = None

    def __init__(self, message: str, hint: str | None = None, exit_code: int | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code

    def to_dict(self) -> dict:
        d = {"error": type(self).__name__, "message": self.message, "hint": self.hint}
        if self.refusal is not None:
            d["refusal"] = self.refusal.to_dict()
        if getattr(self, "attempts", None):  # where `up`'s capacity failover tried, when it had begun
            d["attempts"] = self.attempts
        return d


class DiskFull(GpufleetError):
    """No space left on the disk gpufleet writes to (ENOSPC; SQLite's SQLITE_FULL): the user's to free,
    never said as a damaged file. Exit code 1: the work was not done."""

    def __init__(self, folder, what: str):
        self.folder = folder
        super().__init__(f"the disk is full at {folder}: {what}", f"free space there (df -h {folder}), then run it again")


class InputError(GpufleetError):
    """Bad input from the user: flags, names, files. Exit code 2."""

    exit_code = EXIT_BAD_INPUT


class SpecError(InputError):
    """A problem in a stack file, located by file, line and key path."""

    def __init__(self, path: str, line: int | None, key: str, problem: str, hint: str | None = None):
        self.path, self.line, self.key, self.problem = path, line, key, problem
        loc = f"{path}:{line}" if line else path
        super().__init__(f"{loc}: {key}: {problem}" if key else f"{loc}: {problem}", hint)

    def to_dict(self) -> dict:
        d = super().to_dict()
        d.update(path=self.path, line=self.line, key=self.key, problem=self.problem)
        return d


class SpecErrors(InputError):
    """Several SpecErrors found in one pass, reported together."""

    def __init__(self, errors: list[SpecError]):
        self.errors = errors
        super().__init__("\n".join(e.message + (f"\n    hint: {e.hint}" if e.hint else "") for e in errors))

    def to_dict(self) -> dict:
        return {"error": "SpecErrors", "message": f"{len(self.errors)} problem(s)",
                "errors": [e.to_dict() for e in self.errors]}


class CatalogError(InputError):
    """The catalog data (embedded or user override) is malformed."""


class NotFound(InputError):
    """A named thing (GPU, instance type, workload, region) does not exist."""

    def __init__(self, kind: str, name: str, choices: Iterable[str], extra: str = "", listed_by: str = "gpufleet catalog"):
        self.kind, self.name = kind, name
        sugg = did_you_mean(name, choices)
        hint = f"did you mean {sugg!r}?" if sugg else f"see `{listed_by}` for the known {kind}s"
        super().__init__(f"unknown {kind} {name!r}{extra}", hint)


def did_you_mean(name: str, choices: Iterable[str]) -> str | None:
    """The closest known name to ``name``, case-insensitively, or None."""
    choices = list(choices)
    lowered = {c.lower(): c for c in choices}
    if name.lower() in lowered:
        return lowered[name.lower()]
    # look-alike characters first (us-east-l -> us-east-1, H1OO -> H100)
    confusable = str.maketrans({"l": "1", "i": "1", "o": "0"})
    folded = {c.lower().translate(confusable): c for c in choices}
    if name.lower().translate(confusable) in folded:
        return folded[name.lower().translate(confusable)]
    match = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[match[0]] if match else None


class CredentialsError(GpufleetError):
    """No usable credentials for a cloud provider. Exit code 2: the user must configure them."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, provider: str, message: str, hint: str | None = None):
        self.provider = provider
        super().__init__(message, hint)

    def to_dict(self) -> dict:
        return {**super().to_dict(), "provider": self.provider}


class ToolMissing(GpufleetError):
    """An external program gpufleet drives (the Pulumi CLI, salt-ssh) is not installed."""

    exit_code = EXIT_BAD_INPUT


class CapacityError(GpufleetError):
    """The cloud has no capacity for what was asked (distinct from a quota limit)."""


class ReplacementUnfinished(GpufleetError):
    """A replacement launched a new node (``launched``: its id) and then failed (the new node not yet visible, the
    old one's termination refused): `heal` remembers the new node and finishes it, never launches another."""

    def __init__(self, message: str, *, launched: str, hint: str | None = None):
        self.launched = launched
        super().__init__(message, hint or f"{launched} was launched: `gpufleet heal` finishes this replacement on its "
                         "next pass (it launches no other)")


class SuccessorGone(GpufleetError):
    """The node an earlier pass launched in a faulty one's place is no longer there (a spot VM preempted before the
    replacement finished): `heal` forgets it (its launch was counted) and asks again within max_replacements."""


class QuotaError(GpufleetError):
    """An account quota is too small for what the stack needs (told apart from CapacityError:
    raising the quota fixes it, retrying does not). ``needed``/``available`` are None when
    the cloud said so only in words (an error during `up`)."""

    def __init__(self, provider: str | None, region: str | None, quota: str, needed: float | None,
                 available: float | None, hint: str | None = None, *, lines: list[dict] | None = None, more: str = "",
                 message: str | None = None):
        self.provider, self.region, self.quota, self.needed, self.available = provider, region, quota, needed, available
        self.lines = lines or []
        msg = message or (f"{provider} {region}: quota {quota!r} has {available:g} available, the stack needs "
                          f"{needed:g}{more}")
        super().__init__(msg, hint or "request a quota increase, or make the pool smaller")

    def to_dict(self) -> dict:
        return {**super().to_dict(), "provider": self.provider, "region": self.region, "quota": self.quota,
                "needed": self.needed, "available": self.available, "lines": self.lines}


class DeployError(GpufleetError):
    """The Pulumi engine reported a failure while creating, updating or destroying resources."""

    def __init__(self, message: str, hint: str | None = None, *, resources: list[str] | None = None):
        self.resources = resources or []
        super().__init__(message, hint)

    def to_dict(self) -> dict:
        return {**super().to_dict(), "resources": self.resources}


class LeftoverError(GpufleetError):
    """Resources tagged for a cluster are still there after its teardown (exit 1, with the list)."""

    def __init__(self, message: str, hint: str | None = None, *, resources: list[dict] | None = None,
                 unread: dict[str, str] | None = None):
        self.resources = resources or []
        self.unread = unread or {}
        super().__init__(message, hint)

    def to_dict(self) -> dict:
        return {**super().to_dict(), "resources": self.resources, "unread": self.unread}


class SdkMissing(GpufleetError):
    """A cloud's SDK (or its Pulumi provider) is not installed. Exit code 2, like missing
    credentials: commands that look at every cloud skip that one and say why."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, provider: str, module: str, extra: str):
        self.provider, self.module = provider, module
        install = f"pip install 'gpufleet[{extra}]'"
        super().__init__(f"{provider}: its SDK is not installed (no module {module}; {install})", install)

    def to_dict(self) -> dict:
        return {**super().to_dict(), "provider": self.provider, "module": self.module}


class PartialFailure(GpufleetError):
    """Some nodes (rack hosts or cloud nodes) failed; the others completed. Exit code 3; a rerun retries the failed ones.

    ``reports``: one per node, each with ``ok``, ``state``, ``hint``, ``target.id`` and ``to_dict()``."""

    exit_code = EXIT_PARTIAL

    def __init__(self, reports: list, action: str = "configured"):
        bad = [r for r in reports if not r.ok]
        hints = list(dict.fromkeys(r.hint for r in bad if r.hint))
        listed = "; ".join(f"{r.target.id} ({r.state})" for r in bad[:10])
        more = f"; and {len(bad) - 10} more" if len(bad) > 10 else ""
        super().__init__(f"{len(bad)} of {len(reports)} node(s) not {action}: {listed}{more}",
                         "; ".join(hints[:3] + ["then run the same command again: nodes already done are skipped"]))
        self.reports = reports

    def to_dict(self) -> dict:
        return {**super().to_dict(), "hosts": [r.to_dict() for r in self.reports]}

    @staticmethod
    def of(reports: list, action: str = "configured") -> "PartialFailure | None":
        """None when every node is done; AllHostsFailed when none is; PartialFailure otherwise."""
        if all(r.ok for r in reports):
            return None
        return (AllHostsFailed if not any(r.ok for r in reports) else PartialFailure)(reports, action)


class AllHostsFailed(PartialFailure):
    """Not one node could be done: the operation did nothing. Exit code 1."""

    exit_code = EXIT_FAILED


class Unhealthy(GpufleetError):
    """`gpufleet verify` (or the verification at the end of `up`): some nodes failed a check, or
    could not be proven healthy. Exit code 1; ``verdicts`` has every node's."""

    exit_code = EXIT_FAILED

    def __init__(self, verdicts: list):
        bad = [v for v in verdicts if not v.ok]
        listed = "; ".join(f"{v.node} ({v.summary()})" for v in bad[:10])
        more = f"; and {len(bad) - 10} more" if len(bad) > 10 else ""
        super().__init__(f"{len(bad)} of {len(verdicts)} node(s) not verified healthy: {listed}{more}",
                         "each failure carries its fault code and remedy (`gpufleet verify ... --json`); "
                         "the nodes are marked unhealthy in `gpufleet status`")
        self.verdicts = verdicts

    def to_dict(self) -> dict:
        return {**super().to_dict(), "nodes": [v.to_dict() for v in self.verdicts]}


class UntrustedValue(GpufleetError):
    """A value gpufleet did not make itself (from a node's status, a bucket, the team's store, the
    registry) that is not of its format, refused before it reaches a shell, an ssh config,
    slurm.conf or the registry. Exit code 1: the record is wrong, not the command line."""

    def __init__(self, what: str, value, expected: str, source: str):
        self.what, self.value, self.expected, self.source = what, value, expected, source
        super().__init__(f"{source}: {what} {str(value)[:80]!r} is not {expected}: refused",
                         "it did not come from gpufleet as it is: check who can write there (a node, a "
                         "teammate's gpufleet, an edit by hand), then record it again (`gpufleet up` or "
                         "`gpufleet registry rebuild`)")

    def to_dict(self) -> dict:
        return {**super().to_dict(), "what": self.what, "expected": self.expected, "source": self.source}


class CloudUnreadable(GpufleetError):
    """A cloud (or a region, or one kind of resource there) that should have been read could not
    be: it could not be reached, it refused the credentials, or it denied permission. Exit code 1:
    the operation could not do its job (missing credentials are CredentialsError, exit 2)."""

    REASONS = {"unreachable": "could not be reached", "refused": "refused the credentials",
             "permission": "denied permission", "error": "failed"}
    HINTS = {"unreachable": "check the network, a proxy, or the endpoint override; then run it again",
             "refused": "the credentials are wrong or expired: log in again",
             "permission": "the identity may not do this: grant it the permission named above",
             "error": "run it again; if it stays, the message above says what the cloud answered"}

    def __init__(self, provider: str, kind: str, detail: str, where: str | None = None):
        self.provider, self.kind, self.where = provider, kind, where or provider
        self.reason = f"{self.REASONS[kind]} ({detail})"  # what `unread` lists beside the place
        super().__init__(f"{self.where}: {self.reason}", self.HINTS[kind])

    @classmethod
    def http(cls, provider: str, status: int, text: str, where: str) -> "CloudUnreadable":
        """An HTTP answer that is not the one expected: 401 refused, 403 permission, else an error."""
        kind = {401: "refused", 403: "permission"}.get(status, "error")
        return cls(provider, kind, f"HTTP {status}: {text[:300]}", where)

    def to_dict(self) -> dict:
        return {**super().to_dict(), "provider": self.provider, "kind": self.kind, "where": self.where}


class ExtraMissing(GpufleetError):
    """An optional feature's library is not installed (``gpufleet report`` draws with matplotlib).
    Exit code 2: the user installs the extra named in the message."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, feature: str, module: str, extra: str):
        self.feature, self.module, self.extra = feature, module, extra
        install = f"pip install 'gpufleet[{extra}]'"
        super().__init__(f"{feature} needs {module}, which is not installed ({install})", install)

    def to_dict(self) -> dict:
        return {**super().to_dict(), "module": self.module, "extra": self.extra}

"""Running the node's tools: found on PATH (plus where gpufleet's states install them), with a
time limit, and the time spent inside them counted apart from the checker's own.

A run may have a budget for the tools it reads from (slurmd's health check: slurmd kills its program
after 60 s; the load tests, started and finished apart, are not part of it): each gets at most a third
of it, or what is left, so that one that hangs leaves time to read the others, and a tool that did not
answer in time is not asked again in the same run (a GPU that fell off the bus hangs every nvidia-smi
call); ``late`` names them. A tool that overran is killed and given ``KILL_WAIT_S`` to go, no more: one
stuck in the driver (D state) outlives SIGKILL, and waiting for it (as ``subprocess.run`` does after its
kill) would hold the whole run past slurmd's limit; it is left behind and ``hung`` names it."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass

# where the verify_tools and cuda states put what they build or install (salt/verify_tools), and where
# the AWS EFA installer puts fi_info (docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html)
TOOL_DIRS = ("/opt/gpufleet/bin", "/usr/local/cuda/bin", "/opt/amazon/efa/bin", "/usr/sbin", "/sbin")
KILL_WAIT_S = 1.0  # how long a killed tool is waited for before it is left behind as stuck


@dataclass
class Ran:
    rc: int
    out: str
    err: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def why(self) -> str:
        """The tool's own last words, for a check's detail."""
        text = (self.err.strip() or self.out.strip()).splitlines()
        return text[-1][:300] if text else f"exit status {self.rc}"


class Tools:
    def __init__(self, extra_dirs: tuple[str, ...] = (), budget: float | None = None):
        self.path = os.pathsep.join([*extra_dirs, os.environ.get("PATH", "/usr/bin:/bin"), *TOOL_DIRS])
        self.seconds = 0.0  # wall time while a tool ran (the checker's overhead is the rest)
        self.background = 0  # tools left running: time counted once, when they finish
        self.budget = budget  # seconds for all the tools run() runs; None: no limit but each tool's own
        self.deadline = time.monotonic() + budget if budget else None
        self.late: dict[str, float] = {}  # tool -> the seconds it was given and did not answer in
        self.hung: dict[str, int] = {}  # tool -> the pid of one that did not end when killed

    def which(self, name: str) -> str | None:
        return shutil.which(name, path=self.path)

    def env(self) -> dict:
        return {**os.environ, "PATH": self.path, "LC_ALL": "C"}

    def run(self, argv: list[str], timeout: float = 60, judged: bool = True) -> Ran | None:
        """None when the tool is not installed (the check is then "not checked"). ``judged=False``: a tool whose
        silence says nothing of the node (``dcgmi`` waits on DCGM's host engine, not on a GPU): one that overran is
        killed but named in neither ``late`` nor ``hung``, so no check fails for it."""
        exe = self.which(argv[0])
        if exe is None:
            return None
        if argv[0] in self.late:
            return Ran(124, "", f"{argv[0]} did not answer earlier in this run: not asked again", 0.0)
        if self.budget:
            timeout = min(timeout, self.budget / 3, self.deadline - time.monotonic())
        if timeout <= 0:
            self.late[argv[0]] = 0.0
            return Ran(124, "", "not run: the time for the checks is spent", 0.0)
        start = time.monotonic()
        try:
            p = subprocess.Popen([exe, *argv[1:]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=self.env(), errors="replace")
        except OSError as e:
            ran = Ran(126, "", str(e), 0.0)
        else:
            try:
                out, err = p.communicate(timeout=timeout)
                ran = Ran(p.returncode, out, err, 0.0)
            except subprocess.TimeoutExpired as e:
                ran = Ran(124, _text(e.stdout), f"timed out after {timeout:.0f}s", 0.0)
                if judged:
                    self.late[argv[0]] = timeout
                self._kill(p, argv[0], judged)
        ran.seconds = time.monotonic() - start
        if not self.background:
            self.seconds += ran.seconds
        return ran

    def start(self, argv: list[str]) -> subprocess.Popen | None:
        """A tool left running (the load the clocks are sampled under); ``finish`` collects it."""
        exe = self.which(argv[0])
        if exe is None:
            return None
        p = subprocess.Popen([exe, *argv[1:]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=self.env(), errors="replace")
        p.started = time.monotonic()  # type: ignore[attr-defined]
        self.background += 1
        return p

    def finish(self, p: subprocess.Popen, timeout: float, wait: float | None = None) -> Ran | None:
        """The tool's result once it ends; None if it is still running after ``wait`` seconds (it is
        killed at ``timeout`` from its start). Its output is read meanwhile, so it never blocks on it."""
        left = timeout - (time.monotonic() - p.started)
        try:
            out, err = p.communicate(timeout=max(0.01, min(left, wait if wait is not None else left)))
            rc = p.returncode
        except subprocess.TimeoutExpired as e:
            if time.monotonic() - p.started < timeout:
                return None
            out, err, rc = _text(e.stdout), f"timed out after {timeout:.0f}s", 124
            self._kill(p, os.path.basename(p.args[0]))
        seconds = time.monotonic() - p.started
        self.background -= 1
        self.seconds += seconds
        return Ran(rc, out, err, seconds)

    def _kill(self, p: subprocess.Popen, tool: str, judged: bool = True) -> None:
        """A tool that overran, killed, its pipes closed; left behind (and named in ``hung``) if it has
        not gone in ``KILL_WAIT_S``: nothing waits for it."""
        p.kill()
        try:
            p.wait(KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            if judged:
                self.hung[tool] = p.pid
        for pipe in (p.stdout, p.stderr):
            if pipe:
                pipe.close()


def _text(captured) -> str:
    """What a tool printed before it timed out (``TimeoutExpired`` holds it as bytes, or None)."""
    return captured.decode(errors="replace") if isinstance(captured, bytes) else (captured or "")

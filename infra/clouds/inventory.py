"""Across clouds: open each with its credentials, list what is tagged, delete it in order.

Every cloud's API (``base.CloudApi``, from ``cloud(p).api()``) has the same methods:
``identity()``, ``regions(wanted)``, ``inventory(regions, cluster, on_region)``,
``delete(region, kind, resources)`` and ``still_there(region, kind, resources)``. The
deletion here is the same for all: kinds in dependency order (``resources.DELETE_ORDER``),
one rank gone before the next starts, retries with exponential backoff for what is in use
or throttled, and a resource that depends on one that refused to die is reported as
blocked rather than retried for minutes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from gpufleet.clouds import cloud
from gpufleet.clouds.resources import Resource
from gpufleet.errors import CloudUnreadable, GpufleetError, InputError, did_you_mean
from gpufleet.providers import CLOUDS


@dataclass
class Clouds:
    """The clouds that could be opened, who we are on each, and why the others were not."""

    open: dict = field(default_factory=dict)  # provider -> its base.CloudApi
    identity: dict[str, dict] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # provider -> why not asked (no credentials, no SDK)
    failed: dict[str, str] = field(default_factory=dict)  # provider -> why it could not be read (CloudUnreadable)
    regions: dict[str, list[str]] = field(default_factory=dict)
    asked: bool = False  # whether any cloud was to be asked at all

    def __getitem__(self, provider: str):
        return self.open[provider]

    def api_or_why(self, provider: str):
        """The provider's open API, or why it could not be opened (a string)."""
        return self.open.get(provider) or self.skipped.get(provider) or self.failed.get(provider) or "not opened"

    def unread(self, places: dict[str, str] | None = None) -> dict[str, str]:
        """What should have been read and was not: the clouds that failed, the places (regions, kinds)
        that could not be listed, and, when clouds were to be asked but none could be, each
        skipped one (a command that read nothing must not say "nothing found")."""
        out = {**self.failed, **(places or {})}
        if self.asked and not self.open and not self.failed:
            out.update(self.skipped or {"clouds": "no cloud was asked"})
        return out


def why_not(provider: str, e: GpufleetError) -> str:
    """Why ``provider`` was not asked, as its error says it less the provider's name its messages
    begin with ("aws: no credentials found"), which whoever says why names already."""
    return e.message.removeprefix(f"{provider}: ")


def api(provider: str):
    """A cloud's API object; SdkMissing (exit 2) naming the extra when its SDK is not installed."""
    return cloud(provider).api()


def open_clouds(providers: list[str] | None, *, required: bool, regions: dict[str, list[str]] | list[str] | None = None,
                factory: Callable[[str], object] = api) -> Clouds:
    """Open ``providers`` (default: every cloud) and learn who we are on each.

    ``required``: missing credentials (or SDK) are an error (exit 2), and so is a cloud that
    cannot be read (exit 1); otherwise the first is skipped and the second recorded as failed,
    each with the reason, and the other clouds are opened. ``regions``: per provider, or a
    plain list that is matched against every opened cloud's regions (``us-east-1`` is AWS, ``us-east1`` GCP, ``eastus``
    Azure); each must exist. Default: every region.
    """
    out = Clouds(asked=True)
    every: dict[str, list[str]] = {}
    for p in providers or CLOUDS:
        try:
            c = factory(p)
            out.identity[p] = c.identity()
            every[p] = c.regions(regions.get(p) or None if isinstance(regions, dict) else None)
        except InputError:  # a region that does not exist, an unknown cloud
            raise
        except CloudUnreadable as e:  # refused, unreachable, denied: should have been read
            if required:
                raise
            out.identity.pop(p, None)
            out.failed[p] = e.reason
            continue
        except GpufleetError as e:  # no credentials, or no SDK: not this user's cloud
            if required:
                raise
            out.identity.pop(p, None)
            out.skipped[p] = why_not(p, e)
            continue
        out.open[p] = c
    if isinstance(regions, dict):
        out.regions = every
        return out
    if not regions:
        out.regions = every
        return out
    unknown = [r for r in regions if not any(r in rs for rs in every.values())]
    if unknown and not out.failed:  # a cloud that could not be read may have it: that failure is the answer
        s = did_you_mean(unknown[0], [r for rs in every.values() for r in rs])
        not_asked = f" (not asked: {'; '.join(f'{p}: {why}' for p, why in out.skipped.items())})" if out.skipped else ""
        raise InputError(f"no cloud has a region {unknown[0]!r}{not_asked}",
                         f"did you mean {s!r}?" if s else "see the cloud's region list, e.g. aws ec2 describe-regions")
    for p in list(out.open):
        mine = [r for r in regions if r in every[p]]
        if mine:
            out.regions[p] = mine
        else:
            del out.open[p]
            out.skipped[p] = "none of the --region values is one of its regions"
    return out


def collect(clouds: Clouds, *, cluster: str | None = None,
            on_region: Callable[[str], None] | None = None) -> tuple[list[Resource], dict[str, str]]:
    """Everything tagged for ``cluster`` (or any cluster) on the open clouds, and the
    places that could not be read (``{"aws/us-west-2": "AuthFailure: ..."}``)."""
    found: list[Resource] = []
    problems: dict[str, str] = {}
    for p, c in clouds.open.items():
        res, prob = c.inventory(clouds.regions[p], cluster=cluster, on_region=on_region)
        found += res
        problems.update(prob)
    return found, problems


# --- deletion ----------------------------------------------------------------------------

@dataclass
class Outcome:
    resource: Resource
    status: str  # deleted | gone | failed | blocked
    message: str = ""
    attempts: int = 0

    @property
    def ok(self) -> bool:
        return self.status in ("deleted", "gone")

    def to_dict(self) -> dict:
        return {**self.resource.to_dict(), "status": self.status, "message": self.message or None,
                "attempts": self.attempts}


@dataclass
class Retry:
    """How hard to try: attempts per resource, first backoff (doubling), how long to wait
    for deletions the cloud accepted to finish. Environment: GPUFLEET_DELETE_ATTEMPTS,
    GPUFLEET_DELETE_BACKOFF (seconds), GPUFLEET_DELETE_WAIT (seconds)."""

    attempts: int = 5
    backoff: float = 2.0
    wait: float = 900.0
    poll: float = 5.0

    @classmethod
    def from_env(cls) -> "Retry":
        r = cls()
        for var, attr, conv in (("GPUFLEET_DELETE_ATTEMPTS", "attempts", int), ("GPUFLEET_DELETE_BACKOFF", "backoff", float),
                                ("GPUFLEET_DELETE_WAIT", "wait", float)):
            if os.environ.get(var):
                try:
                    setattr(r, attr, conv(os.environ[var]))
                except ValueError:
                    raise InputError(f"{var}={os.environ[var]!r} is not a number", f"unset it, or set e.g. {var}=3") from None
        r.poll = min(r.poll, max(0.05, r.wait / 20))
        return r


def delete(resources: list[Resource], clouds: Clouds, *, retry: Retry | None = None,
           on_progress: Callable[[int, int, str], None] | None = None, sleep=None) -> list[Outcome]:
    """Delete ``resources`` (all gpufleet-tagged) kind rank by kind rank; one Outcome each."""
    retry = retry or Retry.from_env()
    sleep = sleep or time.sleep
    for r in resources:
        if not r.cluster:  # the inventories only return tagged resources; never touch anything else
            raise ValueError(f"refusing to delete untagged {r.where} {r.label()}")
    outcomes: dict[tuple, Outcome] = {}
    failed_scope: dict[tuple, str] = {}  # (provider, region, cluster) -> what refused to die there
    total = len(resources)

    def report(detail: str) -> None:
        if on_progress:
            on_progress(len(outcomes), total, detail)

    for rank in sorted({r.rank for r in resources}):
        todo = [r for r in resources if r.rank == rank]
        accepted: list[Resource] = []
        for attempt in range(1, retry.attempts + 1):
            results = _run_groups(_groups(todo), clouds)
            again = []
            for r in todo:
                status, msg = results.get(r.key, ("failed", "no answer from the cloud"))
                scope = (r.provider, r.region, r.cluster)
                if status == "deleted":
                    accepted.append(r)
                    outcomes[r.key] = Outcome(r, "deleted", msg, attempt)
                elif status == "gone":
                    outcomes[r.key] = Outcome(r, "gone", "", attempt)
                elif status == "retry" and scope in failed_scope:
                    outcomes[r.key] = Outcome(r, "blocked", f"{msg} (blocked by {failed_scope[scope]}, "
                                              "which was not deleted)", attempt)
                elif status == "retry" and attempt < retry.attempts:
                    again.append(r)
                else:
                    outcomes[r.key] = Outcome(r, "failed", msg, attempt)
            report(f"{len(again)} to retry" if again else f"rank {rank} requested")
            if not again:
                break
            sleep(retry.backoff * 2 ** (attempt - 1))
            todo = again
        # the next rank needs these gone, not just accepted
        left = _wait_gone(accepted, clouds, retry, sleep)
        for r in accepted:
            if r.key in left:
                outcomes[r.key] = Outcome(r, "failed", f"still {left[r.key]} {retry.wait:.0f} s after its deletion "
                                          "was accepted", outcomes[r.key].attempts)
        for o in outcomes.values():
            if o.resource.rank == rank and not o.ok:
                failed_scope.setdefault((o.resource.provider, o.resource.region, o.resource.cluster), o.resource.label())
        report(f"rank {rank} done")
    return [outcomes[r.key] for r in resources]


def _groups(resources: list[Resource]) -> dict[tuple, list[Resource]]:
    """Resources by (provider, region, kind): what one cloud call handles."""
    out: dict[tuple, list[Resource]] = {}
    for r in resources:
        out.setdefault((r.provider, r.region, r.kind), []).append(r)
    return out


def _run_groups(groups: dict[tuple, list[Resource]], clouds: Clouds) -> dict[tuple, tuple[str, str]]:
    """Each (provider, region, kind) group's deletions side by side: {Resource.key: (status, message)}."""
    def one(item):
        (provider, region, kind), rs = item
        try:
            answer = clouds[provider].delete(region, kind, rs)
        except GpufleetError as e:
            answer = {r.id: ("failed", e.message) for r in rs}
        except Exception as e:  # noqa: BLE001 - an SDK/network error for the group: retry it
            answer = {r.id: ("retry", f"{type(e).__name__}: {e}") for r in rs}
        return {r.key: answer[r.id] for r in rs if r.id in answer}

    out: dict[tuple, tuple[str, str]] = {}
    if not groups:
        return out
    with ThreadPoolExecutor(max_workers=min(8, len(groups))) as pool:
        for res in pool.map(one, groups.items()):
            out.update(res)
    return out


def _wait_gone(accepted: list[Resource], clouds: Clouds, retry: Retry, sleep) -> dict[tuple, str]:
    """Poll until the accepted deletions are done or ``retry.wait`` runs out: {Resource.key: state} still there."""
    groups = _groups(accepted)
    deadline = time.monotonic() + retry.wait
    left: dict[tuple, str] = {}
    while groups:
        left = {}
        for (provider, region, kind), rs in list(groups.items()):
            try:
                still = clouds[provider].still_there(region, kind, rs)
            except Exception as e:  # noqa: BLE001 - cannot tell yet: ask again
                still = {r.id: f"unknown ({type(e).__name__})" for r in rs}
            if still:
                groups[(provider, region, kind)] = [r for r in rs if r.id in still]
                left.update({r.key: still[r.id] for r in rs if r.id in still})
            else:
                del groups[(provider, region, kind)]
        if not groups or time.monotonic() >= deadline:
            break
        sleep(retry.poll)
    return left

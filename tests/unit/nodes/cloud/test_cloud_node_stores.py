"""The clusters' buckets from both sides: GCS and Blob through the SDKs' credentials (`up`) and the
node's identity (the agent), their refusals, and the deployer's data role."""

import json

import pytest

from gpufleet.clouds import bootstrap, node_agent
from gpufleet.nodes.cloud import channel as cloudnodes

from agent_kit import TREE, metadata_rules_elsewhere  # noqa: F401 (an autouse fixture)
from conftest import ROOT


def _tiny_tree(tmp_path):
    root = tmp_path / "tree"
    (root / "hello").mkdir(parents=True)
    (root / "hello" / "init.sls").write_text(TREE["hello/init.sls"])
    return cloudnodes.tree_archive(root)


def _round_trip(store, cfg, tmp_path, monkeypatch):
    archive, sha = _tiny_tree(tmp_path)
    out = tmp_path / "out"
    doc = {"tree": sha, "states": ["hello"], "without_gpu": {"apply": ["hello"], "rehearse": []},
           "pillar": {"out": str(out), "words": "hello from the bucket"}, "generation": "g1"}
    cloudnodes.publish(store, {"gpu": doc}, archive, sha)
    monkeypatch.setattr(node_agent, "STATE_DIR", str(tmp_path / "node-state"))
    monkeypatch.setenv("GPUFLEET_NODE_ID", "node/with/slashes/0")  # Azure's node ids are resource ids
    cfg["salt"]["venv"] = str(ROOT / ".salt-venv")
    assert node_agent.run(cfg) == 0
    assert (out / "hello.txt").read_text() == "hello from the bucket\n"
    (r,) = cloudnodes.wait(store, [cloudnodes.NodeTarget("gpu", 0, "node/with/slashes/0", None)], {"gpu": "g1"},
                           timeout_s=5, poll_s=0.1)
    assert r.state == "configured" and r.changed == 1
    assert store.delete_all() == 3 and store.list("")[0] == []  # `down` empties it: tree, document, status


def _forgets_a_gone_nodes_slot(store):
    """Review rev51b, finding 10: the slot of a node that is gone is deleted (state O(pools); a VM that comes later with
    the same id, as an Azure scale set made anew numbers its VMs from 0 again, finds no stale slot); deleting one that
    is not there is no error."""
    node = "node/with/slashes/0"
    cloudnodes.assign_slots(store, [cloudnodes.NodeTarget("gpu", 3, node, "10.0.0.9")])
    assert store.exists(cloudnodes.slot_key("gpu", node))
    cloudnodes.forget_slots(store, "gpu", [node, "never-had-one"])
    assert not store.exists(cloudnodes.slot_key("gpu", node))
    assert [k for k, _ in store.list("pools/gpu/slots/")[0]] == []


def _takes_no_slot_made_for_another_vm(store, agents_store):
    """Review rev51b, finding 10: an Azure scale set made anew numbers its VMs from 0 again, so a new VM has the id
    of one before it, and read that VM's slot (two VMs may register as one slot) until `up` wrote its own. A slot
    says the VM's unique id (Azure's vmId) where the registry knows it, and the agent (its own Blob client) takes
    none made for another VM."""
    node = "node/with/slashes/0"
    cloudnodes.assign_slots(store, [cloudnodes.NodeTarget("gpu", 3, node, "10.0.0.9", vm_uid="1111-old")])
    assert node_agent.slot_said(agents_store, "gpu", node, "2222-new") is None
    assert node_agent.own_slot(agents_store, "gpu", node) == "gpu-3"  # where its own vmId is not known: as before
    assert node_agent.slot_said(agents_store, "gpu", node, "1111-OLD")["slurm_name"] == "gpu-3"
    cloudnodes.forget_slots(store, "gpu", [node])


def test_gcs_bucket_through_the_json_api_and_the_metadata_token(gcs, tmp_path, monkeypatch):
    store = cloudnodes.cloud("gcp").objects({"cloud": "gcp", "name": "gpufleet-t-0123abcd"})
    cfg = bootstrap.config("gcp", cluster="t", pool="gpu", bucket="gpufleet-t-0123abcd", endpoint=gcs.url,
                           token_url=gcs.url + "/computeMetadata/v1/instance/service-accounts/default/token")
    _round_trip(store, cfg, tmp_path, monkeypatch)
    assert ("POST", "/upload/storage/v1/b/gpufleet-t-0123abcd/o") in gcs.requests  # the node's status upload


def test_gcs_bucket_in_the_real_fake_gcs_server(fake_gcs_server, gcs, tmp_path, monkeypatch):
    """The same round trip against fake-gcs-server, the emulator (issue 30, "Also"): `up`'s store
    and the node agent's own JSON API calls; the node's token still comes from the metadata
    stand-in (the emulator has no metadata server, and does not check tokens)."""
    import urllib.request

    bucket = "gpufleet-t-emulated"
    urllib.request.urlopen(urllib.request.Request(f"{fake_gcs_server}/storage/v1/b?project=p", method="POST",
                                                  data=json.dumps({"name": bucket}).encode(),
                                                  headers={"Content-Type": "application/json"}), timeout=60).read()
    monkeypatch.setenv("GPUFLEET_GCS_ENDPOINT", fake_gcs_server)
    store = cloudnodes.cloud("gcp").objects({"cloud": "gcp", "name": bucket})
    cfg = bootstrap.config("gcp", cluster="t", pool="gpu", bucket=bucket, endpoint=fake_gcs_server,
                           token_url=gcs.url + "/computeMetadata/v1/instance/service-accounts/default/token")
    _round_trip(store, cfg, tmp_path, monkeypatch)
    _forgets_a_gone_nodes_slot(store)


def test_blob_container_in_azurite(azurite, blob, tmp_path, monkeypatch):
    """The same round trip against Azurite, Microsoft's emulator (issue 30, "Also"): HTTPS and Entra ID
    bearer tokens as it checks them, for `up`'s store and the node agent's own REST calls; the
    node's token still comes from the managed identity stand-in."""
    import ssl
    import urllib.request

    from gpufleet.clouds.azure.objects import Store

    import fakes.objects
    from fakes.azure import storage_token

    token = storage_token()
    monkeypatch.setattr(fakes.objects, "TOKEN", token.token)  # what the node's managed identity hands out
    monkeypatch.setenv("SSL_CERT_FILE", azurite["ca"])  # the agent (urllib) trusts Azurite's certificate
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", azurite["ca"])  # and so does `up` (azure-core over requests)
    account, url = azurite["account"], azurite["url"]
    urllib.request.urlopen(urllib.request.Request(
        f"{url}/{account}/gpufleet?restype=container", method="PUT",
        headers={"Authorization": f"Bearer {token.token}", "x-ms-version": "2021-08-06"}),
        context=ssl.create_default_context(cafile=azurite["ca"]), timeout=60).read()
    monkeypatch.setenv("GPUFLEET_AZURE_BLOB_ENDPOINT", url + "/{account}")
    store = Store({"cloud": "azure", "name": account, "container": "gpufleet"}, credential=token)
    cfg = bootstrap.config("azure", cluster="t", pool="gpu", bucket="gpufleet", account=account,
                           identity="11111111-0000-0000-0000-000000000000", endpoint=f"{url}/{account}",
                           token_url=blob.url + "/metadata/identity/oauth2/token")
    _round_trip(store, cfg, tmp_path, monkeypatch)
    _forgets_a_gone_nodes_slot(store)
    _takes_no_slot_made_for_another_vm(store, node_agent.STORES["azure"](cfg))


def test_blob_container_through_entra_tokens_and_the_managed_identity(blob, tmp_path, monkeypatch):
    ref = {"cloud": "azure", "name": "gf0123456789abcdef012345", "container": "gpufleet"}
    store = cloudnodes.cloud("azure").objects(ref)
    cfg = bootstrap.config("azure", cluster="t", pool="gpu", bucket="gpufleet", account=ref["name"],
                           identity="11111111-0000-0000-0000-000000000000", endpoint=f"{blob.url}/{ref['name']}",
                           token_url=blob.url + "/metadata/identity/oauth2/token")
    _round_trip(store, cfg, tmp_path, monkeypatch)
    puts = [p for m, p in blob.requests if m == "PUT" and "/status/gpu/" in p]
    assert puts == [f"/{ref['name']}/gpufleet/status/gpu/node_with_slashes_0.json"]


def test_an_object_store_that_answers_no_names_the_http_status_as_what_it_was(gcs, blob):
    """401 is refused credentials, 403 a missing permission, anything else an error, for both stores."""
    from gpufleet.errors import CloudUnreadable

    assert [CloudUnreadable.http("gcp", s, "x", "w").kind for s in (401, 403, 500)] == ["refused", "permission",
                                                                                         "error"]
    gcs_store = cloudnodes.cloud("gcp").objects({"cloud": "gcp", "name": "gpufleet-no-such-bucket"})
    blob_store = cloudnodes.cloud("azure").objects({"cloud": "azure", "name": "gfnosuchaccount",
                                                    "container": "gpufleet"})
    for store, where in ((gcs_store, "gs://gpufleet-no-such-bucket/"), (blob_store, "gfnosuchaccount")):
        with pytest.raises(CloudUnreadable) as ei:
            store.get("pools/gpu/never-written.json")
        assert ei.value.kind == "error" and "HTTP 404" in ei.value.reason and where in ei.value.where, ei.value


def test_up_publishes_once_the_deployers_blob_role_takes_effect(blob, monkeypatch):
    """The deployer's data role comes with the same `up`: until it takes effect Blob storage answers
    403 AuthorizationPermissionMismatch, and the first publish waits for it (issue 30, item 2)."""
    from gpufleet.clouds.azure import objects
    from gpufleet.errors import CloudUnreadable

    monkeypatch.setattr(objects, "PROPAGATION_POLL_S", 0)
    ref = {"cloud": "azure", "name": "gf0123456789abcdef012345", "container": "gpufleet"}
    denied = (403, b"<Error><Code>AuthorizationPermissionMismatch</Code></Error>",
              {"Content-Type": "application/xml", "x-ms-error-code": "AuthorizationPermissionMismatch"})
    blob.faults[("HEAD", "/tree/")] = [denied] * 3
    blob.faults[("PUT", "/pools/")] = [denied] * 2
    archive, sha = b"tree", "0" * 64
    cloudnodes.publish(cloudnodes.cloud("azure").objects(ref), {"gpu": {"generation": "g1"}}, archive, sha)
    assert (f"{ref['name']}/gpufleet", "pools/gpu/current.json") in blob.objects
    # a role that never comes: the error says which role and how long it was waited for
    monkeypatch.setattr(objects, "PROPAGATION_S", 0)
    blob.faults[("PUT", "/pools/")] = [denied]
    with pytest.raises(CloudUnreadable) as e:
        cloudnodes.publish(cloudnodes.cloud("azure").objects(ref), {"gpu": {"generation": "g2"}}, archive, sha)
    assert "Storage Blob Data Contributor" in e.value.hint


def test_the_deployers_principal_type_is_what_it_logged_in_as(monkeypatch, tmp_path):
    """azure-native's RoleAssignment says User unless told, and ARM refuses a service principal
    named a User (UnmatchedPrincipalType): CI deploys as a service principal."""
    from gpufleet.clouds.azure import credentials

    monkeypatch.setenv("AZURE_CONFIG_DIR", str(tmp_path))
    assert credentials.principal_type() == "User"
    (tmp_path / "azureProfile.json").write_text(json.dumps({"subscriptions": [
        {"id": "s", "isDefault": True, "user": {"name": "http://ci", "type": "servicePrincipal"}}]}))
    assert credentials.principal_type() == "ServicePrincipal"
    (tmp_path / "azureProfile.json").write_text(json.dumps({"subscriptions": [
        {"id": "s", "isDefault": True, "user": {"name": "me@example.com", "type": "user"}}]}))
    assert credentials.principal_type() == "User"
    for k, v in {"ARM_CLIENT_ID": "c", "ARM_TENANT_ID": "t", "ARM_USE_OIDC": "true"}.items():
        monkeypatch.setenv(k, v)
    assert credentials.principal_type() == "ServicePrincipal"

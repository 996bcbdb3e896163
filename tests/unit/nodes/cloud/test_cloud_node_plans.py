"""What the plans give the cloud nodes, under Pulumi's mocks: identities held to their pools' paths,
the agent and its bucket in every node's boot script, and `gpufleet configure` of such a cluster."""

import base64
import json
import lzma

import pytest

from gpufleet.clouds import bootstrap, node_agent
from gpufleet.nodes.cloud import channel as cloudnodes

from conftest import ROOT


@pytest.fixture(scope="module")
def plans():
    pytest.importorskip("pulumi")
    from gpufleet import catalog, stacks
    from gpufleet.engine import plan as planner

    cat = catalog.load(use_config=False)
    return {n: planner.plan(stacks.load(ROOT / "stacks" / "examples" / f"{n}.yaml", cat), cat, workers=1)
            for n in ("aws-training", "gcp-a3", "azure-nd")}


def _of(plan, typ):
    return [r for r in plan.cloud_resources if r.type == typ]


def test_aws_nodes_read_their_pool_and_write_only_their_own_status(plans):
    p = plans["aws-training"]
    (bucket,) = _of(p, "aws:s3/bucket:Bucket")
    (block,) = _of(p, "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")
    assert all(block.inputs[k] for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls",
                                         "restrictPublicBuckets"))
    assert _of(p, "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration")
    assert bucket.inputs["tags"]["gpufleet:cluster"] == "aws-training"
    arn = "arn:aws:s3:::" + p.outputs["pools"]["trainers"]["bucket"]["name"]
    (policy,) = [r for r in _of(p, "aws:iam/rolePolicy:RolePolicy") if r.name.endswith("-bucket")]
    statements = json.loads(policy.inputs["policy"])["Statement"]
    assert {(s["Effect"], s["Action"]) for s in statements} == {("Allow", "s3:GetObject"), ("Allow", "s3:PutObject")}
    read = next(s for s in statements if s["Action"] == "s3:GetObject")["Resource"]
    write = next(s for s in statements if s["Action"] == "s3:PutObject")["Resource"]
    assert read == [f"{arn}/tree/*", f"{arn}/pools/trainers/*"]
    assert write == f"{arn}/status/trainers/${{aws:userid}}.json"  # role id:instance id, one key per node


def test_gcp_service_accounts_are_held_to_their_pools_prefixes(plans):
    p = plans["gcp-a3"]
    (bucket,) = _of(p, "gcp:storage/bucket:Bucket")
    assert bucket.inputs["uniformBucketLevelAccess"] is True and bucket.inputs["publicAccessPrevention"] == "enforced"
    name = bucket.inputs["name"]
    members = _of(p, "gcp:storage/bucketIAMMember:BucketIAMMember")
    assert len(members) == 4  # two roles for each of the two pools, nothing bucket-wide
    for m in members:
        pool = m.parent.rsplit("gcp-a3-", 1)[1]
        assert m.inputs["bucket"] == name and m.inputs["member"].startswith(f"serviceAccount:gf-gcp-a3-{pool}@")
        expr = m.inputs["condition"]["expression"]
        objects = f"projects/_/buckets/{name}/objects/"
        if m.inputs["role"] == "roles/storage.objectViewer":
            assert expr == f'resource.name.startsWith("{objects}tree/") || ' \
                           f'resource.name.startsWith("{objects}pools/{pool}/")'
        else:
            assert m.inputs["role"] == "roles/storage.objectUser" and \
                expr == f'resource.name.startsWith("{objects}status/{pool}/")'
    vms = _of(p, "gcp:gpufleet:BulkInstances")
    assert len(vms) == 2
    for pool in vms:
        props = pool.inputs["properties"]
        assert props["serviceAccounts"][0]["email"].startswith("gf-gcp-a3-")
        assert "node_agent.py" in _startup_script(props)


def test_azure_identities_are_held_to_their_pools_paths(plans):
    p = plans["azure-nd"]
    (acct,) = _of(p, "azure-native:storage:StorageAccount")
    assert acct.inputs["allowBlobPublicAccess"] is False and acct.inputs["allowSharedKeyAccess"] is False
    (ident,) = _of(p, "azure-native:managedidentity:UserAssignedIdentity")
    (role,) = _of(p, "azure-native:authorization:RoleDefinition")
    from gpufleet.clouds.azure.mocks import DEPLOYER

    assignments = _of(p, "azure-native:authorization:RoleAssignment")
    (node,) = [r.inputs for r in assignments if r.inputs["principalId"] != DEPLOYER["objectId"]]
    (deployer,) = [r.inputs for r in assignments if r.inputs["principalId"] == DEPLOYER["objectId"]]
    # whoever runs `up` publishes with Entra ID (no shared keys): Owner/Contributor carry no data
    # actions, so the deployer gets the container's data role (issue 30, item 2)
    assert deployer["roleDefinitionId"].endswith("/roleDefinitions/ba92f5b4-2d11-453d-a403-e96b0029c9fe")
    assert deployer["scope"] == node["scope"] and deployer["principalType"] == "User"  # no ARM_* here
    # a custom role of blob data actions only: the built-in Storage Blob Data Contributor also carries
    # control-plane containers/delete and /write, which no ABAC condition narrows (issue 30, item 7)
    (perm,) = role.inputs["permissions"]
    assert perm["actions"] == [] and sorted(perm["dataActions"]) == sorted(
        f"Microsoft.Storage/storageAccounts/blobServices/containers/blobs/{a}" for a in ("read", "write", "add/action"))
    assert role.inputs["assignableScopes"] == [role.inputs["scope"]] and "/resourceGroups/" in role.inputs["scope"]
    assert node["roleDefinitionId"].endswith("/roleDefinitions/" + role.inputs["roleDefinitionId"])
    assert node["conditionVersion"] == "2.0" and node["principalType"] == "ServicePrincipal"
    read, write = node["condition"].split(" AND ((!(ActionMatches")
    assert "StringStartsWith 'tree/'" in read and "StringStartsWith 'pools/nd-h100/'" in read
    assert "StringStartsWith 'status/nd-h100/'" in write and "tree/" not in write
    vmss = _of(p, "azure-native:compute:VirtualMachineScaleSet")[0].inputs
    assert vmss["identity"]["type"] == "UserAssigned"
    script = base64.b64decode(vmss["virtualMachineProfile"]["osProfile"]["customData"]).decode()
    assert '"identity": "' in script and '"account": "' + acct.inputs["accountName"] in script
    assert ident.inputs["resourceName"] == "azure-nd-nd-h100"


def _startup_script(properties: dict) -> str:
    return {i["key"]: i["value"] for i in properties["metadata"]["items"]}["startup-script"]


def _bootstraps(plan):
    """Every bootstrap a plan gives its nodes: AWS launch templates, GCP instances, Azure scale sets."""
    for r in plan.cloud_resources:
        if r.type == "aws:ec2/launchTemplate:LaunchTemplate":
            yield base64.b64decode(r.inputs["userData"]).decode()
        elif r.type == "gcp:gpufleet:BulkInstances":
            yield _startup_script(r.inputs["properties"])
        elif r.type == "azure-native:compute:VirtualMachineScaleSet":
            yield base64.b64decode(r.inputs["virtualMachineProfile"]["osProfile"]["customData"]).decode()


@pytest.mark.parametrize("name", ["aws-training", "gcp-a3", "azure-nd"])
def test_every_node_of_a_stack_gets_the_agent_its_bucket_and_no_secret(plans, name):
    p = plans[name]
    scripts = list(_bootstraps(p))
    assert scripts and len(scripts) == sum(1 for r in p.cloud_resources if r.type in (
        "aws:ec2/launchTemplate:LaunchTemplate", "gcp:gpufleet:BulkInstances", "azure-native:compute:VirtualMachineScaleSet"))
    buckets = {b["bucket"]["name"] for b in p.outputs["pools"].values()}
    for script in scripts:
        assert len(script.encode()) <= bootstrap.USER_DATA_LIMIT
        payload = script.split("<<'GPUFLEET_AGENT'\n", 1)[1].split("\nGPUFLEET_AGENT", 1)[0]
        # the agent shipped is this checkout's, byte for byte (its hash, not just its name)
        assert node_agent.hashlib.sha256(lzma.decompress(base64.b85decode(payload))).hexdigest() == \
            node_agent.hashlib.sha256(bootstrap.agent_source()).hexdigest()
        cfg = json.loads(script.split("<<'GPUFLEET_CONFIG'\n", 1)[1].split("\nGPUFLEET_CONFIG", 1)[0])
        assert cfg["cluster"] == name and (cfg["bucket"] in buckets or cfg.get("account") in buckets)
        assert not [k for k in bootstrap._walk(cfg) if bootstrap._SECRET_KEY.search(k)]
        for word in ("PRIVATE KEY", "AccountKey=", "sig=", "aws_secret", "client_secret"):
            assert word not in script


def test_cli_configure_publishes_waits_and_exits_3_naming_who_failed(aws, plans, monkeypatch, tmp_path):
    """`gpufleet configure` on a cluster that is up: the pools' configuration goes to the bucket and
    the statuses come back per node (one configured, one failed here, as nodes would write them)."""
    import boto3

    from gpufleet import catalog, stacks
    from gpufleet.engine import automation
    from gpufleet.nodes.cloud import tree_extras as cloud_config
    from gpufleet.state.registry import Registry, nodes_from_outputs

    from conftest import cli

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("GPUFLEET_REGISTRY", raising=False)
    path = ROOT / "stacks" / "examples" / "aws-training.yaml"
    outputs = plans["aws-training"].outputs
    ref = outputs["pools"]["trainers"]["bucket"]
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=ref["name"])
    nodes = nodes_from_outputs(outputs)
    Registry().record(name="aws-training", stack="aws-training", stack_file=str(path), owner="o",
                      expires_at="2099-01-01T00:00:00Z", backend=automation.backend_url(), nodes=nodes, state="up")
    monkeypatch.setattr(automation, "outputs", lambda *a, **kw: outputs)  # the Pulumi CLI is not installed here
    cat = catalog.load(use_config=False)
    stack = stacks.load(path, cat)
    cfg = cloud_config(stack, cat)  # what `configure` adds: the verify bundle and each pool's expectations
    _, tree = cloudnodes.tree_archive(extra=cfg["extra"])
    assert nodes[0].usd_per_hour  # the plan's price, which the document gives the node's metrics
    gen = cloudnodes.pool_document(stack, stack.pools[0], cluster="aws-training", cat=cat, tree=tree,
                                   verify=cfg["verify"]["trainers"], usd_per_node_hour=nodes[0].usd_per_hour)["generation"]
    store = cloudnodes.cloud("aws").objects(ref)
    for n, ok in zip(nodes, (True, False)):
        store.put(f"status/trainers/AROA:{n.node_id}.json", json.dumps({
            "node_id": n.node_id, "pool": "trainers", "ok": ok, "generation": gen, "changed": 3,
            "failed": [] if ok else [{"state": "nvidia_driver-package-driver-pkg-installed", "comment": "no space"}],
            "log": "/var/log/gpufleet/node.log"}).encode())
    r = cli("--json", "configure", str(path), "--wait-timeout", "3")
    assert r.exit_code == 3, r.output
    doc = json.loads(r.stdout)
    states = {h["host"]: (h["state"], h["changed"]) for h in doc["hosts"]}
    assert states == {"trainers-0": ("configured", 3), "trainers-1": ("failed", 3)}
    assert "1 of 2 node(s) not configured" in doc["message"] and "no space" in doc["hosts"][1]["error"]
    assert json.loads(store.get("pools/trainers/current.json"))["generation"] == gen
    assert {k[1]: v["state"] for k, v in Registry().hosts("aws-training").items()} == {0: "configured", 1: "failed"}

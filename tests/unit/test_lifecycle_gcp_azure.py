"""status, reap and check on GCP and Azure: the real SDKs (google-cloud-compute,
azure-mgmt-resource/-compute) over HTTP(S) to fakes replaying the documented REST formats
(fakes/gcp.py, fakes/azure.py)."""

import datetime as dt
import json

import pytest

from gpufleet.clouds.gcp import tags as gcp_tags
from gpufleet.clouds.gcp.tags import describe
from gpufleet.clouds.resources import Resource, price
from gpufleet.clouds.tags import Cluster
from gpufleet.state.registry import Registry

from conftest import ROOT, cli

PAST = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
FUTURE = dt.datetime(2099, 1, 1, tzinfo=dt.timezone.utc)


@pytest.fixture(autouse=True)
def _env(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("PULUMI_BACKEND_URL", "file://" + str(tmp_path / "state"))
    monkeypatch.delenv("GPUFLEET_REGISTRY", raising=False)
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def record(name):
    Registry().record(name=name, stack=name, stack_file="x.yaml", owner="ops@example.com",
                      expires_at="2099-01-01T00:00:00Z", backend=None, nodes=[])


# --- GCP --------------------------------------------------------------------------------------

def gcp_leak(fake, name, expires=FUTURE, region="us-central1"):
    """An interrupted `up` of a GCP pool: labelled VM, disk and address; described network parts."""
    cl = Cluster(name, "s", "ops@example.com", expires)
    labels, desc = gcp_tags.labels(cl.tags("h100")), describe(cl.tags())
    net = fake.add("networks", "global", f"{name}-vpc", description=desc, autoCreateSubnetworks=False)
    fake.add("firewalls", "global", f"{name}-internal", description=desc + " all traffic inside the cluster",
             network=net["selfLink"])
    fake.add("subnetworks", f"regions/{region}", f"{name}-h100", description=desc, network=net["selfLink"],
             ipCidrRange="10.0.0.0/24")
    fake.add("routers", f"regions/{region}", f"{name}-router", description=desc, network=net["selfLink"])
    fake.add("resourcePolicies", f"regions/{region}", f"{name}-compact", description=describe(labels),
             groupPlacementPolicy={"collocation": "COLLOCATED"}, status="READY")
    fake.add("instances", f"zones/{region}-a", f"{name}-h100-0", status="RUNNING", labels=labels,
             machineType=f"https://www.googleapis.com/compute/v1/projects/p/zones/{region}-a/machineTypes/a3-highgpu-8g",
             scheduling={"provisioningModel": "STANDARD"})
    fake.add("instances", f"zones/{region}-a", f"{name}-t4-0", status="RUNNING", labels=labels,
             machineType=f"https://www.googleapis.com/compute/v1/projects/p/zones/{region}-a/machineTypes/n1-standard-8",
             guestAccelerators=[{"acceleratorType": "https://www.googleapis.com/compute/v1/projects/p/zones/"
                                                    f"{region}-a/acceleratorTypes/nvidia-tesla-t4", "acceleratorCount": 1}],
             scheduling={"provisioningModel": "SPOT"})
    fake.add("disks", f"zones/{region}-a", f"{name}-scratch", status="READY", labels=labels, sizeGb="1000",
             type=f"https://www.googleapis.com/compute/v1/projects/p/zones/{region}-a/diskTypes/pd-ssd")
    fake.add("addresses", f"regions/{region}", f"{name}-nat-ip", status="RESERVED", labels=labels)
    fake.add("addresses", "global", f"{name}-nat-ip", status="RESERVED", labels=labels)  # same name, other scope
    fake.add_file_system("file", f"{region}-a", f"{name}-home", labels=labels, tier="BASIC_SSD",
                         fileShares=[{"name": "home", "capacityGb": "2560"}])
    fake.add_file_system("lustre", f"{region}-a", f"{name}-lustre", labels=labels, state="ACTIVE",
                         capacityGib="18000")
    return {"file": [f"{name}-home"], "lustre": [f"{name}-lustre"], "global-addresses": [f"{name}-nat-ip"],
            "networks": [f"{name}-vpc"], "firewalls": [f"{name}-internal"], "subnetworks": [f"{name}-h100"],
            "routers": [f"{name}-router"], "resourcePolicies": [f"{name}-compact"],
            "instances": [f"{name}-h100-0", f"{name}-t4-0"], "disks": [f"{name}-scratch"], "addresses": [f"{name}-nat-ip"]}


def test_gcp_reap_removes_a_leak_in_dependency_order_and_nothing_else(gcp):
    leaked = gcp_leak(gcp, "crashed")
    kept = gcp_leak(gcp, "alive")
    record("alive")
    gcp.add("instances", "zones/us-central1-b", "someone-elses-vm", status="RUNNING", labels={"team": "x"},
            machineType="https://x/machineTypes/n1-standard-8", scheduling={})
    gcp.add("networks", "global", "default", description="Default network for the project")
    # the first deletion of the disk is throttled, as Compute Engine answers under load
    gcp.faults[("DELETE", r"/disks/crashed-scratch$")] = [
        (429, {"error": {"code": 429, "message": "Rate Limit Exceeded", "errors": [
            {"reason": "rateLimitExceeded", "domain": "usageLimits", "message": "Rate Limit Exceeded"}]}}, {})]

    r = cli("--json", "reap", "--provider", "gcp", "--grace", "0")
    assert r.exit_code == 0, r.output
    dry = json.loads(r.stdout)
    assert {x["name"] for x in dry["reap"]} == {n for names in leaked.values() for n in names}
    h100 = next(x for x in dry["reap"] if x["id"] == "crashed-h100-0")
    assert h100["machine"] == "a3-highgpu-8g" and h100["usd_per_hour"] == pytest.approx(88.49)
    t4 = next(x for x in dry["reap"] if x["id"] == "crashed-t4-0")
    assert t4["machine"] == "n1-standard-8+1xT4" and t4["spot"] is True

    r = cli("--json", "reap", "--provider", "gcp", "--grace", "0", "--yes")
    assert r.exit_code == 0, r.output
    done = json.loads(r.stdout)
    assert not done["failed"] and len(done["deleted"]) == sum(len(v) for v in leaked.values())
    def there(coll, n):
        if coll == "global-addresses":
            return ("addresses", "global", n) in gcp.items
        return gcp.has_file_system(coll, n) if coll in ("file", "lustre") else gcp.has(coll, n)

    for coll, names in leaked.items():
        assert not any(there(coll, n) for n in names), coll
    for coll, names in kept.items():
        assert all(there(coll, n) for n in names), coll
    assert gcp.has("instances", "someone-elses-vm") and gcp.has("networks", "default")
    deletes = [p for m, p in gcp.calls if m == "DELETE"]
    assert sum(p.endswith("/disks/crashed-scratch") for p in deletes) == 2  # retried after the 429
    # the network goes last: after the firewall, subnetwork and router that use it
    assert deletes.index(next(p for p in deletes if p.endswith("/networks/crashed-vpc"))) == len(deletes) - 1


def test_gcp_expiry_labels_are_read_back(gcp):
    gcp_leak(gcp, "lease-over", expires=PAST)
    record("lease-over")
    r = cli("--json", "reap", "--provider", "gcp")
    data = json.loads(r.stdout)
    assert {x["reason"] for x in data["reap"]} == {"expired"} and len(data["reap"]) == 12
    assert "2026-01-01T00:00:00Z" in data["reap"][0]["detail"]


def test_gcp_status_and_check(gcp, cat):
    gcp_leak(gcp, "stray")
    r = cli("--json", "status", "--provider", "gcp")
    assert r.exit_code == 0, r.output
    (row,) = json.loads(r.stdout)["clusters"]
    assert row["state"] == "orphan" and row["nodes_found"] == 2
    # a spot node at the catalog's spot snapshot (machine + GPU, as GCP bills them), no note needed
    t4_spot = cat.offer("gcp", "us-central1", "n1-standard-8+1xT4", "spot").usd_per_hour
    t4 = next(x for x in row["resources"] if x["id"] == "stray-t4-0")
    assert not t4["price_note"]
    assert row["usd_per_hour"] == pytest.approx(88.49 + t4_spot + 1000 * 0.17 / 730, rel=1e-3)

    stack = str(ROOT / "stacks" / "examples" / "gcp-a3.yaml")
    gcp.region_quotas["us-central1"] = [{"metric": "NVIDIA_H100_GPUS", "limit": 8, "usage": 8},
                                        {"metric": "NVIDIA_T4_GPUS", "limit": 16, "usage": 1}]
    gcp.project_quotas.append({"metric": "GPUS_ALL_REGIONS", "limit": 64, "usage": 9})
    r = cli("--json", "check", stack)
    data = json.loads(r.stdout)
    assert r.exit_code == 1 and data["error"] == "QuotaError" and data["quota"] == "NVIDIA_H100_GPUS"
    assert (data["needed"], data["available"]) == (8, 0)
    assert data["identity"]["gcp"]["principal"] == "reaper@gpufleet-test.iam.gserviceaccount.com"
    gcp.region_quotas["us-central1"][0]["usage"] = 0
    r = cli("--json", "check", stack)
    assert r.exit_code == 0, r.output
    lines = {x["code"]: x for x in json.loads(r.stdout)["quotas"]}
    assert lines["NVIDIA_T4_GPUS"]["needed"] == 2 and lines["GPUS_ALL_REGIONS"]["needed"] == 10


def test_a_gcp_users_own_credentials_are_named_by_their_account(gcp, tmp_path, monkeypatch):
    """`gcloud auth application-default login` credentials carry no e-mail: the creator gpufleet
    records is the account Google's tokeninfo endpoint names for their token."""
    import google.oauth2.credentials

    adc = tmp_path / "adc.json"
    adc.write_text(json.dumps({"type": "authorized_user", "client_id": "764086051850-x.apps.googleusercontent.com",
                               "client_secret": "d-FL95Q19q7MQmFpd7hHD0Ty", "refresh_token": "1//0-not-a-token"}))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc))
    # google-auth refreshes a user's token at Google's endpoint whatever the file says: the fake's, here
    monkeypatch.setattr(google.oauth2.credentials, "_GOOGLE_OAUTH2_TOKEN_ENDPOINT", gcp.url + "/token")
    monkeypatch.setenv("GPUFLEET_GCP_OAUTH2_ENDPOINT", gcp.url)
    gcp.user_email = "dana@example.com"
    from gpufleet.clouds import inventory

    assert inventory.api("gcp").identity()["principal"] == "dana@example.com"
    monkeypatch.setenv("GPUFLEET_GCP_OAUTH2_ENDPOINT", gcp.url + "/nothing-here")  # tokeninfo cannot say
    assert inventory.api("gcp").identity()["principal"] == "user credentials (application default)"


def test_gcp_unknown_region_and_missing_credentials(gcp, monkeypatch, tmp_path):
    gcp_leak(gcp, "crashed", expires=PAST)
    r = cli("reap", "--provider", "gcp", "--region", "us-centrall", "--yes")
    assert r.exit_code == 2 and "did you mean 'us-central1'" in r.output
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS")
    monkeypatch.setenv("HOME", str(tmp_path))
    r = cli("reap", "--provider", "gcp", "--yes")
    assert r.exit_code == 2 and "gcp: no application default credentials found" in r.output and "gcloud auth" in r.output
    assert gcp.has("instances", "crashed-h100-0")


# --- Azure ------------------------------------------------------------------------------------

def azure_leak(fake, name, expires=FUTURE, location="eastus"):
    tags = Cluster(name, "s", "ops@example.com", expires).tags("nd-h100")
    rg = f"gpufleet-{name}-{location}"
    fake.group(rg, location, tags)
    vnet = fake.add(rg, "Microsoft.Network/virtualNetworks", f"{name}-vnet", location, tags)
    nsg = fake.add(rg, "Microsoft.Network/networkSecurityGroups", f"{name}-nsg", location, tags)
    pip = fake.add(rg, "Microsoft.Network/publicIPAddresses", f"{name}-nat-ip", location, tags)
    nat = fake.add(rg, "Microsoft.Network/natGateways", f"{name}-nat", location, tags, uses=[pip["id"]])
    vmss = fake.add(rg, "Microsoft.Compute/virtualMachineScaleSets", f"{name}-nd-h100", location, tags,
                    sku={"name": "Standard_ND96isr_H100_v5", "tier": "Standard", "capacity": 4},
                    uses=[vnet["id"], nsg["id"]])
    ppg = fake.add(rg, "Microsoft.Compute/proximityPlacementGroups", f"{name}-ppg", location, tags)
    nic = fake.add(rg, "Microsoft.Network/networkInterfaces", f"{name}-nic", location, tags, uses=[vnet["id"]])
    return rg, [vnet, nsg, pip, nat, vmss, ppg, nic]


def test_azure_reap_deletes_by_tag_and_keeps_a_group_with_untagged_resources(azure):
    rg, leaked = azure_leak(azure, "crashed")
    _, kept = azure_leak(azure, "alive")
    record("alive")
    stranger = azure.add(rg, "Microsoft.Storage/storageAccounts", "notgpufleet", "eastus", {"team": "data"})
    azure.page_size = 3  # the listing pages through nextLink
    r = cli("--json", "reap", "--provider", "azure", "--grace", "0")
    assert r.exit_code == 0, r.output
    dry = json.loads(r.stdout)
    assert {x["id"] for x in dry["reap"]} == {x["id"] for x in leaked} | {
        f"/subscriptions/{azure.subscription}/resourceGroups/{rg}"}
    vmss = next(x for x in dry["reap"] if x["kind"] == "scale-set")
    assert vmss["count"] == 4 and vmss["usd_per_hour"] == pytest.approx(4 * 98.32)

    r = cli("--json", "reap", "--provider", "azure", "--grace", "0", "--yes")
    data = json.loads(r.stdout)
    assert r.exit_code == 1  # the group could not go: it holds a resource gpufleet did not make
    (failed,) = data["failed"]
    assert failed["kind"] == "resource-group" and "still holds 1 resource(s) (e.g. notgpufleet)" in failed["message"]
    assert not any(azure.has(x["id"]) for x in leaked)
    assert azure.has(stranger["id"]) and all(azure.has(x["id"]) for x in kept)
    deletes = [p.lower() for m, p in azure.calls if m == "DELETE"]
    assert deletes.index(next(p for p in deletes if p.endswith("/virtualnetworks/crashed-vnet"))) > \
        deletes.index(next(p for p in deletes if p.endswith("/networkinterfaces/crashed-nic")))


def test_azure_throttling_is_retried(azure):
    _, leaked = azure_leak(azure, "old", expires=PAST)
    record("old")
    azure.faults[("DELETE", r"/virtualMachineScaleSets/old-nd-h100$")] = [
        (429, {"error": {"code": "TooManyRequests", "message": "The request is being throttled."}},
         {"Retry-After": "0"})] * 2
    r = cli("--json", "reap", "--provider", "azure", "--yes")
    assert r.exit_code == 0, r.output
    assert not any(azure.has(x["id"]) for x in leaked)
    assert sum(p.endswith("/old-nd-h100") for m, p in azure.calls if m == "DELETE") == 3


def test_azure_check_compares_family_vcpus(azure):
    stack = str(ROOT / "stacks" / "examples" / "azure-nd.yaml")
    azure.usages["eastus"] = [
        {"name": {"value": "cores", "localizedValue": "Total Regional vCPUs"}, "currentValue": 8, "limit": 1000,
         "unit": "Count"},
        {"name": {"value": "standardNDSH100v5Family", "localizedValue": "Standard NDSH100v5 Family vCPUs"},
         "currentValue": 96, "limit": 384, "unit": "Count"}]
    r = cli("--json", "check", stack)
    data = json.loads(r.stdout)
    assert r.exit_code == 1 and data["quota"] == "Standard NDSH100v5 Family vCPUs"
    assert (data["needed"], data["available"]) == (384, 288)
    assert data["identity"]["azure"]["principal"] == "app 11111111-2222-3333-4444-555555555555"
    r = cli("check", stack)
    assert r.exit_code == 1 and "Subscriptions > Usage + quotas" in r.output


def test_azure_down_sweeps_by_tag_after_pulumi(azure, cat, monkeypatch):
    """`down` of an Azure cluster: the fake Pulumi CLI destroys what its state knows; the
    scale set, NIC and VNet an interrupted earlier `up` left are found by tag and deleted
    (NIC before VNet), the empty resource group last, and only then the registry forgets it."""
    pytest.importorskip("pulumi")
    from gpufleet import stacks
    from gpufleet.engine import plan as planner
    from gpufleet.fleet import down as fleet_down
    from gpufleet.fleet import up as fleet_up

    from fakes.pulumi_cli import FakePulumiCLI

    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "test-passphrase")
    stack = stacks.load(ROOT / "stacks" / "examples" / "azure-nd.yaml", cat)
    fake = FakePulumiCLI(planner.plan(stack, cat, workers=1))
    azure.usages["eastus"] = [
        {"name": {"value": "cores", "localizedValue": "Total Regional vCPUs"}, "currentValue": 0, "limit": 1000},
        {"name": {"value": "standardNDSH100v5Family", "localizedValue": "Standard NDSH100v5 Family vCPUs"},
         "currentValue": 0, "limit": 384}]
    up = fleet_up.bring_up(stack, cat, fleet_up.UpOptions(configure=False, seams=fleet_up.Seams(pulumi_command=fake)),
                           confirm=lambda p: True)
    assert all(q.ok for q in up.quotas) and Registry().get("azure-nd").state == "up"
    rg, leaked = azure_leak(azure, "azure-nd")
    out = fleet_down.tear_down("azure-nd", confirm=lambda r: True, pulumi_command=fake)
    assert {o.resource.id for o in out.swept} == {x["id"] for x in leaked} | {
        f"/subscriptions/{azure.subscription}/resourceGroups/{rg}"}
    assert all(o.ok for o in out.swept) and not out.left and Registry().get("azure-nd") is None
    assert not any(azure.has(x["id"]) for x in leaked) and rg.lower() not in azure.groups


def test_gcp_reap_empties_a_leaked_stack_bucket_before_deleting_it(gcp, gcs):
    for name, cluster in (("gpufleet-crashed-0a1b2c3d", "crashed"), ("gpufleet-alive-4e5f6a7b", "alive")):
        gcs.bucket(name, gcp_tags.labels(Cluster(cluster, "s", "ops@example.com", FUTURE).tags()))
        for key in ("tree/abc.tar.gz", "pools/gpu/current.json", "status/gpu/1234.json"):
            gcs.objects[(name, key)] = b"x"
    gcs.bucket("someone-elses", {"team": "x"})
    record("alive")
    r = cli("--json", "reap", "--provider", "gcp", "--grace", "0", "--yes")
    assert r.exit_code == 0, r.output
    done = json.loads(r.stdout)
    assert [(x["kind"], x["id"]) for x in done["deleted"]] == [("bucket", "gpufleet-crashed-0a1b2c3d")]
    assert set(gcs.buckets) == {"gpufleet-alive-4e5f6a7b", "someone-elses"}
    assert not [k for b, k in gcs.objects if b == "gpufleet-crashed-0a1b2c3d"]  # emptied first


def test_a_spot_node_without_a_spot_price_is_priced_on_demand_and_said_so(cat):
    """No source gives ND H200 v5 a spot price anywhere (Azure's retail snapshot keeps none): its
    on-demand price is the upper bound."""
    node = Resource("azure", "westus3", "instance", "vm-1", {}, machine="Standard_ND96isr_H200_v5", spot=True)
    price([node], cat)
    assert node.usd_per_hour == cat.offer("azure", "westus3", "Standard_ND96isr_H200_v5", "ondemand").usd_per_hour
    assert node.price_note == "no spot price in the catalog: on-demand price (an upper bound)"


def test_a_rocky_pool_on_azure_carries_its_marketplace_plan_and_checks_its_terms(azure, write, cat):
    """RESF's Rocky Linux is a Marketplace offer sold with a plan: the scale set must name it and the
    subscription must have accepted its terms, else ARM refuses the pool (issue 30, item 5)."""
    from gpufleet import stacks
    from gpufleet.engine import plan as planner

    text = (ROOT / "stacks" / "examples" / "azure-nd.yaml").read_text()
    assert "image: ubuntu-hpc-22.04" in text
    stack = write("rocky.yaml", text.replace("image: ubuntu-hpc-22.04", "image: rocky-9").replace(
        "keys/example.pub", str(ROOT / "stacks" / "examples" / "keys" / "example.pub")))
    p = planner.plan(stacks.load(stack, cat), cat, workers=1)
    (vmss,) = [r for r in p.cloud_resources if r.type == "azure-native:compute:VirtualMachineScaleSet"]
    assert vmss.inputs["plan"] == {"name": "9-base", "publisher": "resf", "product": "rockylinux-x86_64"}
    ubuntu = planner.plan(stacks.load(str(ROOT / "stacks" / "examples" / "azure-nd.yaml"), cat), cat, workers=1)
    assert all("plan" not in r.inputs for r in ubuntu.cloud_resources
               if r.type == "azure-native:compute:VirtualMachineScaleSet")
    azure.usages["eastus"] = [
        {"name": {"value": "cores", "localizedValue": "Total Regional vCPUs"}, "currentValue": 0, "limit": 1000},
        {"name": {"value": "standardNDSH100v5Family", "localizedValue": "NDSH100v5 vCPUs"}, "currentValue": 0,
         "limit": 1000}]
    r = cli("check", stack)
    assert r.exit_code == 1 and "Marketplace terms of resf:rockylinux-x86_64:9-base are not accepted" in r.output, r.output
    assert "az vm image terms accept --publisher resf --offer rockylinux-x86_64 --plan 9-base" in r.output
    azure.accepted.add("resf:rockylinux-x86_64:9-base")
    r = cli("check", stack)
    assert r.exit_code == 0, r.output

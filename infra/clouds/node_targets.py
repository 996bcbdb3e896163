"""The monitor's scrape targets: the cluster's running nodes, listed by root on the monitor's node (Python 3.9+, stdlib
only, beside the node agent, which runs it each minute there; it ships in the state tree).

Why not Prometheus's own ec2/gce/azure discovery: Prometheus runs as its own user, and the node lets only root reach
the cloud's metadata service, where the node's credentials are (node_agent.METADATA). That guard stays: the monitor's
credentials read its pool's configuration (the munge key among it), so a Prometheus allowed to fetch them would hand
any flaw in it, or in a file it reads, the cluster. Root lists the cluster's nodes instead, with the monitor's own
identity and a few named read actions (each cloud's ``monitoring.DISCOVERY_*``), and writes them where Prometheus's
``file_sd_configs`` read them (prometheus.io/docs/prometheus/2.42/configuration/configuration/#file_sd_config, read
2026-11-27: a JSON list of ``{"targets": ["host:port"], "labels": {...}}``, re-read when the file changes). A node heal
replaced or `scale` added is there within a minute, without an edit.

What a cloud answers is checked before it is written (an address neither private nor in the cluster's network, a name
or a pool outside its format is left out, and said: the agent logs what this prints); each file is replaced whole (a
temporary file renamed over it). A listing or a write that fails leaves the last file as it was, and the run exits 1:
an empty file would drop every target, and with them every "node down" alert.

``python3 node_targets.py`` reads ``{"cfg": <the node's config>, "discovery": <its pool document's discovery>}`` on
stdin; ``discovery``: ``{"cluster", "pools": [names], "ports": [ports], "networks": [cidrs], "port_pools": {port:
[names]} (optional), <cloud>: {...}}`` (gpufleet.monitoring.scrape.discovery).
"""

import ipaddress
import json
import os
import re
import sys
import urllib.parse
import xml.etree.ElementTree as ET

if __package__:  # in gpufleet's package (its tests)
    from . import node_agent as agent
else:  # on the node: beside the agent in /opt/gpufleet
    import node_agent as agent

DIR = "/etc/prometheus/gpufleet-targets"  # <port>.json, one per exporter's port (gpufleet.monitoring.scrape)
# the blocks a cluster's private network is made of (RFC 1918, the shared space of RFC 6598 that VPCs may use, RFC 4193):
# Python's is_private takes documentation and link-local blocks too, the metadata service's among them
PRIVATE = tuple(ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10",
                                                  "fc00::/7"))
# a node's name as the clouds make them: an EC2 instance id, a Compute Engine instance name, a scale set VM's name
NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
EC2_VERSION = "2016-11-15"  # the EC2 Query API's (docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeInstances)
AZURE_NIC_VERSION = "2018-10-01"  # "Network Interfaces - List Virtual Machine Scale Set Network Interfaces"
ARM = "https://management.azure.com"


def file_sd(port):
    """A scrape config's target part for the nodes on ``port`` (gpufleet side: each cloud's scrape_discovery)."""
    return {"file_sd_configs": [{"files": [f"{DIR}/{int(port)}.json"]}]}


def _local(tag):
    return tag.rsplit("}", 1)[-1]


def _child(elem, name):
    return next((c for c in elem if _local(c.tag) == name), None)


def aws_nodes(cfg, d):
    """(pool, node, address) of every running instance of the cluster's pools, in each region: DescribeInstances
    filtered by the cluster's tags, page by page, signed with the instance role's credentials."""
    store = agent.S3(cfg)  # its credentials: the role's, from IMDSv2 (root only), or the environment's
    out = []
    for region in d["aws"]["regions"]:
        # EC2's own endpoint, never the store's (cfg "endpoint" is S3's): bootstrap.config's ec2_endpoint
        endpoint = (cfg.get("ec2_endpoint") or f"https://ec2.{region}.amazonaws.com").rstrip("/")
        token = None
        while True:
            query = [("Action", "DescribeInstances"), ("Version", EC2_VERSION), ("MaxResults", "1000"),
                     ("Filter.1.Name", "tag:gpufleet:cluster"), ("Filter.1.Value.1", d["cluster"]),
                     ("Filter.2.Name", "instance-state-name"), ("Filter.2.Value.1", "running"),
                     ("Filter.3.Name", "tag:gpufleet:pool")]
            query += [(f"Filter.3.Value.{i}", p) for i, p in enumerate(d["pools"], 1)]
            query += [("NextToken", token)] if token else []
            url = endpoint + "/?" + urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
            status, _, data = agent.http("GET", url, agent.sigv4_headers("GET", url, region, "ec2", store.creds()))
            agent.check(status, f"ec2:DescribeInstances in {region}", data)
            root = ET.fromstring(data)
            for item in (i for s in root.iter() if _local(s.tag) == "instancesSet" for i in s):
                tags = {}
                for t in _child(item, "tagSet") or ():
                    tags[getattr(_child(t, "key"), "text", None)] = getattr(_child(t, "value"), "text", None)
                out.append((tags.get("gpufleet:pool"), getattr(_child(item, "instanceId"), "text", None),
                            getattr(_child(item, "privateIpAddress"), "text", None)))
            token = getattr(_child(root, "nextToken"), "text", None)
            if not token:
                break
    return out


def gcp_nodes(cfg, d):
    """Every running instance labelled with the cluster, in every zone (instances.aggregatedList, page by page), with
    the token of the VM's service account from the metadata server."""
    g = d["gcp"]
    base = (cfg.get("compute_endpoint") or "https://compute.googleapis.com").rstrip("/")  # the node's config: tests
    headers = agent.GCS(cfg).headers()
    out, page = [], None
    while True:
        query = {"filter": f'labels.gpufleet-cluster = "{g["cluster_label"]}"', "maxResults": "500"}
        query.update({"pageToken": page} if page else {})
        url = f"{base}/compute/v1/projects/{urllib.parse.quote(g['project'])}/aggregated/instances?" + \
            urllib.parse.urlencode(query)
        status, _, data = agent.http("GET", url, headers)
        agent.check(status, "compute instances.aggregatedList", data)
        doc = json.loads(data)
        for scope in (doc.get("items") or {}).values():
            for vm in scope.get("instances") or ():
                if vm.get("status") != "RUNNING":
                    continue
                nics = vm.get("networkInterfaces") or [{}]
                out.append((g["pools"].get((vm.get("labels") or {}).get("gpufleet-pool")), vm.get("name"),
                            nics[0].get("networkIP")))
        page = doc.get("nextPageToken")
        if not page:
            return out


def azure_nodes(cfg, d):
    """Every VM of the pools' scale sets with its primary private address: each scale set's network interfaces
    (one call a scale set, page by page), with the token of the monitor's managed identity."""
    a = d["azure"]
    base = (cfg.get("arm_endpoint") or ARM).rstrip("/")  # the node's config: tests
    query = {"api-version": "2018-02-01", "resource": ARM + "/"}
    query.update({"client_id": cfg["identity"]} if cfg.get("identity") else {})
    status, _, body = agent.http("GET", (cfg.get("token_url") or agent.AZURE_IMDS + "/identity/oauth2/token") + "?" +
                                 urllib.parse.urlencode(query), {"Metadata": "true"}, timeout=5)
    agent.check(status, "token of the managed identity", body)
    headers = {"Authorization": "Bearer " + json.loads(body)["access_token"]}
    out = []
    for s in a["scale_sets"]:
        url = (f"{base}/subscriptions/{a['subscription']}/resourceGroups/{s['group']}/providers/Microsoft.Compute/"
               f"virtualMachineScaleSets/{s['name']}/networkInterfaces?api-version={AZURE_NIC_VERSION}")
        while url:
            status, _, data = agent.http("GET", url, headers)
            agent.check(status, f"network interfaces of scale set {s['name']}", data)
            doc = json.loads(data)
            for nic in doc.get("value") or ():
                p = nic.get("properties") or {}
                vm = ((p.get("virtualMachine") or {}).get("id") or "").rsplit("/", 1)[-1]
                ips = [c.get("properties") or {} for c in p.get("ipConfigurations") or ()]
                ip = next((c.get("privateIPAddress") for c in ips if c.get("primary")), None)
                out.append((s["pool"], f"{s['name']}_{vm}" if vm else None, ip))
            url = doc.get("nextLink")
    return out


LISTERS = {"aws": aws_nodes, "gcp": gcp_nodes, "azure": azure_nodes}


def checked(found, pools, networks=()):
    """(targets, what was left out and why): a pool of the discovery, a node name in its format, a private IP or one
    inside the cluster's own ``networks`` (network.cidr may be any block the spec takes: 198.18.0.0/15 ...)."""
    blocks = PRIVATE + tuple(ipaddress.ip_network(n) for n in networks)
    good, bad = set(), []
    for pool, node, address in found:
        try:
            ip = ipaddress.ip_address(address or "")
        except ValueError:
            ip = None
        if pool not in pools or not isinstance(node, str) or not NODE.fullmatch(node) or ip is None or \
                not any(ip in net for net in blocks if net.version == ip.version):
            bad.append(f"{str(node)[:80]!r} of pool {str(pool)[:80]!r} at {str(address)[:80]!r}")
            continue
        good.add((pool, node, str(ip)))
    return sorted(good), bad


def write(targets, ports, out_dir=DIR, port_pools=None):
    """One file a port (an exporter's), each replaced whole; readable by Prometheus's user (no secret in it).
    ``port_pools``: {port: pools} for a port only some pools' nodes serve (the monitor's own runs no DCGM exporter)."""
    os.makedirs(out_dir, exist_ok=True)
    os.chmod(out_dir, 0o755)  # whatever the umask (the agent's is 0077): Prometheus's user reads it
    for port in ports:
        only = (port_pools or {}).get(str(port))
        doc = [{"targets": [f"[{a}]:{port}" if ":" in a else f"{a}:{port}"], "labels": {"pool": p, "node": n}}
               for p, n, a in targets if only is None or p in only]
        path = os.path.join(out_dir, f"{int(port)}.json")
        part = f"{path}.{os.getpid()}"
        try:
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "w") as f:
                os.fchmod(fd, 0o644)
                json.dump(doc, f, indent=1, sort_keys=True)
            os.replace(part, path)
        except BaseException:  # the last good file stays; no part file is left beside it, run after run
            if os.path.lexists(part):
                os.unlink(part)
            raise


def run(cfg, d, out_dir=DIR):
    """List, check and write; what was left out is printed (the agent logs it), and a listing or a write that failed
    leaves the last files and exits 1."""
    try:
        found = LISTERS[cfg["cloud"]](cfg, d)
    except (agent.AgentError, OSError, ValueError, KeyError, ET.ParseError) as e:
        print(f"the cluster's nodes were not listed ({e}): the scrape targets stay as they were", flush=True)
        return 1
    targets, bad = checked(found, set(d["pools"]), d.get("networks", ()))
    for b in bad:
        print(f"left out of the scrape targets: {b} (not a node of the cluster's pools with an address in its "
              "network)", flush=True)
    try:
        write(targets, d["ports"], out_dir, d.get("port_pools"))
    except OSError as e:
        print(f"the scrape targets were not written to {out_dir} ({e}): they stay as they were", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    given = json.load(sys.stdin)
    sys.exit(run(given["cfg"], given["discovery"]))

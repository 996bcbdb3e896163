"""The agent a cloud node runs to configure itself from its cluster's bucket (Python 3.9+, stdlib only).

gpufleet never imports this module to run it: ``bootstrap.render`` ships its source in the
node's user data, and the node runs it at boot and from a systemd timer every minute:

1. read ``pools/<pool>/current.json`` from the bucket: the formulas, the pillar and the hash
   of the Salt tree this pool should be at (its ``generation``); a node already at that
   generation, and ok, stops here;
2. fetch ``tree/<sha256>.tar.gz`` and refuse it unless its SHA-256 is the one named;
3. install Salt (pinned, in its own virtualenv) unless the image has it;
4. ``salt-call --local state.apply`` the formulas (``--out json --retcode-passthrough``); on a
   node without an NVIDIA GPU the GPU formulas are rehearsed with ``test=True``;
5. write ``status/<pool>/<writer>.json``: node id, pool, generation, tree hash, ok, failed states
   with their comments, changed count, duration, facts (GPU, driver, kernel) and the log path.

A node booted from a golden image (``IMAGE``, written by ``node_bake.py`` on the image builder)
whose state tree and baked formulas' pillar are the pool's applies only the pool's
``node_states`` (mounts, fabric addressing) and is ready in minutes; from a stale image it applies
everything, and its status says why the image is stale.

The bucket is S3 (SigV4-signed requests with the instance role's credentials), GCS (JSON API
with the metadata server's token) or Azure Blob (REST with the managed identity's token). On
AWS the status key is the caller's ``aws:userid`` (role id:instance id), the only key the
node's policy lets it write.
"""

import datetime as dt
import fcntl
import hashlib
import hmac
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET

CONFIG = "/etc/gpufleet/node.json"
STATE_DIR = "/var/lib/gpufleet"
VERIFY_BUNDLE = "_gpufleet/verify.pyz"  # in the state tree (nodes/cloud/channel.py puts it there)
AWS_IMDS = "http://169.254.169.254"
GCP_METADATA = "http://metadata.google.internal/computeMetadata/v1"
AZURE_IMDS = "http://169.254.169.254/metadata"
AZURE_STORAGE_VERSION = "2021-08-06"  # x-ms-version of the Blob REST API used here
# a status PUT that met a throttle (429), a server error (5xx) or no answer is tried again after
# these pauses (seconds); a node whose status cannot be written does not record the generation as
# applied, so the next timer run applies and reports again
RETRY_DELAYS = (1, 2, 4, 8, 16)
# a generation that fails is tried again by the next timer runs (first boot's apt locks and mirror
# hiccups pass) up to this many times, its status saying so (`up` keeps waiting); then the node backs
# off, doubling the pause from a minute up to an hour, rather than run Salt every minute
ATTEMPTS = 3
BACKOFF_S = (60, 3600)
# apt waits this long for the dpkg lock (cloud-init and unattended-upgrades hold it at first boot)
# instead of failing at once; DPkg::Lock::Timeout, apt >= 1.9.11 (apt.conf(5)), given to Salt's
# apt-get through APT_CONFIG, which apt reads besides its own files
DPKG_LOCK_WAIT_S = 600
# a kernel that booted with nouveau bound to the GPUs loads the NVIDIA driver only after a reboot
# (node_base blacklists nouveau and rebuilds the initramfs); the agent reboots once per generation
NOUVEAU = "/sys/module/nouveau"
REBOOT = ("systemctl", "reboot")
# a golden image says what it was baked from (node_bake.py); a node booting from one whose tree and
# baked formulas' pillar are the pool's applies only the pool's node_states
IMAGE = "/etc/gpufleet/image.json"
# what the agent writes is root's alone: the pillar holds the munge key (whoever reads it mints munge
# credentials for any UID, root included: munge's QUICKSTART wants the key 0600 in a 0700 /etc/munge)
# and, on the controller, the accounting password. Salt and pip run under the usual umask instead:
# what they install is the system's (every job user reads slurm.conf, Salt's runas starts the venv's
# python as another user)
AGENT_UMASK = 0o077
SYSTEM_UMASK = 0o022
# Only root reaches the cloud's metadata service (the node's config says "root", the default, or
# "all-users"): its credentials read the pool's configuration in the bucket, the munge key among it, so
# a job user who could ask for them would be root on the cluster. As AWS ParallelCluster's
# `Imds: Secured: true` (the head node's IMDS for root and the cluster admin only, through iptables
# owner rules) and the Azure Linux agent's OS.EnableFirewall (WireServer: DNS on TCP 53 open, uid 0
# allowed, other new connections dropped). TCP only, and never port 53: the metadata address is GCP's DNS
# resolver too (and its NTP server, over UDP), WireServer is Azure's, and systemd-resolved and chrony ask
# them as their own users. Root's own children are not filtered (Docker's bridged containers: whoever
# may start them is root already). The jumps come first in OUTPUT; the boot unit puts them back before
# the network and any login or slurmd, and every run of the agent checks them.
METADATA = {"aws": ("169.254.169.254",), "gcp": ("169.254.169.254",), "azure": ("169.254.169.254", "168.63.129.16")}
METADATA_CHAIN = "GPUFLEET-METADATA"
IPTABLES = ("iptables", "-w")
SYSTEMD = "/run/systemd/system"  # there when systemd runs the node
METADATA_UNIT = "/etc/systemd/system/gpufleet-metadata.service"
METADATA_UNIT_TEXT = """[Unit]
Description=gpufleet: only root reaches the cloud's metadata service
DefaultDependencies=no
After=local-fs.target
Before=network-pre.target ssh.service sshd.service slurmd.service slurmctld.service
Wants=network-pre.target
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/bin/python3 /opt/gpufleet/node_agent.py /etc/gpufleet/node.json --metadata
[Install]
WantedBy=multi-user.target
"""

# the watch: node_watch.py, run by its timer every pool.health.interval seconds (systemd.timer(5): OnActiveSec from the
# timer's start, at boot or when the agent (re)starts it, then OnUnitActiveSec from the last run's start; a run still
# going is not started twice)
SLURM_NAME = "slurm_name"  # under STATE_DIR: this node's Slurm name, its slot (own_slot), for the watch
# under STATE_DIR, there while `heal` gives this idle node of an elastic pool back (its slot says "release"): the watch
# drains it in Slurm for node_watch.SCALE_DOWN, and resumes it once heal takes the word back
RELEASED = "released"
# the controller, in no job, keeps every Slurm node's name in its /etc/hosts at the address slurmctld has for it now
# (a slot `gpu-0` is in no DNS; the program the slurm formula installs: configure.slurm PROLOG_PROGRAM), run on each of
# its agent's runs, so that `ssh gpu-0` works there and a moved slot is put right within one timer period
SLURM_NAMES = "/usr/local/sbin/gpufleet-slurm-prolog"
WATCH = "_gpufleet/node_watch.py"  # in the state tree (nodes/cloud/channel.py puts it there)
WATCH_HOME = "/opt/gpufleet/node_watch.py"
WATCH_UNIT = "/etc/systemd/system/gpufleet-watch.service"
# the monitor's node lists the cluster's nodes for Prometheus each run (node_targets.py, from the tree, beside the agent)
TARGETS = "_gpufleet/node_targets.py"
TARGETS_HOME = "/opt/gpufleet/node_targets.py"
WATCH_UNIT_TEXT = """[Unit]
Description=gpufleet: watch this node's health and its cloud's notices
Wants=network-online.target
After=network-online.target
[Service]
Type=oneshot
ExecStart=/usr/bin/python3 /opt/gpufleet/node_watch.py /etc/gpufleet/node.json
"""
WATCH_TIMER = "/etc/systemd/system/gpufleet-watch.timer"
WATCH_TIMER_TEXT = """[Unit]
Description=gpufleet: watch this node every {interval} s
[Timer]
OnActiveSec=5
OnUnitActiveSec={interval}
AccuracySec=1
[Install]
WantedBy=timers.target
"""


class AgentError(Exception):
    """A step that failed: its message goes into the node's status."""


class NotThere(AgentError):
    """An object the bucket does not have (yet): S3 answers 403 for it to a caller that may not list."""


class Retryable(AgentError):
    """An answer that may be different a moment later: throttled (429) or a server error (5xx)."""


def check(status, what, data):
    if status in (403, 404) and what.startswith("GET"):
        raise NotThere(f"{what}: HTTP {status}")
    if status == 429 or status >= 500:
        raise Retryable(f"{what}: HTTP {status} {data[:300].decode(errors='replace')}")
    if status >= 300:
        raise AgentError(f"{what}: HTTP {status} {data[:300].decode(errors='replace')}")


def http(method, url, headers=None, body=None, timeout=30):
    headers = dict(headers or {})
    if body is not None and not any(k.lower() == "content-type" for k in headers):
        # urllib would say application/x-www-form-urlencoded, and a server may read the body as a form
        headers["Content-Type"] = "application/octet-stream"
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


# --- AWS: Signature Version 4 (docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html)

def sigv4_headers(method, url, region, service, creds, body=b"", now=None):
    """The headers that sign a request with SigV4 (the payload hash included, as S3 requires)."""
    now = now or dt.datetime.now(dt.timezone.utc)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    u = urllib.parse.urlsplit(url)
    payload = hashlib.sha256(body).hexdigest()
    headers = {"host": u.netloc, "x-amz-date": amz_date, "x-amz-content-sha256": payload}
    if creds.get("token"):
        headers["x-amz-security-token"] = creds["token"]
    query = sorted(urllib.parse.parse_qsl(u.query, keep_blank_values=True))
    canonical_query = "&".join(f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
                               for k, v in query)
    names = sorted(headers)
    # S3 signs the path as it is sent (each key encoded once, by S3.url); other services sign it
    # URI-encoded (botocore: S3SigV4Auth does not re-encode the path, SigV4Auth does)
    path = (u.path or "/") if service == "s3" else urllib.parse.quote(u.path or "/", safe="/-_.~")
    canonical = "\n".join([method, path, canonical_query,
                           "".join(f"{k}:{headers[k].strip()}\n" for k in names), ";".join(names), payload])
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + creds["secret"]).encode()
    for part in (day, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={creds['key']}/{scope}, "
                                f"SignedHeaders={';'.join(names)}, Signature={signature}")
    return headers


def aws_imds(path, missing=False):
    """An item of the instance metadata (IMDSv2); None for one that is not there when ``missing`` is allowed."""
    _, _, token = http("PUT", AWS_IMDS + "/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": "300"},
                       timeout=2)
    status, _, body = http("GET", AWS_IMDS + path, {"X-aws-ec2-metadata-token": token.decode()}, timeout=2)
    if status == 404 and missing:
        return None
    if status != 200:
        raise AgentError(f"instance metadata {path}: HTTP {status}")
    return body.decode()


class S3:
    def __init__(self, cfg):
        self.bucket, self.region = cfg["bucket"], cfg["region"]
        self.endpoint = cfg.get("endpoint")  # an S3-compatible endpoint (path-style), else AWS's own
        self.sts_endpoint = cfg.get("endpoint") or f"https://sts.{self.region}.amazonaws.com"
        self._creds = None

    def creds(self):
        if os.environ.get("AWS_ACCESS_KEY_ID"):
            return {"key": os.environ["AWS_ACCESS_KEY_ID"], "secret": os.environ["AWS_SECRET_ACCESS_KEY"],
                    "token": os.environ.get("AWS_SESSION_TOKEN")}
        if self._creds is None or self._creds["expires"] - time.time() < 300:
            role = aws_imds("/latest/meta-data/iam/security-credentials/").split()[0]
            c = json.loads(aws_imds("/latest/meta-data/iam/security-credentials/" + role))
            expires = dt.datetime.strptime(c["Expiration"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
            self._creds = {"key": c["AccessKeyId"], "secret": c["SecretAccessKey"], "token": c["Token"],
                           "expires": expires.timestamp()}
        return self._creds

    def url(self, key=""):
        path = urllib.parse.quote(key, safe="/-_.~")
        if self.endpoint:
            return f"{self.endpoint.rstrip('/')}/{self.bucket}/{path}"
        return f"https://{self.bucket}.s3.{self.region}.amazonaws.com/{path}"

    def _call(self, method, url, body=b"", service="s3"):
        status, _, data = http(method, url, sigv4_headers(method, url, self.region, service, self.creds(), body), body)
        check(status, f"{method} {url.split('?')[0]}", data)
        return data

    def get(self, key):
        return self._call("GET", self.url(key))

    def put(self, key, body):
        self._call("PUT", self.url(key), body)

    def writer(self, node_id):
        """aws:userid (role id:instance id): the one status key the node's policy lets it write."""
        data = self._call("GET", self.sts_endpoint.rstrip("/") + "/?Action=GetCallerIdentity&Version=2011-06-15",
                          service="sts")
        found = [e.text for e in ET.fromstring(data).iter() if e.tag.endswith("UserId")]
        if not found:
            raise AgentError("sts:GetCallerIdentity returned no UserId")
        return found[0]


class GCS:
    def __init__(self, cfg):
        self.bucket = cfg["bucket"]
        self.endpoint = (cfg.get("endpoint") or "https://storage.googleapis.com").rstrip("/")
        self.token_url = cfg.get("token_url") or GCP_METADATA + "/instance/service-accounts/default/token"

    def headers(self):
        status, _, body = http("GET", self.token_url, {"Metadata-Flavor": "Google"}, timeout=5)
        if status != 200:
            raise AgentError(f"no token from the metadata server: HTTP {status}")
        return {"Authorization": "Bearer " + json.loads(body)["access_token"]}

    def get(self, key):
        url = f"{self.endpoint}/storage/v1/b/{self.bucket}/o/{urllib.parse.quote(key, safe='')}?alt=media"
        status, _, data = http("GET", url, self.headers())
        check(status, f"GET gs://{self.bucket}/{key}", data)
        return data

    def put(self, key, body):
        url = (f"{self.endpoint}/upload/storage/v1/b/{self.bucket}/o?uploadType=media&"
               f"name={urllib.parse.quote(key, safe='')}")
        status, _, data = http("POST", url, {**self.headers(), "Content-Type": "application/json"}, body)
        check(status, f"upload gs://{self.bucket}/{key}", data)

    def writer(self, node_id):
        return safe_key(node_id)


class Blob:
    def __init__(self, cfg):
        self.base = (cfg.get("endpoint") or f"https://{cfg['account']}.blob.core.windows.net").rstrip("/")
        self.container = cfg["bucket"]
        query = {"api-version": "2018-02-01", "resource": "https://storage.azure.com/"}
        if cfg.get("identity"):
            query["client_id"] = cfg["identity"]
        self.token_url = (cfg.get("token_url") or AZURE_IMDS + "/identity/oauth2/token") + "?" + \
            urllib.parse.urlencode(query)

    def headers(self):
        status, _, body = http("GET", self.token_url, {"Metadata": "true"}, timeout=5)
        if status != 200:
            raise AgentError(f"no token from the managed identity: HTTP {status}")
        return {"Authorization": "Bearer " + json.loads(body)["access_token"], "x-ms-version": AZURE_STORAGE_VERSION}

    def get(self, key):
        status, _, data = http("GET", f"{self.base}/{self.container}/{urllib.parse.quote(key)}", self.headers())
        check(status, f"GET blob {self.container}/{key}", data)
        return data

    def put(self, key, body):
        status, _, data = http("PUT", f"{self.base}/{self.container}/{urllib.parse.quote(key)}",
                               {**self.headers(), "x-ms-blob-type": "BlockBlob", "Content-Type": "application/json"}, body)
        check(status, f"PUT blob {self.container}/{key}", data)

    def writer(self, node_id):
        return safe_key(node_id)


STORES = {"aws": S3, "gcp": GCS, "azure": Blob}


def safe_key(node_id):
    return "".join(c if c.isalnum() or c in "-_.:" else "_" for c in node_id.strip("/"))


def node_id(cfg):
    """The id the cloud knows the node by (what `up` exported), from its metadata service."""
    if os.environ.get("GPUFLEET_NODE_ID"):
        return os.environ["GPUFLEET_NODE_ID"]
    try:
        if cfg["cloud"] == "aws":
            return aws_imds("/latest/meta-data/instance-id")
        if cfg["cloud"] == "gcp":
            status, _, body = http("GET", GCP_METADATA + "/instance/id", {"Metadata-Flavor": "Google"}, timeout=2)
        else:
            status, _, body = http("GET", AZURE_IMDS + "/instance/compute/resourceId?api-version=2021-02-01&format=text",
                                   {"Metadata": "true"}, timeout=2)
        if status == 200:
            return body.decode().strip()
    except OSError:
        pass
    return socket.gethostname()  # no metadata service answered: the host's name, said so in the status


def own_vm_uid(cfg):
    """This VM's own unique id where its node id may come again: Azure's vmId (its Instance Metadata Service,
    /metadata/instance/compute/vmId, api-version 2021-02-01: learn.microsoft.com/azure/virtual-machines/
    instance-metadata-service, 2026-11-27); None elsewhere (AWS and GCP ids are never reused) or unanswered."""
    if cfg["cloud"] != "azure":
        return None
    try:
        status, _, body = http("GET", AZURE_IMDS + "/instance/compute/vmId?api-version=2021-02-01&format=text",
                               {"Metadata": "true"}, timeout=2)
    except OSError:
        return None
    return body.decode().strip() or None if status == 200 else None


def metadata_rules(cloud):
    """(the chain's rules, the OUTPUT rules sending each metadata address's TCP to it), as `iptables -S`
    prints them."""
    chain = [f"-A {METADATA_CHAIN} -p tcp -m tcp --dport 53 -j RETURN",
             f"-A {METADATA_CHAIN} -m owner --uid-owner 0 -j RETURN",
             f"-A {METADATA_CHAIN} -p tcp -j REJECT --reject-with icmp-port-unreachable"]
    return chain, [f"-d {a}/32 -p tcp -j {METADATA_CHAIN}" for a in METADATA[cloud]]


def iptables(*args):
    return subprocess.run([*IPTABLES, *args], capture_output=True, text=True)


def _must(r, what):
    if r.returncode != 0:
        raise AgentError(f"only root may reach the metadata service, but {what} failed: "
                         f"{(r.stderr or r.stdout).strip()[-300:]}")


def guard_metadata(cfg):
    """The rules the node's config asks for (``metadata``: root, or all-users: none), made where missing
    or changed; the chain is filled before any jump reaches it."""
    chain, jumps = metadata_rules(cfg["cloud"])
    if cfg.get("metadata", "root") == "all-users":
        for jump in jumps:
            while iptables("-C", "OUTPUT", *jump.split()).returncode == 0:
                _must(iptables("-D", "OUTPUT", *jump.split()), "removing a rule")
        if iptables("-S", METADATA_CHAIN).returncode == 0:
            _must(iptables("-F", METADATA_CHAIN), "emptying the chain")
            _must(iptables("-X", METADATA_CHAIN), "removing the chain")
        return
    ensure_iptables()
    have = iptables("-S", METADATA_CHAIN)
    if have.returncode != 0:
        _must(iptables("-N", METADATA_CHAIN), f"creating the chain {METADATA_CHAIN}")
    if have.stdout.splitlines()[1:] != chain:
        _must(iptables("-F", METADATA_CHAIN), "emptying the chain")
        for rule in chain:
            _must(iptables(*rule.split()), rule)
    for jump in reversed(jumps):
        if iptables("-C", "OUTPUT", *jump.split()).returncode != 0:
            _must(iptables("-I", "OUTPUT", "1", *jump.split()), jump)
    install_unit(METADATA_UNIT, METADATA_UNIT_TEXT)


def ensure_iptables():
    """iptables from the distribution where the image has none (minimal Debian and EL images)."""
    if shutil.which(IPTABLES[0]):
        return
    if shutil.which("apt-get"):
        cmds = [["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "iptables"]]
    else:
        cmds = [["dnf", "install", "-y", "-q", "iptables-nft"]]
    for cmd in cmds:
        r = subprocess.run(cmd, capture_output=True, text=True, umask=SYSTEM_UMASK)
        _must(r, " ".join(cmd))


def install_watch(tree, health):
    """The watch (node_watch.py: it ships in the state tree, user data has no room for it) beside the agent, the
    pool's health settings it runs by (it never waits on the bucket), and its timer at the pool's interval."""
    interval = health.get("interval") if isinstance(health, dict) else None
    if not isinstance(interval, int) or not 15 <= interval <= 86400:
        return
    write_private(f"{STATE_DIR}/health.json", json.dumps(health))
    if not os.path.exists(f"{STATE_DIR}/gate.json"):  # not passed yet: Slurm's health check keeps the node drained
        write_private(f"{STATE_DIR}/gate.json", json.dumps({"level": health.get("gate"), "passed": None}))
    shutil.copyfile(os.path.join(tree, WATCH), WATCH_HOME)
    install_unit(WATCH_UNIT, WATCH_UNIT_TEXT)
    install_unit(WATCH_TIMER, WATCH_TIMER_TEXT.format(interval=interval), start=True)


def install_unit(path, text, start=False):
    """A systemd unit written and enabled where systemd runs the node, once (``start``: and (re)started,
    a timer whose period changed)."""
    if not os.path.isdir(SYSTEMD) or _read(path) == text:
        return
    with open(path, "w") as f:
        os.fchmod(f.fileno(), 0o644)
        f.write(text)
    unit = os.path.basename(path)
    for cmd in (["systemctl", "daemon-reload"], ["systemctl", "enable", unit], *([["systemctl", "restart", unit]] * start)):
        subprocess.run(cmd, capture_output=True)


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def nouveau_bound():
    return os.path.isdir(NOUVEAU)


def has_nvidia_gpu():
    """An NVIDIA (vendor 0x10de) display controller (class 0x03xxxx) on the PCI bus."""
    root = "/sys/bus/pci/devices"
    for dev in os.listdir(root) if os.path.isdir(root) else []:
        try:
            with open(f"{root}/{dev}/vendor") as v, open(f"{root}/{dev}/class") as c:
                if v.read().strip() == "0x10de" and c.read().strip().startswith("0x03"):
                    return True
        except OSError:
            continue
    return False


def facts():
    """What the node is: GPUs, driver, kernel, OS, and what Slurm is told of it (its short host name,
    the address it reaches the cluster from, CPUs and memory), as it measures them itself."""
    out = {"kernel": os.uname().release, "gpu_model": None, "gpu_count": 0, "driver": None,
           "hostname": socket.gethostname().split(".")[0], "address": own_address(), "cpus": os.cpu_count() or 1,
           "cpu_topology": cpu_topology(), "mem_gib": mem_gib()}
    if shutil.which("nvidia-smi"):
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True)
        rows = [line.split(", ") for line in r.stdout.strip().splitlines() if ", " in line]
        if rows:
            out.update(gpu_model=rows[0][0], gpu_count=len(rows), driver=rows[0][1])
    try:
        with open("/etc/os-release") as f:
            rel = dict(line.rstrip().split("=", 1) for line in f if "=" in line)
        out["os"] = rel.get("PRETTY_NAME", "").strip('"')
    except OSError:
        pass
    return out


def own_address():
    """The address of the interface the default route leaves by (a UDP socket's connect sends nothing)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 9))
            return s.getsockname()[0]
    except OSError:
        return None


def cpu_topology():
    """[sockets, cores per socket, threads per core] of the online CPUs, counted from sysfs as lscpu counts
    them (an offline CPU has no topology folder); [] when they do not divide evenly."""
    root, cores = "/sys/devices/system/cpu", []
    for cpu in os.listdir(root) if os.path.isdir(root) else []:
        try:
            with open(f"{root}/{cpu}/topology/physical_package_id") as p, open(f"{root}/{cpu}/topology/core_id") as c:
                cores.append((p.read().strip(), c.read().strip()))
        except OSError:
            continue
    sockets, distinct = len({p for p, _ in cores}), len(set(cores))
    if not cores or distinct % sockets or len(cores) % distinct:
        return []
    return [sockets, distinct // sockets, len(cores) // distinct]


def mem_gib():
    try:
        with open("/proc/meminfo") as f:
            kib = next(int(line.split()[1]) for line in f if line.startswith("MemTotal:"))
        return round(kib / 2**20, 1)
    except (OSError, StopIteration, ValueError):
        return None


def private_dir(path):
    """``path`` made where missing and root's alone (0700), whatever the umask or an older agent left."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def write_private(path, text):
    """``text`` into ``path``, mode 0600 whatever the umask (a file an older agent left 0644 included)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(fd, 0o600)
        f.write(text)


def ensure_salt(salt):
    exe = os.path.join(salt["venv"], "bin", "salt-call")
    if os.path.exists(exe):
        return exe  # a golden image's Salt, or this agent's from an earlier boot
    subprocess.run([sys.executable, "-m", "venv", salt["venv"]], check=True, umask=SYSTEM_UMASK)
    pip = [os.path.join(salt["venv"], "bin", "pip"), "install", "-q", *salt.get("pip_args", []),
           f"salt=={salt['version']}"]
    r = subprocess.run(pip, capture_output=True, text=True, umask=SYSTEM_UMASK)
    if r.returncode != 0:
        raise AgentError(f"installing Salt {salt['version']} failed: {r.stderr.strip()[-500:]}")
    return exe


def pillar_sls(pillar):
    """The pillar as a file Salt reads as JSON alone (``#!json``): its default renderer would run Jinja
    over the values first, and a Prometheus rule's ``{{ $labels.node }}`` breaks the whole pillar
    (configure.saltrun.pillar_sls, the same for salt-ssh)."""
    return "#!json\n" + json.dumps(pillar)


def apply(salt_call, tree, pillar, states, test, work):
    """One salt-call run; (ok, changed, failed [(state id, comment)], seconds). The pillar (secrets
    among it) is on disk for that run only: 0600 in 0700 folders, removed when salt-call is done with
    Salt's cache, which holds the highstate rendered from it."""
    private_dir(work)
    private_dir(f"{work}/pillar")
    write_private(f"{work}/pillar/top.sls", "base:\n  '*': [gpufleet]\n")
    pillar_file = f"{work}/pillar/gpufleet.sls"
    write_private(pillar_file, pillar_sls(pillar))
    # Salt puts every path not under root_dir beneath it (salt/config: prepend_root_dir): root_dir is the
    # work folder itself, so the cache is where forget_rendered clears it
    write_private(f"{work}/minion", json.dumps(
        {"file_client": "local", "file_roots": {"base": [tree]}, "pillar_roots": {"base": [f"{work}/pillar"]},
         "root_dir": work, "cachedir": f"{work}/cache", "log_file": f"{work}/salt.log"}))
    cmd = [salt_call, "--local", "-c", work, "--out", "json", "--retcode-passthrough", "state.apply", ",".join(states)]
    if test:
        cmd.append("test=True")
    apt_conf = f"{work}/apt.conf"
    write_private(apt_conf, f'DPkg::Lock::Timeout "{DPKG_LOCK_WAIT_S}";\n')
    start = time.monotonic()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "APT_CONFIG": apt_conf},
                           umask=SYSTEM_UMASK)
    finally:
        forget_rendered(work)
    seconds = time.monotonic() - start
    try:
        ret = json.loads(r.stdout)["local"]
    except (ValueError, KeyError):
        return False, 0, [("salt-call", (r.stderr or r.stdout).strip()[-500:])], seconds
    if not isinstance(ret, dict):  # a render error comes back as a list of strings
        return False, 0, [("render", "; ".join(map(str, ret))[:500])], seconds
    failed = [(sid.split("_|-")[1] if "_|-" in sid else sid, str(s.get("comment", ""))[:300])
              for sid, s in ret.items() if s.get("result") is False]
    changed = sum(1 for s in ret.values() if s.get("changes") and s.get("result") is not False)
    return not failed and r.returncode == 0, changed, failed, seconds


def forget_rendered(work):
    """What a Salt run leaves that holds the pillar's secrets: the pillar file and Salt's cache (its
    rendered highstate, highstate.cache.p), and an older agent's root_dir, under which its cache was."""
    try:
        os.remove(f"{work}/pillar/gpufleet.sls")
    except FileNotFoundError:
        pass
    for folder in (f"{work}/cache", f"{work}/root"):
        shutil.rmtree(folder, ignore_errors=True)


def private_logs(log):
    """The agent's log folder root's alone (0700) and the logs in it 0600, whatever cloud-init's or
    systemd's umask made: they hold every failed state's comment."""
    folder = os.path.dirname(log)
    private_dir(folder)
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if os.path.isfile(path) and not os.path.islink(path):
            os.chmod(path, 0o600)


def released(on):
    """The watch told whether `heal` gives this node back (RELEASED there or not)."""
    path = f"{STATE_DIR}/{RELEASED}"
    if on:
        write_private(path, "release")
    elif os.path.exists(path):
        os.unlink(path)


def current_configuration(store, pool, wait_s, poll_s=15):
    """The pool's ``current.json``, once `up` has published it (the node may boot before that)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return json.loads(store.get(f"pools/{pool}/current.json"))
        except NotThere:
            if time.monotonic() >= deadline:
                raise AgentError(f"no configuration for pool {pool} in the bucket after {wait_s:.0f}s: "
                                 "run `gpufleet configure`") from None
            time.sleep(poll_s)


def own_slot(store, pool, nid):
    """This node's Slurm name: the slot `up` or `heal` keeps under its own id (nodes/cloud/channel.py
    assign_slots), None until there is one; a slot naming another node or no valid name is refused."""
    return (slot_said(store, pool, nid) or {}).get("slurm_name")


def slot_said(store, pool, nid, vm_uid=None):
    """This node's slot document ({"node_id", "slurm_name", "vm_uid" where ids come again, "release": true while
    `heal` gives it back}), checked; None until there is one, and None for one made for another VM of the same id
    (``vm_uid``: this VM's own unique id, own_vm_uid: an Azure scale set made anew numbers its VMs from 0 again)."""
    try:
        said = json.loads(store.get(f"pools/{pool}/slots/{safe_key(nid).lower()}.json"))
    except NotThere:
        return None
    if isinstance(said, dict) and vm_uid and said.get("vm_uid") and str(said["vm_uid"]).lower() != vm_uid.lower():
        return None  # an earlier VM's: this one's is written by `up` (configure) or `heal`
    name = said.get("slurm_name") if isinstance(said, dict) else None
    if safe_key(str(said.get("node_id") if isinstance(said, dict) else "")).lower() != safe_key(nid).lower() or \
            not isinstance(name, str) or not 0 < len(name) <= 63 or not all(c.isalnum() or c in "-_" for c in name):
        raise AgentError(f"the slot kept for this node ({str(said)[:120]}) is not its own valid Slurm name: refused")
    return said


def run(cfg, force=False):
    """One run of the agent. The boot's run and the timer's (and, on GCP, the startup script that
    runs again at every boot) never overlap: a run that finds another under way stops. What it
    writes is root's alone (AGENT_UMASK), whatever the umask it was started with."""
    umask = os.umask(AGENT_UMASK)
    try:
        private_dir(STATE_DIR)
        with open(f"{STATE_DIR}/agent.lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                print("another run of the agent is under way (the boot's or the timer's): this one stops", flush=True)
                return 0
            forget_rendered(f"{STATE_DIR}/salt")  # a run killed while Salt ran (SIGKILL, a reboot) left them
            if cfg.get("log"):
                private_logs(cfg["log"])
            rc = _run(cfg, force)
            report_scheduler(cfg)
            list_targets(cfg)
            return rc
    finally:
        os.umask(umask)


def report_scheduler(cfg):
    """On Slurm's controller (its document names a ``probe``): what Slurm says of its nodes and jobs,
    put in this node's status on each run, stamped with when it was read (`gpufleet status` reads it;
    `gpufleet heal` trusts it only while that stamp is fresh, so it is re-stamped even when unchanged); then Slurm's node
    names in /etc/hosts (SLURM_NAMES)."""
    probe = (_read_json(f"{STATE_DIR}/applied.json") or {}).get("probe")  # the generation applied last
    status = _read_json(f"{STATE_DIR}/status.json")
    if not probe or not status:
        return
    try:
        store = STORES[cfg["cloud"]](cfg)
        r = subprocess.run(["sh", "-c", probe], capture_output=True, text=True, timeout=60)
        out = r.stdout if r.returncode == 0 else "error: " + (r.stderr or r.stdout).strip()[-300:]
        status["scheduler"] = {"out": out, "at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
        put_status(store, cfg["pool"], node_id(cfg), status)
    except (AgentError, OSError, ValueError, subprocess.SubprocessError) as e:
        print(f"Slurm's view was not reported: {e}", flush=True)
    if os.access(SLURM_NAMES, os.X_OK):
        try:
            subprocess.run([SLURM_NAMES, "--all"], capture_output=True, timeout=60, check=False)
        except (OSError, subprocess.SubprocessError) as e:
            print(f"Slurm's node names were not written to /etc/hosts: {e}", flush=True)


def list_targets(cfg):
    """On the monitor's node (its pool's document has a ``discovery``): the cluster's running nodes, listed with this
    node's identity (root's alone) and written for Prometheus by node_targets.py."""
    d = (_read_json(f"{STATE_DIR}/applied.json") or {}).get("discovery")
    if not d or not os.path.exists(TARGETS_HOME):
        return
    try:
        r = subprocess.run([sys.executable, TARGETS_HOME], input=json.dumps({"cfg": cfg, "discovery": d}),
                           capture_output=True, text=True, timeout=120)
        # a failure, or the nodes it left out (a bad address, a name outside its format): its last 2000 characters
        if r.stdout or r.stderr:
            print(f"scrape targets: {(r.stdout + r.stderr).strip()[-2000:]}", flush=True)
    except (OSError, subprocess.SubprocessError) as e:
        print(f"scrape targets were not listed: {e}", flush=True)


def _read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def baked_key(tree, states, pillar):
    """What an image baked ``states`` of ``tree`` with ``pillar`` holds: one digest for both."""
    formulas = sorted({s.split(".")[0] for s in states})
    doc = {"tree": tree, "pillar": {f: pillar.get(f) for f in formulas}}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def image_match(image, current):
    """(the node may apply only its node states, why not): an image baked from the pool's tree
    with the same pillar for every formula the pool applies but its node states."""
    if not image:
        return False, "not a gpufleet image"
    baked = [s for s in current["states"] if s not in current.get("node_states", [])]
    missing = sorted(set(baked) - set(image.get("states", [])))
    if image.get("tree") != current["tree"]:
        return False, f"baked from state tree {str(image.get('tree'))[:12]}, the pool's is {current['tree'][:12]}"
    if missing:
        return False, f"formulas not baked: {', '.join(missing)}"
    if image.get("key") != baked_key(current["tree"], image["states"], current["pillar"]):
        return False, "the pool's settings for the baked formulas differ from the image's (versions, options)"
    return True, ""


def unpack(archive, sha):
    """The state tree of an archive whose SHA-256 is ``sha``, unpacked once under STATE_DIR."""
    digest = hashlib.sha256(archive).hexdigest()
    if digest != sha:
        raise AgentError(f"the state tree archive's SHA-256 is {digest}, not {sha}: refused")
    tree = f"{STATE_DIR}/tree/{digest}"
    if not os.path.isdir(tree):
        os.makedirs(tree + ".part", exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            for m in tar.getmembers():
                if m.name.startswith(("/", "..")) or ".." in m.name.split("/") or not (m.isfile() or m.isdir()):
                    raise AgentError(f"the state tree archive holds {m.name!r}: refused")
            tar.extractall(tree + ".part")
        os.rename(tree + ".part", tree)
    return tree


def _run(cfg, force):
    store = STORES[cfg["cloud"]](cfg)
    nid = node_id(cfg)
    pool = cfg["pool"]
    started = time.monotonic()
    status = {"node_id": nid, "cluster": cfg["cluster"], "pool": pool, "ok": False, "generation": None,
              "tree": None, "changed": 0, "failed": [], "rehearsed": [], "log": cfg.get("log"),
              "started_at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    applied_file = f"{STATE_DIR}/applied.json"
    applied = _read_json(applied_file) or {}
    record = None  # what this run applied: recorded only once its status is written
    try:
        guard_metadata(cfg)  # before the pool's configuration (its secrets) is read, every run
        current = current_configuration(store, pool, cfg.get("wait_s", 3600))
        status.update(generation=current["generation"], tree=current["tree"])
        pillar = current["pillar"]
        said = slot_said(store, pool, nid, own_vm_uid(cfg)) if "slurm" in pillar else None
        slot = (said or {}).get("slurm_name")
        if slot:  # slurmd starts as this slot (salt/slurm/daemon.sls), and the watch drains it by this name
            pillar = {**pillar, "slurm": {**pillar["slurm"], "self": slot}}
            write_private(f"{STATE_DIR}/{SLURM_NAME}", slot)
        released(bool(slot) and said.get("release") is True)
        # a slot given after this generation was applied (a replacement's, by `heal`) is applied too
        again = not force and applied.get("generation") == current["generation"] and applied.get("slot") == slot
        if again and applied.get("ok"):
            return verify_on_request(store, pool, nid, applied, applied_file)  # nothing to apply
        if again and time.time() < applied.get("next_try", 0):
            return 1  # failed ATTEMPTS times already: backing off (its status says so)
        attempt = applied.get("attempt", 0) + 1 if again else 1
        status.update(attempt=attempt, attempts=ATTEMPTS)
        record = {"generation": current["generation"], "ok": False, "tree": None, "attempt": attempt,
                  "probe": current.get("probe"), "slot": slot, "discovery": current.get("discovery")}
        tree = unpack(store.get(f"tree/{current['tree']}.tar.gz"), current["tree"])
        install_watch(tree, current.get("health"))  # before Salt: a notice during the first configuration drains too
        if current.get("discovery"):
            shutil.copyfile(os.path.join(tree, TARGETS), TARGETS_HOME)
        salt_call = ensure_salt(cfg["salt"])
        gpu = has_nvidia_gpu()
        if gpu:
            states, rehearse = current["states"], []
        else:  # the GPU formulas are rehearsed (test=True) on a node without an NVIDIA GPU
            states, rehearse = current["without_gpu"]["apply"], current["without_gpu"]["rehearse"]
        image = _read_json(IMAGE)
        current_image, why = image_match(image, current)
        if image:
            status["image"] = {"base": image.get("base_image"), "built_at": image.get("built_at"),
                               "current": current_image, "stale": why or None}
        if current_image:  # what the image holds is the pool's: only what is this node's own
            keep = current.get("node_states", [])
            states = [s for s in states if s.split(".")[0] in keep]
            rehearse = [s for s in rehearse if s.split(".")[0] in keep]
        ok, changed, failed = True, 0, []  # nothing to apply (a current image holding every formula): no Salt run,
        if states:  # whose state.apply of nothing would be the whole highstate
            ok, changed, failed, _ = apply(salt_call, tree, pillar, states, False, f"{STATE_DIR}/salt")
        if rehearse:
            ok2, _, failed2, _ = apply(salt_call, tree, pillar, rehearse, True, f"{STATE_DIR}/salt")
            ok, failed = ok and ok2, failed + failed2
        status.update(ok=ok, changed=changed, failed=[{"state": s, "comment": c} for s, c in failed],
                      rehearsed=rehearse)
        if ok and gpu and nouveau_bound():  # applied, but the driver cannot load before a reboot
            if applied.get("rebooted_for") == current["generation"]:
                raise AgentError("nouveau is still bound after the reboot: the NVIDIA driver cannot load "
                                 "(is the nouveau blacklist in the initramfs? see node_base)")
            ok = False
            status.update(ok=False, reboot_pending=True)
            # a reboot is not a failed attempt: the run after it is the same attempt
            record.update(rebooted_for=current["generation"], attempt=attempt - 1)
        if ok and current.get("verify"):  # the quick verification `up` ends with
            status["verify"] = run_checks(tree, current["verify"], "quick", current["generation"])
        record.update(ok=ok, tree=tree)
    except (AgentError, OSError, ValueError, KeyError, subprocess.CalledProcessError, tarfile.TarError) as e:
        status["failed"] = status["failed"] or [{"state": "bootstrap", "comment": str(e)[:500]}]
        status["ok"] = False
    if record is not None and not status["ok"]:
        # `up` keeps waiting for the next attempt, or for the run after the reboot
        status["retrying"] = bool(status.get("reboot_pending")) or record["attempt"] < ATTEMPTS
        if not status["retrying"]:
            record["next_try"] = time.time() + min(BACKOFF_S[0] * 2 ** (record["attempt"] - ATTEMPTS), BACKOFF_S[1])
    status.update(seconds=round(time.monotonic() - started, 1), facts=facts(),
                  finished_at=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    try:
        put_status(store, pool, nid, status)
    except (AgentError, OSError) as e:
        print(f"{nid} could not write its status ({e}): the next timer run applies and reports again", flush=True)
        return 1
    if record is not None:
        with open(applied_file, "w") as f:
            json.dump(record, f)
    if status.get("reboot_pending"):
        print(f"{nid} generation {status['generation']}: applied; rebooting to load the NVIDIA driver "
              "(nouveau is bound), the run after boot finishes", flush=True)
        subprocess.run(list(REBOOT))
        return 0
    print(f"{status['finished_at']} {nid} generation {status['generation']}: "
          f"{'ok' if status['ok'] else 'FAILED'}, {status['changed']} changed"
          + "".join(f"\n  {f['state']}: {f['comment']}" for f in status["failed"]), flush=True)
    return 0 if status["ok"] else 1


def put_status(store, pool, nid, status, health=None):
    """The node's status object, tried again after a throttle, a server error or no answer, and a
    copy here (a later verification adds to it). Its ``health`` is the watch's alone: a run that brings
    none keeps the copy's; the watch's (``health``) goes into the copy as it is then (``status``: while
    there is none). One writes at a time: neither the watch nor the configuration's run erases the other's."""
    private_dir(STATE_DIR)
    with open(f"{STATE_DIR}/status.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        copy = _read_json(f"{STATE_DIR}/status.json") or {}
        if health:
            status = {**(copy or status), "health": health}
        elif copy.get("health"):
            status = {**status, "health": copy["health"]}
        body = json.dumps(status).encode()
        for pause in (*RETRY_DELAYS, None):
            try:
                store.put(f"status/{pool}/{store.writer(nid)}.json", body)
                break
            except (Retryable, OSError):
                if pause is None:
                    raise
                time.sleep(pause)
        write_private(f"{STATE_DIR}/status.json", json.dumps(status))


def run_checks(tree, expect, level, request, timeout=3600):
    """The node-side checks of the tree's verify bundle; their report, tagged with the request (a
    run that fails or overruns is an "error" report: the configuration's status stays as it is)."""
    bundle = os.path.join(tree, VERIFY_BUNDLE)
    if not os.path.exists(bundle):
        return {"request": request, "verdict": "error", "ok": False, "error": f"no {VERIFY_BUNDLE} in the tree"}
    try:
        r = subprocess.run([sys.executable, bundle, "--level", level], input=json.dumps(expect),
                           capture_output=True, text=True, timeout=timeout)
    except (subprocess.SubprocessError, OSError) as e:
        return {"request": request, "verdict": "error", "ok": False, "error": f"the checks did not finish: {e}"[:300]}
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    try:
        report = json.loads(lines[-1])
    except (IndexError, ValueError):
        report = {"verdict": "error", "ok": False, "error": (r.stderr.strip() or f"exit {r.returncode}")[-300:]}
    report["request"] = request
    return report


def verify_on_request(store, pool, nid, applied, applied_file):
    """A verification `gpufleet verify` asked for (``pools/<pool>/verify.json``), once per request."""
    try:
        req = json.loads(store.get(f"pools/{pool}/verify.json"))
    except NotThere:
        return 0
    except (AgentError, OSError, ValueError) as e:  # the next timer run asks again; the status stays as it is
        print(f"{nid} could not read the verification request: {e}", flush=True)
        return 1
    if req.get("request") == applied.get("verify_request") or not applied.get("tree"):
        return 0
    report = run_checks(applied["tree"], req.get("expect") or {}, req.get("level", "quick"), req["request"])
    try:
        with open(f"{STATE_DIR}/status.json") as f:
            status = json.load(f)
    except (OSError, ValueError):
        status = {"node_id": nid, "pool": pool, "ok": True, "generation": applied.get("generation")}
    status["verify"] = report
    try:
        put_status(store, pool, nid, status)
    except (AgentError, OSError) as e:  # not recorded as answered: the next timer run checks and reports again
        print(f"{nid} could not write its verification ({e})", flush=True)
        return 1
    with open(applied_file, "w") as f:
        json.dump({**applied, "verify_request": req["request"]}, f)
    print(f"{nid} verification {req['request']}: {report.get('verdict')}", flush=True)
    return 0 if report.get("ok") else 1


def main(argv):
    with open(argv[1] if len(argv) > 1 and not argv[1].startswith("-") else CONFIG) as f:
        cfg = json.load(f)
    if "--metadata" in argv:  # the boot unit: only the rules
        try:
            guard_metadata(cfg)
        except AgentError as e:
            print(e, flush=True)
            return 1
        return 0
    return run(cfg, force="--force" in argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv))

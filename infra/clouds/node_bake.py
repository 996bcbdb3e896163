"""Bake mode of the node bootstrap, run by an image builder (Python 3.9+, stdlib and the agent only).

``python3 node_bake.py SPEC [--root DIR] [--state DIR]`` sits beside ``node_agent.py`` in the bundle that
``gpufleet image plan`` writes and every template under ``images/`` uploads. It does what a cloud
node's first boot does, with the agent's own functions: unpack the state tree (its SHA-256
checked), install the pinned Salt, ``salt-call --local state.apply`` the formulas the image holds
(every one but the pool's node states; the GPU ones for real, GPU or not, as a driver package
installs without one). Then it leaves no machine behind: cloud-init's record of the builder's boot,
the SSH host keys, the machine id (emptied, so systemd writes a new one at first boot), package
caches, Salt's work files. Last it writes ``/etc/gpufleet/image.json``: the tree, the formulas,
the digest of their pillar (``node_agent.baked_key``), the software versions, the base image, the
Salt version and the build date, which a booting node compares with its pool's (``node_agent.image_match``).

``SPEC`` (JSON): ``archive`` (the tree's path, relative to the spec's folder), ``tree`` (its SHA-256), ``states``, ``pillar``,
``salt`` (version, virtualenv), ``software`` and ``base_image`` (said in image.json).
"""

import datetime as dt
import glob
import json
import os
import shutil
import sys

import node_agent as agent  # beside this file in the bundle (sys.path[0] when run as a script)

# what makes a booted copy of the image a machine of its own, or only takes space
IDENTITY = ("var/lib/cloud/instances", "var/lib/cloud/instance", "var/lib/cloud/data", "etc/ssh/ssh_host_*",
            "var/lib/dbus/machine-id", "var/cache/apt/archives/*.deb", "var/lib/apt/lists/*", "root/.cache/pip")
MACHINE_ID = "etc/machine-id"  # emptied, not removed: an empty file makes systemd write a new id at first boot


def bake(spec, root="/"):
    """Apply, clean, record; the image record (raises agent.AgentError when a state failed)."""
    with open(spec["archive"], "rb") as f:
        tree = agent.unpack(f.read(), spec["tree"])
    salt_call = agent.ensure_salt(spec["salt"])
    work = os.path.join(agent.STATE_DIR, "salt")
    ok, changed, failed, seconds = agent.apply(salt_call, tree, spec["pillar"], spec["states"], False, work)
    if not ok:
        raise agent.AgentError("baking failed: " + "; ".join(f"{s}: {c}" for s, c in failed))
    for pattern in IDENTITY:
        for path in glob.glob(os.path.join(root, pattern)):
            shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.remove(path)
    for path in (work, os.path.join(agent.STATE_DIR, "tree")):
        shutil.rmtree(path, ignore_errors=True)
    if os.path.exists(os.path.join(root, MACHINE_ID)):
        open(os.path.join(root, MACHINE_ID), "w").close()
    image = {"tree": spec["tree"], "states": spec["states"],
             "key": agent.baked_key(spec["tree"], spec["states"], spec["pillar"]),
             "software": spec.get("software", {}), "base_image": spec.get("base_image"),
             "salt": spec["salt"]["version"], "changed": changed, "seconds": round(seconds, 1),
             "built_at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    out = os.path.join(root, agent.IMAGE.lstrip("/"))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(image, f, indent=1, sort_keys=True)
    return image


def main(argv):
    if len(argv) < 2:
        print("usage: node_bake.py SPEC [--root DIR] [--state DIR]", file=sys.stderr)
        return 2
    root = argv[argv.index("--root") + 1] if "--root" in argv else "/"
    if "--state" in argv:  # the agent's working folder (default /var/lib/gpufleet)
        agent.STATE_DIR = argv[argv.index("--state") + 1]
    with open(argv[1]) as f:
        spec = json.load(f)
    # the archive sits beside the spec in the bundle, wherever the builder uploaded it
    spec["archive"] = os.path.join(os.path.dirname(os.path.abspath(argv[1])), spec["archive"])
    try:
        image = bake(spec, root)
    except (agent.AgentError, OSError, ValueError, KeyError) as e:
        print(f"bake: {e}", file=sys.stderr, flush=True)
        return 1
    print(f"baked {len(image['states'])} formula(s) of state tree {image['tree'][:12]}: {image['changed']} changed "
          f"in {image['seconds']:.0f}s; {agent.IMAGE} written", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

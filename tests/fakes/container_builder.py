#!/usr/bin/env python3
"""A stand-in for `docker build` / `podman build` (no container engine runs here). It takes what
`gpufleet image build --container` runs, ``build -f DOCKERFILE --build-arg K=V... --iidfile F -t
NAME CONTEXT``, checks what the Dockerfile would need of it (its ARGs given, the ``BUNDLE`` folder
in the context with the bake spec and the bake mode it runs), prints step lines as BuildKit's
plain progress does, and writes the image ID to ``--iidfile`` as both tools do (``sha256:`` and
64 hex digits; here the digest of the bundle's bake spec, so a changed spec is a changed image).

``FAKE_BUILDER_FAIL=1`` fails the build as the engine does (an ERROR line, exit 1, no iidfile).
"""

import hashlib
import os
import re
import sys
from pathlib import Path


def main(argv):
    args = argv[1:]
    assert args[0] == "build", args
    opts, build_args, rest = {}, {}, args[1:]
    while rest[0].startswith("-"):
        flag, value, rest = rest[0], rest[1], rest[2:]
        if flag == "--build-arg":
            k, v = value.split("=", 1)
            build_args[k] = v
        else:
            opts[flag] = value
    (context,) = rest
    dockerfile = Path(opts["-f"]).read_text()
    declared = set(re.findall(r"^ARG (\w+)", dockerfile, re.M))
    if set(build_args) - declared:
        print(f"[Warning] One or more build-args {sorted(set(build_args) - declared)} were not consumed")
    bundle = Path(context) / build_args.get("BUNDLE", "bundle")
    print(f"#1 [internal] load build definition from {os.path.basename(opts['-f'])}")
    print(f"#2 [internal] load metadata for {build_args.get('CUDA_IMAGE', '?')}")
    if os.environ.get("FAKE_BUILDER_FAIL") or not (bundle / "bake.json").exists() or not (bundle / "node_bake.py").exists():
        print(f"ERROR: failed to solve: failed to compute cache key: \"/{bundle.name}\": not found")
        return 1
    print("#5 [3/4] COPY bundle/ /tmp/gpufleet/")
    print("#6 [4/4] RUN python3 /tmp/gpufleet/node_bake.py /tmp/gpufleet/bake.json")
    print(f"#7 naming to {opts['-t']} done")
    Path(opts["--iidfile"]).write_text("sha256:" + hashlib.sha256((bundle / "bake.json").read_bytes()).hexdigest())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

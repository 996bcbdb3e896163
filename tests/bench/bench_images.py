"""A node from a golden image against one from stock, on the local test rack.

Target (issue 32): a node booted from a baked image is ready at least 5x faster than one from
stock. Both run the same launch template user data against moto's S3 (the pool's bucket) on the
rack's bridge: the stock host installs Salt from the site's mirror and applies the pool's
formulas; the image's host (which baked the image with `gpufleet image plan`'s bundle first)
applies only its node states. Both times and their ratio are printed, from one run; the bake
itself and a boot from a stale image are printed too. Needs root (see tests/rack/rack.py).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
TARGET = 5.0


def main() -> int:
    from tests.integration import golden, localrack
    from tests.integration.localrack import active
    from tests.integration.test_cloud_nodes_e2e import _serve, _wheelhouse

    from fakes.aws import Server

    localrack.fresh_hosts("salt-call")
    wheels = _serve(_wheelhouse())
    bridge = active().gateway  # GPUFLEET_RACK_ID's rack (0 unless told)
    for i in range(1, localrack.HOSTS + 1):
        (active().etc(i) / "pip.conf").write_text(
            f"[global]\nno-index = true\nfind-links = http://{bridge}:{wheels.server_address[1]}/\n"
            f"trusted-host = {bridge}\n")
    moto = Server(host=bridge).start()
    import os

    for k, v in {"AWS_ENDPOINT_URL": moto.url, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}.items():
        os.environ[k] = v
    try:
        with tempfile.TemporaryDirectory() as tmp:
            os.environ["XDG_DATA_HOME"] = tmp
            out = golden.run(moto, Path(tmp))
    finally:
        moto.stop()
        wheels.shutdown()
        localrack.down()
    ok = all(out[k]["ok"] for k in ("from_image", "from_stock", "from_stale"))
    ratio = out["from_stock_s"] / out["from_image_s"]
    print(f"bake (Salt installed, the pool's formulas applied, the builder cleaned): {out['bake_s']:.1f} s")
    print(f"node from stock: {out['from_stock_s']:.1f} s ({out['from_stock']['changed']} changes)")
    print(f"node from the golden image: {out['from_image_s']:.1f} s ({out['from_image']['changed']} changes)")
    print(f"node from a stale image: {out['from_stale_s']:.1f} s ({out['from_stale']['changed']} changes)")
    print(f"from the image {ratio:.1f}x faster than from stock (target >= {TARGET:.0f}x); every node ok: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

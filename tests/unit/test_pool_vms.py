"""Names that do not collide: a cloud's reader of a pool's VMs is ``clouds/<cloud>/pool_vms.py``, one
shape for every cloud (``clouds/pool_vms.py``), not a ``nodes`` module beside the node kinds
(``gpufleet.nodes``); and ``KINDS`` is the node kinds' list alone."""

import importlib
import re

import pytest

from gpufleet.providers import CLOUDS

from conftest import ROOT

READERS = {"aws": ("FleetNodes", "FleetNodesProvider"), "gcp": ("BulkInstances", "BulkInstancesProvider"),
           "azure": ("ScaleSetNodes", "ScaleSetNodesProvider")}


def test_no_cloud_module_is_named_like_the_node_kinds():
    clashing = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "infra" / "clouds").rglob("nodes.py"))
    assert not clashing, clashing


def test_kinds_names_the_node_kinds_alone():
    declared = sorted(f"{p.relative_to(ROOT)}:{n}" for p in (ROOT / "infra").rglob("*.py")
                      for n, line in enumerate(p.read_text().splitlines(), 1) if re.match(r"\s*KINDS\s*=", line))
    assert [d.split(":")[0] for d in declared] == ["infra/nodes/__init__.py"], declared


@pytest.mark.parametrize("provider", CLOUDS)
def test_every_clouds_pool_vms_reader_has_the_one_shape(provider):
    from gpufleet.clouds.pool_vms import PoolVms, PoolVmsProvider

    m = importlib.import_module(f"gpufleet.clouds.{provider}.pool_vms")
    resource, reader = READERS[provider]
    assert issubclass(getattr(m, resource), PoolVms) and issubclass(getattr(m, reader), PoolVmsProvider)
    assert getattr(m, resource).KIND == m.KIND and m.KIND.endswith(":gpufleet:" + resource)


def test_a_reader_reads_on_create_refresh_and_a_watched_change_and_deletes_nothing():
    from gpufleet.clouds.pool_vms import PoolVmsProvider

    calls = []

    class Reader(PoolVmsProvider):
        SOURCE = "set_id"
        WATCHED = ("set_id", "count")

        def vms(self, props, *, wait):
            calls.append(wait)
            return {"node_ids": [f"{props['set_id']}/{i}" for i in range(props["count"])]}

    r = Reader()
    made = r.create({"set_id": "s1", "count": 2, "other": "x"})
    assert made.id == "s1#nodes" and made.outs["node_ids"] == ["s1/0", "s1/1"] and made.outs["other"] == "x"
    assert r.read("s1#nodes", {"set_id": "s1", "count": 1}).outs["node_ids"] == ["s1/0"]
    assert calls == [True, False]  # create waits for the VMs; a refresh reads them as they are
    unwatched = r.diff("s1#nodes", {"set_id": "s1", "count": 2, "other": "x"}, {"set_id": "s1", "count": 2, "other": "y"})
    assert unwatched.changes is False
    assert r.diff("s1#nodes", {"set_id": "s1", "count": 2}, {"set_id": "s1", "count": 3}).changes is True
    assert r.delete("s1#nodes", {"set_id": "s1", "count": 2}) is None

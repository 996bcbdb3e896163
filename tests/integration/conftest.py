"""The local test rack as a module's fixture: four fresh hosts up for the module, taken down after it
(a module that needs more of them, as test_cloud_nodes_e2e does, defines its own)."""

import pytest

from tests.integration import localrack


@pytest.fixture(scope="module")
def rack(tmp_path_factory):
    hosts = localrack.fresh_hosts("salt-ssh")
    yield localrack.rack_env(tmp_path_factory, hosts)
    localrack.down()

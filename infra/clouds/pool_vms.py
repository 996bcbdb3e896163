"""What every cloud's reader of a pool's VMs shares: a Pulumi dynamic resource whose outputs are the
VMs of one pool (ids, addresses), read from the cloud's API once what makes them exists (AWS: an
instant EC2 Fleet, Azure: a scale set; on GCP the resource makes them too, by bulkInsert). Each
cloud's ``pool_vms`` module says how to read its VMs (``PoolVmsProvider.vms``); this one says what
Pulumi's create, read, diff, update and delete do with that."""

from __future__ import annotations

import abc

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, ResourceProvider, UpdateResult


class PoolVmsProvider(ResourceProvider, abc.ABC):
    """Reads only: create and update read the VMs (waiting for them), read (`refresh`) reads them as they
    are, a change of a ``WATCHED`` input reads them again, and delete deletes nothing: the VMs go with
    the resource that made them. The id is the ``SOURCE`` input's (what made the VMs) + ``#nodes``."""

    SOURCE: str = ""
    WATCHED: tuple[str, ...] = ()

    @abc.abstractmethod
    def vms(self, props: dict, *, wait: bool) -> dict:
        """The pool's VMs as the resource's outputs; raises (the update fails) when they are not all there,
        after waiting for them if ``wait``."""

    def create(self, props: dict) -> CreateResult:
        return CreateResult(id_=f"{props[self.SOURCE]}#nodes", outs={**props, **self.vms(props, wait=True)})

    def read(self, id_: str, props: dict) -> ReadResult:
        return ReadResult(id_, {**props, **self.vms(props, wait=False)})

    def diff(self, id_: str, olds: dict, news: dict) -> DiffResult:
        changed = [k for k in self.WATCHED if olds.get(k) != news.get(k)]
        return DiffResult(changes=bool(changed), replaces=[])

    def update(self, id_: str, olds: dict, news: dict) -> UpdateResult:
        return UpdateResult(outs={**news, **self.vms(news, wait=True)})

    def delete(self, id_: str, props: dict) -> None:
        return None


class PoolVms(Resource):
    """The VMs of one pool (outputs: ``OUTPUTS``). ``KIND`` is the type `plan` routes it by to the
    cloud's mocks (a dynamic resource's own Pulumi type is the same for all)."""

    KIND: str = ""
    OUTPUTS: tuple[str, ...] = ("node_ids", "private_ips", "public_ips")

    node_ids: pulumi.Output[list]
    private_ips: pulumi.Output[list]
    public_ips: pulumi.Output[list | None]

    def __init__(self, provider: PoolVmsProvider, name: str, props: dict, opts: pulumi.ResourceOptions | None):
        super().__init__(provider, name, {"gpufleet_kind": self.KIND, **props, **{k: None for k in self.OUTPUTS}},
                         opts)

"""The AMI of a gpufleet image name, looked up once per cluster and region and kept in its Pulumi
stack's state.

A gpufleet image name (``ubuntu-22.04``) is an owner and a name pattern (``rules.IMAGES``); the
newest AMI matching it changes whenever Canonical publishes one. Looked up at every `up` (an
``aws.ec2.get_ami(most_recent=True)`` invoke), a later `up` would change the launch templates by
itself. ``PinnedAmi`` is a Pulumi dynamic resource whose creation looks the AMI up (DescribeImages,
the newest CreationDate, as aws_ami's ``most_recent`` picks it) and whose state keeps it: the same
owner, pattern and region read as no change, so every later `up` keeps the AMI of the first. There
is one per (cluster, region, image name) (``program.build_region``): a pool added later boots the
AMI the others boot. ``refresh`` (`up --refresh-image`) looks it up again on purpose: the templates
then name the newest, for the nodes launched from then on (a fleet names its template's default
version, so running nodes keep theirs). An AMI id (``ami-...``) or a golden image is used as it
is, without this.
"""

from __future__ import annotations

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, ResourceProvider

from gpufleet.clouds.aws.sdk import load

KIND = "aws:gpufleet:PinnedAmi"  # how `plan` routes it to the AWS mocks
LOOKUP = ("region", "owner", "pattern")  # what the AMI was looked up by: a change is a new lookup


def newest(props: dict, api=None) -> str:
    api = api or load("api").AwsApi()  # plan needs no boto3: loaded here
    return api.newest_image(props["region"], props["owner"], props["pattern"])


class PinnedAmiProvider(ResourceProvider):
    def create(self, props: dict) -> CreateResult:
        ami = newest(props)
        return CreateResult(id_=ami, outs={**props, "image_id": ami})

    def diff(self, id_: str, olds: dict, news: dict) -> DiffResult:
        # asked to look again (``refresh``), or looked up by something else; a refresh recorded by an
        # earlier `up` is no reason to look again
        changed = [k for k in LOOKUP if olds.get(k) != news.get(k)] + (["refresh"] if news.get("refresh") else [])
        return DiffResult(changes=bool(changed), replaces=changed)

    def read(self, id_: str, props: dict) -> ReadResult:
        return ReadResult(id_, props)  # the AMI recorded, never looked up again

    def delete(self, id_: str, props: dict) -> None:
        return None  # a lookup: nothing to delete


class PinnedAmi(Resource):
    """The newest AMI of ``owner`` named like ``pattern`` in ``region`` when first created (output ``image_id``)."""

    image_id: pulumi.Output[str]

    def __init__(self, name: str, *, region: str, owner: str, pattern: str, refresh: bool = False,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(PinnedAmiProvider(), name, dict(gpufleet_kind=KIND, region=region, owner=owner,
                                                         pattern=pattern, refresh=refresh, image_id=None), opts)

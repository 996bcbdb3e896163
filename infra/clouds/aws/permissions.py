"""The IAM actions gpufleet's own AWS calls need, by what they are for: the deployer's policy for
everything but the stack's resources themselves (Pulumi's AWS provider creates those and needs
their create permissions besides). Each action is named as IAM names it for the boto3 call that
needs it (docs.aws.amazon.com/service-authorization/latest/reference, 2026): ``api`` and
``objects`` in this folder make the calls, and tests/unit/clouds/aws/test_permissions.py runs the commands
against a moto server that enforces IAM with exactly these policies, and with each action left out.
"""

from __future__ import annotations

# `status`, `reap` (dry run), `registry rebuild`, the search after `down`: who am I, which regions,
# and every kind of tagged resource (api.LISTERS), golden images included (status and reap show them)
READ = ("sts:GetCallerIdentity", "ec2:DescribeRegions", "ec2:DescribeInstances", "ec2:DescribeVolumes",
        "ec2:DescribeNetworkInterfaces", "ec2:DescribeSecurityGroups", "ec2:DescribePlacementGroups",
        "ec2:DescribeAddresses", "ec2:DescribeNatGateways", "ec2:DescribeLaunchTemplates", "ec2:DescribeKeyPairs",
        "ec2:DescribeSubnets", "ec2:DescribeRouteTables", "ec2:DescribeInternetGateways", "ec2:DescribeVpcs",
        "fsx:DescribeFileSystems", "ec2:DescribeFleets", "s3:ListAllMyBuckets", "s3:GetBucketTagging",
        "ec2:DescribeImages")
# `reap --yes` and `down`'s sweep: each kind's deletion (api.AwsApi._delete_one), a stack bucket's
# object versions first; an expired golden image with its snapshots
DELETE = ("ec2:TerminateInstances", "ec2:DeleteVolume", "ec2:DetachNetworkInterface", "ec2:DeleteNetworkInterface",
          "ec2:DeleteSecurityGroup", "ec2:DeletePlacementGroup", "ec2:DisassociateAddress", "ec2:ReleaseAddress",
          "ec2:DeleteNatGateway", "ec2:DeleteLaunchTemplate", "ec2:DeleteKeyPair", "ec2:DeleteSubnet",
          "ec2:DisassociateRouteTable", "ec2:DeleteRouteTable", "ec2:DetachInternetGateway",
          "ec2:DeleteInternetGateway", "ec2:DeleteVpc", "fsx:DeleteFileSystem", "ec2:DeleteFleets", "s3:ListBucketVersions",
          "s3:DeleteObjectVersion", "s3:DeleteBucket", "ec2:DeregisterImage", "ec2:DeleteSnapshot")
# `check` and the preflight of `up`: the vCPU quotas and the vCPUs running
QUOTAS = ("servicequotas:GetServiceQuota", "servicequotas:GetAWSDefaultServiceQuota", "ec2:DescribeInstances",
          "ec2:DescribeInstanceTypes")
# `up`, `configure` and `verify` publish to the stack's bucket and read the nodes' statuses (objects.Store)
PUBLISH = ("s3:PutObject", "s3:GetObject", "s3:ListBucket")
# `capacity find`: the account's Capacity Reservations and the Capacity Block offerings
CAPACITY = ("ec2:DescribeCapacityReservations", "ec2:DescribeCapacityBlockOfferings")
# `image list` and `image delete`: the AMIs by tag, then each deregistered with its snapshots
# (`image build` runs Packer, whose own policy is the amazon plugin's documented one)
IMAGES = ("ec2:DescribeImages", "ec2:DeregisterImage", "ec2:DeleteSnapshot")


def policy(*groups: tuple[str, ...]) -> dict:
    """An IAM policy document allowing the actions of ``groups`` (default: all) on every resource."""
    actions = sorted({a for g in (groups or (READ, DELETE, QUOTAS, PUBLISH, CAPACITY, IMAGES)) for a in g})
    return {"Version": "2012-10-17", "Statement": [{"Sid": "GpufleetDeployer", "Effect": "Allow", "Action": actions,
                                                     "Resource": "*"}]}

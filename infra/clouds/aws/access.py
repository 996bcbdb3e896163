"""Reaching an AWS node without port 22 open: SSH through AWS Systems Manager Session Manager.

OpenSSH runs Session Manager as its ProxyCommand, with the instance id as the host name, in the
form AWS documents ("Allow and control permissions for SSH connections through Session Manager",
https://docs.aws.amazon.com/systems-manager/latest/userguide/session-manager-getting-started-enable-ssh-connections.html,
read 2026-11)::

    host i-* mi-*
        ProxyCommand sh -c "aws ssm start-session --target %h --document-name AWS-StartSSHSession --parameters 'portNumber=%p'"

with the node's region added (``--region``), so the operator's default region does not matter,
and every word shell-quoted (``base.command_line``); the instance id and the region come from the
registry (in team mode, the team's store), so each is checked against its format first.
What it takes:

- on the node: sshd and SSM Agent 2.3.672.0 or later (Ubuntu's and the Deep Learning AMIs carry
  it), an instance role allowed what Session Manager needs of it and nothing more (``NODE_POLICY``,
  inline: ``components.GpuNodePool`` adds it when ``access.via`` is ``cloud``) and a way out to the
  Systems Manager endpoints (the cluster's NAT gateway, or VPC endpoints in a VPC of your own);
- on the operator's machine: the AWS CLI and the Session Manager plugin 1.1.23.0 or later, and
  ``ssm:StartSession`` on the instance and on the ``AWS-StartSSHSession`` document.

SSH itself still authenticates with the stack's key: Session Manager only carries the bytes.
"""

from __future__ import annotations

import re

from gpufleet.clouds.base import HOST, PORT, SshRoute, Tool, command_line
from gpufleet.netnames import matching

SOURCE = ("https://docs.aws.amazon.com/systems-manager/latest/userguide/"
          "session-manager-getting-started-enable-ssh-connections.html")
# What SSM Agent needs of the node's role to take Session Manager sessions: register the instance and
# open the control and data channels of Message Gateway Service. These are AWS's own policy for it,
# AWSCloud9SSMInstanceProfile, and the "minimal Session Manager permissions" of "Step 2: Verify or add
# instance permissions for Session Manager" (docs.aws.amazon.com/systems-manager/latest/userguide/
# session-manager-getting-started-instance-profile.html and aws-managed-policy/latest/reference/
# AWSCloud9SSMInstanceProfile.html, read 2026-11); the operations are the agent's own
# (aws/amazon-ssm-agent agent/session/service/api.go). AmazonSSMManagedInstanceCore, used before,
# also grants ssm:GetParameter(s) on every parameter of the account, documents and associations.
# (Session logs to S3 or KMS-encrypted sessions, if the account's preferences ask for them, need
# s3:GetEncryptionConfiguration or kms:Decrypt added to the role: it is named for its pool.)
NODE_POLICY = {"Version": "2012-10-17", "Statement": [{
    "Sid": "SessionManager", "Effect": "Allow", "Resource": "*",
    "Action": ["ssm:UpdateInstanceInformation", "ssmmessages:CreateControlChannel", "ssmmessages:CreateDataChannel",
               "ssmmessages:OpenControlChannel", "ssmmessages:OpenDataChannel"]}]}
TOOLS = (
    Tool("aws", "install the AWS CLI v2: https://docs.aws.amazon.com/cli/latest/userguide/getting-started-install.html"),
    Tool("session-manager-plugin", "install the Session Manager plugin for the AWS CLI: https://docs.aws.amazon.com/"
         "systems-manager/latest/userguide/session-manager-working-with-install-plugin.html"),
)


# an EC2 instance id: i- and 8 or 17 hex digits (EC2 User Guide, "Resource IDs", 2026); a region:
# two letters, words, a number (us-east-1, us-gov-west-1, ap-southeast-4, eu-isoe-west-1)
INSTANCE_ID = re.compile(r"i-(?:[0-9a-f]{8}|[0-9a-f]{17})")
REGION = re.compile(r"[a-z]{2}(?:-[a-z]+)+-[0-9]{1,2}")


def proxy_command(region: str) -> str:
    """AWS's documented ProxyCommand (``%h``: the instance id, ``%p``: the port), in ``region``."""
    inner = command_line("aws", "ssm", "start-session", "--target", HOST, "--document-name", "AWS-StartSSHSession",
                         "--parameters", ("portNumber=", PORT), "--region", region)
    return command_line("sh", "-c", inner)


def host_key_alias(node, *, cluster: str) -> str | None:
    """The name the node's host key is filed under: its instance id (unique: EC2 never reuses one)."""
    where = f"the registry's record of {cluster} node {node.pool}-{node.idx}"
    if node.node_id is None:
        return None
    return matching(node.node_id, INSTANCE_ID, "instance id", "an EC2 instance id (i-0123456789abcdef0)", where)


def ssh_route(node, *, cluster: str, stack) -> SshRoute:
    """Session Manager to the node's instance (``node.node_id``: ``i-...``) in its region; the instance
    id is also the alias its host key is filed under (``host_key_alias``)."""
    where = f"the registry's record of {cluster} node {node.pool}-{node.idx}"
    host_key_alias(node, cluster=cluster)
    matching(node.location, REGION, "region", "an AWS region (us-east-1)", where)
    return SshRoute("AWS Systems Manager Session Manager",
                    {"HostName": node.node_id, "Port": "22", "HostKeyAlias": node.node_id,
                     "ProxyCommand": proxy_command(node.location)}, TOOLS, SOURCE)

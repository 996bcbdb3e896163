"""Is there anything to authenticate to AWS with? boto3's own credential chain, no network call.

Every boto3 session of gpufleet is made by ``session``: what stops the chain from being read (a
profile that is not configured, an access key without its secret, a file that does not parse, a
configuration file that is a device or a pipe) is a CredentialsError (exit 2) saying which and how
to mend it, never botocore's own exception.
"""

import functools
import os
from pathlib import Path

import boto3
import botocore.session
from botocore.exceptions import BotoCoreError, ConfigParseError, PartialCredentialsError, ProfileNotFound

from gpufleet.clouds.aws.errors import CREDENTIAL_HINT
from gpufleet.errors import CredentialsError
from gpufleet.userfiles import SMALL_BYTES, check_file

# The files boto3 reads, and the variables that move them (boto3 docs, "Configuring credentials",
# read 2026-11)
FILES = (("AWS_CONFIG_FILE", "~/.aws/config", "the AWS config file"),
         ("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials", "the AWS credentials file"))


def session() -> boto3.session.Session:
    """A session whose configuration and credentials are read (boto3 keeps them; none at all is
    left to the caller: ``get_credentials()`` is None)."""
    for variable, default, what in FILES:
        try:
            check_file(Path(os.environ.get(variable) or default).expanduser(), what, SMALL_BYTES, variable=variable)
        except FileNotFoundError:
            pass
    try:
        core = botocore.session.get_session()
        core.register_component("data_loader", _models())
        s = boto3.session.Session(botocore_session=core)
        # boto3 adds its own data folder to the loader's search path once per session: once is enough
        paths = _models().search_paths
        paths[:] = list(dict.fromkeys(paths))
        s.get_credentials()
    except BotoCoreError as e:
        raise _unusable(e) from None
    return s


@functools.cache
def _models():
    """One loader of botocore's service models for the process: each session of its own would read and
    parse the models again (EC2's alone takes a quarter of a second); the models do not depend on the
    profile, the credentials or the endpoint, which each session still reads for itself."""
    return botocore.session.get_session().get_component("data_loader")


def _unusable(e: BotoCoreError) -> CredentialsError:
    """botocore's refusal to read the configuration, said with its cause and the way out."""
    if isinstance(e, ProfileNotFound):
        name = e.kwargs.get("profile")
        by = " (AWS_PROFILE)" if os.environ.get("AWS_PROFILE") == name else ""
        return CredentialsError("aws", f"aws: the profile {name!r}{by} is not configured",
                                "`aws configure list-profiles` lists the profiles there are: set AWS_PROFILE to one, "
                                "or unset it")
    if isinstance(e, PartialCredentialsError):
        missing = e.kwargs.get("cred_var")
        if e.kwargs.get("provider") == "env":
            given = next((v for v in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY") if v != missing), "")
            return CredentialsError("aws", f"aws: {given} is set without {missing}",
                                    f"set {missing} too, or unset {given} to use a profile")
        return CredentialsError("aws", f"aws: the credentials in {e.kwargs.get('provider')} lack {missing}",
                                CREDENTIAL_HINT)
    if isinstance(e, ConfigParseError):
        return CredentialsError("aws", f"aws: {e.kwargs.get('path')} cannot be parsed",
                                "it holds [profile] sections of `key = value` lines: mend it, or let `aws configure` "
                                "write it")
    return CredentialsError("aws", f"aws: the credentials cannot be read ({e})", CREDENTIAL_HINT)


def check() -> str:
    """Where boto3 finds credentials (environment, profiles, SSO, instance role)."""
    creds = session().get_credentials()
    if creds is None:
        raise CredentialsError("aws", "aws: no credentials found (environment, ~/.aws, SSO or instance role)",
                               CREDENTIAL_HINT)
    return creds.method or "found"

"""Is there anything to authenticate to Azure with? The Azure CLI's profile and the ARM_*
variables, no network call and no SDK."""

from __future__ import annotations

import json
import os
from pathlib import Path

from gpufleet.clouds.azure.errors import CREDENTIAL_HINT
from gpufleet.errors import CredentialsError
from gpufleet.userfiles import SMALL_BYTES, read_text

PLAN_SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"  # what `plan` renders the program with


def subscription() -> str | None:
    if os.environ.get("ARM_SUBSCRIPTION_ID"):
        return os.environ["ARM_SUBSCRIPTION_ID"]
    for sub in _profile().get("subscriptions", []):
        if sub.get("isDefault"):
            return sub.get("id")
    return None


def _profile() -> dict:
    """The Azure CLI's profile (its subscriptions; ``az login`` writes it), {} when there is none or
    it does not parse; one that is no regular file or is over its cap is FileRefused (exit 2)."""
    path = Path(os.environ.get("AZURE_CONFIG_DIR") or Path.home() / ".azure") / "azureProfile.json"
    try:
        data = json.loads(read_text(path, "the Azure CLI's profile", SMALL_BYTES, variable="AZURE_CONFIG_DIR",
                                    encoding="utf-8-sig"))
    except (FileNotFoundError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _service_principal() -> bool:
    """The ARM_* variables of a service principal or managed identity (what Pulumi's provider uses)."""
    return bool(all(os.environ.get(v) for v in ("ARM_CLIENT_ID", "ARM_TENANT_ID")) and (
        os.environ.get("ARM_CLIENT_SECRET") or os.environ.get("ARM_USE_MSI") or os.environ.get("ARM_USE_OIDC")))


def principal_type() -> str:
    """What ARM calls the deployer in a role assignment: ``ServicePrincipal`` for a service principal
    or a managed identity, else ``User``; the CLI profile says which for `az login`
    (``user.type``). A wrong one is refused (UnmatchedPrincipalType), and azure-native defaults to User."""
    if _service_principal():
        return "ServicePrincipal"
    subs = _profile().get("subscriptions", [])
    user = next((s.get("user") or {} for s in subs if s.get("isDefault")), {})
    return "ServicePrincipal" if user.get("type") == "servicePrincipal" else "User"


def check() -> str:
    sp = _service_principal()
    if not sp and subscription() is None:
        raise CredentialsError("azure", "azure: no Azure CLI login or service principal found", CREDENTIAL_HINT)
    if subscription() is None:
        raise CredentialsError("azure", "azure: no subscription is selected", "set ARM_SUBSCRIPTION_ID")
    return "service principal" if sp else "Azure CLI login"

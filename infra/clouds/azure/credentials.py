"""Is there anything to authenticate to Azure with? The Azure CLI's profile and the ARM_*
variables, no network call and no SDK."""

from __future__ import annotations

import json
import os
from pathlib import Path

from gpufleet.clouds.azure.errors import CREDENTIAL_HINT
from gpufleet.errors import CredentialsError

PLAN_SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"  # what `plan` renders the program with


def subscription() -> str | None:
    if os.environ.get("ARM_SUBSCRIPTION_ID"):
        return os.environ["ARM_SUBSCRIPTION_ID"]
    profile = Path(os.environ.get("AZURE_CONFIG_DIR") or Path.home() / ".azure") / "azureProfile.json"
    if profile.exists():
        try:
            data = json.loads(profile.read_text(encoding="utf-8-sig"))
        except ValueError:
            return None
        for sub in data.get("subscriptions", []):
            if sub.get("isDefault"):
                return sub.get("id")
    return None


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
    profile = Path(os.environ.get("AZURE_CONFIG_DIR") or Path.home() / ".azure") / "azureProfile.json"
    try:
        subs = json.loads(profile.read_text(encoding="utf-8-sig")).get("subscriptions", [])
    except (OSError, ValueError):
        return "User"
    user = next((s.get("user") or {} for s in subs if s.get("isDefault")), {})
    return "ServicePrincipal" if user.get("type") == "servicePrincipal" else "User"


def check() -> str:
    sp = _service_principal()
    if not sp and subscription() is None:
        raise CredentialsError("azure", "azure: no Azure CLI login or service principal found", CREDENTIAL_HINT)
    if subscription() is None:
        raise CredentialsError("azure", "azure: no subscription is selected", "set ARM_SUBSCRIPTION_ID")
    return "service principal" if sp else "Azure CLI login"

"""The api-versions ARM serves for each Compute resource type, as the vendors' own code states them,
so the ARM fake refuses a version a type does not have as ARM does (HTTP 400
``NoRegisteredProviderFound``: "No registered resource provider found for location ... and API
version ... for type ...", the location left out here).

Compute's types are versioned in families of their own (azure-rest-api-specs,
specification/compute/resource-manager/Microsoft.Compute: ComputeRP, DiskRP, GalleryRP), so a
version of one family is unknown to another's types (galleries/images/versions has no 2024-07-01).
Two sources, joined:

* azure-mgmt-compute's operations (the installed release): each ``build_*_request`` names its URL
  template and its api-version;
* pulumi-azure-native's resource classes (the installed release): "Uses Azure REST API version X"
  and "Other available API versions: ...", for the types gpufleet creates, reads or deletes by id.

Types of other namespaces (Network, Storage ...) are not listed here: any version is served.
"""

from __future__ import annotations

import functools
import inspect
import re

# ARM type -> the pulumi-azure-native compute class that makes it
PULUMI = {
    "microsoft.compute/virtualmachinescalesets": "VirtualMachineScaleSet",
    "microsoft.compute/virtualmachines": "VirtualMachine",
    "microsoft.compute/disks": "Disk",
    "microsoft.compute/proximityplacementgroups": "ProximityPlacementGroup",
    "microsoft.compute/sshpublickeys": "SshPublicKey",
    "microsoft.compute/capacityreservationgroups": "CapacityReservationGroup",
    "microsoft.compute/galleries": "Gallery",
    "microsoft.compute/galleries/images": "GalleryImage",
    "microsoft.compute/galleries/images/versions": "GalleryImageVersion",
}


def resource_type(path: str) -> str | None:
    """``microsoft.compute/galleries/images/versions`` of a resource's path (or URL template), or
    None when the path names no single resource."""
    if "/providers/" not in path:
        return None
    ns, *rest = path.split("?")[0].rstrip("/").lower().split("/providers/")[-1].split("/")
    if not rest or len(rest) % 2:
        return None
    return "/".join([ns, *rest[0::2]])


@functools.cache
def versions() -> dict[str, frozenset[str]]:
    """ARM type -> the api-versions it is served under."""
    import pulumi_azure_native.compute as pulumi_compute
    from azure.mgmt.compute.operations import _operations as sdk

    out: dict[str, set[str]] = {}
    for name, build in vars(sdk).items():
        if not (name.startswith("build_") and name.endswith("_request")):
            continue
        src = inspect.getsource(build)
        url, version = re.search(r'_url = "([^"]+)"', src), re.search(r'"api-version", "([^"]+)"', src)
        kind = resource_type(url[1]) if url and url[1].endswith("}") else None
        if kind and version:
            out.setdefault(kind, set()).add(version[1])
    for kind, cls in PULUMI.items():
        src = inspect.getsource(getattr(pulumi_compute, cls))
        default = re.search(r"Uses Azure REST API version (\d{4}-\d{2}-\d{2})", src)
        others = re.search(r"Other available API versions: ([\d, -]+)\.", src)
        out.setdefault(kind, set()).update([default[1]] + (others[1].split(", ") if others else []))
    return {k: frozenset(v) for k, v in out.items()}


def refusal(path: str, version: str | None) -> str | None:
    """ARM's message when ``path``'s type is not served under ``version``; None when it is (or is
    not a Compute type listed here)."""
    kind = resource_type(path)
    served = versions().get(kind) if kind else None
    if not served or version in served:
        return None
    return (f"No registered resource provider found for API version '{version}' for type '{kind.partition('/')[2]}'. "
            f"The supported api-versions are '{', '.join(sorted(served))}'.")

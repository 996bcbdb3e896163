"""What Azure takes as a tag, for the values gpufleet writes into its ``gpufleet:*`` tags (no SDK).

"Use tags to organize your Azure resources", Limitations (learn.microsoft.com/azure/
azure-resource-manager/management/tag-resources#limitations, read 2026-11): a tag name of at most
512 characters (128 on storage accounts) and a value of at most 256; a name may not contain
``< > % & \\ ? /``.
"""

from __future__ import annotations

NAME_MAX = 128  # the storage account's, the narrowest of the resources gpufleet tags (512 elsewhere)
VALUE_MAX = 256
NOT_IN_NAMES = "<>%&\\?/"


def tag_problems(tags: dict[str, str]) -> list[tuple[str, str]]:
    """(tag key, what Azure would refuse in it) for each of ``tags``."""
    out = []
    for key, value in tags.items():
        if len(key) > NAME_MAX:
            out.append((key, f"azure tag names take at most {NAME_MAX} characters: {key[:40]}... would be {len(key):,}"))
        if bad := sorted({c for c in key if c in NOT_IN_NAMES}):
            out.append((key, f"azure tag names may not hold {' '.join(NOT_IN_NAMES)}: {key} has "
                             + ", ".join(map(repr, bad))))
        if len(value) > VALUE_MAX:
            out.append((key, f"azure tags take at most {VALUE_MAX} characters: {key} would be {len(value):,}"))
    return out

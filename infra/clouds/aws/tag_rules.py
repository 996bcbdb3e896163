"""What AWS takes as a tag, for the values gpufleet writes into its ``gpufleet:*`` tags (no SDK).

AWS's "Tag naming limits and requirements" (docs.aws.amazon.com/tag-editor/latest/userguide/
tagging.html, read 2026-11), as the EC2 and EFS API references state them for ``Tag``: a key of
1-128 and a value of 0-256 Unicode characters, of the pattern ``[\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]*``
(letters, separators such as spaces, numbers, and ``_ . : / = + - @``); neither may begin with
``aws:``, which AWS keeps for its own tags.
"""

from __future__ import annotations

import unicodedata

KEY_MAX, VALUE_MAX = 128, 256
PUNCTUATION = "_.:/=+-@"
RESERVED = "aws:"


def tag_problems(tags: dict[str, str]) -> list[tuple[str, str]]:
    """(tag key, what AWS would refuse in it) for each of ``tags``."""
    out = []
    for key, value in tags.items():
        for text, most, what in ((key, KEY_MAX, "keys"), (value, VALUE_MAX, "values")):
            if len(text) > most:
                out.append((key, f"aws tag {what} take at most {most} characters: {key} would be {len(text):,}"))
            elif bad := sorted({c for c in text if not _allowed(c)}):
                out.append((key, f"aws tags take letters, digits, spaces and {' '.join(PUNCTUATION)}: {key} has "
                                 + ", ".join(map(repr, bad[:8]))))
            elif text.lower().startswith(RESERVED):
                out.append((key, f"aws tag {what} may not begin with {RESERVED!r}"))
    return out


def _allowed(c: str) -> bool:
    return unicodedata.category(c)[0] in "LZN" or c in PUNCTUATION

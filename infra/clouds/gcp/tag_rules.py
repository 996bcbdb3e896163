"""What GCP takes as a label, for the values gpufleet writes into its ``gpufleet-*`` labels (no SDK),
checked as ``tags.labels`` writes them: the stack's value lowercased and escaped, before the cut to
63 characters, so that no label is shortened into another's value unsaid.

"Requirements for labels" (cloud.google.com/compute/docs/labeling-resources, read 2026-11): keys
of 1-63 and values of 0-63 characters; lowercase letters, digits, ``_`` and ``-``, international
characters allowed; a key begins with a lowercase letter or an international character.
"""

from __future__ import annotations

from gpufleet.clouds.gcp.tags import label_key, written
from gpufleet.clouds.tags import LABEL_MAX


def tag_problems(tags: dict[str, str]) -> list[tuple[str, str]]:
    """(tag key, what GCP would refuse in its label) for each of ``tags``."""
    out = []
    for tag, value in tags.items():
        key, label = label_key(tag), written(tag, value)
        if not (0 < len(key) <= LABEL_MAX and _letter(key[0]) and all(map(_allowed, key))):
            out.append((tag, f"{key} is not a gcp label key (1-{LABEL_MAX} lowercase letters, digits, _ and -, "
                             "beginning with a letter)"))
        if len(label) > LABEL_MAX:
            shown = label if len(label) <= 100 else label[:60] + "..."
            out.append((tag, f"gcp labels take at most {LABEL_MAX} characters: {key} would be {len(label):,} ({shown})"))
        elif bad := sorted({c for c in label if not _allowed(c)}):
            out.append((tag, f"gcp labels take lowercase letters, digits, _ and -: {key} has "
                             + ", ".join(map(repr, bad[:8]))))
    return out


def _letter(c: str) -> bool:
    """A lowercase letter, or an international one without case (\\p{Ll} or \\p{Lo})."""
    return c.islower() or (c.isalpha() and not c.isupper())


def _allowed(c: str) -> bool:
    return _letter(c) or c.isdigit() or c in "_-"

"""Name matching shared by every lookup of the knowledge: GPU, OS and instance-type names.

Users type names the way their tools print them: ``h100 sxm``, ``NVIDIA H100 80GB HBM3``,
``rtx_4090``. A name matches when it equals a known name after :func:`normalize`; otherwise the
error offers the nearest known names.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping

_IGNORED = re.compile(r"[\s\-_]+")


def normalize(name: str) -> str:
    """Case-insensitive, spaces/hyphens/underscores ignored, an optional ``NVIDIA`` prefix dropped."""
    key = _IGNORED.sub("", name.strip().lower())
    if key.startswith("nvidia") and len(key) > len("nvidia"):
        key = key[len("nvidia") :]
    return key


def nearest(query: str, index: Mapping[str, str], n: int = 3) -> list[str]:
    """The canonical names whose keys are closest to ``query``, best first, no repeats.

    ``index`` maps normalized keys (names, aliases) to canonical names. Keys that start with the
    query come first (``H100`` -> the H100 forms), then close spellings (``A10Q`` -> ``A10G``).
    """
    key = normalize(query)
    ranked = [index[k] for k in sorted(index) if key and k.startswith(key) and k != key]
    ranked += [index[k] for k in difflib.get_close_matches(key, list(index), n=n + 5, cutoff=0.5)]
    out: list[str] = []
    for name in ranked:
        if name not in out:
            out.append(name)
    return out[:n]

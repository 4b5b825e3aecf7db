"""What ``install.cache`` means: where the cache lives between runs, and ``auto``'s rule that a
part which cannot start is off with a one-line reason, never a failed run.
"""

from __future__ import annotations

import os
from pathlib import Path

from provision.errors import ProvisionError


def default_root() -> Path:
    """Where the cache lives between runs: the system's cache dir for root, XDG's otherwise."""
    if os.geteuid() == 0:
        return Path("/var/cache/provision")
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "provision"


def _one_line(exc: BaseException) -> str:
    text = exc.reason() if isinstance(exc, ProvisionError) else str(exc)
    return (text.splitlines() or [type(exc).__name__])[0][:200]

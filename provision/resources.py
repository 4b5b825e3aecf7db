"""Where the static content (playbooks/, templates/) lives.

One lookup serves both layouts: an installed wheel carries the folders inside the package as
``provision/_content/<name>`` (see pyproject's force-include); a source checkout has them at the
repository's top level. Nothing else in the package may compute these paths.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from provision.errors import OperationFailed

ContentName = Literal["playbooks", "templates"]

_PACKAGE_DIR = Path(__file__).resolve().parent


def content_dir(name: ContentName) -> Path:
    for candidate in (_PACKAGE_DIR / "_content" / name, _PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise OperationFailed(
        f"the {name}/ folder that ships with provision is missing",
        "reinstall provision (pip install --force-reinstall provision)",
    )


def playbooks_dir() -> Path:
    return content_dir("playbooks")


def templates_dir() -> Path:
    return content_dir("templates")

"""Run ids: the one form provision gives a run (``YYYYMMDD-HHMMSS-xxxx``, UTC, 4 random hex digits).

A run id names local paths (``.provision/runs/<id>/``, ``inventory/ec2-<id>.yml``) and cloud
tags, so every id read back from a tag or the command line is checked against the same form.
"""

from __future__ import annotations

import os
import re
from datetime import datetime, timezone

from provision.errors import BadInput


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def new_run_id(now: datetime | None = None) -> str:
    return f"{(now or utcnow()).strftime('%Y%m%d-%H%M%S')}-{os.urandom(2).hex()}"


# The only form new_run_id makes. A run id names paths (.provision/runs/<id>/, inventory/ec2-<id>.yml)
# and anyone who may tag in the account can write a `provision:run` tag, so every id read from a
# tag or from the command line is checked against this before it is used.
_RUN_ID = re.compile(r"[0-9]{8}-[0-9]{6}-[0-9a-f]{4}")


def is_run_id(text: str) -> bool:
    """True for an id of the form :func:`new_run_id` makes (and nothing else, no path parts)."""
    return _RUN_ID.fullmatch(text) is not None


def check_run_id(text: str, what: str = "--run") -> str:
    """A run id from the command line; bad input (exit 2) unless it is of the form provision makes."""
    if not is_run_id(text):
        raise BadInput(
            f"{what} {text[:80]!r} is not a provision run id",
            "give the id `provision cloud ls` shows, e.g. 20261130-020846-fc86",
        )
    return text

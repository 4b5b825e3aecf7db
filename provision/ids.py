"""Run ids: the one form provision gives a run (``YYYYMMDD-HHMMSS-xxxx``, UTC, 4 random hex digits).

One function for both kinds of run: ``provision up`` (its ``.provision/runs/<id>/`` and state
records) and a cloud launch (its tags, key pair and inventory names).

A run id names local paths (``.provision/runs/<id>/``, ``inventory/ec2-<id>.yml``) and cloud
tags, so every id read back from a tag or the command line is checked against the same form.
"""

from __future__ import annotations

import re
import secrets
from datetime import datetime, timezone

from provision.errors import BadInput


def new_run_id(now: datetime | None = None) -> str:
    """A new run id: ``now`` (default: the current time) in UTC to the second, then 2 random bytes.

    The random part keeps two runs started in the same second apart; it comes from the OS's
    CSPRNG (``secrets``) so that an id cannot be guessed ahead of its run.
    """
    t = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    return f"{t.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


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

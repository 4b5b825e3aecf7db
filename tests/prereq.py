"""A test's missing prerequisite (a tool the OS packages bring): a skip on a developer's machine,
a failure under `make test` / CI (PROVISION_REQUIRE_TESTHOSTS=1), where
tests/hosts/install-deps.sh installs it and a green run must mean the real part ran."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def missing(why: str) -> NoReturn:
    if os.environ.get("PROVISION_REQUIRE_TESTHOSTS") == "1":
        pytest.fail(f"{why} (tests/hosts/install-deps.sh installs it)")
    pytest.skip(why)

"""The stand-in host of tests/support/health_host.py as fixtures, for provision-health's tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests import fakenvml
from tests.support.health_host import make_host


@pytest.fixture(scope="module")
def nvml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fakenvml.build(tmp_path_factory.mktemp("fakenvml"))


@pytest.fixture
def host(tmp_path: Path, nvml_dir: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A healthy stand-in host and the spec that describes it."""
    return make_host(tmp_path, nvml_dir, monkeypatch)

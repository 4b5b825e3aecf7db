"""The JSON contracts of `provision cloud up|ls|down` on the docs site (reference/json.md,
docs/_hooks/refdocs/json_page.py) against the documents the commands print, on a moto server.

The site's build runs only the commands that need no cloud; these three need EC2, so their
described keys are held to real output here: every key the command prints is described, and
every described key is printed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cloud_fixtures import Aws, aws, moto_url, run_cli, up

__all__ = ["aws", "moto_url"]  # fixtures used by name

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docs" / "_hooks"))

from refdocs.json_page import CONTRACTS


def cloud(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code, out, err = run_cli(["cloud", *args, "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert isinstance(doc, dict)
    return doc


def assert_described(path: str, doc: dict[str, Any]) -> None:
    contract = CONTRACTS[path]
    assert list(doc) == list(contract.keys), path
    if contract.items is not None:
        key, described = contract.items
        assert doc[key], (path, key)
        for item in doc[key]:
            assert sorted(item) == sorted(described), (path, key)


def test_cloud_json_documents_are_as_described(aws: Aws, capsys: pytest.CaptureFixture[str]) -> None:
    code, launched, err = up(aws, capsys, "--instance-type", "g5.xlarge", "--new-key")  # the lifecycle test's launch
    assert code == 0, err
    assert_described("provision cloud up", launched)
    assert_described("provision cloud ls", cloud(capsys, "ls"))
    assert_described("provision cloud down", cloud(capsys, "down", "--run", launched["run"]))

"""A stack that leaves the driver alone (``driver: none``) is checked against the driver the probe
found, not waved through with "needs a host driver >= ..." (a real H200's probe).

tests/unit/fixtures/probe_h200_gvisor.json is `provision probe --local --json`'s facts from the first
GPU machine lent to this work (one H200, driver 580.159.04, Ubuntu 24.04, 2026-12-04;
docs/contributing/gpu-check.md). There, `plan --local --driver none` for torch 2.11.0+cu130 warned
that the torch needs driver >= 580.65.06 "and the driver is left alone", although the driver found
was newer.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from provision.errors import Unsatisfiable
from provision.model.facts import ProbedHost
from provision.stack.request import HostSpec, StackRequest
from provision.stack.resolution import Resolution
from provision.stack.resolve import resolve

H200 = ProbedHost.from_json(
    json.loads((Path(__file__).parents[1] / "fixtures" / "probe_h200_gvisor.json").read_text(encoding="utf-8"))
)


def _resolve(probed: ProbedHost, framework: str) -> Resolution:
    host = HostSpec.from_facts(probed)
    request = StackRequest.build(frameworks=[framework], driver="none", host_python="3.12")
    return resolve(request, host)


def test_the_real_h200_probe_names_its_driver() -> None:
    assert H200.driver_version == "580.159.04"
    assert HostSpec.from_facts(H200).gpu is not None


def test_a_driver_found_new_enough_is_a_reason_not_a_warning() -> None:
    got = _resolve(H200, "torch==2.11.0+cu130")
    codes = {w.code for w in got.warnings}
    assert "driver_unmanaged" not in codes
    reasons = " ".join(got.reasons)
    assert "580.159.04 >= 580.65.06" in reasons
    assert "the host has 580.159.04" in reasons


def test_a_driver_found_too_old_for_the_wheels_refuses_them() -> None:
    old = dataclasses.replace(H200, driver_version="535.274.02")
    with pytest.raises(Unsatisfiable, match=r"needs driver >= .*535\.274\.02 is older"):
        _resolve(old, "torch==2.11.0+cu130")


def test_a_driver_found_too_old_gets_the_variant_it_runs() -> None:
    old = dataclasses.replace(H200, driver_version="535.274.02")
    got = _resolve(old, "torch==2.11.0")
    torch = got.stack.frameworks["torch"]
    assert torch.cuda is not None and int(torch.cuda.split(".")[0]) == 12


def test_without_a_probe_the_driver_is_still_unknown_and_said_so() -> None:
    host = HostSpec.describe(gpu="H200")
    request = StackRequest.build(frameworks=["torch==2.11.0+cu130"], driver="none")
    got = resolve(request, host)
    assert "driver_unmanaged" in {w.code for w in got.warnings}

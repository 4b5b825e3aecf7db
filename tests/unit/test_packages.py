"""The package plan: typed between the resolver, the lock and the role variables; JSON only at the edges."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.errors import BadInput
from provision.stack.lock import dumps_lock, parse_lock
from provision.stack.packages import PackagePlan
from provision.stack.request import HostSpec, StackRequest
from provision.stack.resolve import resolve

GOLDEN = Path(__file__).parent / "golden" / "render"


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.lock")), ids=lambda p: p.stem)
def test_a_lock_read_into_the_typed_plan_writes_the_same_bytes(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    lock = parse_lock(text)
    assert all(isinstance(g.packages, PackagePlan) for g in lock.groups)
    assert dumps_lock(lock) == text


def test_the_resolvers_plan_round_trips_through_json() -> None:
    res = resolve(
        StackRequest.build(frameworks=["torch==2.8.0"], cuda_toolkit="12.8", cudnn="9.10.2"),
        HostSpec.describe(gpu="H100-SXM", gpu_count=8, os="ubuntu-22.04"),
    )
    plan = res.packages
    assert plan.driver is not None and plan.driver.method == "nvidia-repo"
    assert plan.driver.repo == "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/"
    assert plan.fabric_manager and plan.cuda_toolkit and plan.cudnn
    assert PackagePlan.from_json(plan.to_json()) == plan


def test_a_partial_plan_reads_with_empty_parts() -> None:
    plan = PackagePlan.from_json({"pip": {"requirements": ["torch==2.8.0"]}})
    assert plan.os_family == "" and plan.driver is None and plan.fabric_manager == ()
    assert plan.pip is not None and plan.pip.requirements == ("torch==2.8.0",) and plan.pip.index_url == ""


@pytest.mark.parametrize(
    "doc, where",
    [
        ({"driver": ["nvidia-open"]}, "driver"),
        ({"driver": {"names": "nvidia-open"}}, "driver.names"),
        ({"cudnn": [9]}, "cudnn"),
        ({"pip": {"index_url": 3}}, "pip.index_url"),
    ],
)
def test_a_plan_of_the_wrong_shape_is_bad_input(doc: dict, where: str) -> None:
    with pytest.raises(BadInput, match=rf"packages\.{where} is not"):
        PackagePlan.from_json(doc)

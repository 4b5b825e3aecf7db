"""Frameworks in one venv: the env_conflict rule computed from the wheels' own pins (data/wheels.yaml).

The resolver cases use the shipped wheels.yaml (read from PyPI METADATA); the rule's own cases use
stand-in pins (named as such) so that each behaviour is pinned independently of the data.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from provision.errors import Unsatisfiable
from provision.matrix.wheels import FrameworkPins, WheelPins, reduce_requires, requirement_key
from provision.stack import venv_conflicts
from provision.stack.request import HostSpec, StackRequest
from provision.stack.resolve import resolve


def _resolve(
    frameworks: list[str], gpu: str = "H100-SXM", torch_index: str | None = None, **host: Any
) -> dict[str, Any]:
    req = StackRequest.build(frameworks=frameworks, torch_index=torch_index)
    return resolve(req, HostSpec.describe(gpu=gpu, **host)).to_json()


def _unsat(frameworks: list[str], **host: Any) -> list[str]:
    with pytest.raises(Unsatisfiable) as err:
        _resolve(frameworks, **host)
    return err.value.conflicts


# --- the resolver, with the shipped wheels.yaml ------------------------------------------------


def test_tf219_and_jax_cuda12_from_06_conflict_on_cudnn() -> None:
    # TF 2.19 pins cuDNN exactly; every jax-cuda12-plugin from 0.6.0 needs >= 9.8 (0.11.2 on:
    # >= 9.10.2.21), so no jax[cuda12] release resolves beside it (it resolved before)
    conflicts = _unsat(["tensorflow==2.19.0", "jax[cuda12]>=0.6"])
    assert conflicts[0].startswith("env_conflict: "), conflicts
    assert "tensorflow[and-cuda]==2.19.0 pins nvidia-cudnn-cu12==9.3.0.75" in conflicts[0]
    assert re.search(r"jax\[cuda12\]==\S+ needs nvidia-cudnn-cu12<10.0,>=9\.(8|10\.2\.21):", conflicts[0]), conflicts


def test_tf219_with_jax_takes_the_cuda13_plugin() -> None:
    # cu12 pins against cu13 names: nothing shared, so the newest jax resolves on its CUDA 13 line
    fws = _resolve(["tensorflow==2.19.0", "jax"])["stack"]["frameworks"]
    assert fws["jax"]["extras"] == ["cuda13"], fws


def test_tf220_and_torch28_share_a_venv() -> None:
    fws = _resolve(["tensorflow==2.20.0", "torch==2.8.0"])["stack"]["frameworks"]
    assert fws["torch"]["version"] == "2.8.0" and fws["tensorflow"]["version"] == "2.20.0"


@pytest.mark.parametrize(("torch", "pin"), [("2.8.0", "2.27.3"), ("2.10.0", "2.27.5")])
def test_tf221_and_torch_28_210_conflict_on_nccl(torch: str, pin: str) -> None:
    # the PyPI wheels (2.10's cu130 build on download.pytorch.org uses cu13 names: no shared package)
    conflicts = _unsat(["tensorflow==2.21.0", f"torch=={torch}"], torch_index="pypi")
    assert f"torch=={torch} pins nvidia-nccl-cu12=={pin}" in conflicts[0], conflicts
    assert "nvidia-nccl-cu12<3.0,>=2.27.7" in conflicts[0]


@pytest.mark.parametrize("torch", ["2.11.0", "2.15.0"])
def test_torch_on_cuda13_names_and_jax_cuda12_share_a_venv(torch: str) -> None:
    fws = _resolve([f"torch=={torch}", "jax[cuda12]"])["stack"]["frameworks"]
    assert fws["torch"]["version"] == torch and fws["jax"]["extras"] == ["cuda12"]


def test_torch25_and_jax06_conflict_on_cudnn() -> None:
    # the PyPI wheel (its cu124 build); the cu118 build uses cu11 names and is reported unchecked
    conflicts = _unsat(["torch==2.5.1+cu124", "jax[cuda12]==0.6.0"])
    assert "torch==2.5.1 pins nvidia-cudnn-cu12==9.1.0.70, jax[cuda12]==0.6.0 needs nvidia-cudnn-cu12" in conflicts[0]


def test_a_vendor_index_variant_is_reported_unchecked_not_ok() -> None:
    # download.pytorch.org's cu126 build of 2.8.0 is not PyPI's wheel: its pins are not in wheels.yaml
    doc = _resolve(["torch==2.8.0+cu126", "tensorflow==2.20.0"])
    unchecked = [w["message"] for w in doc["warnings"] if w["code"] == "env_unchecked"]
    assert unchecked and "torch==2.8.0+cu126" in unchecked[0], doc["warnings"]


def test_the_pypi_default_variant_from_the_vendor_index_is_the_pypi_wheel() -> None:
    # torch 2.6.0's PyPI wheel is its cu124 build: the same pins, so the conflict is known
    conflicts = _unsat(["torch==2.6.0+cu124", "tensorflow==2.21.0"], gpu="A10G", os="ubuntu-22.04")
    assert "torch==2.6.0 " in conflicts[0] and "tensorflow[and-cuda]==2.21.0" in conflicts[0], conflicts


# --- the rule itself, with stand-in pins -------------------------------------------------------

STAND_IN = WheelPins(
    read="stand-in",
    index="https://index.invalid/simple",
    source=("stand-in",),
    frameworks={
        requirement_key(f.requirement): f
        for f in (
            FrameworkPins("alpha==1", None, {"x86_64": ("nvidia-x-cu12==1.0",), "aarch64": ()}),
            FrameworkPins("beta[cuda]==1", None, {"x86_64": ("nvidia-x-cu12>=2",)}),
            FrameworkPins("gamma==1", None, {"x86_64": ("nvidia-x-cu12>=1.0,<3", "nvidia-y-cu12>=5")}),
            FrameworkPins("delta==1", None, {"x86_64": ("nvidia-y-cu12<5",)}),
            FrameworkPins("p1==1", None, {"x86_64": ("nvidia-z>=2",)}),
            FrameworkPins("p2==1", None, {"x86_64": ("nvidia-z<3",)}),
            FrameworkPins("p3==1", None, {"x86_64": ("nvidia-z!=2.0", "nvidia-w==1; python_version == '3.12'")}),
            FrameworkPins("p4==1", None, {"x86_64": ("nvidia-w==2",)}),
            FrameworkPins("pre==1", None, {"x86_64": ("nvidia-v>=9",)}),
            FrameworkPins("p5==1", None, {"x86_64": ("nvidia-v>=8.5",)}),
        )
    },
    releases={
        "nvidia-x-cu12": ("1.0", "2.0", "2.1"),
        "nvidia-y-cu12": ("4.0", "5.0"),
        "nvidia-z": ("1.0", "2.0", "3.0"),
        "nvidia-w": ("1", "2"),
        "nvidia-v": ("8.0", "9.0.dev1"),
    },
)


def _check(*reqs: str, arch: str = "x86_64", python: str = "3.11") -> venv_conflicts.Verdict:
    return venv_conflicts.check(list(reqs), arch, python, STAND_IN)


def test_a_shared_package_without_a_common_release_is_a_conflict_naming_both_pins() -> None:
    v = _check("alpha==1", "beta[cuda]==1")
    assert v.conflicts == (
        "alpha==1 pins nvidia-x-cu12==1.0, beta[cuda]==1 needs nvidia-x-cu12>=2: "
        "no release of nvidia-x-cu12 satisfies both",
    )
    assert not v.unchecked


def test_overlapping_ranges_are_fine_and_one_framework_alone_is_never_checked() -> None:
    assert _check("alpha==1", "gamma==1") == venv_conflicts.Verdict()
    assert _check("beta[cuda]==1") == venv_conflicts.Verdict()


def test_every_pair_is_checked_and_names_its_own_package() -> None:
    v = _check("alpha==1", "beta[cuda]==1", "gamma==1", "delta==1")
    assert len(v.conflicts) == 2
    assert v.conflicts[1].startswith("gamma==1 needs nvidia-y-cu12>=5, delta==1 needs nvidia-y-cu12<5")


def test_three_that_fit_pairwise_but_not_together_conflict() -> None:
    # nvidia-z 1.0 / 2.0 / 3.0: >=2 and <3 share 2.0, >=2 and !=2.0 share 3.0, <3 and !=2.0 share 1.0
    assert not _check("p1==1", "p2==1").conflicts
    assert not _check("p2==1", "p3==1").conflicts
    v = _check("p1==1", "p2==1", "p3==1")
    assert v.conflicts == (
        "p1==1 needs nvidia-z>=2, p2==1 needs nvidia-z<3, p3==1 needs nvidia-z!=2.0: "
        "no release of nvidia-z satisfies all of them",
    )


def test_python_markers_are_evaluated_for_the_groups_python() -> None:
    assert not _check("p3==1", "p4==1", python="3.11").conflicts
    assert "nvidia-w" in _check("p3==1", "p4==1", python="3.12").conflicts[0]


def test_a_release_missing_from_the_file_or_its_arch_is_unchecked_never_silently_ok() -> None:
    v = _check("alpha==1", "omega==2")
    assert not v.conflicts and "omega==2" in v.unchecked[0] and "not in wheels.yaml" in v.unchecked[0]
    v = _check("alpha==1", "beta[cuda]==1", arch="aarch64")
    assert not v.conflicts and "no Linux aarch64 wheel" in v.unchecked[0]


def test_a_pre_release_does_not_satisfy_a_final_only_specifier_as_pips_packaging_decides() -> None:
    # packaging 26 (pip 26.3 vendors it) filters pre-releases out unless a specifier names one
    assert not _check("pre==1", "p1==1").conflicts  # no shared name
    only_pre = WheelPins("stand-in", "", (), STAND_IN.frameworks, {**STAND_IN.releases, "nvidia-v": ("9.0.dev1",)})
    assert venv_conflicts.check(["pre==1", "p5==1"], "x86_64", "3.11", only_pre).conflicts


def test_markers_reduce_to_the_arch_and_drop_when_every_python_agrees() -> None:
    requires = [
        'nvidia-a-cu12==1; platform_system == "Linux" and platform_machine == "x86_64"',
        "nvidia-b==2; sys_platform == 'linux' and extra == 'cublas'",
        "nvidia-c==3; python_version >= '3.12'",
        "numpy>=1",
        "jax-cuda12-plugin[with-cuda]<=0.6.0,>=0.6.0; extra == 'cuda12'",
    ]
    x86 = [str(r) for r in reduce_requires(requires, "x86_64", ["cublas", "cuda12"])]
    assert x86[:2] == ["nvidia-a-cu12==1", "nvidia-b==2"]
    assert x86[2] == 'nvidia-c==3; python_version >= "3.12"'
    assert [str(r) for r in reduce_requires(["nvidia-d==1; python_version < '3.15'"], "x86_64")] == [
        'nvidia-d==1; python_version <= "3.14"'
    ]
    assert x86[3] == "jax-cuda12-plugin[with-cuda]<=0.6.0,>=0.6.0"
    assert [str(r) for r in reduce_requires(requires, "aarch64")] == [x86[2]]

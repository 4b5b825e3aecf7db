"""Issue 27, "Wrong facts that break an install or the first CUDA call": one test (or more) per fact,
named by it, each against the data's own primary source where one is kept here (evidence/).

1. Driver floors per GPU model: B300/GB300 need R580 from 580.82.07; a GPU's min_cuda bounds it.
2. The aarch64 torch arch lists are measured from the wheels: no sm_75, so no torch for a T4G.
3. Below 570 the open flavour on NVIDIA's apt repository is nvidia-kernel-open-<b> + cuda-drivers-<b>.
4. cuDNN 8's package names: libcudnn8 / libcudnn8-dev (apt), libcudnn8 / libcudnn8-devel (RPM).
5. The cuDNN a range or a closure gives a GPU, and TensorFlow beside a system cuDNN of another major.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import struct
from pathlib import Path
from typing import Any

import pytest

from provision.errors import Unsatisfiable
from provision.fleet import closure
from provision.matrix import load
from provision.matrix.consistency import DataError
from provision.matrix.fatbin import targets
from provision.matrix.knowledge import _files, _merge, build_tables
from provision.model import ResolvedHost, Stack
from provision.model.lock import LockGroup, PythonPackage
from provision.model.settings import InstallSettings
from provision.stack.lock import lock_group
from provision.stack.request import HostSpec, StackRequest
from provision.stack.resolve import resolve
from provision.stack.rules import gpu_kernels

EVIDENCE = Path(__file__).resolve().parents[3] / "provision" / "matrix" / "evidence"


def _resolve(**inputs: Any) -> Any:
    req_keys = ("frameworks", "driver", "cuda_toolkit", "cudnn", "kernel_modules")
    req = StackRequest.build(**{k: v for k, v in inputs.items() if k in req_keys})
    host = HostSpec.describe(**{k: v for k, v in inputs.items() if k not in req_keys})
    return resolve(req, host)


def _conflicts(**inputs: Any) -> list[str]:
    with pytest.raises(Unsatisfiable) as err:
        _resolve(**inputs)
    return list(err.value.conflicts)


def _specs(res: Any, role: str) -> list[str]:
    plan = res.packages.to_json()
    sep = "=" if plan["manager"] == "apt" else "-"
    return [i["name"] + (f"{sep}{i['version']}" if i["version"] else "") for i in plan["install"] if i["role"] == role]


# --- fact 1: driver floors per GPU model ------------------------------------------------------


def _name_table() -> dict[str, int]:
    """evidence: per open-gpu-kernel-modules tag, how many name-table lines name 0x3182 / 0x31C2."""
    out = {}
    for line in (EVIDENCE / "open-gpu-kernel-modules-name-table-blackwell-ultra.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            tag, named, _headers = line.split()
            out[tag] = int(named)
    return out


def test_fact1_b300_and_gb300_floor_is_the_first_release_that_names_them() -> None:
    """B300 and GB300 carry their own floor, R580 from 580.82.07: the first tag whose name table
    names 10de:3182 / 10de:31c2 (no R570 or R575 tag does)."""
    named = _name_table()
    first = next(tag for tag, n in named.items() if n)
    assert first == "580.82.07"
    assert not any(n for tag, n in named.items() if tag.split(".")[0] in ("570", "575"))
    k = load()
    for name in ("B300", "GB300"):
        gpu = k.gpu(name)
        assert (gpu.min_driver_branch, gpu.min_driver) == (int(first.split(".")[0]), first)
        assert "open_modules_name_table_per_tag" in gpu.source
    assert k.gpu("B200").min_driver_branch == k.architecture("blackwell").min_driver_branch


@pytest.mark.parametrize(("gpu", "driver"), [("B300", "570"), ("B300", "575"), ("GB300", "570"), ("GB300", "575")])
def test_fact1_b300_gb300_refuse_r570_and_r575(gpu: str, driver: str) -> None:
    assert _conflicts(gpu=gpu, driver=driver)[0].startswith("driver_gpu: ")


def test_fact1_b300_refuses_an_r580_release_before_580_82_07() -> None:
    conflict = _conflicts(gpu="B300", driver="580.65.06")[0]
    assert conflict.startswith("driver_gpu: ") and "580.82.07" in conflict
    assert _resolve(gpu="B300", driver="580.82.07").stack.driver.version == "580.82.07"


def test_fact1_a_gpus_min_cuda_bounds_its_driver_floor() -> None:
    """Data that gives B300 (min_cuda 12.9) the R570 floor is refused: R570 runs CUDA 12.8 at most,
    and 12.9 needs R575 (cuda.yaml 12.9: full_compat_min_driver 575.51.03)."""
    d = copy.deepcopy(_merge(_files()))
    b300 = next(g for g in d["gpus"] if g["name"] == "B300")
    b300["min_driver_branch"] = "570"
    b300.pop("min_driver")
    with pytest.raises(
        DataError, match=r"gpu B300: min_driver_branch 570 runs CUDA 12\.8, below its min_cuda 12\.9 .*575"
    ):
        build_tables(d)


# --- fact 2: the aarch64 torch arch lists, measured ---------------------------------------------


def _measured() -> list[dict[str, Any]]:
    path = EVIDENCE / "torch-aarch64-fatbin-2026-12-04.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_fact2_aarch64_arch_lists_are_the_measured_wheels() -> None:
    """Each measured PyPI aarch64 wheel's SASS targets (those with whole-library kernel counts; the
    few 10.3/12.1 kernels come from bundled libraries) are the PyPI default variant's
    arch_list_aarch64 of that release, and none has 7.5."""
    k = load()
    aarch64 = [m for m in _measured() if m["arch"] == "aarch64"]
    assert {m["torch"] for m in aarch64} >= {"2.11.0", "2.15.0"}
    for m in aarch64:
        sass = [cc for cc, n in m["sass"].items() if n >= 100]
        rel = next(r for r in k.t.torch if r.version == m["torch"])
        v = rel.variant(rel.pypi_default)
        assert v is not None and rel.pypi_aarch64_cuda
        assert list(v.archs("aarch64")) == sass, (m["torch"], v.name)
        assert v.arch_list_aarch64_confidence == "high"
        assert "7.5" not in m["sass"]
    x86 = next(m for m in _measured() if m["arch"] == "x86_64")  # the same parser sees 7.5 there
    assert "7.5" in x86["sass"]


def test_fact2_every_aarch64_build_states_its_own_list_and_none_has_sm75() -> None:
    k = load()
    for rel in k.t.torch:
        for v in rel.variants:
            if v.aarch64 and v.cuda:
                assert "7.5" not in v.archs("aarch64"), (rel.version, v.name)
                assert v.arch_list_aarch64_confidence in ("high", "medium")


def test_fact2_an_aarch64_variant_without_its_own_list_is_refused() -> None:
    d = copy.deepcopy(_merge(_files()))
    del d["pytorch"][0]["variants"][0]["arch_list_aarch64"]
    with pytest.raises(DataError, match="aarch64: true without its own arch_list_aarch64"):
        build_tables(d)


@pytest.mark.parametrize("torch", ["torch==2.11.0", "torch==2.12.0", "torch==2.14.1", "torch==2.15.0"])
def test_fact2_g5g_t4g_gets_no_torch_without_sm75(torch: str) -> None:
    assert _conflicts(gpu="T4G", frameworks=[torch])[0].startswith("gpu_arch: ")


def test_fact2_no_torch_resolved_for_a_t4g_lacks_its_kernels() -> None:
    """Whatever torch a T4G resolves to (if any), its aarch64 build has kernels for compute 7.5."""
    k = load()
    gpu = k.gpu("T4G")
    try:
        res = _resolve(gpu="T4G", frameworks=["torch"])
    except Unsatisfiable as err:
        assert err.conflicts[0].startswith("gpu_arch: "), err.conflicts
        return
    fw = res.stack.frameworks["torch"]
    rel = next(r for r in k.t.torch if r.version == fw.version)
    v = rel.variant(fw.variant)
    assert v is not None and gpu_kernels(gpu, v.archs("aarch64"), v.ptx) is not None


def test_fact2_the_fatbin_parser_reads_sass_and_ptx_entries() -> None:
    """provision.matrix.fatbin.targets on a fat binary laid out as CUDA's fatbinary headers are:
    two containers, SASS for sm_80 and sm_90, PTX for sm_90, and a stray word between them."""

    def entry(kind: int, sm: int, payload: bytes) -> bytes:
        header = struct.pack("<HHIQII", kind, 0x101, 64, len(payload), 0, 0) + struct.pack("<HHI", 0, 0, sm)
        return header + b"\0" * (64 - len(header)) + payload

    def container(*entries: bytes) -> bytes:
        body = b"".join(entries)
        return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body

    blob = container(entry(2, 80, b"x" * 24), entry(2, 90, b"y" * 8)) + b"\0" * 8 + container(entry(1, 90, b"ptx"))
    sass, ptx = targets(blob)
    assert dict(sass) == {80: 1, 90: 1} and dict(ptx) == {90: 1}


# --- fact 3: the open flavour below 570 on NVIDIA's apt repository --------------------------------


@pytest.mark.parametrize("branch", ["535", "550"])
def test_fact3_open_below_570_is_nvidia_kernel_open_then_cuda_drivers(branch: str) -> None:
    res = _resolve(gpu="A10G", os="ubuntu-22.04", driver=branch, kernel_modules="open", frameworks=["torch==2.6.0"])
    version = res.stack.driver.version
    assert _specs(res, "nvidia_driver") == [
        f"nvidia-kernel-open-{branch}={version}-*",
        f"cuda-drivers-{branch}={version}-*",
    ]
    assert not any(s.startswith(f"nvidia-open-{branch}") for s in _specs(res, "nvidia_driver"))


def test_fact3_from_570_the_branch_metapackage_is_nvidia_open() -> None:
    res = _resolve(gpu="A10G", os="ubuntu-22.04", driver="570", kernel_modules="open")
    assert _specs(res, "nvidia_driver") == [f"nvidia-open-570={res.stack.driver.version}-*"]


# --- fact 4: cuDNN 8's package names ------------------------------------------------------------


def test_fact4_cudnn8_apt_names_are_libcudnn8_and_libcudnn8_dev() -> None:
    res = _resolve(gpu="A10G", os="ubuntu-22.04", cuda_toolkit="12.2", cudnn="8.9.7.29", frameworks=["torch==2.6.0"])
    assert _specs(res, "cudnn") == ["libcudnn8=8.9.7.29-1+cuda12.*", "libcudnn8-dev=8.9.7.29-1+cuda12.*"]


def test_fact4_cudnn8_rpm_names_are_libcudnn8_and_libcudnn8_devel() -> None:
    res = _resolve(gpu="A10G", os="rhel-9", cuda_toolkit="12.2", cudnn="8.9.7.29", frameworks=["torch==2.6.0"])
    assert _specs(res, "cudnn") == ["libcudnn8-8.9.7.29-1.cuda12.*", "libcudnn8-devel-8.9.7.29-1.cuda12.*"]


def test_fact4_cudnn9_names_are_unchanged() -> None:
    res = _resolve(gpu="H100-SXM", os="ubuntu-22.04", cuda_toolkit="12.8", cudnn="9.17.1.4")
    assert _specs(res, "cudnn")[0] == "libcudnn9-cuda-12=9.17.1.4-*"


# --- fact 5: cuDNN ranges and closures, TensorFlow beside a system cuDNN of another major ----------


def test_fact5_jax_cuda12_range_on_v100_pins_a_cudnn_with_its_kernels() -> None:
    """No closure (the range's newest, 9.1x, has no code below 7.5): the plan pins the newest in
    range that has, and says why, naming cuDNN and the GPU."""
    res = _resolve(gpu="V100", os="ubuntu-22.04", frameworks=["jax[cuda12]"])
    assert res.packages.pip is not None
    assert "nvidia-cudnn-cu12==9.10.2.21" in res.packages.pip.requirements
    assert any("nvidia-cudnn-cu12 pinned to 9.10.2.21" in r and "V100" in r for r in res.reasons), res.reasons


def _group(gpu: str) -> LockGroup:
    return LockGroup(
        "g", ["a"], ResolvedHost.from_json({"gpu": gpu, "os": "ubuntu-22.04", "arch": "x86_64"}), Stack.from_json({})
    )


def _wheel(name: str, version: str) -> PythonPackage:
    sha = hashlib.sha256(f"{name}{version}".encode()).hexdigest()
    return PythonPackage(name, version, sha, f"https://files.example/{name}-{version}.whl", "https://pypi.org/simple")


def test_fact5_the_closures_cudnn_is_checked_against_the_gpu() -> None:
    """The version the lock's closure really resolved: 9.11+ on a V100 is a problem naming cuDNN and
    the GPU; 9.10 on a V100 and 9.11+ on an A100 are not."""
    why = closure.cudnn_closure_problem(
        _group("V100"), [_wheel("jax", "0.10.2"), _wheel("nvidia-cudnn-cu12", "9.17.1.4")]
    )
    assert why is not None and "nvidia-cudnn-cu12 9.17.1.4 (cuDNN)" in why and "V100" in why
    assert closure.cudnn_closure_problem(_group("V100"), [_wheel("nvidia-cudnn-cu12", "9.10.2.21")]) is None
    assert closure.cudnn_closure_problem(_group("A100-80GB"), [_wheel("nvidia_cudnn_cu12", "9.17.1.4")]) is None


def test_fact5_a_closure_without_kernels_for_the_gpu_is_exit_3(monkeypatch: pytest.MonkeyPatch) -> None:
    """lock_closures on the real resolver's group for jax on a V100 refuses a closure whose cuDNN
    (what pip resolved against the live index) has no kernels for it."""
    group = lock_group("v100", ["a"], _resolve(gpu="V100", os="ubuntu-22.04", frameworks=["jax[cuda12]"]))
    # the closure pip would resolve, stood in for: this test reaches no index
    monkeypatch.setattr(closure, "resolve", lambda ws, name, cache: [_wheel("nvidia-cudnn-cu12", "9.28.0.1")])
    want = "group v100: the wheel closure installs nvidia-cudnn-cu12 9.28.0.1 (cuDNN), which needs compute capability"
    with pytest.raises(Unsatisfiable, match=re.escape(want)):
        closure.lock_closures([group], InstallSettings())
    monkeypatch.setattr(closure, "resolve", lambda ws, name, cache: [_wheel("nvidia-cudnn-cu12", "9.10.2.21")])
    [locked] = closure.lock_closures([group], InstallSettings())
    assert [p.version for p in locked.python_packages] == ["9.10.2.21"]


@pytest.mark.parametrize(("tf", "cudnn", "built"), [("2.15.1", "9.10.2.21", "8.9"), ("2.18.0", "8.9.7.29", "9.3")])
def test_fact5_tensorflow_beside_a_system_cudnn_of_another_major_warns(tf: str, cudnn: str, built: str) -> None:
    res = _resolve(gpu="A10G", os="ubuntu-22.04", frameworks=[f"tensorflow=={tf}"], cudnn=cudnn)
    warned = [w for w in res.to_json()["warnings"] if w["code"] == "tf_system_cudnn"]
    assert warned and f"cuDNN {built}" in warned[0]["message"] and cudnn in warned[0]["message"], res.warnings


@pytest.mark.parametrize(("tf", "cudnn", "toolkit"), [("2.15.1", "9.10.2.21", "12.2"), ("2.18.0", "8.9.7.29", "12.5")])
def test_fact5_tensorflow_loading_a_system_cudnn_of_another_major_is_refused(tf: str, cudnn: str, toolkit: str) -> None:
    conflict = _conflicts(
        gpu="A10G", os="ubuntu-22.04", frameworks=[f"tensorflow=={tf}"], cudnn=cudnn, cuda_toolkit=toolkit
    )[0]
    assert conflict.startswith("tf_system_cuda: ") and "cuDNN" in conflict

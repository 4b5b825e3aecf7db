"""`make check-knowledge` (provision.matrix.check): the comparisons, with stand-in index reads.

Every read of the index here is a stand-in (a hand-made Project / FrameworkPins named STAND_IN_*),
except the one test marked `network`, which reads torch 2.8.0 from the real PyPI.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from provision.matrix import load
from provision.matrix import wheels as wheels_data
from provision.matrix.check import (
    CONTRADICTION,
    NEWER,
    UNREACHABLE,
    Findings,
    compare_jax,
    compare_newer,
    compare_releases,
    compare_tensorflow,
    compare_torch,
    compare_uv,
    compare_wheels_yaml,
    nvidia_facts,
    report_nvidia,
)
from provision.matrix.pypi import IndexReader, Project, WheelFile
from provision.matrix.wheels import FrameworkPins, WheelPins
from provision.matrix.wheels_read import Target, read_pins

K = load()
TORCH_28 = next(r for r in K.t.torch if r.version == "2.8.0")
TF_219 = next(r for r in K.t.tensorflow if r.version == "2.19.0")
JAX_0100 = next(r for r in K.t.jax if r.version == "0.10.0")


def _project(name: str, version: str, pythons: list[str], arch: str = "x86_64") -> Project:
    files = tuple(
        WheelFile(
            f"{name.replace('-', '_')}-{version}-cp{p.replace('.', '')}-cp{p.replace('.', '')}-manylinux_2_28_{arch}.whl",
            None,
        )
        for p in pythons
    )
    return Project(name, (version,), {version: files})


STAND_IN_TORCH_PINS = FrameworkPins(
    "torch==2.8.0",
    ">=3.9.0",
    {
        "x86_64": (
            "nvidia-cublas-cu12==12.8.4.1",
            "nvidia-cuda-runtime-cu12==12.8.90",
            "nvidia-cudnn-cu12==9.10.2.21",
            "nvidia-nccl-cu12==2.27.3",
        ),
        "aarch64": (),
    },
)
STAND_IN_TORCH_PROJECT = _project("torch", "2.8.0", ["3.9", "3.10", "3.11", "3.12", "3.13"])


def _contradictions(f: Findings) -> list[str]:
    return [t for k, t in f.lines if k == CONTRADICTION]


def test_torch_agreeing_with_the_data_has_no_contradiction() -> None:
    f = Findings()
    compare_torch(f, TORCH_28, STAND_IN_TORCH_PROJECT, STAND_IN_TORCH_PINS)
    assert not _contradictions(f), f.lines
    assert f.checked == 7


def test_torch_pins_and_python_tags_that_differ_are_contradictions() -> None:
    pins = dataclasses.replace(
        STAND_IN_TORCH_PINS,
        pins={
            "x86_64": ("nvidia-cuda-runtime-cu12==12.6.77", "nvidia-cudnn-cu12==9.5.1.17", "nvidia-nccl-cu12==2.26.2"),
            "aarch64": ("nvidia-cuda-runtime-cu12==12.6.77",),
        },
    )
    project = _project("torch", "2.8.0", ["3.9", "3.10", "3.11", "3.12", "3.13", "3.14"])
    f = Findings()
    compare_torch(f, TORCH_28, project, pins)
    got = "\n".join(_contradictions(f))
    for what in ("python", "CUDA runtime", "cuBLAS", "cuDNN", "nccl", "pypi_aarch64_cuda"):
        assert what in got, (what, got)
    assert "torch 2.8.0 (PyPI wheel) nccl: data 2.27.3, index 2.26.2" in got


def test_tensorflow_exact_pins_and_an_uninstallable_extra() -> None:
    cuda = FrameworkPins(
        "tensorflow[and-cuda]==2.19.0",
        ">=3.9",
        {"x86_64": ("nvidia-cuda-runtime-cu12==12.5.82", "nvidia-cudnn-cu12==9.3.0.75", "nvidia-nccl-cu12==2.23.4")},
    )
    plain = FrameworkPins("tensorflow==2.19.0", ">=3.9", {"x86_64": ()})
    project = _project("tensorflow", "2.19.0", ["3.9", "3.10", "3.11", "3.12"])
    releases = {
        "nvidia-cuda-runtime-cu12": ["12.5.82"],
        "nvidia-cudnn-cu12": ["9.3.0.75"],
        "nvidia-nccl-cu12": ["2.23.4"],
    }
    f = Findings()
    compare_tensorflow(f, TF_219, project, plain, cuda, releases=releases)
    assert not _contradictions(f), f.lines
    f = Findings()
    compare_tensorflow(f, TF_219, project, plain, cuda, releases={**releases, "nvidia-nccl-cu12": ["2.21.5"]})
    assert _contradictions(f) == [
        "tensorflow[and-cuda] 2.19.0 installable (every pin has a release): data True, index False"
    ]
    f = Findings()
    compare_tensorflow(f, TF_219, project, plain, None, releases=releases)
    assert "and_cuda" in _contradictions(f)[0]


def test_jax_cuda_lines_python_and_cudnn_floor() -> None:
    plugins = {m: _project(f"jax-cuda{m}-plugin", "0.10.0", ["3.11", "3.12", "3.13", "3.14"]) for m in (12, 13)}
    lines = {
        13: FrameworkPins("jax[cuda13]==0.10.0", ">=3.11", {"x86_64": ("nvidia-cudnn-cu13<10.0,>=9.12.0.46",)}),
        12: FrameworkPins("jax[cuda12]==0.10.0", ">=3.11", {"x86_64": ("nvidia-cudnn-cu12<10.0,>=9.8",)}),
    }
    f = Findings()
    compare_jax(f, JAX_0100, plugins, lines)
    assert not _contradictions(f), f.lines
    f = Findings()  # jax[cudaNN] needs jaxlib's wheel too: a Python jaxlib lacks is not installable
    compare_jax(f, JAX_0100, plugins, lines, jaxlib=_project("jaxlib", "0.10.0", ["3.11", "3.12", "3.13"]))
    assert len(_contradictions(f)) == 2 and "jaxlib and jax-cuda13-plugin" in _contradictions(f)[0]
    f = Findings()
    compare_jax(f, JAX_0100, plugins, {13: None, 12: lines[12]})
    assert _contradictions(f) == ["jax 0.10.0 cuda_majors (jax[cudaNN] installable): data [13, 12], index [12]"]


def test_wheels_yaml_against_a_fresh_read_and_the_release_lists() -> None:
    stored = WheelPins("stand-in", "", (), {"torch==2.8.0": STAND_IN_TORCH_PINS}, {"nvidia-nccl-cu12": ("2.27.3",)})
    f = Findings()
    compare_wheels_yaml(f, stored, [STAND_IN_TORCH_PINS])
    compare_releases(f, stored, {"nvidia-nccl-cu12": ["2.27.3", "2.28.0"]})
    assert not _contradictions(f) and any("newer than wheels.yaml" in t for _, t in f.lines)
    moved = dataclasses.replace(STAND_IN_TORCH_PINS, pins={"x86_64": ("nvidia-nccl-cu12==2.27.5",)})
    f = Findings()
    compare_wheels_yaml(f, stored, [moved])
    compare_releases(f, stored, {"nvidia-nccl-cu12": []})
    assert len(_contradictions(f)) == 3, f.lines  # x86_64 pins, aarch64 gone, a release gone


def test_newer_releases_are_reported_not_contradictions() -> None:
    f = Findings()
    compare_newer(f, "torch", ["2.14.0", "2.15.0"], Project("torch", ("2.15.0", "2.15.1", "2.16.0rc1"), {}))
    assert [k for k, _ in f.lines] == [NEWER] and "2.15.1" in f.lines[0][1]
    assert f.summary() == "knowledge: 0 facts checked, 0 contradictions, 1 newer releases, 0 unreachable"


def test_each_nvidia_fact_it_cannot_reach_is_printed_with_its_source_and_confidence() -> None:
    facts = nvidia_facts(K)
    assert facts and all(".nvidia.com" in x.url for x in facts)
    assert {x.what.split()[0] for x in facts} >= {"driver", "CUDA", "cuDNN"}
    f = Findings()
    report_nvidia(f, facts, {})  # a stand-in probe: nothing reachable
    lines = [t for k, t in f.lines if k == UNREACHABLE]
    assert len(lines) == len(facts)
    assert all("source " in t and "confidence " in t for t in lines)


@pytest.mark.network
def test_torch_28_against_the_real_pypi(tmp_path: Path) -> None:
    reader = IndexReader(tmp_path / "cache", jobs=2)
    (read,) = read_pins(reader, [Target("torch", "2.8.0", ((),), ("3.11",))])
    fresh = read.pins[()]
    f = Findings()
    compare_torch(f, TORCH_28, reader.project("torch"), fresh)
    compare_wheels_yaml(f, wheels_data.load(), [fresh])
    assert not _contradictions(f), f.lines
    assert fresh.wheels["x86_64"][0].startswith("torch-2.8.0-cp311-cp311-manylinux")
    # the second read comes from the cache, without pip
    again = IndexReader(tmp_path / "cache")
    read_pins(again, [Target("torch", "2.8.0", ((),), ("3.11",))])
    assert again.pip_runs == 0 and again.cache_hits == 2


def test_uv_pinned_wheels_against_the_index_file_list() -> None:
    """STAND-IN index page (parse_simple on a hand-made PEP 691 page): the pinned wheels agree; a
    changed sha256 or a wheel the index has and the data lacks is a contradiction."""
    from provision.matrix.pypi import parse_simple

    sp = K.t.standalone_python
    assert sp is not None and set(sp.uv_wheels) == {"x86_64", "aarch64"}
    pinned = [(n, sha) for files in sp.uv_wheels.values() for n, sha in files.items()]
    others = [  # what else the index lists for the release: musl, other CPUs, the sdist
        (f"uv-{sp.uv}-py3-none-musllinux_1_1_x86_64.whl", "1" * 64),
        (f"uv-{sp.uv}-py3-none-manylinux_2_17_s390x.manylinux2014_s390x.whl", "2" * 64),
        (f"uv-{sp.uv}.tar.gz", "3" * 64),
    ]

    def page(files: list[tuple[str, str]]) -> Project:
        return parse_simple(
            "uv", {"versions": [sp.uv], "files": [{"filename": n, "hashes": {"sha256": h}} for n, h in files]}
        )

    f = Findings()
    compare_uv(f, sp, page(pinned + others))
    assert f.checked == 2 and not _contradictions(f), f.lines
    name, _ = pinned[0]
    f = Findings()
    compare_uv(f, sp, page([(name, "f" * 64), *pinned[1:], *others]))
    (line,) = _contradictions(f)
    assert line.startswith(f"uv {sp.uv} wheels [x86_64]") and "f" * 64 in line, line
    f = Findings()
    compare_uv(f, sp, page([*pinned, (f"uv-{sp.uv}-py3-none-manylinux_2_39_aarch64.whl", "4" * 64)]))
    (line,) = _contradictions(f)
    assert line.startswith(f"uv {sp.uv} wheels [aarch64]") and "manylinux_2_39" in line, line


@pytest.mark.network
def test_uv_pinned_wheels_against_the_real_pypi(tmp_path: Path) -> None:
    """One request: PyPI's own file list of the pinned uv release."""
    sp = K.t.standalone_python
    assert sp is not None
    f = Findings()
    compare_uv(f, sp, IndexReader(tmp_path / "cache").project("uv"))
    assert f.checked == len(sp.uv_wheels) and not _contradictions(f), f.lines


# --- reading the index: the pure parts of provision.matrix.pypi, with stand-in simple-API pages ---


def test_simple_pages_batches_and_the_python_a_wheel_is_read_with() -> None:
    from provision.matrix.pypi import Want, _batches, parse_simple, pick_python, platforms

    page = {  # a stand-in PEP 691 page
        "versions": ["1.0", "2.0"],
        "files": [
            {"filename": "demo-1.0-cp310-cp310-manylinux1_x86_64.whl"},
            {"filename": "demo-1.0-cp311-cp311-manylinux_2_28_x86_64.whl"},
            {"filename": "demo-1.0-cp313-cp313t-manylinux_2_28_x86_64.whl"},
            {"filename": "demo-1.0-cp311-cp311-manylinux_2_28_aarch64.whl", "yanked": True},
            {"filename": "demo-2.0-py3-none-any.whl", "requires-python": ">=3.12"},
            {"filename": "demo-2.0.tar.gz"},
        ],
    }
    proj = parse_simple("demo", page)
    assert set(proj.files) == {"1.0", "2.0"} and len(proj.files["1.0"]) == 3
    assert pick_python(proj, "1.0", "x86_64", ("3.11",)) == "3.11"
    assert pick_python(proj, "1.0", "x86_64") == "3.11"  # free-threaded cp313t left out
    assert pick_python(proj, "1.0", "aarch64") is None  # its only aarch64 wheel is yanked
    assert pick_python(proj, "2.0", "aarch64", ("3.11", "3.12")) == "3.12"  # Requires-Python
    assert "manylinux1_x86_64" in platforms("x86_64") and "manylinux_2_28_aarch64" in platforms("aarch64")
    wants = [Want("a", str(v), "3.11", "x86_64") for v in range(4)] + [Want("b", "1", "3.11", "x86_64")]
    batches = _batches(wants, jobs=2)
    assert all(len({w.name for w in b}) == len(b) for b in batches)  # one version of a name per pip run
    assert {w for b in batches for w in b} == set(wants) and sum(map(len, batches)) == len(wants)


# --- bad input: one line, exit 2, nothing checked --------------------------------------------------


class _NoFrameworksIndex(IndexReader):
    """A STAND-IN index that answers 404 for every project (a wrong --index URL does)."""

    def _fetch_project(self, key: str) -> Project:
        return Project(key, (), {})


def test_an_index_without_the_frameworks_is_unreadable_not_a_list_of_contradictions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from provision.matrix import check

    monkeypatch.setattr(check, "IndexReader", _NoFrameworksIndex)
    assert check.main(["--cache", str(tmp_path), "--no-probe", "--index", "https://index.invalid/simple"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "knowledge: the index https://index.invalid/simple cannot be read (it lists no torch, tensorflow, jax); "
        "nothing checked"
    ]


@pytest.mark.parametrize("jobs", ["0", "-3", "many"])
def test_jobs_must_be_a_positive_number(jobs: str, capsys: pytest.CaptureFixture[str]) -> None:
    from provision.matrix import check

    with pytest.raises(SystemExit) as exited:
        check.main(["--jobs", jobs])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "argument --jobs" in err and "Traceback" not in err

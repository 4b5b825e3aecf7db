"""The knowledge data itself: sourced, newest first, every reference resolves.

These read the raw YAML as well as the typed tables, so a new entry without `source:` or out
of order fails here, not in a resolve months later.
"""

from __future__ import annotations

import copy
import functools
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.version import Version

from provision.matrix import load
from provision.matrix.knowledge import build_tables
from tests.support.design import DESIGN_GPUS

# Sections whose list entries are facts that need a source; sections of plain settings do not.
SOURCED = (
    "architectures",
    "gpus",
    "instance_families",
    "os_releases",
    "minor_version_compatibility",
    "cuda_toolkits",
    "driver_branches",
    "cudnn",
    "pytorch",
    "tensorflow",
    "jax",
    "jax_cuda_lines",
    "finetune_memory",
)


def raw() -> dict[str, Any]:
    """All data files merged (a fresh copy: tests may change it)."""
    return copy.deepcopy(_raw_merged())


@functools.lru_cache(maxsize=1)
def _raw_merged() -> dict[str, Any]:
    root = resources.files("provision.matrix") / "data"
    merged: dict[str, Any] = {}
    for p in sorted(root.iterdir(), key=lambda x: x.name):
        if p.name.endswith(".yaml"):
            loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
            merged.update(yaml.load(p.read_text(), Loader=loader) or {})
    return merged


def _source_items(entry: dict[str, Any]) -> list[str]:
    s = entry.get("source")
    return [s] if isinstance(s, str) else list(s or [])


@pytest.mark.parametrize("section", SOURCED)
def test_every_entry_has_a_source_that_resolves(section: str) -> None:
    data = raw()
    known = set(data["sources"])
    assert data[section], f"{section} is empty"
    for entry in data[section]:
        items = _source_items(entry)
        assert items, f"{section}: {entry.get('name') or entry.get('version') or entry} has no source"
        for item in items:
            assert item in known or item.startswith("https://"), f"{section}: unknown source {item!r}"


def test_every_source_is_used_and_has_an_url() -> None:
    data = raw()
    used: set[str] = set()
    packaging = data["packaging"]
    for section in (*SOURCED, "packaging"):
        entries = (
            data[section]
            if isinstance(data[section], list)
            else [packaging, *packaging["repositories"], *packaging["rows"]]
        )
        for entry in entries:
            used |= set(_source_items(entry))
            for price in (entry.get("prices") or {}).values():
                used |= set(_source_items(price))
            used |= set(_source_items(entry.get("interconnect") or {}))
    used |= set(data["wheel_pins"]["source"])  # wheels.yaml: one source for the whole file
    used |= set(data["standalone_python"]["source"])
    used |= set(data["cudnn_floors_source"]) | set(_source_items(data["open_modules_geforce"]))  # one-entry sections
    for sid, src in data["sources"].items():
        assert src["url"].startswith("https://"), sid
        assert sid in used, f"source {sid} is listed but no entry cites it"


def test_entries_that_are_not_first_hand_record_confidence() -> None:
    data = raw()
    for section in (
        "gpus",
        "instance_families",
        "cuda_toolkits",
        "driver_branches",
        "cudnn",
        "pytorch",
        "tensorflow",
        "jax",
        "finetune_memory",
    ):
        for entry in data[section]:
            assert entry.get("confidence") in ("high", "medium", "low"), (section, entry)


def test_tables_are_newest_first() -> None:
    t = load().t
    for name, keys in {
        "cuda_toolkits": [Version(x.version) for x in t.toolkits],
        "driver_branches": [x.branch for x in t.branches],
        "cudnn": [Version(x.version) for x in t.cudnn],
        "pytorch": [Version(x.version) for x in t.torch],
        "tensorflow": [Version(x.version) for x in t.tensorflow],
        "jax": [Version(x.version) for x in t.jax],
        "gpus (by compute capability)": [g.cc for g in t.gpus],
    }.items():
        assert keys == sorted(keys, reverse=True), name
    for b in t.branches:
        assert list(b.releases) == sorted(b.releases, key=Version, reverse=True), b.branch
        assert b.newest is None or b.newest == b.releases[0], b.branch


def test_out_of_order_data_is_refused() -> None:
    data = raw()
    data["cuda_toolkits"] = list(reversed(data["cuda_toolkits"]))
    with pytest.raises(Exception, match="newest first"):
        build_tables(data)


@pytest.mark.parametrize("name", DESIGN_GPUS)
def test_every_design_gpu_is_known(name: str) -> None:
    assert load().gpu(name).name == name


def test_references_between_tables_resolve() -> None:
    k = load()
    t = k.t
    toolkits = {x.version for x in t.toolkits}
    os_ids = set(t.os_releases)
    for g in t.gpus:
        assert g.arch in t.architectures
    for it in t.instance_types.values():
        assert it.gpu in t.gpus
    for rel in t.torch:
        assert rel.variant(rel.pypi_default) is not None, rel.version
        for v in rel.variants:
            assert v.cuda is None or v.cuda in toolkits, (rel.version, v.name)
            assert v.name == "cpu" or v.name == f"cu{v.cuda.replace('.', '')}", (rel.version, v.name)
    for tf in t.tensorflow:
        assert tf.cuda in toolkits, tf.version
    for j in t.jax:
        assert all(m in t.jax_lines for m in j.cuda_majors), j.version
    for tk in t.toolkits:
        assert set(tk.os) <= os_ids, tk.version
        assert tk.major in t.minor_compat
    for b in t.branches:
        assert set(b.distro) <= os_ids, b.branch
        assert b.max_cuda.split(".")[0].isdigit()
    assert t.default_os in os_ids


def test_no_cuda_12_7_and_minor_floors_match_nvidia() -> None:
    k = load()
    assert "12.7" not in {x.version for x in k.t.toolkits}
    assert k.minor_floor(11) == "450.80.02"
    assert k.minor_floor(12) == "525.60.13"
    assert k.minor_floor(13) == "580.65.06"


def test_kernel_module_rules_per_architecture() -> None:
    arch = load().t.architectures
    for name in ("kepler", "maxwell", "pascal", "volta"):
        assert arch[name].kernel_modules == "proprietary-only"
    assert arch["blackwell"].kernel_modules == "open-only"
    for name in ("turing", "ampere", "ada", "hopper"):
        assert arch[name].kernel_modules == "open-recommended"


def test_first_hand_checks_agree_with_the_data() -> None:
    """The pip METADATA read on 2026-11-30 (evidence file) matches the torch/TF rows it checks."""
    text = (resources.files("provision.matrix") / "evidence" / "pip-metadata-2026-11-30.txt").read_text()
    k = load()
    t28 = next(r for r in k.t.torch if r.version == "2.8.0")
    assert "nvidia-cudnn-cu12==9.10.2.21" in text and t28.variant("cu128").cudnn == "9.10.2.21"  # type: ignore[union-attr]
    t214 = next(r for r in k.t.torch if r.version == "2.14.1")
    assert "nvidia-cudnn-cu13==9.24.0.43" in text and t214.variant("cu130").cudnn == "9.24.0.43"  # type: ignore[union-attr]
    assert "cuda-toolkit[" in text and t214.pypi_default == "cu130"
    assert "tensorflow 2.21.0 requires_python >=3.10" in text


@pytest.mark.parametrize(("os_id", "suite"), [("debian-12", "bookworm"), ("debian-13", "trixie")])
def test_debian_pythons_and_gcc_are_the_archives(os_id: str, suite: str) -> None:
    """The Packages index read 2026-12-02 (evidence file): python3's interpreter first, the only one, and gcc's."""
    text = (resources.files("provision.matrix") / "evidence" / "debian-packages-2026-12-02.txt").read_text()
    section = text.split(f"== {suite} ")[1].split("\n== ")[0]
    rows = {m.split(" | ")[0].removeprefix("Package: "): m for m in section.splitlines() if m.startswith("Package: ")}
    interpreters = sorted(name.removeprefix("python") for name in rows if name.startswith("python3."))
    default = rows["python3"].split("Depends: python")[1].split(" ")[0]
    gcc_major = int(rows["gcc"].split("Depends: ")[1].split("gcc-")[1].split(" ")[0])
    osr = load().os_release(os_id)
    assert osr.pythons[0] == default and sorted(osr.pythons) == interpreters
    assert osr.gcc == gcc_major


# --- issue 15: facts read from primary sources on 2026-12-01 (/work/notes/i15-facts.md) --------

EVERY_BRANCH = [620, 615, 610, 595, 590, 580, 575, 570, 565, 560, 555, 550, 545, 535, 530, 525, 520, 515, 510]
EVERY_BRANCH += [495, 470, 465, 460, 450]


def test_every_driver_branch_from_450_is_known_with_a_release() -> None:
    t = load().t
    assert [b.branch for b in t.branches] == EVERY_BRANCH
    for b in t.branches:
        assert b.newest is not None and b.releases, b.branch


def test_every_known_driver_release_has_a_form_a_pin_may_take() -> None:
    """`--driver` and `stack.driver` take an exact version by its form (request.DRIVER_SPEC), not
    by the list: the forms must cover every release the data knows, and the branch must be its own."""
    from provision.stack.request import DRIVER_SPEC

    seen = 0
    for b in load().t.branches:
        for version in {*b.releases, *([b.newest] if b.newest else []), *b.distro.values()}:
            m = DRIVER_SPEC.match(version)
            assert m is not None and int(m.group(1)) == b.branch, version
            seen += 1
    assert seen > 50
    for impossible in ("580.1", "580.95.5", "580.1234", "58.95.05", "580.95.05.1"):
        assert DRIVER_SPEC.match(impossible) is None, impossible


def test_driver_branch_facts() -> None:
    k = load()
    r620, r615 = k.branch(620), k.branch(615)
    assert r620 is not None and r615 is not None
    assert (r620.cls, r620.eol, r620.max_cuda, r620.newest) == ("ltsb", "2029-09", "13.5", "620.70.06")
    assert (r615.cls, r615.eol, r615.newest) == ("new-feature", None, "615.71.10")
    newest = {b.branch: b.newest for b in k.t.branches}
    assert newest[580] == "580.178.04" and newest[595] == "595.91.07" and newest[610] == "610.57.04"
    assert newest[570] == "570.211.01" and newest[550] == "550.163.01" and newest[535] == "535.309.01"
    assert newest[470] == "470.256.02" and newest[450] == "450.248.02" and newest[460] == "460.106.00"


def test_new_feature_branches_have_no_eol_date_but_old_ones_are_past() -> None:
    """NVIDIA's R620 page: new-feature branches have no end-of-life date; the R580 page lists the
    older ones as end of life without a month (`eol: past`)."""
    t = load().t
    snapshot = t.snapshot
    for b in t.branches:
        if b.cls == "new-feature" and b.branch >= 590:
            assert b.eol is None and not b.end_of_life(snapshot), b.branch
        if b.branch < 580 and b.branch != 570:  # 570 production until 2026-02, 535 until 2026-06
            assert b.end_of_life(snapshot), b.branch
    by = {b.branch: b for b in t.branches}
    assert by[565].eol == "past" and by[565].eol_text(snapshot) == "end of life (NVIDIA gives no month)"
    assert (by[470].eol, by[550].eol, by[460].eol, by[450].eol) == ("2024-07", "2025-06", "2022-01", "2023-07")
    assert by[620].eol_text(snapshot) == "supported until 2029-09"


def test_an_eol_that_is_neither_a_month_nor_past_is_refused() -> None:
    data = raw()
    data["driver_branches"][0]["eol"] = "soon"
    with pytest.raises(Exception, match="neither YYYY-MM"):
        build_tables(data)


def test_uv_wheels_are_pinned_for_every_arch_each_a_wheel_of_that_uv_with_a_sha256() -> None:
    """python_env installs uv only by these sha256: an arch without one, another release's file or
    a malformed hash would fail every host at the uv step, so the data is refused at load."""
    sp = build_tables(raw()).standalone_python
    assert sp is not None and set(sp.uv_wheels) == set(sp.archs)
    for change, message in (
        (lambda w: w.pop("aarch64"), "no wheel of uv for aarch64"),
        (
            lambda w: w["x86_64"].update({"uv-0.1.0-py3-none-manylinux_2_17_x86_64.whl": "0" * 64}),
            f"no uv {sp.uv} wheel",
        ),
        (lambda w: w["x86_64"].update(dict.fromkeys(w["x86_64"], "F" * 64)), "or no sha256"),
    ):
        data = raw()
        change(data["standalone_python"]["uv_wheels"])
        with pytest.raises(Exception, match=message):
            build_tables(data)


@pytest.mark.parametrize("driver", ["515", "565", "565.57.01", "450", "460", "615"])
def test_a_host_driver_of_every_branch_resolves(driver: str) -> None:
    """Branches that sit on many hosts (515, 565, ...) resolve (or refuse with a rule), never exit 2."""
    from provision.errors import Unsatisfiable
    from provision.stack.request import HostSpec, StackRequest
    from provision.stack.resolve import resolve

    k = load()
    req = StackRequest.build(driver=driver, knowledge=k)
    try:
        res = resolve(req, HostSpec.describe(gpu="A100-80GB", knowledge=k), k).to_json()
    except Unsatisfiable:
        return
    assert res["stack"]["driver"]["branch"] == driver.split(".", maxsplit=1)[0]


def test_cuda_toolkit_facts() -> None:
    k = load()
    assert k.toolkit("11.7").releases["U1"] == "515.48.07"
    assert k.toolkit("13.2").releases["U2"] == "595.71.05"
    assert "debian-12" not in k.toolkit("12.2").os and "debian-12" in k.toolkit("12.3").os
    assert "debian-13" in k.toolkit("13.0").os
    assert "ubuntu-20.04" not in k.toolkit("13.0").os and "ubuntu-24.04" in k.toolkit("12.5").os


def test_cudnn_facts() -> None:
    k = load()
    assert k.cudnn_release("9.13.0.50").min_cc == "7.5"
    assert k.cudnn_release("9.17.0.29").version == "9.17.0.29"
    assert k.cudnn_release("9.17").version == "9.17.1.4"  # a series finds its newest release
    for version in ("8.6.0.163", "8.7.0.84", "9.3.0.75", "9.8.0.87", "9.10.2.21", "9.11.1.4", "9.11.0.98"):
        assert k.cudnn_release(version).version == version
    for rel in k.t.cudnn:
        major_minor = tuple(int(p) for p in rel.version.split(".")[:2])
        expected = "7.5" if major_minor >= (9, 11) else "5.0" if major_minor >= (8, 9) else "3.5"
        assert rel.min_cc == expected, rel.version
        majors = {b.cuda_major for b in rel.builds}
        assert (11 in majors) == (major_minor <= (9, 10)), rel.version  # 9.10.2.21: the last CUDA 11 build
    assert 11 in {b.cuda_major for b in k.cudnn_release("9.7.1.26").builds}


def test_every_cudnn_a_framework_pins_is_known() -> None:
    k = load()
    known = {r.version for r in k.t.cudnn}
    pinned = {v.cudnn for r in k.t.torch for v in r.variants if v.cudnn}
    assert pinned <= known, pinned - known
    # and every exact cuDNN pin the wheels' own METADATA carries (TensorFlow 2.15's 8.9.4.25 was missing)
    from provision.matrix import wheels

    exact = {
        text.split("==")[1].split(";")[0].strip()
        for fp in wheels.load().frameworks.values()
        for texts in fp.pins.values()
        for text in texts
        if text.startswith("nvidia-cudnn-cu") and "==" in text
    }
    assert exact and exact <= known, exact - known


def test_python_lists_from_pypi_wheels() -> None:
    t = load().t
    torch = {r.version: r for r in t.torch}
    assert "3.13" in torch["2.5.1"].python and torch["2.5.1"].python_x86_64_only == ("3.13",)
    assert "3.15" in torch["2.15.0"].python and "3.10" not in torch["2.15.0"].python
    jax = {r.version: r for r in t.jax}
    assert jax["0.12.0.1"].python[0] == "3.12" and jax["0.11.0"].python[0] == "3.12"
    assert jax["0.11.2"].cudnn_min[12] == "9.10.2.21" and jax["0.11.1"].cudnn_min[12] == "9.8"


def test_tensorflow_patch_releases_and_and_cuda_pythons() -> None:
    t = load().t
    tf = {r.version: r for r in t.tensorflow}
    for version in ("2.12.1", "2.13.1", "2.14.1", "2.15.0.post1", "2.15.1", "2.16.2", "2.17.1", "2.18.1", "2.19.1"):
        assert version in tf, version
    assert tf["2.15.0"].and_cuda and tf["2.15.0"].and_cuda_python == ()
    assert tf["2.15.1"].and_cuda_python == ("3.9", "3.10", "3.11")
    assert tf["2.14.1"].and_cuda_python == ("3.9", "3.10") and tf["2.14.0"].and_cuda_python == ("3.9", "3.10")
    assert tf["2.13.1"].and_cuda_python == ()
    for r in t.tensorflow:
        assert set(r.and_cuda_python) <= set(r.python), r.version


def test_tensorflow_2_15_0_and_cuda_is_refused_naming_tensorrt_libs() -> None:
    from provision.errors import Unsatisfiable
    from provision.stack.request import HostSpec, StackRequest
    from provision.stack.resolve import resolve

    k = load()
    host = HostSpec.describe(gpu="A100-80GB", os="ubuntu-22.04", knowledge=k)
    with pytest.raises(Unsatisfiable) as err:
        resolve(StackRequest.build(frameworks=["tensorflow[and-cuda]==2.15.0"], knowledge=k), host, k)
    assert err.value.conflicts[0].startswith("tf_and_cuda:") and "tensorrt-libs" in err.value.conflicts[0]
    assert any(s["value"] == "tensorflow[and-cuda]==2.15.1" for s in err.value.suggestions)
    res = resolve(StackRequest.build(frameworks=["tensorflow[and-cuda]==2.15.1"], knowledge=k), host, k)
    assert res.to_json()["stack"]["frameworks"]["tensorflow"]["version"] == "2.15.1"


def test_tensorflow_2_14_and_cuda_on_python_3_11_is_refused() -> None:
    from provision.errors import Unsatisfiable
    from provision.stack.request import HostSpec, StackRequest
    from provision.stack.resolve import resolve

    k = load()
    host = HostSpec.describe(gpu="A100-80GB", os="debian-12", knowledge=k)  # Python 3.11 only
    with pytest.raises(Unsatisfiable) as err:  # the OS's Python only: no standalone 3.10
        resolve(StackRequest.build(frameworks=["tensorflow==2.14.1"], python_source="os", knowledge=k), host, k)
    assert any(c.startswith("tf_and_cuda:") and "tensorrt==8.5.3.1" in c for c in err.value.conflicts)
    ok = HostSpec.describe(gpu="A100-80GB", os="ubuntu-22.04", knowledge=k)  # Python 3.10
    assert resolve(StackRequest.build(frameworks=["tensorflow==2.14.1"], knowledge=k), ok, k).to_json()["ok"]


def test_ec2_prices_from_the_catalog() -> None:
    k = load()
    price = {it.name: it.price for it in k.instance_types}
    for name, usd in {"g4dn.xlarge": 0.526, "g5.xlarge": 1.006, "g6.xlarge": 0.8048, "p4de.24xlarge": 27.44705}.items():
        p = price[name]
        assert p is not None and p.usd_per_hour == usd and p.read == "2026-12-01", name
        assert p.source == ("ec2_prices_skypilot_catalog",) and p.confidence == "medium", name
    assert price["p5e.48xlarge"] is None  # no on-demand row in the catalog


def test_the_parsed_data_is_cached_per_digest_and_any_cache_trouble_means_parsing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from provision.matrix.knowledge import cached_yaml

    calls: list[int] = []

    def parse() -> dict[str, Any]:
        calls.append(1)
        return {"version": "x", "rows": [{"a": 1, "b": None, "c": ["d", 2.5, True]}]}

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = cached_yaml("abc", parse)
    assert (tmp_path / "provision" / "knowledge" / "abc.marshal").is_file()
    assert cached_yaml("abc", parse) == first and len(calls) == 1  # the second start reads the copy
    assert cached_yaml("def", parse) == first and len(calls) == 2  # other data files: parsed anew
    (tmp_path / "provision" / "knowledge" / "abc.marshal").write_bytes(b"\x00truncated")
    assert cached_yaml("abc", parse) == first and len(calls) == 3  # a broken copy: parsed, rewritten
    monkeypatch.setenv("XDG_CACHE_HOME", "/proc/no-such-cache")
    assert cached_yaml("ghi", parse) == first and len(calls) == 4  # an unwritable cache: parsed

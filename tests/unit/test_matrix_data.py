"""The knowledge data itself: sourced, newest first, every reference resolves.

These read the raw YAML as well as the typed tables, so a new entry without `source:` or out
of order fails here, not in a resolve months later.
"""

from __future__ import annotations

import copy
import functools
from importlib import resources
from typing import Any

import pytest
import yaml
from packaging.version import Version

from provision.matrix import load
from provision.matrix.knowledge import build_tables

DESIGN_GPUS = [
    "K80",
    "P100",
    "V100",
    "T4",
    "A10",
    "A10G",
    "A30",
    "A40",
    "A100-40GB",
    "A100-80GB",
    "L4",
    "L40",
    "L40S",
    "H100-PCIe",
    "H100-SXM",
    "H100-NVL",
    "H200",
    "B200",
    "B300",
    "GB200",
    "RTX-3090",
    "RTX-4090",
    "RTX-5090",
    "RTX-A6000",
    "RTX-6000-Ada",
    "RTX-PRO-6000-Blackwell",
]

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
    used |= set(data["wheel_pins"]["source"])  # wheels.yaml: one source for the whole file
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

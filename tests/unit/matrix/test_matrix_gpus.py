"""The GPU and EC2 tables and their name lookups (the names `provision probe` maps lspci IDs to)."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from provision.errors import BadInput
from provision.matrix import load
from tests.support.design import DESIGN_GPUS  # the one list of GPUs DESIGN.md names


@pytest.mark.parametrize("name", DESIGN_GPUS)
def test_every_design_gpu_is_known_by_its_canonical_name(name: str) -> None:
    assert load().gpu(name).name == name


@pytest.mark.parametrize(
    ("typed", "canonical"),
    [
        ("h100 sxm", "H100-SXM"),
        ("H100_SXM", "H100-SXM"),
        ("NVIDIA H100-SXM", "H100-SXM"),
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("nvidia h100 pcie", "H100-PCIe"),
        ("Tesla V100-SXM2-16GB", "V100"),
        ("Tesla T4", "T4"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA GeForce RTX 4090", "RTX-4090"),
        ("rtx 6000 ada generation", "RTX-6000-Ada"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX-PRO-6000-Blackwell-Server"),
        ("10de:2330", "H100-SXM"),
        ("10DE:2335", "H200"),
        ("[10de:26b9]", "L40S"),
        ("NVIDIA GH200 120GB", "GH200"),  # the driver's name for some 10de:2342 boards
        ("NVIDIA PG509-210", "A100-80GB"),
        ("H100 SXM5 94GB", "H100-SXM"),  # lspci's name, kept as an alias
        ("10de:1eb4", "T4G"),
    ],
)
def test_names_users_and_tools_print_resolve_to_the_canonical_model(typed: str, canonical: str) -> None:
    assert load().gpu(typed).name == canonical


def test_gpu_fields_are_typed_and_complete() -> None:
    h = load().gpu("H100-SXM")
    assert (h.compute_capability, h.memory_gib, h.arch) == ("9.0", 80.0, "hopper")
    assert "10de:2330" in h.pci_ids
    assert "NVIDIA H100 80GB HBM3" in h.nvml_names
    assert h.needs_fabric_manager is True
    assert h.kernel_modules == "open-recommended"
    assert load().gpu("V100").kernel_modules == "proprietary-only"
    assert load().gpu("B200").kernel_modules == "open-only"
    assert load().gpu("GH200").kernel_modules == "open-only"  # Grace Hopper: open modules required
    assert load().gpu("K80").last_driver_branch == 470
    assert load().gpu("L4").needs_fabric_manager is False


def test_pci_lookup_is_case_insensitive_and_none_when_unknown() -> None:
    k = load()
    assert k.gpu_by_pci_id("10DE:2330") is k.gpu("H100-SXM")
    assert k.gpu_by_pci_id("10de:ffff") is None
    assert k.gpu_by_pci_id("8086:1234") is None
    assert k.gpu_by_pci_id("garbage") is None


def test_pci_ids_are_unique_across_models() -> None:
    seen: dict[str, str] = {}
    for g in load().gpus:
        for pci in g.pci_ids:
            assert pci not in seen, f"{pci} in {seen.get(pci)} and {g.name}"
            seen[pci] = g.name


@pytest.mark.parametrize(
    ("typed", "expected"),
    [("H100", "H100-SXM"), ("A10Q", "A10G"), ("RTX4085", "RTX-4080"), ("A100", "A100-40GB")],
)
def test_unknown_gpu_is_bad_input_with_nearest_names(typed: str, expected: str) -> None:
    with pytest.raises(BadInput) as err:
        load().gpu(typed)
    assert expected in err.value.suggestions
    assert err.value.exit_code == 2
    assert "\n" not in err.value.one_line()


_README_ROW = re.compile(r"^\| (.+?) +\| ([0-9A-F]{4})[ 0-9A-F]*\|$")


def _driver_table() -> list[tuple[str, str]]:
    """(product name, "10de:xxxx") rows of the open-module README kept as evidence."""
    text = (
        resources.files("provision.matrix") / "evidence" / "open-gpu-kernel-modules-595.45.04-compatible-gpus.txt"
    ).read_text()
    return [(m[1], f"10de:{m[2].lower()}") for line in text.splitlines() if (m := _README_ROW.match(line))]


def test_nvml_names_citing_the_driver_readme_are_its_names_for_the_models_ids() -> None:
    rows = _driver_table()
    assert len(rows) > 60 and ("NVIDIA H100 80GB HBM3", "10de:2330") in rows
    cited = [g for g in load().gpus if "open_modules_readme" in g.source]
    assert len(cited) >= 25
    for g in cited:
        for name in g.nvml_names:
            assert any(n == name and pci in g.pci_ids for n, pci in rows), f"{g.name}: {name!r} not the driver's"


def test_every_driver_name_for_a_known_id_reaches_its_model() -> None:
    # 10de:2339 is plain "NVIDIA H100" in the driver: deliberately not a name, "H100" alone is ambiguous
    k = load()
    for name, pci in _driver_table():
        model = k.gpu_by_pci_id(pci)
        assert model is not None, pci
        if name == "NVIDIA H100":
            with pytest.raises(BadInput):
                k.gpu(name)
        else:
            assert k.gpu(name) is model, (name, pci)


def test_unknown_pci_id_is_bad_input() -> None:
    with pytest.raises(BadInput, match="PCI ID"):
        load().gpu("10de:ffff")


def test_instance_types_carry_gpu_count_arch_and_price_date() -> None:
    k = load()
    p5 = k.instance_type("p5.48xlarge")
    assert (p5.gpu.name, p5.gpu_count, p5.arch, p5.fabric_manager) == ("H100-SXM", 8, "x86_64", True)
    assert p5.price is not None and p5.price.read and p5.price.usd_per_hour > 0
    assert k.instance_type("P5.4XLARGE").fabric_manager is False
    gb = k.instance_type("p6e-gb200.36xlarge")
    assert (gb.gpu.name, gb.gpu_count, gb.arch) == ("GB200", 4, "aarch64")
    assert k.instance_type("p5e.48xlarge").price is None  # no sourced on-demand price: unknown, not invented


def test_unknown_instance_type_suggests_nearest() -> None:
    with pytest.raises(BadInput) as err:
        load().instance_type("p5.49xlarge")
    assert "p5.48xlarge" in err.value.suggestions


def test_load_is_cached_and_versioned() -> None:
    assert load() is load()
    assert load().version and len(load().sha256) == 64

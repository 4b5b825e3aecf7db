"""Shared helpers of the probe unit tests: fixture files and a stand-in for the knowledge data."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

FIXTURES = Path(__file__).with_name("fixtures") / "probe"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


@dataclass(frozen=True)
class FakeModel:
    name: str
    compute_capability: str


# A deliberately tiny table: the parsers must take whatever lookup they are given. The tests
# that use the real knowledge data call provision.matrix directly.
TABLE = {
    "10de:2330": FakeModel("H100-SXM", "9.0"),
    "10de:2237": FakeModel("A10G", "8.6"),
    "10de:2684": FakeModel("RTX-4090", "8.9"),
    "10de:27b8": FakeModel("L4", "8.9"),
}


def table_lookup(pci_id: str) -> FakeModel | None:
    return TABLE.get(pci_id)

"""data/packaging.yaml itself: every row sourced, keys pinned in full, every OS covered, no overlaps.

These read the typed table (and the raw YAML for order), so a row without a source, a short key
id, an OS with an install method but no rows, or two rows that both apply fails here.
"""

from __future__ import annotations

import itertools
from importlib import resources

import pytest
import yaml

from provision.matrix import load
from provision.matrix.packaging import PackagingError, PackagingRow, build_packaging
from provision.model.packages import FINGERPRINT

K = load()
TABLE = K.t.packaging
assert TABLE is not None


def test_every_row_and_repository_cites_known_sources() -> None:
    for entry in (*TABLE.repositories, *TABLE.rows):
        assert entry.source, entry
        for s in entry.source:
            assert s in K.t.sources or s.startswith("https://"), (entry, s)
        assert entry.confidence in ("high", "medium", "low"), entry


def test_fingerprints_are_full_40_hex_or_unverified_and_low() -> None:
    for r in TABLE.repositories:
        if r.key_fingerprint is None:
            assert r.confidence == "low", r.id
        else:
            assert FINGERPRINT.match(r.key_fingerprint), r.id
            short = r.key_url.rsplit("/", 1)[-1].removesuffix(".pub").upper()
            if r.name == "cuda":  # NVIDIA names the key file by its short id
                assert r.key_fingerprint.endswith(short), r.id


@pytest.mark.parametrize(
    ("os_id", "short"),
    [
        ("ubuntu-24.04", "3BF863CC"),
        ("debian-12", "3BF863CC"),
        ("debian-13", "8793F200"),
        ("rhel-9", "D42D0685"),
        ("rocky-9", "D42D0685"),
        ("amzn-2023", "D42D0685"),
    ],
)
def test_each_os_gets_the_key_its_repository_signs_with(os_id: str, short: str) -> None:
    repo = TABLE.repository("cuda", os_id)
    assert repo is not None and repo.key_fingerprint is not None and repo.key_fingerprint.endswith(short)


def test_every_os_with_an_install_method_has_driver_rows_for_each_method() -> None:
    """Every OS and method has the newest branch; below 590 all but debian13 (whose repository
    carries no 580-or-older drivers), and the distro rows cover every branch the OS carries."""
    for o in K.os_releases:
        for method in o.install_methods:
            branches = [595] if method == "nvidia-repo" else [b.branch for b in K.t.branches if o.id in b.distro]
            if method == "nvidia-repo" and o.id != "debian-13":
                branches += [580, 535]
            for flavour in ("open", "proprietary"):
                for branch in branches:
                    row = TABLE.row("driver", o.id, method=method, branch=branch, kernel_modules=flavour)
                    assert row is not None, (o.id, method, flavour, branch)
                    assert row.manager == ("apt" if o.family == "debian" else "dnf"), (o.id, row)
        if "nvidia-repo" in o.install_methods:
            for component in ("fabric_manager", "cuda_toolkit", "cudnn", "container_toolkit"):
                assert TABLE.row(component, o.id, method="nvidia-repo", branch=595) is not None, (o.id, component)
    assert TABLE.row("driver", "debian-13", method="nvidia-repo", branch=580) is None
    assert TABLE.row("dcgm", "debian-13") is None  # DCGM lists no Debian 13


def _may_both_apply(a: PackagingRow, b: PackagingRow) -> bool:
    return (
        a.component == b.component
        and bool(set(a.os) & set(b.os))
        and (a.method is None or b.method is None or a.method == b.method)
        and (a.kernel_modules is None or b.kernel_modules is None or a.kernel_modules == b.kernel_modules)
        and (not a.gpus or not b.gpus or bool(set(a.gpus) & set(b.gpus)))
        and (a.cudnn_major is None or b.cudnn_major is None or a.cudnn_major == b.cudnn_major)
    )


def test_no_two_rows_of_a_component_apply_to_the_same_host_and_branch() -> None:
    for a, b in itertools.combinations(TABLE.rows, 2):
        if _may_both_apply(a, b):
            assert not a.branches.overlaps(b.branches), (a.component, a.os, a.branches, b.os, b.branches)


def test_rows_are_ordered_newest_branch_range_first() -> None:
    for component in {r.component for r in TABLE.rows}:
        for a, b in itertools.combinations([r for r in TABLE.rows if r.component == component], 2):
            if _may_both_apply(a, b):
                assert (a.branches.from_ or 0) > (b.branches.from_ or 0), (component, a.branches, b.branches)


def test_holds_are_installed_packages_and_roles_are_the_contracts() -> None:
    for r in TABLE.rows:
        assert r.role in ("nvidia_driver", "fabric_manager", "cuda_toolkit", "cudnn", "container_toolkit", "dcgm")
        assert r.install
        if r.module_streams:
            assert r.manager == "dnf"


def test_no_code_outside_the_table_names_nvidia_packages() -> None:
    """The names live in data/packaging.yaml only (role_vars is the roles' part)."""
    import pathlib

    root = pathlib.Path(str(resources.files("provision")))
    names = ("nvidia-open", "cuda-drivers", "nvidia-fabricmanager", "cudnn9-cuda", "nvidia-driver-pinning")
    for path in root.rglob("*.py"):
        if path.name == "role_vars.py" or "hosts" in path.parts:  # roles' part; the probe reads any name
            continue
        text = path.read_text()
        assert not [n for n in names if f'"{n}' in text], path


def test_the_loader_refuses_a_short_key_id_and_a_missing_repository() -> None:
    raw = yaml.safe_load((resources.files("provision.matrix") / "data" / "packaging.yaml").read_bytes())["packaging"]
    bad = {**raw, "repositories": [{**raw["repositories"][0], "key_fingerprint": "3BF863CC"}]}
    with pytest.raises(PackagingError, match="40"):
        build_packaging(bad)
    with pytest.raises(PackagingError, match="no repository"):
        build_packaging({**raw, "repositories": []})

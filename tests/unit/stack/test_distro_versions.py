"""Ubuntu's distro driver: the host's own index at probe -> facts -> the resolver's driver version.

The fixtures (tests/unit/fixtures/probe/ubuntu-driver-index) are the shapes of the real tools'
output: `apt-cache show --no-all-versions` of Canonical's per-kernel module packages (the record
of NVIDIA's GPU Operator docs, "precompiled drivers": `Depends: ..., nvidia-kernel-common-525-server
(>= 525.85.12)`), `apt-cache policy` of the headless set, and dpkg-query rows of the installed
`linux-image-*` (metapackage versions are dotted, `linux-image-generic-hwe-22.04 6.5.0.14.14~22.04.7`
beside kernel 6.5.0-14). Versions are made up in the archive's format.
"""

from __future__ import annotations

from typing import Any

import pytest

from provision.errors import Unsatisfiable
from provision.hosts import gather
from provision.hosts import parse_packages as pp
from provision.model.facts import ProbedHost
from provision.stack import distro_versions as dv
from provision.stack.request import HostSpec, StackRequest
from provision.stack.resolve import resolve
from tests.support.driver_plans import ubuntu_entries
from tests.support.probe_fixtures import fixture, table_lookup

OPTIONS = gather.GatherOptions(lookup=table_lookup)


def _index_section(name: str, lists: bool = True) -> str:
    part = f"ubuntu-driver-index/{name}"
    return (
        f"@@lists {'yes' if lists else 'no'}\n@@images\n{fixture(part + '-images.txt')}"
        f"@@show\n{fixture(part + '-show.txt')}@@policy\n{fixture(part + '-policy.txt')}"
    )


def _facts(kernel: str, name: str, **more: str) -> dict[str, Any]:
    sections = {
        "id": "root\n0",
        "os_release": fixture("os-release/ubuntu-22.04"),
        "uname": f"{kernel}\nx86_64",
        "lspci": fixture("lspci/hgx-h100-8gpu.txt"),
        "ubuntu_driver_index": _index_section(name),
        **more,
    }
    return gather.facts_from_sections(sections, OPTIONS).to_json()


def test_probe_reads_the_running_kernels_precompiled_modules_and_the_headless_set() -> None:
    facts = _facts("6.8.0-52-generic", "hwe-22.04")
    index = facts["ubuntu_driver_index"]
    # both linux-image-generic (GA 5.15) and -generic-hwe-22.04 are installed: the running kernel's wins
    assert index["kernel_flavour"] == "generic-hwe-22.04" and index["lists"] is True
    assert [(m["branch"], m["open"], m["driver_version"]) for m in index["modules"]] == [
        (570, True, "570.172.08"),
        (580, False, "580.95.05"),
        (580, True, "580.95.05"),
    ]
    assert index["modules"][2]["package"] == "linux-modules-nvidia-580-server-open-6.8.0-52-generic"
    assert index["modules"][2]["version"] == "6.8.0-52.53~22.04.1"
    assert index["userspace"]["nvidia-utils-580-server"] == {
        "installed": "580.95.05-0ubuntu0.22.04.2",
        "candidate": "580.95.05-0ubuntu0.22.04.2",
    }
    assert index["userspace"]["nvidia-headless-no-dkms-580-server"]["installed"] is None


def test_a_host_that_is_not_ubuntu_has_no_index() -> None:
    sections = {"id": "root\n0", "os_release": fixture("os-release/debian-12"), "uname": "6.1.0-28-amd64\nx86_64"}
    assert gather.facts_from_sections(sections, OPTIONS).to_json()["ubuntu_driver_index"] is None


@pytest.mark.parametrize(
    ("kernel", "metas", "flavour"),
    [
        ("5.15.0-91-generic", {"generic": "5.15.0.91.88", "generic-hwe-22.04": "6.8.0.52.53~22.04.1"}, "generic"),
        (
            "6.8.0-52-generic",
            {"generic": "5.15.0.91.88", "generic-hwe-22.04": "6.8.0.52.53~22.04.1"},
            "generic-hwe-22.04",
        ),
        ("6.8.0-52-generic", {"generic-hwe-22.04": "6.8.0.57.57~22.04.1"}, "generic-hwe-22.04"),  # not rebooted yet
        ("6.8.0-1021-aws", {"aws": "6.8.0.1024.26~22.04.1"}, "aws"),
        ("6.8.0-1019-gcp", {}, "gcp"),  # no metapackage: what uname -r says
        ("5.15.0-1071-azure", {"azure": "5.15.0.1071.69", "generic": "5.15.0.91.88"}, "azure"),
        ("6.8.0-52-lowlatency", {"lowlatency-hwe-22.04": "6.8.0.52.53~22.04.1"}, "lowlatency-hwe-22.04"),
        ("weird", {}, None),
    ],
)
def test_kernel_flavour(kernel: str, metas: dict[str, str], flavour: str | None) -> None:
    assert pp.kernel_flavour(kernel, metas) == flavour


def test_kernel_metapackages_leave_out_the_per_kernel_images() -> None:
    metas = pp.kernel_metapackages(fixture("ubuntu-driver-index/hwe-22.04-images.txt"))
    assert metas == {"generic": "5.15.0.91.88", "generic-hwe-22.04": "6.8.0.52.53~22.04.1"}


def test_the_driver_version_comes_from_the_kernels_modules_and_the_plan_holds_the_headless_set_at_it() -> None:
    facts = _facts("6.8.0-52-generic", "hwe-22.04")
    found = dv.ubuntu_driver(ProbedHost.from_json(facts), 580, True)
    assert (found.version, found.kernel_flavour, found.refused) == ("580.95.05", "generic-hwe-22.04", None)
    assert found.version is not None
    assert ubuntu_entries(facts, found.version) == [
        ("nvidia-headless-no-dkms-580-server-open", "580.95.05-*"),
        ("nvidia-utils-580-server", "580.95.05-*"),
        ("linux-modules-nvidia-580-server-open-generic-hwe-22.04", None),
        ("linux-modules-nvidia-580-server-open-6.8.0-52-generic", None),
    ]


def test_a_kernel_whose_modules_lag_behind_the_archives_user_space_is_refused() -> None:
    """The archive keeps only the newest nvidia-utils; the old kernel's modules are an older driver."""
    facts = _facts("6.8.0-1021-aws", "aws-22.04")
    found = dv.ubuntu_driver(ProbedHost.from_json(facts), 580, True)
    assert found.version is None and found.kernel_flavour == "aws"
    assert found.refused and "nvidia-headless-no-dkms-580-server-open 580.95.05" in found.refused
    assert "modules are 580.82.07" in found.refused and "boot the newest kernel" in found.refused


def test_a_branch_without_precompiled_modules_for_the_kernel_is_refused() -> None:
    found = dv.ubuntu_driver(ProbedHost.from_json(_facts("6.8.0-52-generic", "hwe-22.04")), 570, False)
    assert found.refused == (
        "install_method: Ubuntu has no precompiled 570-server modules for kernel 6.8.0-52-generic in the host's index"
    )


def test_without_a_host_the_version_is_decided_on_the_host() -> None:
    found = dv.ubuntu_driver(None, 580, True)
    assert found.decided_on_host and found.version is None and found.refused is None
    entries = ubuntu_entries(None, "580.95.05")  # the knowledge's version stands in for the stack's
    assert [n for n, _ in entries[2:]] == [
        "linux-modules-nvidia-580-server-open-{kernel_flavour}",
        "linux-modules-nvidia-580-server-open-{kernel}",
    ]
    assert {v for _, v in entries} == {None}
    # apt had no lists at probe: nothing to read, the host decides as well
    no_lists = {"kernel": "6.8.0-52-generic", "ubuntu_driver_index": {"kernel_flavour": "generic", "lists": False}}
    assert dv.ubuntu_driver(ProbedHost.from_json(no_lists), 580, True).decided_on_host


def _l4_facts(kernel: str, name: str) -> dict[str, Any]:
    facts = _facts(kernel, name)
    facts["gpus"] = [{"model": "L4", "pci_id": "10de:27b8"}]
    facts["nvswitch_count"] = 0
    return facts


def test_the_resolver_takes_the_probed_hosts_version_for_ubuntus_distro_driver() -> None:
    host = HostSpec.from_facts(ProbedHost.from_json(_l4_facts("6.8.0-52-generic", "hwe-22.04")))
    res = resolve(StackRequest.build(driver="580", install_method="distro"), host).to_json()
    assert res["stack"]["driver"]["version"] == "580.95.05"
    with pytest.raises(Unsatisfiable, match=r"offers 580\.95\.05, not 580\.105\.08"):
        resolve(StackRequest.build(driver="580.105.08", install_method="distro"), host)
    stale = HostSpec.from_facts(ProbedHost.from_json(_l4_facts("6.8.0-1021-aws", "aws-22.04")))
    with pytest.raises(Unsatisfiable, match="boot the newest kernel"):
        resolve(StackRequest.build(driver="580", install_method="distro"), stale)

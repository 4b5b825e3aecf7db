"""The package plan (provision.lock/2's ``packages``): per OS family and branch range, from the table.

Each case pins what the table gives one host: the repository with its full key fingerprint, the
module streams, the packages in order with the manager's version expression, the holds and the
services. JSON is made only at the edges (to_json/from_json), and a lock round-trips byte for byte.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from provision.errors import BadInput
from provision.matrix import load
from provision.model.packages import PackagePlan
from provision.stack.candidates import DriverChoice
from provision.stack.lock import dumps_lock, parse_lock
from provision.stack.packages import check_plannable, package_plan
from provision.stack.request import HostSpec, StackRequest
from provision.stack.resolve import resolve

GOLDEN = Path(__file__).parents[1] / "golden" / "render"
APT_KEY = "EB693B3035CD5710E231E123A4B469963BF863CC"
RPM_KEY = "610C7B14E068A878070DA4E99CD0A493D42D0685"
DEBIAN13_KEY = "02182E60104FCDC26EAE1B8597A5D4CB8793F200"


def _plan(
    os: str,
    version: str,
    *,
    gpu: str = "L4",
    count: int = 1,
    method: str = "nvidia-repo",
    flavour: str = "open",
    arch: str | None = None,
    **req: Any,
) -> PackagePlan:
    k = load()
    branch = k.branch(int(version.split(".", maxsplit=1)[0]))
    assert branch is not None
    d = DriverChoice(branch, version, method, flavour)
    host = HostSpec.describe(gpu=gpu, gpu_count=count, os=os, arch=arch)
    cudnn_major = 12 if req.get("cudnn") else None
    return package_plan(k, StackRequest.build(**req), host, d, [], cudnn_major=cudnn_major)


def _specs(plan: PackagePlan, role: str = "nvidia_driver") -> list[str]:
    sep = "=" if plan.manager == "apt" else "-"
    return [i.name + (f"{sep}{i.version}" if i.version else "") for i in plan.for_role(role)]


def test_apt_below_590_pins_the_branch_metapackage_at_the_version() -> None:
    plan = _plan("ubuntu-22.04", "580.95.05")
    assert plan.manager == "apt" and plan.module_streams == ()
    [repo] = plan.repositories
    assert repo.name == "cuda" and repo.key_fingerprint == APT_KEY
    assert repo.url == "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/"
    assert repo.key_url == repo.url + "3bf863cc.pub"
    assert _specs(plan) == ["nvidia-open-580=580.95.05-*"]
    assert plan.holds == ("nvidia-open-580",)
    assert [s.name for s in plan.services] == ["nvidia-persistenced"]


def test_apt_from_590_installs_the_exact_version_pinning_package_first() -> None:
    """The pinning package whose name carries the version is unversioned (pinning it at
    `=<driver>-*` fails: the branch ones are versioned `<branch>-N`)."""
    plan = _plan("debian-12", "595.58.03", flavour="proprietary")
    assert _specs(plan) == ["nvidia-driver-pinning-595.58.03", "cuda-drivers=595.58.03-*"]
    assert plan.install[0].version is None and plan.install[0].repository == "cuda"
    assert set(plan.holds) == {"nvidia-driver-pinning-595.58.03", "cuda-drivers"}


def test_debian_13_uses_its_own_key_and_sbsa_on_aarch64() -> None:
    plan = _plan("debian-13", "595.58.03", arch="aarch64")
    [repo] = plan.repositories
    assert repo.key_fingerprint == DEBIAN13_KEY and repo.key_url.endswith("/debian13/sbsa/8793F200.pub")


@pytest.mark.parametrize("os_id", ["rhel-9", "rocky-9", "amzn-2023"])
def test_dnf_enables_the_branch_stream_then_the_metapackage_with_its_epoch(os_id: str) -> None:
    plan = _plan(os_id, "595.58.03")
    assert plan.manager == "dnf" and plan.module_streams == ("nvidia-driver:595-open",)
    dkms = [] if os_id == "amzn-2023" else ["dkms"]  # from EPEL on RHEL and Rocky, first
    assert _specs(plan) == [*dkms, "nvidia-open-3:595.58.03"]
    repo = plan.repositories[-1]
    assert repo.key_fingerprint == RPM_KEY and repo.key_url.endswith("/x86_64/D42D0685.pub")
    assert [r.name for r in plan.repositories] == ["epel", "cuda"][-1 - len(dkms) :]
    assert not any("pinning" in i.name for i in plan.install)  # pinning packages are apt's only


def test_dnf_before_575_installs_the_streams_packages() -> None:
    plan = _plan("rhel-9", "570.172.08", flavour="proprietary")
    assert plan.module_streams == ("nvidia-driver:570-dkms",)
    assert _specs(plan) == [
        "dkms",
        "nvidia-driver-3:570.172.08",
        "nvidia-driver-cuda-3:570.172.08",
        "kmod-nvidia-latest-dkms-3:570.172.08",
    ]


def test_rhel_10_has_no_module_streams_and_its_key_is_refused_until_verified() -> None:
    plan = _plan("rhel-10", "595.58.03")
    assert plan.module_streams == () and _specs(plan) == ["dkms", "nvidia-open-3:595.58.03"]
    assert plan.holds == ("nvidia-open",)  # versionlock
    epel, repo = plan.repositories
    assert epel.key_fingerprint == "7D8D15CBFC4E62688591FB2633D98517E37ED158"
    assert repo.key_url.endswith("/rhel10/x86_64/CDF6BA43.pub") and repo.key_fingerprint is None
    with pytest.raises(BadInput, match=r"CDF6BA43\.pub is not verified"):
        check_plannable(HostSpec.describe(os="rhel-10"), plan)


def test_distro_debian_installs_from_the_archive_with_the_arch_headers() -> None:
    plan = _plan("debian-12", "535.261.03", gpu="T4", method="distro", flavour="proprietary")
    assert plan.repositories == ()
    assert _specs(plan) == [
        "nvidia-driver=535.261.03-*",
        "nvidia-kernel-dkms=535.261.03-*",
        "nvidia-persistenced",
        "linux-headers-amd64",
    ]
    assert all(i.repository is None for i in plan.install)


def test_distro_ubuntu_headless_set_and_precompiled_modules_that_follow_the_kernel() -> None:
    plan = _plan("ubuntu-24.04", "580.95.05", method="distro")
    # described (--assume): no index was read, so the host's kernel decides the version and the
    # module names keep the kernel's flavour and release for the host to fill in
    assert _specs(plan) == [
        "nvidia-headless-no-dkms-580-server-open",
        "nvidia-utils-580-server",
        "linux-modules-nvidia-580-server-open-{kernel_flavour}",
        "linux-modules-nvidia-580-server-open-{kernel}",
    ]
    assert plan.holds == ("nvidia-headless-no-dkms-580-server-open", "nvidia-utils-580-server")


@pytest.mark.parametrize(
    ("os_id", "version", "want"),
    [
        ("ubuntu-22.04", "570.172.08", ["nvidia-fabricmanager-570=570.172.08-*"]),
        ("ubuntu-22.04", "595.58.03", ["nvidia-fabricmanager=595.58.03-*"]),
        ("rhel-9", "570.172.08", ["nvidia-fabric-manager-570.172.08"]),
        ("rhel-9", "595.58.03", ["nvidia-fabricmanager-595.58.03"]),
    ],
)
def test_fabric_manager_on_nvswitch_boards_at_the_drivers_version(os_id: str, version: str, want: list[str]) -> None:
    plan = _plan(os_id, version, gpu="H100-SXM", count=8)
    assert _specs(plan, "fabric_manager") == want
    assert [s.name for s in plan.services if s.role == "fabric_manager"] == ["nvidia-fabricmanager"]
    assert not _specs(_plan(os_id, version, gpu="H100-SXM", count=1), "fabric_manager")  # no NVSwitch


def test_nvlink5_boards_get_nvlsm_and_gb200_gets_imex_without_fabric_manager() -> None:
    b200 = _plan("ubuntu-24.04", "595.58.03", gpu="B200", count=8)
    assert _specs(b200, "fabric_manager") == ["nvidia-fabricmanager=595.58.03-*", "infiniband-diags", "nvlsm"]
    assert {i.name: i.repository for i in b200.install}["infiniband-diags"] is None  # the OS's archive
    h100 = _plan("ubuntu-24.04", "595.58.03", gpu="H100-SXM", count=8)
    assert "nvlsm" not in [i.name for i in h100.install]
    gb200 = _plan("ubuntu-24.04", "595.58.03", gpu="GB200", count=4, arch="aarch64")
    assert "nvidia-imex=595.58.03-*" in _specs(gb200) and not gb200.for_role("fabric_manager")
    assert "nvidia-imex" in [s.name for s in gb200.services]


def test_cuda_toolkit_and_cudnn_hold_the_libraries_too() -> None:
    apt = _plan("ubuntu-22.04", "580.95.05", cuda_toolkit="12.8", cudnn="9.10.2")
    assert _specs(apt, "cuda_toolkit") == ["cuda-toolkit-12-8"]
    assert "libcudnn9-cuda-12" in apt.holds and "libcudnn9-dev-cuda-12" in apt.holds
    dnf = _plan("rhel-9", "580.95.05", cuda_toolkit="12.8", cudnn="9.10.2")
    assert "libcudnn9-devel-cuda-12-9.10.2.21" in _specs(dnf, "cudnn")
    assert "cuda-toolkit-12-8" in dnf.holds  # versionlock at the installed EVR


def test_container_toolkit_comes_from_its_own_repository() -> None:
    k = load()
    host = HostSpec.describe(gpu="L4", os="ubuntu-22.04")
    plan = package_plan(
        k,
        StackRequest.build(),
        host,
        DriverChoice(None, None, "none", None),
        [],
        cudnn_major=None,
        extras={"container_toolkit": {"container_toolkit_version": "1.17.8"}},
    )
    [repo] = plan.repositories
    assert repo.name == "container-toolkit" and repo.url.endswith("/stable/deb/amd64/")
    assert repo.key_fingerprint == "C95B321B61E88C1809C4F759DDCAE044F796ECB0"
    assert _specs(plan, "container_toolkit")[0] == "nvidia-container-toolkit=1.17.8-*"


def test_el8_is_refused_at_plan_time_in_one_line() -> None:
    with pytest.raises(BadInput) as err:
        check_plannable(HostSpec.describe(os="rocky-8"))
    assert err.value.exit_code == 2 and "\n" not in err.value.one_line()
    assert "ansible-core" in err.value.message and "Python 3.6" in err.value.message


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
    assert {i.role for i in plan.install} == {"nvidia_driver", "fabric_manager", "cuda_toolkit", "cudnn"}
    assert PackagePlan.from_json(plan.to_json()) == plan
    assert list(plan.to_json()) == ["manager", "repositories", "module_streams", "install", "holds", "services", "pip"]


@pytest.mark.parametrize(
    "doc, where",
    [
        ({"manager": "yum"}, "manager"),
        ({"manager": "apt", "install": ["nvidia-open"]}, "install"),
        (
            {"manager": "apt", "install": [{"name": "x", "version": 3, "role": "cudnn", "repository": None}]},
            r"install\[0\]\.version",
        ),
        (
            {
                "manager": "apt",
                "install": [{"name": "x", "version": None, "role": "cudnn", "repository": None}],
                "holds": ["y"],
            },
            "holds",
        ),
        (
            {"manager": "apt", "install": [{"name": "x", "version": None, "role": "cudnn", "repository": "cuda"}]},
            r"install\[0\]\.repository",
        ),
        (
            {"manager": "apt", "install": [{"name": "x", "role": "cudnn", "repository": None}]},
            r"install\[0\]",
        ),  # no version key
        (
            {"manager": "dnf", "repositories": [{"name": "cuda", "url": 1, "key_url": "k", "key_fingerprint": None}]},
            r"repositories\[0\]\.url",
        ),
        ({"manager": "dnf", "repositories": [{"name": "cuda"}]}, r"repositories\[0\]"),
        ({"manager": "apt", "pip": {"index_url": 3}}, r"pip\.index_url"),
    ],
)
def test_a_plan_of_the_wrong_shape_is_bad_input(doc: dict[str, Any], where: str) -> None:
    with pytest.raises(BadInput, match=rf"packages\.{where} is not"):
        PackagePlan.from_json(doc)


def test_the_distro_method_takes_the_oss_own_toolkit() -> None:
    """Debian's and Ubuntu's nvidia-cuda-toolkit with their own driver; NVIDIA's cuda-toolkit-X-Y
    (its repository) only with NVIDIA's (the distro plan once named NVIDIA's, unreachable there)."""
    distro = _plan("debian-12", "535.261.03", method="distro", cuda_toolkit="11.8")
    [toolkit] = distro.for_role("cuda_toolkit")
    assert (toolkit.name, toolkit.version, toolkit.repository) == ("nvidia-cuda-toolkit", None, None)
    assert "nvidia-cuda-toolkit" in distro.holds
    repo = _plan("debian-12", "580.95.05", cuda_toolkit="12.8")
    assert [(i.name, i.repository) for i in repo.for_role("cuda_toolkit")] == [("cuda-toolkit-12-8", "cuda")]

"""The pure parsers of provision.hosts.parse_system and parse_packages against outputs of the real tools (fixtures)."""

from __future__ import annotations

import pytest

from provision.hosts import facts as hf
from provision.hosts import parse_packages as pp
from provision.hosts import parse_system as ps
from tests.support.probe_fixtures import fixture, table_lookup


@pytest.mark.parametrize(
    ("name", "slug", "codename", "like"),
    [
        ("ubuntu-22.04", "ubuntu-22.04", "jammy", ("debian",)),
        ("ubuntu-24.04", "ubuntu-24.04", "noble", ("debian",)),
        ("debian-12", "debian-12", "bookworm", ()),
        ("rhel-9", "rhel-9", None, ("fedora",)),
        ("amzn-2023", "amzn-2023", None, ("fedora",)),
    ],
)
def test_os_release(name: str, slug: str, codename: str | None, like: tuple[str, ...]) -> None:
    os_ = ps.parse_os_release(fixture(f"os-release/{name}"))
    assert os_.slug == slug
    assert os_.codename == codename
    assert os_.id_like == like
    assert os_.pretty_name


def test_lspci_hgx_counts_eight_gpus_and_four_nvswitches() -> None:
    devices = ps.parse_lspci_nn(fixture("lspci/hgx-h100-8gpu.txt"))
    assert len(devices) == 30  # every line of the real format parses, bridges and NICs included
    gpus, nvswitches = ps.classify_pci(devices, table_lookup)
    assert len(gpus) == 8
    assert nvswitches == 4
    assert {g.model for g in gpus} == {"H100-SXM"}
    assert {g.compute_capability for g in gpus} == {"9.0"}
    assert gpus[0].slot == "18:00.0" and gpus[0].pci_id == "10de:2330"
    assert "H100 SXM5 80GB" in gpus[0].description


def test_lspci_aspeed_vga_is_not_a_gpu() -> None:
    devices = ps.parse_lspci_nn(fixture("lspci/hgx-h100-8gpu.txt"))
    aspeed = [d for d in devices if d.vendor == "1a03" and d.class_code == "0300"]
    assert len(aspeed) == 1  # a VGA controller that classify_pci must not count
    gpus, _ = ps.classify_pci(aspeed, table_lookup)
    assert gpus == []


def test_lspci_consumer_card_audio_function_is_not_a_gpu() -> None:
    gpus, nvswitches = ps.classify_pci(ps.parse_lspci_nn(fixture("lspci/workstation-rtx4090.txt")), table_lookup)
    assert [(g.pci_id, g.model) for g in gpus] == [("10de:2684", "RTX-4090")]
    assert nvswitches == 0


def test_lspci_aws_g5() -> None:
    gpus, _ = ps.classify_pci(ps.parse_lspci_nn(fixture("lspci/aws-g5-a10g.txt")), table_lookup)
    assert [(g.slot, g.model, g.compute_capability) for g in gpus] == [("00:1e.0", "A10G", "8.6")]


def test_lspci_no_gpu() -> None:
    gpus, nvswitches = ps.classify_pci(ps.parse_lspci_nn(fixture("lspci/vm-no-gpu.txt")), table_lookup)
    assert (gpus, nvswitches) == ([], 0)


def test_unknown_nvidia_id_is_reported_with_model_null() -> None:
    gpus, _ = ps.classify_pci(ps.parse_lspci_nn(fixture("lspci/unknown-nvidia.txt")), table_lookup)
    assert len(gpus) == 1
    assert gpus[0].pci_id == "10de:2e2a"
    assert gpus[0].model is None and gpus[0].compute_capability is None


def test_sysfs_pci_fallback() -> None:
    gpus, _ = ps.classify_pci(ps.parse_sysfs_pci(fixture("sysfs-pci/vm-l4.txt")), table_lookup)
    assert [(g.slot, g.pci_id, g.model) for g in gpus] == [("0000:00:1e.0", "10de:27b8", "L4")]


def test_real_knowledge_data_names_the_hgx_gpus() -> None:
    from provision.matrix import load

    gpus, _ = ps.classify_pci(ps.parse_lspci_nn(fixture("lspci/hgx-h100-8gpu.txt")), load().gpu_by_pci_id)
    assert {(g.model, g.compute_capability) for g in gpus} == {("H100-SXM", "9.0")}


@pytest.mark.parametrize(
    ("name", "version", "flavor"),
    [
        ("open-580.txt", "580.95.05", "open"),
        ("proprietary-550.txt", "550.127.05", "proprietary"),
        ("open-aarch64-570.txt", "570.172.08", "open"),
    ],
)
def test_proc_driver_version(name: str, version: str, flavor: str) -> None:
    assert ps.parse_proc_driver_version(fixture(f"proc-driver-version/{name}")) == hf.DriverInfo(version, flavor)


def test_proc_driver_version_absent() -> None:
    assert ps.parse_proc_driver_version("") is None


@pytest.mark.parametrize(
    ("name", "version", "flavor"),
    [
        ("nvidia-open-580.txt", "580.95.05", "open"),
        ("nvidia-proprietary-550.txt", "550.127.05", "proprietary"),
    ],
)
def test_modinfo(name: str, version: str, flavor: str) -> None:
    assert ps.parse_modinfo(fixture(f"modinfo/{name}")) == hf.DriverInfo(version, flavor)


def test_proc_modules() -> None:
    assert "nouveau" in ps.parse_proc_modules(fixture("proc-modules/nouveau.txt"))
    loaded = ps.parse_proc_modules(fixture("proc-modules/nvidia.txt"))
    assert {"nvidia", "nvidia_uvm", "nvidia_drm"} <= loaded and "nouveau" not in loaded


@pytest.mark.parametrize(
    ("name", "state"),
    [("enabled.txt", True), ("disabled.txt", False), ("setup-mode.txt", False), ("not-efi.txt", None)],
)
def test_mokutil(name: str, state: bool | None) -> None:
    assert ps.parse_mokutil_sb_state(fixture(f"mokutil/{name}")) is state


def test_efivar_secure_boot() -> None:
    assert ps.parse_efivar_secure_boot(fixture("efivar/secureboot-on.txt")) is True
    assert ps.parse_efivar_secure_boot(fixture("efivar/secureboot-off.txt")) is False
    assert ps.parse_efivar_secure_boot("") is None


def test_nvidia_smi_xml_hgx() -> None:
    inv = ps.parse_nvidia_smi_xml(fixture("nvidia-smi/hgx-h100-8gpu.xml"))
    assert inv.source == "nvidia-smi"
    assert (inv.driver_version, inv.cuda_version) == ("580.95.05", "13.0")
    assert len(inv.gpus) == 8
    first = inv.gpus[0]
    assert first.name == "NVIDIA H100 80GB HBM3"
    assert first.pci_id == "10de:2330"
    assert first.pci_bus_id == "00000000:18:00.0"
    assert first.memory_mib == 81559
    assert first.uuid and first.uuid.startswith("GPU-")
    assert inv.fabric_state == "Completed"


def test_nvidia_smi_xml_single_gpu_without_fabric() -> None:
    inv = ps.parse_nvidia_smi_xml(fixture("nvidia-smi/aws-g5-a10g.xml"))
    assert [(g.name, g.pci_id, g.memory_mib) for g in inv.gpus] == [("NVIDIA A10G", "10de:2237", 23028)]
    assert inv.fabric_state is None  # N/A on a board without NVSwitch
    assert inv.cuda_version == "12.4"


def test_dpkg_query_keeps_installed_only() -> None:
    packages = pp.parse_dpkg_query(fixture("dpkg/ubuntu-22.04-hgx.txt"))
    assert packages["nvidia-driver-580-open"] == "580.95.05-0ubuntu1"
    assert "nvidia-driver-570-open" not in packages  # rc: removed, config files left
    assert "linux-headers-5.15.0-153-generic" not in packages  # un: not installed
    assert pp.driver_from_packages(packages) == hf.DriverInfo("580.95.05", "open")
    assert "nvidia-fabricmanager-580" in pp.driver_packages(packages)
    assert [t.version for t in pp.cuda_toolkits_from_packages(packages)] == ["12.8"]
    assert pp.cudnn_from_packages(packages) == hf.Cudnn("9.10.2.21", "libcudnn9-cuda-12")


def test_dpkg_query_debian_packages() -> None:
    packages = pp.parse_dpkg_query(fixture("dpkg/debian-12-driver.txt"))
    assert pp.driver_from_packages(packages) == hf.DriverInfo("535.247.01", "proprietary")
    assert pp.cuda_toolkits_from_packages(packages) == [hf.CudaToolkit("11.8", "/usr")]


def test_rpm_query_rhel_and_amazon_linux() -> None:
    rhel = pp.parse_rpm_query(fixture("rpm/rhel-9-driver.txt"))
    assert rhel["nvidia-driver"] == "3:550.127.05-1.el9"
    assert pp.driver_from_packages(rhel) == hf.DriverInfo("550.127.05", "proprietary")
    assert [t.version for t in pp.cuda_toolkits_from_packages(rhel)] == ["12.4"]
    amzn = pp.parse_rpm_query(fixture("rpm/amzn-2023-open.txt"))
    assert pp.driver_from_packages(amzn) == hf.DriverInfo("580.95.05", "open")
    assert "nvidia-fabric-manager" in pp.driver_packages(amzn)


def test_no_driver_packages() -> None:
    assert pp.driver_from_packages(pp.parse_dpkg_query(fixture("dpkg/ubuntu-24.04-bare.txt"))) is None


def test_cuda_version_files_and_nvcc() -> None:
    assert pp.parse_cuda_version_file("/usr/local/cuda-12.8", fixture("cuda/version-12.8.json")) == hf.CudaToolkit(
        "12.8", "/usr/local/cuda-12.8"
    )
    assert pp.parse_cuda_version_file("/usr/local/cuda-10.2", fixture("cuda/version-10.2.txt")) == hf.CudaToolkit(
        "10.2", "/usr/local/cuda-10.2"
    )
    assert pp.parse_cuda_version_file("/x", "garbage") is None
    assert pp.parse_nvcc_version(fixture("cuda/nvcc-12.8.txt")) == "12.8"
    assert pp.parse_nvcc_version(fixture("cuda/nvcc-debian-11.8.txt")) == "11.8"


def test_cudnn_header() -> None:
    assert pp.parse_cudnn_header(fixture("cuda/cudnn_version.h")) == "9.10.2"
    assert pp.parse_cudnn_header("#define CUDNN_MAJOR 9\n") is None


def test_df_and_meminfo() -> None:
    disks = ps.parse_df(fixture("df/hgx.txt"))
    assert [(d.mount, d.free_gib) for d in disks] == [("/", 1525.1), ("/var", 6780.5)]
    assert ps.parse_df(fixture("df/small-vm.txt"))[0].free_gib == 1.7
    assert ps.parse_meminfo(fixture("meminfo/hgx.txt")) == 2113522212 * 1024


def test_apt_cache_policy() -> None:
    assert pp.parse_apt_cache_policy(fixture("apt-cache-policy/candidate.txt")) is True
    assert pp.parse_apt_cache_policy(fixture("apt-cache-policy/installed.txt")) is True
    assert pp.parse_apt_cache_policy(fixture("apt-cache-policy/none.txt")) is False
    assert pp.parse_apt_cache_policy("", have_lists=True) is False
    assert pp.parse_apt_cache_policy("", have_lists=False) is None  # no lists yet: unknown


def test_dnf_list() -> None:
    assert pp.parse_dnf_list(fixture("dnf/kernel-devel-available.txt"), 0) is True
    assert pp.parse_dnf_list(fixture("dnf/no-match.txt"), 1) is False
    assert pp.parse_dnf_list(fixture("dnf/no-cache.txt"), 1) is None


def test_python_versions() -> None:
    assert ps.parse_python_version("Python 3.11.2\n") == "3.11"
    assert ps.parse_python_list("python3.12\npython3.10\npython3.12\npython3\n") == ["3.10", "3.12"]


def test_unattended_upgrades() -> None:
    units = "\n".join(
        f"{u} {s}"
        for u, s in zip(
            (
                "unattended-upgrades.service",
                "apt-daily.service",
                "apt-daily-upgrade.service",
                "apt-daily-upgrade.timer",
            ),
            fixture("systemctl/ubuntu-default.txt").split(),
            strict=False,
        )
    )
    on = ps.parse_unattended(units, "systemd\nsshd\n", fixture("apt-config/periodic-on.txt"))
    assert on.enabled and not on.running and on.active
    off = ps.parse_unattended(units, "systemd\n", fixture("apt-config/periodic-off.txt"))
    assert not off.enabled and not off.active
    busy = ps.parse_unattended("", "systemd\nunattended-upgr\n")
    assert busy.running and busy.active
    dnf = ps.parse_unattended("dnf-automatic.timer active\n", "")
    assert dnf.enabled


def test_locks_json() -> None:
    locks, why = ps.parse_locks_json(
        '{"held": [{"path": "/var/lib/dpkg/lock-frontend", "pid": 812, "process": "unattended-upgr"}], "denied": []}'
    )
    assert why is None and locks == [hf.PackageLock("/var/lib/dpkg/lock-frontend", 812, "unattended-upgr")]
    locks, why = ps.parse_locks_json('{"held": [], "denied": ["/var/lib/dpkg/lock"]}')
    assert locks is None and why is not None and "needs root" in why


def test_ec2_instance_type_and_runtimes() -> None:
    assert ps.parse_ec2_instance_type("p5.48xlarge\n") == "p5.48xlarge"
    assert ps.parse_ec2_instance_type("<html>proxy error</html>") is None
    assert ps.parse_ec2_instance_type("") is None
    assert ps.parse_container_runtimes("docker /usr/bin/docker\nnvidia-ctk /usr/bin/nvidia-ctk\n") == [
        "docker",
        "nvidia-ctk",
    ]


def test_lock_snippet_writes_json_that_parses() -> None:
    """The lock program on hosts writes its JSON by hand (no json import there): it must parse."""
    import importlib.util
    import json

    from provision.hosts.gather import SNIPPETS

    spec = importlib.util.spec_from_file_location("package_locks", SNIPPETS / "package_locks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    doc = {
        "held": [{"path": "/var/lib/dpkg/lock", "pid": 7, "process": 'we"ird\\na\tme\x01é'}],
        "denied": [],
        "none": None,
    }
    assert json.loads(module._json(doc)) == doc


def test_apt_periodic_last_setting_wins() -> None:
    units = "apt-daily-upgrade.timer active\n"
    text = 'APT::Periodic::Unattended-Upgrade "1";\nAPT::Periodic::Unattended-Upgrade "0";\n'
    assert ps.parse_unattended(units, "", text).enabled is False
    assert ps.parse_unattended(units, "", text.replace('"0"', '"7"')).enabled is True


def test_the_installed_health_section() -> None:
    """probe.sh's ``health`` section: the spec as ``cat`` printed it, then ``sha256sum``'s lines."""
    digest = "a" * 64
    text = f'@@spec\n{{\n    "lock_hash": "0123456789abcdef"\n}}\n\n@@files\n{digest}  check.py\n{"b" * 64}  nvml.py\n'
    found = ps.parse_installed_health(text)
    assert found == hf.InstalledHealth({"lock_hash": "0123456789abcdef"}, {"check.py": digest, "nvml.py": "b" * 64})
    # no spec file; a spec that is not a JSON object; no program folder
    assert ps.parse_installed_health(f"@@files\n{digest}  check.py\n").spec is None
    assert ps.parse_installed_health('@@spec\n["x"]\n@@files\n') == hf.InstalledHealth(None, {})
    assert ps.parse_installed_health("@@spec\n{ not json\n@@files\nsha256sum: x: No such file\n").files == {}

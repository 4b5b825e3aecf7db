"""Whole hosts: raw sections as the gather script prints them -> HostFacts -> JSON and the
resolver's host description. Each scenario is built from fixture outputs of the real tools."""

from __future__ import annotations

import json

import pytest

from provision.errors import BadInput
from provision.hosts import facts as hf
from provision.hosts import gather
from provision.model.facts import ProbedHost
from provision.stack.request import HostSpec
from tests.support.probe_fixtures import OPTIONS, fixture, hgx_ubuntu_2204, table_lookup


def _units(name: str) -> str:
    return fixture(f"systemctl/{name}")


def test_hgx_h100_ubuntu_2204() -> None:
    facts = gather.facts_from_sections(hgx_ubuntu_2204(), OPTIONS)
    doc = facts.to_json()
    assert json.loads(json.dumps(doc)) == doc  # JSON-serialisable as it is
    assert doc["os"] == "ubuntu-22.04" and doc["os_codename"] == "jammy"
    assert (doc["arch"], doc["kernel"]) == ("x86_64", "5.15.0-157-generic")
    assert doc["gpu_count"] == 8 and doc["nvswitch_count"] == 4
    assert {g["model"] for g in doc["gpus"]} == {"H100-SXM"}
    assert (doc["driver_version"], doc["driver_kernel_modules"], doc["driver_loaded"]) == (
        "580.95.05",
        "open",
        True,
    )
    assert doc["nvml"]["source"] == "nvidia-smi" and len(doc["nvml"]["gpus"]) == 8
    assert doc["kernel_headers"] == {
        "installed": True,
        "installable": True,
        "package": "linux-headers-5.15.0-157-generic",
    }
    assert (doc["efi"], doc["secure_boot"], doc["nouveau_loaded"]) == (True, False, False)
    assert doc["cuda_toolkits"] == [{"version": "12.8", "path": "/usr/local/cuda-12.8"}]
    assert doc["cudnn"] == {"version": "9.10.2", "source": "/usr/include/x86_64-linux-gnu/cudnn_version_v9.h"}
    assert doc["python"] == "3.10" and doc["pythons"] == ["3.10"]
    assert doc["disk_free_gib"] == 1525.1 and set(doc["disks"]) == {"/", "/var"}
    assert doc["memory_gib"] == 2015.6 and doc["cpus"] == 224
    assert doc["package_locks"] == []
    assert doc["unattended_upgrades"]["active"] is False  # units on, APT::Periodic off
    assert doc["container_runtimes"] == ["docker", "nvidia-ctk"]
    assert doc["ec2_instance_type"] is None
    assert hf.host_description(facts).to_json() == {
        "gpu": "H100-SXM",
        "compute_capability": "9.0",
        "gpu_count": 8,
        "os": "ubuntu-22.04",
        "arch": "x86_64",
        "python": "3.10",
    }


def test_workstation_ubuntu_2404_nouveau_secure_boot_no_driver() -> None:
    sections = {
        "id": "ada\n1000",
        "os_release": fixture("os-release/ubuntu-24.04"),
        "uname": "6.8.0-85-generic\nx86_64",
        "lspci": fixture("lspci/workstation-rtx4090.txt"),
        "proc_modules": fixture("proc-modules/nouveau.txt"),
        "dpkg": fixture("dpkg/ubuntu-24.04-bare.txt"),
        "headers_build": "no",
        "apt_headers": "@@lists yes\n" + fixture("apt-cache-policy/candidate.txt"),
        "efi": "yes",
        "mokutil": fixture("mokutil/enabled.txt"),
        "nvml": '{"available": false}',
        "python": "Python 3.12.3",
        "pythons": "python3.12\n",
        "units": _units("ubuntu-default.txt"),
        "apt_periodic": fixture("apt-config/periodic-on.txt"),
        "processes": "systemd\nunattended-upgr\n",
        "locks": '{"held": [{"path": "/var/lib/dpkg/lock-frontend", "pid": 1312, '
        '"process": "unattended-upgr"}], "denied": []}',
    }
    facts = gather.facts_from_sections(sections, OPTIONS)
    doc = facts.to_json()
    assert doc["os"] == "ubuntu-24.04" and doc["user"] == "ada" and doc["privileged"] is False
    assert [(g["model"], g["pci_id"]) for g in doc["gpus"]] == [("RTX-4090", "10de:2684")]
    assert doc["nouveau_loaded"] is True and doc["secure_boot"] is True
    assert doc["driver_version"] is None and doc["nvml"] is None and doc["nvml_error"] is None
    assert doc["kernel_headers"] == {
        "installed": False,
        "installable": True,
        "package": "linux-headers-6.8.0-85-generic",
    }
    assert doc["package_locks"] == [{"path": "/var/lib/dpkg/lock-frontend", "pid": 1312, "process": "unattended-upgr"}]
    assert doc["unattended_upgrades"] == {
        "active": True,
        "enabled": True,
        "running": True,
        "units": doc["unattended_upgrades"]["units"],
    }


def test_debian_12_vm_without_gpu_legacy_boot() -> None:
    sections = {
        "id": "root\n0",
        "os_release": fixture("os-release/debian-12"),
        "uname": "6.1.0-40-amd64\nx86_64",
        "lspci": fixture("lspci/vm-no-gpu.txt"),
        "proc_modules": "",
        "dpkg": fixture("dpkg/debian-12-driver.txt"),
        "headers_build": "yes",
        "apt_headers": "@@lists no\n",
        "efi": "no",
        "nvcc": "/usr/bin/nvcc\n" + fixture("cuda/nvcc-debian-11.8.txt"),
        "python": "Python 3.11.2",
        "pythons": "python3.11\n",
        "df": fixture("df/small-vm.txt"),
        "locks": '{"held": [], "denied": ["/var/lib/dpkg/lock"]}',
    }
    facts = gather.facts_from_sections(sections, OPTIONS)
    doc = facts.to_json()
    assert doc["os"] == "debian-12" and doc["gpus"] == [] and doc["nvswitch_count"] == 0
    assert doc["secure_boot"] is False  # legacy BIOS: nothing to reject modules
    # the Debian driver package is installed (DKMS built it) but the module is not loaded
    assert (doc["driver_version"], doc["driver_kernel_modules"], doc["driver_loaded"]) == (
        "535.247.01",
        "proprietary",
        False,
    )
    assert doc["cuda_toolkits"] == [{"version": "11.8", "path": "/usr"}]
    assert doc["kernel_headers"]["installed"] is True
    assert doc["package_locks"] is None and any("needs root" in w for w in doc["warnings"])
    assert hf.host_description(facts).to_json() == {
        "gpu": None,
        "compute_capability": None,
        "gpu_count": 0,
        "os": "debian-12",
        "arch": "x86_64",
        "python": "3.11",
    }


def test_rhel_9_driver_installed_not_loaded_headers_from_dnf() -> None:
    sections = {
        "id": "ec2-user\n1000",
        "os_release": fixture("os-release/rhel-9"),
        "uname": "5.14.0-570.12.1.el9_6.x86_64\nx86_64",
        "lspci": fixture("lspci/aws-g5-a10g.txt"),
        "modinfo": fixture("modinfo/nvidia-proprietary-550.txt"),
        "rpm": fixture("rpm/rhel-9-driver.txt"),
        "headers_build": "no",
        "dnf_headers": fixture("dnf/kernel-devel-available.txt") + "@@rc 0",
        "efi": "yes",
        "mokutil": fixture("mokutil/enabled.txt"),
        "units": _units("rhel-dnf-automatic.txt"),
        "python": "Python 3.9.21",
    }
    doc = gather.facts_from_sections(sections, OPTIONS).to_json()
    assert doc["os"] == "rhel-9" and doc["os_version"] == "9.6"
    assert (doc["driver_version"], doc["driver_kernel_modules"], doc["driver_loaded"]) == (
        "550.127.05",
        "proprietary",
        False,
    )
    assert "kmod-nvidia-latest-dkms" in doc["driver_packages"]
    assert doc["kernel_headers"] == {
        "installed": False,
        "installable": True,
        "package": "kernel-devel-5.14.0-570.12.1.el9_6.x86_64",
    }
    assert doc["unattended_upgrades"]["enabled"] is True  # dnf-automatic.timer
    assert doc["cuda_toolkits"] == [{"version": "12.4", "path": "/usr/local/cuda-12.4"}]


def test_amazon_linux_2023_g5_with_loaded_driver_and_instance_type() -> None:
    sections = {
        "id": "root\n0",
        "os_release": fixture("os-release/amzn-2023"),
        "uname": "6.1.153-175.280.amzn2023.x86_64\nx86_64",
        "lspci": fixture("lspci/aws-g5-a10g.txt"),
        "proc_modules": fixture("proc-modules/nvidia.txt"),
        "proc_driver": fixture("proc-driver-version/proprietary-550.txt"),
        "rpm": fixture("rpm/amzn-2023-open.txt"),
        "headers_build": "yes",
        "dnf_headers": fixture("dnf/no-cache.txt") + "@@rc 1",
        "nvidia_smi": fixture("nvidia-smi/aws-g5-a10g.xml"),
        "efi": "yes",
        "mokutil": fixture("mokutil/disabled.txt"),
        "imds": "g5.xlarge\n",
        "python": "Python 3.9.23",
    }
    facts = gather.facts_from_sections(sections, OPTIONS)
    doc = facts.to_json()
    assert doc["os"] == "amzn-2023" and doc["ec2_instance_type"] == "g5.xlarge"
    # the loaded module wins over what the packages say
    assert (doc["driver_version"], doc["driver_kernel_modules"]) == ("550.127.05", "proprietary")
    assert doc["nvml"]["gpus"][0]["name"] == "NVIDIA A10G"
    assert doc["kernel_headers"] == {
        "installed": True,
        "installable": True,
        "package": "kernel-devel-6.1.153-175.280.amzn2023.x86_64",
    }
    assert hf.host_description(facts).gpu == "A10G"


def test_unknown_gpu_keeps_pci_id_and_takes_cc_from_nvml() -> None:
    sections = {
        "id": "root\n0",
        "os_release": fixture("os-release/ubuntu-24.04"),
        "uname": "6.8.0-85-generic\nx86_64",
        "lspci": fixture("lspci/unknown-nvidia.txt"),
        "nvml": '{"available": true, "via": "nvml", "driver_version": "590.10.01", "cuda_version": "13.1",'
        ' "gpus": [{"index": 0, "name": "NVIDIA Next", "uuid": "GPU-1", "memory_mib": 196608,'
        ' "compute_capability": "12.1"}]}',
    }
    facts = gather.facts_from_sections(sections, OPTIONS)
    doc = facts.to_json()
    assert doc["gpus"][0]["pci_id"] == "10de:2e2a" and doc["gpus"][0]["model"] is None
    assert doc["driver_version"] == "590.10.01"  # from NVML when nothing else says
    desc = hf.host_description(facts)
    assert (desc.gpu, desc.compute_capability, desc.gpu_count) == (None, "12.1", 1)
    # a GPU the knowledge data lacks resolves for its architecture (its device-ID range here)
    # (issue 27), with the assumption said, not as a GPU-less host
    host = HostSpec.from_facts(hf.probed_host(facts))
    assert host.gpu is not None and (host.gpu.arch, host.gpu.compute_capability) == ("blackwell", "12.1")
    assert host.assumed is not None and "10de:2e2a" in host.assumed


def test_nvml_error_is_reported_not_raised() -> None:
    facts = gather.facts_from_sections(
        {"id": "root\n0", "nvml": '{"available": true, "error": "Driver Not Loaded"}'}, OPTIONS
    )
    assert facts.nvml is None and facts.nvml_error == "Driver Not Loaded"


def test_venv_frameworks() -> None:
    options = gather.GatherOptions(venv="/opt/provision/venv", lookup=table_lookup)
    sections = {
        "id": "root\n0",
        "python": "Python 3.11.2",
        "venv": '{"python": "3.12", "packages": {"torch": "2.8.0+cu128", "nvidia-cudnn-cu12": "9.10.2.21"},'
        ' "torch_cuda": "12.8"}',
    }
    facts = gather.facts_from_sections(sections, options)
    doc = facts.to_json()
    assert doc["frameworks"] == {"torch": "2.8.0+cu128"}
    assert doc["venv"]["packages"]["nvidia-cudnn-cu12"] == "9.10.2.21" and doc["venv"]["torch_cuda"] == "12.8"
    assert hf.host_description(facts).python == "3.12"  # the venv's Python is the one that matters
    missing = gather.facts_from_sections({"id": "root\n0", "venv": ""}, options).to_json()["venv"]
    assert missing["error"] and missing["packages"] == {}


def test_split_sections_round_trip() -> None:
    text = "\n@@provision-section id@@\nroot\n0\n\n@@provision-section lspci@@\n\n@@provision-section df@@\nx\n"
    assert gather.split_sections(text) == {"id": "root\n0", "lspci": "", "df": "x"}


def test_description_feeds_the_resolver() -> None:
    """The probed HGX becomes a resolver HostSpec (real knowledge data): NVSwitches -> Fabric Manager."""
    from provision.matrix import load

    options = gather.GatherOptions(lookup=load().gpu_by_pci_id)
    spec = HostSpec.from_facts(hf.probed_host(gather.facts_from_sections(hgx_ubuntu_2204(), options)))
    assert (spec.gpu.name if spec.gpu else None, spec.gpu_count, spec.os.id, spec.arch) == (
        "H100-SXM",
        8,
        "ubuntu-22.04",
        "x86_64",
    )
    assert spec.needs_fabric_manager is True


def test_pci_from_sysfs_where_lspci_is_missing_and_headers_from_the_apt_lists() -> None:
    sections = {
        "id": "root\n0",
        "uname": "6.1.0-40-amd64\nx86_64",
        "sysfs_pci": fixture("sysfs-pci/grep-vm-l4.txt"),
        "dpkg": "",
        "apt_headers": "@@lists yes\n@@listed yes",
    }
    doc = gather.facts_from_sections(sections, OPTIONS).to_json()
    assert [(g["slot"], g["pci_id"], g["model"]) for g in doc["gpus"]] == [("0000:00:1e.0", "10de:27b8", "L4")]
    assert doc["kernel_headers"] == {
        "installed": False,
        "installable": True,
        "package": "linux-headers-6.1.0-40-amd64",
    }
    sections["apt_headers"] = "@@lists yes\n@@listed no"
    assert gather.facts_from_sections(sections, OPTIONS).to_json()["kernel_headers"]["installable"] is False


def test_facts_json_is_what_resolve_reads() -> None:
    """resolve's HostSpec.from_facts reads the `facts` object of `probe --json` as it is printed."""
    from provision.matrix import load

    options = gather.GatherOptions(lookup=load().gpu_by_pci_id)
    facts = gather.facts_from_sections(hgx_ubuntu_2204(), options)
    probed = ProbedHost.from_json(json.loads(json.dumps(facts.to_json())))
    assert probed == hf.probed_host(facts)  # the JSON reader and the edge builder agree
    from_json = HostSpec.from_facts(probed)
    from_facts = HostSpec.from_facts(hf.probed_host(facts))  # what plan reads
    assert from_json == from_facts
    assert from_json.gpu is not None and from_json.gpu.name == "H100-SXM" and from_json.gpu_count == 8


def test_a_host_with_mixed_gpu_models_is_refused_by_the_one_adapter() -> None:
    """HostSpec.from_facts is the only facts -> HostSpec rule (plan, up and resolve use it): a probed
    host with two GPU models is bad input naming both, never described by its most common model."""
    from provision.matrix import load

    h100 = "18:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] (rev a1)"
    l4 = "3a:00.0 3D controller [0302]: NVIDIA Corporation AD104GL [L4] [10de:27b8] (rev a1)"
    sections = {"id": "root\n0", "os_release": fixture("os-release/ubuntu-22.04"), "uname": "5.15.0\nx86_64"}
    sections["lspci"] = "\n".join([h100, h100, l4])
    facts = gather.facts_from_sections(sections, gather.GatherOptions(lookup=load().gpu_by_pci_id))
    assert [g.model for g in facts.gpus] == ["H100-SXM", "H100-SXM", "L4"]
    with pytest.raises(BadInput, match=r"different GPU models \(H100-SXM, L4\)"):
        HostSpec.from_facts(hf.probed_host(facts))
    sections["lspci"] = "\n".join([h100, h100])
    same = HostSpec.from_facts(
        hf.probed_host(gather.facts_from_sections(sections, gather.GatherOptions(lookup=load().gpu_by_pci_id)))
    )
    assert (same.gpu.name if same.gpu else None, same.gpu_count) == ("H100-SXM", 2)


def test_the_resolvers_facts_are_read_from_json_once_and_malformed_ones_are_bad_input() -> None:
    """ProbedHost.from_json reads the `facts` object of `probe --json`; a value of the wrong type is
    bad input naming the key, not a KeyError deep in the resolver."""
    doc = {"os": "ubuntu-22.04", "arch": "x86_64", "gpus": [{"model": None, "pci_id": "10de:2330"}]}
    assert ProbedHost.from_json(doc).gpus[0].pci_id == "10de:2330"
    for bad, key in (
        ({"gpus": "H100"}, "facts.gpus"),
        ({"nvswitch_count": "6"}, "facts.nvswitch_count"),
        ({"os": 22.04}, "facts.os"),
        ({"ubuntu_driver_index": {"modules": [{"branch": 580}]}}, "facts.ubuntu_driver_index"),
    ):
        with pytest.raises(BadInput, match=key.replace(".", r"\.")):
            ProbedHost.from_json({**doc, **bad})

"""Issue 27 (knowledge, round 3), facts 6-10: each test names the fact and the primary source it was
read from (the source ids are in provision/matrix/data/sources.yaml)."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest

from provision.errors import BadInput, Unsatisfiable
from provision.matrix import load
from provision.matrix.model import DriverBranch
from provision.model.facts import ProbedHost
from provision.stack.request import HostSpec, StackRequest
from provision.stack.resolve import resolve
from tests.cli_run import provision


def _branch(n: int) -> DriverBranch:
    b = load().branch(n)
    assert b is not None
    return b


@pytest.mark.parametrize(
    ("torch", "on_r570"), [("2.11.0", "cu128"), ("2.12.1", "cu126"), ("2.13.0", "cu126"), ("2.14.1", "cu126")]
)
def test_fact6_torch_cu126_has_aarch64_builds_2_11_to_2_14(torch: str, on_r570: str) -> None:
    """pytorch/test-infra release/2.11 .. 2.14 list 12.6-aarch64 among the released builds
    (torch_test_infra_aarch64): a GH200 on R570 (CUDA 12.8 at most) is no longer refused 2.12-2.14
    (their only build for it is cu126; 2.11 still has cu128 too)."""
    rel = next(r for r in load().t.torch if r.version == torch)
    cu126 = rel.variant("cu126")
    assert cu126 is not None and cu126.aarch64 and cu126.archs("aarch64") == ("8.0", "9.0")
    res = resolve(
        StackRequest.build(frameworks=[f"torch=={torch}"], driver="570"), HostSpec.describe(gpu="GH200")
    ).to_json()
    assert res["stack"]["frameworks"]["torch"]["variant"] == on_r570
    assert res["host"]["arch"] == "aarch64"


def test_fact7_rtx_pro_6000_server_edition_needs_575_57_08() -> None:
    """10de:2bb5 is first named in g_nv_name_released.h at 575.57.08 (open_gpu_kernel_modules_name_table):
    the Server Edition (EC2 g7e) is refused R570 and the 575 releases before it; the workstation
    cards (10de:2bb1, 2bb4) keep R570."""
    k = load()
    server = k.gpu("10de:2bb5")
    assert (server.name, server.min_driver_branch, server.min_driver) == (
        "RTX-PRO-6000-Blackwell-Server",
        575,
        "575.57.08",
    )
    assert k.instance_type("g7e.48xlarge").gpu is server
    for pin in ("570", "575.51.03"):
        with pytest.raises(Unsatisfiable, match="driver_gpu"):
            resolve(StackRequest.build(driver=pin), HostSpec.describe(gpu="RTX-PRO-6000-Blackwell-Server"))
    assert resolve(StackRequest.build(driver="575.57.08"), HostSpec.describe(gpu="10de:2bb5")).stack.driver
    workstation = k.gpu("10de:2bb1")
    assert workstation.name == "RTX-PRO-6000-Blackwell" and workstation.min_driver_branch == 570
    assert resolve(StackRequest.build(driver="570"), HostSpec.describe(gpu="RTX-PRO-6000-Blackwell")).stack.driver


def test_fact8_b200_needs_570_133_20() -> None:
    """NVIDIA's GPU Operator platform support: 'HGX B200 requires a driver container version of
    570.133.20 or later' (gpu_operator_platform_b200): 570.26 and 570.124.06 are refused."""
    host = HostSpec.describe(gpu="B200", gpu_count=8)
    for old in ("570.26", "570.124.06"):
        with pytest.raises(Unsatisfiable, match=r"B200 needs driver 570\.133\.20 or later"):
            resolve(StackRequest.build(driver=old), host)
    driver = resolve(StackRequest.build(driver="570"), host).stack.driver
    assert driver is not None and driver.version == _branch(570).newest


def test_every_min_driver_is_a_release_of_the_models_floor_branch() -> None:
    for g in load().gpus:
        if g.min_driver is not None:
            assert int(g.min_driver.split(".")[0]) == g.min_driver_branch, g.name


@pytest.mark.parametrize(("tf", "min_cc"), [("2.18.0", "6.0"), ("2.21.0", "6.0"), ("2.17.0", "5.0")])
def test_fact9_tensorflow_2_18_on_starts_at_compute_capability_6_0(tf: str, min_cc: str) -> None:
    """TensorFlow's .bazelrc builds sm_60,sm_70,sm_80,sm_89,compute_90 from 2.18 (tf_bazelrc)."""
    rel = next(r for r in load().t.tensorflow if r.version == tf)
    assert rel.min_cc == min_cc


def test_fact10_h100_has_3rd_gen_nvswitch_and_no_subnet_manager() -> None:
    """Fabric Manager guide: HGX H100 uses 3rd-gen NVSwitches; NVLSM comes with the 4th gen (B200/B300)."""
    note = load().gpu("H100-SXM").note
    assert "3rd-gen NVSwitch" in note and "4th-gen" not in note.split(";")[0]
    assert "Subnet Manager is for 4th-gen NVSwitch (NVLink5: HGX B200/B300) only" in note


# --- a driver release that does not exist --------------------------------------------------------


def test_an_unknown_driver_release_is_bad_input_naming_the_branchs_newest() -> None:
    """--driver 580.999.99 would pin nvidia-open-580=580.999.99-* and fail on the host: exit 2."""
    with pytest.raises(BadInput) as err:
        StackRequest.build(driver="580.999.99")
    newest = _branch(580).releases[:4]
    assert err.value.exit_code == 2 and "580.999.99" in err.value.message
    assert all(r in err.value.one_line() for r in newest) and "--allow-unknown-driver" in err.value.one_line()
    assert err.value.suggestions == list(newest)
    # NVIDIA's, a distro's, an open-gpu-kernel-modules tag (drivers.yaml release_tags), a branch
    for known in ("580.95.05", "580.159.03", "535.261.03", "580.105.08", "575.64.05", "580"):
        assert StackRequest.build(driver=known).driver == known


def test_allow_unknown_driver_takes_it_with_a_warning() -> None:
    req = StackRequest.build(driver="580.999.99", allow_unknown_driver=True)
    doc = resolve(req, HostSpec.describe(gpu="L4", os="ubuntu-24.04")).to_json()
    assert doc["stack"]["driver"]["version"] == "580.999.99"
    warning = next(w for w in doc["warnings"] if w["code"] == "unknown_driver")
    assert "580.999.99" in warning["message"] and str(_branch(580).newest) in warning["message"]
    known = resolve(StackRequest.build(driver="580.95.05"), HostSpec.describe(gpu="L4")).to_json()
    assert not any(w["code"] == "unknown_driver" for w in known["warnings"])


@pytest.mark.parametrize("command", ["resolve", "plan"])
def test_the_cli_refuses_an_unknown_release_unless_allowed(command: str, tmp_path: Path) -> None:
    where = ["--gpu", "L4"] if command == "resolve" else ["--assume", "os=ubuntu-24.04,gpu=L4:1,name=h1"]
    r = provision(command, *where, "--driver", "580.999.99", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "unknown driver release `580.999.99`" in r.stderr and "Traceback" not in r.stderr
    ok = provision(command, *where, "--driver", "580.999.99", "--allow-unknown-driver", "--json", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "unknown_driver" in ok.stdout


def test_release_tags_are_the_193_open_module_tags_each_under_its_branch() -> None:
    """drivers.yaml release_tags: every tag of NVIDIA/open-gpu-kernel-modules at df1c9a3, on its branch."""
    branches = load().t.branches
    assert sum(len(b.tagged) for b in branches) == 193
    assert all(t.startswith(f"{b.branch}.") for b in branches for t in b.tagged)
    assert "580.105.08" in _branch(580).tagged and "570.26" not in _branch(570).tagged  # 570.26: CUDA 12.8's own


# --- the GPUs people own and rent -----------------------------------------------------------------

COMMON = {
    "RTX 3060": "RTX-3060",
    "RTX 3060 Ti": "RTX-3060-Ti",
    "RTX 3070": "RTX-3070",
    "RTX 3070 Ti": "RTX-3070-Ti",
    "RTX 3080": "RTX-3080",
    "RTX 3080 Ti": "RTX-3080-Ti",
    "RTX 3090 Ti": "RTX-3090",
    "RTX 4060 Ti": "RTX-4060-Ti",
    "RTX 4070": "RTX-4070",
    "RTX 4070 Ti": "RTX-4070-Ti",
    "RTX 4080": "RTX-4080",
    "RTX 4090 D": "RTX-4090",
    "RTX 5070": "RTX-5070",
    "RTX 5070 Ti": "RTX-5070-Ti",
    "RTX 5080": "RTX-5080",
    "RTX A2000": "RTX-A2000",
    "RTX A4000": "RTX-A4000",
    "RTX A4500": "RTX-A4500",
    "RTX A5000": "RTX-A5000",
    "RTX A5500": "RTX-A5500",
    "RTX 2000 Ada": "RTX-2000-Ada",
    "RTX 4000 Ada": "RTX-4000-Ada",
    "RTX 4500 Ada": "RTX-4500-Ada",
    "RTX 5000 Ada": "RTX-5000-Ada",
    "L20": "L20",
    "H20": "H20",
    "A800": "A800-80GB",
    "H800": "H800",
    "GH200 480GB": "GH200",
    "GH200 144GB": "GH200",
}


@pytest.mark.parametrize(("typed", "model"), COMMON.items())
def test_common_gpus_are_known_with_the_drivers_own_ids(typed: str, model: str) -> None:
    """Each has PCI IDs and NVML names from the driver's name table (open_gpu_kernel_modules_name_table,
    595.45.04; the README rows are kept in evidence/, which test_matrix_gpus checks names against)."""
    gpu = load().gpu(typed)
    assert gpu.name == model
    assert gpu.pci_ids and all(load().gpu_by_pci_id(p) is gpu for p in gpu.pci_ids)
    assert "open_modules_readme" in gpu.source
    resolve(StackRequest.build(), HostSpec.describe(gpu=typed))  # resolves with the defaults


# --- a GPU the catalogue does not know ------------------------------------------------------------


def test_every_driver_row_of_a_known_model_falls_in_its_architectures_device_range() -> None:
    """gpus.yaml pci_device_ranges against the driver's README rows kept in evidence/ (82 device IDs)."""
    k = load()
    rows = (
        resources.files("provision.matrix") / "evidence" / "open-gpu-kernel-modules-595.45.04-compatible-gpus.txt"
    ).read_text()
    ids = {f"10de:{m[1].lower()}" for m in re.finditer(r"^\| .+? +\| ([0-9A-F]{4})", rows, re.M)}
    assert len(ids) >= 80
    for pci in ids:
        model = k.gpu_by_pci_id(pci)
        assert model is not None
        device = int(pci[5:], 16)
        ranged = [(a, cc) for lo, hi, a, cc in k.t.pci_device_ranges if lo <= device <= hi]
        assert ranged == [(model.arch, model.compute_capability)], (pci, model.name, ranged)


def _probed(gpus: list[dict[str, str | None]]) -> HostSpec:
    return HostSpec.from_facts(ProbedHost.from_json({"os": "ubuntu-24.04", "arch": "x86_64", "gpus": gpus}))


def test_an_unknown_id_in_a_known_range_resolves_for_its_architecture_with_a_warning() -> None:
    # 10de:2d04 is the driver's "NVIDIA GeForce RTX 5060 Ti", not in the catalogue
    assert load().gpu_by_pci_id("10de:2d04") is None
    host = _probed([{"pci_id": "10de:2d04", "model": None}] * 2)
    assert host.gpu is not None and (host.gpu.arch, host.gpu.compute_capability, host.gpu_count) == (
        "blackwell",
        "12.0",
        2,
    )
    doc = resolve(StackRequest.build(), host).to_json()
    assert doc["stack"]["driver"]["kernel_modules"] == "open"  # Blackwell's rule: open only
    warning = next(w["message"] for w in doc["warnings"] if w["code"] == "gpu_assumed")
    assert "10de:2d04" in warning and "blackwell" in warning and "12.0" in warning and "--gpu" in warning


def test_nvmls_compute_capability_tells_the_architecture_where_no_range_does() -> None:
    host = _probed([{"pci_id": "10de:1380", "model": None, "compute_capability": "5.0"}])  # a Maxwell card
    assert host.gpu is not None and host.gpu.arch == "maxwell" and host.assumed and "NVML" in host.assumed
    doc = resolve(StackRequest.build(), host).to_json()
    assert doc["stack"]["driver"]["kernel_modules"] == "proprietary"
    assert int(doc["stack"]["driver"]["branch"]) <= 580  # Maxwell's last branch


def test_a_truly_unknown_gpu_is_exit_2_with_the_fix() -> None:
    with pytest.raises(BadInput) as err:
        _probed([{"pci_id": "10de:1380", "model": None}])
    assert err.value.exit_code == 2 and "10de:1380" in err.value.message
    assert "--gpu" in err.value.one_line() and "same architecture" in err.value.one_line()
    with pytest.raises(BadInput) as ranged:  # --gpu with an unknown ID names a known model of its architecture
        load().gpu("10de:2d04")
    assert "blackwell" in ranged.value.one_line() and "--gpu RTX-" in ranged.value.one_line()


def test_resolve_for_a_gb200_names_the_imex_that_plan_installs(tmp_path: Path) -> None:
    res = resolve(StackRequest.build(), HostSpec.describe(gpu="GB200", gpu_count=4))
    imex = [i for i in res.packages.install if i.name.startswith("nvidia-imex")]
    assert imex, "packaging.yaml plans IMEX for GB200"
    assert any(r.startswith(f"{imex[0].name} ") and "IMEX" in r for r in res.reasons), res.reasons
    table = provision("resolve", "--gpu", "GB200", cwd=tmp_path)
    assert table.returncode == 0 and "IMEX" in table.stdout and "nvidia-imex" in table.stdout
    h100 = resolve(StackRequest.build(), HostSpec.describe(gpu="H100-SXM", gpu_count=8))
    assert not any("IMEX" in r or "nvlsm" in r for r in h100.reasons)  # 3rd-gen NVSwitch: FM only


def test_the_newest_jax_on_ubuntu_22_04_says_the_python_floor_made_it_older() -> None:
    k = load()
    doc = resolve(StackRequest.build(frameworks=["jax"]), HostSpec.describe(gpu="L4", os="ubuntu-22.04")).to_json()
    jax = doc["stack"]["frameworks"]["jax"]["version"]
    newest = k.t.jax[0].version
    assert jax != newest and doc["stack"]["python"] == "3.11"
    why = next(r for r in doc["reasons"] if r.startswith(f"jax {jax}, not {newest}"))
    assert "no wheel for Python 3.11" in why
    on_24 = resolve(StackRequest.build(frameworks=["jax"]), HostSpec.describe(gpu="L4", os="ubuntu-24.04")).to_json()
    assert not any("no wheel for Python" in r for r in on_24["reasons"])


def test_k80_on_ubuntu_2404_is_refused_naming_the_repository(tmp_path: Path) -> None:
    """NVIDIA's ubuntu2404 repository starts at R515 (os.yaml repo_first_branch; source
    cuda_repo_ubuntu2404_no_r470, medium: its Packages index was not readable here), so no
    cuda-drivers-470 for a K80 there: unsatisfiable (exit 3, the contract's code for an impossible
    set) in one line that names the repository, the branch and the fix; ubuntu-22.04 still plans R470."""
    osr = load().os_release("ubuntu-24.04")
    assert osr.repo_first_branch == 515 and "cuda_repo_ubuntu2404_no_r470" in osr.source
    r = provision("resolve", "--gpu", "K80", "--os", "ubuntu-24.04", cwd=tmp_path)
    assert r.returncode == 3, r.stderr
    line = r.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "ubuntu2404 repository has no driver branch 470" in line and "older OS release" in line
    with pytest.raises(Unsatisfiable) as err:
        resolve(StackRequest.build(), HostSpec.describe(gpu="K80", os="ubuntu-24.04"))
    assert err.value.conflicts[0].startswith("install_method:")
    ok = resolve(StackRequest.build(), HostSpec.describe(gpu="K80", os="ubuntu-22.04")).to_json()
    assert ok["stack"]["driver"]["branch"] == "470"
    # a GPU with newer branches is not affected: the repository's own branches are planned
    t4 = resolve(StackRequest.build(), HostSpec.describe(gpu="T4", os="ubuntu-24.04")).to_json()
    assert int(t4["stack"]["driver"]["branch"]) >= 515


def test_unknown_os_lists_the_supported_names_from_the_data(tmp_path: Path) -> None:
    """An unknown OS is exit 2 in one line that lists every OS the data knows (generated, so a new
    os.yaml entry shows up without a code change)."""
    names = [o.id for o in load().os_releases]
    for bad in ("ubuntu-99.04", "plan9-4"):  # one with near names, one without
        r = provision("resolve", "--gpu", "T4", "--os", bad, cwd=tmp_path)
        assert r.returncode == 2, r.stderr
        line = r.stderr.strip()
        assert "\n" not in line and f"unknown OS `{bad}`" in line
        assert "supported: " + ", ".join(names) in line

"""Resolver cases, one per line: a request and a host, and what must come out.

Each case names the rule it exercises. ``expect`` holds dotted paths into the resolve JSON
(``stack.driver.branch``), ``warn`` the warning codes that must be present (``no_warn`` means
none at all), ``unsat`` the rule that must be named first among the conflicts and ``suggest`` a
suggestion option that must be offered. The versions come from the shipped knowledge.
"""

from __future__ import annotations

from typing import Any

import pytest

from provision.errors import BadInput, Unsatisfiable
from provision.matrix import load
from provision.model.facts import ProbedHost
from provision.stack.request import HostSpec, StackRequest
from provision.stack.resolve import resolve

REQ_KEYS = {
    "frameworks",
    "driver",
    "kernel_modules",
    "cuda_toolkit",
    "cudnn",
    "python",
    "torch_index",
    "torch_variant",
    "install_method",
    "python_source",
    "host_python",
}

# (id, inputs, expectations)
CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    # --- the DESIGN.md example and defaults -------------------------------------------------
    (
        "design-example",
        {"gpu": "H100-SXM", "gpu_count": 8, "os": "ubuntu-22.04", "frameworks": ["torch==2.8.0"]},
        {
            "stack.driver.branch": "620",
            "stack.driver.version": "620.70.06",
            "stack.driver.kernel_modules": "open",
            "stack.fabric_manager.version": "620.70.06",
            "stack.frameworks.torch.variant": "cu128",
            "stack.frameworks.torch.index_url": "https://download.pytorch.org/whl/cu128",
            "stack.frameworks.torch.cudnn": "9.10.2.21",
            "stack.python": "3.10",
            "stack.cuda_toolkit": None,
            "stack.cudnn": None,
            "no_warn": True,
        },
    ),
    (
        "no-options",
        {},
        {
            "host.gpu": None,
            "host.os": "ubuntu-24.04",
            "stack.frameworks.torch.version": "2.15.0",
            "stack.driver.branch": "620",
            "no_warn": True,
        },
    ),
    (
        "default-torch-on-h100",
        {"gpu": "H100-SXM"},
        {"stack.frameworks.torch.version": "2.15.0", "stack.fabric_manager": None},
    ),
    # --- gpu_arch: the wheel must carry code for the GPU ------------------------------------
    (
        "5090-torch26-no-kernels",
        {"gpu": "RTX-5090", "frameworks": ["torch==2.6.0"]},
        {"unsat": "gpu_arch", "suggest": "--framework"},
    ),
    (
        "5090-torch271-cu128-not-pypi",
        {"gpu": "RTX-5090", "frameworks": ["torch==2.7.1"]},
        {"stack.frameworks.torch.variant": "cu128"},
    ),
    (
        "b200-torch271-cu128",
        {"gpu": "B200", "frameworks": ["torch==2.7.1"]},
        {"stack.frameworks.torch.variant": "cu128"},
    ),
    (
        "h100-torch20-cu118-not-cu117",
        {"gpu": "H100-PCIe", "frameworks": ["torch==2.0.1"], "os": "ubuntu-22.04"},
        {"stack.frameworks.torch.variant": "cu118"},
    ),
    (
        "k80-torch28-no-kernels",
        {"gpu": "K80", "frameworks": ["torch==2.8.0"], "os": "ubuntu-22.04"},
        {"unsat": "gpu_arch", "suggest": "--framework"},
    ),
    (
        "k80-newest",
        {"gpu": "K80", "os": "ubuntu-22.04"},
        {
            # torch 2.4-2.7 cu118 list sm_37 but bring cuDNN 9, which has no Kepler kernels
            "stack.frameworks.torch.version": "2.3.1",
            "stack.frameworks.torch.variant": "cu118",
            "stack.frameworks.torch.cudnn": "8.7.0.84",
            "stack.driver.branch": "470",
            "warn": {"eol_branch", "minor_version_compat"},
        },
    ),
    ("p100-torch215-unsat", {"gpu": "P100", "frameworks": ["torch==2.15.0"]}, {"unsat": "gpu_arch"}),
    (
        "v100-newest-cu126",
        {"gpu": "V100"},
        {
            "stack.frameworks.torch.version": "2.14.1",
            "stack.frameworks.torch.variant": "cu126",
            "stack.driver.branch": "580",
        },
    ),
    (
        "v100-torch211-cu126",
        {"gpu": "V100", "frameworks": ["torch==2.11.0"]},
        {"stack.frameworks.torch.variant": "cu126"},
    ),
    (
        "l4-runs-sm86-code",
        {"gpu": "L4", "frameworks": ["torch==2.0.1"], "os": "ubuntu-22.04"},
        {"stack.frameworks.torch.variant": "cu117", "reason~": "binary compatible"},
    ),
    (
        "b300-runs-sm100-code",
        {"gpu": "B300", "frameworks": ["torch==2.9.1"]},
        {"stack.frameworks.torch.variant": "cu128", "reason~": "binary compatible"},
    ),
    ("rtxpro6000-newest", {"gpu": "RTX-PRO-6000-Blackwell"}, {"stack.driver.kernel_modules": "open"}),
    (
        "t4-torch20",
        {"gpu": "T4", "frameworks": ["torch==2.0.1"], "os": "ubuntu-22.04"},
        {"stack.frameworks.torch.variant": "cu117"},
    ),
    # --- driver_cuda: the driver must run the wheel's CUDA ----------------------------------
    (
        "h100-torch28-driver535-minor",
        {"gpu": "H100-SXM", "frameworks": ["torch==2.8.0"], "driver": "535"},
        {"stack.driver.version": "535.309.01", "warn": {"minor_version_compat", "eol_branch"}},
    ),
    (
        "torch211-driver535-falls-to-cu128",
        {"gpu": "A100-80GB", "frameworks": ["torch==2.11.0"], "driver": "535"},
        {"stack.frameworks.torch.variant": "cu128", "warn": {"minor_version_compat"}},
    ),
    (
        "torch212-driver535-cu126",
        {"gpu": "A100-80GB", "frameworks": ["torch==2.12.0"], "driver": "535"},
        {"stack.frameworks.torch.variant": "cu126"},
    ),
    (
        "cu130-driver570-unsat",
        {"gpu": "L40S", "frameworks": ["torch==2.13.0+cu130"], "driver": "570"},
        {"unsat": "driver_cuda", "suggest": "--driver"},
    ),
    (
        "cu132-driver580-minor",
        {"gpu": "L40S", "frameworks": ["torch==2.13.0+cu132"], "driver": "580"},
        {"stack.frameworks.torch.variant": "cu132", "warn": {"minor_version_compat"}},
    ),
    (
        "cu132-auto-driver-620-full",
        {"gpu": "L40S", "frameworks": ["torch==2.13.0+cu132"]},
        {"stack.driver.branch": "620", "no_warn": True},
    ),
    (
        "driver575-torch215-falls-back",
        {"gpu": "L4", "driver": "575"},
        {"stack.frameworks.torch.version": "2.14.1", "stack.frameworks.torch.variant": "cu126"},
    ),
    (
        "driver-exact-pin",
        {"gpu": "A10G", "driver": "580.65.06", "frameworks": ["torch==2.8.0"]},
        {"stack.driver.version": "580.65.06", "stack.driver.branch": "580"},
    ),
    (
        "driver-470-cuda12-unsat",
        {"gpu": "K80", "frameworks": ["torch==2.1.2+cu121"], "os": "ubuntu-22.04"},
        {"unsat": "gpu_arch"},
    ),
    (
        "t4-driver470-torch-cu118",
        {"gpu": "T4", "driver": "470", "frameworks": ["torch==2.7.1"], "os": "ubuntu-22.04"},
        {"stack.frameworks.torch.variant": "cu118", "warn": {"minor_version_compat"}},
    ),
    (
        "t4-driver470-torch28-unsat",
        {"gpu": "T4", "driver": "470", "frameworks": ["torch==2.8.0"], "os": "ubuntu-22.04"},
        {"unsat": "driver_cuda"},
    ),
    # --- driver_gpu: the branch must drive the GPU -----------------------------------------
    ("b200-driver550-unsat", {"gpu": "B200", "driver": "550"}, {"unsat": "driver_gpu", "suggest": "--driver"}),
    ("v100-driver595-unsat", {"gpu": "V100", "driver": "595"}, {"unsat": "driver_gpu"}),
    ("k80-driver535-unsat", {"gpu": "K80", "driver": "535"}, {"unsat": "driver_gpu"}),
    (
        "rtx5090-driver570-ok",
        {"gpu": "RTX-5090", "driver": "570", "frameworks": ["torch==2.8.0"]},
        {"stack.driver.branch": "570"},
    ),
    ("p100-last-branch-580", {"gpu": "P100"}, {"stack.driver.branch": "580"}),
    # --- kernel_modules -------------------------------------------------------------------
    (
        "v100-open-unsat",
        {"gpu": "V100", "kernel_modules": "open"},
        {"unsat": "kernel_modules", "suggest": "--kernel-modules"},
    ),
    ("b200-proprietary-unsat", {"gpu": "B200", "kernel_modules": "proprietary"}, {"unsat": "kernel_modules"}),
    ("gh200-proprietary-unsat", {"gpu": "GH200", "kernel_modules": "proprietary"}, {"unsat": "kernel_modules"}),
    (
        "h100-proprietary-ok",
        {"gpu": "H100-PCIe", "kernel_modules": "proprietary"},
        {"stack.driver.kernel_modules": "proprietary"},
    ),
    ("h100-auto-open", {"gpu": "H100-PCIe"}, {"stack.driver.kernel_modules": "open"}),
    ("v100-auto-proprietary", {"gpu": "V100"}, {"stack.driver.kernel_modules": "proprietary"}),
    ("k80-auto-proprietary", {"gpu": "K80", "os": "ubuntu-22.04"}, {"stack.driver.kernel_modules": "proprietary"}),
    # NVIDIA's ubuntu2404 repository starts at R515 (os.yaml repo_first_branch, medium): no R470
    # for a K80 there, so the answer names the repository and suggests an older OS
    ("k80-ubuntu2404-no-r470-unsat", {"gpu": "K80"}, {"unsat": "install_method", "suggest": "--os"}),
    (
        "t4-620-proprietary-unsat",
        {"gpu": "T4", "driver": "620.70.06", "kernel_modules": "proprietary"},
        {"unsat": "kernel_modules"},
    ),
    (
        "t4-620-exact-open-ok",
        {"gpu": "T4", "driver": "620.70.06"},
        {"stack.driver.version": "620.70.06", "stack.driver.kernel_modules": "open"},
    ),
    ("branch-620-newest-release", {"gpu": "T4", "driver": "620"}, {"stack.driver.version": "620.70.06"}),
    # --- fabric_manager -------------------------------------------------------------------
    ("h100sxm-x8-fm", {"gpu": "H100-SXM", "gpu_count": 8}, {"stack.fabric_manager.version": "@stack.driver.version"}),
    ("h100sxm-x4-no-fm", {"gpu": "H100-SXM", "gpu_count": 4}, {"stack.fabric_manager": None}),
    ("h100pcie-x8-no-fm", {"gpu": "H100-PCIe", "gpu_count": 8}, {"stack.fabric_manager": None}),
    ("a100-40-x8-fm", {"gpu": "A100-40GB", "gpu_count": 8}, {"stack.fabric_manager.version": "@stack.driver.version"}),
    ("b200-x8-fm", {"gpu": "B200", "gpu_count": 8}, {"stack.fabric_manager.version": "@stack.driver.version"}),
    ("h200-x8-fm", {"gpu": "H200", "gpu_count": 8}, {"stack.fabric_manager.version": "@stack.driver.version"}),
    ("v100-x8-no-fm", {"gpu": "V100", "gpu_count": 8}, {"stack.fabric_manager": None}),
    (
        "p5-48xl-fm",
        {"instance_type": "p5.48xlarge"},
        {"host.gpu": "H100-SXM", "host.gpu_count": 8, "stack.fabric_manager.version": "@stack.driver.version"},
    ),
    ("p5-4xl-no-fm", {"instance_type": "p5.4xlarge"}, {"host.gpu_count": 1, "stack.fabric_manager": None}),
    (
        "fm-with-driver-none-warns",
        {"gpu": "H100-SXM", "gpu_count": 8, "driver": "none"},
        {"stack.driver": None, "stack.fabric_manager": None, "warn": {"fabric_manager_unmanaged", "driver_unmanaged"}},
    ),
    (
        "fm-distro-debian-unsat",
        {"gpu": "H100-SXM", "gpu_count": 8, "os": "debian-12", "install_method": "distro"},
        {"unsat": "fabric_manager"},
    ),
    (
        "fm-pinned-driver-exact",
        {"gpu": "A100-80GB", "gpu_count": 8, "driver": "580.82.07"},
        {"stack.fabric_manager.version": "580.82.07"},
    ),
    # --- python ---------------------------------------------------------------------------
    (
        "jammy-torch215-python311",
        {"gpu": "A10", "os": "ubuntu-22.04", "frameworks": ["torch==2.15.0"]},
        {"stack.python": "3.11"},
    ),
    (
        "jammy-python310-torch215-unsat",
        {"gpu": "A10", "os": "ubuntu-22.04", "frameworks": ["torch==2.15.0"], "python": "3.10"},
        {"unsat": "python", "suggest": "--python"},
    ),
    (
        "jammy-python310-newest",
        {"gpu": "A10", "os": "ubuntu-22.04", "python": "3.10"},
        {"stack.frameworks.torch.version": "2.14.1"},
    ),
    # --- the cuDNN a range pin lets pip install (jax's plugin, TensorFlow's [and-cuda]) ---------
    # (the newest release in the range with kernels for the GPU is pinned in the lock's pip plan)
    (
        "v100-jax-cuda12-pins-cudnn-9-10",
        {"gpu": "V100", "os": "ubuntu-22.04", "frameworks": ["jax[cuda12]"]},
        {
            "packages.pip.requirements": ["jax[cuda12]==0.10.2", "nvidia-cudnn-cu12==9.10.2.21"],
            "reason~": "pip would take 9.28",
        },
    ),
    (
        "v100-tf-and-cuda-221-pins-cudnn-9-10",
        {"gpu": "V100", "os": "ubuntu-22.04", "frameworks": ["tensorflow[and-cuda]==2.21.0"]},
        {"packages.pip.requirements": ["tensorflow[and-cuda]==2.21.0", "nvidia-cudnn-cu12==9.10.2.21"]},
    ),
    (
        "a100-jax-cuda12-takes-the-newest-cudnn",
        {"gpu": "A100-80GB", "os": "ubuntu-22.04", "frameworks": ["jax[cuda12]"]},
        {"packages.pip.requirements": ["jax[cuda12]==0.10.2"]},
    ),
    # --- Python beyond the OS's (install.python_source; a standalone CPython installed by uv) ----
    (
        "debian12-python312-os-unsat",
        {"gpu": "A10", "os": "debian-12", "python": "3.12", "python_source": "os"},
        {"unsat": "python", "suggest=": ("--python-source", "standalone")},
    ),
    (
        "debian12-python312-standalone",
        {"gpu": "A10", "os": "debian-12", "python": "3.12"},
        {
            "stack.python": "3.12",
            "stack.python_source": "standalone",
            "reason~": "Python 3.12 is not packaged for debian-12",
        },
    ),
    (
        "debian12-os-python-when-it-fits",
        {"gpu": "A10", "os": "debian-12"},
        {"stack.python": "3.11", "stack.python_source": "os"},
    ),
    (
        "host-python-bounds-the-os-pass-only",
        {"gpu": "A10", "os": "ubuntu-24.04", "host_python": "3.12", "frameworks": ["torch==2.0.1"]},
        {"stack.python": "3.11", "stack.python_source": "standalone", "reason~": "ubuntu-24.04's Python 3.12"},
    ),
    (
        "python-source-standalone-forced",
        {"gpu": "A10", "os": "debian-12", "python_source": "standalone", "frameworks": ["torch==2.6.0"]},
        {"stack.python": "3.13", "stack.python_source": "standalone", "reason~": "install.python_source is standalone"},
    ),
    (  # tensorflow[and-cuda]==2.14.1 installs only up to Python 3.10 (its tensorrt pin): Debian 12 has 3.11
        "tf214-and-cuda-debian12-standalone-310",
        {"gpu": "A100-80GB", "os": "debian-12", "frameworks": ["tensorflow==2.14.1"]},
        {"stack.python": "3.10", "stack.python_source": "standalone"},
    ),
    (
        "python-standalone-unknown-minor-unsat",
        {"gpu": "A10", "os": "debian-12", "python": "3.7", "python_source": "standalone"},
        {"unsat": "python"},
    ),
    (
        "rhel9-torch215-python312",
        {"gpu": "L4", "os": "rhel-9"},
        {"stack.python": "3.12", "stack.frameworks.torch.version": "2.15.0"},
    ),
    (
        "focal-newest-is-torch28",
        {"gpu": "A10", "os": "ubuntu-20.04"},
        {"stack.frameworks.torch.version": "2.8.0", "stack.python": "3.9", "warn": {"eol_os"}},
    ),
    ("debian13-python313", {"gpu": "L4", "os": "debian-13"}, {"stack.python": "3.13"}),
    # --- arch -----------------------------------------------------------------------------
    ("gb200-x86-unsat", {"gpu": "GB200", "arch": "x86_64"}, {"unsat": "gpu_host_arch", "suggest": "--arch"}),
    ("gb200-defaults-aarch64", {"gpu": "GB200"}, {"host.arch": "aarch64"}),
    (
        # issue 27 fact 2: 2.8's aarch64 cu129 build has no sm_75 (PyTorch's aarch64 CI list, medium)
        "g5g-t4g-aarch64-torch28-cu129-no-sm75",
        {"instance_type": "g5g.xlarge", "frameworks": ["torch==2.8.0+cu129"]},
        {"unsat": "gpu_arch"},
    ),
    (
        "aarch64-pypi-torch210-unsat",
        {"gpu": "GH200", "torch_index": "pypi", "frameworks": ["torch==2.10.0"]},
        {"unsat": "arch"},
    ),
    (
        "aarch64-pypi-torch211-ok",
        {"gpu": "GH200", "torch_index": "pypi", "frameworks": ["torch==2.11.0"]},
        {"stack.frameworks.torch.index_url": "https://pypi.org/simple"},
    ),
    ("tf-aarch64-unsat", {"gpu": "GH200", "frameworks": ["tensorflow"]}, {"unsat": "arch"}),
    # --- torch index and variants --------------------------------------------------------
    (
        "pypi-torch271-5090-unsat",
        {"gpu": "RTX-5090", "torch_index": "pypi", "frameworks": ["torch==2.7.1"]},
        {"unsat": "gpu_arch", "suggest": "--torch-index"},
    ),
    (
        "pypi-index-url",
        {"gpu": "H100-SXM", "torch_index": "pypi", "frameworks": ["torch==2.8.0"]},
        {"stack.frameworks.torch.index_url": "https://pypi.org/simple", "packages.pip.requirements": ["torch==2.8.0"]},
    ),
    (
        "pytorch-index-local-tag",
        {"gpu": "H100-SXM", "torch_index": "pytorch", "frameworks": ["torch==2.8.0"]},
        {"packages.pip.requirements": ["torch==2.8.0+cu128"]},
    ),
    (
        "variant-cu126-range",
        {"gpu": "H100-SXM", "torch_variant": "cu126", "frameworks": ["torch>=2.6"]},
        {"stack.frameworks.torch.version": "2.14.1", "stack.frameworks.torch.variant": "cu126"},
    ),
    (
        "variant-cu118-torch28-unsat",
        {"gpu": "H100-SXM", "torch_variant": "cu118", "frameworks": ["torch==2.8.0"]},
        {"unsat": "torch", "suggest=": ("--framework", "torch==2.7.1+cu118")},
    ),
    (
        "local-tag-cu128",
        {"gpu": "A10G", "frameworks": ["torch==2.7.1+cu128"]},
        {"stack.frameworks.torch.variant": "cu128"},
    ),
    (
        "range-upper-bound",
        {"gpu": "A10G", "frameworks": ["torch>=2.5,<2.7"]},
        {"stack.frameworks.torch.version": "2.6.0"},
    ),
    ("pypi-plus-cpu-unsat", {"torch_index": "pypi", "frameworks": ["torch==2.13.0+cpu"]}, {"unsat": "torch"}),
    # --- CPU-only stacks (used by the end-to-end tests on GPU-less hosts) ----------------
    (
        "cpu-torch",
        {"os": "debian-12", "frameworks": ["torch==2.13.0+cpu"]},
        {
            "stack.driver": None,
            "stack.frameworks.torch.variant": "cpu",
            "stack.frameworks.torch.cuda": None,
            "stack.frameworks.torch.index_url": "https://download.pytorch.org/whl/cpu",
            "packages.pip.requirements": ["torch==2.13.0+cpu"],
            "no_warn": True,
        },
    ),
    (
        "cpu-torch-driver-none",
        {"os": "debian-12", "frameworks": ["torch==2.13.0+cpu"], "driver": "none"},
        {"stack.driver": None, "stack.frameworks.torch.variant": "cpu", "no_warn": True},
    ),
    (
        "cpu-variant-flag",
        {"os": "debian-12", "torch_variant": "cpu"},
        {"stack.frameworks.torch.variant": "cpu", "stack.driver": None},
    ),
    (
        "cpu-torch-with-gpu-keeps-driver",
        {"gpu": "T4", "frameworks": ["torch==2.13.0+cpu"]},
        {"stack.frameworks.torch.variant": "cpu", "stack.driver.branch": "620"},
    ),
    # --- system CUDA toolkit ------------------------------------------------------------
    (
        "toolkit-128-h100",
        {"gpu": "H100-SXM", "cuda_toolkit": "12.8"},
        {"stack.cuda_toolkit.version": "12.8", "names.cuda_toolkit": ["cuda-toolkit-12-8"]},
    ),
    (
        "toolkit-128-driver535-minor",
        {"gpu": "H100-SXM", "cuda_toolkit": "12.8", "driver": "535"},
        {"warn": {"minor_version_compat"}},
    ),
    (
        "toolkit-130-driver535-unsat",
        {"gpu": "H100-SXM", "cuda_toolkit": "13.0", "driver": "535"},
        {"unsat": "driver_cuda", "suggest": "--cuda-toolkit"},
    ),
    ("toolkit-126-5090-unsat", {"gpu": "RTX-5090", "cuda_toolkit": "12.6"}, {"unsat": "toolkit_gpu"}),
    ("toolkit-130-v100-unsat", {"gpu": "V100", "cuda_toolkit": "13.0"}, {"unsat": "toolkit_gpu"}),
    (
        "toolkit-118-jammy-gcc",
        {"gpu": "T4", "cuda_toolkit": "11.8", "frameworks": ["torch==2.7.1+cu118"], "os": "ubuntu-22.04"},
        {"stack.cuda_toolkit.version": "11.8", "stack.frameworks.torch.variant": "cu118"},
    ),
    # the distro method installs the OS archive's own nvidia-cuda-toolkit (os.yaml distro_cuda_toolkit,
    # read from the Debian/Ubuntu Packages indexes): that version or none, whatever NVIDIA packages
    (
        "distro-toolkit-debian12-own-118",
        {"gpu": "L4", "os": "debian-12", "install_method": "distro", "cuda_toolkit": "11.8", "frameworks": []},
        {"stack.cuda_toolkit.version": "11.8", "stack.driver.install_method": "distro"},
    ),
    (
        "distro-toolkit-debian12-not-128",
        {"gpu": "L4", "os": "debian-12", "install_method": "distro", "cuda_toolkit": "12.8", "frameworks": []},
        {"unsat": "toolkit_os"},
    ),
    (
        "toolkit-118-noble-not-through-distro",
        {"gpu": "L4", "os": "ubuntu-24.04", "cuda_toolkit": "11.8", "frameworks": []},
        {"unsat": "toolkit_os"},
    ),
    ("toolkit-none-by-default", {"gpu": "T4"}, {"stack.cuda_toolkit": None, "names.cuda_toolkit": []}),
    (
        "cpu-torch-toolkit130-driver575-unsat",
        {"frameworks": ["torch==2.15.0+cpu"], "driver": "575", "cuda_toolkit": "13.0"},
        {"unsat": "driver_cuda", "suggest": "--driver"},
    ),
    # --- system cuDNN ---------------------------------------------------------------------
    ("cudnn917-v100-unsat", {"gpu": "V100", "cudnn": "9.17.1.4"}, {"unsat": "cudnn_gpu", "suggest": "--cudnn"}),
    (
        "cudnn910-v100-deprecated",
        {"gpu": "V100", "cudnn": "9.10.2.21"},
        {"warn": {"deprecated_gpu"}, "stack.cudnn.cuda_major": 12},
    ),
    (
        "cudnn910-toolkit130-unsat",
        {"gpu": "H100-SXM", "cudnn": "9.10.2.21", "cuda_toolkit": "13.0"},
        {"unsat": "cudnn_cuda"},
    ),
    (
        "cudnn917-toolkit128",
        {"gpu": "H100-SXM", "cudnn": "9.17", "cuda_toolkit": "12.8"},
        {
            "stack.cudnn.version": "9.17.1.4",
            "stack.cudnn.cuda_major": 12,
            "specs.cudnn": [
                "libcudnn9-cuda-12=9.17.1.4-*",
                "libcudnn9-dev-cuda-12=9.17.1.4-*",
                "libcudnn9-headers-cuda-12=9.17.1.4-*",
                "cudnn9-cuda-12=9.17.1.4-*",
            ],
        },
    ),
    ("cudnn917-no-toolkit-cuda13", {"gpu": "H100-SXM", "cudnn": "9.17.1.4"}, {"stack.cudnn.cuda_major": 13}),
    # --- TensorFlow -----------------------------------------------------------------------
    (
        "tf-a10g",
        {"gpu": "A10G", "frameworks": ["tensorflow"]},
        {"stack.frameworks.tensorflow.version": "2.21.0", "stack.frameworks.tensorflow.extras": ["and-cuda"]},
    ),
    (
        "tf213-needs-system-cuda",
        {"gpu": "A10G", "frameworks": ["tensorflow==2.13.0"]},
        {"unsat": "tf_system_cuda", "suggest": "--framework"},
    ),
    ("tf-b200-ptx", {"gpu": "B200", "frameworks": ["tensorflow[and-cuda]"]}, {"warn": {"ptx_jit"}}),
    (
        "tf-k80",
        {"gpu": "K80", "frameworks": ["tensorflow"], "os": "ubuntu-22.04"},
        {"stack.frameworks.tensorflow.version": "2.14.1", "stack.driver.branch": "470"},
    ),
    (
        "tf-and-torch-different-majors",
        {"gpu": "H100-SXM", "frameworks": ["tensorflow", "torch"]},
        {"stack.frameworks.tensorflow.version": "2.21.0", "stack.frameworks.torch.version": "2.15.0"},
    ),
    (
        # the PyPI wheels (download.pytorch.org's cu118 build uses cu11 names: unchecked, not a conflict)
        "tf217-torch241-conflict",
        {"gpu": "H100-SXM", "frameworks": ["tensorflow[and-cuda]==2.17.0", "torch==2.4.1"], "torch_index": "pypi"},
        {"unsat": "env_conflict", "suggest": "--framework"},
    ),
    (
        "tf221-torch210-conflict",
        {"gpu": "H100-SXM", "frameworks": ["tensorflow==2.21.0", "torch==2.10.0"], "torch_index": "pypi"},
        {"unsat": "env_conflict"},
    ),
    (
        "tf220-torch28-ok",
        {"gpu": "H100-SXM", "frameworks": ["tensorflow==2.20.0", "torch==2.8.0"]},
        {"stack.frameworks.torch.version": "2.8.0"},
    ),
    (
        "tf219-torch28-exact-pins",
        {"gpu": "H100-SXM", "frameworks": ["tensorflow==2.19.0", "torch==2.8.0"]},
        {"unsat": "env_conflict"},
    ),
    (
        "tf221-torch28-nccl-floor",
        {"gpu": "A10G", "frameworks": ["torch==2.8.0", "tensorflow==2.21.0"]},
        {"unsat": "env_conflict", "suggest": "--framework"},
    ),
    (
        "tf-newest-with-torch28-is-220",
        {"gpu": "A10G", "frameworks": ["torch==2.8.0", "tensorflow"]},
        {"stack.frameworks.tensorflow.version": "2.20.0"},
    ),
    (
        "tf221-torch-cu124-runtime-floor",
        {"gpu": "A10G", "os": "ubuntu-22.04", "frameworks": ["torch==2.6.0+cu124", "tensorflow==2.21.0"]},
        {"unsat": "env_conflict"},
    ),
    # --- JAX ----------------------------------------------------------------------------
    (
        "jax-h100-cuda13",
        {"gpu": "H100-SXM", "frameworks": ["jax"]},
        {"stack.frameworks.jax.version": "0.12.0.1", "stack.frameworks.jax.extras": ["cuda13"]},
    ),
    ("jax-v100-cuda12", {"gpu": "V100", "frameworks": ["jax"]}, {"stack.frameworks.jax.extras": ["cuda12"]}),
    (
        "jax13-v100-unsat",
        {"gpu": "V100", "frameworks": ["jax[cuda13]"]},
        {"unsat": "gpu_arch", "suggest": "--framework"},
    ),
    (
        "jax-driver535-cuda12",
        {"gpu": "A100-80GB", "frameworks": ["jax"], "driver": "535"},
        {"stack.frameworks.jax.extras": ["cuda12"]},
    ),
    ("jax-jammy-python311", {"gpu": "L4", "frameworks": ["jax"], "os": "ubuntu-22.04"}, {"stack.python": "3.11"}),
    (
        "jax-python310",
        {"gpu": "L4", "frameworks": ["jax"], "os": "ubuntu-22.04", "python": "3.10"},
        {"stack.frameworks.jax.version": "0.6.0"},
    ),
    (
        "jax12-torch271-cu126-cudnn-floor",
        {"gpu": "H100-SXM", "os": "ubuntu-22.04", "frameworks": ["jax[cuda12]", "torch==2.7.1+cu126"]},
        {"stack.frameworks.jax.version": "0.5.0"},
    ),
    # --- install methods and packages -----------------------------------------------------
    (
        "debian12-distro-535",
        {"gpu": "T4", "os": "debian-12", "install_method": "distro"},
        {
            "stack.driver.version": "535.261.03",
            "stack.driver.install_method": "distro",
            "names.nvidia_driver": [
                "nvidia-driver",
                "nvidia-open-kernel-dkms",
                "nvidia-persistenced",
                "linux-headers-amd64",
            ],
            "packages.repositories": [],
        },
    ),
    (
        "debian12-distro-b200-unsat",
        {"gpu": "B200", "os": "debian-12", "install_method": "distro"},
        {"unsat": "driver_gpu", "suggest": "--install-method"},
    ),
    ("rhel9-distro-unsat", {"gpu": "T4", "os": "rhel-9", "install_method": "distro"}, {"unsat": "install_method"}),
    (
        "noble-distro-580-server",
        {"gpu": "L4", "os": "ubuntu-24.04", "install_method": "distro"},
        {
            # a described host: its kernel decides the version, and the names keep its flavour
            # and release for it to fill in (provision.stack.distro_versions)
            "specs.nvidia_driver": [
                "nvidia-headless-no-dkms-580-server-open",
                "nvidia-utils-580-server",
                "linux-modules-nvidia-580-server-open-{kernel_flavour}",
                "linux-modules-nvidia-580-server-open-{kernel}",
            ]
        },
    ),
    (
        "repo-ubuntu-580-open",
        {"gpu": "H100-SXM", "os": "ubuntu-22.04", "frameworks": ["torch==2.8.0"], "driver": "580"},
        {
            "specs.nvidia_driver": ["nvidia-open-580=580.178.04-*"],
            "packages.repositories.0.url": "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/",
        },
    ),
    (
        "repo-595-pinning",
        {"gpu": "L4", "driver": "595"},
        {
            "stack.driver.branch": "595",
            "specs.nvidia_driver": ["nvidia-driver-pinning-595.91.07", "nvidia-open=595.91.07-*"],
        },
    ),
    (
        "repo-rhel-module",
        {"gpu": "H100-SXM", "os": "rhel-9", "frameworks": ["torch==2.8.0"], "driver": "580"},
        {
            "packages.module_streams": ["nvidia-driver:580-open"],
            "specs.nvidia_driver": ["dkms", "nvidia-open-3:580.178.04"],
        },
    ),
    (
        "fm-package-debian",
        {"gpu": "H100-SXM", "gpu_count": 8, "os": "ubuntu-22.04", "frameworks": ["torch==2.8.0"], "driver": "580"},
        {"specs.fabric_manager": ["nvidia-fabricmanager=580.178.04-*"]},
    ),
    ("amzn2023-alias", {"gpu": "A10G", "os": "amazonlinux-2023"}, {"host.os": "amzn-2023"}),
    (
        "debian13-repo-has-no-580",
        {"gpu": "L40S", "os": "debian-13", "driver": "580", "install_method": "nvidia-repo"},
        {"unsat": "install_method", "suggest": "--driver"},
    ),
    ("debian13-repo-620", {"gpu": "L40S", "os": "debian-13"}, {"stack.driver.branch": "620"}),
    (
        # neither trixie's own 550.163.01-2 nor trixie-backports' 550.163.01-4~bpo13+1 builds for
        # trixie's kernels (drivers.yaml): no distro driver
        "debian13-distro-refused",
        {"gpu": "L40S", "os": "debian-13", "install_method": "distro"},
        {"unsat": "install_method"},
    ),
    # --- issue 15: rules that passed silently before -----------------------------------------
    # toolkit_os: a system toolkit on an OS its release is not packaged for (was a warning)
    (
        "toolkit-118-noble-unsat",
        {"gpu": "T4", "cuda_toolkit": "11.8", "frameworks": ["torch==2.7.1+cu118"]},
        {"unsat": "toolkit_os", "suggest": "--os"},
    ),
    (
        "toolkit-118-noble-other-release",
        {"gpu": "T4", "cuda_toolkit": "11.8"},
        {"unsat": "toolkit_os", "suggest": "--cuda-toolkit"},
    ),
    # tf_system_cuda: TensorFlow without [and-cuda] loads the system CUDA/cuDNN (major, minor >=)
    (
        "tf213-system-cudnn89-loads",
        {
            "gpu": "A10G",
            "frameworks": ["tensorflow==2.13.0"],
            "cuda_toolkit": "11.8",
            "cudnn": "8.9.7.29",
            "os": "ubuntu-22.04",
        },
        {"stack.frameworks.tensorflow.extras": [], "reason~": "loads the system CUDA 11.8 and cuDNN 8.9.7.29"},
    ),
    (
        "tf213-system-cudnn9-unsat",
        {
            "gpu": "A10G",
            "frameworks": ["tensorflow==2.13.0"],
            "cuda_toolkit": "11.8",
            "cudnn": "9.10.2.21",
            "os": "ubuntu-22.04",
        },
        {"unsat": "tf_system_cuda"},
    ),
    (
        "tf221-plain-with-toolkit-uses-system",
        {"gpu": "A10G", "frameworks": ["tensorflow==2.21.0"], "cuda_toolkit": "12.8", "cudnn": "9.10.2.21"},
        {"stack.frameworks.tensorflow.extras": [], "reason~": "loads the system CUDA 12.8"},
    ),
    (
        "tf221-plain-toolkit-without-cudnn-unsat",
        {"gpu": "A10G", "frameworks": ["tensorflow==2.21.0"], "cuda_toolkit": "12.8"},
        {"unsat": "tf_system_cuda", "suggest": "--cudnn"},
    ),
    (
        "system-cudnn-unused-by-torch",
        {"gpu": "H100-SXM", "frameworks": ["torch==2.8.0"], "cudnn": "9.10.2.21"},
        {"reason~": "the system cuDNN 9.10.2.21 is unused by torch 2.8.0 cu128"},
    ),
    # cudnn_gpu: the cuDNN a wheel brings (cuDNN 9: no Kepler), a system cuDNN on Blackwell (>= 9.7)
    (
        "k80-torch271-cudnn9-unsat",
        {"gpu": "K80", "frameworks": ["torch==2.7.1+cu118"], "os": "ubuntu-22.04"},
        {"unsat": "cudnn_gpu"},
    ),
    ("b200-system-cudnn95-unsat", {"gpu": "B200", "cudnn": "9.5.1.17"}, {"unsat": "cudnn_gpu", "suggest": "--cudnn"}),
    ("b200-system-cudnn910", {"gpu": "B200", "cudnn": "9.10.2.21"}, {"stack.cudnn.version": "9.10.2.21"}),
    # toolkit_torch_cuda: a system toolkit of another CUDA major than the torch wheel's
    (
        "toolkit-130-prefers-cu130",
        {"gpu": "H100-SXM", "frameworks": ["torch==2.10.0"], "cuda_toolkit": "13.0"},
        {"stack.frameworks.torch.variant": "cu130", "no_warn": True},
    ),
    (
        "toolkit-130-torch28-caveat",
        {"gpu": "H100-SXM", "frameworks": ["torch==2.8.0"], "cuda_toolkit": "13.0"},
        {"warn": {"toolkit_torch_cuda"}},
    ),
    # gpu_arch on aarch64: the sbsa wheels list fewer architectures than x86_64's
    (
        "t4g-torch29-aarch64-no-sm75",
        {"gpu": "T4G", "frameworks": ["torch==2.9.1"]},
        {"unsat": "gpu_arch", "suggest": "--framework"},
    ),
    (
        "gh200-torch29-aarch64",
        {"gpu": "GH200", "frameworks": ["torch==2.9.1"]},
        {"stack.frameworks.torch.variant": "cu128"},
    ),
    # kernel_modules: open modules on GeForce/workstation cards are production from R560
    ("rtx4090-550-proprietary", {"gpu": "RTX-4090", "driver": "550"}, {"stack.driver.kernel_modules": "proprietary"}),
    (
        "rtx4090-550-forced-open-beta",
        {"gpu": "RTX-4090", "driver": "550", "kernel_modules": "open"},
        {"stack.driver.kernel_modules": "open", "warn": {"open_modules_beta"}},
    ),
    (
        "rtx4090-535-forced-open-unsat",
        {"gpu": "RTX-4090", "driver": "535", "kernel_modules": "open"},
        {"unsat": "kernel_modules", "suggest": "--kernel-modules"},
    ),
    ("rtx4090-595-open", {"gpu": "RTX-4090", "driver": "595"}, {"stack.driver.kernel_modules": "open"}),
    ("l40s-550-open-datacenter", {"gpu": "L40S", "driver": "550"}, {"stack.driver.kernel_modules": "open"}),
    ("v100-deprecated", {"gpu": "V100"}, {"warn": {"deprecated_gpu"}}),
    ("p100-deprecated", {"gpu": "P100", "frameworks": ["torch==2.8.0"]}, {"warn": {"deprecated_gpu"}}),
    # fewest caveats: of one release's variants, the one without a caveat
    (
        "driver580-torch215-cu130-not-cu132",
        {"gpu": "H100-SXM", "driver": "580", "frameworks": ["torch==2.15.0"]},
        {"stack.frameworks.torch.variant": "cu130", "no_warn": True},
    ),
    # suggestions that work: the right direction, the real variants, another OS
    (
        "k80-driver580-suggests-470",
        {"gpu": "K80", "driver": "580", "os": "ubuntu-22.04"},
        {"unsat": "driver_gpu", "suggest=": ("--driver", "470"), "summary~": "driver <= 470"},
    ),
    (
        "torch271-cu130-real-variants",
        {"gpu": "A10G", "frameworks": ["torch==2.7.1+cu130"]},
        {"unsat": "torch", "suggest=": ("--framework", "torch==2.7.1+cu128")},
    ),
    (
        "torch201-noble-os-python-suggests-jammy-or-standalone",
        {"gpu": "A10G", "frameworks": ["torch==2.0.1"], "python_source": "os"},
        {"unsat": "python", "suggest": "--os", "suggest=": ("--python-source", "standalone")},
    ),
    (
        "torch201-noble-standalone-311",
        {"gpu": "A10G", "frameworks": ["torch==2.0.1"]},
        {"stack.python": "3.11", "stack.python_source": "standalone", "stack.frameworks.torch.version": "2.0.1"},
    ),
    # --- end-of-life -------------------------------------------------------------------------
    ("eol-branch-pinned", {"gpu": "A10G", "driver": "550", "frameworks": ["torch==2.6.0"]}, {"warn": {"eol_branch"}}),
    ("no-eol-by-default", {"gpu": "A10G"}, {"no_warn": True}),
]


def _get(doc: dict[str, Any], path: str) -> Any:
    """A dotted path; ``names.<role>`` / ``specs.<role>``: the plan's packages of that role
    (specs as the manager writes them: ``name=version`` on apt, ``name-version`` on dnf)."""
    kind, _, role = path.partition(".")
    if kind in ("names", "specs"):
        plan = doc["packages"]
        sep = "=" if plan["manager"] == "apt" else "-"
        mine = [i for i in plan["install"] if i["role"] == role]
        if kind == "names":
            return [i["name"] for i in mine]
        return [i["name"] + (f"{sep}{i['version']}" if i["version"] else "") for i in mine]
    cur: Any = doc
    for part in path.split("."):
        if cur is None:
            return None
        cur = cur[int(part)] if isinstance(cur, list) else cur[part]
    return cur


@pytest.mark.parametrize(("inputs", "expect"), [pytest.param(i, e, id=n) for n, i, e in CASES])
def test_case(inputs: dict[str, Any], expect: dict[str, Any]) -> None:
    req = StackRequest.build(**{k: v for k, v in inputs.items() if k in REQ_KEYS})
    host = HostSpec.describe(**{k: v for k, v in inputs.items() if k not in REQ_KEYS})
    if "unsat" in expect:
        with pytest.raises(Unsatisfiable) as err:
            resolve(req, host)
        first = err.value.conflicts[0]
        assert first.split(":")[0] == expect["unsat"], err.value.conflicts
        if "suggest" in expect:
            options = {c["option"] for s in err.value.suggestions for c in s["changes"]}
            assert expect["suggest"] in options, err.value.suggestions
        if "suggest=" in expect:  # (option, value) one suggestion must change
            pairs = {(c["option"], c["value"]) for s in err.value.suggestions for c in s["changes"]}
            assert expect["suggest="] in pairs, err.value.suggestions
        if "summary~" in expect:
            assert any(expect["summary~"] in s["summary"] for s in err.value.suggestions), err.value.suggestions
        # every suggestion really resolves: applying it gives a stack
        assert err.value.suggestions, "an unsatisfiable answer names at least one change that works"
        return
    res = resolve(req, host)
    doc = res.to_json()
    doc["packages"] = res.packages.to_json()
    codes = {w["code"] for w in doc["warnings"]}
    for path, want in expect.items():
        if path == "warn":
            assert want <= codes, doc["warnings"]
        elif path == "no_warn":
            assert not codes, doc["warnings"]
        elif path == "reason~":
            assert any(want in r for r in doc["reasons"]), doc["reasons"]
        elif isinstance(want, str) and want.startswith("@"):
            assert _get(doc, path) == _get(doc, want[1:])
        else:
            assert _get(doc, path) == want, (path, doc["stack"], doc["host"])


def test_there_are_at_least_80_cases_covering_ok_warning_and_unsatisfiable() -> None:
    assert len(CASES) >= 80
    assert sum("unsat" in e for _, _, e in CASES) >= 25
    assert sum("warn" in e for _, _, e in CASES) >= 10
    assert sum("unsat" not in e for _, _, e in CASES) >= 40


def test_host_from_probe_facts() -> None:
    """The facts shape of `provision probe --json` (DESIGN.md) describes a host for resolve."""
    facts = {
        "os": "debian-12",
        "arch": "x86_64",
        "nvswitch_count": 6,
        "gpus": [{"pci_id": "10de:2330", "model": None}] * 8,
    }
    host = HostSpec.from_facts(ProbedHost.from_json(facts))
    assert (host.gpu and host.gpu.name, host.gpu_count, host.needs_fabric_manager) == ("H100-SXM", 8, True)
    res = resolve(StackRequest.build(), host)
    stack = res.to_json()["stack"]
    assert stack["fabric_manager"] == {"version": stack["driver"]["version"]}
    gpuless = HostSpec.from_facts(ProbedHost.from_json({"os": "debian-12", "arch": "x86_64", "gpus": []}))
    cpu = resolve(StackRequest.build(frameworks=["torch==2.13.0+cpu"]), gpuless)
    assert cpu.stack.driver is None and cpu.host.gpu is None
    with pytest.raises(BadInput, match="different GPU models"):
        HostSpec.from_facts(ProbedHost.from_json({"os": "debian-12", "gpus": [{"model": "T4"}, {"model": "L4"}]}))
    no_switch = HostSpec.from_facts(
        ProbedHost.from_json({"os": "ubuntu-22.04", "nvswitch_count": 0, "gpus": [{"model": "H100-SXM"}] * 8})
    )
    assert no_switch.needs_fabric_manager is False


def _apply(inputs: dict[str, Any], changes: list[dict[str, str]]) -> dict[str, Any]:
    """The case's inputs with a suggestion's changes applied, as a user would type them."""
    out = dict(inputs)
    frameworks: list[str] = []
    for change in changes:
        key = change["option"].removeprefix("--").replace("-", "_")
        if key == "framework":
            frameworks.append(change["value"])
        else:
            out[key] = change["value"]
    if frameworks:  # a suggestion's --framework options are the whole framework list
        out["frameworks"] = frameworks
    return out


UNSAT_CASES = [pytest.param(i, id=n) for n, i, e in CASES if "unsat" in e]


@pytest.mark.parametrize("inputs", UNSAT_CASES)
def test_every_suggestion_of_a_case_resolves(inputs: dict[str, Any]) -> None:
    """Each suggestion an unsatisfiable case gets, fed back into the resolver, resolves."""
    req = StackRequest.build(**{k: v for k, v in inputs.items() if k in REQ_KEYS})
    host = HostSpec.describe(**{k: v for k, v in inputs.items() if k not in REQ_KEYS})
    with pytest.raises(Unsatisfiable) as err:
        resolve(req, host)
    for s in err.value.suggestions:
        applied = _apply(inputs, s["changes"])
        req2 = StackRequest.build(**{k: v for k, v in applied.items() if k in REQ_KEYS})
        host2 = HostSpec.describe(**{k: v for k, v in applied.items() if k not in REQ_KEYS})
        assert resolve(req2, host2).stack is not None, s


def test_aarch64_arch_list_is_the_aarch64_builds_own() -> None:
    """pytorch.yaml's ``arch_list_aarch64`` is read for the aarch64 host; every CUDA variant with an
    aarch64 build gives its own (issue 27 fact 2: the x86_64 list is no stand-in for it)."""
    k = load()
    rel29 = next(r for r in k.t.torch if r.version == "2.9.1")
    cu126 = rel29.variant("cu126")
    assert cu126 is not None and cu126.archs("aarch64") == ("8.0", "9.0") and "7.5" in cu126.archs("x86_64")
    rel28 = next(r for r in k.t.torch if r.version == "2.8.0")
    cu129 = rel28.variant("cu129")
    assert cu129 is not None and cu129.archs("aarch64") == ("8.0", "9.0", "10.0", "12.0")
    assert cu129.arch_list_aarch64_confidence == "medium"  # PyTorch's CI script, not a measured wheel


def test_beside_a_cuda_torch_its_exact_cudnn_pin_governs_the_venv() -> None:
    """jax's cuDNN range on a V100 gets no pin of its own beside a CUDA torch (torch pins cuDNN
    exactly, env_conflict checks the pair), and no reason claims one: the rule and the plan read the
    same range_cudnn_pins."""
    res = resolve(StackRequest.build(frameworks=["torch", "jax"]), HostSpec.describe(gpu="V100", os="ubuntu-22.04"))
    assert res.packages.pip is not None
    assert not [r for r in res.packages.pip.requirements if r.startswith("nvidia-cudnn")], res.packages.pip
    assert not [r for r in res.reasons if "pinned to" in r], res.reasons
    alone = resolve(StackRequest.build(frameworks=["jax"]), HostSpec.describe(gpu="V100", os="ubuntu-22.04"))
    assert alone.packages.pip is not None
    pins = [r for r in alone.packages.pip.requirements if r.startswith("nvidia-cudnn")]
    assert len(pins) == 1 and any(pins[0].split("==")[1] in r for r in alone.reasons if "pinned to" in r)


def test_a_yes_or_no_resolve_stops_before_the_search_when_every_driver_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The suggestions' tries (explain=False) skip the framework search when no driver choice
    passes on its own: the search could only name a nearest miss. The request's own resolve still
    searches, and both name the same driver failure."""
    from provision.stack.search import Resolver

    k = load()
    request = StackRequest.build(driver="580")
    host = HostSpec.describe(gpu="K80", os="ubuntu-22.04")
    searched: list[bool] = []
    real = Resolver._search
    monkeypatch.setattr(Resolver, "_search", lambda self, **kw: searched.append(True) or real(self, **kw))
    with pytest.raises(Unsatisfiable) as quick:
        Resolver(request, host, k, explain=False).run()
    assert not searched and "driver_gpu" in str(quick.value)
    with pytest.raises(Unsatisfiable) as full:
        Resolver(request, host, k).run()
    assert searched and "driver_gpu" in str(full.value)
    # a driver that passes on its own: the yes-or-no resolve searches and finds the same set
    ok = StackRequest.build(driver="470")
    assert Resolver(ok, host, k, explain=False).run().stack == Resolver(ok, host, k).run().stack

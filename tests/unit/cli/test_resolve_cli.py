"""`provision resolve` and `provision matrix` through the real CLI (in process and as a process).

Bad input must be exit 2 and one line on stderr with the nearest names; `--json` must print one
document on stdout; resolve must not import the heavy libraries the rest of the tool uses.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from provision.cli.app import main

REPO = Path(__file__).resolve().parents[3]


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    old = sys.argv
    sys.argv = ["provision", *args]
    try:
        with pytest.raises(SystemExit) as exc:
            main()
    finally:
        sys.argv = old
    out, err = capsys.readouterr()
    code = exc.value.code
    return (code if isinstance(code, int) else 0), out, err


def run_process(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "provision", *args], capture_output=True, text=True, cwd=REPO, timeout=60
    )


def test_json_contract_shape(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--gpu", "H100-SXM", "--gpu-count", "8", "--os", "ubuntu-22.04", "--framework", "torch==2.8.0"]
    code, out, err = run_cli(["resolve", *args, "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert list(doc) == ["ok", "host", "stack", "warnings", "reasons"]
    assert doc["ok"] is True
    assert set(doc["host"]) >= {"gpu", "compute_capability", "gpu_count", "os", "arch", "python"}
    assert list(doc["stack"]) == [
        "driver",
        "fabric_manager",
        "cuda_toolkit",
        "cudnn",
        "frameworks",
        "python",
        "python_source",
    ]
    assert {"branch", "version", "kernel_modules"} <= set(doc["stack"]["driver"])
    assert set(doc["stack"]["frameworks"]["torch"]) == {"version", "variant", "index_url", "cuda", "cudnn"}
    assert all(set(w) == {"code", "message"} for w in doc["warnings"])
    assert doc["reasons"] and all(isinstance(r, str) for r in doc["reasons"])


def test_human_output_has_a_table_and_the_reasons(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["resolve", "--gpu", "K80", "--os", "ubuntu-22.04"], capsys)
    assert code == 0
    assert "driver" in out and "470.256.02" in out and "why" in out
    assert "warning" in out and "minor_version_compat" in out


def test_unsatisfiable_is_exit_3_with_conflicts_and_suggestions(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["resolve", "--gpu", "RTX-5090", "--framework", "torch==2.6.0", "--json"], capsys)
    assert code == 3
    doc = json.loads(out)
    assert doc["ok"] is False and doc["error"]["code"] == "unsatisfiable"
    assert doc["error"]["conflicts"][0].startswith("gpu_arch:")
    assert any(s["value"].startswith("torch==2.7") for s in doc["error"]["suggestions"])
    assert err.count("\n") == 1 and err.startswith("error: ")


BAD_INPUTS: list[tuple[list[str], str, str | None]] = [
    (["--gpu", "A10Q"], "unknown GPU `A10Q`", "A10G"),
    (["--gpu", "10de:ffff"], "unknown GPU PCI ID", None),
    (["--os", "ubuntu-22.10"], "unknown OS", "ubuntu-22.04"),
    (["--os", "debain-12"], "unknown OS", "debian-12"),
    (["--instance-type", "p5.49xlarge"], "unknown EC2 instance type", "p5.48xlarge"),
    (["--framework", "torch>>2"], "malformed framework spec", None),
    (["--framework", "torch>=2.6+cu128"], "malformed framework spec", None),
    (["--framework", "numpy"], "unsupported framework", "torch"),
    (["--framework", "tensorflow[gpu]"], "unknown extra", None),
    (["--framework", "torch==2.7.1+rocm6"], "unknown torch variant", None),
    (["--framework", "torch", "--framework", "torch>=2"], "given twice", None),
    (["--gpu", "T4", "--gpu-count", "0"], "impossible GPU count 0", None),
    (["--gpu", "T4", "--gpu-count", "99"], "impossible GPU count 99", None),
    (["--gpu-count", "2"], "without a GPU model", None),
    (["--instance-type", "p5.48xlarge", "--gpu-count", "4"], "has 8 GPU(s), not 4", None),
    (["--instance-type", "p5.48xlarge", "--gpu", "A100-80GB"], "has H100-SXM GPUs", None),
    (["--cuda-toolkit", "12.7"], "unknown CUDA toolkit version `12.7`", "12.8"),
    (["--cudnn", "7.6"], "unknown cuDNN version", None),
    (["--python", "three"], "malformed Python version", None),
    (["--driver", "latest"], "malformed driver", None),
    (["--driver", "999"], "unknown driver branch", None),
    (["--torch-variant", "cu999"], "unknown torch variant", "cu128"),
    (["--arch", "riscv64"], "unknown arch", None),
    (["--torch-index", "conda"], "Invalid value", None),
]


@pytest.mark.parametrize(("args", "message", "suggestion"), BAD_INPUTS, ids=[" ".join(a) for a, _, _ in BAD_INPUTS])
def test_bad_input_is_exit_2_one_line(
    args: list[str], message: str, suggestion: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(["resolve", *args], capsys)
    assert code == 2, err
    assert out == ""
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert message in err
    assert "Traceback" not in err
    if suggestion:
        assert suggestion in err


def test_bad_input_json_carries_suggestions(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["resolve", "--gpu", "H100", "--json"], capsys)
    assert code == 2
    doc: dict[str, Any] = json.loads(out)
    assert doc["error"]["code"] == "bad_input"
    assert set(doc["error"]["suggestions"]) >= {"H100-SXM", "H100-PCIe", "H100-NVL"}


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--gpu", "nvidia h100 sxm"], "unknown"),  # not an error: a canonical name with spaces
        (["--gpu", "RTX3090X"], "unknown GPU `RTX3090X`"),
        (["--os", "windows-11"], "unknown OS `windows-11`"),
        (["--framework", "torch=="], "malformed framework spec"),
    ],
)
def test_bad_input_in_a_real_process(args: list[str], needle: str) -> None:
    """The installed entry point, as a user runs it: one line, exit 2, no traceback."""
    proc = run_process("resolve", *args)
    if args == ["--gpu", "nvidia h100 sxm"]:
        assert proc.returncode == 0, proc.stderr
        return
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and needle in proc.stderr
    assert "Traceback" not in proc.stderr


def test_resolve_imports_no_heavy_library() -> None:
    """`provision resolve --json` must not import ansible, boto3, paramiko or torch (nor rich)."""
    code = (
        "import json, sys\n"
        "sys.argv = ['provision', 'resolve', '--gpu', 'H100-SXM', '--gpu-count', '8', '--json']\n"
        "from provision.cli.app import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    rc = e.code\n"
        "heavy = ['ansible', 'ansible_runner', 'boto3', 'botocore', 'paramiko', 'torch', 'rich']\n"
        "sys.stderr.write(json.dumps({'rc': rc, 'loaded': [m for m in heavy if m in sys.modules]}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    assert report == {"rc": 0, "loaded": []}
    assert json.loads(proc.stdout)["ok"] is True


def test_config_stack_feeds_the_request(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "provision.yaml"
    cfg.write_text('stack:\n  frameworks: ["torch==2.13.0+cpu"]\n  driver: none\n')
    code, out, err = run_cli(["resolve", "-c", str(cfg), "--os", "debian-12", "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["stack"]["driver"] is None
    assert doc["stack"]["frameworks"]["torch"] == {
        "version": "2.13.0",
        "variant": "cpu",
        "index_url": "https://download.pytorch.org/whl/cpu",
        "cuda": None,
        "cudnn": None,
    }
    # a flag beats the config
    code, out, _ = run_cli(["resolve", "-c", str(cfg), "--framework", "torch==2.8.0", "--gpu", "L4", "--json"], capsys)
    assert code == 0 and json.loads(out)["stack"]["frameworks"]["torch"]["variant"] == "cu128"


def test_config_with_unknown_key_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "provision.yaml"
    cfg.write_text("stack:\n  framework: [torch]\n")
    code, _, err = run_cli(["resolve", "-c", str(cfg)], capsys)
    assert code == 2 and "stack.frameworks" in err and err.count("\n") == 1


# --- provision matrix ---------------------------------------------------------------------


def test_matrix_torch_variants_on_a10g(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["matrix", "--gpu", "A10G", "--framework", "torch", "--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert doc["gpu"]["name"] == "A10G"
    rows = doc["frameworks"]["torch"]
    assert {"2.8.0", "2.0.1"} <= {r["version"] for r in rows}
    assert all(r["runs"] in ("sass", "compatible", "ptx") for r in rows)  # Ampere runs every torch


def test_matrix_drivers_a_v100_can_use(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["matrix", "--gpu", "V100", "--json"], capsys)
    assert code == 0
    usable = {d["branch"]: d["usable"] for d in json.loads(out)["drivers"]}
    assert usable["580"] and usable["535"] and not usable["595"]
    rows = json.loads(out)["frameworks"]["torch"]
    assert any(r["version"] == "2.15.0" and r["runs"] is None for r in rows)


def test_matrix_default_lists_every_gpu_and_human_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["matrix", "--json"], capsys)
    assert code == 0 and len(json.loads(out)["gpus"]) >= 26
    code, out, _ = run_cli(["matrix", "--instances"], capsys)
    assert code == 0 and "p5.48xlarge" in out


def test_matrix_unknown_gpu_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["matrix", "--gpu", "H1OO-SXM"], capsys)
    assert code == 2 and "H100-SXM" in err


def test_config_install_method_reaches_the_resolver(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "provision.yaml"
    cfg.write_text("install:\n  method: distro\n")
    code, out, err = run_cli(["resolve", "-c", str(cfg), "--gpu", "T4", "--os", "debian-12", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["stack"]["driver"]["install_method"] == "distro"
    code, _, err = run_cli(["resolve", "-c", str(tmp_path / "missing.yaml")], capsys)
    assert code == 2 and "config file not found" in err

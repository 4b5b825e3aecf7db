"""The Slurm files provision generates (provision/fleet/slurm_files.py): pure text, checked here
line by line; the real ``slurmd -G`` reads gres.conf in tests/integration/test_slurm.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

from provision.fleet import slurm_files
from provision.model.facts import ProbedGpu

H100 = ProbedGpu(model="H100-SXM", pci_id="10de:2330")
L4 = ProbedGpu(model="L4", pci_id="10de:27b8")
UNKNOWN = ProbedGpu(model=None, pci_id="10de:ffff")


def test_one_model_is_one_line_with_a_device_range() -> None:
    assert slurm_files.gres_conf("gpu1", [H100] * 8) == "NodeName=gpu1 Name=gpu Type=h100_sxm File=/dev/nvidia[0-7]\n"
    assert slurm_files.gres_count([H100] * 8) == "gpu:h100_sxm:8"


def test_mixed_models_are_one_line_per_run_and_an_unknown_model_has_no_type() -> None:
    assert slurm_files.gres_conf("n", [H100, H100, L4, UNKNOWN]).splitlines() == [
        "NodeName=n Name=gpu Type=h100_sxm File=/dev/nvidia[0-1]",
        "NodeName=n Name=gpu Type=l4 File=/dev/nvidia2",
        "NodeName=n Name=gpu File=/dev/nvidia3",
    ]
    assert slurm_files.gres_count([H100, H100, L4, UNKNOWN]) == "gpu:h100_sxm:2,gpu:l4:1,gpu:1"


def test_a_host_without_gpus_gets_no_gres() -> None:
    assert slurm_files.gres_conf("n", []) == "" and slurm_files.gres_count([]) is None
    lines = slurm_files.slurm_conf_lines("/usr/local/sbin/provision-health-slurm", 60, {"n": []})
    assert "GresTypes=gpu" not in lines


def test_helpers_conf_is_one_feature_per_line() -> None:
    assert slurm_files.helpers_conf("/x/h") == "Feature=provision_verified Helper=/x/h\n"


def test_the_slurm_conf_lines() -> None:
    lines = slurm_files.slurm_conf_lines("/usr/local/sbin/provision-health-slurm", 60, {"gpu1": [H100] * 8})
    assert lines == [
        "HealthCheckProgram=/usr/local/sbin/provision-health-slurm",
        "HealthCheckInterval=60",
        "HealthCheckNodeState=ANY",
        "NodeFeaturesPlugins=node_features/helpers",
        "GresTypes=gpu",
        "# on NodeName=gpu1's line: Gres=gpu:h100_sxm:8",
    ]


def test_the_programs_run_the_health_program_as_written(tmp_path: Path) -> None:
    """Both generated programs run under a real /bin/sh; a stand-in ``health`` package (named as
    such) records its arguments and answers with the exit code it is told."""
    stand_in = tmp_path / "lib" / "health"
    stand_in.mkdir(parents=True)
    (stand_in / "__init__.py").write_text("")
    (stand_in / "__main__.py").write_text(
        "import os, sys\nopen(os.environ['ARGS'], 'w').write(' '.join(sys.argv[1:]))\nsys.exit(int(os.environ['CODE']))\n"
    )
    paths = slurm_files.HealthPaths(
        program_dir=str(tmp_path / "lib"), spec="/etc/provision/health.json", python="python3"
    )
    for name, text in (("hc", slurm_files.health_check_program(paths)), ("feature", slurm_files.feature_helper(paths))):
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o755)
    args = tmp_path / "args"

    def run(name: str, code: int) -> subprocess.CompletedProcess[str]:
        env = {"PATH": "/usr/bin:/bin", "ARGS": str(args), "CODE": str(code)}
        return subprocess.run([str(tmp_path / name)], capture_output=True, text=True, env=env, check=False)

    hc = run("hc", 1)
    assert hc.returncode == 1 and args.read_text() == "--spec /etc/provision/health.json --slurm"
    ok, sick, unknown = run("feature", 0), run("feature", 1), run("feature", 2)
    assert (ok.returncode, ok.stdout) == (0, "provision_verified\n")
    assert (sick.returncode, sick.stdout, unknown.returncode, unknown.stdout) == (1, "", 1, "")
    assert args.read_text() == "--spec /etc/provision/health.json"

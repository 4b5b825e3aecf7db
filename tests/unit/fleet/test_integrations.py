"""`integrations:` in the config, what `up` hands the health role for it, and the check before any
change, whose command runs here through a real /bin/sh (this machine has no slurmd: the very case
it refuses) against folders made for the test."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from provision.config import (
    IntegrationsConfig,
    KubernetesIntegration,
    PrometheusIntegration,
    SlurmIntegration,
    parse_config,
)
from provision.errors import BadInput
from provision.fleet import integrations
from provision.hosts.inventory import HostTarget
from provision.hosts.local import LocalTransport
from provision.model.facts import ProbedGpu
from provision.resources import playbooks_dir
from tests.cli_run import provision

H100 = ProbedGpu("H100-SXM", "10de:2330")


def test_the_config_section_reads_into_typed_values() -> None:
    cfg = parse_config(
        {
            "integrations": {
                "slurm": {"enabled": True, "health_check_interval": 120},
                "prometheus": {"textfile_dir": "/var/lib/prometheus/node-exporter"},
                "kubernetes": {"nfd_features_dir": "/etc/kubernetes/node-feature-discovery/features.d"},
                "export_interval": 30,
            }
        }
    ).integrations
    assert cfg.slurm == SlurmIntegration(enabled=True, health_check_interval=120)
    assert cfg.prometheus.textfile_dir == "/var/lib/prometheus/node-exporter" and cfg.export_interval == 30
    assert parse_config({}).integrations == IntegrationsConfig() and not IntegrationsConfig().exports


@pytest.mark.parametrize(
    ("section", "needle"),
    [
        ({"slurm": {"enabeld": True}}, "`integrations.slurm.enabeld` is not a known key"),
        ({"slurm": {"enabled": "yes"}}, "`integrations.slurm.enabled` must be true or false"),
        ({"prometheus": {"textfile_dir": "var/lib"}}, "must be an absolute path"),
        ({"export_interval": 0}, "`integrations.export_interval` must be a whole number of seconds"),
        ({"grafana": {}}, "`integrations.grafana` is not a known key"),
    ],
)
def test_bad_values_are_one_line_naming_the_key(section: dict[str, object], needle: str) -> None:
    with pytest.raises(BadInput) as caught:
        parse_config({"integrations": section})
    assert needle in str(caught.value)


def test_role_vars_lay_out_slurm_beside_the_program_and_its_files_where_slurmd_reads_them() -> None:
    cfg = IntegrationsConfig(slurm=SlurmIntegration(enabled=True), prometheus=PrometheusIntegration("/tf"))
    got = integrations.role_vars(cfg, [H100, H100])
    files = {f["path"]: f for f in got["health_files"]}
    assert list(files) == [
        integrations.SLURM_PROGRAM,
        integrations.SLURM_HELPER,
        "/etc/slurm/helpers.conf",
        "/etc/slurm/gres.conf",
    ]
    assert (
        files["/etc/slurm/gres.conf"]["content"]
        == f"{integrations.MARK}\nName=gpu Type=h100_sxm File=/dev/nvidia[0-1]\n"
    )
    assert files["/etc/slurm/helpers.conf"]["content"].endswith(f"Helper={integrations.SLURM_HELPER}\n")
    assert (
        files[integrations.SLURM_PROGRAM]["mode"] == "0755"
        and "--slurm" in files[integrations.SLURM_PROGRAM]["content"]
    )
    assert got["health_export_args"] == ["--textfile", "/tf"] and got["health_export_interval"] == 60
    off = integrations.role_vars(IntegrationsConfig(), [H100])
    assert off == {"health_files": [], "health_export_args": [], "health_export_interval": 60}


def test_the_python_side_names_the_roles_own_places() -> None:
    defaults = yaml.safe_load((playbooks_dir() / "roles" / "health" / "defaults" / "main.yml").read_text())
    assert (defaults["health_lib_dir"], defaults["health_spec_file"], defaults["health_python"]) == (
        integrations.LIB_DIR,
        integrations.SPEC_FILE,
        integrations.HEALTH_PYTHON,
    )


def check(cfg: IntegrationsConfig) -> None:
    integrations.check_hosts(
        cfg, [HostTarget(name="here", address="localhost", local=True)], lambda _t: LocalTransport()
    )


def test_the_check_refuses_what_a_host_lacks_and_names_every_problem(tmp_path: Path) -> None:
    slurm_dir = tmp_path / "slurm"
    slurm_dir.mkdir()
    (slurm_dir / "gres.conf").write_text("Name=gpu File=/dev/nvidia0\n")  # the user's own file
    cfg = IntegrationsConfig(
        slurm=SlurmIntegration(enabled=True, config_dir=str(slurm_dir)),
        prometheus=PrometheusIntegration(str(tmp_path / "missing")),
    )
    with pytest.raises(BadInput) as caught:
        check(cfg)
    line = str(caught.value)
    assert line.startswith("here: ") and "nothing was changed" in caught.value.hint
    assert "integrations.slurm: slurmd is not installed here" in line
    assert f"integrations.slurm: {slurm_dir}/gres.conf is not provision's" in line
    assert f"integrations.prometheus.textfile_dir: no folder {tmp_path / 'missing'}" in line
    assert "helpers.conf" not in line  # none there: provision may write it


def test_the_check_passes_files_provision_wrote_and_existing_folders(tmp_path: Path) -> None:
    (tmp_path / "gres.conf").write_text(f"{integrations.MARK}\nName=gpu File=/dev/nvidia0\n")
    check(
        IntegrationsConfig(
            kubernetes=KubernetesIntegration(str(tmp_path)), prometheus=PrometheusIntegration(str(tmp_path))
        )
    )
    assert integrations.check_command(IntegrationsConfig()) == ""  # nothing asked: no command, no connection
    # the Slurm part, where slurmd is (a stand-in slurmd on PATH, named as such)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "slurmd").write_text("#!/bin/sh\n")
    (bin_dir / "slurmd").chmod(0o755)
    cfg = IntegrationsConfig(slurm=SlurmIntegration(enabled=True, config_dir=str(tmp_path)))
    integrations.check_hosts(
        cfg,
        [HostTarget(name="here", address="localhost", local=True)],
        lambda _t: LocalTransport(env={"PATH": f"{bin_dir}:/usr/bin:/bin"}),
    )


@pytest.mark.usefixtures("this_machine")  # one `up --local` at a time across xdist workers
def test_up_refuses_integrations_this_machine_cannot_take_before_any_change(tmp_path: Path) -> None:
    """`up --local` on this machine (no slurmd here): exit 2, one line, no run left behind."""
    config = tmp_path / "provision.yaml"
    config.write_text(
        "stack: {driver: none}\ninstall: {lock_closure: never}\nintegrations: {slurm: {enabled: true}, prometheus: {textfile_dir: /no/such/dir}}\n"
    )
    r = provision("up", "--local", "--yes", "-c", str(config), cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    first = r.stderr.splitlines()[0]
    assert first.startswith("error: ") and "integrations.slurm: slurmd is not installed here" in first, r.stderr
    assert "integrations.prometheus.textfile_dir: no folder /no/such/dir" in first
    runs = tmp_path / ".provision" / "runs"
    assert not runs.exists() or not any(runs.iterdir())

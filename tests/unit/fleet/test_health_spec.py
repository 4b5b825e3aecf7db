"""The health spec the controller builds from a typed lock group, read back by the host program."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from provision.errors import BadInput
from provision.fleet.health_spec import (
    LastVerify,
    group_hash,
    health_spec,
    host_vars,
    installed_change,
    program_digests,
    write_program,
)
from provision.fleet.verify import HostResult, table_row
from provision.hosts.facts import HostFacts, InstalledHealth, NvmlGpu, NvmlInventory
from provision.model.components import COMPONENTS, TORCH_VARIANT
from provision.model.defaults import HEALTH_PROGRAM_DIR, HEALTH_SPEC_FILE
from provision.model.lock import parse_lock
from provision.remote.health import FILES, SOURCES, check
from provision.remote.smoke.verdict import decide
from provision.resources import playbooks_dir
from provision.stack.drift import expected_versions
from tests.support.smoke_records import LOCKED, REFS, h200_record

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "render"


@pytest.mark.parametrize(("os_name", "manager"), [("debian-12", "apt"), ("rhel-9", "dnf")])
def test_the_spec_of_a_locked_group_is_read_by_the_host_program(tmp_path: Path, os_name: str, manager: str) -> None:
    group = parse_lock((GOLDEN / f"{os_name}.lock").read_text()).groups[0]
    at = datetime(2026, 12, 1, 10, 0, tzinfo=timezone.utc)
    spec = health_spec(
        group,
        "0123456789abcdef",
        "/opt/provision/venv",
        probed_gpus=["NVIDIA H100 80GB HBM3"] * group.host.gpu_count,
        nvswitches=4,
        verify=LastVerify("pass", at, max_age_s=7 * 86400),
    )
    path = tmp_path / "health.json"
    path.write_text(json.dumps(spec, indent=2, sort_keys=True))
    doc = check.load_spec(path)
    assert doc == spec and doc["schema"] == check.SCHEMA
    # The lock's own driver package (the pinned one, not the unversioned pinning helper) and manager.
    assert doc["driver"] == {"manager": manager, "package": "nvidia-open"}
    assert group.stack.driver is not None and doc["expected"]["driver"] == group.stack.driver.version
    locked = {c.key for c in COMPONENTS if c.locked} | {TORCH_VARIANT}
    assert set(doc["expected"]) <= locked
    assert doc["expected"] == {k: v for k, v in expected_versions(group).items() if k in locked}
    # the lock starts both services: the fabric manager's unit is the plan's own name for it
    fm = next(s.name for s in group.packages.services if s.role == "fabric_manager") if group.packages else None
    assert doc["fabric_manager"] == fm and fm and doc["persistence"] is True
    assert doc["gpus"]["count"] == group.host.gpu_count == len(doc["gpus"]["models"])
    assert doc["verify"] == {
        "verdict": "pass",
        "at": "2026-12-01T10:00:00+00:00",
        "max_age_s": 604800,
        "gpu": None,
        "figures": {},
    }


def test_the_last_verify_figures_come_from_the_verify_report() -> None:
    """The job's own report (the recorded H200 measurements judged by the job's verdict code):
    the slowest GPU's bf16 GEMM and device-to-device copy, the figures verify's table shows."""
    record = h200_record()
    report = {**record, **decide(record, REFS, LOCKED, allow_cpu=False)}
    at = datetime(2026, 12, 1, 10, 0, tzinfo=timezone.utc)
    last = LastVerify.from_result(HostResult("gpu1", report=report), at)
    assert (last.verdict, last.gpu) == ("pass", "NVIDIA H200")
    assert last.figures == {"gemm_tflops": 742.0, "copy_gbps": 4100.0}
    row = table_row(HostResult("gpu1", report=report))
    assert (row["gemm"], row["bandwidth"]) == ("742.0", "4,100.0")
    # on a host without a GPU the job measures the CPU: the figures say so
    cpu = {**report, "counts": {"torch": 0}, "checks": [{"name": "cpu_gemm_fp32", "value": 0.5, "ok": True}]}
    on_cpu = LastVerify.from_result(HostResult("cpu1", report=cpu), at)
    assert (on_cpu.gpu, on_cpu.figures) == ("CPU", {"gemm_tflops": 0.5})
    assert LastVerify.from_result(HostResult("gone"), at).to_json()["verdict"] == "fail"  # no report


def test_no_fabric_manager_where_the_probe_saw_no_nvswitch() -> None:
    group = parse_lock((GOLDEN / "debian-12.lock").read_text()).groups[0]
    spec = health_spec(group, "h", None, nvswitches=0)
    assert spec["fabric_manager"] is None and spec["verify"] is None and spec["venv"] is None


def test_the_health_role_gets_each_hosts_spec_with_what_its_probe_saw(tmp_path: Path) -> None:
    lock = parse_lock((GOLDEN / "debian-12.lock").read_text())
    group = lock.groups[0]
    names = ["NVIDIA H100 80GB HBM3"] * group.host.gpu_count
    probed = HostFacts(
        nvswitch_count=4,
        nvml=NvmlInventory("nvml", "595.58.03", "13.0", tuple(NvmlGpu(i, n) for i, n in enumerate(names))),
    )
    hosts = list(group.hosts)
    sources = write_program(tmp_path)
    got = host_vars(lock, {hosts[0]: probed}, "/opt/provision/venv", sources)
    assert set(got) == set(hosts)
    mine = got[hosts[0]]
    assert mine["health_spec"] == health_spec(
        group, group_hash(group), "/opt/provision/venv", probed_gpus=names, nvswitches=4
    )
    # the program's files as the host needs them, in the run dir's files/ where Ansible's copy looks
    # a relative src up (versions.py from its one home, provision/model/versions.py)
    assert sorted(mine["health_sources"]) == sorted(FILES)
    for name, src in mine["health_sources"].items():
        assert (tmp_path / "files" / src).read_bytes() == SOURCES[name].read_bytes()
    for host in hosts[1:]:  # planned without a probe (--assume): the models are not compared
        assert got[host]["health_spec"]["gpus"] == {"count": group.host.gpu_count, "models": [], "nvswitches": None}


def test_a_gpu_name_with_a_template_marker_is_refused() -> None:
    lock = parse_lock((GOLDEN / "debian-12.lock").read_text())
    host = lock.groups[0].hosts[0]
    bad = HostFacts(nvml=NvmlInventory("nvml", None, None, (NvmlGpu(0, "{{ lookup('pipe', 'id') }}"),)))
    with pytest.raises(BadInput, match="template marker"):
        host_vars(lock, {host: bad}, "/opt/provision/venv", {})


def _spec() -> dict[str, object]:
    group = parse_lock((GOLDEN / "debian-12.lock").read_text()).groups[0]
    return health_spec(group, group_hash(group), "/opt/provision/venv", probed_gpus=["NVIDIA H100 80GB HBM3"] * 8)


def test_a_host_with_this_runs_health_program_and_spec_needs_nothing() -> None:
    spec = _spec()
    installed = InstalledHealth(json.loads(json.dumps(spec, indent=4, sort_keys=True)), program_digests())
    assert installed_change(installed, spec, {}) is None


def test_what_up_must_change_of_provision_health() -> None:
    """Each way a converged host can lack this run's provision-health is a reason to apply it."""
    spec = _spec()
    current = json.loads(json.dumps(spec))
    files = program_digests()
    assert set(files) == set(FILES) and all(len(d) == 64 for d in files.values())
    cases = {
        "provision-health is not installed": InstalledHealth(None, {}),
        "provision-health is another version": InstalledHealth(current, {**files, "check.py": "0" * 64}),
        f"provision-health has no spec ({HEALTH_SPEC_FILE})": InstalledHealth(None, files),
        "provision-health's spec is of lock 0123456789abcdef": InstalledHealth(
            {**current, "lock_hash": "0123456789abcdef"}, files
        ),
        "provision-health's spec differs from this run's": InstalledHealth({**current, "venv": "/srv/venv"}, files),
    }
    for reason, installed in cases.items():
        assert installed_change(installed, spec, {}) == reason
    missing = {k: v for k, v in files.items() if k != "slurm.py"}  # a program of before a file existed
    assert installed_change(InstalledHealth(current, missing), spec, {}) == "provision-health is another version"


@pytest.mark.parametrize(
    "role_vars",
    [{"health_enabled": False}, {"health_spec_file": "/srv/health.json"}, {"health_lib_dir": "/opt/lib"}],
)
def test_not_compared_where_the_role_is_left_out_or_moved(role_vars: dict[str, object]) -> None:
    """`--set health_enabled=false` installs nothing to compare; other places are not where the
    probe looks: neither is a reason to apply a converged host again."""
    assert installed_change(InstalledHealth(None, {}), _spec(), role_vars) is None
    assert installed_change(None, _spec(), {}) is None  # not probed (an older probe's facts)


def test_the_probed_places_are_the_health_roles_defaults() -> None:
    defaults = yaml.safe_load((playbooks_dir() / "roles" / "health" / "defaults" / "main.yml").read_text())
    assert defaults["health_spec_file"] == HEALTH_SPEC_FILE
    assert f"{defaults['health_lib_dir']}/health" == HEALTH_PROGRAM_DIR

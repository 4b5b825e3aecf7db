"""The health spec the controller builds from a typed lock group, read back by the host program."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from provision.fleet.health_spec import LastVerify, health_spec
from provision.fleet.verify import HostResult, table_row
from provision.model.components import COMPONENTS, TORCH_VARIANT
from provision.model.lock import parse_lock
from provision.remote.health import check
from provision.remote.smoke.verdict import decide
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

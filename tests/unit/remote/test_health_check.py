"""provision-health (provision/remote/health/) against STAND-INS of a host, named as such:

- a stand-in proc tree (``driver/nvidia/version`` in the format both kernel modules print,
  ``sys/kernel/random/boot_id``);
- stand-in ``dpkg-query`` and ``systemctl`` scripts that answer as the real tools do;
- a stand-in kernel log in /dev/kmsg's record format (``prio,seq,usec,flags;message``) with Xid
  lines in the format NVIDIA documents (https://docs.nvidia.com/deploy/xid-errors/);
- the stand-in NVML library (tests/fakenvml, compiled here) for GPUs, ECC, retired pages, row remap;
- a venv holding REAL distributions: iniconfig and distro copied, files and dist-info, from this
  project's own .venv (pip installed them), one file then tampered with to break its RECORD hash.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from datetime import datetime
from typing import Any

import pytest

from provision.remote.health import check, probes
from tests.support.health_host import DRIVER, PROC_VERSION, REPO, cli, copy_version, script

# The keys a spec must have, for the bad-spec cases (each then breaks one).
SPEC_KEYS: dict[str, Any] = {
    "schema": "provision.health/1",
    "lock_hash": "h",
    "expected": {},
    "driver": {},
    "gpus": {"count": 0},
    "python_packages": [],
}
XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
XID_13 = "NVRM: Xid (PCI:0000:5c:00): 13, pid=4242, name=python, Graphics Exception: ESR 0x514648=0x1"


def run(host: dict[str, Any], **kw: Any) -> check.Result:
    return check.run(host["spec"], host["roots"], **kw)


def test_a_host_as_locked_is_healthy(host: dict[str, Any]) -> None:
    out = run(host)
    assert (out.code, out.line()) == (0, "healthy"), out.problems + out.unknown
    assert out.facts["driver_loaded"] == DRIVER and out.facts["driver_installed"] == DRIVER
    assert [g["name"] for g in out.facts["gpus"]] == ["NVIDIA H100 80GB HBM3"] * 2
    assert out.facts["record_files"]["hashed"] == out.facts["record_files"]["listed"] > 10


def test_a_missing_locked_wheel_is_drift_in_one_line(host: dict[str, Any]) -> None:
    host["spec"]["python_packages"].append({"name": "torch", "version": "2.13.0", "sha256": "0" * 64})
    out = run(host)
    assert out.code == 1 and out.line() == "unhealthy: drift torch: locked 2.13.0, found none"


def test_another_version_installed_is_drift(host: dict[str, Any]) -> None:
    host["spec"]["python_packages"][0]["version"] = "0.0.1"
    out = run(host)
    assert out.problems == [f"drift iniconfig: locked 0.0.1, found {copy_version('iniconfig')}"]


def test_a_tampered_file_breaks_its_record_hash(host: dict[str, Any]) -> None:
    target = host["site"] / "distro" / "distro.py"
    target.write_text(target.read_text().replace("def ", "def  ", 1))  # one byte more
    out = run(host)
    assert out.code == 1 and any(p.startswith("distro: distro/distro.py size") for p in out.problems)
    # same size, other bytes: only the hash sees it
    text = target.read_text().replace("def  ", "def ", 1)
    target.write_text(text.replace("import", "IMPORT", 1))
    out = run(host)
    assert out.problems == ["distro: distro/distro.py differs from its RECORD hash"]


def test_hashing_is_spread_over_runs_by_a_byte_budget(host: dict[str, Any]) -> None:
    first = run(host, budget=1)  # one file per run
    assert first.facts["record_files"]["hashed"] == 1
    state = json.loads(host["roots"].state.read_text())
    assert state["record_cursor"] == 1
    assert run(host, budget=1).facts["record_files"]["hashed"] == 1
    assert json.loads(host["roots"].state.read_text())["record_cursor"] == 2


def test_an_xid_is_reported_once_with_its_gpu(host: dict[str, Any]) -> None:
    with host["kmsg"].open("a") as fh:
        fh.write(f"3,3,5000,-;{XID_79}\n4,4,5001,-;{XID_13}\n")
    out = run(host)
    assert out.problems == ["xid 79 on GPU 0"] and out.notes == ["xid 13 on GPU 1"]
    assert run(host).code == 0  # the state file holds the position: not new any more
    with host["kmsg"].open("a") as fh:
        fh.write(f"3,5,9000,-;{XID_79.replace('3b', 'af')}\n")
    assert run(host).problems == ["xid 79 on PCI 0000:af:00"]  # no GPU at that address any more


def test_a_corrupt_state_file_is_read_as_no_state(host: dict[str, Any]) -> None:
    host["roots"].state.parent.mkdir(parents=True)
    host["roots"].state.write_text('{"schema": "provision.health-state/1", "kmsg_seq": "x", "record_cursor": []}')
    with host["kmsg"].open("a") as fh:
        fh.write(f"3,3,5000,-;{XID_79}\n")
    assert run(host).problems == ["xid 79 on GPU 0"]
    assert json.loads(host["roots"].state.read_text())["kmsg_seq"] == 3


def test_after_a_reboot_the_kernel_log_is_read_from_its_start(host: dict[str, Any]) -> None:
    with host["kmsg"].open("a") as fh:
        fh.write(f"3,3,5000,-;{XID_79}\n")
    assert run(host).code == 1 and run(host).code == 0
    (host["proc"] / "sys" / "kernel" / "random" / "boot_id").write_text("another-boot\n")
    assert run(host).problems == ["xid 79 on GPU 0"]


def test_a_kernel_log_device_at_its_end_is_read_as_empty() -> None:
    """A container's /dev/kmsg can be /dev/null (a character device whose read() answers end of
    file, never EAGAIN): the read ends instead of spinning. Run apart, so a regression times out."""
    code = "from pathlib import Path; from provision.remote.health import probes; print(probes.kernel_records(Path('/dev/null')))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, cwd=REPO)
    assert proc.stdout == "([], False)\n", proc.stderr


def test_updated_but_not_loaded_is_a_pending_reboot(host: dict[str, Any]) -> None:
    host["roots"] = check.Roots(
        **{**host["roots"].__dict__, "dpkg_query": script(host["tmp"] / "dq", 'echo "ii |1:600.10.01-0ubuntu1"\n')}
    )
    out = run(host)
    assert out.problems == [
        f"drift driver: locked {DRIVER}, installed 600.10.01",
        f"driver 600.10.01 installed but {DRIVER} loaded: reboot pending",
    ]


def test_no_driver_loaded(host: dict[str, Any]) -> None:
    (host["proc"] / "driver" / "nvidia" / "version").unlink()
    assert "driver not loaded" in run(host).problems


def test_gpu_faults_from_nvml_name_the_gpu(host: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Stand-in NVML: GPU 1 with 3 uncorrectable ECC errors, a pending row remap, persistence off."""
    monkeypatch.setenv("FAKE_NVML_ECC_UNCORRECTED", "0;3")
    monkeypatch.setenv("FAKE_NVML_ROWREMAP", "0,0,0,0;0,1,1,0")
    monkeypatch.setenv("FAKE_NVML_RETIRED_PENDING", "1;0")
    monkeypatch.setenv("FAKE_NVML_PERSISTENCE", "1;0")
    out = run(host)
    assert out.problems == [
        "retired pages pending on GPU 0 (reset the GPU)",
        "ecc 3 uncorrectable errors on GPU 1",
        "row remap pending on GPU 1 (reset the GPU)",
        "persistence mode off on GPU 1",
    ]


def test_a_gpu_gone_is_a_count_problem(host: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NVML_GPUS", "NVIDIA H100 80GB HBM3:80")
    assert run(host).problems == ["gpu count 1, probed 2"]


def test_nvml_not_starting_is_a_problem_only_where_gpus_are_locked(
    host: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fake NVML (a stand-in) failing to start as with no kernel module: a problem on a GPU
    host; on a host whose lock has no driver and whose probe saw no GPU (a CPU test host that kept
    a driver package's libnvidia-ml) a note, and the host is healthy."""
    monkeypatch.setenv("FAKE_NVML_FAIL", "1")
    assert "nvml: Driver Not Loaded" in run(host).problems
    (host["proc"] / "driver" / "nvidia" / "version").unlink()
    spec = host["spec"]
    spec["expected"].pop("driver")
    spec.update(gpus={"count": 0, "models": [], "nvswitches": None}, fabric_manager=None, persistence=False)
    out = run(host)
    assert (out.code, out.problems, out.unknown) == (0, [], [])
    assert "nvml: Driver Not Loaded" in out.notes


def test_no_nvml_library_is_cannot_tell(host: dict[str, Any]) -> None:
    host["roots"] = check.Roots(**{**host["roots"].__dict__, "nvml_library": str(host["tmp"] / "absent.so")})
    out = run(host)
    assert out.code == 2 and out.line() == "unknown: cannot tell GPUs: no NVML library"


def test_fabric_manager_down_where_expected(host: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FM_STATE", "failed")
    assert run(host).problems == ["fabric manager failed"]
    host["spec"]["fabric_manager"] = None
    assert run(host).code == 0


def test_a_failed_verify_and_an_old_one(host: dict[str, Any]) -> None:
    host["spec"]["verify"] = {"verdict": "fail", "at": "2026-12-01T10:00:00+00:00", "max_age_s": 86400}
    now = datetime.fromisoformat("2026-12-04T10:00:00+00:00").timestamp()
    out = run(host, now=now)
    assert out.problems == ["last verify fail", "last verify 3 days old"]
    assert out.facts["verify"] == {"verdict": "fail", "age_s": 3 * 86400, "gpu": None, "figures": {}}


def test_the_verdict_up_wrote_counts_only_for_its_own_lock(host: dict[str, Any]) -> None:
    # the spec as the health role installs it (no verify); `up` writes last-verify.json after its job
    host["spec"]["verify"] = None
    assert run(host).notes == ["never verified"]
    recorded = host["roots"].last_verify
    recorded.parent.mkdir(parents=True, exist_ok=True)
    at = "2026-12-01T10:00:00+00:00"
    doc = {"schema": "provision.last-verify/1", "lock_hash": "0123456789abcdef", "verdict": "fail", "at": at}
    recorded.write_text(json.dumps(doc))
    now = datetime.fromisoformat("2026-12-01T11:00:00+00:00").timestamp()
    out = run(host, now=now)
    assert (out.code, out.problems) == (1, ["last verify fail"])
    assert out.facts["verify"] == {"verdict": "fail", "age_s": 3600, "gpu": None, "figures": {}}
    # a verdict of another lock (the host was applied with a new one since) is not this lock's
    recorded.write_text(json.dumps({**doc, "lock_hash": "fedcba9876543210"}))
    out = run(host, now=now)
    assert out.code == 0 and out.notes == [
        f"{recorded} is of another lock: not verified with this one",
        "never verified",
    ]


def test_a_host_without_an_nvidia_driver_reads_no_kernel_log(host: dict[str, Any]) -> None:
    # the CPU stack's spec (no driver locked, no GPU probed) on a host with no NVIDIA module loaded
    # and a kernel log it may not read (a container's): there is no Xid to tell, so not `unknown`
    host["spec"]["expected"].pop("driver")
    host["spec"]["driver"]["package"] = None
    host["spec"]["gpus"] = {"count": 0, "models": [], "nvswitches": None}
    (host["proc"] / "driver" / "nvidia" / "version").unlink()
    host["kmsg"].unlink()
    host["roots"] = check.Roots(**{**host["roots"].__dict__, "nvml_library": str(host["tmp"] / "absent.so")})
    out = run(host)
    assert (out.code, out.unknown) == (0, []), out.problems + out.unknown
    assert "xid: no NVIDIA driver locked or loaded: no kernel log to read" in out.notes
    # the same host with a driver locked: the unreadable log is `cannot tell`
    host["spec"]["expected"]["driver"] = DRIVER
    assert any(u.startswith(f"xid: kernel log {host['kmsg']} unreadable") for u in run(host).unknown)


def test_the_driver_version_of_both_kernel_modules() -> None:
    lines = {
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.127.05  Tue Oct  8 03:22:07 UTC 2024": "550.127.05",
        PROC_VERSION: DRIVER,
    }
    for text, want in lines.items():
        assert probes._LOADED.search(text + "\n").group(1) == want  # type: ignore[union-attr]


def test_the_program_exits_1_with_one_line_and_json(host: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NVML_ECC_UNCORRECTED", "0;2")
    with host["kmsg"].open("a") as fh:
        fh.write(f"3,3,5000,-;{XID_79}\n")
    host["spec"]["python_packages"].append({"name": "torch", "version": "2.13.0", "sha256": "0" * 64})
    proc = cli(host)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == (
        "unhealthy: ecc 2 uncorrectable errors on GPU 1; xid 79 on GPU 0; drift torch: locked 2.13.0, found none\n"
    )
    doc = json.loads(cli(host, "--json").stdout)  # the Xid was seen by the run before
    assert doc["schema"] == "provision.health-report/1" and doc["exit"] == 1 and doc["status"] == "unhealthy"
    assert doc["problems"] == ["ecc 2 uncorrectable errors on GPU 1", "drift torch: locked 2.13.0, found none"]


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (None, "cannot read the health spec"),
        ("{", "is not JSON"),
        ('{"schema": "x"}', "is not a provision.health/1"),
        (json.dumps({**SPEC_KEYS, "gpus": {"count": -1}}), "gpus.count is not a count"),
        (json.dumps({**SPEC_KEYS, "python_packages": [{"name": "torch"}]}), "python_packages is not a list"),
    ],
)
def test_a_bad_spec_is_exit_2_with_one_line(host: dict[str, Any], content: str | None, why: str) -> None:
    spec = host["tmp"] / "bad.json"
    if content is not None:
        spec.write_text(content)
    proc = cli(host, spec=spec)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ") and why in lines[0]


def test_the_host_files_import_only_the_standard_library() -> None:
    """What is copied to hosts: every file exists, and none imports provision or a third party."""
    from provision.remote.health import FILES, SOURCES

    for name in FILES:
        tree = ast.parse(SOURCES[name].read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                tops = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                tops = {str(node.module).split(".")[0]}
            else:
                continue
            assert tops <= sys.stdlib_module_names | {"__future__"}, (name, tops)

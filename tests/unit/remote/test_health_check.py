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
import ctypes
import importlib.util
import json
import subprocess
import sys
from datetime import datetime
from typing import Any

import pytest

from provision.remote.health import check, nvml, probes
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


def test_an_xid_names_its_gpu_and_an_application_xid_is_a_note_once(host: dict[str, Any]) -> None:
    with host["kmsg"].open("a") as fh:
        fh.write(f"3,3,5000,-;{XID_79}\n4,4,5001,-;{XID_13}\n")
    out = run(host)
    assert out.problems == ["xid 79 on GPU 0"]
    assert out.notes == ["xid 13 on GPU 1", f"xid problems stay until {check.CLEARS}"]
    again = run(host)  # the state holds the log's position: 13 (RESTART_APP) is not new any more
    assert again.problems == ["xid 79 on GPU 0"] and "xid 13 on GPU 1" not in again.notes
    assert again.facts["xids"] == [] and again.facts["xids_held"] == [{"xid": 79, "pci": "0000:3b:00", "seq": 3}]
    with host["kmsg"].open("a") as fh:  # the same Xid again on that GPU: still one problem
        fh.write(f"3,5,9000,-;{XID_79}\n3,6,9001,-;{XID_79.replace('3b', 'af')}\n")
    # no GPU at 0000:af:00 in NVML any more: named by its address
    assert run(host).problems == ["xid 79 on GPU 0", "xid 79 on PCI 0000:af:00"]


def test_a_gpu_xid_stays_a_problem_until_a_reboot(host: dict[str, Any]) -> None:
    """Xid 79 (RESTART_BM in NVIDIA's catalog) seen once: every later run of that boot is
    unhealthy, though the log has nothing new; after a reboot (another boot id, the new boot's
    log without it) the host is healthy again."""
    with host["kmsg"].open("a") as fh:
        fh.write(f"3,3,5000,-;{XID_79}\n")
    assert [run(host).line() for _ in range(3)] == ["unhealthy: xid 79 on GPU 0"] * 3
    (host["proc"] / "sys" / "kernel" / "random" / "boot_id").write_text("another-boot\n")
    host["kmsg"].write_text("6,1,100,-;Linux version 6.1.0\n")
    assert run(host).code == 0
    assert json.loads(host["roots"].state.read_text())["xids"] == []


def test_clear_xids_is_the_admins_acknowledgement(host: dict[str, Any]) -> None:
    with host["kmsg"].open("a") as fh:
        fh.write(f"3,3,5000,-;{XID_79}\n")
    assert cli(host).returncode == 1 and cli(host).returncode == 1
    cleared = cli(host, "--clear-xids")
    assert (cleared.returncode, cleared.stdout) == (0, "cleared: xid 79 on PCI 0000:3b:00\n"), cleared.stderr
    done = cli(host)  # the log's position was kept: the same line is not read as new
    assert (done.returncode, done.stdout) == (0, "healthy\n"), done.stdout
    assert cli(host, "--clear-xids").stdout == f"no Xid held in {host['roots'].state}\n"
    with host["kmsg"].open("a") as fh:  # a new one after the acknowledgement counts again
        fh.write(f"3,4,6000,-;{XID_79}\n")
    assert cli(host).stdout == "unhealthy: xid 79 on GPU 0\n"


def test_clear_xids_that_cannot_write_the_state_is_one_line(
    host: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not root: the state (root's, 0600) cannot be rewritten. These tests run as root, whom
    permissions do not stop, so the refusal is a STAND-IN: the write raises what the kernel would."""
    state = host["roots"].state
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"schema": check.STATE, "xids": [{"xid": 79, "pci": "0000:3b:00"}]}))

    def refused(path: Any, doc: Any) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(check, "write_state", refused)
    assert check.main(["--clear-xids", "--state", str(state)]) == 2
    said = capsys.readouterr()
    assert said.out == ""
    assert said.err == f"error: cannot rewrite {state}: Permission denied (run --clear-xids as root)\n"
    assert check.held_xids(json.loads(state.read_text())) == [{"xid": 79, "pci": "0000:3b:00", "seq": None}]


def test_a_state_of_the_version_before_loads(host: dict[str, Any]) -> None:
    """The state file of the version without held Xids (boot_id, kmsg_seq, record_cursor) is read
    as it was: its position kept, no Xid held; an entry that is not an Xid is dropped."""
    with host["kmsg"].open("a") as fh:
        fh.write(f"3,3,5000,-;{XID_79}\n")
    host["roots"].state.parent.mkdir(parents=True)
    boot = (host["proc"] / "sys" / "kernel" / "random" / "boot_id").read_text().strip()
    old = {"schema": "provision.health-state/1", "boot_id": boot, "kmsg_seq": 3, "record_cursor": 0}
    host["roots"].state.write_text(json.dumps(old))
    assert run(host).code == 0  # seen by the old version's run: not new, and nothing held
    host["roots"].state.write_text(json.dumps({**old, "xids": [{"xid": "79"}, 5, {"xid": 48, "pci": "0000:5c:00"}]}))
    assert run(host).problems == ["xid 48 on GPU 1"]


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
    assert run(host).code == 1
    # another boot whose log holds the Xid again (from its start: sequence numbers restart)
    (host["proc"] / "sys" / "kernel" / "random" / "boot_id").write_text("another-boot\n")
    out = run(host)
    assert out.problems == ["xid 79 on GPU 0"] and out.facts["xids"] == [{"seq": 3, "xid": 79, "pci": "0000:3b:00"}]


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
    doc = json.loads(cli(host, "--json").stdout)  # the Xid was seen by the run before: still held
    assert doc["schema"] == "provision.health-report/1" and doc["exit"] == 1 and doc["status"] == "unhealthy"
    assert doc["problems"] == [
        "ecc 2 uncorrectable errors on GPU 1",
        "xid 79 on GPU 0",
        "drift torch: locked 2.13.0, found none",
    ]
    assert doc["facts"]["xids"] == [] and doc["facts"]["xids_held"][0]["xid"] == 79


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


def test_the_pci_structure_is_the_probes_own() -> None:
    """nvml.py's nvmlPciInfo_t and the probe snippet's are declared twice (the snippet is sent as one
    text, nothing beside it): the same fields, types and order, or one of them reads garbage."""
    path = REPO / "provision" / "remote" / "snippets" / "nvml_query.py"
    spec = importlib.util.spec_from_file_location("nvml_query_snippet", path)
    assert spec is not None and spec.loader is not None
    snippet = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(snippet)
    assert nvml._Pci._fields_ == snippet._Pci._fields_
    assert ctypes.sizeof(nvml._Pci) == ctypes.sizeof(snippet._Pci) == 68

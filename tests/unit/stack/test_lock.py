"""provision.lock: deterministic JSON, schema-versioned, round-trips, finds hosts, reports drift."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provision.errors import BadInput
from provision.files import read_lock, write_lock
from provision.matrix import load
from provision.stack.drift import cudnn_number, drift
from provision.stack.lock import SCHEMA, Lock, build_lock, dumps_lock, find_group, lock_group
from provision.stack.request import HostSpec, StackRequest
from provision.stack.resolve import resolve


def _lock() -> Lock:
    h100 = resolve(
        StackRequest.build(frameworks=["torch==2.8.0"], driver="580"),
        HostSpec.describe(gpu="H100-SXM", gpu_count=8, os="ubuntu-22.04"),
    )
    cpu = resolve(StackRequest.build(frameworks=["torch==2.13.0+cpu"]), HostSpec.describe(os="debian-12"))
    return build_lock(
        [
            lock_group("h100x8", ["gpu1", "gpu2"], h100),
            lock_group("cpu", ["th1"], cpu),
        ]
    )


def test_lock_file_format(tmp_path: Path) -> None:
    path = write_lock(_lock(), tmp_path / "provision.lock")
    text = path.read_text()
    assert text.endswith("}\n") and "\n  " in text  # indent 2, trailing newline
    doc = json.loads(text)
    assert list(doc) == ["schema", "knowledge", "groups"]
    assert doc["schema"] == SCHEMA == "provision.lock/2"
    assert doc["knowledge"] == {"version": load().version, "sha256": load().sha256}
    g = doc["groups"][0]
    assert list(g) == ["name", "hosts", "host", "stack", "packages", "python_packages", "warnings", "reasons"]
    assert g["stack"]["fabric_manager"] == {"version": g["stack"]["driver"]["version"]}
    assert g["packages"]["pip"]["requirements"] == ["torch==2.8.0+cu128"]
    assert list(g["packages"]) == ["manager", "repositories", "module_streams", "install", "holds", "services", "pip"]
    assert [(i["name"], i["version"]) for i in g["packages"]["install"] if i["role"] == "nvidia_driver"] == [
        ("nvidia-open-580", "580.178.04-*")
    ]


def test_lock_is_fsynced_before_the_rename_and_its_folder_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A power loss right after `plan` must not leave a zero-length lock: the data reaches the disk
    before the rename, and the rename (an entry in the folder) before write_lock returns."""
    import os
    import stat

    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync file")
        real_fsync(fd)

    def replace(src: str, dst: object) -> None:
        events.append("rename")
        real_replace(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    path = write_lock(_lock(), tmp_path / "provision.lock")
    assert events == ["fsync file", "rename", "fsync dir"]
    assert read_lock(path).to_json() == _lock().to_json()
    assert [p.name for p in tmp_path.iterdir()] == ["provision.lock"]  # no temporary file left


def test_same_resolution_writes_the_same_bytes_and_round_trips(tmp_path: Path) -> None:
    a = dumps_lock(_lock())
    assert a == dumps_lock(_lock())
    path = write_lock(_lock(), tmp_path / "x" / "provision.lock")
    again = read_lock(path)
    assert dumps_lock(again) == a


def test_resolve_json_host_and_stack_are_copied_exactly() -> None:
    res = resolve(StackRequest.build(frameworks=["torch==2.8.0"]), HostSpec.describe(gpu="L4"))
    group = lock_group("l4", ["a"], res)
    assert group.host.to_json() == res.to_json()["host"] and group.stack.to_json() == res.to_json()["stack"]


def test_find_group() -> None:
    lock = _lock()
    assert find_group(lock, "gpu2") is lock.groups[0]
    assert find_group(lock, "nope") is None
    assert lock.group_for("th1").name == "cpu"
    with pytest.raises(BadInput, match="not in the lock"):
        lock.group_for("nope")


def test_missing_or_unparsable_lock_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="no lock file") as err:
        read_lock(tmp_path / "provision.lock")
    assert err.value.exit_code == 2
    bad = tmp_path / "bad.lock"
    bad.write_text("{not json")
    with pytest.raises(BadInput, match="not valid JSON"):
        read_lock(bad)
    bad.write_text(json.dumps({"schema": "provision.lock/99", "knowledge": {}, "groups": []}))
    with pytest.raises(BadInput, match=r"not a provision\.lock/2 file"):
        read_lock(bad)
    bad.write_text(json.dumps({"schema": SCHEMA, "knowledge": {}, "groups": [{"name": "x"}]}))
    with pytest.raises(BadInput, match="lacks"):
        read_lock(bad)


def test_a_lock_of_schema_1_is_refused_in_one_line_saying_to_regenerate(tmp_path: Path) -> None:
    old = tmp_path / "provision.lock"
    doc = _lock().to_json()
    doc["schema"] = "provision.lock/1"
    old.write_text(json.dumps(doc))
    with pytest.raises(BadInput) as err:
        read_lock(old)
    line = err.value.one_line()
    assert "\n" not in line and err.value.exit_code == 2
    assert "provision.lock/1" in line and "regenerate it with `provision plan`" in line


@pytest.mark.parametrize(("version", "number"), [("9.10.2.21", "91002"), ("9.1.0.70", "90100"), ("8.9.2.26", "8902")])
def test_cudnn_number_matches_torch_backends(version: str, number: str) -> None:
    assert cudnn_number(version) == number


def test_drift_against_observed_versions() -> None:
    group = _lock().groups[0]
    same = {"driver": "580.178.04", "torch": "2.8.0+cu128", "torch_cuda": "12.8", "cudnn": "91002"}
    assert drift(group, same) == []
    found = drift(
        group,
        {"driver": "575.57.08", "torch": "2.7.1+cu126", "torch_cuda": "12.6", "cudnn": "90501", "fabric_manager": None},
    )
    items = {d.item: (d.expected, d.observed) for d in found}
    assert items["driver"] == ("580.178.04", "575.57.08")
    assert items["torch"] == ("2.8.0", "2.7.1+cu126")
    assert items["torch_variant"] == ("cu128", "cu126")
    assert items["torch_cuda"] == ("12.8", "12.6")
    assert items["cudnn"] == ("91002", "90501")
    assert items["fabric_manager"] == ("580.178.04", None)
    assert "driver: locked 580.178.04, found 575.57.08" in [str(d) for d in found]
    assert all(set(d.to_json()) == {"item", "expected", "observed"} for d in found)


def test_drift_ignores_what_was_not_observed_and_cpu_stacks() -> None:
    cpu = _lock().groups[1]
    assert drift(cpu, {"torch": "2.13.0+cpu", "torch_cuda": None, "cudnn": None}) == []
    assert drift(cpu, {}) == []
    assert [d.item for d in drift(cpu, {"torch": "2.13.0+cu130"})] == ["torch_variant"]
    assert [d.item for d in drift(cpu, {"python": "3.12.1"})] == ["python"]

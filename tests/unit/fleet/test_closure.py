"""The lock's wheel closure: real pip resolutions against PyPI (``network``) and against a local
wheelhouse of real wheel files (no network), the lock's ``python_packages`` and the role's lists."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from provision.ansible.role_vars import locked_installs
from provision.config import parse_config
from provision.errors import BadInput, OperationFailed, Unreachable, Unsatisfiable
from provision.files import read_lock
from provision.fleet import closure
from provision.fleet.cache.wheels import WheelSet
from provision.model import ResolvedHost, Stack
from provision.stack.lock import Lock, LockGroup, PythonPackage, dumps_lock, parse_lock
from tests.cli_run import provision
from tests.wheels import make_wheel

PYPI = "https://pypi.org/simple"
# the py3-none-any wheel of requests 2.32.3 on PyPI: a file's hash never changes once uploaded
REQUESTS_2_32_3 = "70761cfe03c773ceb22aa2f671b4757976145175cdfca038c02654d061d6dcc6"


@pytest.fixture
def wheelhouse(tmp_path: Path) -> Path:
    house = tmp_path / "wheelhouse"
    house.mkdir()
    make_wheel(house, "alpha", "1.0", ("beta>=2",))
    make_wheel(house, "beta", "1.0")
    make_wheel(house, "beta", "2.0", ("gamma",))
    make_wheel(house, "gamma", "0.5")
    return house


def local(house: Path, *pins: str) -> WheelSet:
    """What the frameworks role's variables say with ``--set frameworks_no_index=true`` and a find-links folder."""
    return WheelSet("3.11", "x86_64", ((pins, ""),), find_links=(str(house),), no_index=True)


def test_a_local_wheelhouse_gives_every_distribution_with_its_files_sha256(tmp_path: Path, wheelhouse: Path) -> None:
    got = closure.resolve(local(wheelhouse, "alpha==1.0"), "g", tmp_path / "cache")
    assert [(p.name, p.version, p.index) for p in got] == [
        ("alpha", "1.0", ""),
        ("beta", "2.0", ""),
        ("gamma", "0.5", ""),
    ]
    for p in got:
        file = wheelhouse / f"{p.name}-{p.version}-py3-none-any.whl"
        assert p.sha256 == hashlib.sha256(file.read_bytes()).hexdigest()
        assert p.url == file.as_uri()


def test_the_closure_is_cached_per_input_and_a_changed_wheelhouse_is_a_new_input(
    tmp_path: Path, wheelhouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    first = closure.resolve(local(wheelhouse, "alpha==1.0"), "g", cache)
    runs: list[object] = []
    real = closure.pip_dry_run
    monkeypatch.setattr(closure, "pip_dry_run", lambda *a, **k: runs.append(a) or real(*a, **k))
    assert closure.resolve(local(wheelhouse, "alpha==1.0"), "g", cache) == first
    assert runs == []  # from the cache
    make_wheel(wheelhouse, "gamma", "0.6")  # a new wheel on the "mirror": resolved again
    again = closure.resolve(local(wheelhouse, "alpha==1.0"), "g", cache)
    assert len(runs) == 1
    assert ("gamma", "0.6") in [(p.name, p.version) for p in again]


def test_pins_pip_cannot_satisfy_together_are_unsatisfiable_naming_them(tmp_path: Path, wheelhouse: Path) -> None:
    with pytest.raises(Unsatisfiable) as exc:
        closure.resolve(local(wheelhouse, "alpha==1.0", "beta==1.0"), "h100", tmp_path / "cache")
    assert exc.value.exit_code == 3
    assert "group h100" in exc.value.message and "alpha==1.0 and beta==1.0" in exc.value.message
    assert "\n" not in exc.value.message


def test_a_pin_without_a_wheel_is_unsatisfiable(tmp_path: Path, wheelhouse: Path) -> None:
    with pytest.raises(Unsatisfiable, match=re.escape("no wheel for delta==1.0")):
        closure.resolve(local(wheelhouse, "delta==1.0"), "g", tmp_path / "cache")


def test_an_index_pip_cannot_reach_is_one_line_saying_so(tmp_path: Path) -> None:
    ws = WheelSet("3.11", "x86_64", ((("alpha==1.0",), "http://127.0.0.1:9/simple"),))
    with pytest.raises(Unreachable) as exc:
        closure.resolve(ws, "g", tmp_path / "cache")
    assert "cannot reach 127.0.0.1:9 to lock the wheel closure of alpha==1.0" in exc.value.message
    assert "install.lock_closure: never" in (exc.value.hint or "")
    assert not (tmp_path / "cache").exists()  # nothing cached from a failure


@pytest.mark.network
def test_requests_closure_from_pypi_for_cp311_manylinux_x86_64(tmp_path: Path) -> None:
    ws = WheelSet("3.11", "x86_64", ((("requests==2.32.3",), PYPI),))
    got = {p.name: p for p in closure.resolve(ws, "g", tmp_path / "cache")}
    assert set(got) == {"certifi", "charset-normalizer", "idna", "requests", "urllib3"}
    assert got["requests"].sha256 == REQUESTS_2_32_3
    assert got["requests"].url.endswith("/requests-2.32.3-py3-none-any.whl")
    assert all(p.index == PYPI for p in got.values())
    # charset-normalizer is compiled: the wheel taken is the hosts' (cp311, manylinux <= 2.28, x86_64)
    assert "cp311-cp311-" in got["charset-normalizer"].url and "x86_64" in got["charset-normalizer"].url


@pytest.mark.network
def test_a_conflict_on_pypi_is_exit_3_naming_the_packages(tmp_path: Path) -> None:
    ws = WheelSet("3.11", "x86_64", ((("requests==2.32.3", "urllib3==1.20"), PYPI),))
    with pytest.raises(Unsatisfiable) as exc:
        closure.resolve(ws, "g", tmp_path / "cache")
    assert "requests==2.32.3 and urllib3==1.20" in exc.value.message


def test_the_index_of_a_file_is_the_one_that_served_it() -> None:
    torch = "https://download.pytorch.org/whl/cu128"
    on_torch = "https://download.pytorch.org/whl/cu128/torch-2.8.0%2Bcu128-cp311-cp311-manylinux_2_28_x86_64.whl"
    on_pypi = "https://files.pythonhosted.org/packages/aa/bb/filelock-3.18.0-py3-none-any.whl"
    assert closure._index_of(on_torch, [torch, PYPI]) == torch
    assert closure._index_of(on_pypi, [torch, PYPI]) == PYPI
    assert closure._index_of("file:///w/x-1-py3-none-any.whl", [PYPI]) == ""
    assert closure._index_of(on_pypi, []) == ""


def test_an_index_without_hashes_cannot_be_locked() -> None:
    item = {"metadata": {"name": "x", "version": "1"}, "download_info": {"url": "https://m.example/x-1.whl"}}
    with pytest.raises(OperationFailed, match=re.escape("no sha256 for https://m.example/x-1.whl")):
        closure._package(item, ["https://m.example/simple"], "group g")


def test_assume_plans_leave_the_closure_out_unless_always() -> None:
    assert closure.wants_closure("auto", applied=True)
    assert not closure.wants_closure("auto", applied=False)
    assert closure.wants_closure("always", applied=False)
    assert not closure.wants_closure("never", applied=True)


def _pkg(name: str, version: str, index: str = PYPI) -> PythonPackage:
    sha = hashlib.sha256(f"{name}{version}".encode()).hexdigest()
    return PythonPackage(name, version, sha, f"https://files.example/{name}-{version}.whl", index)


def _lock(packages: list[PythonPackage]) -> Lock:
    group = LockGroup(
        "g",
        ["a"],
        ResolvedHost.from_json({"os": "ubuntu-22.04", "arch": "x86_64"}),
        Stack.from_json({}),
        python_packages=packages,
    )
    return Lock({"version": "1", "sha256": "x"}, [group])


def test_the_lock_keeps_the_closure_sorted_and_reads_it_back() -> None:
    pkgs = [_pkg("urllib3", "2.5.0"), _pkg("Charset_Normalizer", "3.4.2"), _pkg("idna", "3.10")]
    text = dumps_lock(_lock(pkgs))
    doc = json.loads(text)
    assert [p["name"] for p in doc["groups"][0]["python_packages"]] == ["Charset_Normalizer", "idna", "urllib3"]
    assert list(doc["groups"][0]) == [
        "name",
        "hosts",
        "host",
        "stack",
        "packages",
        "python_packages",
        "warnings",
        "reasons",
    ]
    back = parse_lock(text)
    assert sorted(back.groups[0].python_packages, key=lambda p: p.name.lower()) == sorted(
        pkgs, key=lambda p: p.name.lower()
    )
    assert dumps_lock(back) == text


def test_a_lock_from_before_the_closure_reads_as_none() -> None:
    doc = json.loads(dumps_lock(_lock([])))
    del doc["groups"][0]["python_packages"]
    assert parse_lock(json.dumps(doc)).groups[0].python_packages == []


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("sha256", "abc", "malformed sha256"),
        ("name", "x; rm -rf /", "malformed name"),
        ("version", "", "malformed version"),
    ],
)
def test_a_malformed_closure_entry_is_bad_input(field: str, value: str, words: str) -> None:
    doc = json.loads(dumps_lock(_lock([_pkg("idna", "3.10")])))
    doc["groups"][0]["python_packages"][0][field] = value
    with pytest.raises(BadInput, match=words):
        parse_lock(json.dumps(doc))


def test_the_role_gets_one_hashed_requirement_list_per_index_and_a_mirror_for_pypi() -> None:
    torch = "https://download.pytorch.org/whl/cu128"
    pkgs = [_pkg("torch", "2.8.0+cu128", torch), _pkg("filelock", "3.18.0"), _pkg("local", "1.0", "")]
    got = locked_installs(pkgs)
    assert [e["index_url"] for e in got] == ["", torch, PYPI]
    assert got[1]["requirements"] == [f"torch==2.8.0+cu128 --hash=sha256:{pkgs[0].sha256}"]
    mirrored = locked_installs(pkgs, "https://mirror.example/simple")
    assert [e["index_url"] for e in mirrored] == ["", torch, "https://mirror.example/simple"]


def _plan(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return provision("plan", "--assume", "os=debian-12,python=3.11,name=a", *args, cwd=cwd)


def _config(tmp_path: Path, house: Path, closure_setting: str, *frameworks: str) -> None:
    (tmp_path / "provision.yaml").write_text(
        json.dumps(
            {
                "stack": {"frameworks": list(frameworks)},
                "install": {"lock_closure": closure_setting, "pip": {"find_links": [str(house)]}},
            }
        )
    )


def test_plan_locks_the_closure_from_the_wheelhouse_the_hosts_install_from(tmp_path: Path) -> None:
    """The test hosts' way: `--set frameworks_no_index=true` and a find-links wheelhouse; the lock's
    closure comes from that same folder, and the role gets it as hashed requirement lines."""
    house = tmp_path / "house"
    house.mkdir()
    make_wheel(house, "torch", "2.13.0+cpu", ("filelock", "typing_extensions>=4"))
    make_wheel(house, "filelock", "3.18.0")
    make_wheel(house, "typing_extensions", "4.14.0")
    _config(tmp_path, house, "always", "torch==2.13.0+cpu")
    r = _plan(tmp_path, "-c", "provision.yaml", "--out", "run", "--json", "--set", "frameworks_no_index=true")
    assert r.returncode == 0, r.stderr
    [group] = json.loads(r.stdout)["groups"]
    got = {p["name"]: p for p in group["python_packages"]}
    assert {n: p["version"] for n, p in got.items()} == {
        "filelock": "3.18.0",
        "torch": "2.13.0+cpu",
        "typing_extensions": "4.14.0",
    }
    torch = house / "torch-2.13.0+cpu-py3-none-any.whl"
    assert got["torch"]["sha256"] == hashlib.sha256(torch.read_bytes()).hexdigest()
    assert read_lock(tmp_path / "provision.lock").groups[0].to_json()["python_packages"] == group["python_packages"]
    text = next((tmp_path / "run" / "group_vars").glob("cpu_*.yml")).read_text()
    assert f"- torch==2.13.0+cpu --hash=sha256:{got['torch']['sha256']}" in text
    human = _plan(tmp_path, "-c", "provision.yaml", "--out", "run", "--set", "frameworks_no_index=true")
    assert human.returncode == 0 and "+ 3 wheels by sha256 (the lock's python_packages)" in human.stdout


def test_plan_refuses_a_conflict_with_exit_3_and_writes_nothing(tmp_path: Path) -> None:
    house = tmp_path / "house"
    house.mkdir()
    make_wheel(house, "torch", "2.13.0+cpu", ("filelock>=4",))
    make_wheel(house, "filelock", "3.18.0")
    _config(tmp_path, house, "always", "torch==2.13.0+cpu")
    r = _plan(tmp_path, "-c", "provision.yaml", "--out", "run", "--set", "frameworks_no_index=true")
    assert r.returncode == 3, r.stderr
    assert "no wheel" in r.stderr and "filelock>=4" in r.stderr and len(r.stderr.strip().splitlines()) <= 2
    assert not (tmp_path / "provision.lock").exists() and not (tmp_path / "run").exists()


def test_an_index_pip_only_warns_about_still_fails_the_closure(tmp_path: Path, wheelhouse: Path) -> None:
    """pip resolves from the find-links folder and warns that the index is down: the hosts, which
    would try that index, might get other wheels, so the lock is not written from half the sources."""
    ws = WheelSet("3.11", "x86_64", ((("alpha==1.0",), "http://127.0.0.1:9/simple"),), find_links=(str(wheelhouse),))
    with pytest.raises(Unreachable, match=re.escape("cannot reach 127.0.0.1:9")):
        closure.resolve(ws, "g", tmp_path / "cache")


def test_an_assumed_plan_reaches_no_index_by_default(tmp_path: Path) -> None:
    _config(tmp_path, tmp_path / "no-such-folder", "auto", "torch==2.13.0+cpu")
    r = _plan(tmp_path, "-c", "provision.yaml", "--out", "run", "--set", "frameworks_no_index=true")
    assert r.returncode == 0, r.stderr
    assert read_lock(tmp_path / "provision.lock").groups[0].python_packages == []


def _fill(ws: WheelSet, dest: Path, work: Path) -> list[subprocess.CompletedProcess[str]]:
    return [subprocess.run(c, capture_output=True, text=True) for c in ws.download_commands(sys.executable, dest, work)]


def test_the_wheelhouse_fills_with_exactly_the_locked_files_and_refuses_a_changed_one(
    tmp_path: Path, wheelhouse: Path
) -> None:
    locked = locked_installs(closure.resolve(local(wheelhouse, "alpha==1.0"), "g", tmp_path / "cache"))
    data = {
        "frameworks_installs": [{"packages": ["alpha==1.0"], "index_url": ""}],
        "frameworks_locked": locked,
        "frameworks_find_links": [str(wheelhouse)],
        "frameworks_no_index": True,
    }
    ws = WheelSet.from_group_vars(data, python="3.11", arch="x86_64")
    assert ws is not None and ws.locked == (("", tuple(locked[0]["requirements"])),)
    dest = tmp_path / "house-cache"
    assert [r.returncode for r in _fill(ws, dest, tmp_path / "reqs")] == [0]
    assert sorted(p.name for p in dest.iterdir()) == [
        "alpha-1.0-py3-none-any.whl",
        "beta-2.0-py3-none-any.whl",  # the locked beta, not every beta the source has
        "gamma-0.5-py3-none-any.whl",
    ]
    # the mirror's beta 2.0 changes under the same name: the lock's hash no longer matches
    make_wheel(wheelhouse, "beta", "2.0", ("gamma", "evil"))
    fresh = tmp_path / "house-2"
    [r] = _fill(ws, fresh, tmp_path / "reqs")
    assert r.returncode != 0 and "THESE PACKAGES DO NOT MATCH THE HASHES" in r.stderr


def test_install_lock_closure_is_a_choice_of_the_config() -> None:
    assert parse_config({}).install.lock_closure == "auto"
    assert parse_config({"install": {"lock_closure": "Never"}}).install.lock_closure == "never"
    with pytest.raises(BadInput, match=re.escape("install.lock_closure` must be one of auto, always, never")):
        parse_config({"install": {"lock_closure": True}})


def test_a_damaged_cache_entry_is_resolved_again(tmp_path: Path, wheelhouse: Path) -> None:
    cache = tmp_path / "cache"
    first = closure.resolve(local(wheelhouse, "alpha==1.0"), "g", cache)
    [entry] = (cache / "closure").iterdir()
    doc = json.loads(entry.read_text())
    doc["packages"][0]["sha256"] = "not-a-hash"
    entry.write_text(json.dumps(doc))
    assert closure.resolve(local(wheelhouse, "alpha==1.0"), "g", cache) == first

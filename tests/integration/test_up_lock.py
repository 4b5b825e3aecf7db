"""plan -> lock -> `up --lock` on the SSH test hosts (Debian 12, no GPU, the CPU torch stack).

A lock planned for another OS and GPU under a test host's name is refused before anything on the
host changes. Then `plan` with a stack flag over the config and a directory inventory (the hosts in
one file, their connection settings in group_vars/, as Ansible users keep them) writes a lock with
the wheel closure, and `up --lock` applies it as it is, with a config whose stack could not even be
resolved (the lock decides, nothing is resolved again): every host passes and holds exactly the
lock's closure (`pip freeze`). Last, `provision rollback` on one host (issue 30): after a lock
with another closure, back to that lock, file by file.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from provision.files import read_lock, write_lock
from provision.fleet.health_spec import group_hash
from provision.matrix import load
from provision.model.lock import Lock
from tests.cli_run import provision
from tests.hosts import harness
from tests.integration import roles_harness as rh
from tests.integration.up_harness import run_up, up_args
from tests.support.locks import plus_uv, uv_wheel

pytestmark = pytest.mark.slow  # installs torch on every host


def _plan(cwd: Path, *args: str) -> dict[str, Any]:
    r = provision("plan", "--json", *args, cwd=cwd, timeout=600)
    assert r.returncode == 0, r.stderr
    doc: dict[str, Any] = json.loads(r.stdout)
    return doc


def test_up_applies_the_planned_lock_and_refuses_one_for_another_host(
    testhosts: harness.HostSet, wheelhouse: Path, tmp_path: Path
) -> None:
    config = rh.cpu_torch_config(tmp_path, testhosts, wheelhouse)
    first = testhosts.hosts[0]
    runs = tmp_path / ".provision" / "runs"
    # fresh hosts: every host must change below, whatever an earlier module's `up` left there (the
    # test once relied on test_up_fleet, before it in the suite, removing its venvs)
    rh.unprovision(testhosts, testhosts.hosts)

    # a lock for an 8 x H100 Ubuntu 22.04 machine, named like the first test host
    _plan(
        tmp_path,
        "--assume",
        f"os=ubuntu-22.04,gpu=H100-SXM:8,name={first.name}",
        "--out",
        "h100",
        "--lock",
        "h100.lock",
    )
    before = rh.host_snapshot(testhosts, first)
    rc, doc = run_up(tmp_path, up_args(testhosts, config, "--lock", "h100.lock", "--limit", first.name))
    assert rc == 2 and doc["ok"] is False and doc["error"]["code"] == "bad_input", doc
    message = doc["error"]["message"]
    assert message.startswith(f"host {first.name} does not match lock group h100_sxm_x8_ubuntu_22_04: "), message
    assert "os debian-12, locked ubuntu-22.04" in message and "gpu none, locked H100-SXM" in message
    assert rh.host_snapshot(testhosts, first) == before  # same packages, no /opt/provision venv
    assert not runs.exists() or not any(runs.iterdir())  # no run was kept
    # the other hosts of the inventory are not in that lock: refused before any contact
    rc, doc = run_up(tmp_path, up_args(testhosts, config, "--lock", "h100.lock"))
    assert rc == 2 and "is not in the lock" in doc["error"]["message"], doc

    # plan for the hosts themselves (probed), then apply exactly that lock. The config's stack asks
    # for a torch that does not exist: resolving it would fail (exit 3), so the flag must win for
    # plan, and up --lock must not resolve at all.
    unsatisfiable = tmp_path / "unsatisfiable.yaml"
    unsatisfiable.write_text(config.read_text().replace(f"{harness.TORCH_CPU}+cpu", "torch==0.0.1"))
    assert "torch==0.0.1" in unsatisfiable.read_text()
    inventory = _directory_inventory(testhosts.inventory, tmp_path / "inventory")
    planned = _plan(
        tmp_path,
        "-i",
        str(inventory),
        "-F",
        str(testhosts.ssh_config),
        "-c",
        str(unsatisfiable),
        "--framework",
        f"{harness.TORCH_CPU}+cpu",
        "--set",
        "frameworks_no_index=true",
        "--out",
        "planned",
    )
    lock = read_lock(tmp_path / "planned" / "provision.lock")
    assert sorted(h for g in lock.groups for h in g.hosts) == sorted(h.name for h in testhosts.hosts)
    assert [g["name"] for g in planned["groups"]] == [g.name for g in lock.groups]
    assert lock.groups[0].python_packages, "the plan locked no wheel closure"
    # applied to two of the four hosts the lock names (a lock's hosts applied to all at once is
    # test_up's fleet test; each fresh torch venv here costs about 20 s of the two cores)
    applied_to = testhosts.hosts[:2]
    limit = ",".join(h.name for h in applied_to)
    try:
        rc, doc = run_up(
            tmp_path, up_args(testhosts, unsatisfiable, "--lock", "planned/provision.lock", "--limit", limit)
        )
        assert rc == 0 and doc["ok"] is True, doc
        assert {h["host"]: h["verdict"] for h in doc["hosts"]} == {h.name: "pass" for h in applied_to}
        assert all(h["changed"] > 0 for h in doc["hosts"]), doc
        applied = read_lock(runs / doc["run"] / "provision.lock")
        # the run's lock is the planned one for the hosts it applied to (--limit narrows the hosts)
        names = {h.name for h in applied_to}
        assert [g.to_json() for g in applied.groups] == [
            {**g.to_json(), "hosts": [h for h in g.hosts if h in names]} for g in lock.groups
        ]
        assert applied.knowledge == lock.knowledge
        torch = rh.ssh(testhosts, first, "/opt/provision/venv/bin/python -c 'import torch; print(torch.__version__)'")
        assert torch.strip() == lock.groups[0].stack.frameworks["torch"].version + "+cpu"
        for host in applied_to:  # exactly the lock's closure, nothing resolved on the host
            assert rh.installed_closure(testhosts, host) == rh.locked_closure(
                [p.to_json() for p in lock.groups[0].python_packages]
            )
        _roll_back_after_a_lock_with_another_closure(testhosts, unsatisfiable, first, tmp_path, doc["run"])
    finally:
        rh.unprovision(testhosts, testhosts.hosts)


# Every distribution in the venv, file by file: the sha256 of each file its RECORD lists, read from
# the file on disk (so a file changed since the install shows), byte-compiled caches aside (pip and
# uv write them at install time, they are not the wheel's files), keyed by the .dist-info folder.
_VENV_FILES = r"""
import base64, hashlib, json, pathlib, sysconfig
site = pathlib.Path(sysconfig.get_path("purelib"))
out = {}
for info in sorted(site.glob("*.dist-info")):
    files = {}
    for line in (info / "RECORD").read_text().splitlines():
        path = line.rsplit(",", 2)[0]
        if not path or path.endswith(".pyc") or path == f"{info.name}/RECORD":
            continue
        f = (site / path).resolve()
        files[path] = base64.urlsafe_b64encode(hashlib.sha256(f.read_bytes()).digest()).rstrip(b"=").decode() if f.exists() else None
    out[info.name] = files
print(json.dumps(out, sort_keys=True))
"""


def _venv_files(testhosts: harness.HostSet, host: harness.TestHost) -> dict[str, dict[str, str | None]]:
    out = rh.ssh(testhosts, host, f"/opt/provision/venv/bin/python - <<'EOF'\n{_VENV_FILES}\nEOF")
    files: dict[str, dict[str, str | None]] = json.loads(out)
    return files


def _roll_back_after_a_lock_with_another_closure(
    testhosts: harness.HostSet, config: Path, host: harness.TestHost, tmp_path: Path, run_a: str
) -> None:
    """Issue 30: lock A applied and passing (the run above), then lock B, whose wheel closure is A's
    plus one distribution more (uv, its pinned wheel in the wheelhouse: the cheapest real
    difference there), applied and passing on one host; `provision rollback` puts that host back
    on A: its venv holds A's closure again file by file (B's extra distribution removed), verify
    passes, and `status` says it runs A, rolled back from B."""
    runs = tmp_path / ".provision" / "runs"
    lock_a = read_lock(runs / run_a / "provision.lock")
    files_a = _venv_files(testhosts, host)
    sp = load().t.standalone_python
    assert sp is not None
    [group_a] = [g for g in lock_a.groups if host.name in g.hosts]
    # the URL B records for it is a copy (the hosts install it from find-links by name and hash):
    # removed below, B's uv is in no source any more
    recorded = tmp_path / "recorded" / uv_wheel().name
    recorded.parent.mkdir()
    shutil.copy(uv_wheel(), recorded)
    group_b = plus_uv(group_a, [host.name], recorded.as_uri())
    write_lock(Lock(lock_a.knowledge, [group_b]), tmp_path / "b.lock")
    hash_a, hash_b = group_hash(group_a), group_hash(group_b)

    rc, doc = run_up(tmp_path, up_args(testhosts, config, "--from-lock", "b.lock", "--limit", host.name))
    assert rc == 0 and [(h["host"], h["verdict"]) for h in doc["hosts"]] == [(host.name, "pass")], doc
    files_b = _venv_files(testhosts, host)
    assert files_b.keys() - files_a.keys() == {f"uv-{sp.uv}.dist-info"}, files_b.keys() ^ files_a.keys()

    rollback = [*up_args(testhosts, config, "--limit", host.name)]
    rollback[rollback.index("up")] = "rollback"
    rc, doc = run_up(tmp_path, rollback)
    assert rc == 0 and [(h["host"], h["verdict"]) for h in doc["hosts"]] == [(host.name, "pass")], doc
    assert doc["rollback"] == [{"host": host.name, "from": hash_b, "to": hash_a, "run": run_a}], doc
    assert _venv_files(testhosts, host) == files_a  # A's closure, file by file; uv is gone
    report = json.loads((runs / doc["run"] / "report.json").read_text())
    [detail] = report["details"]
    assert (detail["lock_hash"], detail["rolled_back_from"]) == (hash_a, hash_b)

    status = provision("status", "--json", cwd=tmp_path)
    [row] = [h for h in json.loads(status.stdout)["hosts"] if h["host"] == host.name]
    assert (row["lock_hash"], row["rolled_back_from"], row["verdict"]) == (hash_a, hash_b, "pass"), row
    assert row["rollback"] == {"possible": True, "lock_hash": hash_b, "run": row["rollback"]["run"]}, row

    # B's uv gone from every source (its recorded URL, a config whose find-links and fleet cache
    # lack it): `rollback --to B` is refused naming it, before any change on the host
    recorded.unlink()
    gone = tmp_path / "gone"
    (gone / "links").mkdir(parents=True)
    bare = gone / "provision.yaml"
    text = re.sub(r"find_links: \[[^]]*\]", f"find_links: ['{gone / 'links'}']", config.read_text())
    bare.write_text(text.replace("install: {", f"install: {{cache_dir: '{gone / 'cache'}', ", 1))
    assert str(gone / "links") in bare.read_text() and "cache_dir" in bare.read_text()
    to_b = [*up_args(testhosts, bare, "--limit", host.name), "--to", hash_b]
    to_b[to_b.index("up")] = "rollback"
    kept = sorted(runs.iterdir())
    rc, doc = run_up(tmp_path, to_b)
    assert rc == 2 and doc["error"]["code"] == "bad_input", doc
    message = doc["error"]["message"]
    assert f"the wheel uv=={sp.uv}" in message and recorded.as_uri() in message, message
    assert _venv_files(testhosts, host) == files_a and sorted(runs.iterdir()) == kept  # nothing changed, no run


def _directory_inventory(ini: Path, folder: Path) -> Path:
    """The test hosts' INI inventory as a folder: the host lines in hosts.ini, the group's
    connection settings in group_vars/testhosts.yml (the form Ansible users keep)."""
    hosts, _, group_vars = ini.read_text().partition("[testhosts:vars]")
    (folder / "group_vars").mkdir(parents=True)
    (folder / "hosts.ini").write_text(hosts)
    settings = {}
    for line in filter(None, (ln.strip() for ln in group_vars.splitlines())):
        key, _, value = line.partition("=")
        settings[key.strip()] = value.strip().strip("'")
    (folder / "group_vars" / "testhosts.yml").write_text(json.dumps(settings, indent=2) + "\n")
    return folder


# The Debian archive's second suite for the proof below: bookworm-updates, through the test hosts'
# proxy (tests/hosts/testhosts.sh lets deb.debian.org through); the hosts' base lists bookworm only.
_UPDATES = "deb http://deb.debian.org/debian bookworm-updates main\n"
_UPDATES_LIST = "/etc/apt/sources.list.d/provision-test-bookworm-updates.list"
_PROOF_LABEL = "apt_rollback_proof"


def _package_plan_play(host: str, package: str, version: str) -> list[dict[str, Any]]:
    """The package_plan role alone, as nvidia_driver/cuda_toolkit/... include it for their part of
    the lock's package plan: ``package`` at exactly ``version``, held."""
    return [
        {
            "name": "The package plan of one lock",
            "hosts": host,
            "become": True,
            "gather_facts": True,  # ansible_pkg_mgr picks apt.yml
            "tasks": [
                {
                    "name": "Install and hold the plan's packages",
                    "ansible.builtin.include_role": {"name": "package_plan"},
                    "vars": {
                        "package_plan_label": _PROOF_LABEL,
                        "package_plan_packages": [{"name": package, "version": version}],
                        "package_plan_holds": [package],
                    },
                }
            ],
        }
    ]


def _dpkg(testhosts: harness.HostSet, host: harness.TestHost, package: str) -> tuple[str, str]:
    """(installed version, selection): dpkg-query's ${Version} and the first word of ${Status}."""
    out = rh.ssh(testhosts, host, f"dpkg-query -W -f '${{Version}} ${{Status}}' {package}")
    version, selection = out.split()[:2]
    return version, selection


def test_rollback_downgrades_a_real_debian_package_with_its_hold(testhosts: harness.HostSet, tmp_path: Path) -> None:
    """Issue 30, the package path of a rollback: a real Debian package at two versions in the real
    archive (tzdata: one in bookworm, another in bookworm-updates; read from apt, not written
    here), each pinned by a lock's package plan and applied by the package_plan role over real
    SSH with real apt, as `provision rollback` applies the old lock's plan: lock A's version,
    then lock B's (the other one), then A's again (the rollback): each time exactly that version
    is installed and held. Not through `provision up`: the CPU test stack runs no role that
    installs packages (those are the NVIDIA roles, whose packages the hosts' archive lacks; the
    stand-in repository covers them in test_roles)."""
    host = testhosts.hosts[-1]
    package = "tzdata"  # in every Debian base system, small, depends on debconf only
    before = _dpkg(testhosts, host, package)[0]
    rh.ssh(testhosts, host, f"printf %s {rh.quote(_UPDATES)} > {_UPDATES_LIST} && apt-get update -q >/dev/null")
    try:
        listed = rh.ssh(testhosts, host, f"apt-cache madison {package}").splitlines()
        first, second = sorted({line.split("|")[1].strip() for line in listed})
        assert first != second and len(listed) == 2, f"the archive no longer has two versions of {package}: {listed}"
        # dpkg's order, not the text's (dpkg --compare-versions, dpkg(1))
        lower = rh.ssh(
            testhosts, host, f"dpkg --compare-versions {rh.quote(first)} lt {rh.quote(second)} && echo lt", check=False
        )
        older, newer = (first, second) if lower.strip() == "lt" else (second, first)
        run = rh.render(
            tmp_path / "run", testhosts, host, rh.lock_group("cpu", [host.name], os="debian-12", frameworks=[])
        )
        for step, version in (("a", older), ("b", newer), ("rollback", older)):
            (run / "site.yml").write_text(json.dumps(_package_plan_play(host.name, package, version)))
            out = rh.apply(run, host.name)
            assert out.rc == 0 and out.failed == 0, (step, out.output[-3000:])
            assert _dpkg(testhosts, host, package) == (version, "hold"), step
        again = rh.apply(run, host.name)  # the rolled-back plan once more: nothing to change
        assert again.rc == 0 and again.changed == 0, again.output[-3000:]
        # and apt is not even asked: dpkg-query showed the plan installed (package_plan's fast path)
        assert again.package_installs() == ["skipping"], again.output[-3000:]
    finally:
        rh.ssh(
            testhosts,
            host,
            f"rm -f {_UPDATES_LIST} /var/lib/provision/packages/{_PROOF_LABEL}.json; apt-mark unhold {package} >/dev/null;"
            f" apt-get update -q >/dev/null; apt-get install -y -q --allow-downgrades {package}={before} >/dev/null",
        )
